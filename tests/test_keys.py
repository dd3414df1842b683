"""The total order over keys, order tags and the native-order shortcut (shuffle.keys)."""

from __future__ import annotations

import collections
import datetime
import enum
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shuffle.keys import (
    MIXED,
    NanKeyError,
    combined_order,
    is_key,
    order_tag,
    plain_key,
    refuse_nan_keys,
    sort_keys,
    total_order_key,
)

# -- total order ---------------------------------------------------------------------------------------------


def test_total_order_ranks_types() -> None:
    keys = [b"b", (1,), "a", 2, None, True, 1.5, (), b"", "", False, -3]
    assert sorted(keys, key=total_order_key) == [None, -3, False, True, 1.5, 2, "", "a", b"", b"b", (), (1,)]


def test_total_order_docstring_example() -> None:
    keys = [3, "a", None, (1, "x"), 2.5, True, False]
    assert sorted(keys, key=total_order_key) == [None, False, True, 2.5, 3, "a", (1, "x")]


def test_bool_ranks_with_numbers_as_its_equal() -> None:
    # True == 1 and False == 0 are one key in a reducer's hash map, so a merge from disk must group them too.
    assert total_order_key(True) == total_order_key(1) == total_order_key(1.0)
    assert total_order_key(False) == total_order_key(0)
    assert total_order_key(-math.inf) < total_order_key(False) < total_order_key(0.5) < total_order_key(True)
    assert total_order_key((True, "a")) == total_order_key((1, "a"))
    assert order_tag([1, True, 2.5]) == order_tag([1]) == "n"
    assert order_tag([(True, "a")]) == order_tag([(1, "a")])


def test_ints_and_floats_compare_by_value() -> None:
    assert sorted([3, 2.5, -1, 0.0, 10**20, 1e19], key=total_order_key) == [-1, 0.0, 2.5, 3, 1e19, 10**20]
    assert total_order_key(1) == total_order_key(1.0)


def test_str_by_code_point_and_bytes_after_str() -> None:
    keys = ["é", "z", "Z", "a", "\U0001f600"]
    assert sorted(keys, key=total_order_key) == ["Z", "a", "z", "é", "\U0001f600"]
    assert total_order_key("\U0010ffff") < total_order_key(b"")
    assert total_order_key(b"\x00") < total_order_key(b"\x00\x00") < total_order_key(b"\x01")


def test_tuples_compare_element_wise() -> None:
    keys = [(1, "b"), (1, "a"), (0, "z", None), (1,), ("a",), (None, 5), (True, 0), (1, "a", b"")]
    assert sorted(keys, key=total_order_key) == [
        (None, 5),
        (0, "z", None),
        (1,),
        (True, 0),
        (1, "a"),
        (1, "a", b""),
        (1, "b"),
        ("a",),
    ]


def test_nested_tuples() -> None:
    keys = [((2,), "a"), ((1, 2), "b"), ((1,), "c"), (("x",), None)]
    assert sorted(keys, key=total_order_key) == [((1,), "c"), ((1, 2), "b"), ((2,), "a"), (("x",), None)]


def test_tuples_sort_after_every_scalar() -> None:
    for scalar in (None, True, 10**30, math.inf, "\U0010ffff", b"\xff" * 10):
        assert total_order_key(scalar) < total_order_key(())


def test_lists_are_ordered_as_tuples() -> None:
    assert total_order_key([1, "a"]) == total_order_key((1, "a"))
    assert total_order_key([[1], 2]) == total_order_key(((1,), 2))
    keys: list[Any] = [[2], (1, "x"), [1], ("a",)]
    assert sorted(keys, key=total_order_key) == [[1], (1, "x"), [2], ("a",)]


@pytest.mark.parametrize(
    "key, type_name",
    [
        ({"a": 1}, "dict"),
        ({1}, "set"),
        (object(), "object"),
        (frozenset(), "frozenset"),
        (1j, "complex"),
        (bytearray(b"x"), "bytearray"),
    ],
)
def test_unsupported_key_type_raises_clear_type_error(key: Any, type_name: str) -> None:
    with pytest.raises(TypeError, match=f"of type {type_name} is not a msgpack-able key") as info:
        total_order_key(key)
    assert repr(key) in str(info.value)
    assert "None, bool, number, str, bytes" in str(info.value)


def test_unsupported_type_inside_tuple_names_the_part() -> None:
    with pytest.raises(TypeError, match="of type set is not a msgpack-able key"):
        total_order_key((1, ("a", {2})))


@pytest.mark.parametrize("keys", [[{1: 2}, "a"], [("a", 1), ("b", {3})], ["a", object()], [1, 2, 1j]])
def test_order_tag_and_sort_keys_reject_unsupported_types(keys: list[Any]) -> None:
    with pytest.raises(TypeError, match="is not a msgpack-able key"):
        order_tag(keys)
    with pytest.raises(TypeError, match="is not a msgpack-able key"):
        sort_keys(keys)


# -- order tags ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "keys, tag",
    [
        (["b", "a", ""], "s"),
        ([1, 2.5, -3], "n"),
        ([1.5], "n"),
        ([True, False], "n"),
        ([b"x", b""], "y"),
        ([("a", 1), ("b", 2.5)], "(sn)"),
        ([(("a",), 1)], "((s)n)"),
        ([(), ()], "()"),
        ([(True, b"x")], "(ny)"),
        ([], "empty"),
        (iter(["a", "b"]), "s"),
        ((x for x in [1, 2]), "n"),
    ],
)
def test_order_tag_shared_signature(keys: Any, tag: str) -> None:
    assert order_tag(keys) == tag


@pytest.mark.parametrize(
    "keys",
    [
        ["a", 1],
        ["a", b"a"],
        [("a", 1), ("a", "b")],
        [("a",), ("a", "b")],  # tuples of different lengths
        [(1,), 1],
        [None],  # None < None fails natively
        [None, None],
        [(None, 1), (None, 2)],
        [(1, (None,))],
        ["a", None],
    ],
)
def test_order_tag_mixed(keys: list[Any]) -> None:
    assert order_tag(keys) == MIXED


def test_combined_order() -> None:
    assert combined_order([]) is None
    assert combined_order(["s"]) is None
    assert combined_order(["s", "s", "s"]) is None
    assert combined_order(["empty", "s", "empty"]) is None
    assert combined_order(["empty", "empty"]) is None
    assert combined_order(iter(["(sn)", "(sn)"])) is None
    assert combined_order(["s", "n"]) is total_order_key
    assert combined_order(["s", "empty", "n"]) is total_order_key
    assert combined_order([MIXED]) is total_order_key
    assert combined_order([MIXED, MIXED]) is total_order_key
    assert combined_order(["(sn)", "(ss)"]) is total_order_key


def test_sort_keys_mixed_and_native() -> None:
    assert sort_keys(["b", "a"]) == (["a", "b"], "s")
    assert sort_keys([2, 1.5, -1]) == ([-1, 1.5, 2], "n")
    assert sort_keys([]) == ([], "empty")
    assert sort_keys(["a", 1, None, (1,), b"x", True]) == ([None, True, 1, "a", b"x", (1,)], MIXED)
    assert sort_keys([(None, 2), (None, 1)]) == ([(None, 1), (None, 2)], MIXED)


def test_sort_keys_accepts_lists_mixed_with_tuples() -> None:
    # Lists are ordered as tuples: [[2], (1,)] has one signature "(n)", so it must still sort.
    keys: list[Any] = [[2], (1,)]
    assert sort_keys(keys)[0] == [(1,), [2]]


# -- property: sort_keys gives the total order, and native order agrees whenever the tag is not mixed --------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.binary(max_size=5),
)
_keys = st.recursive(_scalars, lambda inner: st.tuples(inner, inner) | st.tuples(inner), max_leaves=4)
# Lists whose keys are likely to share a signature, so the native path is exercised too.
_homogeneous = st.one_of(
    st.lists(st.text(max_size=4)),
    st.lists(st.integers() | st.floats(allow_nan=False)),
    st.lists(st.tuples(st.text(max_size=3), st.integers())),
    st.lists(st.tuples(st.booleans(), st.binary(max_size=3), st.tuples(st.floats(allow_nan=False)))),
)


def _is_sorted(keys: list[Any]) -> bool:
    ordered = [total_order_key(key) for key in keys]
    return all(a <= b for a, b in zip(ordered, ordered[1:], strict=False))


@settings(max_examples=150, deadline=None)
@given(st.lists(_keys, max_size=12) | _homogeneous)
def test_sort_keys_is_the_total_order(keys: list[Any]) -> None:
    result, tag = sort_keys(list(keys))
    assert _is_sorted(result)
    assert sorted(map(repr, result)) == sorted(map(repr, keys))
    assert tag == order_tag(keys)
    if tag != MIXED:
        assert result == sorted(keys)
        # Native order and total order agree on these keys (equal keys may be distinct objects: 1 and 1.0).
        by_total_order = sorted(keys, key=total_order_key)
        assert [total_order_key(k) for k in result] == [total_order_key(k) for k in by_total_order]


def test_partition_hash_of_none_is_the_same_in_every_interpreter() -> None:
    # hash(None) is None's address before Python 3.12: two workers on two hosts would send a None key (or a tuple
    # holding one) to different reducers. The default partition hashes it by value.
    import os
    import subprocess
    import sys

    from shuffle.keys import NONE_HASH, partition_hash, partitions_of

    code = "from shuffle.keys import partition_hash as h; print(h(None), h(('a', (None, 1))), h('a'), h((1, 'b')))"
    environment = {**os.environ, "PYTHONHASHSEED": "0"}
    printed = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment, check=True).stdout
        for _ in range(3)
    }
    assert len(printed) == 1, printed
    assert partition_hash(None) == NONE_HASH
    assert partition_hash(("a", (1, "b"))) == hash(("a", (1, "b"))), "keys without None hash as hash() does"
    keys = [None, ("a", None), "x", 3, (1, "b"), ("c", (1, None))]
    assert partitions_of(keys, 7) == [partition_hash(key) % 7 for key in keys]
    assert partitions_of([("a", 1), ("b", (2, 3))], 7) == [hash(key) % 7 for key in [("a", 1), ("b", (2, 3))]]
    assert partitions_of(["x", 3, 2.5], 7) == [hash(key) % 7 for key in ["x", 3, 2.5]]


@pytest.mark.parametrize(
    "keys",
    [[1.0, math.nan], [2, math.nan, True], [("a", math.nan)], [("a", (1, math.nan))], ["a", 1, math.nan], [[math.nan]]],
)
def test_a_nan_key_is_refused(keys: list[Any]) -> None:
    """NaN keys never grouped (NaN equals nothing, and hashes by identity: each went to a reducer of its own
    choosing) and broke the sorted order of every key of their run (``2.5`` came out before ``0.5``)."""
    for tag in (None, order_tag(keys)):
        with pytest.raises(NanKeyError, match="float NaN, which cannot be a key"):
            refuse_nan_keys(keys, tag)


@pytest.mark.parametrize("keys", [[1.0, math.inf, -math.inf, 3], ["nan", "a"], [("a", 1.5), ("b", 2)], [None, b"x"]])
def test_keys_without_nan_pass(keys: list[Any]) -> None:
    for tag in (None, order_tag(keys)):
        refuse_nan_keys(keys, tag)


# -- plain keys ----------------------------------------------------------------------------------------------


class _Color(enum.IntEnum):
    RED = 1


class _Size(enum.StrEnum):
    SMALL = "s"


class _Mode(str, enum.Enum):  # noqa: UP042 (the mixin that StrEnum is not: str(member) is "_Mode.FAST")
    FAST = "f"


class _Folded(str):
    """A str comparing without case: ``_Folded("A")`` and ``_Folded("a")`` are one key, but "A" and "a" two."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and self.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.lower())


_Point = collections.namedtuple("_Point", "x y")


@pytest.mark.parametrize(
    ("key", "plain"),
    [
        (_Color.RED, 1),
        (enum.IntFlag("Flag", "A B").B, 2),
        (_Size.SMALL, "s"),
        (_Mode.FAST, "f"),
        (("a", (_Color.RED, None)), ("a", (1, None))),
        (_Point(1, _Color.RED), (1, 1)),
        (("a", 2.5, b"x", True), ("a", 2.5, b"x", True)),
    ],
)
def test_a_key_of_a_subclass_of_a_key_type_is_its_plain_value(key: Any, plain: Any) -> None:
    """What the shuffle sends for an IntEnum member... (msgpack's base type): the same key, of the exact types
    that have a place in the order, at any depth."""
    got = plain_key(key)
    assert got == plain and repr(got) == repr(plain), got
    assert is_key(key) and hash(got) == hash(key)
    sort_keys([got, "b", 0])


@pytest.mark.parametrize(
    "key",
    [datetime.date(2020, 1, 2), frozenset({1}), ("a", datetime.date(2020, 1, 2)), _Folded("A"), ("x", _Folded("A"))],
)
def test_a_key_of_another_type_has_no_plain_value(key: Any) -> None:
    """Another type has no place in the order; nor has a subclass comparing its own way (two of its keys the map
    kept apart could be one plain value)."""
    assert not is_key(key)
    with pytest.raises(TypeError, match="is not a msgpack-able key"):
        plain_key(key)
