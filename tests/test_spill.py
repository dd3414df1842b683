"""Run bytes (shuffle.runs) and spill files (shuffle.spill): round trips, streaming and corruption."""

from __future__ import annotations

import itertools
import random
import struct
from operator import itemgetter
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shuffle import codec
from shuffle.flow import merge_spills
from shuffle.keys import order_tag, sort_keys
from shuffle.runs import (
    BLOCK_BYTES,
    FlatRunEncoder,
    GroupedRunEncoder,
    RunWriter,
    UnencodableRecordError,
    block_groups,
    encode_grouped_run,
    encode_run,
    is_grouped,
    iter_blocks,
    iter_run,
    iter_run_file,
    iter_run_file_blocks,
    iter_run_file_groups,
    iter_stored_blocks,
)
from shuffle.spill import MAGIC, CorruptSpillError, SpillFile, SpillIndexEntry, SpillWriteError, write_spill


def _as_wire(value: Any) -> Any:
    """What a value looks like after a msgpack round trip: lists become tuples (recursively)."""
    if isinstance(value, (list, tuple)):
        return tuple(_as_wire(item) for item in value)
    if isinstance(value, dict):
        return {_as_wire(k): _as_wire(v) for k, v in value.items()}
    return value


_int64 = st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.integers()  # msgpack's range, and beyond it
_scalar_values = st.one_of(
    st.none(), st.booleans(), _int64, st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8)
)
_values = st.recursive(
    _scalar_values,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers(-5, 5), inner, max_size=2)
    ),
    max_leaves=6,
)
_key_scalars = st.one_of(
    st.none(), st.booleans(), _int64, st.floats(allow_nan=False), st.text(max_size=6), st.binary(max_size=4)
)
_keys = st.one_of(
    st.lists(st.text(max_size=6), max_size=30),
    st.lists(_int64 | st.floats(allow_nan=False), max_size=30),
    st.lists(st.recursive(_key_scalars, lambda inner: st.tuples(inner, inner), max_leaves=3), max_size=30),
)


def _sorted_records(keys: list[Any], data: st.DataObject) -> tuple[list[Any], list[Any]]:
    """Sorted keys (duplicates kept) and one random value per key."""
    ordered, _ = sort_keys(list(dict.fromkeys(keys)))
    counts = {key: keys.count(key) for key in ordered}
    out_keys = [key for key in ordered for _ in range(counts[key])]
    values = data.draw(st.lists(_values, min_size=len(out_keys), max_size=len(out_keys)))
    return out_keys, values


# -- runs ----------------------------------------------------------------------------------------------------


def test_empty_run_is_zero_bytes() -> None:
    assert encode_run([], []) == b""
    assert list(iter_run(b"")) == []
    assert list(iter_blocks(b"")) == []
    assert list(iter_run(memoryview(b""))) == []


def test_run_round_trip_simple() -> None:
    keys = ["a", "a", "b", "ü", "\U0001f600"]
    values = [1, None, [1, [2, "x"]], {"k": (1.5, b"\x00")}, -(2**63)]
    data = encode_run(keys, values)
    assert list(iter_run(data)) == [
        ("a", 1),
        ("a", None),
        ("b", (1, (2, "x"))),
        ("ü", {"k": (1.5, b"\x00")}),
        ("\U0001f600", -(2**63)),
    ]
    assert list(iter_run(memoryview(data))) == list(iter_run(data))


def test_small_run_is_one_block_and_large_run_is_several() -> None:
    keys = list(range(10))
    assert len(list(iter_blocks(encode_run(keys, keys)))) == 1
    blocks = list(iter_blocks(encode_run(keys, keys, block_records=3)))
    assert [len(block_keys) for block_keys, _ in blocks] == [3, 3, 3, 1]
    assert [len(block_values) for _, block_values in blocks] == [3, 3, 3, 1]
    assert list(iter_run(encode_run(keys, keys, block_records=3))) == [(k, k) for k in keys]
    # exactly block_records records: still one block
    assert len(list(iter_blocks(encode_run(keys, keys, block_records=10)))) == 1
    assert len(list(iter_blocks(encode_run(keys, keys, block_records=1)))) == 10


def _stored_block_bytes(data: bytes) -> list[int]:
    """The encoded size of each block of run bytes."""
    return [len(codec.packb(list(block))) for block in iter_stored_blocks(data)]


@pytest.mark.parametrize("grouped", [False, True])
def test_blocks_of_large_values_are_cut_by_bytes(tmp_path: Path, grouped: bool) -> None:
    """A block holds about BLOCK_BYTES of large values, not BLOCK_RECORDS of them (a reader holds one block at a
    time); a value larger than BLOCK_BYTES is a block of its own. Flat, grouped, and through a RunWriter."""
    sizes = [BLOCK_BYTES // 5, BLOCK_BYTES // 3, 2 * BLOCK_BYTES, 100, BLOCK_BYTES // 7] * 6
    pairs = sorted((index % 3, bytes([index]) * size) for index, size in enumerate(sizes))
    keys, values = [key for key, _ in pairs], [value for _, value in pairs]
    if grouped:
        items = [(key, [v for _, v in group]) for key, group in itertools.groupby(pairs, key=itemgetter(0))]
        data = encode_grouped_run([key for key, _ in items], [group for _, group in items])
    else:
        data = encode_run(keys, values)
    writer = RunWriter(tmp_path / "run")
    writer.add_pairs(pairs)
    writer.close()
    for run in (data, (tmp_path / "run").read_bytes()):
        assert list(iter_run(run)) == pairs
        blocks = _stored_block_bytes(run)
        assert len(blocks) > 1
        # A block over BLOCK_BYTES holds a single value (the 2 MiB ones, with their key and framing).
        assert all(size <= BLOCK_BYTES or size < 2 * BLOCK_BYTES + 64 for size in blocks)
        assert sum(size > BLOCK_BYTES for size in blocks) == sizes.count(2 * BLOCK_BYTES)
    small = list(range(5000))
    assert len(_stored_block_bytes(encode_run(small, small))) == 1  # small pairs: cut by records only


def test_ints_of_any_size_round_trip_in_keys_values_and_states() -> None:
    """msgpack stops at 64 bits; a Sum of large counts or a big-int key must still cross the shuffle."""
    big = [2**64, -(2**63) - 1, 3**200, -(7**90), 2**64 - 1, -(2**63), 0]
    keys = sorted(big)
    values = [(value, [value, "x"]) for value in keys]
    assert list(iter_run(encode_run(keys, values))) == [(k, (k, (k, "x"))) for k in keys]
    grouped = list(iter_run(encode_grouped_run([2**100], [[2**99, 1, -(2**70)]])))
    assert grouped == [(2**100, 2**99), (2**100, 1), (2**100, -(2**70))]


def test_dict_values_with_non_str_keys_round_trip() -> None:
    values = [{1: "a", (2, 3): [4]}, {b"k": None}]
    assert [v for _, v in iter_run(encode_run(["x", "y"], values))] == [{1: "a", (2, 3): (4,)}, {b"k": None}]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(keys=_keys, block_records=st.integers(1, 8), data=st.data())
def test_run_round_trip_property(keys: list[Any], block_records: int, data: st.DataObject) -> None:
    out_keys, values = _sorted_records(keys, data)
    expected = [(_as_wire(k), _as_wire(v)) for k, v in zip(out_keys, values, strict=True)]
    for encoded in (encode_run(out_keys, values), encode_run(out_keys, values, block_records=block_records)):
        assert list(iter_run(encoded)) == expected
    blocks = list(iter_blocks(encode_run(out_keys, values, block_records=block_records)))
    assert all(0 < len(block_keys) <= block_records for block_keys, _ in blocks)
    assert sum(len(block_keys) for block_keys, _ in blocks) == len(out_keys)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=_keys, block_records=st.integers(1, 5), data=st.data())
def test_run_writer_streams_the_same_pairs(
    tmp_path: Path, keys: list[Any], block_records: int, data: st.DataObject
) -> None:
    out_keys, values = _sorted_records(keys, data)
    path = tmp_path / "run"
    writer = RunWriter(path, block_records=block_records)
    for key, value in zip(out_keys, values, strict=True):
        writer.add(key, value)
    written = writer.close()
    assert written == path.stat().st_size
    assert writer.records == len(out_keys)
    expected = [(_as_wire(k), _as_wire(v)) for k, v in zip(out_keys, values, strict=True)]
    assert list(iter_run_file(path)) == expected
    assert list(iter_run(path.read_bytes())) == expected


def test_run_writer_add_block_after_add(tmp_path: Path) -> None:
    path = tmp_path / "run"
    writer = RunWriter(path, block_records=2)
    writer.add("a", 1)
    writer.add_block(["b", "c", "d"], [2, 3, 4])
    writer.add_block([], [])
    writer.add("e", 5)
    writer.add("f", 6)
    writer.add("g", 7)
    assert writer.close() == path.stat().st_size
    assert writer.records == 7
    assert list(iter_run_file(path)) == [("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5), ("f", 6), ("g", 7)]
    blocks = list(iter_blocks(path.read_bytes()))
    assert [list(block_keys) for block_keys, _ in blocks] == [["a"], ["b", "c", "d"], ["e", "f"], ["g"]]


def test_run_writer_empty(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "empty")
    assert writer.close() == 0
    assert (tmp_path / "empty").read_bytes() == b""
    assert list(iter_run_file(tmp_path / "empty")) == []


def test_run_file_larger_than_one_read_buffer(tmp_path: Path) -> None:
    keys = [f"{i:08d}" for i in range(20000)]
    values = ["x" * 60] * len(keys)  # > 1 MiB, several reads
    path = tmp_path / "big"
    path.write_bytes(encode_run(keys, values, block_records=999))
    assert path.stat().st_size > 1 << 20
    pairs = list(iter_run_file(path))
    assert len(pairs) == len(keys)
    assert pairs[0] == ("00000000", "x" * 60) and pairs[-1] == ("00019999", "x" * 60)


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque thing>"


@pytest.mark.parametrize(
    "keys, values, what, shown, type_name, remedy",
    [
        (["a", "b"], [1, _Opaque()], "value", "<opaque thing>", "_Opaque", "yield the _Opaque's data as one of"),
        (["a"], [{1, 2}], "value", "{1, 2}", "set", "yield a list or tuple instead of a set"),
        (["a"], [(1, [2, {3}])], "value", "(1, [2, {3}])", "tuple", "holding {3} (type set), cannot be encoded by"),
        ([_Opaque()], [1], "key", "<opaque thing>", "_Opaque", "msgpack-able"),
        # A str fails only for a lone surrogate (a JSON input's "\ud800"): "keys and values must be ... str" told
        # nothing.
        (["a"], [("x", "ab\udc80")], "value", "('x', 'ab\\udc80')", "tuple", "lone surrogate ('\\udc80' at index 2)"),
    ],
)
def test_unencodable_record_names_the_item(
    keys: list[Any], values: list[Any], what: str, shown: str, type_name: str, remedy: str
) -> None:
    """The message names the key or value, what in it cannot be encoded (a set inside a tuple) and what to yield
    instead (a set: a list or tuple)."""
    with pytest.raises(UnencodableRecordError) as info:
        encode_run(keys, values)
    message = str(info.value)
    assert f"{what} {shown} (type {type_name})" in message
    assert remedy in message, message
    assert isinstance(info.value, TypeError)


def test_unencodable_record_in_a_later_block_and_in_run_writer(tmp_path: Path) -> None:
    keys = list(range(10))
    values: list[Any] = list(range(9)) + [_Opaque()]
    with pytest.raises(UnencodableRecordError, match="value <opaque thing> .* of key 9 cannot be encoded") as info:
        encode_run(keys, values, block_records=3)
    assert info.value.__cause__ is None and info.value.__suppress_context__, "msgpack's frames are left out"
    writer = RunWriter(tmp_path / "run", block_records=2)
    writer.add("a", 1)
    with pytest.raises(UnencodableRecordError, match="value <opaque thing>"):
        writer.add("b", _Opaque())
    writer._file.close()  # the attempt fails here; close() would retry the bad block
    other = RunWriter(tmp_path / "run2")
    with pytest.raises(UnencodableRecordError, match=r"value \{1\}"):
        other.add_block(["a"], [{1}])
    other._file.close()


# -- grouped runs ------------------------------------------------------------------------------------------


def test_grouped_run_cuts_blocks_at_whole_groups_and_reads_back_as_pairs(tmp_path: Path) -> None:
    keys = ["a", "b", "c", "d"]
    lists = [[1, 2], [3], list(range(10, 17)), [4, 5]]  # "c" holds more values than a block
    pairs = [(key, value) for key, values in zip(keys, lists, strict=True) for value in values]
    assert encode_grouped_run([], []) == b""
    assert list(iter_run(encode_grouped_run(keys, lists))) == pairs
    data = encode_grouped_run(keys, lists, block_records=3)
    blocks = list(iter_stored_blocks(data))
    assert all(is_grouped(block) for block in blocks)
    assert [len(sum(block[1], ())) for block in blocks] == [3, 3, 3, 3], "each block holds about 3 values"
    assert [block[0] for block in blocks] == [("a", "b"), ("c",), ("c",), ("c", "d")]
    assert list(iter_run(data)) == pairs
    assert [pair for keys_, values in iter_blocks(data) for pair in zip(keys_, values, strict=True)] == pairs
    items = [item for block in blocks for item in block_groups(block)]
    assert items == [("a", (1, 2)), ("b", (3,)), ("c", (10, 11, 12)), ("c", (13, 14, 15)), ("c", (16,)), ("d", (4, 5))]
    path = tmp_path / "run"
    path.write_bytes(data)
    assert list(iter_run_file(path)) == pairs
    assert [pair for block in iter_run_file_blocks(path) for pair in block] == pairs
    assert [item for block in iter_run_file_groups(path) for item in block] == items


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 20), max_size=30),
    block_records=st.integers(1, 12),
)
def test_grouped_blocks_hold_whole_bounded_groups(sizes: list[int], block_records: int) -> None:
    keys = [f"k{i:03d}" for i in range(len(sizes))]
    lists = [[(i, j) for j in range(size)] for i, size in enumerate(sizes)]
    data = encode_grouped_run(keys, lists, block_records)
    assert list(iter_run(data)) == [(key, _as_wire(v)) for key, values in zip(keys, lists, strict=True) for v in values]
    blocks = list(iter_stored_blocks(data))
    counts = [sum(map(len, block[1])) for block in blocks]
    if sum(sizes) > block_records:
        assert all(block_records <= count < 2 * block_records for count in counts[:-1]), counts
        assert all(len(values) <= block_records for block in blocks for values in block[1])
    else:
        assert len(blocks) == (1 if sizes else 0)
    # A key is cut only where its group is larger than a block.
    seen = [key for block in blocks for key in block[0]]
    assert all(seen.count(key) == 1 for key, size in zip(keys, sizes, strict=True) if size <= block_records)


def test_run_encoders_fed_piece_by_piece_make_the_bytes_of_the_whole_run(tmp_path: Path) -> None:
    """FlatRunEncoder and GroupedRunEncoder (a map-side merge writes with them) cut and pack the blocks
    encode_run and encode_grouped_run make of the whole run, large values cut by bytes included."""
    rng = random.Random(7)
    large = [size * "x" for size in (BLOCK_BYTES // 9, BLOCK_BYTES // 2, 2 * BLOCK_BYTES, 300)]

    def value(large_share: float) -> Any:
        if rng.random() < large_share:
            return rng.choice(large)
        return rng.choice([rng.randrange(9), "v" * rng.randrange(300)])

    for _ in range(60):
        block_records = rng.choice([2, 7, 100, 8192])
        keys = sorted(rng.randrange(500) for _ in range(rng.choice([0, 1, 50, 3000, 12000])))
        values = [value(0.5 if len(keys) < 100 else 6 / len(keys)) for _ in keys]  # a run of up to 50 large values
        flat = FlatRunEncoder(block_records)
        pieces, start = [], 0
        while start < len(keys):
            stop = start + rng.choice([1, 3, 100, 5000])
            pieces += flat.add(keys[start:stop], values[start:stop])
            start = stop
        pieces += flat.close()
        assert b"".join(pieces) == encode_run(keys, values, block_records)
        assert flat.records == len(keys)
        group_keys = sorted(set(keys))[: rng.choice([0, 1, 5, 30])]
        sizes = rng.choices([1, 2, 9, 300, 9000], weights=[30, 30, 30, 8, 2], k=len(group_keys))
        share = 0.5 if sum(sizes) < 100 else 6 / sum(sizes)
        lists = [[value(share) for _ in range(size)] for size in sizes]
        grouped = GroupedRunEncoder(block_records)
        pieces = [data for key, group in zip(group_keys, lists, strict=True) for data in grouped.add(key, group)]
        pieces += grouped.close()
        assert b"".join(pieces) == encode_grouped_run(group_keys, lists, block_records)
        assert grouped.records == sum(map(len, lists))


def test_run_writer_mixes_flat_and_grouped_blocks(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", block_records=2)
    writer.add("a", 1)
    writer.add_groups([("b", [2, 3, 4]), ("c", [5])])
    writer.add_pairs([("d", 6)])
    size = writer.close()
    assert size == (tmp_path / "run").stat().st_size and writer.records == 6
    assert list(iter_run_file(tmp_path / "run")) == [("a", 1), ("b", 2), ("b", 3), ("b", 4), ("c", 5), ("d", 6)]
    kinds = [is_grouped(block) for block in iter_stored_blocks((tmp_path / "run").read_bytes())]
    assert kinds == [False, True, True, False]
    # A flat block's stretches of equal keys read as items too.
    assert block_groups((("x", "x", "y"), (1, 2, 3))) == [("x", (1, 2)), ("y", (3,))]


def test_unencodable_value_in_a_grouped_run_names_it() -> None:
    with pytest.raises(UnencodableRecordError, match="value <opaque thing>"):
        encode_grouped_run(["a", "b"], [[1], [2, _Opaque()]])


# -- spill files ---------------------------------------------------------------------------------------------


def _runs_for(partitions: list[list[tuple[Any, Any]]]) -> list[tuple[bytes, int, str]]:
    runs = []
    for pairs in partitions:
        keys = [k for k, _ in pairs]
        runs.append((encode_run(keys, [v for _, v in pairs]), len(pairs), order_tag(keys)))
    return runs


def test_a_spill_that_cannot_be_written_names_the_file_and_the_remedy(tmp_path: Path) -> None:
    target = tmp_path / "gone" / "s.spill"
    with pytest.raises(SpillWriteError, match=r"gone/s\.spill: .*exists and is writable"):
        write_spill(target, _runs_for([[("a", 1)]]))
    # The same for spills a map merges under flow control (retryable, not blamed on the user's map).
    spills = [write_spill(tmp_path / f"{i}.spill", _runs_for([[("a", i)]])) for i in range(2)]
    with pytest.raises(SpillWriteError, match=r"gone/merged\.spill"):
        merge_spills(spills, tmp_path / "gone" / "merged.spill", None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0.spill", "1.spill"], "the inputs stay, no .tmp left"


def test_a_map_side_merge_checks_the_combiners_keys_as_a_spill_does(tmp_path: Path) -> None:
    from shuffle.buffer import CombinerKeyError

    spills = [write_spill(tmp_path / f"{i}.spill", _runs_for([[("a", i), ("b", i)]])) for i in range(2)]

    def upper_for_many(key: Any, values: list[Any]) -> list[tuple[Any, Any]]:
        # Keeps the key for one value, as in the spills, and changes it only once a merge gives it two.
        return [(key.upper() if len(values) > 1 else key, sum(values))]

    with pytest.raises(CombinerKeyError, match=r"combine\('a', \.\.\.\) yielded key 'A'"):
        merge_spills(spills, tmp_path / "merged.spill", upper_for_many)
    merged = merge_spills(spills, tmp_path / "merged.spill", lambda key, values: [(key, sum(values))])
    assert list(iter_run(merged.read_partition(0))) == [("a", 1), ("b", 1)]


def test_a_run_that_ends_in_part_of_a_block_is_corrupt_not_read_short(tmp_path: Path) -> None:
    # An index entry whose length cuts the run in a block: streaming the partition (as a map-side merge does) must
    # not stop quietly at the last whole block and lose the records after it.
    data = encode_run([f"k{i:04d}" for i in range(3000)], list(range(3000)), block_records=1000)
    path = tmp_path / "cut.spill"
    index = msgpack.packb([[len(MAGIC), len(data) - 5, 3000, "s"]])
    path.write_bytes(MAGIC + data + index + struct.pack(">Q", len(MAGIC) + len(data)))
    spill = SpillFile.open(path)
    with pytest.raises(CorruptSpillError, match=r"cut\.spill: partition 0 truncated at offset"):
        list(spill.iter_partition_blocks(0))
    with pytest.raises(CorruptSpillError, match=r"cut\.spill: partition 0 truncated"):
        merge_spills([spill, spill], tmp_path / "merged.spill", lambda key, values: [(key, sum(values))])


def test_spill_round_trip_with_empty_partitions(tmp_path: Path) -> None:
    partitions: list[list[tuple[Any, Any]]] = [
        [],
        [("a", 1), ("a", 2), ("b", (1, "x"))],
        [],
        [],
        [(1, None), (2.5, "é")],
        [],
    ]
    path = tmp_path / "s-00000.spill"
    spill = write_spill(path, _runs_for(partitions))
    assert spill.path == path
    assert not path.with_name(path.name + ".tmp").exists()
    assert path.read_bytes().startswith(MAGIC)
    assert spill.records == 5
    assert spill.size == sum(len(data) for data, _, _ in _runs_for(partitions))
    reopened = SpillFile.open(path)
    assert reopened == spill
    assert [e.order_tag for e in reopened.partitions] == ["empty", "s", "empty", "empty", "n", "empty"]
    assert [e.records for e in reopened.partitions] == [0, 3, 0, 0, 2, 0]
    for index, pairs in enumerate(partitions):
        data = reopened.read_partition(index)
        assert list(iter_run(data)) == pairs
        assert len(data) == reopened.partitions[index].length
        if not pairs:
            assert data == b""
    # offsets are contiguous after the magic
    offset = len(MAGIC)
    for entry in reopened.partitions:
        assert entry.offset == offset
        offset += entry.length


def test_spill_with_no_partitions_and_all_empty(tmp_path: Path) -> None:
    assert SpillFile.open(write_spill(tmp_path / "none", []).path).partitions == ()
    spill = SpillFile.open(write_spill(tmp_path / "empty", [(b"", 0, "empty")] * 3).path)
    assert spill.records == 0 and spill.size == 0
    assert [spill.read_partition(i) for i in range(3)] == [b"", b"", b""]


def test_spill_overwrite_is_atomic_rename(tmp_path: Path) -> None:
    path = tmp_path / "s.spill"
    write_spill(path, _runs_for([[("a", 1)]]))
    write_spill(path, _runs_for([[("b", 2)], [("c", 3)]]))
    spill = SpillFile.open(path)
    assert [list(iter_run(spill.read_partition(i))) for i in range(2)] == [[("b", 2)], [("c", 3)]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.spill"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(partition_keys=st.lists(_keys, min_size=1, max_size=5), data=st.data())
def test_spill_round_trip_property(tmp_path: Path, partition_keys: list[list[Any]], data: st.DataObject) -> None:
    partitions = []
    for keys in partition_keys:
        out_keys, values = _sorted_records(keys, data)
        partitions.append(list(zip(out_keys, values, strict=True)))
    spill = write_spill(tmp_path / "p.spill", _runs_for(partitions))
    reopened = SpillFile.open(spill.path)
    assert reopened.partitions == spill.partitions
    for index, pairs in enumerate(partitions):
        expected = [(_as_wire(k), _as_wire(v)) for k, v in pairs]
        assert list(iter_run(reopened.read_partition(index))) == expected


# -- corrupt spill files -------------------------------------------------------------------------------------


@pytest.fixture()
def spill_bytes(tmp_path: Path) -> bytes:
    spill = write_spill(tmp_path / "good.spill", _runs_for([[("a", 1), ("b", 2)], [], [("c", (1, 2))]]))
    return spill.path.read_bytes()


@pytest.mark.parametrize("content", [b"", b"HOP", b"NOTSPILL" + b"\x00" * 40, b"hopspil1" + b"\x00" * 8])
def test_bad_magic(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.spill"
    path.write_bytes(content)
    with pytest.raises(CorruptSpillError, match="bad magic") as info:
        SpillFile.open(path)
    assert str(path) in str(info.value)


def test_every_truncation_is_detected(tmp_path: Path, spill_bytes: bytes) -> None:
    for length in range(len(spill_bytes)):
        path = tmp_path / f"cut-{length}.spill"
        path.write_bytes(spill_bytes[:length])
        with pytest.raises(CorruptSpillError) as info:
            spill = SpillFile.open(path)
            for index in range(len(spill.partitions)):
                spill.read_partition(index)
        assert str(path) in str(info.value), length


def test_truncated_run_data_after_open(tmp_path: Path, spill_bytes: bytes) -> None:
    path = tmp_path / "s.spill"
    path.write_bytes(spill_bytes)
    spill = SpillFile.open(path)
    # the file shrinks after its index was read
    path.write_bytes(spill_bytes[: spill.partitions[2].offset + 1])
    assert list(iter_run(spill.read_partition(0))) == [("a", 1), ("b", 2)]
    with pytest.raises(CorruptSpillError, match="partition 2 truncated") as info:
        spill.read_partition(2)
    assert str(path) in str(info.value)


def test_index_offset_outside_the_file(tmp_path: Path, spill_bytes: bytes) -> None:
    path = tmp_path / "s.spill"
    path.write_bytes(spill_bytes[:-8] + struct.pack(">Q", len(spill_bytes) + 100))
    with pytest.raises(CorruptSpillError, match="outside the file") as info:
        SpillFile.open(path)
    assert str(path) in str(info.value)
    path.write_bytes(spill_bytes[:-8] + struct.pack(">Q", 3))  # inside the magic
    with pytest.raises(CorruptSpillError, match="outside the file"):
        SpillFile.open(path)


def test_unreadable_index(tmp_path: Path, spill_bytes: bytes) -> None:
    (index_offset,) = struct.unpack(">Q", spill_bytes[-8:])
    path = tmp_path / "s.spill"
    path.write_bytes(spill_bytes[:index_offset] + b"\xc1" + spill_bytes[-8:])  # 0xc1 is never used by msgpack
    with pytest.raises(CorruptSpillError, match="unreadable index") as info:
        SpillFile.open(path)
    assert str(path) in str(info.value)


def _file_with_index(path: Path, index: Any, payload: bytes = b"\x91\x01" * 4) -> Path:
    body = MAGIC + payload
    path.write_bytes(body + msgpack.packb(index) + struct.pack(">Q", len(body)))
    return path


@pytest.mark.parametrize(
    "index",
    [
        7,  # not an array
        [[8]],  # an entry of the wrong shape
        [[8, 2, 1, "s", "extra"]],
        [[-4, 2, 1, "s"]],  # negative offset
        [[8, -5, 1, "s"]],  # negative length
        [[12, 6, 1, "s"]],  # run reaching into the index
        [[0, 4, 1, "s"]],  # run overlapping the magic
    ],
)
def test_malformed_index_is_a_corrupt_spill(tmp_path: Path, index: Any) -> None:
    """A well-framed file whose index does not describe runs inside it is corrupt: it must not load."""
    path = _file_with_index(tmp_path / "s.spill", index)
    with pytest.raises(CorruptSpillError) as info:
        spill = SpillFile.open(path)
        for partition in range(len(spill.partitions)):
            spill.read_partition(partition)
    assert str(path) in str(info.value)


def test_index_entry_type() -> None:
    assert SpillIndexEntry(8, 0, 0, "empty") == SpillIndexEntry(8, 0, 0, "empty")


def test_run_writer_close_after_a_failed_add_still_closes_the_file(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path / "run", block_records=1)
    with pytest.raises(UnencodableRecordError):
        writer.add("a", _Opaque())
    try:
        with pytest.raises(UnencodableRecordError):
            writer.close()  # the bad record is still pending, so close() fails again ...
        assert writer._file.closed  # ... but it must not leak the file handle
    finally:
        writer._file.close()
