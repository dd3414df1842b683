"""Spill files: what a map writes each time its output buffer fills.

Layout of a spill file (all integers big-endian)::

    b"HOPSPIL1"                                  8-byte magic
    run of partition 0, run of partition 1, ...  run bytes (see ``shuffle.runs``), possibly empty
    index                                        msgpack array, one entry per partition:
                                                 [offset, length, records, order_tag]
    index offset                                 8 bytes, unsigned: where the index starts

The index lets the worker's shuffle server send one partition's run without reading the others. Spill files are
immutable once written: they are written under a temporary name and renamed, so a reader never sees half a spill.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import msgpack

from shuffle import codec
from shuffle.diskwrites import SpillWriteError as SpillWriteError  # (raised by write_spill: importable from here)
from shuffle.diskwrites import spill_write_error
from shuffle.runs import Block

MAGIC = b"HOPSPIL1"
_TRAILER = struct.Struct(">Q")


class CorruptSpillError(ValueError):
    """A spill file that does not follow the layout above."""


@dataclass(frozen=True)
class SpillIndexEntry:
    """Where one partition's run lies in a spill file."""

    offset: int
    length: int
    records: int
    order_tag: str


@dataclass(frozen=True)
class SpillFile:
    """A written spill file and its index."""

    path: Path
    partitions: tuple[SpillIndexEntry, ...]

    @property
    def records(self) -> int:
        return sum(entry.records for entry in self.partitions)

    @property
    def size(self) -> int:
        return sum(entry.length for entry in self.partitions)

    @classmethod
    def open(cls, path: str | Path) -> SpillFile:
        """Read the index of an existing spill file; raises :class:`CorruptSpillError` naming the file."""
        path = Path(path)
        with open(path, "rb") as file:
            if file.read(len(MAGIC)) != MAGIC:
                raise CorruptSpillError(f"{path}: not a spill file (bad magic)")
            file.seek(-_TRAILER.size, os.SEEK_END)
            end = file.tell()
            (index_offset,) = _TRAILER.unpack(file.read(_TRAILER.size))
            if not len(MAGIC) <= index_offset <= end:
                raise CorruptSpillError(f"{path}: index offset {index_offset} outside the file")
            file.seek(index_offset)
            try:
                raw = msgpack.unpackb(file.read(end - index_offset), use_list=False, raw=False)
            except (ValueError, msgpack.UnpackException) as error:
                raise CorruptSpillError(f"{path}: unreadable index at offset {index_offset}: {error}") from error
        return cls(path, _validated_index(path, raw, index_offset))

    def read_partition(self, partition: int, start: int = 0, length: int | None = None) -> bytes:
        """Return the run bytes of one partition (``length`` of them from ``start``, if given: a piece)."""
        entry = self.partitions[partition]
        if length is None:
            length = entry.length - start
        length = max(0, min(length, entry.length - start))
        if not length:
            return b""
        with open(self.path, "rb") as file:
            file.seek(entry.offset + start)
            data = file.read(length)
        if len(data) != length:
            raise CorruptSpillError(f"{self.path}: partition {partition} truncated at offset {entry.offset + start}")
        return data

    def iter_partition_blocks(self, partition: int) -> Iterator[Block]:
        """Stream one partition's run as its stored blocks (``shuffle.runs``), reading ``READ_SIZE`` bytes at a
        time: a reader holds one block and one read buffer, not the run (a map-side merge reads up to 8 spills at
        once). A run cut short or ending in a partial block raises :class:`CorruptSpillError` naming the file, the
        partition and the offset."""
        entry = self.partitions[partition]
        if not entry.length:
            return
        unpacker = codec.unpacker()
        whole = 0  # bytes of the whole blocks read (tell() counts part of a block once the unpacker has begun it)
        with open(self.path, "rb") as file:
            file.seek(entry.offset)
            left = entry.length
            while left:
                data = file.read(min(READ_SIZE, left))
                if not data:
                    break
                left -= len(data)
                unpacker.feed(data)
                for block in unpacker:
                    whole = unpacker.tell()
                    yield block
        if whole != entry.length:
            raise CorruptSpillError(
                f"{self.path}: partition {partition} truncated at offset {entry.offset + whole} (its run is "
                f"{entry.length} bytes from offset {entry.offset}, and ends in part of a block)"
            )


READ_SIZE = 1 << 16
"""Bytes :meth:`SpillFile.iter_partition_blocks` reads at a time, as a run file's reader does (``shuffle.runs``)."""


def _validated_index(path: Path, raw: object, index_offset: int) -> tuple[SpillIndexEntry, ...]:
    """Check every index entry lies between the magic and the index; raise ``CorruptSpillError`` otherwise."""
    if not isinstance(raw, tuple):
        raise CorruptSpillError(f"{path}: index is not an array")
    entries = []
    for number, entry in enumerate(raw):
        if (
            not isinstance(entry, tuple)
            or len(entry) != 4
            or not all(type(x) is int for x in entry[:3])
            or not isinstance(entry[3], str)
        ):
            raise CorruptSpillError(f"{path}: index entry {number} is malformed: {entry!r:.100}")
        offset, length, records, _ = entry
        if offset < len(MAGIC) or length < 0 or records < 0 or offset + length > index_offset:
            raise CorruptSpillError(f"{path}: index entry {number} points outside the runs: {entry!r:.100}")
        entries.append(SpillIndexEntry(*entry))
    return tuple(entries)


def write_spill(
    path: str | Path, runs: Iterable[tuple[bytes | Iterable[bytes], int | Callable[[], int], str]]
) -> SpillFile:
    """Write one spill file from per-partition ``(run, records, order_tag)`` and return it; a run is its bytes, or
    its blocks' bytes one after another (``shuffle.runs.iter_encoded_run``: written as they are packed, so that a
    spill of large values is never encoded whole in memory beside them). ``records`` is a count, or a function
    that gives it once the run's blocks are written (a merge knows how many records it made only then).

    The file is written to ``path + ".tmp"`` and renamed, so it appears complete or not at all. An OSError
    (disk full, no such directory) becomes a :class:`SpillWriteError` naming the file and the remedy; on any error
    (one of encoding, too) the temporary file is removed.
    """
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    entries = []
    try:
        with open(temporary, "wb") as file:
            file.write(MAGIC)
            offset = len(MAGIC)
            for data, records, tag in runs:
                length = 0
                for chunk in (data,) if isinstance(data, bytes) else data:
                    file.write(chunk)
                    length += len(chunk)
                count = records if isinstance(records, int) else records()
                entries.append(SpillIndexEntry(offset, length, count, tag))
                offset += length
            file.write(msgpack.packb([[e.offset, e.length, e.records, e.order_tag] for e in entries]))
            file.write(_TRAILER.pack(offset))
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise spill_write_error(path, error) from error
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return SpillFile(path, tuple(entries))
