"""What every source is: records, errors and the polling contract (see ``hop.stream.sources``)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from hop.inputs import UTF8_BOM

__all__ = ["READ_BYTES", "Source", "SourceError", "SourceRecord", "text_record", "too_long_record"]

READ_BYTES = 1 << 16  # read at a time from a file or socket


class SourceRecord(NamedTuple):
    """One record: ``value`` is a text line (no line break) or a decoded msgpack value; ``nbytes`` its size as
    received (a line with its newline, a frame's length); ``arrival`` the ``time.time()`` at which it was read.
    ``origin`` and ``offset`` say where it was: the file (``tail``: its name in the directory, ``replay``: its path)
    or the client's address (``tcp``), and the byte offset of the record's first byte in that file or connection;
    both None where a source has no such place (ZeroMQ frames). :meth:`Source.where` puts them into words. They are
    stored, not formatted: formatting every record's place would cost the stream map's hot path. (A named tuple,
    not a frozen dataclass, for the same reason: one is built per record, at a third of the cost.)

    A *bad record* (one the source could not decode) has ``value`` None and ``error`` saying what was wrong, naming
    the source URL, where the record was (file and byte offset, client, frame) and what to do; the source has moved
    past it. The consumer decides what a bad record costs (the stream map drops and counts it)."""

    value: Any
    nbytes: int
    arrival: float
    error: str | None = None
    origin: str | None = None
    offset: int | None = None


class SourceError(Exception):
    """A bad source URL or an unreadable source or record; the message names the URL or path and what to do."""


def text_record(
    raw: bytes,
    arrival: float,
    where: Callable[[], str],
    hint: str,
    origin: str | None = None,
    offset: int | None = None,
    max_line_bytes: int | None = None,
    first: bool = False,
) -> SourceRecord:
    """One line or frame decoded as UTF-8 without its trailing ``\\n`` or ``\\r\\n``, or a bad record whose
    error names ``where()`` (called only then: building it for every record would cost) and ``hint`` (or, for a line
    longer than ``max_line_bytes`` without its ``\\n``, :func:`too_long_record`); either way placed at ``origin``
    and ``offset`` (see :class:`SourceRecord`). ``first``: the line starts its file, and a UTF-8 byte order mark
    there is no part of it, as in batch (``hop.inputs``): a file saved with one (Windows editors, PowerShell) does
    not start with a line that is no JSON or a word that is not the word. ``nbytes`` still counts the mark."""
    line = raw[:-1] if raw.endswith(b"\n") else raw
    if first and line.startswith(UTF8_BOM):
        line = line[len(UTF8_BOM) :]
    if max_line_bytes is not None and len(line) > max_line_bytes:
        return too_long_record(where(), max_line_bytes, len(raw), arrival, origin, offset)
    try:
        text = (line[:-1] if line.endswith(b"\r") else line).decode("utf-8")
    except UnicodeDecodeError as error:
        problem = f"{where()} is not valid UTF-8 (its byte {error.start}: {error.reason}); {hint}"
        return SourceRecord(None, len(raw), arrival, problem, origin, offset)
    return SourceRecord(text, len(raw), arrival, None, origin, offset)


def too_long_record(
    where: str, max_line_bytes: int, nbytes: int, arrival: float, origin: str | None, offset: int | None
) -> SourceRecord:
    """The bad record a line longer than ``max_line_bytes`` (``--max-line-bytes``) is, at ``where``: the sources drop
    such a line up to its newline as it is read, holding none of it (a producer that never writes a newline must
    not fill memory)."""
    problem = (
        f"{where} is longer than {max_line_bytes:,} bytes; it is dropped up to its newline (raise --max-line-bytes "
        "if such lines are intended)"
    )
    return SourceRecord(None, nbytes, arrival, problem, origin, offset)


class Source(ABC):
    """A stream of records read by polling (see the module docstring for the shared contracts)."""

    replayable: ClassVar[bool]

    def __init__(self, url: str) -> None:
        self.url = url
        self._closed = False
        self.listening: str | None = None
        """For a source that producers send to (``zmq:``, ``tcp:``): the URL it listens at once bound, with the
        port the system picked where the URL left it open (``tcp:HOST:0``, ``zmq:tcp://HOST:*``); else None."""

    def poll(self, max_records: int, timeout: float) -> list[SourceRecord]:
        """Up to max_records new records (bad records included, in their place); waits at most ``timeout`` seconds
        (plus a few ms) for the first one and returns [] if none came. Raises :class:`SourceError` for a closed
        source or one that cannot be read at all (a directory that cannot be listed)."""
        if self._closed:
            raise SourceError(f"source {self.url} is closed; open a new one with open_source()")
        deadline = time.monotonic() + timeout
        while max_records > 0:
            records = self._take(max_records)
            remaining = deadline - time.monotonic()
            if records or remaining <= 0 or self.exhausted:
                return records
            self._wait(remaining)
        return []

    @abstractmethod
    def _take(self, max_records: int) -> list[SourceRecord]:
        """Up to max_records records available now, without waiting."""

    @abstractmethod
    def _wait(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds, until records may have arrived."""

    def where(self, record: SourceRecord) -> str | None:
        """Where one of this source's records was, for messages (``tail source URL: the line at byte offset 120 of
        app.log``), or None for a record without a place (:class:`SourceRecord`: a ZeroMQ frame)."""
        if record.origin is None or record.offset is None:
            return None
        return self._place(record.origin, record.offset)

    def _place(self, origin: str, offset: int) -> str:
        """The words for a place (sources whose records have one override this)."""
        return f"{self.url}: byte offset {offset} of {origin}"

    @abstractmethod
    def position(self) -> Any:
        """A msgpack-able checkpoint: ``seek`` of it on a fresh source of the same URL continues right after the
        last record returned before this call (``None`` for sources that are not replayable)."""

    @abstractmethod
    def seek(self, position: Any) -> None:
        """Resume from a :meth:`position`; a no-op for sources that are not replayable."""

    @property
    def exhausted(self) -> bool:
        """True only for a bounded source (replay) once every record was returned."""
        return False

    def close(self) -> None:
        """Close the sockets and files; idempotent."""
        if not self._closed:
            self._closed = True
            self._release()

    @abstractmethod
    def _release(self) -> None:
        """Free the sockets and files; called once, by :meth:`close`."""
