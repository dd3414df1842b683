"""Job-to-job pipelining: a reduce attempt's output streamed to the map task of the next job that reads it.

In a pipeline (a multi-step job, or a list of jobs) map task ``i`` of a downstream job reads reduce partition ``i``
of the job before it. The downstream map attempt binds a ROUTER socket (:class:`PipeReceiver`) and announces it
(``pipe_ready``); the coordinator tells the upstream reduce attempt of that partition (``pipe_at``), whose
:class:`PipeSender` then sends its output file's bytes as they are written: complete lines only, in messages of up to
``BLOCK_BYTES``, each acknowledged (at most ``CREDITS`` in flight), then an end marker. The upstream still writes its
output file, under a scratch directory unless ``--keep-intermediate``: it is what a downstream retry, or a downstream
map that starts after the upstream partition committed (the pipeline degrades to staged), reads instead. An upstream
attempt waits a bounded time (``PipeSender.finish``) for a slow downstream map to take the end of its stream, then
commits: the map reads the rest from that file, on from the first byte it was not sent, losing nothing it did. It
commits at once when a task waits for its slot (the coordinator's ``pipe_release``).

Wire format, downstream-bound: two frames, a msgpack header ``{attempt, seq, end}`` (``attempt``: the upstream reduce
attempt) and the bytes (lines ``json(key) TAB json(value)``); upstream-bound: one frame, the ASCII ``seq``, per
message stored. A downstream attempt that sees bytes of two upstream attempts fails (retryable): the coordinator
restarts it when an upstream attempt it read from fails. The receiver keeps its latest :data:`RECENT_BLOCKS` blocks
(or the name of the file it read) for a map whose output the shuffle cannot encode, to find the record again.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import zmq

from hop.inputs import Split, iter_records, parse_output_line

__all__ = ["BLOCK_BYTES", "CREDITS", "PipeBroken", "PipeReceiver", "PipeSender"]

BLOCK_BYTES = 1 << 20
CREDITS = 4
RECENT_BLOCKS = 8
"""Blocks a :class:`PipeReceiver` keeps, the latest (up to this many times ``BLOCK_BYTES`` of memory, nothing per
record), for a map that failed to name the record that made it fail (:meth:`PipeReceiver.recent_records`)."""


class PipeBroken(RuntimeError):
    """The upstream attempt this map was reading from is gone; the attempt must run again (retryable)."""


class PipeSender:
    """The upstream side: streams a growing output file to the downstream map attempt that reads it."""

    def __init__(
        self, path: Path, attempt: int, flush: Callable[[], None], opener: Callable[[str, int], int] | None = None
    ) -> None:
        """``opener``: ``open``'s, to read ``path`` (a reducer's part, in the output directory it holds open)."""
        self.path = path
        self._opener = opener
        self.attempt = attempt
        self._flush = flush
        self._socket: zmq.Socket | None = None
        self._sent = 0
        self._seq = 0
        self._acked = 0
        self._ended = False
        self.address: str | None = None

    def connect(self, address: str) -> None:
        """Stream to ``address`` (a new downstream attempt starts from the beginning of the file)."""
        if address == self.address:
            return
        self.close()
        socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(address)
        self._socket, self.address = socket, address
        self._sent = self._seq = self._acked = 0
        self._ended = False

    def pump(self, deadline: float | None = None) -> bool:
        """Send what was written since the last call, as credits allow; with a ``deadline`` (``time.monotonic()``),
        wait for credits until then to send everything. True if everything written so far was sent."""
        socket = self._socket
        if socket is None:
            return False
        self._flush()
        with open(self.path, "rb", opener=self._opener) as file:
            size = os.fstat(file.fileno()).st_size
            while self._sent < size:
                self._take_acks(0)
                if self._seq - self._acked >= CREDITS:
                    if deadline is None or time.monotonic() >= deadline:
                        return False
                    self._take_acks(100)
                    continue
                file.seek(self._sent)
                data = file.read(min(BLOCK_BYTES, size - self._sent))
                cut = data.rfind(b"\n") + 1
                if not cut and len(data) < size - self._sent:
                    # One line longer than a block: it goes whole, in one message, as far as it is written.
                    data += file.readline(size - self._sent - len(data))
                    cut = len(data) if data.endswith(b"\n") else 0
                if not cut:
                    return False  # a line not written completely yet
                self._send(data[:cut], end=False)
                self._sent += cut
        return True

    def finish(self, timeout: float = 60.0, follow: Callable[[], None] | None = None) -> bool:
        """Send the rest and the end marker and wait until all of it is acknowledged: True if that happened within
        ``timeout`` seconds. ``follow`` runs between waits: if it calls :meth:`connect` with a new address (the
        downstream attempt was replaced), the file is sent there from the start. False leaves the downstream to
        read the committed file instead."""
        deadline = time.monotonic() + timeout
        while True:
            if follow is not None:
                follow()
            if self._socket is None:
                return False
            if not self._ended and self.pump(deadline=min(deadline, time.monotonic() + 0.1)):
                self._send(b"", end=True)
                self._ended = True
            if self._ended and self._acked >= self._seq:
                return True
            if time.monotonic() >= deadline:
                return False
            self._take_acks(100)

    def _send(self, data: bytes, end: bool) -> None:
        assert self._socket is not None
        header = msgpack.packb({"attempt": self.attempt, "seq": self._seq, "end": end})
        self._socket.send_multipart([header, data])
        self._seq += 1

    def _take_acks(self, timeout_ms: int) -> None:
        socket = self._socket
        if socket is None:
            return
        if timeout_ms and not socket.poll(timeout_ms):
            return
        while True:
            try:
                socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._acked += 1

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
        self._socket, self.address = None, None


class PipeReceiver:
    """The downstream side: a map attempt's input, streamed from an upstream reduce attempt or read from the file
    it committed."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        port: int = self._socket.bind_to_random_port(f"tcp://{host}")
        self.address = f"tcp://{host}:{port}"
        self.upstream_attempt: int | None = None
        self.received_bytes = 0
        self.file_bytes = 0
        """Bytes read from the committed upstream file instead (the pipeline degraded to staged for this map)."""
        self._file: str | None = None
        self._file_size = 0
        self._position: list[tuple[int, str]] = []
        """The byte offset (and line) of the pair yielded last, as :func:`hop.inputs.iter_records` fills it."""
        self._recent: deque[tuple[int, str]] = deque(maxlen=RECENT_BLOCKS)
        """The latest blocks streamed, with the byte offset of each in the stream."""

    def records(
        self,
        control: zmq.Socket,
        take_control: Callable[[], dict[str, Any] | None],
        committed: str | None,
        read_line: list[tuple[int, str]] | None = None,
    ) -> Iterator[tuple[Any, Any]]:
        """Yield the upstream partition's pairs: from ``committed`` (a committed output file) if given or if the
        coordinator names one (``pipe_file``) before any bytes arrived, else as the upstream attempt streams them.
        A ``pipe_file`` naming the file of the attempt that was streaming (its ``attempt``: that attempt committed
        before this map took all of it, the map being slower than the upstream waits for) is read from the first
        byte not streamed: what was streamed is that file's beginning. ``read_line``, if given, holds the byte
        offset and line of the pair yielded last, as :func:`hop.inputs.iter_records` fills it."""
        if read_line is None:
            read_line = []
        self._position = read_line
        if committed is not None:
            yield from self._read_file(committed, read_line)
            return
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(control, zmq.POLLIN)
        offset = 0
        while True:
            events = dict(poller.poll(1000))
            # Every turn, not only when the worker wrote: reading the control socket is also where a task whose
            # worker died exits (no bytes may ever come: a replacement attempt was given another address).
            while (message := take_control()) is not None:
                if message.get("type") != "pipe_file":
                    continue
                if self.upstream_attempt is None:
                    yield from self._read_file(message["path"], read_line)
                    return
                if message.get("attempt") == self.upstream_attempt:
                    yield from self._read_file(message["path"], read_line, start=offset)
                    return
            if self._socket not in events:
                continue
            received = _pipe_message(self._socket.recv_multipart())
            if received is None:
                continue  # not a block of a pipe (something else connected to this port): nobody to answer
            sender, header, data = received
            if self.upstream_attempt is None:
                self.upstream_attempt = header["attempt"]
            elif header["attempt"] != self.upstream_attempt:
                raise PipeBroken(
                    f"upstream reduce attempt {self.upstream_attempt} was replaced by attempt {header['attempt']}"
                )
            self._socket.send_multipart([sender, b"%d" % header["seq"]])
            if header["end"]:
                return
            self.received_bytes += len(data)
            text = data.decode("utf-8")
            self._recent.append((offset, text))
            yield from _block_records(text, offset, read_line)
            offset += len(data)  # (a block holds whole lines)

    def _read_file(
        self, path: str, read_line: list[tuple[int, str]] | None = None, start: int = 0
    ) -> Iterator[tuple[Any, Any]]:
        """The pairs of the committed file at ``path`` from byte ``start`` (the start of a line) on."""
        size = os.path.getsize(path)
        self._file, self._file_size, self.file_bytes = path, size, size - start
        return iter_records(Split(path, start, size - start), "output", read_line=read_line)

    def taken_bytes(self) -> int:
        """The bytes of the upstream partition taken so far: the offset of the pair yielded last."""
        return self._position[0][0] if self._position else 0

    def taken_fraction(self) -> float:
        """The fraction taken so far: of the upstream partition once it is read from the committed file (its size
        is the partition's), else of the bytes streamed so far (a share of what is written yet: the coordinator
        weighs it by the upstream reduce's progress, or divides :meth:`taken_bytes` by the size it reports)."""
        whole = self._file_size if self._file is not None else self.received_bytes
        return min(1.0, self.taken_bytes() / whole) if whole else 0.0

    def recent_records(self) -> Iterator[tuple[Any, Any]]:
        """The records :meth:`records` gave that can be read again, for a map that failed to find the one that made
        it fail (nothing is kept per record): all of them if they came from a committed file, else those of the
        latest :data:`RECENT_BLOCKS` blocks streamed."""
        if self._file is not None:  # (from its start: a record streamed before the rest was read there is in it)
            yield from iter_records(Split(self._file, 0, os.path.getsize(self._file)), "output")
            return
        for offset, text in self._recent:
            yield from _block_records(text, offset)

    def close(self) -> None:
        self._socket.close(linger=0)


def _block_records(text: str, offset: int, read_line: list[tuple[int, str]] | None = None) -> Iterator[tuple[Any, Any]]:
    """The pairs of a block of whole output lines that starts at byte ``offset`` of the stream (``read_line``: as
    :meth:`PipeReceiver.records` says)."""
    for line in text.split("\n")[:-1]:
        pair = parse_output_line(line, "pipe", offset)
        if read_line is not None:
            read_line[:] = [(offset, line)]
        yield pair
        offset += len(line.encode("utf-8")) + 1


def _pipe_message(frames: list[bytes]) -> tuple[bytes, dict[str, Any], bytes] | None:
    """A message a pipe's receiving socket took, as ``(sender, header, data)`` if it is a block as
    :class:`PipeSender` sends it; ``None`` for anything else that connected to the port (it failed the map)."""
    if len(frames) != 3:
        return None
    sender, header_frame, data = frames
    try:
        header = msgpack.unpackb(header_frame)
    except (ValueError, TypeError):  # (msgpack's errors are ValueErrors; a map with a list key is a TypeError)
        return None
    if not isinstance(header, dict) or type(header.get("attempt")) is not int or type(header.get("seq")) is not int:
        return None
    if type(header.get("end")) is not bool:
        return None
    return sender, header, data
