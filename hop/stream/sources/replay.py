"""``replay:PATH``: a file's lines played at a rate, once or in a loop."""

from __future__ import annotations

import os
import stat
import time
from typing import Any

from hop.inputs import COMPRESSIONS, DECOMPRESSION_ERRORS, MAX_LINE_BYTES, skip_line
from hop.stream.sources.base import Source, SourceError, SourceRecord, text_record, too_long_record

__all__ = ["ReplaySource"]


class ReplaySource(Source):
    """``replay:PATH``: a file's lines at a rate paced by wall clock; bounded unless it loops. A position is
    ``{"offset": byte offset, "line": line number}`` of the next line. A line longer than ``max_line_bytes`` is a
    bad record, and the rest of it up to its newline is skipped unread. A compressed file (``.gz``, ``.bz2``,
    ``.xz``, ``.lzma``: ``hop.inputs.COMPRESSIONS``) is read decompressed, as batch reads it; its offsets are in its
    text, and one that cannot be decompressed further is a :class:`SourceError` naming the command that checks it."""

    replayable = True

    def __init__(
        self, url: str, path: str, rate: float | None, loop: bool, max_line_bytes: int = MAX_LINE_BYTES
    ) -> None:
        super().__init__(url)
        self.max_line_bytes = max_line_bytes
        self._compression = COMPRESSIONS.get(os.path.splitext(path)[1].lower())
        _refuse_unless_regular(url, path)
        try:
            # A compressed file is read decompressed, as batch reads it: its raw bytes make lines that are no text.
            opener = open if self._compression is None else self._compression[0].open
            self._file = opener(path, "rb")
        except OSError as error:
            raise SourceError(f"replay source {url}: cannot open {path} ({error.strerror}); fix the path") from None
        self._ended = False  # a compressed file's text was read to its end (its size is not known before)
        self.path, self.rate, self.loop = path, rate, loop
        self._offset = self._line = 0  # of the next line
        self._start: float | None = None  # monotonic time of the first record of the pacing schedule
        self._played = 0  # records returned since _start

    def _take(self, max_records: int) -> list[SourceRecord]:
        if self.rate is not None:  # only the records due by now; one that fell behind gets at most 1 s worth at once
            now = time.monotonic()
            self._start = now if self._start is None else max(self._start, now - (self._played + self.rate) / self.rate)
            max_records = min(max_records, int((now - self._start) * self.rate) + 1 - self._played)
        out: list[SourceRecord] = []
        arrival = time.time()
        try:
            self._read(out, max_records, arrival)
        except DECOMPRESSION_ERRORS as error:
            raise self._not_decompressed(f"past byte {self._offset:,}", error) from None
        self._played += len(out)
        return out

    def _not_decompressed(self, where: str, error: Exception) -> Exception:
        """The error for a compressed file whose text could not be decompressed ``where`` (``error`` as raised by
        a plain file)."""
        if self._compression is None:
            return error
        tool = self._compression[1]
        return SourceError(
            f"replay source {self.url}: cannot decompress {self.path} {where} of its text ({error}): the file is "
            f"truncated, corrupt or not {tool} data; check it with `{tool} -t {self.path}`"
        )

    def _read(self, out: list[SourceRecord], max_records: int, arrival: float) -> None:
        """Read lines into ``out`` until it holds ``max_records`` or the file ends (a looping one starts over)."""
        limit = self.max_line_bytes
        while len(out) < max_records:
            raw = self._file.readline(limit + 1)  # a longer line without its newline is too long: read no more of it
            if not raw:
                if not self.loop or self._offset == 0:  # the end, or an empty file looping
                    self._ended = True
                    break
                self._file.seek(0)
                self._offset = self._line = 0
                continue
            length = len(raw)
            if length > limit and not raw.endswith(b"\n"):
                length += skip_line(self._file)
                out.append(too_long_record(self._where(), limit, length, arrival, self.path, self._offset))
            else:
                hint, first = "re-encode the file as UTF-8", self._offset == 0
                out.append(text_record(raw, arrival, self._where, hint, self.path, self._offset, first=first))
            self._offset, self._line = self._offset + length, self._line + 1

    def _where(self) -> str:
        return f"replay source {self.url}: line {self._line + 1} (byte offset {self._offset}) of {self.path}"

    def _place(self, origin: str, offset: int) -> str:
        return f"replay source {self.url}: the line at byte offset {offset} of {origin}"

    def _wait(self, timeout: float) -> None:
        # Until the next record is due; with nothing due (an empty file looping), a little while.
        due = 0.0 if self._start is None or self.rate is None else self._start + self._played / self.rate
        time.sleep(min(max(due - time.monotonic(), 0.002), timeout))

    @property
    def exhausted(self) -> bool:
        if self.loop or self._closed:
            return False
        return self._ended if self._compression else self._offset >= os.fstat(self._file.fileno()).st_size

    def position(self) -> dict[str, int]:
        return {"offset": self._offset, "line": self._line}

    def seek(self, position: Any) -> None:
        try:
            offset, line = int(position["offset"]), int(position["line"])
        except (TypeError, KeyError, ValueError) as error:
            raise SourceError(f"replay source {self.url}: {position!r:.200} is not a replay position") from error
        try:
            self._file.seek(offset)  # (a compressed file's text is decompressed up to there)
        except DECOMPRESSION_ERRORS as error:
            raise self._not_decompressed(f"up to byte {offset:,}", error) from None
        self._offset, self._line, self._ended = offset, line, False
        self._start, self._played = None, 0  # pacing starts over at the next poll

    def _release(self) -> None:
        self._file.close()


_KINDS = {stat.S_IFIFO: "a pipe", stat.S_IFCHR: "a character device", stat.S_IFDIR: "a directory",
          stat.S_IFSOCK: "a socket", stat.S_IFBLK: "a block device"}  # fmt: skip


def _refuse_unless_regular(url: str, path: str) -> None:
    """Raise :class:`SourceError` for a path that is no regular file. ``replay:/dev/stdin`` read the map's standard
    input, which is the worker's ``/dev/null``, not hop run's: the job ended at once with no window, the piped lines
    unread; a named pipe blocked ``hop run``'s check of the source until a writer came."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # (opening it says what is wrong)
    if stat.S_ISREG(mode):
        return
    kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
    raise SourceError(
        f"replay source {url}: {path} is {kind}, not a file; replay plays a file's lines (a map runs in a worker "
        "process: hop run's standard input is not its). To stream what a program writes, give --source "
        "tcp:127.0.0.1:PORT and pipe the program's output there: PROGRAM | nc 127.0.0.1 PORT"
    )
