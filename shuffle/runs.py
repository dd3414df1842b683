"""The byte format of a sorted run.

A *run* is a sequence of (key, value) pairs sorted by key. On disk and on the wire it is the concatenation of one or
more msgpack *blocks*; each block is a msgpack array of two arrays of equal length, ``[keys, values]``. Splitting a run
into blocks lets a reader stream a large run with bounded memory, while a small run is a single block that msgpack
packs and unpacks in one C call (per-record Python work is the engine's budget, see PERF.md).

Unpacking uses ``use_list=False`` (arrays become tuples, so keys are hashable), ``raw=False`` (msgpack str -> str,
bin -> bytes) and ``strict_map_key=False`` (dict values may have non-str keys). An empty run is zero bytes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import IO, Any

import msgpack

BLOCK_RECORDS = 8192
"""Records per block: large enough to amortise the per-block cost, small enough that a merge streaming many run
files holds little (one decoded block per file: about 1 MB for small pairs)."""

_READ_SIZE = 1 << 16
"""Bytes a run file's reader takes at a time: a merge has up to 64 files open (a block is about 64 KiB encoded)."""


def _packer() -> msgpack.Packer:
    return msgpack.Packer(use_bin_type=True)


def _unpacker(file_like: IO[bytes] | None = None) -> msgpack.Unpacker:
    return msgpack.Unpacker(
        file_like, use_list=False, raw=False, strict_map_key=False, max_buffer_size=0, read_size=_READ_SIZE
    )


class UnencodableRecordError(TypeError):
    """A key or value that msgpack cannot encode."""


def _pack_block(packer: msgpack.Packer, keys: Sequence[Any], values: Sequence[Any]) -> bytes:
    try:
        return packer.pack([keys, values])
    except (TypeError, ValueError, OverflowError) as error:
        for key, value in zip(keys, values, strict=True):
            for what, item in (("key", key), ("value", value)):
                try:
                    packer.pack(item)
                except (TypeError, ValueError, OverflowError):
                    raise UnencodableRecordError(
                        f"map/combine output {what} {item!r} (type {type(item).__name__}) cannot be encoded: "
                        "keys and values must be msgpack-able (None, bool, int, float, str, bytes, lists/tuples "
                        "and dicts of them)"
                    ) from error
        raise


def encode_run(keys: Sequence[Any], values: Sequence[Any], block_records: int = BLOCK_RECORDS) -> bytes:
    """Encode parallel sequences of sorted keys and values as run bytes.

    The caller guarantees ``keys`` is sorted; this function does not check it.
    """
    packer = _packer()
    if len(keys) <= block_records:
        return _pack_block(packer, keys, values) if keys else b""
    parts = [
        _pack_block(packer, keys[start : start + block_records], values[start : start + block_records])
        for start in range(0, len(keys), block_records)
    ]
    return b"".join(parts)


def iter_blocks(data: bytes | memoryview) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """Yield the ``(keys, values)`` blocks of run bytes held in memory."""
    if not len(data):
        return
    unpacker = _unpacker()
    unpacker.feed(data)
    yield from unpacker


def iter_run(data: bytes | memoryview) -> Iterator[tuple[Any, Any]]:
    """Yield the (key, value) pairs of run bytes held in memory, in order."""
    for keys, values in iter_blocks(data):
        yield from zip(keys, values, strict=False)


def iter_run_file(path: str | Path) -> Iterator[tuple[Any, Any]]:
    """Stream the (key, value) pairs of a run file, holding one read buffer and one block at a time."""
    for block in iter_run_file_blocks(path):
        yield from block


def iter_run_file_blocks(path: str | Path) -> Iterator[list[tuple[Any, Any]]]:
    """Stream the blocks of a run file as lists of (key, value) pairs, one block at a time."""
    with open(path, "rb") as file:
        for keys, values in _unpacker(file):
            yield list(zip(keys, values, strict=False))


class RunWriter:
    """Write a run to a file one pair at a time, in blocks of ``block_records``.

    The caller adds pairs in sorted order. ``close()`` flushes the last block and returns the bytes written.
    """

    def __init__(self, path: str | Path, block_records: int = BLOCK_RECORDS) -> None:
        self.path = Path(path)
        self.records = 0
        self.bytes_written = 0
        self._file = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._packer = _packer()
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

    def add_block(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        """Append a sorted block whose first key is not below the last key added."""
        self._flush()
        if keys:
            data = _pack_block(self._packer, keys, values)
            self._file.write(data)
            self.bytes_written += len(data)
            self.records += len(keys)

    def _flush(self) -> None:
        if self._keys:
            data = _pack_block(self._packer, self._keys, self._values)
            self._file.write(data)
            self.bytes_written += len(data)
            self.records += len(self._keys)
            self._keys, self._values = [], []

    def close(self) -> int:
        try:
            self._flush()
        finally:
            self._file.close()
        return self.bytes_written
