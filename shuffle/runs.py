"""The byte format of a sorted run.

A *run* is a sequence of (key, value) pairs sorted by key. On disk and on the wire it is the concatenation of one or
more msgpack *blocks*. A block is one of:

- *flat*: an array of two arrays of equal length, ``[keys, values]``, one key per pair (what combined output is:
  about one value per key);
- *grouped*: ``[keys, value_lists, 1]``, each key once with the list of its values, in order (what a map without a
  combiner spills: a key's values are already together in the map's buffer). A key repeats only where a block ends
  or a very large group is cut. Written once per group instead of once per pair, the keys cost far less to encode,
  push, decode and group again (heavy repetition, as in a word-keyed job without a combiner: a quarter of the
  bytes and a third of the reducer's decode-and-group CPU).

Splitting a run into blocks lets a reader stream a large run with bounded memory, while a small run is a single block
that msgpack packs and unpacks in one C call (per-record Python work is the engine's budget). Blocks are
cut at ``BLOCK_RECORDS`` records or ``BLOCK_BYTES`` encoded bytes, whichever comes first, so a run of megabyte values
streams about a megabyte at a time. Readers take either kind: :func:`iter_blocks` and the pair iterators see every
block as flat, :func:`block_groups` and :func:`iter_run_file_groups` see every block as ``(key, values)`` items.

Unpacking uses ``use_list=False`` (arrays become tuples, so keys are hashable), ``raw=False`` (msgpack str -> str,
bin -> bytes) and ``strict_map_key=False`` (dict values may have non-str keys); ints of any size pass (see
``shuffle.codec``). An empty run is zero bytes.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

import msgpack

from shuffle import codec
from shuffle.diskwrites import SpillWriteError, run_write_error
from shuffle.keys import is_key

BLOCK_RECORDS = 8192
"""Records (values, in a grouped block) per block: large enough to amortise the per-block cost, small enough that a
merge streaming many run files holds little (one decoded block per file: about 1 MB for small pairs)."""

BLOCK_BYTES = 1 << 20
"""Encoded bytes a block holds at most, unless one value alone is larger: blocks are cut by bytes as well as by
records, so that large values (megabytes each) come in blocks of about this size, not 8192 of them. A reader holds
one block per run it streams (the reducer's merge: ``shuffle.store.STREAM_BYTES``). Only a block found too large
once packed is cut again (one length check per block: small pairs cost nothing more)."""

_READ_SIZE = 1 << 16
"""Bytes a run file's reader takes at a time: a merge has up to 64 files open (a block is about 64 KiB encoded)."""


def _unpacker(file_like: IO[bytes] | None = None) -> msgpack.Unpacker:
    return codec.unpacker(file_like, read_size=_READ_SIZE)


class UnencodableRecordError(TypeError):
    """A key or value of map or combine output that msgpack cannot encode.

    ``what`` is ``"key"`` or ``"value"``, ``item`` that key or value, ``part`` what in it cannot be encoded (``item``
    itself, or a set inside a tuple), ``key`` the pair's key. ``source`` says whose output it is: ``"map/combine"``
    where the encoder cannot tell, ``"map"`` or ``"combine"`` once the map output buffer has (:meth:`by`)."""

    def __init__(self, what: str, item: Any, key: Any, source: str = "map/combine") -> None:
        self.what, self.item, self.key, self.source = what, item, key, source
        self.part = _unencodable_part(item)
        if what == "key" and self.part is item:
            self.part = _unorderable_part(item)
        of_key = f" of key {_repr(key)}" if what == "value" else ""
        holds = "" if self.part is item else f", holding {_repr(self.part)} (type {type(self.part).__name__}),"
        super().__init__(
            f"{source} output {what} {_repr(item)} (type {type(item).__name__}){of_key}{holds} cannot be encoded "
            f"by the shuffle: {_what_to_yield(self.part)}"
        )

    def by(self, source: str) -> UnencodableRecordError:
        """This error, said of ``source``'s output."""
        return UnencodableRecordError(self.what, self.item, self.key, source)


PACK_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)
"""What packing a record raises for what msgpack cannot encode: a type it has no form for (``TypeError``), an int
too large or a str with a lone surrogate, a value nesting deeper than its limit or holding itself (``ValueError:
recursion limit exceeded``, or Python's ``RecursionError`` where the task's stack reaches Python's limit first). A
``RecursionError`` was the engine's own failure: the task was retried four times, the record not named."""

SEARCH_DEPTH = 64
"""The deepest :func:`_unencodable_part` looks into a value: below it, a value nesting too deep is itself the part."""


def _repr(item: Any) -> str:
    """``repr(item)``, its first 200 characters; for one nesting too deep for ``repr`` (which raised
    ``RecursionError``, failing the report of the error as the engine's own), its start as far as it can be shown."""
    try:
        return f"{item!r:.200}"
    except RecursionError:
        return f"{'[' if isinstance(item, list) else '('}... (nesting too deep to show)"


def _unencodable_part(item: Any, depth: int = 0) -> Any:
    """The first thing in ``item`` (a list, tuple or dict's element, down to :data:`SEARCH_DEPTH` levels) that
    msgpack cannot encode, or ``item`` itself. A list holding itself (``v.append(v)``) recursed without end here:
    the ``RecursionError``'s chain of a thousand contexts took the task 800 MB and half a minute to format, per
    attempt."""
    if isinstance(item, list | tuple | dict) and depth < SEARCH_DEPTH:
        for element in (x for pair in item.items() for x in pair) if isinstance(item, dict) else item:
            if element is item:
                return item  # (it holds itself)
            try:
                codec.packb(element)
            except PACK_ERRORS:
                return _unencodable_part(element, depth + 1)
    return item


def _unorderable_part(key: Any) -> Any:
    """The first thing in ``key`` (a tuple's element, at any depth) that has no place in the keys' order
    (``shuffle.keys.is_key``), or ``key`` itself."""
    if type(key) is tuple or type(key) is list:
        for element in key:
            if not is_key(element):
                return _unorderable_part(element)
    return key


def _what_to_yield(part: Any) -> str:
    if isinstance(part, list | tuple | dict):  # (each of its elements packs, or it holds itself)
        return (
            f"the {type(part).__name__} holds itself, or nests deeper than msgpack's limit (1,024 levels): yield "
            "flatter data (what a cycle holds, once)"
        )
    if isinstance(part, set | frozenset):
        return "yield a list or tuple instead of a set (sorted, for the same order in every run)"
    if type(part) is str:  # (a str fails to encode only for a lone surrogate, which UTF-8 has no form for)
        index = next(i for i, char in enumerate(part) if "\ud800" <= char <= "\udfff")
        return (
            f"the str holds a lone surrogate ({part[index]!r} at index {index}), which UTF-8 cannot encode: yield it "
            "as bytes (s.encode('utf-8', 'surrogatepass')), or with the surrogate replaced "
            "(s.encode('utf-8', 'replace').decode())"
        )
    base = next((kind for kind in (bool, int, float, str, bytes) if isinstance(part, kind)), None)
    if base is not None and type(part) is not base:  # (only a key: msgpack sends a value as its base type)
        return f"a key holds a plain {base.__name__}, not a {type(part).__name__}: convert it with {base.__name__}()"
    return (
        f"keys and values must be msgpack-able (None, bool, int, float, str, bytes, lists/tuples and dicts of them): "
        f"yield the {type(part).__name__}'s data as one of those (a tuple of its fields, say)"
    )


GROUPED = 1
"""The third element that marks a grouped block."""

Block = tuple[Sequence[Any], Sequence[Any]] | tuple[Sequence[Any], Sequence[Sequence[Any]], int]
"""A decoded block as stored: flat ``(keys, values)`` or grouped ``(keys, value_lists, GROUPED)``."""


def _pack_block(packer: msgpack.Packer, keys: Sequence[Any], values: Sequence[Any], grouped: bool = False) -> bytes:
    try:
        return packer.pack([keys, values, GROUPED] if grouped else [keys, values])
    except PACK_ERRORS:
        pairs = zip(keys, values, strict=True)
        if grouped:
            pairs = ((key, value) for key, group in pairs for value in group)  # type: ignore[assignment]
        for key, value in pairs:
            for what, item in (("key", key), ("value", value)):
                try:
                    packer.pack(item)
                except PACK_ERRORS:
                    raise UnencodableRecordError(what, item, key) from None  # msgpack's own frames say no more
        raise


def encode_run(keys: Sequence[Any], values: Sequence[Any], block_records: int = BLOCK_RECORDS) -> bytes:
    """Encode parallel sequences of sorted keys and values as run bytes (:func:`iter_encoded_run`, joined).

    The caller guarantees ``keys`` is sorted; this function does not check it.
    """
    return b"".join(iter_encoded_run(keys, values, block_records))


def iter_encoded_run(keys: Sequence[Any], values: Sequence[Any], block_records: int = BLOCK_RECORDS) -> Iterator[bytes]:
    """The run bytes of parallel sequences of sorted keys and values, as flat blocks packed one at a time: a
    writer holds one encoded block, not the whole run's encoding beside its values (``shuffle.spill``)."""
    yield from _encoded_run(codec.packer(), keys, values, block_records)


def _encoded_run(
    packer: msgpack.Packer, keys: Sequence[Any], values: Sequence[Any], block_records: int
) -> Iterator[bytes]:
    """:func:`iter_encoded_run` with ``packer``: a block cut again because it packed too large is packed by the
    same packer. A packer keeps its buffer at the largest block it packed, and a packer per cut held one such
    buffer per level while a few large states stayed in the first part of each cut: a dozen levels of 2 MB at the
    spill of a skewed ``TopK``'s 12 MB of states (54 MB at its peak)."""
    if len(keys) <= block_records:
        if keys:
            yield from _flat_blocks(packer, keys, values)
        return
    for start in range(0, len(keys), block_records):
        yield from _flat_blocks(packer, keys[start : start + block_records], values[start : start + block_records])


def _packed_size_guess(packer: msgpack.Packer, value: Any) -> int:
    """About how many bytes ``value`` packs to, for the size of a block before it is packed: a str's or bytes'
    length, a container's packed size, 1 for a number (0 if it cannot be packed: the block's packing says why)."""
    if isinstance(value, str | bytes | bytearray):
        return len(value)
    if value is None or isinstance(value, int | float):
        return 1
    try:
        return len(packer.pack(value))
    except PACK_ERRORS:
        return 0


def _flat_blocks(packer: msgpack.Packer, keys: Sequence[Any], values: Sequence[Any]) -> Iterator[bytes]:
    """One flat block, or, when it packs to more than ``BLOCK_BYTES`` and holds several pairs, the same pairs in
    blocks of as many pairs as ``BLOCK_BYTES`` holds at their mean size (cut again while still too large). A block
    whose first value alone says it is too large is cut before it is packed (large values: never a block of many
    megabytes packed only to be cut, which held their encoding twice more)."""
    count = len(keys)
    guess = _packed_size_guess(packer, keys[0]) + _packed_size_guess(packer, values[0]) if count > 1 else 0
    if guess * count > BLOCK_BYTES:
        yield from _encoded_run(packer, keys, values, max(1, BLOCK_BYTES // guess))
        return
    data = _pack_block(packer, keys, values)
    if len(data) <= BLOCK_BYTES or count < 2:
        yield data
        return
    records = max(1, count * BLOCK_BYTES // len(data))
    del data
    yield from _encoded_run(packer, keys, values, records)


def _grouped_blocks(
    packer: msgpack.Packer, keys: Sequence[Any], value_lists: Sequence[Sequence[Any]]
) -> Iterator[bytes]:
    """One grouped block, or, when it packs to more than ``BLOCK_BYTES`` and holds several values, the same groups
    re-cut (:func:`iter_encoded_grouped_run`) into blocks of about ``BLOCK_BYTES`` at the values' mean size (before
    packing, when the first value alone says so: see :func:`_flat_blocks`)."""
    count = sum(map(len, value_lists))
    # A grouped block holds up to twice its record count (it ends with the group that fills it): half the share.
    guess = _packed_size_guess(packer, value_lists[0][0]) if count > 1 else 0
    if guess * count > BLOCK_BYTES:
        yield from _encoded_grouped_run(packer, keys, value_lists, max(1, BLOCK_BYTES // guess // 2))
        return
    data = _pack_block(packer, keys, value_lists, grouped=True)
    if len(data) <= BLOCK_BYTES or count < 2:
        yield data
        return
    records = max(1, count * BLOCK_BYTES // len(data) // 2)
    del data
    yield from _encoded_grouped_run(packer, keys, value_lists, records)


def encode_grouped_run(
    keys: Sequence[Any], value_lists: Sequence[Sequence[Any]], block_records: int = BLOCK_RECORDS
) -> bytes:
    """Encode sorted keys, each with the non-empty list of its values, as grouped blocks
    (:func:`iter_encoded_grouped_run`, joined)."""
    return b"".join(iter_encoded_grouped_run(keys, value_lists, block_records))


def iter_encoded_grouped_run(
    keys: Sequence[Any], value_lists: Sequence[Sequence[Any]], block_records: int = BLOCK_RECORDS
) -> Iterator[bytes]:
    """Sorted keys, each with the non-empty list of its values, as grouped blocks of whole groups packed one at a
    time: every block but the last holds at least ``block_records`` values and fewer than twice that (a group
    larger than ``block_records`` is first cut into pieces of the same key, so a block stays bounded).

    The caller guarantees ``keys`` is sorted; this function does not check it.
    """
    yield from _encoded_grouped_run(codec.packer(), keys, value_lists, block_records)


def _encoded_grouped_run(
    packer: msgpack.Packer, keys: Sequence[Any], value_lists: Sequence[Sequence[Any]], block_records: int
) -> Iterator[bytes]:
    """:func:`iter_encoded_grouped_run` with ``packer`` (see :func:`_encoded_run`)."""
    sizes = list(map(len, value_lists))
    total = sum(sizes)
    if total <= block_records:
        if keys:
            yield from _grouped_blocks(packer, keys, value_lists)
        return
    if max(sizes) > block_records:
        keys, value_lists, sizes = _cut_large_groups(keys, value_lists, sizes, block_records)
    # Where blocks end, found by bisecting the running total (C loops; a Python step per key cost a third of a
    # no-combiner map's spill): each block ends with the group that brings it to ``block_records`` values.
    ends = list(itertools.accumulate(sizes))
    start = 0
    while start < len(ends):
        filled_before = ends[start - 1] if start else 0
        stop = bisect.bisect_left(ends, filled_before + block_records, lo=start) + 1
        yield from _grouped_blocks(packer, keys[start:stop], value_lists[start:stop])
        start = stop


def _cut_large_groups(
    keys: Sequence[Any], value_lists: Sequence[Sequence[Any]], sizes: list[int], block_records: int
) -> tuple[list[Any], list[Sequence[Any]], list[int]]:
    """The groups with every one larger than ``block_records`` values cut into pieces of that many (same key)."""
    out_keys: list[Any] = []
    out_lists: list[Sequence[Any]] = []
    out_sizes: list[int] = []
    done = 0
    for index in [i for i, size in enumerate(sizes) if size > block_records]:
        out_keys += keys[done:index]
        out_lists += value_lists[done:index]
        out_sizes += sizes[done:index]
        values = value_lists[index]
        for begin in range(0, sizes[index], block_records):
            piece = values[begin : begin + block_records]
            out_keys.append(keys[index])
            out_lists.append(piece)
            out_sizes.append(len(piece))
        done = index + 1
    out_keys += keys[done:]
    out_lists += value_lists[done:]
    out_sizes += sizes[done:]
    return out_keys, out_lists, out_sizes


class _BlockEncoder:
    """What the two run encoders share: the current block's keys and its second column (values, or value lists),
    held until the block is complete, or handed to ``_cut`` once it is known to be cut for its size; :meth:`close`
    packs what is held as the whole-run encoder would (``_pack``)."""

    def __init__(self, block_records: int) -> None:
        self.records = 0
        self._block_records = block_records
        self._packer = codec.packer()
        self._keys: list[Any] = []
        self._column: list[Any] = []
        self._count = 0
        """Records in the current block of ``block_records`` (held, or handed to ``_cut``)."""
        self._guess = 0
        self._cut: Any = None
        """Once the current block is known to be cut for its size, the encoder (of the same kind) of its pieces."""

    def _pack(self, keys: list[Any], column: list[Any]) -> Iterator[bytes]:
        raise NotImplementedError

    def close(self) -> Iterator[bytes]:
        """The current block's last blocks (the next records added start a new block)."""
        if self._cut is not None:
            yield from self._cut.close()
            self._cut = None
        elif self._keys:
            keys, column, self._keys, self._column = self._keys, self._column, [], []
            yield from self._pack(keys, column)
        self._count = 0


class FlatRunEncoder(_BlockEncoder):
    """Encode a run handed over in sorted pieces as flat blocks, each packed as soon as it is cut: the blocks, and
    their bytes, are those :func:`iter_encoded_run` makes of the whole run, but the encoder holds at most one
    block's records (one of ``block_records``, or of fewer when its first pair says they are large), not the run.

    :meth:`add` takes parallel keys and values whose first key is not below the last key added, and yields the
    blocks packed meanwhile (consume them before the next call); :meth:`close` yields the last. ``records`` counts
    the pairs added.
    """

    def __init__(self, block_records: int = BLOCK_RECORDS) -> None:
        super().__init__(block_records)

    def _pack(self, keys: list[Any], column: list[Any]) -> Iterator[bytes]:
        return _flat_blocks(self._packer, keys, column)

    def add(self, keys: Sequence[Any], values: Sequence[Any]) -> Iterator[bytes]:
        self.records += len(keys)
        start, total, size = 0, len(keys), self._block_records
        while start < total:
            stop = min(total, start + size - self._count)
            piece_keys, piece_values = keys[start:stop], values[start:stop]
            if self._cut is not None:
                yield from self._cut.add(piece_keys, piece_values)
            else:
                if not self._keys:
                    self._guess = _packed_size_guess(self._packer, keys[start]) + _packed_size_guess(
                        self._packer, values[start]
                    )
                self._keys += piece_keys
                self._column += piece_values
            self._count += stop - start
            start = stop
            if self._cut is None and self._count > 1 and self._guess * self._count > BLOCK_BYTES:
                # The block will be cut into pieces as _flat_blocks cuts it: they are packed as they fill.
                self._cut = FlatRunEncoder(max(1, BLOCK_BYTES // self._guess))
                held_keys, held_values, self._keys, self._column = self._keys, self._column, [], []
                yield from self._cut.add(held_keys, held_values)
            if self._count == size:
                yield from self.close()


class GroupedRunEncoder(_BlockEncoder):
    """Encode a run handed over one sorted group at a time as grouped blocks, each packed as soon as it is cut: the
    blocks, and their bytes, are those :func:`iter_encoded_grouped_run` makes of the whole run, but the encoder holds
    at most one block's groups (fewer than twice ``block_records`` values, or fewer values when the first says they
    are large), not the run.

    :meth:`add` takes a key above the last key added with the non-empty list of its values, and yields the blocks
    packed meanwhile (consume them before the next call); :meth:`close` yields the last. ``records`` counts the
    values added.
    """

    def __init__(self, block_records: int = BLOCK_RECORDS) -> None:
        super().__init__(block_records)

    def _pack(self, keys: list[Any], column: list[Any]) -> Iterator[bytes]:
        return _grouped_blocks(self._packer, keys, column)

    def add(self, key: Any, values: Sequence[Any]) -> Iterator[bytes]:
        self.records += len(values)
        size = self._block_records
        if len(values) <= size:
            yield from self._add_piece(key, values)
            return
        for begin in range(0, len(values), size):  # as _cut_large_groups cuts a large group
            yield from self._add_piece(key, values[begin : begin + size])

    def _add_piece(self, key: Any, values: Sequence[Any]) -> Iterator[bytes]:
        if self._cut is not None:
            yield from self._cut.add(key, values)
        else:
            if not self._keys:
                self._guess = _packed_size_guess(self._packer, values[0])
            self._keys.append(key)
            self._column.append(values)
        self._count += len(values)
        if self._cut is None and self._count > 1 and self._guess * self._count > BLOCK_BYTES:
            # The block will be cut again as _grouped_blocks cuts it: its pieces are packed as they fill.
            self._cut = GroupedRunEncoder(max(1, BLOCK_BYTES // self._guess // 2))
            held_keys, held_lists, self._keys, self._column = self._keys, self._column, [], []
            for held_key, held_values in zip(held_keys, held_lists, strict=True):
                yield from self._cut.add(held_key, held_values)
        if self._count >= self._block_records:
            yield from self.close()


def iter_stored_blocks(data: bytes | memoryview) -> Iterator[Block]:
    """Yield the blocks of run bytes held in memory as stored, flat or grouped (see the module docstring)."""
    if not len(data):
        return
    unpacker = _unpacker()
    unpacker.feed(data)
    yield from unpacker


def is_grouped(block: Block) -> bool:
    return len(block) == 3


def flat_block(block: Block) -> tuple[Sequence[Any], Sequence[Any]]:
    """A stored block as ``(keys, values)``, one key per value."""
    if len(block) == 2:
        return block
    keys, value_lists = block[0], block[1]
    flat_keys = tuple(itertools.chain.from_iterable(map(itertools.repeat, keys, map(len, value_lists))))
    return flat_keys, tuple(itertools.chain.from_iterable(value_lists))


def block_groups(block: Block) -> list[tuple[Any, Sequence[Any]]]:
    """A stored block as ``(key, values)`` items in key order, one per stretch of equal keys in the block."""
    if len(block) == 3:
        return list(zip(block[0], block[1], strict=False))
    keys, values = block[0], block[1]
    items: list[tuple[Any, Sequence[Any]]] = []
    start = 0
    for key, group in itertools.groupby(keys):
        end = start + sum(1 for _ in group)
        items.append((key, values[start:end]))
        start = end
    return items


def iter_blocks(data: bytes | memoryview) -> Iterator[tuple[Sequence[Any], Sequence[Any]]]:
    """Yield the blocks of run bytes held in memory as ``(keys, values)``, one key per value (grouped blocks are
    expanded)."""
    return map(flat_block, iter_stored_blocks(data))


def iter_run(data: bytes | memoryview) -> Iterator[tuple[Any, Any]]:
    """Yield the (key, value) pairs of run bytes held in memory, in order (of either kind of block)."""
    for keys, values in iter_blocks(data):
        yield from zip(keys, values, strict=False)


def iter_file_blocks(path: str | Path) -> Iterator[tuple[Sequence[Any], Sequence[Any]]]:
    """Stream the blocks of a run file as ``(keys, values)``, one key per value (like :func:`iter_blocks`), holding
    one read buffer and one block at a time."""
    with open(path, "rb") as file:
        yield from map(flat_block, _unpacker(file))


def iter_run_file(path: str | Path) -> Iterator[tuple[Any, Any]]:
    """Stream the (key, value) pairs of a run file, holding one read buffer and one block at a time."""
    for block in iter_run_file_blocks(path):
        yield from block


def iter_run_file_blocks(path: str | Path) -> Iterator[list[tuple[Any, Any]]]:
    """Stream the blocks of a run file as lists of (key, value) pairs, one block at a time."""
    with open(path, "rb") as file:
        for block in _unpacker(file):
            keys, values = flat_block(block)
            yield list(zip(keys, values, strict=False))


def iter_run_file_groups(path: str | Path) -> Iterator[list[tuple[Any, Sequence[Any]]]]:
    """Stream the blocks of a run file as lists of ``(key, values)`` items (see :func:`block_groups`)."""
    with open(path, "rb") as file:
        yield from map(block_groups, _unpacker(file))


class RunWriter:
    """Write a run to a file one pair at a time, in blocks of ``block_records`` (or ``BLOCK_BYTES``).

    The caller adds pairs (or ``(key, values)`` items, written as grouped blocks: :meth:`add_groups`) in sorted
    order. ``close()`` flushes the last block and returns the bytes written; ``records`` counts pairs.

    Its files are a reducer's, in the worker's spill directory: a write that fails (a full disk) removes the file and
    raises a :class:`shuffle.diskwrites.SpillWriteError` naming it and what to do.
    """

    def __init__(self, path: str | Path, block_records: int = BLOCK_RECORDS) -> None:
        self.path = Path(path)
        self.records = 0
        self.bytes_written = 0
        try:
            self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        except OSError as error:
            raise run_write_error(self.path, error) from error
        self._packer = codec.packer()
        self._block_records = block_records
        self._keys: list[Any] = []
        self._values: list[Any] = []

    def add(self, key: Any, value: Any) -> None:
        self._keys.append(key)
        self._values.append(value)
        if len(self._keys) >= self._block_records:
            self._flush()

    def add_pairs(self, pairs: Sequence[tuple[Any, Any]]) -> None:
        """Append sorted pairs whose first key is not below the last key added (blocks stay full size)."""
        self._keys.extend(map(itemgetter(0), pairs))
        self._values.extend(map(itemgetter(1), pairs))
        size = self._block_records
        while len(self._keys) >= size:
            keys, values = self._keys, self._values
            self._keys, self._values = keys[:size], values[:size]
            self._flush()
            self._keys, self._values = keys[size:], values[size:]

    def add_groups(self, items: Sequence[tuple[Any, Sequence[Any]]]) -> None:
        """Append sorted ``(key, values)`` items whose first key is not below the last key added, as grouped
        blocks."""
        self._flush()
        keys, value_lists = list(map(itemgetter(0), items)), list(map(itemgetter(1), items))
        self._write(iter_encoded_grouped_run(keys, value_lists, self._block_records))
        self.records += sum(map(len, value_lists))

    def add_block(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        """Append a sorted block whose first key is not below the last key added."""
        self._flush()
        if keys:
            self._write(_flat_blocks(self._packer, keys, values))
            self.records += len(keys)

    def _flush(self) -> None:
        if self._keys:
            self._write(_flat_blocks(self._packer, self._keys, self._values))
            self.records += len(self._keys)
            self._keys, self._values = [], []

    def _write(self, blocks: Iterable[bytes]) -> None:
        """Write encoded blocks as they are packed, counting their bytes."""
        try:
            for data in blocks:
                self._file.write(data)
                self.bytes_written += len(data)
        except OSError as error:
            raise self._unwritten(error) from error

    def close(self) -> int:
        try:
            self._flush()
            self._file.close()  # (writes what is buffered: a full disk may fail it here)
        except SpillWriteError:
            raise
        except OSError as error:
            raise self._unwritten(error) from error
        except BaseException:
            with contextlib.suppress(OSError):
                self._file.close()
            raise
        return self.bytes_written

    def _unwritten(self, error: OSError) -> SpillWriteError:
        """Give the file up, removed (half a run is of no use to anyone), and name it and what to do."""
        with contextlib.suppress(OSError):
            self._file.close()
        self.path.unlink(missing_ok=True)
        return run_write_error(self.path, error)
