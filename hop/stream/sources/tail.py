"""``tail:DIR``: the lines of the files in a directory, new lines and new files, across rotation."""

from __future__ import annotations

import io
import math
import os
import stat
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from hop.stream.sources.base import READ_BYTES, Source, SourceError, SourceRecord, text_record

__all__ = ["GONE_GRACE", "HEAD_BYTES", "TAIL_INTERVAL", "TailSource"]

TAIL_INTERVAL = 0.02  # seconds between two listings of a tailed directory (tracked files are read at every poll)
GONE_GRACE = 2.0  # seconds a tailed file that left its directory stays open after its last new byte
HEAD_BYTES = 256  # bytes at the start of a tailed file a position fingerprints: an inode may be reused


@dataclass(eq=False)
class _Tailed:
    """A tailed file: ``offset`` is just past the last line returned, ``lines`` the complete lines read after it,
    ``partial`` the bytes after those (``file``'s read position is past all of them)."""

    key: tuple[int, int]
    name: str
    file: io.FileIO
    offset: int
    last_data: float
    lines: deque[bytes] = field(default_factory=deque)
    partial: bytearray = field(default_factory=bytearray)  # appended to: a long line in many chunks stays linear
    gone_since: float | None = None


class TailSource(Source):
    """``tail:DIR``: the text lines of the files of a directory, as they are written. Every tracked file holds a
    descriptor; a position is ``{"files": [{dev, ino, offset, head, crc, name}, ...]}``."""

    replayable = True

    def __init__(self, url: str, directory: str) -> None:
        super().__init__(url)
        if not os.path.isdir(directory) or not os.access(directory, os.R_OK | os.X_OK):
            problem = "cannot be read; check its permissions" if os.path.isdir(directory) else "is not a directory"
            problem = problem if os.path.exists(directory) else "does not exist; create it or fix the path"
            raise SourceError(f"tail source {url}: {directory} {problem} (tail:DIR reads the files of a directory)")
        self.directory = directory
        self._files: list[_Tailed] = []
        self._scanned = -math.inf  # monotonic time of the last listing
        # From seek(): (dev, ino) -> (offset, fingerprinted bytes, crc32), applied when the file is next discovered.
        self._resume: dict[tuple[int, int], tuple[int, int, int]] = {}

    def _wait(self, timeout: float) -> None:
        time.sleep(min(TAIL_INTERVAL, timeout))

    def position(self) -> dict[str, Any]:
        files = []
        for f in self._files:  # the name is for people: resuming goes by inode
            (dev, ino), head = f.key, min(f.offset, HEAD_BYTES)
            crc = _crc(f.file, head)
            files.append({"dev": dev, "ino": ino, "offset": f.offset, "head": head, "crc": crc, "name": f.name})
        return {"files": files}

    def seek(self, position: Any) -> None:
        try:
            resume = {(int(e["dev"]), int(e["ino"])): (int(e["offset"]), int(e["head"]), int(e["crc"]))
                      for e in position["files"]}  # fmt: skip
        except (TypeError, KeyError, ValueError) as error:
            raise SourceError(f"tail source {self.url}: {position!r:.200} is not a tail source position") from error
        self._release()
        self._files, self._resume, self._scanned = [], resume, -math.inf

    def _release(self) -> None:
        for f in self._files:
            f.file.close()

    def _scan(self, now: float) -> None:
        """Note which tracked files are still in the directory (under which name); track new ones."""
        self._scanned = now
        try:
            entries = list(os.scandir(self.directory))
        except OSError as error:
            raise SourceError(f"tail source {self.url}: cannot list {self.directory} ({error.strerror})") from error
        present: dict[tuple[int, int], tuple[float, str]] = {}
        for entry in entries:
            try:
                st = entry.stat()
            except OSError:
                continue  # removed or renamed since it was listed: the next scan sees where it went
            if stat.S_ISREG(st.st_mode) and entry.name[0] not in "._":
                present[(st.st_dev, st.st_ino)] = (st.st_mtime, entry.name)
        for f in self._files:
            if f.key in present:
                f.name, f.gone_since = present.pop(f.key)[1], None
            elif f.gone_since is None:
                f.gone_since = now
        for (_, name), key in sorted((seen, key) for key, seen in present.items()):
            path = os.path.join(self.directory, name)
            try:
                file = open(path, "rb", buffering=0)  # noqa: SIM115 -- open while tracked: rotation needs the inode
            except FileNotFoundError:
                continue  # renamed since it was listed: found under its new name next time
            except OSError as error:
                raise SourceError(f"tail source {self.url}: cannot open {path} ({error.strerror})") from error
            st = os.fstat(file.fileno())
            if (st.st_dev, st.st_ino) != key:  # replaced since it was listed: the next scan finds the new file
                file.close()
                continue
            offset, resume = 0, self._resume.pop(key, None)
            # An inode can be reused by a new file: resume only when the fingerprinted head is the same.
            if resume is not None and resume[0] <= st.st_size and _crc(file, resume[1]) == resume[2]:
                offset = resume[0]
            file.seek(offset)
            self._files.append(_Tailed(key, name, file, offset, now))

    def _take(self, max_records: int) -> list[SourceRecord]:
        now, arrival = time.monotonic(), time.time()
        if now - self._scanned >= TAIL_INTERVAL:
            self._scan(now)
        out: list[SourceRecord] = []
        for f in list(self._files):
            if os.fstat(f.file.fileno()).st_size < f.file.tell():  # truncated in place: read it from the start
                f.file.seek(0)
                f.offset, f.lines, f.partial = 0, deque(), bytearray()
            # The last line of a file gone for good will never get its newline: it ends with the file.
            final, at_end = f.gone_since is not None and now - max(f.gone_since, f.last_data) >= GONE_GRACE, False
            while len(out) < max_records:
                if not f.lines:
                    chunk = f.file.read(READ_BYTES)
                    if chunk:
                        f.partial += chunk
                        if b"\n" in chunk:
                            *complete, rest = bytes(f.partial).split(b"\n")
                            f.lines.extend(line + b"\n" for line in complete)
                            f.partial = bytearray(rest)
                        f.last_data, final = now, False
                        continue
                    at_end = True
                    if not (final and f.partial):
                        break
                    f.lines.append(bytes(f.partial))
                    f.partial = bytearray()
                raw = f.lines.popleft()
                out.append(text_record(raw, arrival, partial(self._where, f), "re-encode it as UTF-8"))
                f.offset += len(raw)
            if final and at_end and not f.lines and not f.partial:
                f.file.close()
                self._files.remove(f)
        return out

    def _where(self, f: _Tailed) -> str:
        return f"tail source {self.url}: the line at byte offset {f.offset} of {f.name} (inode {f.key[1]})"


def _crc(file: io.FileIO, length: int) -> int:
    """CRC-32 of the first ``length`` bytes of a file, -1 when it is shorter."""
    head = os.pread(file.fileno(), length, 0) if length else b""
    return zlib.crc32(head) if len(head) == length else -1
