"""``tail:DIR``: the lines of the files in a directory, new lines and new files, across rotation."""

from __future__ import annotations

import fnmatch
import io
import math
import os
import re
import shlex
import stat
import time
import zlib
from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from glob import escape as escape_glob
from typing import Any

from hop.inputs import MAX_LINE_BYTES
from hop.stream.sources.base import READ_BYTES, Source, SourceError, SourceRecord, text_record, too_long_record

__all__ = ["GONE_GRACE", "HEAD_BYTES", "IDLE_CHECK", "IDLE_CHECKS", "LISTED_PER_SECOND", "TAIL_INTERVAL", "TailSource"]

# A file that grows is read at every poll. One that does not is checked (for new bytes, for a truncation) less and
# less often, from TAIL_INTERVAL doubling up to IDLE_CHECK seconds or, with more than IDLE_CHECKS files, up to the
# number of files / IDLE_CHECKS seconds; and at once when a listing sees its size or mtime change. Checking each of
# 2,000 idle files at every poll took a third of a core; listing them every TAIL_INTERVAL, a stat call each, a fifth.
TAIL_INTERVAL = 0.02  # seconds between two listings of a tailed directory, at least
LISTED_PER_SECOND = 10_000  # entries listed a second, at most: a directory of more than 200 is listed less often
IDLE_CHECK = 1.0
IDLE_CHECKS = 2000
GONE_GRACE = 2.0  # seconds a tailed file that left its directory stays open after its last new byte; also how long
# a new file that starts like a tracked one waits for that one's truncation (a copytruncate copy) before it is read
HEAD_BYTES = 256  # bytes at the start of a tailed file a position fingerprints: an inode may be reused
_CRC_CHUNK = 1 << 20  # bytes read at a time to check a file's prefix
_Resume = tuple[int, int, int, int | None, bool, bool]
"""A position's entry for a file: offset, fingerprinted bytes, their CRC-32, the CRC-32 of the bytes before offset
(or None), whether the line at offset is being dropped (see ``_Tailed.dropping``) and whether the file is a rotated
copy (``_Tailed.rotated``)."""


def shown_name(name: str) -> str:
    """A file name as messages and positions hold it: a name that is not UTF-8 (``os.scandir`` gives its bytes as
    surrogates) with those bytes as ``\\xNN``. Its surrogates cannot be encoded: a checkpoint holding such a name
    failed the map (``UnicodeEncodeError``: surrogates not allowed), and so the job, for one file named in Latin-1 in
    the tailed directory. Positions resume by inode; the name is for people."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


@dataclass(eq=False)
class _Tailed:
    """A tailed file: ``offset`` is just past the last line returned, ``prefix_crc`` the CRC-32 of the bytes before
    it and ``head`` the first :data:`HEAD_BYTES` of them (what a copy of the file must start with); ``lines`` the
    complete lines read after it, ``partial`` the bytes after those (``file``'s read position is past all of them).
    ``truncated``: the file shrank under its read position; its buffered lines are returned, then it is read again
    from its start. ``dropping``: the line at ``offset`` is longer than ``max_line_bytes`` (its bad record was
    returned); its bytes up to its newline are consumed as they are read, kept nowhere, and count as returned
    (``offset``, ``prefix_crc`` and ``head`` move past them, so copies and resumed positions match). ``rotated``:
    the file is the copy of a copytruncate rotation, complete when its original was truncated, so a last line
    without a newline is a whole line (the writer writes the rest, if any, to the original)."""

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
    generation: int = 0  # how many times the file started over: what a held copy was compared with is void after
    dropping: bool = False
    rotated: bool = False
    due: float = -math.inf  # monotonic time it is next checked for new bytes and a truncation (see IDLE_CHECK)
    idle: float = 0.0  # seconds from that check to the next if it finds nothing new: doubles while it does not grow
    stamp: tuple[int, int] | None = None  # its size and mtime (ns) at the last listing: a change makes it due

    def buffered(self) -> bytes:
        """The bytes read but not returned: ``[offset, file.tell())``."""
        return b"".join(self.lines) + self.partial

    def known_head(self) -> bytes:
        """The file's first bytes as read (returned or not), at most :data:`HEAD_BYTES` of them."""
        return self.head if len(self.head) >= HEAD_BYTES else (self.head + self.buffered())[:HEAD_BYTES]

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

    def rewritten(self) -> bool:
        """Whether the file no longer holds what was read from it: it is shorter than the read position, or its
        first bytes changed (truncated and written again past the read position between two polls)."""
        if os.fstat(self.file.fileno()).st_size < self.file.tell():
            return True
        known = self.known_head()
        return bool(known) and os.pread(self.file.fileno(), len(known), 0) != known

    def restart(self) -> None:
        """Read the file again from its start (after a truncation, once the buffer is returned or adopted)."""
        self.file.seek(0)
        self.offset, self.prefix_crc, self.head, self.truncated, self.dropping = 0, 0, b"", False, False
        self.lines, self.partial, self.generation = deque(), bytearray(), self.generation + 1


@dataclass(eq=False)
class _Held:
    """A new file that starts like the tracked file ``original``. When it holds the bytes read from ``original`` and
    that one is truncated, it is the copy of a copytruncate rotation; when it has not grown for :data:`GONE_GRACE`
    seconds (``since`` is when it last grew, to ``size``) without that truncation, it is a file of its own, read
    from its start. Its first ``verified`` bytes are known to equal ``original``'s (of ``generation``), ``crc`` is
    their CRC-32: a long copy is read once, not at every listing."""

    key: tuple[int, int]
    name: str
    file: io.FileIO
    original: _Tailed
    since: float
    size: int = -1
    verified: int = 0
    crc: int = 0
    generation: int = 0


def _file_url(path: str) -> str:
    """The ``tail:DIR?glob=NAME`` URL that follows the one file ``path``, as a shell takes it: the name's glob
    characters escaped, its ``%`` and ``&`` percent-encoded (the URL's options decode ``%XX`` and end at ``&``), and
    the whole quoted for a shell if a character of it needs that (``&``, a space ...)."""
    folder, name = os.path.split(os.path.normpath(path))
    encoded = escape_glob(name).replace("%", "%25").replace("&", "%26")
    url = f"tail:{folder or '.'}?glob={encoded}"
    return url if _SHELL_SAFE.fullmatch(url) else shlex.quote(url)


_SHELL_SAFE = re.compile(r"[\w@%+=:,./?*\[\]-]+")
"""A word a POSIX shell passes on as written (its glob characters match no file named like a source URL)."""


class TailSource(Source):
    """``tail:DIR[?glob=PATTERN]``: the text lines of the files of a directory (those whose names match PATTERN, when
    given), as they are written. Every tracked file holds a descriptor; a position is
    ``{"files": [{dev, ino, offset, head, crc, prefix_crc, dropping, name}, ...]}``. A line longer than
    ``max_line_bytes`` is a bad record, and the rest of it up to its newline is dropped as it is read.

    Rotation by rename loses and repeats nothing (files are tracked by inode). Rotation by copy and truncation
    (logrotate's ``copytruncate``) repeats nothing either: a new file that holds the bytes read from a tracked file
    (those returned by their CRC-32, those read but not returned as they are), appearing when that file is
    truncated, is its copy, read on from where the original was, and the original is read again from its start. A
    new file that starts like a tracked one is held until that file's truncation or until it stopped growing
    :data:`GONE_GRACE` seconds ago, then read as a file of its own. A copy that appears while the source is away is
    recognised on :meth:`seek` from the position's ``prefix_crc``. Lines written between the copy and the truncation
    can be lost (logrotate warns of this); a copy of fewer bytes than were returned, first seen after the
    truncation, is taken for the copy (read from its end) when its first :data:`HEAD_BYTES` bytes are the
    original's, and read from its start, perhaps twice, when it is shorter. A ``glob`` that leaves out the rotated
    names (``glob=*.log``) avoids the question.

    A last line without a newline is not a record until its newline arrives, or until its file is rotated or gone
    and so will never get one: it is returned when its file is truncated (before the file starts over), when it
    ends a copytruncate copy (at once: the copy was complete when its original was truncated), and when its file
    left the directory and has not grown for :data:`GONE_GRACE` seconds. A file rotated by rename stays in the
    directory under its new name and its writer may still finish the line, so it waits for that or to be gone.

    A file that grows is read at every poll; one that does not is checked less and less often, and at once when a
    listing sees it change (see :data:`IDLE_CHECK`); a large directory is listed less often (:data:`LISTED_PER_SECOND`).
    """

    replayable = True

    def __init__(self, url: str, directory: str, glob: str | None = None, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        super().__init__(url)
        self.max_line_bytes = max_line_bytes
        if not os.path.isdir(directory) or not os.access(directory, os.R_OK | os.X_OK):
            problem = "cannot be read; check its permissions" if os.path.isdir(directory) else "is not a directory"
            problem = problem if os.path.exists(directory) else "does not exist; create it or fix the path"
            if os.path.isfile(directory):  # (tail -f takes a file: say how to follow one)
                problem += f"; to follow that one file, give its directory and its name: {_file_url(directory)}"
            raise SourceError(f"tail source {url}: {directory} {problem} (tail:DIR reads the files of a directory)")
        self.directory = directory
        self.glob = glob
        self._files: list[_Tailed] = []
        self._held: dict[tuple[int, int], _Held] = {}
        self._heads: _Heads | None = None  # the tracked files by their first bytes, during a listing
        self._scanned = -math.inf  # monotonic time of the last listing
        self._interval = TAIL_INTERVAL  # seconds from one listing to the next: more for a larger directory
        # From seek(): (dev, ino) -> its entry, applied when the file is next discovered.
        self._resume: dict[tuple[int, int], _Resume] = {}
        # Resumed positions whose file was truncated or rewritten while the source was away: a copytruncate copy
        # that appeared meanwhile holds their lines, and is read on from their offset.
        self._orphans: list[_Resume] = []

    def _wait(self, timeout: float) -> None:
        time.sleep(min(TAIL_INTERVAL, timeout))

    def _matches(self, name: str) -> bool:
        """Whether the glob takes the file ``name``: a name it matches as a shell pattern, or the glob itself, so
        that ``glob=NAME`` follows the file NAME even if its name holds ``*``, ``?`` or ``[`` (``glob=a[1].log``
        read ``a1.log``, never ``a[1].log``), as a batch input that exists is that file."""
        return name == self.glob or fnmatch.fnmatchcase(name, str(self.glob))

    def position(self) -> dict[str, Any]:
        files = []
        for f in self._files:  # the name is for people: resuming goes by inode
            (dev, ino), head = f.key, min(f.offset, HEAD_BYTES)
            crc = zlib.crc32(f.head[:head])  # of the bytes returned: the file may have been rewritten since
            files.append({"dev": dev, "ino": ino, "offset": f.offset, "head": head, "crc": crc,
                          "prefix_crc": f.prefix_crc, "dropping": f.dropping, "rotated": f.rotated,
                          "name": shown_name(f.name)})  # fmt: skip
        return {"files": files}

    def seek(self, position: Any) -> None:
        try:
            resume = {(int(e["dev"]), int(e["ino"])): (int(e["offset"]), int(e["head"]), int(e["crc"]),
                                                       None if e.get("prefix_crc") is None else int(e["prefix_crc"]),
                                                       bool(e.get("dropping", False)), bool(e.get("rotated", False)))
                      for e in position["files"]}  # fmt: skip
        except (TypeError, KeyError, ValueError, AttributeError) as error:
            raise SourceError(f"tail source {self.url}: {position!r:.200} is not a tail source position") from error
        self._release()
        self._files, self._held, self._resume, self._orphans, self._scanned = [], {}, resume, [], -math.inf
        self._heads = None

    def _release(self) -> None:
        for file in [f.file for f in self._files] + [held.file for held in self._held.values()]:
            file.close()

    def _scan(self, now: float) -> None:
        """Note which tracked files are still in the directory (under which name); track new ones."""
        self._scanned, self._heads = now, None  # (files were read since the last listing: their heads are void)
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            # Removed (or renamed away) while read: as for ``tail -F``, the files it tracked are read to their end,
            # and it is listed again until it is back. Failing the map failed the job: its retries found no directory.
            entries = []
        except OSError as error:
            raise SourceError(f"tail source {self.url}: cannot list {self.directory} ({error.strerror})") from error
        # (dev, ino) -> mtime, name, and size and mtime in ns: a tracked file whose own change is checked at once
        present: dict[tuple[int, int], tuple[float, str, tuple[int, int]]] = {}
        for entry in entries:
            if entry.name[0] in "._" or (self.glob is not None and not self._matches(entry.name)):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue  # removed or renamed since it was listed: the next scan sees where it went
            if stat.S_ISREG(st.st_mode):
                present[(st.st_dev, st.st_ino)] = (st.st_mtime, entry.name, (st.st_size, st.st_mtime_ns))
        self._interval = max(TAIL_INTERVAL, len(entries) / LISTED_PER_SECOND)
        for f in self._files:
            if f.key in present:
                _, f.name, stamp = present.pop(f.key)
                f.gone_since = None
                if stamp != f.stamp:  # grew, or was written or truncated: check it now, whatever its backoff
                    f.stamp, f.due = stamp, now
            elif f.gone_since is None:
                f.gone_since, f.due = now, now  # no listing sees it change now: read at every poll until closed
        for key in list(self._held):  # waiting to be told a copy from a file of its own
            if present.pop(key, None) is None:
                self._held.pop(key).file.close()  # gone before it was read: a new file under that inode starts over
            else:
                self._decide(self._held[key], now)
        # Files with a position first: one that cannot resume (truncated while the source was away) may have a copy.
        for key, (_, name, _) in sorted(present.items(), key=lambda item: (item[0] not in self._resume, item[1])):
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
            if resume is not None:
                if _continues(file, st.st_size, resume):
                    offset, _, _, prefix_crc, dropping, rotated = resume
                    prefix_crc = _crc(file, offset) if prefix_crc is None else prefix_crc
                    self._track(key, name, file, offset, prefix_crc, now, dropping=dropping, rotated=rotated)
                    continue
                self._orphans.append(resume)
            orphan = next((o for o in self._orphans if o[0] > 0 and _continues(file, st.st_size, o, True)), None)
            if orphan is not None:  # the copy of a file truncated while the source was away: read on from its offset
                self._orphans.remove(orphan)
                self._track(key, name, file, orphan[0], orphan[3] or 0, now, dropping=orphan[4], rotated=True)
            elif (original := self._started_like(file)) is None:
                self._track(key, name, file, 0, 0, now)
            else:
                self._decide(_Held(key, name, file, original, now), now)

    def _track(self, key: tuple[int, int], name: str, file: io.FileIO, offset: int, prefix_crc: int, now: float,
               before: _Tailed | None = None, dropping: bool = False, rotated: bool = False) -> None:  # fmt: skip
        """Track a file from ``offset`` (``prefix_crc`` the CRC-32 of the bytes before it), read before ``before``;
        ``dropping``: the line at ``offset`` is an overlong one, dropped up to its newline; ``rotated``: the file is
        a copytruncate copy (:attr:`_Tailed.rotated`)."""
        file.seek(offset)
        head = os.pread(file.fileno(), min(offset, HEAD_BYTES), 0)
        at = len(self._files) if before is None else self._files.index(before)
        tailed = _Tailed(key, name, file, offset, now, prefix_crc, head, dropping=dropping, rotated=rotated)
        self._files.insert(at, tailed)
        if self._heads is not None:
            self._heads.add(tailed)

    def _started_like(self, file: io.FileIO) -> _Tailed | None:
        """The tracked file (not empty) whose first bytes a new file's agree with the longest, if any (see
        :meth:`_Heads.started_like`)."""
        if self._heads is None:  # built once per listing: comparing each new file with each tracked one was O(n²)
            self._heads = _Heads()
            for f in self._files:
                self._heads.add(f)
        return self._heads.started_like(os.pread(file.fileno(), HEAD_BYTES, 0))

    def _compare(self, held: _Held, size: int) -> bool | None:
        """True when a held file of ``size`` bytes equals its original as far as both go (the bytes returned from
        the original by their CRC, the bytes read but not returned as they are); None when it is shorter than what
        was returned and not known equal to all of it (a copy still being written, or of fewer lines); False when
        it differs."""
        f, fd = held.original, held.file.fileno()
        if held.generation != f.generation:  # the original started over: compare from the start
            held.verified, held.crc, held.generation = 0, 0, f.generation
        if not _agree(os.pread(fd, HEAD_BYTES, 0), f.known_head()):
            return False
        if held.verified < f.offset:
            if size < f.offset:
                return True if held.verified == size else None
            crc = _crc(held.file, f.offset, held.verified, held.crc)
            if crc != f.prefix_crc:
                return False
            held.verified, held.crc = f.offset, crc
        buffered = f.buffered()
        start, end = held.verified - f.offset, min(len(buffered), size - f.offset)
        if end > start:
            piece = os.pread(fd, end - start, held.verified)
            if piece != buffered[start:end]:
                return False
            held.verified, held.crc = held.verified + len(piece), zlib.crc32(piece, held.crc)
        return True

    def _decide(self, held: _Held, now: float) -> None:
        """Adopt a held file as its original's copy once that one is truncated; read it as a file of its own once
        it differs from its original, stopped growing :data:`GONE_GRACE` seconds ago, or its original is gone;
        else hold it."""
        self._held.pop(held.key, None)
        if held.verified == 0:  # nothing known equal yet: as the file fills, another tracked file may fit better
            original = self._started_like(held.file)
            if original is None:
                self._track(held.key, held.name, held.file, 0, 0, now)
                return
            held.original = original
        original, size = held.original, os.fstat(held.file.fileno()).st_size
        if size != held.size:  # a copy being written: the wait counts from its last growth
            held.size, held.since = size, now
        verdict = self._compare(held, size) if original in self._files else False
        if verdict is not False and original.truncated:
            if verdict and size >= original.file.tell():  # the copy holds all that was read: it returns it, first
                self._track(held.key, held.name, held.file, original.offset, original.prefix_crc, now, original,
                            original.dropping, rotated=True)  # fmt: skip
                original.restart()
                self._heads = None  # its head is void
            elif verdict or size >= HEAD_BYTES:
                # A copy of less than was read (lines came after the copy): the original returns them, the copy
                # nothing. Also taken for a copy of fewer bytes than were returned, not all checked: it appeared
                # as its original was truncated and its first HEAD_BYTES bytes are the original's.
                self._track(held.key, held.name, held.file, size, _crc(held.file, size), now, rotated=True)
            else:
                self._track(held.key, held.name, held.file, 0, 0, now)
        elif verdict is not False and now - held.since < GONE_GRACE:
            self._held[held.key] = held
        else:
            self._track(held.key, held.name, held.file, 0, 0, now)

    def _take(self, max_records: int) -> list[SourceRecord]:
        now, arrival = time.monotonic(), time.time()
        if now - self._scanned >= self._interval:
            self._scan(now)  # (before the checks: a file it sees change is due now)
        for held in self._held.values():  # its original's truncation decides it: checked at every poll
            held.original.due = min(held.original.due, now)
        # Only the files due are checked and read (see IDLE_CHECK); one with lines to return is due.
        due = [f for f in self._files if f.due <= now]
        shrunk = False
        for f in due:
            if not f.truncated and f.rewritten():
                f.truncated = shrunk = True
        if shrunk:
            self._scan(now)  # a copy of it may have appeared, or be held: list the directory now
            due = [f for f in self._files if f.due <= now]
        out: list[SourceRecord] = []
        limit = self.max_line_bytes
        slowest = max(IDLE_CHECK, len(self._files) / IDLE_CHECKS)
        for f in due:
            # The last line of a file gone for good will never get its newline: it ends with the file (which is
            # closed then); so does a rotated copy's, which stays tracked while it is in the directory.
            final, at_end = f.gone_since is not None and now - max(f.gone_since, f.last_data) >= GONE_GRACE, False
            taken: list[bytes] = []  # the lines returned from f in this call, past f.offset
            where = partial(self._where, f, taken)
            at = f.offset  # of the next line: f.offset plus the lengths in taken
            while len(out) < max_records:
                if not f.lines:
                    if len(f.partial) > limit:  # the lines before it were returned: it is a bad record, dropped
                        f.advance(taken)
                        out.append(too_long_record(where(), limit, len(f.partial), arrival, f.name, f.offset))
                        f.advance([bytes(f.partial)])
                        f.partial, f.dropping, at = bytearray(), True, f.offset
                        continue
                    if f.truncated:  # what was read before the truncation is returned; then the file starts over
                        if f.partial:
                            f.lines.append(bytes(f.partial))
                            f.partial = bytearray()
                            continue
                        f.advance(taken)
                        f.restart()
                        at = 0
                    chunk = f.file.read(READ_BYTES)
                    if chunk:
                        f.last_data, final = now, False
                        if f.dropping:  # the rest of an overlong line: consumed up to its newline, kept nowhere
                            cut = chunk.find(b"\n") + 1
                            f.advance(taken)
                            f.advance([chunk[:cut] if cut else chunk])
                            at = f.offset
                            if not cut:
                                continue
                            f.dropping, chunk = False, chunk[cut:]
                        f.partial += chunk
                        if b"\n" in chunk:
                            *complete, rest = bytes(f.partial).split(b"\n")
                            f.lines.extend(line + b"\n" for line in complete)
                            f.partial = bytearray(rest)
                        continue
                    at_end = True
                    if not ((final or f.rotated) and f.partial):
                        break
                    f.lines.append(bytes(f.partial))
                    f.partial = bytearray()
                raw = f.lines.popleft()
                out.append(text_record(raw, arrival, where, "re-encode it as UTF-8", f.name, at, limit, at == 0))
                taken.append(raw)
                at += len(raw)
            f.advance(taken)
            if final and at_end and not f.lines and not f.partial:
                f.file.close()
                self._files.remove(f)
            elif at_end and f.last_data != now and f.gone_since is None:  # nothing new: checked later
                f.idle = min(max(2 * f.idle, TAIL_INTERVAL), slowest)
            else:  # it grew, or is not read to its end: read at the next poll
                f.idle = 0.0
            f.due = now + f.idle
        return out

    def _where(self, f: _Tailed, taken: list[bytes]) -> str:
        """Where the line after ``taken`` is (called only for a bad line: summing the lengths before it costs)."""
        return self._place(f.name, f.offset + sum(map(len, taken)))

    def _place(self, origin: str, offset: int) -> str:
        return f"tail source {self.url}: the line at byte offset {offset} of {shown_name(origin)}"


class _Heads:
    """The known first bytes of tracked files (:meth:`_Tailed.known_head`; of a file not read yet, what it holds:
    it and its copy can appear in the same listing), indexed to find the one a new file starts like without
    comparing it with each. Valid while no tracked file is read or starts over: one listing."""

    def __init__(self) -> None:
        self._files: dict[bytes, _Tailed] = {}  # a head -> the first file tracked with it
        self._sorted: list[bytes] = []  # the heads, sorted: those a new file's head starts follow it
        self._lengths: set[int] = set()

    def add(self, f: _Tailed) -> None:
        """Index a tracked file, after those indexed before it."""
        head = f.known_head() or os.pread(f.file.fileno(), HEAD_BYTES, 0)  # (empty: nothing read yet)
        if head and head not in self._files:
            self._files[head] = f
            insort(self._sorted, head)
            self._lengths.add(len(head))

    def started_like(self, head: bytes) -> _Tailed | None:
        """The tracked file whose head agrees with ``head`` (one starts with the other) the longest: one with that
        same head (the first tracked), else one whose head starts with it (the first by its bytes), else the one
        whose head is the longest that it starts with; None if none agrees."""
        at = bisect_left(self._sorted, head)
        if at < len(self._sorted) and self._sorted[at].startswith(head):
            return self._files[self._sorted[at]]
        for length in sorted(self._lengths, reverse=True):
            if length < len(head) and (f := self._files.get(head[:length])) is not None:
                return f
        return None


def _agree(a: bytes, b: bytes) -> bool:
    """Whether one of two byte strings starts with the other."""
    common = min(len(a), len(b))
    return a[:common] == b[:common]


def _continues(file: io.FileIO, size: int, resume: _Resume, whole: bool = False) -> bool:
    """Whether a file of ``size`` bytes holds what a position's entry read: its fingerprinted head (an inode can be
    reused by a new file), and with ``whole`` every byte before the offset (by their CRC; an entry without one never
    matches then)."""
    offset, head, crc, prefix_crc, _, _ = resume
    if offset > size or _crc(file, head) != crc:
        return False
    return not whole or (prefix_crc is not None and _crc(file, offset) == prefix_crc)


def _crc(file: io.FileIO, length: int, start: int = 0, crc: int = 0) -> int:
    """CRC-32 of bytes ``[start, length)`` of a file continuing ``crc`` (the CRC-32 of the bytes before ``start``),
    so by default of its first ``length`` bytes; -1 when the file is shorter."""
    while start < length:
        chunk = os.pread(file.fileno(), min(_CRC_CHUNK, length - start), start)
        if not chunk:
            return -1
        crc, start = zlib.crc32(chunk, crc), start + len(chunk)
    return crc
