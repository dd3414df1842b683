"""``tail:DIR``: the lines of the files in a directory, new lines and new files, across rotation."""

from __future__ import annotations

import fnmatch
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
GONE_GRACE = 2.0  # seconds a tailed file that left its directory stays open after its last new byte; also how long
# a new file that starts like a tracked one waits for that one's truncation (a copytruncate copy) before it is read
HEAD_BYTES = 256  # bytes at the start of a tailed file a position fingerprints: an inode may be reused
_CRC_CHUNK = 1 << 20  # bytes read at a time to check a file's prefix


@dataclass(eq=False)
class _Tailed:
    """A tailed file: ``offset`` is just past the last line returned, ``prefix_crc`` the CRC-32 of the bytes before
    it and ``head`` the first :data:`HEAD_BYTES` of them (what a copy of the file must start with); ``lines`` the
    complete lines read after it, ``partial`` the bytes after those (``file``'s read position is past all of them).
    ``truncated``: the file shrank under its read position; its buffered lines are returned, then it is read again
    from its start."""

    key: tuple[int, int]
    name: str
    file: io.FileIO
    offset: int
    last_data: float
    prefix_crc: int = 0
    head: bytes = b""
    lines: deque[bytes] = field(default_factory=deque)
    partial: bytearray = field(default_factory=bytearray)  # appended to: a long line in many chunks stays linear
    gone_since: float | None = None
    truncated: bool = False

    def buffered(self) -> bytes:
        """The bytes read but not returned: ``[offset, file.tell())``."""
        return b"".join(self.lines) + self.partial

    def advance(self, returned: list[bytes]) -> None:
        """Move ``offset``, ``prefix_crc`` and ``head`` past lines returned, in order, and empty the list (once per
        poll, not per line: a CRC call and three updates per line cost about a fifth of the source's time)."""
        if returned:
            joined = b"".join(returned)
            if self.offset < HEAD_BYTES:
                self.head += joined[: HEAD_BYTES - self.offset]
            self.prefix_crc = zlib.crc32(joined, self.prefix_crc)
            self.offset += len(joined)
            returned.clear()

    def restart(self) -> None:
        """Read the file again from its start (after a truncation, once the buffer is returned or adopted)."""
        self.file.seek(0)
        self.offset, self.prefix_crc, self.head, self.truncated = 0, 0, b"", False
        self.lines, self.partial = deque(), bytearray()


@dataclass(eq=False)
class _Held:
    """A new file that starts like the tracked file ``original``. When it holds every byte read from ``original``
    and that one is truncated within :data:`GONE_GRACE` seconds of ``since``, it is the copy of a copytruncate
    rotation; otherwise it is a file of its own, read from its start. ``verified`` is how far its bytes are known to
    equal ``original``'s, and ``crc`` the CRC-32 of them (so a long copy is read once, not at every listing)."""

    key: tuple[int, int]
    name: str
    file: io.FileIO
    original: _Tailed
    since: float
    verified: int = 0
    crc: int = 0


class TailSource(Source):
    """``tail:DIR[?glob=PATTERN]``: the text lines of the files of a directory (those whose names match PATTERN, when
    given), as they are written. Every tracked file holds a descriptor; a position is
    ``{"files": [{dev, ino, offset, head, crc, prefix_crc, name}, ...]}``.

    Rotation by rename loses and repeats nothing (files are tracked by inode). Rotation by copy and truncation
    (logrotate's ``copytruncate``) repeats nothing either: a new file that holds exactly the bytes read from a tracked
    file, appearing when that file is truncated, is its copy, read on from where the original was, and the original
    is read again from its start. A new file that starts like a tracked one waits up to :data:`GONE_GRACE` seconds for
    that file's truncation before it is read as a file of its own. Lines written between the copy and the truncation
    can be lost (logrotate warns of this) or, when hop read them from the original before the copy was seen, read
    twice; a ``glob`` that leaves out the rotated names (``glob=*.log``) avoids the question."""

    replayable = True

    def __init__(self, url: str, directory: str, glob: str | None = None) -> None:
        super().__init__(url)
        if not os.path.isdir(directory) or not os.access(directory, os.R_OK | os.X_OK):
            problem = "cannot be read; check its permissions" if os.path.isdir(directory) else "is not a directory"
            problem = problem if os.path.exists(directory) else "does not exist; create it or fix the path"
            raise SourceError(f"tail source {url}: {directory} {problem} (tail:DIR reads the files of a directory)")
        self.directory = directory
        self.glob = glob
        self._files: list[_Tailed] = []
        self._held: dict[tuple[int, int], _Held] = {}
        self._scanned = -math.inf  # monotonic time of the last listing
        # From seek(): (dev, ino) -> (offset, fingerprinted bytes, crc32 of them, crc32 of the bytes before offset or
        # None), applied when the file is next discovered.
        self._resume: dict[tuple[int, int], tuple[int, int, int, int | None]] = {}

    def _wait(self, timeout: float) -> None:
        time.sleep(min(TAIL_INTERVAL, timeout))

    def position(self) -> dict[str, Any]:
        files = []
        for f in self._files:  # the name is for people: resuming goes by inode
            (dev, ino), head = f.key, min(f.offset, HEAD_BYTES)
            crc = _crc(f.file, head)
            files.append({"dev": dev, "ino": ino, "offset": f.offset, "head": head, "crc": crc,
                          "prefix_crc": f.prefix_crc, "name": f.name})  # fmt: skip
        return {"files": files}

    def seek(self, position: Any) -> None:
        try:
            resume = {(int(e["dev"]), int(e["ino"])): (int(e["offset"]), int(e["head"]), int(e["crc"]),
                                                       None if e.get("prefix_crc") is None else int(e["prefix_crc"]))
                      for e in position["files"]}  # fmt: skip
        except (TypeError, KeyError, ValueError, AttributeError) as error:
            raise SourceError(f"tail source {self.url}: {position!r:.200} is not a tail source position") from error
        self._release()
        self._files, self._held, self._resume, self._scanned = [], {}, resume, -math.inf

    def _release(self) -> None:
        for file in [f.file for f in self._files] + [held.file for held in self._held.values()]:
            file.close()

    def _scan(self, now: float) -> None:
        """Note which tracked files are still in the directory (under which name); track new ones."""
        self._scanned = now
        try:
            entries = list(os.scandir(self.directory))
        except OSError as error:
            raise SourceError(f"tail source {self.url}: cannot list {self.directory} ({error.strerror})") from error
        present: dict[tuple[int, int], tuple[float, str]] = {}
        for entry in entries:
            if entry.name[0] in "._" or (self.glob is not None and not fnmatch.fnmatchcase(entry.name, self.glob)):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue  # removed or renamed since it was listed: the next scan sees where it went
            if stat.S_ISREG(st.st_mode):
                present[(st.st_dev, st.st_ino)] = (st.st_mtime, entry.name)
        for f in self._files:
            if f.key in present:
                f.name, f.gone_since = present.pop(f.key)[1], None
            elif f.gone_since is None:
                f.gone_since = now
        for key in list(self._held):  # waiting to be told a copy from a file of its own
            if present.pop(key, None) is None:
                self._held.pop(key).file.close()  # gone before it was read: a new file under that inode starts over
            else:
                self._decide(self._held[key], now)
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
            resume = self._resume.pop(key, None)
            # An inode can be reused by a new file: resume only when the fingerprinted head is the same.
            if resume is not None and resume[0] <= st.st_size and _crc(file, resume[1]) == resume[2]:
                offset, _, _, prefix_crc = resume
                if prefix_crc is None:  # a position written before positions carried it
                    prefix_crc = _crc(file, offset)
                self._track(key, name, file, offset, prefix_crc, now)
                continue
            original = self._started_like(file)
            if original is None:
                self._track(key, name, file, 0, 0, now)
            else:
                self._decide(_Held(key, name, file, original, now), now)

    def _track(self, key: tuple[int, int], name: str, file: io.FileIO, offset: int, prefix_crc: int,
               now: float, before: _Tailed | None = None) -> None:  # fmt: skip
        """Track a file from ``offset`` (``prefix_crc`` the CRC-32 of the bytes before it), read before ``before``."""
        file.seek(offset)
        head = os.pread(file.fileno(), min(offset, HEAD_BYTES), 0)
        at = len(self._files) if before is None else self._files.index(before)
        self._files.insert(at, _Tailed(key, name, file, offset, now, prefix_crc, head))

    def _started_like(self, file: io.FileIO) -> _Tailed | None:
        """The tracked file (with bytes read) whose first bytes a new file's agree with the longest, if any."""
        head, best, agreed = os.pread(file.fileno(), HEAD_BYTES, 0), None, -1
        for f in self._files:
            common = min(len(head), len(f.head))
            if f.file.tell() > 0 and head[:common] == f.head[:common] and common > agreed:
                best, agreed = f, common
        return best

    def _compare(self, held: _Held) -> bool | None:
        """True when a held file starts with every byte read from its original, or was found equal to its start and
        has not grown since (a copy, taken before lines that were returned since); None when it is shorter than
        what was returned from the original but starts like it (a copy still being written, perhaps); False when
        it differs."""
        f, fd = held.original, held.file.fileno()
        size, head = os.fstat(fd).st_size, os.pread(fd, HEAD_BYTES, 0)
        common = min(len(head), len(f.head))
        if head[:common] != f.head[:common]:
            return False
        if size < f.offset:  # being written, or a copy of less than was returned since: known equal up to verified
            return True if held.verified == size else None
        if f.offset < held.verified:  # the original started over: compare from the start
            held.verified, held.crc = 0, 0
        held.crc, held.verified = _crc(held.file, f.offset, held.verified, held.crc), f.offset
        if held.crc != f.prefix_crc:
            return False
        buffered = f.buffered()
        overlap = min(len(buffered), size - f.offset)
        return os.pread(fd, overlap, f.offset) == buffered[:overlap]

    def _decide(self, held: _Held, now: float) -> None:
        """Adopt a held file as its original's copy once that one is truncated; read it as a file of its own once
        it differs from its original, waited :data:`GONE_GRACE` seconds, or its original is gone; else hold it."""
        self._held.pop(held.key, None)
        original = held.original
        verdict = self._compare(held) if original in self._files else False
        if verdict is True and original.truncated:
            size = os.fstat(held.file.fileno()).st_size
            if size >= original.file.tell():  # the copy holds all that was read: the copy returns it, first
                self._track(held.key, held.name, held.file, original.offset, original.prefix_crc, now, original)
                original.restart()
            else:  # lines came after the copy and were read from the original: it returns them, the copy nothing
                self._track(held.key, held.name, held.file, size, _crc(held.file, size), now)
        elif verdict is not False and not original.truncated and now - held.since < GONE_GRACE:
            self._held[held.key] = held
        else:
            self._track(held.key, held.name, held.file, 0, 0, now)

    def _take(self, max_records: int) -> list[SourceRecord]:
        now, arrival = time.monotonic(), time.time()
        shrunk = False
        for f in self._files:
            if not f.truncated and os.fstat(f.file.fileno()).st_size < f.file.tell():
                f.truncated = shrunk = True  # a copy of it may have appeared: list the directory now
        if shrunk or now - self._scanned >= TAIL_INTERVAL:
            self._scan(now)
        out: list[SourceRecord] = []
        for f in list(self._files):
            # The last line of a file gone for good will never get its newline: it ends with the file.
            final, at_end = f.gone_since is not None and now - max(f.gone_since, f.last_data) >= GONE_GRACE, False
            taken: list[bytes] = []  # the lines returned from f in this call, past f.offset
            where = partial(self._where, f, taken)
            while len(out) < max_records:
                if not f.lines:
                    if f.truncated:  # what was read before the truncation is returned; then the file starts over
                        if f.partial:
                            f.lines.append(bytes(f.partial))
                            f.partial = bytearray()
                            continue
                        f.advance(taken)
                        f.restart()
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
                out.append(text_record(raw, arrival, where, "re-encode it as UTF-8"))
                taken.append(raw)
            f.advance(taken)
            if final and at_end and not f.lines and not f.partial:
                f.file.close()
                self._files.remove(f)
        return out

    def _where(self, f: _Tailed, taken: list[bytes]) -> str:
        """Where the line after ``taken`` is (called only for a bad line: summing the lengths before it costs)."""
        offset = f.offset + sum(map(len, taken))
        return f"tail source {self.url}: the line at byte offset {offset} of {f.name} (inode {f.key[1]})"


def _crc(file: io.FileIO, length: int, start: int = 0, crc: int = 0) -> int:
    """CRC-32 of bytes ``[start, length)`` of a file continuing ``crc`` (the CRC-32 of the bytes before ``start``),
    so by default of its first ``length`` bytes; -1 when the file is shorter."""
    while start < length:
        chunk = os.pread(file.fileno(), min(_CRC_CHUNK, length - start), start)
        if not chunk:
            return -1
        crc, start = zlib.crc32(chunk, crc), start + len(chunk)
    return crc
