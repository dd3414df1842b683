"""Job-to-job pipes (hop.pipe) over real ZeroMQ sockets: what an upstream reduce does when its downstream map
attempt is gone or replaced while it finishes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

import hop.pipe
from hop.pipe import BLOCK_BYTES, CREDITS, PipeReceiver, PipeSender


@pytest.fixture()
def output(tmp_path: Path) -> Path:
    """An upstream reduce's finished output: more blocks than the sender may have unacknowledged."""
    path = tmp_path / "part-00000"
    line_count = (CREDITS + 2) * BLOCK_BYTES // 20
    with open(path, "w", encoding="utf-8") as file:
        file.writelines(f'"key-{i:08d}"\t{i}\n' for i in range(line_count))
    return path


@pytest.fixture()
def control() -> Iterator[zmq.Socket]:
    """The task's control socket the receiver also polls (nothing arrives on it here)."""
    socket = zmq.Context.instance().socket(zmq.PAIR)
    socket.bind("inproc://pipe-test-control")
    yield socket
    socket.close(linger=0)


def _receive_all(receivers: list[PipeReceiver], control: zmq.Socket, pairs: list[Any], ready: threading.Event) -> None:
    receiver = PipeReceiver()
    receivers.append(receiver)
    ready.set()
    try:
        pairs.extend(receiver.records(control, lambda: None, None))
    finally:
        receiver.close()


def test_finish_gives_up_at_its_timeout_when_the_downstream_is_gone(output: Path) -> None:
    gone = zmq.Context.instance().socket(zmq.ROUTER)
    port = gone.bind_to_random_port("tcp://127.0.0.1")
    sender = PipeSender(output, attempt=0, flush=lambda: None)
    try:
        sender.connect(f"tcp://127.0.0.1:{port}")
        sender.pump()
        assert gone.poll(5000), "the first block arrives"
        gone.recv_multipart()
        gone.close(linger=0)  # the downstream attempt died: no acknowledgement will ever come
        began = time.monotonic()
        assert sender.finish(timeout=1.0) is False
        assert time.monotonic() - began < 3.0, "finish is bounded by its timeout"
    finally:
        sender.close()
        gone.close(linger=0)


def test_finish_follows_a_replacement_downstream_and_sends_everything_there(output: Path, control: zmq.Socket) -> None:
    gone = zmq.Context.instance().socket(zmq.ROUTER)
    port = gone.bind_to_random_port("tcp://127.0.0.1")
    receivers: list[PipeReceiver] = []
    pairs: list[Any] = []
    ready = threading.Event()
    sender = PipeSender(output, attempt=3, flush=lambda: None)
    reader: threading.Thread | None = None
    try:
        sender.connect(f"tcp://127.0.0.1:{port}")
        sender.pump()  # up to CREDITS blocks go to the attempt that is about to die
        gone.close(linger=0)
        reader = threading.Thread(target=_receive_all, args=(receivers, control, pairs, ready))
        reader.start()
        assert ready.wait(10)
        replacement = receivers[0].address
        calls = []

        def follow() -> None:  # what the reduce does on pipe_at: the coordinator named the replacement
            calls.append(1)
            if len(calls) == 3:
                sender.connect(replacement)

        assert sender.finish(timeout=30.0, follow=follow) is True
        reader.join(timeout=30)
        assert not reader.is_alive()
    finally:
        sender.close()
        gone.close(linger=0)
        if reader is not None:
            reader.join(timeout=30)
    expected = [(f"key-{i:08d}", i) for i in range(len(output.read_text(encoding="utf-8").splitlines()))]
    assert pairs == expected, "the replacement got the whole file, from its start, once"
    assert receivers[0].upstream_attempt == 3


def test_a_line_longer_than_a_block_is_sent_whole(tmp_path: Path, control: zmq.Socket) -> None:
    path = tmp_path / "part-00000"
    long_value = "x" * (3 * BLOCK_BYTES)
    path.write_text(f'"a"\t1\n"long"\t"{long_value}"\n"z"\t2\n', encoding="utf-8")
    _, pairs = _pipe_whole(path, control)
    assert pairs == [("a", 1), ("long", long_value), ("z", 2)]


def test_a_receiver_drops_what_is_not_a_block_of_its_pipe(tmp_path: Path, control: zmq.Socket) -> None:
    """A downstream map's pipe port takes connections from anything: a message that was not a block (one frame, a
    header that is not msgpack or not a block's) failed the map. It is dropped; the blocks around it are read."""
    path = tmp_path / "part-00000"
    path.write_text("".join(f'"k{i}"\t{i}\n' for i in range(1000)), encoding="utf-8")
    receivers: list[PipeReceiver] = []
    pairs: list[Any] = []
    ready = threading.Event()
    reader = threading.Thread(target=_receive_all, args=(receivers, control, pairs, ready))
    reader.start()
    stranger = zmq.Context.instance().socket(zmq.DEALER)
    stranger.setsockopt(zmq.LINGER, 0)
    sender = PipeSender(path, attempt=0, flush=lambda: None)
    try:
        assert ready.wait(10)
        stranger.connect(receivers[0].address)
        for frames in ([b"GET / HTTP/1.0"], [b"\xc1", b""], [b"\x92\x01\x02", b""], [b"\x81\xa3seq\xa1x", b""]):
            stranger.send_multipart(frames)
        assert not stranger.poll(300), "the receiver answered what was not a block"
        sender.connect(receivers[0].address)
        assert sender.finish(timeout=30.0) is True
        reader.join(timeout=30)
    finally:
        stranger.close()
        sender.close()
        reader.join(timeout=30)
    assert pairs == [(f"k{i}", i) for i in range(1000)]


def _pipe_whole(path: Path, control: zmq.Socket) -> tuple[PipeReceiver, list[Any]]:
    """Send the output file ``path`` through a pipe to a receiver reading on a thread; the receiver and its pairs."""
    receivers: list[PipeReceiver] = []
    pairs: list[Any] = []
    ready = threading.Event()
    reader = threading.Thread(target=_receive_all, args=(receivers, control, pairs, ready))
    reader.start()
    sender = PipeSender(path, attempt=0, flush=lambda: None)
    try:
        assert ready.wait(10)
        sender.connect(receivers[0].address)
        assert sender.finish(timeout=30.0) is True
        reader.join(timeout=30)
    finally:
        sender.close()
        reader.join(timeout=30)
    return receivers[0], pairs


def test_a_receiver_gives_its_latest_blocks_again_and_a_file_whole(
    output: Path, control: zmq.Socket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a map that read a pipe can read again to name the record whose output the shuffle could not encode:
    the pairs of the latest blocks streamed (a reference to each, nothing per record), or a committed file whole."""
    monkeypatch.setattr(hop.pipe, "RECENT_BLOCKS", 2)
    receiver, pairs = _pipe_whole(output, control)
    again = list(receiver.recent_records())
    assert BLOCK_BYTES // 20 < len(again) < len(pairs) and again == pairs[-len(again) :]
    committed = PipeReceiver()
    try:
        assert list(committed.records(control, lambda: None, str(output))) == pairs
        assert list(committed.recent_records()) == pairs
    finally:
        committed.close()


def test_a_map_slower_than_the_upstream_waits_reads_the_rest_from_the_committed_file(
    output: Path, control: zmq.Socket
) -> None:
    """An upstream reduce waits a minute at most for its downstream map to take the end of its stream, then commits;
    the map, slower, was then started again on the committed file, losing what it had done (a slow last job of a
    pipeline ran its maps twice). The coordinator now names the file of the attempt that streamed to it, and the
    map reads on from the first byte it did not get: every pair once."""
    receiver = PipeReceiver()
    sender = PipeSender(output, attempt=2, flush=lambda: None)
    committed = {"type": "pipe_file", "path": str(output), "attempt": 2}
    told: list[bool] = []
    deadline = time.monotonic() + 20

    def take_control() -> dict[str, Any] | None:
        assert time.monotonic() < deadline, "the map waited for a stream that had ended"
        if told or receiver.received_bytes < 2 * BLOCK_BYTES:
            return None
        told.append(True)  # the upstream attempt stopped waiting and committed its file
        return committed

    try:
        sender.connect(receiver.address)
        sender.pump()  # CREDITS blocks, then no more: the sender waits no longer
        pairs = list(receiver.records(control, take_control, None))
    finally:
        sender.close()
        receiver.close()
    expected = [(f"key-{i:08d}", i) for i in range(len(output.read_text(encoding="utf-8").splitlines()))]
    assert told and pairs == expected, "every pair once: the streamed ones, then the rest of the file"
    assert 0 < receiver.file_bytes < output.stat().st_size, "only the rest was read from the file"
    assert receiver.file_bytes + receiver.received_bytes == output.stat().st_size
