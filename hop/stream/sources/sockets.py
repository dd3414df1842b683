"""``zmq:``/``zmq+sub:`` (ZeroMQ frames) and ``tcp:`` (text lines from clients): sources that cannot replay."""

from __future__ import annotations

import errno
import math
import selectors
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgpack
import zmq

from hop.gen.cli import unresolved_host
from hop.inputs import MAX_LINE_BYTES
from hop.stream.sources.base import READ_BYTES, Source, SourceError, SourceRecord, text_record, too_long_record
from shuffle import codec

__all__ = ["TcpSource", "Unreplayable", "ZmqSource", "unknown_host"]


class Unreplayable(Source):
    """A source that cannot re-read: its position is None and the records sent between a position and a restart
    are lost (the stream map reports the gap)."""

    replayable = False

    def position(self) -> Any:
        return None

    def seek(self, position: Any) -> None:
        """Not replayable: the records sent in between are lost."""


class ZmqSource(Unreplayable):
    """``zmq:ENDPOINT`` (bound PULL socket) or ``zmq+sub:ENDPOINT`` (SUB socket connected to a publisher). Each
    message is one record, its last frame (a topic or envelope before it is not data). A poll receives at most the
    messages it returns (the rest wait in zmq's queue: backpressure) and stamps each one's arrival as it is
    received."""

    def __init__(self, url: str, endpoint: str, subscribe: bool, text: bool) -> None:
        super().__init__(url)
        self._as_text = text
        self._socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB if subscribe else zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)  # close() must not wait for anything
        # ZeroMQ connects in the background and retries a host name that does not resolve for ever, without a
        # word: the job would run with nothing coming in. Resolve it here, as the tcp: source's listen does.
        unresolved = _unresolved_publisher(endpoint) if subscribe else None
        if unresolved is not None:
            self._socket.close()
            raise SourceError(f"zmq source {url}: cannot connect to {endpoint}: " + _publisher_unresolved(*unresolved))
        try:
            if subscribe:
                self._socket.setsockopt(zmq.SUBSCRIBE, b"")
                self._socket.connect(endpoint)
            else:
                self._socket.bind(endpoint)
        except zmq.ZMQError as error:
            self._socket.close()
            verb, hint = ("connect to", "fix the endpoint") if subscribe else ("bind", _bind_hint(endpoint, error))
            raise SourceError(f"zmq source {url}: cannot {verb} {endpoint} ({error}); {hint}") from None
        self.endpoint: str = endpoint if subscribe else self._socket.getsockopt_string(zmq.LAST_ENDPOINT)
        if not subscribe:
            self.listening = f"zmq:{self.endpoint}"

    def _take(self, max_records: int) -> list[SourceRecord]:
        # Frames wait in zmq's queue, not ours, and each is stamped when taken: a backlog drained at once and read
        # over many polls would carry one old arrival time while the arrival-time watermark moved on (late records).
        out: list[SourceRecord] = []
        while len(out) < max_records:
            try:
                # A message is one record, its last frame: the frames before it are a topic or an envelope (a PUB's
                # send_multipart([topic, payload])), routing, not data; taken as records of their own, the topic
                # counted as a word of a text stream or decoded as a msgpack value ('a' is the int 97).
                # (Frame.more: a third of recv_multipart's cost a message)
                part = self._socket.recv(zmq.NOBLOCK, copy=False)
                while part.more:
                    part = self._socket.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            out.append(self._record(part.bytes, time.time()))
        return out

    def _wait(self, timeout: float) -> None:
        self._socket.poll(math.ceil(timeout * 1000), zmq.POLLIN)

    def _record(self, frame: bytes, arrival: float) -> SourceRecord:
        def where() -> str:
            return f"zmq source {self.url}: a frame of {len(frame)} bytes starting {frame[:16]!r}"

        if self._as_text:
            return text_record(frame, arrival, where, "producers must send UTF-8 text frames")
        try:
            # As the engine packs (hop's own --sink too): plain msgpack, plus ints past 64 bits as extension type
            # 1; arrays as tuples, as a jsonl record's and as everything that crossed the shuffle.
            return SourceRecord(codec.unpackb(frame), len(frame), arrival)
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            hint = "send one msgpack value per frame, or add ?format=text to the URL for text frames"
            # msgpack's FormatError (a reserved type byte, 0xc1) and StackError (nested too deep) have no message
            reason = str(error) or type(error).__name__
            if isinstance(error, msgpack.FormatError):
                reason += ": a reserved type byte, which no msgpack value has"
            return SourceRecord(None, len(frame), arrival, f"{where()} is not a msgpack value ({reason}); {hint}")

    def _release(self) -> None:
        self._socket.close(linger=0)


def _bind_hint(endpoint: str, error: zmq.ZMQError) -> str:
    """What to do about a ``zmq:`` endpoint ZeroMQ could not bind: told by what is wrong with it, the host (which
    ZeroMQ takes for an interface name, then a host name, and calls 'No such device' when it is neither) apart from
    the port ("tcp://HOST:* picks a free port" was said of a host that does not resolve)."""
    if error.errno == errno.ENODEV and endpoint.startswith("tcp://"):
        return _unknown_bind_host(endpoint, unresolved_host(endpoint))
    if error.errno == errno.ENOENT and endpoint.startswith("ipc://"):
        return "the socket file's directory does not exist: create it or fix the path"
    if error.errno == errno.EADDRNOTAVAIL:
        return (
            "that address is not one of the host the map runs on: bind one of its addresses (tcp://*:PORT: every "
            "interface)"
        )
    if error.errno == errno.EADDRINUSE:
        return "the port is taken: pick a free port (tcp://HOST:* picks one)"
    return "fix the endpoint"


def _unknown_bind_host(endpoint: str, unresolved: tuple[str, str] | None) -> str:
    """Why ``tcp://HOST:PORT`` cannot be bound when HOST is no interface name and does not resolve, and what to bind."""
    host = endpoint.removeprefix("tcp://").rpartition(":")[0]
    why = f" ({unresolved[1]})" if unresolved else ""
    return (
        f"host {host!r} is neither a network interface of the host the map runs on nor a name that resolves{why}; "
        "bind one of its addresses or interfaces (tcp://*:PORT: every interface, tcp://127.0.0.1:PORT: this host "
        "only, tcp://eth0:PORT)"
    )


def unknown_host(url: str) -> str | None:
    """Why a ``zmq:``, ``zmq+sub:`` or ``tcp:`` source URL names a host this host cannot bind or reach: one that
    does not resolve (and, for a ``zmq:`` bind, is no interface name either), in the words its map would fail with;
    else None (also for any other URL, and when the resolver cannot answer for now). For ``hop run`` on its embedded
    cluster, whose maps run here, to refuse it before the job starts (the map would fail it once running)."""
    scheme, _, target = url.partition(":")
    endpoint = target.partition("?")[0]
    if scheme == "zmq+sub" and (unresolved := _unresolved_publisher(endpoint)) is not None:
        return f"zmq source {url}: cannot connect to {endpoint}: " + _publisher_unresolved(*unresolved)
    interfaces = {name for _, name in socket.if_nameindex()} if scheme == "zmq" else set()  # (bound by name)
    if scheme == "zmq" and (unresolved := unresolved_host(endpoint)) is not None and unresolved[0] not in interfaces:
        return f"zmq source {url}: cannot bind {endpoint}: " + _unknown_bind_host(endpoint, unresolved)
    if scheme == "tcp" and (unresolved := unresolved_host("tcp://" + endpoint)) is not None:
        host, port = endpoint.rpartition(":")[::2]
        return f"tcp source {url}: cannot listen on {host}:{port} ({unresolved[1]}); " + _TCP_NAME_HINT
    return None


def unresolved_subscriber(endpoint: str) -> str | None:
    """Why a ``--sink`` endpoint's host does not resolve (reducers connect their PUB sockets to it), or None."""
    unresolved = _unresolved_publisher(endpoint)  # (the same endpoint forms: tcp://[IFACE;]HOST:PORT)
    if unresolved is None:
        return None
    host, reason = unresolved
    return f"host {host!r} does not resolve ({reason}); fix the host name, or give the subscriber's IP address"


def _publisher_unresolved(host: str, reason: str) -> str:
    return f"host {host!r} does not resolve ({reason}); fix the host name, or give the publisher's IP address"


def _unresolved_publisher(endpoint: str) -> tuple[str, str] | None:
    """The host of a ``tcp://`` endpoint to connect to as written and why it does not resolve, or None (it does,
    or the endpoint is not tcp). ``tcp://IFACE;HOST:PORT`` names the local side first: the host is after the ";"."""
    if not endpoint.startswith("tcp://"):
        return None
    return unresolved_host("tcp://" + endpoint.removeprefix("tcp://").split(";")[-1])


_TCP_NAME_HINT = "fix the host name or address"

_NAME_ERRORS = {
    getattr(socket, name) for name in ("EAI_NONAME", "EAI_AGAIN", "EAI_FAIL", "EAI_NODATA") if hasattr(socket, name)
}
"""``getaddrinfo``'s codes for a host name that does not resolve."""


@dataclass(eq=False)
class _Client:
    sock: socket.socket
    peer: str
    partial: bytearray = field(default_factory=bytearray)
    dropping: bool = False  # past max_line_bytes of one line: what comes up to its newline is dropped
    offset: int = 0  # in the bytes received from the client, of the first byte of partial (or of what is dropped)


ACCEPTS_PER_WAKE = 1024
"""Clients a ``tcp:`` source accepts at most when its listening socket wakes it (the queue it listens with holds
128); the clients already connected are read in between."""


class TcpSource(Unreplayable):
    """``tcp:HOST:PORT``: text lines from any number of clients; non-blocking sockets and a selector, no threads."""

    def __init__(self, url: str, host: str, port: int, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        super().__init__(url)
        self.max_line_bytes = max_line_bytes
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            self._server = socket.create_server((host, port), family=family, backlog=128)
        except OSError as error:
            # A host name that does not resolve is no busy port ("pick a free port" sent users the wrong way).
            # create_server re-raises getaddrinfo's gaierror as a plain OSError, keeping its EAI_* code.
            if isinstance(error, socket.gaierror) or error.errno in _NAME_ERRORS:
                hint = _TCP_NAME_HINT
            elif error.errno == errno.EADDRNOTAVAIL:
                hint = "listen on an address of this host (0.0.0.0: every interface)"
            else:
                hint = "pick a free port (0 picks one)"
            raise SourceError(f"tcp source {url}: cannot listen on {host}:{port} ({error.strerror}); {hint}") from None
        self._server.setblocking(False)
        self.host, self.port = host, int(self._server.getsockname()[1])
        self.listening = f"tcp:{host}:{self.port}"
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._server, selectors.EVENT_READ, None)
        self._clients: set[_Client] = set()
        self._ready: deque[SourceRecord] = deque()  # lines received and not yet returned

    def _take(self, max_records: int) -> list[SourceRecord]:
        # Receive only when nothing waits: a slow consumer leaves data in the kernel's queues (backpressure).
        if not self._ready:
            self._wait(0.0)
        return [self._ready.popleft() for _ in range(min(max_records, len(self._ready)))]

    def _wait(self, timeout: float) -> None:
        for key, _ in self._selector.select(timeout):
            if key.data is not None:
                self._read(key.data)
                continue
            self._accept()

    def _accept(self) -> None:
        """Accept every client waiting (up to :data:`ACCEPTS_PER_WAKE`). One a wake-up, as it was, took one a
        poll, since a poll returns once lines are ready: 2,000 clients of one line each took 15.5 s, their
        connects stalling in a full listen queue (the kernel drops their SYNs, and they retry a second later)."""
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, address = self._server.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
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
        arrival = time.time()
        if data:
            if client.dropping:  # the rest of an overlong line: nothing of it is kept
                cut = data.find(b"\n")
                if cut < 0:
                    client.offset += len(data)
                    return
                client.dropping, data, client.offset = False, data[cut + 1 :], client.offset + cut + 1
            client.partial += data
            if b"\n" in data:
                *complete, rest = bytes(client.partial).split(b"\n")
                lines, client.partial = [line + b"\n" for line in complete], bytearray(rest)
            if len(client.partial) > self.max_line_bytes:  # a client that sends no newline must not fill memory
                dropped, client.partial, client.dropping = len(client.partial), bytearray(), True
                self._append(lines, arrival, client)
                where, limit = self._place(client.peer, client.offset), self.max_line_bytes
                self._ready.append(too_long_record(where, limit, dropped, arrival, client.peer, client.offset))
                client.offset += dropped
                return
        else:  # a disconnect ends the last line
            lines = [bytes(client.partial)] if client.partial else []
            self._selector.unregister(client.sock)
            client.sock.close()
            self._clients.discard(client)
        self._append(lines, arrival, client)

    def _append(self, lines: list[bytes], arrival: float, client: _Client) -> None:
        """Queue a client's complete lines, which start at ``client.offset``, and move it past them."""
        at, peer, limit = client.offset, client.peer, self.max_line_bytes
        for raw in lines:
            where = partial(self._place, peer, at)
            self._ready.append(text_record(raw, arrival, where, "send UTF-8 text lines", peer, at, limit))
            at += len(raw)
        client.offset = at

    def _place(self, origin: str, offset: int) -> str:
        return f"tcp source {self.url}: the line at byte offset {offset} from client {origin}"

    def _release(self) -> None:
        for client in self._clients:
            client.sock.close()
        self._selector.close()
        self._server.close()
