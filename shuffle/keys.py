"""The order of keys.

Keys are msgpack-able values: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes`` and tuples of them (lists
become tuples on the wire, because msgpack arrays are unpacked as tuples so keys stay hashable).

Python cannot compare ``"a" < 1``, so the engine defines one total order over all keys:

    None < numbers (bool, int and float, by value) < str (by code point) < bytes < tuples (element-wise)

Sorting with :func:`total_order_key` is several times slower than Python's native comparison, so every sorted run
carries an *order tag* (:func:`order_tag`): when all keys of a run share one type signature (all ``str``, all
numbers, or tuples whose positions share types), native comparison gives exactly the total order restricted to those
keys, and runs with the same tag can be sorted and merged natively. Runs with different tags, or with the tag
``"mixed"``, are compared with :func:`total_order_key`.

A float NaN cannot be a key (:func:`refuse_nan_keys`): it equals nothing, not even itself, so no two of its
records would group (nor meet on one reducer: it hashes by identity), and it has no place in any order (a run
sorted with one is not sorted). (An mrjob job's NaN keys reach the shuffle as their JSON text: ``hop.mrjob_codec``.)

A key of a subclass of one of those types (an ``IntEnum`` member, a namedtuple) has no place in the order as it is:
the shuffle sends its plain value (:func:`plain_key`), as msgpack sends such a value, and combine and reduce receive
that. The map buffer makes it plain only when a spill's keys cannot be sorted as they are, so other keys cost
nothing more.

Booleans rank with the numbers (``False == 0``, ``True == 1``): as in any Python dict, ``1``, ``1.0`` and ``True``
are one key, and they must be one key whether a reducer groups them in a hash map or merges sorted runs from disk.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable
from typing import Any

KeyOrder = Callable[[Any], Any] | None
"""A sort key function, or ``None`` for native order."""

MIXED = "mixed"
UNSORTED = "unsorted"
"""The tag of a run whose pairs are in no particular order: only a folding reducer (``shuffle.fold``) takes them."""

_RANK_NONE, _RANK_NUMBER, _RANK_STR, _RANK_BYTES, _RANK_TUPLE = range(5)


def total_order_key(key: Any) -> tuple[Any, ...]:
    """Map a key to a tuple that sorts in the engine's total order.

    Complexity: O(size of the key).

    >>> sorted([3, "a", None, (1, "x"), 2.5, True, False], key=total_order_key)
    [None, False, True, 2.5, 3, 'a', (1, 'x')]
    """
    if key is None:
        return (_RANK_NONE,)
    kind = type(key)
    if kind is int or kind is float or kind is bool:
        return (_RANK_NUMBER, key)
    if kind is str:
        return (_RANK_STR, key)
    if kind is bytes:
        return (_RANK_BYTES, key)
    if kind is tuple or kind is list:
        return (_RANK_TUPLE, tuple(total_order_key(part) for part in key))
    raise TypeError(
        f"key {key!r} of type {kind.__name__} is not a msgpack-able key (None, bool, number, str, "
        "bytes or a tuple/list of them)"
    )


NONE_HASH = 0x6E6F6E65
"""The partition hash of ``None``: ``hash(None)`` is its address before Python 3.12, different in every interpreter
started (two hosts' workers would send a ``None`` key to different reducers)."""


def partition_hash(key: Any) -> int:
    """``hash(key)``, but the same in every process (given ``PYTHONHASHSEED``, which the engine pins): ``None``, and
    tuples holding it at any depth, hash by value (every other key hashes as ``hash`` does; a NaN float key still
    hashes by identity, as Python gives it). The default partition is ``partition_hash(key) % reducers``.

    >>> partition_hash(("a", None)) == partition_hash(("a", None)) and partition_hash("a") == hash("a")
    True
    """
    if key is None:
        return NONE_HASH
    if type(key) is tuple and _holds_none(key):
        return hash(tuple(map(partition_hash, key)))
    return hash(key)


def _holds_none(key: tuple[Any, ...]) -> bool:
    return None in key or any(type(part) is tuple and _holds_none(part) for part in key)


def partitions_of(keys: list[Any], partitions: int) -> list[int]:
    """``partition_hash(key) % partitions`` for every key, with C's ``hash`` unless some key is or holds ``None``
    (the types inside tuple keys are checked in C; nested tuples are looked into per key)."""
    kinds = set(map(type, keys))
    needs_python = type(None) in kinds
    if tuple in kinds and not needs_python:
        tuples = keys if len(kinds) == 1 else [key for key in keys if type(key) is tuple]
        inside = set(map(type, itertools.chain.from_iterable(tuples)))
        needs_python = tuple in inside or type(None) in inside
    if needs_python:
        return [partition_hash(key) % partitions for key in keys]
    return [hash(key) % partitions for key in keys]


class NanKeyError(ValueError):
    """A map output key is, or holds, a float NaN (``key``)."""

    def __init__(self, key: Any) -> None:
        self.key = key
        super().__init__(
            f"map output key {key!r:.80} is or holds a float NaN, which cannot be a key: NaN equals nothing, not "
            "even itself, so its records would never group, and it has no place in the sorted output; yield None "
            "(or a str) for a missing number"
        )


def refuse_nan_keys(keys: list[Any], tag: str | None = None) -> None:
    """Raise :class:`NanKeyError` if a key is, or holds at any depth, a float NaN (:func:`first_nan_key`)."""
    bad = first_nan_key(keys, tag)
    if bad is not None:
        raise NanKeyError(bad)


def first_nan_key(keys: list[Any], tag: str | None = None) -> Any:
    """The first key that is, or holds at any depth, a float NaN; ``None`` if none does (``None`` holds no NaN).

    ``tag`` is the keys' :func:`order_tag` when known: only numbers (``"n"`` alone or inside a tuple's signature)
    or mixed keys can hold one, so every other run (all ``str``...) costs nothing. Otherwise the keys' types are
    scanned first. Complexity: O(keys) for numeric keys, O(size of the keys) for tuples holding numbers.
    """
    if tag is None:
        kinds = set(map(type, keys))
        if float not in kinds and tuple not in kinds and list not in kinds:
            return None
        tag = "n" if kinds == {float} else MIXED
    if tag == "n":
        return next((key for key in keys if key != key), None)  # (ints and bools equal themselves)
    if "n" not in tag and tag != MIXED:
        return None
    if tag[0] == "(" and "(" not in tag[1:]:
        # Flat tuples sharing a signature (("en", 7)...): only the number positions, column by column (a tuple
        # equals itself whatever it holds: tuples compare their items by identity first).
        numbers = (map(operator.itemgetter(i), keys) for i, kind in enumerate(tag[1:-1]) if kind == "n")
        held = any(number != number for column in numbers for number in column)
        return next(key for key in keys if holds_nan(key)) if held else None
    return next((key for key in keys if holds_nan(key)), None)


def holds_nan(key: Any) -> bool:
    """Whether ``key`` is, or holds at any depth, a float NaN."""
    kind = type(key)
    if kind is float:
        return key != key
    if kind is tuple or kind is list:
        return any(map(holds_nan, key))
    return False


def _plain_tuple(value: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(map(_plain_value, value))


_PLAIN_VALUE: dict[type, Callable[[Any], Any]] = {
    int: int.__int__,
    float: float.__float__,
    str: str.__str__,
    bytes: bytes.__bytes__,
    tuple: _plain_tuple,
}
"""How to get the plain value of an instance of a subclass of each key type: these give an object of the exact
type, whatever the subclass's ``__int__``, ``__str__``... say (``str(member)`` of a ``(str, Enum)`` member is
``"Class.NAME"``; ``str.__str__`` gives its value)."""


def plain_key(key: Any) -> Any:
    """``key`` as the shuffle sends it, and as combine and reduce receive it: itself if it is of the exact types
    :func:`total_order_key` orders, at any depth; else, for a value of a subclass of ``int``, ``float``, ``str``,
    ``bytes`` or ``tuple`` (an ``IntEnum``, ``IntFlag`` or ``StrEnum`` member, a namedtuple, or a tuple holding
    them), its plain value (``1`` for ``Color.RED``), as msgpack sends such a value, provided it is the same key:
    equal to it, with the same hash (so it groups and partitions as the original did). Raises ``TypeError`` for
    any other (a ``datetime.date``, a ``frozenset``, a subclass whose equality is its own).

    >>> import enum
    >>> class Color(enum.IntEnum):
    ...     RED = 1
    >>> plain_key(("a", Color.RED)), type(plain_key(Color.RED)).__name__
    (('a', 1), 'int')
    """
    try:
        total_order_key(key)
        return key
    except TypeError as error:
        refusal = error
    try:
        plain = _plain_value(key)
        same = plain == key and hash(plain) == hash(key)
    except Exception:  # (a subclass's __eq__ or __hash__ may raise anything)
        same = False
    if not same:
        raise refusal
    return plain


def _plain_value(value: Any) -> Any:
    kind = type(value)
    if value is None or kind is bool:
        return value
    for base, plain in _PLAIN_VALUE.items():
        if isinstance(value, base):
            # A subclass comparing or hashing its own way is another key than its value: two such keys that the
            # map kept apart could be one plain value.
            if kind.__eq__ is not base.__eq__ or kind.__hash__ is not base.__hash__:
                break
            return plain(value)
    raise TypeError(f"{kind.__name__} has no plain key value")


def is_key(key: Any) -> bool:
    """Whether ``key`` can be a key: it has a place in the total order (:func:`total_order_key`), as it is or as
    the plain value the shuffle sends for it (:func:`plain_key`: an ``IntEnum`` member as its int). A hashable key
    of another type (a ``datetime.date``, a ``frozenset``) cannot be sorted among the others, so cannot be one."""
    try:
        plain_key(key)
    except TypeError:
        return False
    return True


def first_unorderable_key(keys: Iterable[Any]) -> Any:
    """The first of ``keys`` that is not a key (:func:`is_key`); raises ``ValueError`` if every one is."""
    for key in keys:
        if not is_key(key):
            return key
    raise ValueError("every key has a place in the total order")


def _signature(key: Any) -> str:
    kind = type(key)
    if kind is str:
        return "s"
    if kind is int or kind is float or kind is bool:  # bools compare natively with numbers, as their equals
        return "n"
    if key is None:
        return "0"
    if kind is bytes:
        return "y"
    if kind is tuple:
        return "(" + "".join(_signature(part) for part in key) + ")"
    if kind is list:  # lists and tuples do not compare natively with each other
        return "[" + "".join(_signature(part) for part in key) + "]"
    total_order_key(key)  # raises the explanatory TypeError
    return MIXED


def order_tag(keys: Iterable[Any]) -> str:
    """Return the order tag of a collection of keys: a type signature shared by all, or ``"mixed"``.

    Two runs with the same non-mixed tag can be compared natively. Cost: one ``type()`` per key, plus a
    signature per key for tuple keys.
    """
    keys = list(keys) if not isinstance(keys, (list, tuple)) else keys
    if not keys:
        return "empty"
    kinds = set(map(type, keys))
    if kinds == {str}:
        return "s"
    if kinds <= {int, float, bool}:
        return "n"
    signatures = set(map(_signature, keys))
    if len(signatures) == 1:
        tag = signatures.pop()
        # None and tuples containing None cannot be compared natively with each other (None < None fails).
        return MIXED if "0" in tag else tag
    return MIXED


def combined_order(tags: Iterable[str]) -> KeyOrder:
    """The sort key to use when merging runs with these tags: ``None`` (native) when they agree."""
    distinct = {tag for tag in tags if tag != "empty"}
    if UNSORTED in distinct:
        raise ValueError("unsorted runs cannot be merged in order; only a folding reducer may receive them")
    if len(distinct) <= 1 and MIXED not in distinct:
        return None
    return total_order_key


def sort_keys(keys: list[Any]) -> tuple[list[Any], str]:
    """Sort distinct keys in the total order and return them with their order tag."""
    tag = order_tag(keys)
    if tag == MIXED:
        return sorted(keys, key=total_order_key), tag
    return sorted(keys), tag
