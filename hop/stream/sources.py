"""Sources of continuous queries: unbounded (or replayed) streams of records, read by polling.

:func:`open_source` opens one from a URL; options follow the first ``?`` as ``key=value`` pairs joined by ``&``:

- ``tail:DIR`` reads every regular file in DIR whose name does not start with ``.`` or ``_`` as UTF-8 text lines,
  picking up lines appended later and files created later (read in order of ``(mtime, name)`` when first seen). Only
  complete lines are returned: a partial last line waits for its ``\\n``. Files are tracked by ``(st_dev, st_ino)``,
  not by name, and kept open, so rotation loses nothing: when ``app.log`` is renamed (inside DIR or out of it) and a
  new ``app.log`` created, the old file is read to its end and the new one from its start. A file that left DIR is
  closed once it has had no new bytes for :data:`GONE_GRACE` seconds (its last line is then returned even without a
  ``\\n``); a file truncated in place (copytruncate) is read again from its start.
- ``zmq:ENDPOINT`` binds a PULL socket (producers connect PUSH sockets); ``zmq+sub:ENDPOINT`` connects a SUB socket,
  subscribed to everything, to a publisher. Each frame is one record, a msgpack value, or with ``?format=text`` a
  UTF-8 text (one trailing line break removed). Binding ``tcp://HOST:*`` picks a free port; the attribute
  ``endpoint`` holds the bound address.
- ``tcp:HOST:PORT`` listens (port 0 picks a free port, the attribute ``port`` holds it) and accepts any number of
  clients, each sending UTF-8 text lines; a client's last line without ``\\n`` ends when it disconnects.
- ``replay:PATH[?rate=R][&loop=0|1]`` plays the lines of a file (text, ``.jsonl`` included: the caller parses) at R
  records per second of wall clock (default: as fast as possible; a consumer that falls behind catches up by at
  most one second's worth), from the start again at the end with ``loop=1``. The last line needs no ``\\n``.

Contracts shared by all sources: :meth:`Source.poll` never blocks longer than its timeout (plus a few ms) and returns
[] at once for ``max_records < 1``; a record that cannot be decoded raises :class:`SourceError` (naming the source
and where) from the poll that would have returned it, once the records before it have been returned; ``tail`` and
``replay`` raise it again on every poll (their position stays before the bad record), the socket sources drop it and
go on. Sources are not thread-safe. ``tail`` and ``replay`` are replayable: ``seek(position())`` on a fresh source
of the same URL continues right after the last record returned. ``zmq`` and ``tcp`` are not: their position is
``None`` and the records sent between a ``position()`` and a restart are lost (the caller reports the gap).
"""

from __future__ import annotations

import io
import math
import os
import selectors
import socket
import stat
import time
import zlib
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import parse_qsl

import msgpack
import zmq

READ_BYTES = 1 << 16  # read at a time from a file or socket; also the most frames taken from zmq at a time
TAIL_INTERVAL = 0.02  # seconds between two listings of a tailed directory (tracked files are read at every poll)
GONE_GRACE = 2.0  # seconds a tailed file that left its directory stays open after its last new byte
HEAD_BYTES = 256  # bytes at the start of a tailed file a position fingerprints: an inode may be reused
URL_FORMS = "tail:DIR, zmq:ENDPOINT, zmq+sub:ENDPOINT, tcp:HOST:PORT or replay:PATH[?rate=R&loop=0|1]"
_OPTIONS: dict[str, set[str]] = {"tail": set(), "tcp": set(), "replay": {"rate", "loop"}}
_OPTIONS["zmq"] = _OPTIONS["zmq+sub"] = {"format"}


@dataclass(frozen=True)
class SourceRecord:
    """One record: ``value`` is a text line (no line break) or a decoded msgpack value; ``nbytes`` its size as
    received (a line with its newline, a frame's length); ``arrival`` the ``time.time()`` at which it was read."""

    value: Any
    nbytes: int
    arrival: float


class SourceError(Exception):
    """A bad source URL or an unreadable source or record; the message names the URL or path and what to do."""


def _text(raw: bytes, where: str, hint: str) -> str:
    """Decode one line or frame as UTF-8 without its trailing ``\\n`` or ``\\r\\n``; errors name ``where``."""
    line = raw[:-1] if raw.endswith(b"\n") else raw
    try:
        return (line[:-1] if line.endswith(b"\r") else line).decode("utf-8")
    except UnicodeDecodeError as error:
        raise SourceError(f"{where} is not valid UTF-8 (its byte {error.start}: {error.reason}); {hint}") from None


class Source(ABC):
    """A stream of records read by polling (see the module docstring for the shared contracts)."""

    replayable: ClassVar[bool]

    def __init__(self, url: str) -> None:
        self.url = url
        self._closed = False

    def poll(self, max_records: int, timeout: float) -> list[SourceRecord]:
        """Up to max_records new records; waits at most ``timeout`` seconds (plus a few ms) for the first one and
        returns [] if none came. Raises :class:`SourceError` for an undecodable record or a closed source."""
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
                raw = f.lines[0]
                where = f"tail source {self.url}: the line at byte offset {f.offset} of {f.name} (inode {f.key[1]})"
                try:
                    out.append(SourceRecord(_text(raw, where, "re-encode it as UTF-8"), len(raw), arrival))
                except SourceError:
                    if out:  # return the lines before it; the next poll raises
                        break
                    raise
                f.lines.popleft()
                f.offset += len(raw)
            if final and at_end and not f.lines and not f.partial:
                f.file.close()
                self._files.remove(f)
        return out


def _crc(file: io.FileIO, length: int) -> int:
    """CRC-32 of the first ``length`` bytes of a file, -1 when it is shorter."""
    head = os.pread(file.fileno(), length, 0) if length else b""
    return zlib.crc32(head) if len(head) == length else -1


class _Queued(Source):
    """A source that is not replayable: received records wait in a queue, with decoding errors in their place."""

    replayable = False

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._ready: deque[SourceRecord | SourceError] = deque()

    def _take(self, max_records: int) -> list[SourceRecord]:
        # Receive only when nothing waits: a slow consumer leaves data in zmq's and the kernel's queues (backpressure).
        if not self._ready:
            self._wait(0.0)
        out: list[SourceRecord] = []
        while self._ready and len(out) < max_records:
            item = self._ready.popleft()
            if isinstance(item, SourceError):
                if out:  # return the records before it; the next poll raises
                    self._ready.appendleft(item)
                    break
                raise item
            out.append(item)
        return out

    def position(self) -> Any:
        return None

    def seek(self, position: Any) -> None:
        """Not replayable: the records sent in between are lost."""


class ZmqSource(_Queued):
    """``zmq:ENDPOINT`` (bound PULL socket) or ``zmq+sub:ENDPOINT`` (SUB socket connected to a publisher)."""

    def __init__(self, url: str, endpoint: str, subscribe: bool, text: bool) -> None:
        super().__init__(url)
        self._as_text = text
        self._socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB if subscribe else zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)  # close() must not wait for anything
        try:
            if subscribe:
                self._socket.setsockopt(zmq.SUBSCRIBE, b"")
                self._socket.connect(endpoint)
            else:
                self._socket.bind(endpoint)
        except zmq.ZMQError as error:
            self._socket.close()
            verb = "connect to" if subscribe else "bind (tcp://HOST:* picks a free port)"
            raise SourceError(f"zmq source {url}: cannot {verb} {endpoint} ({error}); fix the endpoint") from None
        self.endpoint: str = endpoint if subscribe else self._socket.getsockopt_string(zmq.LAST_ENDPOINT)

    def _wait(self, timeout: float) -> None:
        if not self._socket.poll(math.ceil(timeout * 1000), zmq.POLLIN):
            return
        arrival = time.time()
        for _ in range(READ_BYTES):
            try:
                frame = self._socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            where = f"zmq source {self.url}: a frame of {len(frame)} bytes starting {frame[:16]!r}"
            try:
                if self._as_text:
                    value = _text(frame, where, "producers must send UTF-8 text frames")
                else:
                    try:
                        value = msgpack.unpackb(frame, raw=False)
                    except (ValueError, TypeError, msgpack.UnpackException) as error:
                        hint = "send one msgpack value per frame, or add ?format=text to the URL for text frames"
                        raise SourceError(f"{where} is not a msgpack value ({error}); {hint}") from None
                self._ready.append(SourceRecord(value, len(frame), arrival))
            except SourceError as error:
                self._ready.append(error)

    def _release(self) -> None:
        self._socket.close(linger=0)


@dataclass(eq=False)
class _Client:
    sock: socket.socket
    peer: str
    partial: bytearray = field(default_factory=bytearray)


class TcpSource(_Queued):
    """``tcp:HOST:PORT``: text lines from any number of clients; non-blocking sockets and a selector, no threads."""

    def __init__(self, url: str, host: str, port: int) -> None:
        super().__init__(url)
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._server = socket.create_server((host, port), family=family, backlog=128)
        except OSError as error:
            hint = "pick a free port (0 picks one)"
            raise SourceError(f"tcp source {url}: cannot listen on {host}:{port} ({error.strerror}); {hint}") from None
        self._server.setblocking(False)
        self.host, self.port = host, int(self._server.getsockname()[1])
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._clients: set[_Client] = set()

    def _wait(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            if key.data is not None:
                self._read(key.data)
                continue
            try:  # one client per wake-up: the listening socket stays readable while more wait
                sock, address = self._server.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as error:
                raise SourceError(f"tcp source {self.url}: cannot accept a client ({error.strerror})") from error
            sock.setblocking(False)
            client = _Client(sock, f"{address[0]}:{address[1]}")
            self._clients.add(client)
            self._selector.register(sock, selectors.EVENT_READ, client)

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # reset by the client: the same as a disconnect
        lines: list[bytes] = []
        if data:
            client.partial += data
            if b"\n" in data:
                *complete, rest = bytes(client.partial).split(b"\n")
                lines, client.partial = [line + b"\n" for line in complete], bytearray(rest)
        else:  # a disconnect ends the last line
            lines = [bytes(client.partial)] if client.partial else []
            self._selector.unregister(client.sock)
            client.sock.close()
            self._clients.discard(client)
        arrival = time.time()
        for raw in lines:
            where = f"tcp source {self.url}: a line of {len(raw)} bytes from client {client.peer}"
            try:
                self._ready.append(SourceRecord(_text(raw, where, "send UTF-8 text lines"), len(raw), arrival))
            except SourceError as error:
                self._ready.append(error)

    def _release(self) -> None:
        for client in self._clients:
            client.sock.close()
        self._selector.close()
        self._server.close()


class ReplaySource(Source):
    """``replay:PATH``: a file's lines at a rate paced by wall clock; bounded unless it loops. A position is
    ``{"offset": byte offset, "line": line number}`` of the next line."""

    replayable = True

    def __init__(self, url: str, path: str, rate: float | None, loop: bool) -> None:
        super().__init__(url)
        try:
            self._file = open(path, "rb")  # noqa: SIM115 -- open until close()
        except OSError as error:
            raise SourceError(f"replay source {url}: cannot open {path} ({error.strerror}); fix the path") from None
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
        while len(out) < max_records:
            raw = self._file.readline()
            if not raw:
                if not self.loop or self._offset == 0:  # the end, or an empty file looping
                    break
                self._file.seek(0)
                self._offset = self._line = 0
                continue
            where = f"replay source {self.url}: line {self._line + 1} (byte offset {self._offset}) of {self.path}"
            try:
                out.append(SourceRecord(_text(raw, where, "re-encode the file as UTF-8"), len(raw), arrival))
            except SourceError:
                self._file.seek(self._offset)  # stay before the bad line
                if out:
                    break
                raise
            self._offset, self._line = self._offset + len(raw), self._line + 1
        self._played += len(out)
        return out

    def _wait(self, timeout: float) -> None:
        # Until the next record is due; with nothing due (an empty file looping), a little while.
        due = 0.0 if self._start is None or self.rate is None else self._start + self._played / self.rate
        time.sleep(min(max(due - time.monotonic(), 0.002), timeout))

    @property
    def exhausted(self) -> bool:
        return not self.loop and not self._closed and self._offset >= os.fstat(self._file.fileno()).st_size

    def position(self) -> dict[str, int]:
        return {"offset": self._offset, "line": self._line}

    def seek(self, position: Any) -> None:
        try:
            offset, line = int(position["offset"]), int(position["line"])
        except (TypeError, KeyError, ValueError) as error:
            raise SourceError(f"replay source {self.url}: {position!r:.200} is not a replay position") from error
        self._file.seek(offset)
        self._offset, self._line = offset, line
        self._start, self._played = None, 0  # pacing starts over at the next poll

    def _release(self) -> None:
        self._file.close()


def open_source(url: str) -> Source:
    """Open the source a URL names (forms in the module docstring); :class:`SourceError` for a bad URL."""
    scheme, _, rest = url.partition(":")
    target, _, query = rest.partition("?")
    if scheme not in _OPTIONS or not target:
        problem = f"unknown kind {scheme!r}" if scheme not in _OPTIONS else f"nothing after {scheme}:"
        raise SourceError(f"source URL {url!r}: {problem}; use {URL_FORMS}")
    try:
        options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=True)) if query else {}
    except ValueError:
        raise SourceError(f"source URL {url!r}: options {query!r} must be key=value pairs joined by &") from None
    for option in options:
        if option not in _OPTIONS[scheme]:
            known = ", ".join(sorted(_OPTIONS[scheme])) or "none"
            raise SourceError(f"source URL {url!r}: unknown option {option!r} for {scheme} (options: {known})")
    if scheme == "tail":
        return TailSource(url, target)
    if scheme in ("zmq", "zmq+sub"):
        kind = options.get("format", "msgpack")
        if kind not in ("msgpack", "text"):
            raise SourceError(f"source URL {url!r}: format must be msgpack (the default) or text, not {kind!r}")
        return ZmqSource(url, target, scheme == "zmq+sub", kind == "text")
    if scheme == "tcp":
        host, _, port = target.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise SourceError(f"source URL {url!r}: expected tcp:HOST:PORT with a port from 0 to 65535")
        return TcpSource(url, host.removeprefix("[").removesuffix("]"), int(port))
    try:
        rate = float(options["rate"]) if "rate" in options else None
    except ValueError:
        rate = -1.0
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise SourceError(f"source URL {url!r}: rate must be a positive number of records per second")
    if options.get("loop", "0") not in ("0", "1"):
        raise SourceError(f"source URL {url!r}: loop must be 0 or 1")
    return ReplaySource(url, target, rate, options.get("loop") == "1")
