"""The client's requests against a stand-in coordinator (a ROUTER socket served from a thread)."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket as socket_module
import threading
import time
import uuid
from pathlib import Path
from types import FrameType

import pytest
import zmq

from hop.client import Client
from hop.jobspec import JobSpec
from hop.loader import load_job_file
from hop.protocol import close_socket, message, unpack
from hop.runner import build_spec
from tests.conftest import ROOT, job_path, output_dict


def test_a_request_interrupted_while_waiting_does_not_answer_the_next_one(tmp_path: Path) -> None:
    """SIGTERM (or Ctrl-C) interrupts ``hop run`` while it waits for a reply, and it then asks the coordinator to
    stop the job with the same client: that request's answer must be its own, not the late one to the request
    it gave up on (a ``status`` reply taken for the ``windows`` one broke the drain)."""
    address = f"ipc://{tmp_path}/coordinator"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.bind(address)
    interrupted = threading.Event()

    def serve() -> None:
        for _ in range(2):
            if not router.poll(30_000):
                return
            identity, frame = router.recv_multipart()
            request = unpack(frame)
            if request["n"] == 1:
                interrupted.wait(timeout=30)  # the first reply comes late: once the client gave up on it
            router.send_multipart([identity, message("answer", n=request["n"])])

    def interrupt(_signal: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    server = threading.Thread(target=serve)
    server.start()
    client = Client(address, timeout=30)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)  # as hop.cli's SIGTERM handler does, in this (the main) thread
        with pytest.raises(KeyboardInterrupt):
            client.request("status", n=1)
        interrupted.set()
        assert client.request("status", n=2)["n"] == 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        interrupted.set()
        client.close()
        server.join(timeout=60)
        close_socket(router)
    assert not server.is_alive()


def test_a_request_interrupted_as_it_is_sent_does_not_answer_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyzmq runs Python's signal handlers as a send returns, after the frame went: a Ctrl-C landing there (a
    ``timeout -s INT`` run met it) left the reply to that request coming, and ``hop run``'s stop request took it for
    its own, then its next ``windows`` request the stop's reply (a KeyError traceback, exit 1, no drain). The
    interruption is made to land there by a send that raises KeyboardInterrupt once it has sent, as pyzmq's does."""
    address = f"ipc://{tmp_path}/coordinator"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.bind(address)

    def serve() -> None:
        """Answer each request until the second one (the first may never arrive: its socket is closed at once)."""
        for _ in range(2):
            if not router.poll(30_000):
                return
            identity, frame = router.recv_multipart()
            number = unpack(frame)["n"]
            router.send_multipart([identity, message("answer", n=number)])
            if number == 2:
                return

    sent = zmq.Socket.send

    def send_then_interrupted(self: zmq.Socket[bytes], data: bytes, *args: object, **kwargs: object) -> object:
        monkeypatch.undo()  # (once)
        sent(self, data, *args, **kwargs)
        raise KeyboardInterrupt

    server = threading.Thread(target=serve)
    server.start()
    client = Client(address, timeout=30)
    try:
        monkeypatch.setattr(zmq.Socket, "send", send_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            client.request("status", n=1)
        assert client.request("status", n=2)["n"] == 2
    finally:
        client.close()
        server.join(timeout=60)
        close_socket(router)
    assert not server.is_alive()


def test_an_ipc_address_with_no_socket_file_is_told_at_once(tmp_path: Path) -> None:
    """A second `hop stop` on an embedded cluster that had ended waited out the 10 s timeout and said the
    coordinator "did not answer": with no socket file at an ipc:// path nothing can listen there, so it says so."""
    import time

    from hop.client import CoordinatorUnavailable

    address = f"ipc://{tmp_path}/gone/coordinator"
    client = Client(address, timeout=10)
    began = time.monotonic()
    try:
        with pytest.raises(CoordinatorUnavailable, match=rf"no coordinator at {address}: .* does not exist"):
            client.status("job-1")
    finally:
        client.close()
    assert time.monotonic() - began < 2


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_client_about_a_running_coordinator_says_at_once_that_it_is_gone(tmp_path: Path, transport: str) -> None:
    """A coordinator that had answered stopped while a request waited on it (the web view's, ``hop shutdown``'s
    wait): the request waited out its whole timeout and said the coordinator "did not answer". A client about a
    running coordinator finds it gone once the connection broke and nothing listens at the address (an ipc:// socket
    file removed, a tcp port refusing) and says so at once, for that request and the next."""
    from hop.client import CoordinatorGone

    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind(f"ipc://{tmp_path}/coordinator" if transport == "ipc" else "tcp://127.0.0.1:*")
    address = router.getsockopt_string(zmq.LAST_ENDPOINT)

    def serve() -> None:  # answers the first request, and stops as the second one waits
        for answered in range(2):
            if not router.poll(30_000):
                break
            identity, frame = router.recv_multipart()
            if not answered:
                router.send_multipart([identity, message("workers", workers=[])])
        router.close()

    coordinator = threading.Thread(target=serve)
    coordinator.start()
    client = Client(address, timeout=10, running=True)
    try:
        assert client.workers() == []
        began = time.monotonic()
        gone = "^" + re.escape(f"the coordinator at {address} is gone: its connection broke, and ")
        with pytest.raises(CoordinatorGone, match=gone):
            client.jobs()
        assert time.monotonic() - began < 3, "not after its 10 s timeout"
        began = time.monotonic()
        with pytest.raises(CoordinatorGone, match=gone):
            client.workers()
        assert time.monotonic() - began < 1
    finally:
        client.close()
        coordinator.join(timeout=30)


def test_a_coordinator_that_binds_after_the_request_answers_it(tmp_path: Path) -> None:
    """``hop coordinator --bind ipc://PATH &`` then at once ``hop submit --coordinator ipc://PATH``: the coordinator's
    interpreter is still starting, so its socket file is not there yet. The request must wait for it, as ZeroMQ
    does, not fail at once with "no coordinator" (only a missing directory means nothing can listen there)."""
    address = f"ipc://{tmp_path}/coordinator"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    asked, finished = threading.Event(), threading.Event()

    def serve() -> None:
        asked.wait(timeout=30)  # bound only once the client has asked (and found no socket file)
        router.bind(address)
        for _ in range(300):
            if finished.is_set():
                return
            if router.poll(100):
                identity, frame = router.recv_multipart()
                router.send_multipart([identity, message("workers", workers=[], n=unpack(frame)["n"])])
                return

    server = threading.Thread(target=serve)
    server.start()
    client = Client(address, timeout=30)
    try:
        assert not (tmp_path / "coordinator").exists()
        threading.Timer(0.2, asked.set).start()
        assert client.request("workers", n=7)["n"] == 7
    finally:
        asked.set()
        finished.set()
        client.close()
        server.join(timeout=60)
        close_socket(router)
    assert not server.is_alive()


def test_closing_a_client_twice_is_harmless(tmp_path: Path) -> None:
    """``close`` ended in "ZMQError: Socket operation on non-socket" the second time (the connection monitor,
    added for broken connections, was disabled on a closed socket): as before it, a second close does nothing."""
    client = Client(f"ipc://{tmp_path}/coordinator", timeout=1)
    client.close()
    client.close()


def test_an_ipc_address_nothing_binds_says_so_without_naming_a_port(tmp_path: Path) -> None:
    """A second ``hop shutdown`` of a stopped cluster (its socket file removed, its directory still there) waits, as
    a coordinator may be starting, and then asked whether hop coordinator ran "at that address and port"."""
    from hop.client import CoordinatorUnavailable

    client = Client(f"ipc://{tmp_path}/coordinator", timeout=1)
    try:
        with pytest.raises(CoordinatorUnavailable) as failure:
            client.workers()
    finally:
        client.close()
    assert "no connection within 1s (is hop coordinator running with that --bind?" in str(failure.value)
    assert "port" not in str(failure.value)


def test_a_client_with_nothing_at_its_address_says_it_still_waits_then_fails(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Nothing listens at the address (a real TCP port, free): after ``waiting_note`` seconds (2 by default) the
    client says on stderr that it still waits, how long in all and what to check; the request was silent until
    its error, 10 or 30 s on, and a user took the command for hung. The error at the end is unchanged."""
    import socket

    from hop.client import WAITING_NOTE_SECONDS, CoordinatorUnavailable

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"  # free once closed: nothing listens there
    client = Client(address, timeout=WAITING_NOTE_SECONDS + 1)
    try:
        with pytest.raises(CoordinatorUnavailable, match="no connection within 3s"):
            client.workers()
        noted = capfd.readouterr().err
        with pytest.raises(CoordinatorUnavailable):  # a second request of the same client is not noted again
            client.jobs()
    finally:
        client.close()
    assert noted.count("still waiting") == 1, noted
    assert (
        f"hop: still waiting for the coordinator at {address}: no connection after 2s; waiting up to 3s in all. "
        in (noted)
    )
    assert "Check that the cluster is started and the address is right: is hop coordinator running at that " in noted
    assert "still waiting" not in capfd.readouterr().err


def test_a_client_connected_to_a_slow_coordinator_notes_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The note is about an address where nothing connects: a coordinator that is there and answers late (a busy
    one) gets no "still waiting" line."""
    address = f"ipc://{tmp_path}/coordinator"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.bind(address)

    def serve() -> None:
        if router.poll(30_000):
            identity, frame = router.recv_multipart()
            time.sleep(1.0)  # past the client's waiting_note
            router.send_multipart([identity, message("workers", workers=[])])

    server = threading.Thread(target=serve)
    server.start()
    client = Client(address, timeout=30, waiting_note=0.2)
    try:
        assert client.workers() == []
    finally:
        client.close()
        server.join(timeout=60)
        close_socket(router)
    assert "still waiting" not in capfd.readouterr().err


def test_missing_socket_directory_checks_the_directory_not_the_file(tmp_path: Path) -> None:
    """The check of an ipc:// address was named ``missing_socket_file`` while it looks at the socket's directory
    only (a file not there yet in an existing directory may still be bound): its name says what it checks."""
    from hop.client import missing_socket_directory

    gone = f"ipc://{tmp_path}/gone/coordinator"
    assert missing_socket_directory(gone) == (
        f"no coordinator at {gone}: the directory {tmp_path / 'gone'} does not exist, so nothing listens there (the "
        "coordinator has stopped, or never ran there)"
    )
    assert missing_socket_directory(f"ipc://{tmp_path}/coordinator") is None  # no file yet, but its directory is
    assert missing_socket_directory("ipc://@abstract-name") is None
    assert missing_socket_directory("tcp://127.0.0.1:5555") is None


def test_missing_socket_file_names_the_file_of_an_ipc_path_only(tmp_path: Path) -> None:
    """For commands about a running coordinator (``Client(running=True)``): an absent socket file is an answer,
    an abstract socket (no file) and tcp are not, and a missing directory is said as such."""
    from hop.client import missing_socket_file

    absent = f"ipc://{tmp_path}/coordinator"
    assert (missing_socket_file(absent) or "").startswith(
        f"no coordinator at {absent}: its socket file {tmp_path}/coordinator does not exist"
    )
    assert "the directory" in (missing_socket_file(f"ipc://{tmp_path}/gone/coordinator") or "")
    (tmp_path / "coordinator").touch()
    assert missing_socket_file(absent) is None
    assert missing_socket_file("ipc://@abstract-name") is None
    assert missing_socket_file("tcp://127.0.0.1:5555") is None


def test_refused_socket_tells_a_socket_nothing_listens_on_from_one_a_coordinator_holds(tmp_path: Path) -> None:
    """Commands about a running coordinator waited 10 s on a stale socket file, a file that is no socket or an
    abstract name nothing holds: each is refused at once now; a socket something listens on is not."""
    import socket

    from hop.client import refused_socket

    stale = tmp_path / "stale"
    with socket.socket(socket.AF_UNIX) as closed:
        closed.bind(str(stale))
    assert "nothing listens on its socket file" in (refused_socket(f"ipc://{stale}") or "")
    (tmp_path / "plain").write_text("")
    assert f"{tmp_path / 'plain'} is not a socket file" in (refused_socket(f"ipc://{tmp_path}/plain") or "")
    name = f"@hop-test-{os.getpid()}-nothing"
    assert "nothing listens on the abstract socket" in (refused_socket(f"ipc://{name}") or "")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "live"))
        listening.listen(1)
        assert refused_socket(f"ipc://{tmp_path}/live") is None
    assert refused_socket(f"ipc://{tmp_path}/absent") is None  # (missing_socket_file's case)
    assert refused_socket("tcp://127.0.0.1:5555") is None


def _wordcount_spec(tmp_path: Path) -> JobSpec:
    """A word count's spec over a one-line input in ``tmp_path``: something to submit."""
    from hop.loader import load_job_file
    from hop.runner import build_spec
    from tests.conftest import job_path

    (tmp_path / "in.txt").write_text("a b\n")
    return build_spec(load_job_file(job_path("wordcount")), [str(tmp_path / "in.txt")], str(tmp_path / "out"))


def test_a_second_ctrl_c_interrupts_a_submit_whose_coordinator_does_not_answer(tmp_path: Path) -> None:
    """A submit holds a Ctrl-C until its reply (test below); with a coordinator that took the request and never
    answers, that was the client's whole timeout (30 s for ``hop submit``) whatever the user pressed. A second
    Ctrl-C acts at once."""
    spec = _wordcount_spec(tmp_path)
    address = f"ipc://{tmp_path}/coordinator"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)  # takes the request and never answers
    router.bind(address)

    ended = threading.Event()

    def interrupt(_signal: int, _frame: FrameType | None) -> None:
        if not ended.is_set():  # (a press the test's sender made as the submit ended: the test has its answer)
            raise KeyboardInterrupt

    def ctrl_c_again_and_again() -> None:
        # Once the request is out (the submit holds signals by then; this thread alone uses the router until joined).
        # Pressed again every 0.3 s until the submit ends: two signals that come before the main thread runs (a
        # loaded machine) are one to the kernel and to Python, so the test presses as a user would, not exactly twice.
        if router.poll(30_000):
            for _ in range(20):
                if ended.is_set():
                    return
                os.kill(os.getpid(), signal.SIGINT)
                ended.wait(0.3)

    client = Client(address, timeout=30)
    previous = signal.signal(signal.SIGINT, interrupt)
    timer = threading.Thread(target=ctrl_c_again_and_again)
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            try:
                client.submit(spec)
            finally:
                ended.set()
        took = time.monotonic() - started
        assert signal.getsignal(signal.SIGINT) is interrupt, "the command's own handler is back"
    finally:
        ended.set()
        timer.join(timeout=30)
        signal.signal(signal.SIGINT, previous)
        client.close()
        close_socket(router)
    assert took < 5, f"the second Ctrl-C took {took:.1f} s to act"
    assert client.submitted == []


def test_a_submit_interrupted_before_its_reply_knows_its_job(tmp_path: Path) -> None:
    """Ctrl-C (or SIGTERM) after a submit went out and before its reply came: the job ran on the cluster with its id
    unknown to the run, which could not cancel it (``hop submit`` printed "interrupted" and the job ran on; a loaded
    machine met it as a test's job started within milliseconds of the submit). The interruption acts once the reply
    is in: the job's id is known, for the cancellation that follows."""
    spec = _wordcount_spec(tmp_path)
    address = f"ipc://{tmp_path}/coordinator"
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.bind(address)
    signalled = threading.Event()

    def serve() -> None:
        if router.poll(30_000):
            identity, _ = router.recv_multipart()
            signalled.wait(timeout=30)  # the reply comes once the Ctrl-C did
            router.send_multipart([identity, message("submitted", job_id="job-1")])

    def interrupt(_signal: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def ctrl_c() -> None:
        os.kill(os.getpid(), signal.SIGINT)
        signalled.set()

    server = threading.Thread(target=serve)
    server.start()
    client = Client(address, timeout=30)
    previous = signal.signal(signal.SIGINT, interrupt)
    timer = threading.Timer(0.2, ctrl_c)
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            client.submit(spec)
        assert client.submitted == ["job-1"]
    finally:
        timer.join(timeout=30)
        signal.signal(signal.SIGINT, previous)
        signalled.set()
        client.close()
        server.join(timeout=60)
        close_socket(router)
    assert not server.is_alive()


def test_a_spec_with_relative_paths_reads_and_writes_where_its_client_runs(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``JobSpec`` made by hand with a relative input and output, submitted through the Python API: the coordinator
    (started in another directory) took both from its own working directory, refusing an input that was there or
    writing the output into its own directory. They are the submitting client's, as with ``hop run``."""
    # An output name of this run's own: the README's main job leaves an ``out/`` where the tests then run.
    output = f"out-{uuid.uuid4().hex}"
    built = build_spec(load_job_file(job_path("wordcount")), [str(tmp_path / "in.txt")], str(tmp_path / output))
    spec = dataclasses.replace(built, inputs=("in.txt",), output=output)
    (tmp_path / "in.txt").write_text("a b a\n")
    monkeypatch.chdir(tmp_path)
    assert Path.cwd() != ROOT  # (the test cluster's coordinator runs where pytest started)
    report = client.wait(client.submit(spec), timeout=60)
    assert report["state"] == "succeeded", report
    assert output_dict(tmp_path / output) == {"a": 2, "b": 1}
    assert not (ROOT / output).exists()


def test_a_peer_that_drops_every_connection_is_not_reconnected_to_in_a_tight_loop() -> None:
    """A peer that accepts each connection and closes it at once (a port forward or proxy whose backend is down):
    a read-only request asks again on a fresh socket when its connection breaks, and did so at once, every time:
    ``hop windows`` against one made 29,000 connections in its 10 s timeout, at a full core. It now waits
    ``RESEND_SECONDS`` between connections, and still fails at its timeout saying the connection broke."""
    listener = socket_module.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.settimeout(0.2)
    accepted = 0
    done = threading.Event()

    def drop_all() -> None:
        nonlocal accepted
        while not done.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            accepted += 1
            connection.close()

    server = threading.Thread(target=drop_all)
    server.start()
    client = Client(f"tcp://127.0.0.1:{listener.getsockname()[1]}", timeout=2.0)
    cpu = time.process_time()
    try:
        with pytest.raises(Exception, match="did not answer 'windows' within 2s"):
            client.windows("job-x")
    finally:
        client.close()
        done.set()
        server.join(timeout=5)
        listener.close()
    assert not server.is_alive()
    assert 2 <= accepted <= 40, f"{accepted} connections in 2 s"
    assert time.process_time() - cpu < 1.0


@pytest.mark.parametrize("peer", ["drops", "holds"])
@pytest.mark.parametrize("request_kind", ["workers", "stop_job"])
def test_a_peer_that_is_no_coordinator_is_not_said_to_be_one_that_stopped(peer: str, request_kind: str) -> None:
    """A peer that takes connections but is no ZeroMQ peer (``drops``: closes each at once, a port forward whose
    backend is down; ``holds``: keeps it and never answers, another server). The connection counted as a
    coordinator's as soon as the kernel made it: errors said "its connection broke meanwhile: it stopped and has
    not come back", and a ``hop stop`` failed at once, "whether it took the request is unknown", of a request that
    could not have left (ZeroMQ sends only once its handshake succeeded). Both now say no coordinator answered
    there, each after its timeout."""
    listener = socket_module.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    listener.settimeout(0.2)
    held: list[socket_module.socket] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            if peer == "drops":
                connection.close()
            else:
                held.append(connection)

    server = threading.Thread(target=serve)
    server.start()
    client = Client(f"tcp://127.0.0.1:{listener.getsockname()[1]}", timeout=1.5, waiting_note=None)
    started = time.monotonic()
    try:
        with pytest.raises(Exception) as raised:
            client.workers() if request_kind == "workers" else client.stop("job-x")
    finally:
        client.close()
        done.set()
        server.join(timeout=5)
        for connection in held:
            connection.close()
        listener.close()
    said = str(raised.value)
    assert f"did not answer {request_kind!r} within 2s" in said, said  # (1.5 s, rounded)
    assert "none was answered as a hop coordinator answers" in said, said
    assert "stopped and has not come back" not in said and "unknown" not in said, said
    assert time.monotonic() - started >= 1.4, "it waited its timeout, not failing at the first broken connection"
