"""The coordinator and its workers over real processes when something around them fails: an output that cannot
be committed, a worker restarted under its old name, a coordinator restarted at the same address."""

from __future__ import annotations

import collections
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from hop.client import Client, JobLost
from hop.forking import wait_or_kill
from hop.gen.text import generate_text
from hop.jobspec import JobSpec
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.protocol import unpack
from hop.runner import JobFailed, build_spec, run_staged_jobs
from tests.conftest import job_path, maps_running, output_dict, run_job


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("recovery") / "in.txt"
    generate_text(path, 400_000, seed=17, vocabulary=800)
    return path


def word_counts(path: Path) -> dict[str, int]:
    return dict(collections.Counter(path.read_text(encoding="utf-8").split()))


def _run_in_thread(
    address: str, job: str, source: Path, output: Path, then: str | None = None, **settings: Any
) -> tuple[threading.Thread, dict]:
    """Run a job from a thread of its own (with its own client), and with ``then``, that job after it through files
    (``hop run JOB THEN --blocking``); the outcome lands in the returned dict."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        client = Client(address, timeout=30)
        try:
            if then is None:
                outcome["report"] = run_job(client, job, [source], output, **settings)
            else:
                jobs = [load_job_file(job_path(name)) for name in (job, then)]
                specs = [build_spec(cls, [str(source)], str(output), **settings) for cls in jobs]
                outcome["report"] = run_staged_jobs(client, specs, progress=False)
        except BaseException as error:  # the test thread asserts on it
            outcome["error"] = error
        finally:
            client.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.02)


@pytest.fixture()
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts itself: ended (politely, then not) whatever the test's outcome."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.terminate()
    wait_or_kill(started, time.monotonic() + 15)


def _coordinator(address: str, processes: list[subprocess.Popen[bytes]], *options: str) -> subprocess.Popen[bytes]:
    """A standalone coordinator process (``hop coordinator --bind ADDRESS``, with ``options``), added to
    ``processes`` (the fixture ends it if the test does not)."""
    processes.append(subprocess.Popen([sys.executable, "-m", "hop", "coordinator", "--bind", address, *options]))
    return processes[-1]


def _worker(
    address: str, name: str, spill_dir: Path, stderr: int | None = None, slots: tuple[int, int, int] = (1, 2, 0)
) -> subprocess.Popen[bytes]:
    """A standalone worker process (``python -m hop.worker``: the ``hop worker`` program with its spill directory
    under the test's temporary directory) with ``slots`` (map, reduce, stream); ``stderr=subprocess.PIPE`` to read
    what it says."""
    command = ["-m", "hop.worker", "--coordinator", address, "--name", name, "--spill-dir", str(spill_dir)]
    counts = [f"--{kind}-slots={count}" for kind, count in zip(("map", "reduce", "stream"), slots, strict=True)]
    return subprocess.Popen([sys.executable, *command, *counts], stderr=stderr)


def _said_worker(
    address: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[bytes], Path]:
    """Worker w0 of the coordinator at ``address`` (its spill directory ``tmp_path``), added to ``processes``, and
    the file its stderr goes to, to read what it says."""
    said = tmp_path / "worker.stderr"
    with open(said, "wb") as stderr:
        processes.append(_worker(address, "w0", tmp_path, stderr=stderr))
    return processes[-1], said


def _slow_submit_under_way(
    address: str, source: Path, output: Path, processes: list[subprocess.Popen[bytes]], spill_dir: Path
) -> subprocess.Popen[str]:
    """Worker w0 of the coordinator at ``address``, and ``hop submit`` of a slow map job (its stderr piped) writing
    ``output``, returned once the job's maps run; both are in ``processes`` (the fixture ends them if the test does
    not)."""
    processes.append(_worker(address, "w0", spill_dir))
    command = ["submit", job_path("slow_map"), str(source), "-o", str(output), "--coordinator", address, "--quiet"]
    submit = subprocess.Popen([sys.executable, "-m", "hop", *command], stderr=subprocess.PIPE, text=True)
    processes.append(submit)  # (ended by the fixture if the test fails before it exits)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: maps_running(client), 30, "the job's maps started")
    finally:
        client.close()
    return submit


def _replay_wordcount(tmp_path: Path, **options: Any) -> tuple[JobSpec, str]:
    """A continuous word count of a looping ``replay:`` source, two reducers, with ``options``; and the source."""
    from hop.stream.options import stream_options

    lines = tmp_path / "lines.txt"
    lines.write_text("a b\nb c\n" * 100)
    source = f"replay:{lines}?rate=400&loop=1"
    spec = build_spec(
        load_job_file(job_path("stream_wordcount")),
        [],
        str(tmp_path / "out"),
        num_reduces=2,
        options={"stream": stream_options([source], "1s", None), **options},
    )
    return spec, source


def _coordinator_with_w0(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], *options: str
) -> tuple[subprocess.Popen[bytes], str, Client]:
    """A standalone ``hop coordinator`` (with ``options``; its stderr piped, to read what it says) at an ipc:// address
    in ``tmp_path``, and worker w0 registered there: the coordinator, its address and a client the caller closes."""
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "hop", "coordinator", "--bind", address, *options], stderr=subprocess.PIPE
    )
    processes.append(coordinator)
    processes.append(_worker(address, "w0", tmp_path))
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
    except BaseException:
        client.close()
        raise
    return coordinator, address, client


def test_an_output_that_cannot_be_committed_fails_the_job_and_the_cluster_goes_on(
    cluster: LocalCluster, source: Path, tmp_path: Path
) -> None:
    """The last reduce's report completes the job, but its part file cannot be moved into place: the job must fail
    (it used to be reported succeeded, with the part file, ``_SUCCESS`` and ``_job.json`` missing)."""
    output = tmp_path / "out"
    # 8 maps in 4 waves on the 2 slots: seconds between the first map running and the reduce's commit.
    thread, outcome = _run_in_thread(cluster.address, "slow_map", source, output, num_reduces=1, split_size=50_000)
    watcher = Client(cluster.address, timeout=30)
    try:
        _wait_for(lambda: maps_running(watcher), 30, "the job's maps started")  # they run for a while
        blocker = output / "part-00000"  # a non-empty directory where the part file goes: the rename fails
        blocker.mkdir()
        (blocker / "in-the-way").touch()
    finally:
        watcher.close()
        thread.join(timeout=120)
    assert not thread.is_alive()
    error = outcome.get("error")
    assert isinstance(error, JobFailed), outcome
    assert "cannot move reduce output" in error.status["error"] and "part-00000" in error.status["error"]
    assert json.loads((output / "_job.json").read_text())["status"] == "failed"
    assert not (output / "_SUCCESS").exists()
    client = Client(cluster.address, timeout=30)
    try:
        run_job(client, "wordcount", [source], tmp_path / "again", num_reduces=1)
    finally:
        client.close()
    assert output_dict(tmp_path / "again") == word_counts(source)


def test_a_worker_restarted_under_its_name_loses_the_old_ones_attempts(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A worker process is killed and a new one registers under the same name long before the heartbeat timeout:
    the old one's attempts are lost at once and the job finishes exactly (it used to wait for them forever, the
    new registration's heartbeats keeping the name alive). A standalone worker beside the embedded cluster's: an
    embedded cluster's own worker is lost as its process ends, before any namesake could register."""
    with LocalCluster(workers=1, map_slots=1, reduce_slots=2, heartbeat_timeout=120.0) as cluster:
        watcher = Client(cluster.address, timeout=30)
        try:
            processes.append(_worker(cluster.address, "extra", tmp_path))
            _wait_for(lambda: any(w["name"] == "extra" for w in watcher.workers()), 30, "extra registers")
            output = tmp_path / "out"
            thread, outcome = _run_in_thread(
                cluster.address, "slow_map", source, output, num_reduces=2, split_size=50_000
            )
            began = time.monotonic()
            try:
                _wait_for(lambda: maps_running(watcher, on="extra"), 30, "a map runs on extra")
                processes[-1].kill()
                processes[-1].wait(timeout=10)
                processes.append(_worker(cluster.address, "extra", tmp_path))
            finally:
                thread.join(timeout=120)
            assert not thread.is_alive()
            assert "report" in outcome, outcome
            assert time.monotonic() - began < 60, "long before the heartbeat timeout"
            assert output_dict(output) == word_counts(source)
            assert any(a["worker"] == "extra" and a["status"] != "succeeded" for a in outcome["report"]["attempts"])
            assert "worker_replaced" in [f["kind"] for f in watcher.cluster()["faults"] if f.get("worker") == "extra"]
        finally:
            watcher.close()


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["kill", "term", "int"])
def test_a_worker_registers_again_with_a_coordinator_restarted_at_its_address(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]], stop: signal.Signals
) -> None:
    """However the coordinator was stopped (killed, or a restart's SIGTERM or Ctrl-C, which used to tell every
    worker to shut down too), its workers register with the one restarted at its address."""
    address = f"ipc://{tmp_path}/coordinator"

    first = _coordinator(address, processes)
    processes.append(_worker(address, "w0", tmp_path))
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
    finally:
        client.close()
    first.send_signal(stop)
    first.wait(timeout=10)
    time.sleep(1.0)  # a shutdown message would have reached w0 by now
    assert processes[1].poll() is None, "the worker stays up"
    _coordinator(address, processes)
    client = Client(address, timeout=30)
    try:
        # The new coordinator does not know w0: it answers w0's next heartbeat with reinit, and w0 registers.
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered again")
        report = run_job(client, "wordcount", [source], tmp_path / "out", num_reduces=1)
        client.shutdown()  # the coordinator tells w0 to stop, then stops
    finally:
        client.close()
    assert output_dict(tmp_path / "out") == word_counts(source)
    assert {a["worker"] for a in report["attempts"]} == {"w0"}


def _restart_coordinator(
    address: str, first: subprocess.Popen[bytes], stop: signal.Signals, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Restart the coordinator ``first`` at ``address`` (``ipc://PATH``): stopped by ``stop``, then started again;
    killed (SIGKILL) only once the new one has bound its path in its place. A client whose coordinator was killed
    with nothing listening at its address after says at once that it is gone
    (``test_a_submit_whose_coordinator_is_killed_says_at_once_that_it_is_gone``): which of the two it says would
    be a race with the new coordinator's start."""
    if stop != signal.SIGKILL:
        first.send_signal(stop)
        first.wait(timeout=10)
        _coordinator(address, processes)
        return
    path = Path(address.removeprefix("ipc://"))
    old = path.stat().st_ino
    _coordinator(address, processes)

    def rebound() -> bool:
        with contextlib.suppress(OSError):
            return path.stat().st_ino != old
        return False

    _wait_for(rebound, 30, "the new coordinator bound its path")
    first.kill()
    first.wait(timeout=10)


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_submit_whose_coordinator_restarts_says_so_at_once(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]], stop: signal.Signals
) -> None:
    """The coordinator a ``hop submit`` waits on is restarted mid-job: the submit must say at once that the new one
    no longer knows the job and that it must be submitted again (it waited 30 s, then said the coordinator "did
    not answer 'status'": the status request in flight went with the old coordinator's connection)."""
    address = f"ipc://{tmp_path}/coordinator"

    first = _coordinator(address, processes)
    submit = _slow_submit_under_way(address, source, tmp_path / "out", processes, tmp_path)
    _restart_coordinator(address, first, stop, processes)
    restarted = time.monotonic()
    try:
        _, stderr = submit.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        submit.kill()
        submit.communicate()
        pytest.fail("hop submit still waits 15 s after its coordinator restarted")
    assert time.monotonic() - restarted < 15
    assert submit.returncode == 3, stderr
    if stop == signal.SIGKILL:
        assert f"coordinator {address} no longer knows job job-" in stderr, stderr
        assert "it was restarted while the job ran" in stderr and "submit the job again" in stderr, stderr
    else:  # it failed the job as it stopped, and said so at once
        assert f"the coordinator at {address} was stopped (Ctrl-C or SIGTERM) while the job ran" in stderr, stderr
        assert "submit it again once a coordinator runs" in stderr, stderr
    assert "did not answer" not in stderr and "Traceback" not in stderr, stderr
    # Asked later about that job, the restarted coordinator says why it does not know it (it said "no job ID"): once
    # w0 came over, which tells it a coordinator ran there before (on a loaded machine, after the submit's error).
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered again")
    finally:
        client.close()
    job_id = "job-" + stderr.split(" job job-", 1)[1].split(" ", 1)[0].rstrip(":")
    command = ["status", job_id, "--coordinator", address]
    status = subprocess.run([sys.executable, "-m", "hop", *command], capture_output=True, text=True, timeout=60)
    assert status.returncode == 2, status.stderr
    assert f"no job {job_id}: it was submitted before this coordinator started (" in status.stderr, status.stderr
    assert "a restarted coordinator does not know the jobs of the one before it" in status.stderr, status.stderr


def test_a_submit_interrupted_while_its_coordinator_hangs_says_its_job_may_run_on(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Ctrl-C of a ``hop submit`` whose coordinator is stopped (SIGSTOP: hung) cannot cancel its job: it said only
    "interrupted", after two unanswered cancellations of 5 s each, and the job ran on to succeed once the coordinator
    went on. It says the job may still run there, and how to cancel it."""
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = _coordinator(address, processes)
    submit = _slow_submit_under_way(address, source, tmp_path / "out", processes, tmp_path)
    coordinator.send_signal(signal.SIGSTOP)
    try:
        submit.send_signal(signal.SIGINT)
        _, stderr = submit.communicate(timeout=60)
    finally:
        coordinator.send_signal(signal.SIGCONT)
    assert submit.returncode == 130, stderr
    job_id = "job-" + stderr.split("cancellation of job-", 1)[-1].split(":", 1)[0]
    assert (
        f"hop: warning: the coordinator at {address} did not answer the cancellation of {job_id}: the job may still "
        f"run there (hop stop {job_id} --coordinator {address} cancels it)\nhop: error: interrupted\n"
    ) in stderr, stderr
    assert stderr.count("did not answer the cancellation") == 1, stderr


def _stderr_once_its_coordinator_is_killed(
    command: subprocess.Popen[str], coordinator: subprocess.Popen[Any], name: str
) -> str:
    """Kill ``coordinator``; the standard error of ``command`` (``name`` in messages), which ends within 10 s of it,
    with exit code 3: well before a request's 30 s timeout (alone it takes about 1 s; 5.07 s once beside the whole
    suite on a loaded machine, past the 5 s this allowed)."""
    coordinator.kill()
    coordinator.communicate(timeout=10)  # (its stdout closed)
    killed = time.monotonic()
    stderr = _ends_within(command, 20, name)
    assert time.monotonic() - killed < 10, "said at once, not after a request's 30 s timeout"
    assert command.returncode == 3, stderr
    return stderr


def _monitor_running(
    address: str, output: Path, tmp_path: Path, processes: list[subprocess.Popen[Any]]
) -> subprocess.Popen[str]:
    """A worker and ``hop monitor`` (4 s windows, 2 s slide, into ``output``) on the coordinator at ``address``,
    once its monitoring query runs; both in ``processes``, which the fixture ends if the test fails first."""
    processes.append(_worker(address, "w0", tmp_path))
    command = ["monitor", "--coordinator", address, "-o", str(output), "--window", "4s", "--slide", "2s", "--quiet"]
    monitor = subprocess.Popen([sys.executable, "-m", "hop", *command], stderr=subprocess.PIPE, text=True)
    processes.append(monitor)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: any(job["state"] == "running" for job in client.jobs()), 60, "the monitoring query runs")
    finally:
        client.close()
    return monitor


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
def test_a_monitor_whose_coordinator_restarts_says_how_to_watch_again(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], stop: signal.Signals
) -> None:
    """``hop monitor --coordinator ADDR`` whose coordinator is restarted exited 3 with the advice for a batch job
    ("the job's output is not written; submit the job again"): it says the monitoring query is gone, where its
    windows so far are, and the ``hop monitor`` command that watches the restarted coordinator. Stopped by SIGTERM,
    the coordinator ends the query itself and the monitor says so (it said "submit it again", exit code 2)."""
    address = f"ipc://{tmp_path}/coordinator"
    first = _coordinator(address, processes)
    output = tmp_path / "monitor"
    monitor = _monitor_running(address, output, tmp_path, processes)
    _restart_coordinator(address, first, stop, processes)
    try:
        _, stderr = monitor.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        monitor.kill()
        monitor.communicate()
        pytest.fail("hop monitor still runs 30 s after its coordinator restarted")
    assert monitor.returncode == 3, stderr
    if stop == signal.SIGKILL:
        assert f"the coordinator at {address} was restarted and no longer runs the monitoring query" in stderr, stderr
    else:
        assert f"the coordinator at {address} was stopped (Ctrl-C or SIGTERM) and ended the monitor" in stderr, stderr
    assert f"the windows so far stay in {output / 'windows'}" in stderr, stderr
    assert f"`hop monitor --coordinator {address} --window 4s --slide 2s`" in stderr, stderr
    assert "submit the job again" not in stderr and "Traceback" not in stderr, stderr


def _listening_coordinator(bind: str, processes: list[subprocess.Popen[bytes]]) -> str:
    """A standalone ``hop coordinator --bind BIND`` (``tcp://127.0.0.1:*`` or ``ipc://PATH``), added to
    ``processes``; the address it printed once it listens."""
    import select

    coordinator = subprocess.Popen([sys.executable, "-m", "hop", "coordinator", "--bind", bind], stdout=subprocess.PIPE)
    processes.append(coordinator)
    assert coordinator.stdout is not None
    assert select.select([coordinator.stdout], [], [], 30)[0], "the coordinator printed no address within 30 s"
    return coordinator.stdout.readline().decode().strip()


def _ends_within(command: subprocess.Popen[str], seconds: float, what: str) -> str:
    """The stderr of ``command`` once it ended, failing the test if that takes more than ``seconds``."""
    try:
        return command.communicate(timeout=seconds)[1]
    except subprocess.TimeoutExpired:
        command.kill()
        command.communicate()
        pytest.fail(f"{what} still runs {seconds:g} s after its coordinator was killed")


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_submit_whose_coordinator_is_killed_says_at_once_that_it_is_gone(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]], transport: str
) -> None:
    """The coordinator a ``hop submit`` waits on is killed (SIGKILL: it cannot answer) and not started again: the
    submit waited out its 30 s request timeout, asked again, then said the coordinator "did not answer 'status'
    within 30s". It says at once that the coordinator at its address is gone, that the job went with it, what its
    output holds and what to do, with exit code 3."""
    address = _listening_coordinator(
        f"ipc://{tmp_path}/coordinator" if transport == "ipc" else "tcp://127.0.0.1:*", processes
    )
    coordinator = processes[-1]
    output = tmp_path / "out"
    submit = _slow_submit_under_way(address, source, output, processes, tmp_path)
    client = Client(address, timeout=30)
    try:
        job_id = next(job["job_id"] for job in client.jobs() if job["state"] == "running")
    finally:
        client.close()
    stderr = _stderr_once_its_coordinator_is_killed(submit, coordinator, "hop submit")
    gone = f"hop: error: the coordinator at {address} is gone: its connection broke, and "
    assert gone in stderr, stderr
    refused = "nothing listens on its socket any more" if transport == "ipc" else "connections to 127.0.0.1:"
    assert refused in stderr, stderr
    assert f"Job {job_id} went with it (a coordinator's jobs end with it" in stderr, stderr
    if output.is_dir() and any(output.iterdir()):
        assert f"{output} holds what it wrote so far and no result (no _job.json is written)" in stderr, stderr
        assert "submit the job again with --overwrite" in stderr, stderr
    else:
        assert f"nothing of it is in {output}" in stderr, stderr
    assert f"start the coordinator again (hop coordinator --bind {address}; " in stderr, stderr
    assert "did not answer" not in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_a_monitor_whose_coordinator_is_killed_says_at_once_that_it_is_gone(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], transport: str
) -> None:
    """``hop monitor --coordinator ADDR`` whose coordinator is killed and not started again waited out its 30 s
    request timeout, then said the coordinator "did not answer". It says at once that the coordinator is gone and
    the monitoring query with it, where its windows are, and how to watch the cluster again, with exit code 3."""
    address = _listening_coordinator(
        f"ipc://{tmp_path}/coordinator" if transport == "ipc" else "tcp://127.0.0.1:*", processes
    )
    coordinator = processes[-1]
    output = tmp_path / "monitor"
    monitor = _monitor_running(address, output, tmp_path, processes)
    stderr = _stderr_once_its_coordinator_is_killed(monitor, coordinator, "hop monitor")
    assert f"hop: error: the coordinator at {address} is gone: its connection broke, and " in stderr, stderr
    assert "the monitoring query went with it" in stderr, stderr
    assert f"The windows so far stay in {output / 'windows'}" in stderr, stderr
    assert f"`hop monitor --coordinator {address} --window 4s --slide 2s`" in stderr, stderr
    assert "did not answer" not in stderr and "Traceback" not in stderr, stderr


def test_a_mistyped_job_id_from_the_past_is_not_blamed_on_a_restart(client: Client) -> None:
    """A coordinator asked about an id whose timestamp lies before it started said it "was submitted before this
    coordinator started" and that "a restarted coordinator does not know the jobs of the one before it", for a
    mistyped id on a coordinator that was never restarted too; an id not shaped like a job id (too few digits)
    was read as one. With no worker of an earlier coordinator come over, the reply says to check the id."""
    from hop.client import JobRejected

    past = "job-20000101-000000-0001"
    with pytest.raises(JobRejected) as failure:
        client.status(past)
    message = str(failure.value)
    assert message.startswith(f"no job {past}: its id dates from before this coordinator started ("), message
    assert "check the id" in message and f"hop status --coordinator {client.address}" in message, message
    assert "restarted" not in message, message
    for misshapen in ("job-20000101-000000-1", "job-2000010-000000-0001", "job-20000101-000000-0001x"):
        with pytest.raises(JobRejected) as failure:
            client.status(misshapen)
        assert str(failure.value).startswith(f"no job {misshapen}: check the id"), failure.value
        assert "dates from before" not in str(failure.value), failure.value


def test_faults_name_a_workers_host_as_its_samples_and_prometheus_labels_do() -> None:
    """``hop monitor``: a killed worker's faults named its host by address (``127.0.0.1``) while its samples, the
    monitor's windows and the Prometheus ``host`` label name it ``local-1``: a user could not join them."""
    import msgpack
    import zmq

    from monitoring.prometheus import render

    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=2.0) as cluster:
        client = Client(cluster.address, timeout=30)
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        samples = context.socket(zmq.SUB)
        samples.setsockopt(zmq.LINGER, 0)
        samples.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            victim = next(w for w in client.workers() if w["name"] == "local-1")
            samples.connect(victim["samples"])
            assert samples.poll(30_000), "local-1 published no sample within 30 s"
            sample = msgpack.unpackb(samples.recv(), raw=False)
            # Stopped first, so it misses heartbeats (a killed worker of an embedded cluster is lost at once).
            cluster.workers[1].send_signal(signal.SIGSTOP)
            _wait_for(lambda: any(f["kind"] == "heartbeat_missed" for f in client.cluster()["faults"]), 30, "missed")
            cluster.workers[1].kill()
            _wait_for(lambda: any(f["kind"] == "worker_lost" for f in client.cluster()["faults"]), 30, "local-1 lost")
            faults = [fault for fault in client.cluster()["faults"] if fault.get("worker") == "local-1"]
        finally:
            samples.close()
            client.close()
    assert {fault["kind"] for fault in faults} >= {"heartbeat_missed", "worker_lost"}, faults
    assert {fault["host"] for fault in faults} == {sample["host"]}, (faults, sample)
    assert {fault["address"] for fault in faults} == {victim["host"]}  # where peers reach it, still said
    body, _ = render({"local-1": sample}, [], [])
    assert f'host="{faults[0]["host"]}"' in body.decode()


def test_a_worker_kept_out_by_a_live_namesake_says_so(tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    """A second ``hop worker --name w0`` while w0 is connected: the coordinator's socket drops its connection (the
    name is its identity), and it waited for ever without a word; it must say it has no answer and why that may
    be. A worker that did get in says so."""
    address = f"ipc://{tmp_path}/coordinator"
    _coordinator(address, processes)

    def worker(stderr: Any) -> subprocess.Popen[bytes]:
        command = ["worker", "--coordinator", address, "--name", "w0", "--map-slots", "1", "--reduce-slots", "1"]
        command += ["--spill-dir", str(tmp_path)]  # (not the machine's temporary directory)
        process = subprocess.Popen([sys.executable, "-m", "hop", *command], stderr=stderr)
        processes.append(process)
        return process

    first = worker(subprocess.PIPE)
    client = Client(address, timeout=30)
    second_said = tmp_path / "second.stderr"
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
        with open(second_said, "wb") as stderr:
            second = worker(stderr)
        # The warning comes 10 s after the registration went out, which a busy machine's start-up delays.
        _wait_for(lambda: b"no answer" in second_said.read_bytes(), 40, "the second w0's warning")
        assert [(w["name"], w["pid"]) for w in client.workers()] == [("w0", first.pid)]
    finally:
        client.close()
    for process in (second, first):
        process.terminate()
    second.wait(timeout=30)
    said = [first.communicate(timeout=30)[1].decode(), second_said.read_text()]
    assert f"hop worker w0: registered with the coordinator at {address} (1 map, 1 reduce, 2 stream slots)" in said[0]
    assert "registered" not in said[1], said[1]
    assert f"hop worker w0: no answer from a coordinator at {address} within 10 s; still trying" in said[1], said[1]
    assert "A worker named w0 that is still connected keeps this one out: give each worker its own --name" in said[1]


def test_a_worker_started_before_its_coordinator_does_not_blame_a_namesake(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A named worker started before its coordinator (nothing has taken its connection) was told after 10 s that a
    live worker of its name may keep it out, which cannot be when no connection was ever made. It says nothing took
    its connection, and registers once the coordinator starts."""
    address = f"ipc://{tmp_path}/coordinator"
    _, said = _said_worker(address, tmp_path, processes)
    # The note comes 10 s after the registration went out, which a busy machine's start-up delays.
    _wait_for(lambda: "no answer" in said.read_text(), 40, "the worker's note")
    assert (
        f"hop worker w0: no answer from a coordinator at {address} within 10 s; nothing has taken a connection there; "
        "still trying. Is the coordinator running, at that address?\n"
    ) in said.read_text(), said.read_text()
    assert "--name" not in said.read_text()
    _coordinator(address, processes)
    _wait_for(lambda: "registered with the coordinator" in said.read_text(), 30, "w0 registered")


def test_a_worker_says_when_its_coordinators_connection_closed_and_when_it_is_back(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A standalone worker whose coordinator was killed heartbeated into nothing and said nothing, for as long as
    none came back. It says, once, that the connection closed and that it still tries; and when it is back."""
    address = f"ipc://{tmp_path}/coordinator"
    first = _coordinator(address, processes)
    _, said = _said_worker(address, tmp_path, processes)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
    finally:
        client.close()
    first.kill()
    first.wait(timeout=10)
    gone = f"hop worker w0: the connection to the coordinator at {address} closed 5 s ago"
    _wait_for(lambda: gone in said.read_text(), 30, "the worker's note")
    assert "still trying" in said.read_text()
    _coordinator(address, processes)
    _wait_for(lambda: "connected to the coordinator at" in said.read_text(), 30, "the worker's second note")
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered again")
    finally:
        client.close()
    assert said.read_text().count(gone) == 1, said.read_text()


def test_a_worker_cut_off_from_its_coordinator_for_its_heartbeat_timeout_ends_its_tasks(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A standalone worker whose coordinator was killed ran that coordinator's tasks on, taking the host's cores
    for jobs that had ended with it, until a coordinator came back (then it ended them). Once the connection has been
    closed for the coordinator's heartbeat timeout (its answer to the registration says it: here 3 s), when one still
    running has taken the worker for lost, the worker ends its tasks and drops their spills, saying so; a
    coordinator started again there then runs a job on it."""
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = _coordinator(address, processes, "--heartbeat-timeout", "3")
    worker, said = _said_worker(address, tmp_path, processes)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
        spec = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), num_reduces=1)
        client.submit(spec)
        _wait_for(lambda: maps_running(client, on="w0"), 30, "a map runs on w0")
    finally:
        client.close()
    before = {child.pid for child in psutil.Process(worker.pid).children()}
    coordinator.kill()
    coordinator.wait(timeout=10)
    ended = f"hop worker w0: the connection to the coordinator at {address} has been closed for 3 s, its heartbeat "
    _wait_for(lambda: ended in said.read_text(), 30, "the worker's note that it ends its tasks")
    assert re.search(r"ending its [1-9]\d* running tasks? and dropping the spill files of 1 job\n", said.read_text())
    _wait_for(lambda: not before <= {c.pid for c in psutil.Process(worker.pid).children()}, 10, "a task ended")
    assert worker.poll() is None, said.read_text()
    _coordinator(address, processes)
    small = tmp_path / "small.txt"
    small.write_text("a b a\n")
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered again")
        run_job(client, "wordcount", [small], tmp_path / "again")
    finally:
        client.close()
    assert output_dict(tmp_path / "again") == {"a": 2, "b": 1}
    assert said.read_text().count(ended) == 1 and "Traceback" not in said.read_text(), said.read_text()


def test_a_worker_whose_coordinator_stopped_answering_ends_its_tasks_and_registers_afresh_when_it_answers(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator that is stopped (SIGSTOP, its machine suspended) or cut off without a reset keeps its
    connection open: its standalone worker saw nothing and ran its tasks on for as long as it was gone. The worker's
    pings now go unanswered, so it takes the connection for closed, and after the coordinator's heartbeat timeout
    ends its tasks, as for a coordinator that died. A stopped coordinator that comes back does not count its own
    silence against the worker and still counts on those tasks: the worker registers afresh, and they run again, so
    the job ends, with its exact output."""
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("HOP_TEST_GATE", str(gate))  # (the worker's tasks inherit it)
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = _coordinator(address, processes, "--heartbeat-timeout", "3")
    _, said = _said_worker(address, tmp_path, processes)
    source = tmp_path / "in.txt"
    source.write_text("a b a\nc a\n")
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
        thread, outcome = _run_in_thread(address, "gated_reduce", source, tmp_path / "out", num_reduces=1)
        _wait_for(lambda: (gate / "entered").exists(), 30, "the reducer waiting at its gate")
        coordinator.send_signal(signal.SIGSTOP)
        try:
            ended = f"hop worker w0: the connection to the coordinator at {address} has been closed for 3 s"
            _wait_for(lambda: ended in said.read_text(), 30, "the worker's note that it ends its tasks")
            assert "ending its 1 running task and dropping the spill files of 1 job" in said.read_text()
        finally:
            coordinator.send_signal(signal.SIGCONT)
        (gate / "go").touch()
        thread.join(timeout=90)
        assert not thread.is_alive(), "the job ended within 90 s of the coordinator's return"
    finally:
        client.close()
    assert "error" not in outcome, outcome.get("error")
    assert output_dict(tmp_path / "out") == {"a": 3, "b": 1, "c": 1}
    assert "registering afresh" in said.read_text() and "Traceback" not in said.read_text(), said.read_text()


def test_a_registration_answered_after_the_worker_sent_it_again_loses_no_task(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A coordinator busy for a few seconds (its Python code: ZeroMQ's I/O thread still takes connections and
    answers pings) as a worker registers and a job waits for one: the worker, unanswered for 2 s over a connection
    that is up, sends its registration again over a new one. The coordinator then took the first, answered it and
    gave the worker the job's tasks, all over the connection the worker had given up: the tasks never reached it,
    the coordinator waited for them, and the job for ever. The coordinator is this test's, its loop held (by a wait
    of its own) until the worker's second connection is taken; the worker is a ``hop worker`` process."""
    from hop.coordinator import Coordinator

    coordinator = Coordinator(f"ipc://{tmp_path}/coordinator")
    handshakes = coordinator.socket.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    hold, held, release = threading.Event(), threading.Event(), threading.Event()
    check_heartbeats = coordinator._check_heartbeats

    def held_once() -> None:
        if hold.is_set():
            hold.clear()
            held.set()
            release.wait(30)
        check_heartbeats()

    coordinator._check_heartbeats = held_once  # type: ignore[method-assign]
    loop = threading.Thread(target=coordinator.serve)
    loop.start()
    try:
        source = tmp_path / "in.txt"
        source.write_text("a b a\nc a\n")
        thread, outcome = _run_in_thread(coordinator.address, "wordcount", source, tmp_path / "out", num_reduces=1)
        _wait_for(lambda: len(coordinator.jobs) == 1, 30, "the job submitted, waiting for a worker")
        hold.set()
        assert held.wait(10), "the coordinator's loop held"
        while handshakes.poll(0):  # (the client's connection)
            handshakes.recv_multipart()
        processes.append(_worker(coordinator.address, "w0", tmp_path, slots=(1, 1, 0)))
        for connection in ("first", "second"):
            assert handshakes.poll(30_000), f"w0's {connection} connection taken"
            handshakes.recv_multipart()
        release.set()
        thread.join(timeout=30)
        states = [t["state"] for job in coordinator.jobs.values() for t in job.task_table()]
        assert not thread.is_alive(), f"the job ended within 30 s; its tasks: {states}"
    finally:
        release.set()
        coordinator.stop_workers, coordinator.running = True, False  # (w0 is shut down with it)
        loop.join(timeout=15)
        handshakes.close(linger=0)
    assert "error" not in outcome, outcome.get("error")
    assert output_dict(tmp_path / "out") == {"a": 3, "b": 1, "c": 1}
    (job,) = coordinator.jobs.values()
    assert [len(task.attempts) for task in (*job.maps, *job.reduces)] == [1, 1], "each task ran once"


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["int", "term"])
def test_a_worker_stopped_after_its_coordinator_ended_says_it_was_not_told(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], stop: signal.Signals
) -> None:
    """A worker stopped (Ctrl-C, SIGTERM) once its coordinator was gone waited 2 s for an answer that could not come,
    then said the coordinator would declare it lost once its heartbeat timeout passed: there was no coordinator. It
    says the coordinator was not told, its connection being closed, and ends at once."""
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = _coordinator(address, processes)
    worker, said = _said_worker(address, tmp_path, processes)
    _wait_for(lambda: "registered with the coordinator" in said.read_text(), 30, "w0 registered")
    coordinator.kill()
    coordinator.wait(timeout=10)
    _wait_for(lambda: "closed 5 s ago" in said.read_text(), 30, "the worker's note that the connection closed")
    worker.send_signal(stop)
    assert worker.wait(timeout=30) == 0
    assert (
        f"hop worker w0: stopped (no task was running); the coordinator at {address} was not told: the connection to "
        "it closed "
    ) in said.read_text(), said.read_text()
    assert "declares this worker lost" not in said.read_text(), said.read_text()


def test_a_worker_told_to_register_again_says_why(tmp_path: Path, processes: list[subprocess.Popen[bytes]]) -> None:
    """A standalone worker taken for lost (stopped past the heartbeat timeout), or heard by a coordinator started
    again at its address, ends its tasks, drops its spills and registers again: it logged only a second
    "registered", saying neither that it had been lost nor what it dropped. It says which, and what it drops."""
    address = f"ipc://{tmp_path}/coordinator"
    first = _coordinator(address, processes, "--heartbeat-timeout", "1")
    worker, said = _said_worker(address, tmp_path, processes)
    registered = f"hop worker w0: registered with the coordinator at {address}"
    _wait_for(lambda: said.read_text().count(registered) == 1, 30, "w0 registered")
    worker.send_signal(signal.SIGSTOP)
    try:
        time.sleep(3.0)  # 3 heartbeat timeouts
    finally:
        worker.send_signal(signal.SIGCONT)
    _wait_for(lambda: said.read_text().count(registered) == 2, 30, "w0 registered again")
    lost = (
        f"hop worker w0: the coordinator at {address} took this worker for lost (silent past its heartbeat timeout: "
        "stopped, starved or cut off) and runs its tasks again on other workers; ending its 0 running tasks, "
        "dropping the spill files of 0 jobs and registering again\n"
    )
    assert said.read_text().index(lost) < said.read_text().rindex(registered), said.read_text()
    first.kill()
    first.wait(timeout=30)
    _coordinator(address, processes)
    _wait_for(lambda: said.read_text().count(registered) == 3, 30, "w0 registered with the new coordinator")
    unknown = (
        f"hop worker w0: the coordinator at {address} does not know this worker (started again there: the jobs of "
        "the one before ended); ending its 0 running tasks, dropping the spill files of 0 jobs and registering again"
    )
    assert unknown in said.read_text(), said.read_text()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_a_worker_stopped_mid_job_tells_the_coordinator_and_the_job_finishes_exactly_at_once(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]], stop: signal.Signals
) -> None:
    """A ``hop worker`` stopped by Ctrl-C or SIGTERM while it runs a job's tasks ended without a word, and its
    coordinator ran them again only once the heartbeat timeout passed (here 60 s): it now says it leaves, the
    coordinator runs its attempts again elsewhere at once, and the worker says what became of them."""
    address = f"ipc://{tmp_path}/coordinator"
    command = [sys.executable, "-m", "hop", "coordinator", "--bind", address, "--heartbeat-timeout", "60"]
    coordinator = subprocess.Popen(command, stderr=subprocess.PIPE)
    processes.append(coordinator)
    processes.append(_worker(address, "w0", tmp_path))
    w1 = _worker(address, "w1", tmp_path, stderr=subprocess.PIPE)
    processes.append(w1)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: sum(w["alive"] for w in client.workers()) == 2, 30, "both workers registered")
        output = tmp_path / "out"
        thread, outcome = _run_in_thread(address, "slow_map", source, output, num_reduces=2, split_size=50_000)
        _wait_for(lambda: maps_running(client, on="w1"), 30, "a map runs on w1")
        w1.send_signal(stop)
        stopped = time.monotonic()
        _wait_for(lambda: not {w["name"]: w["alive"] for w in client.workers()}["w1"], 10, "w1 known gone")
        assert time.monotonic() - stopped < 10, "long before the heartbeat timeout"
        thread.join(timeout=60)
        faults = [f for f in client.cluster()["faults"] if f.get("worker") == "w1"]
    finally:
        client.close()
    assert not thread.is_alive() and "report" in outcome, outcome
    assert output_dict(tmp_path / "out") == word_counts(source)
    assert any(a["worker"] == "w1" and a["status"] != "succeeded" for a in outcome["report"]["attempts"])
    assert [f["kind"] for f in faults] == ["worker_lost"] and faults[0]["left"], faults
    said = w1.communicate(timeout=30)[1].decode()
    assert w1.returncode == 0, said
    assert f"hop worker w1: stopped; the coordinator at {address} runs its " in said, said
    assert re.search(r" running tasks? again on other workers", said) and "Traceback" not in said, said
    coordinator.terminate()
    told = coordinator.communicate(timeout=30)[1].decode()
    assert "hop coordinator: worker w1 stopped; its running tasks run again on other workers\n" in told, told


def test_a_continuous_jobs_source_outlives_workers_that_come_and_go(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Each ``hop worker`` stopped (Ctrl-C, SIGTERM) while it ran a continuous job's source counted a failed attempt:
    the second stop here (``max_attempts`` 2; 4 by default) gave the source up for good, and the query went on
    without it (``hop monitor``'s coordinator stream after a worker was restarted four times). A worker leaving is
    not the task's fault: the source waits for the next slot, its task table row says ``pending`` (it said
    ``failed``) with how its last attempt ended, and it runs on the next worker that comes."""
    address = f"ipc://{tmp_path}/coordinator"
    _coordinator(address, processes)

    def worker(name: str, stream_slots: int) -> subprocess.Popen[bytes]:
        processes.append(_worker(address, name, tmp_path, subprocess.DEVNULL, (1, 1, stream_slots)))
        return processes[-1]

    worker("home", 0)  # (its two slots take the two reducers: the source runs only on the visitor)
    spec, _ = _replay_wordcount(tmp_path, max_attempts=2)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["home"], 30, "home registered")
        job_id = client.submit(spec)

        def source() -> dict[str, Any]:
            return next(t for t in client.job(job_id)["tasks"] if t["kind"] == "map")

        for visit in range(1, 5):
            visitor = worker("visitor", 1)
            _wait_for(lambda n=visit: source()["state"] == "running" and source()["attempts"] == n, 30, "it runs")
            if visit == 4:
                before = client.status(job_id)["input_records"]  # (as the lost attempts last reported)
                _wait_for(lambda n=before: client.status(job_id)["input_records"] > n, 30, "the source read on")
                break
            visitor.send_signal(signal.SIGTERM)
            assert visitor.wait(timeout=30) == 0
            row = source()
            assert (row["state"], row["last_attempt"], row["error"]) == ("pending", "lost", "worker visitor stopped")
            status = client.status(job_id)
            assert status["state"] == "running" and status["sources_gone"] == [], status
        client.stop(job_id)
        report = client.wait(job_id, timeout=30)["report"]
    finally:
        client.close()
    assert report["status"] == "succeeded" and report["continuous"]["sources_gone"] == []
    assert [a["status"] for a in report["attempts"] if a["kind"] == "map"] == ["lost", "lost", "lost", "succeeded"]
    assert report["counters"]["map_input_records"] > 0


def test_stopping_a_continuous_job_ends_its_sources_that_have_no_slot(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """``hop stop`` of a continuous job whose source waited for a slot that never came (a worker whose slots its
    reducers hold; or its source's worker left) never finished: the job waited for that source to drain. The source
    now ends unstarted a moment after the stop, the reducers stop waiting for it, the job ends, and its report and
    task table say so."""
    address = f"ipc://{tmp_path}/coordinator"
    _coordinator(address, processes)
    processes.append(_worker(address, "home", tmp_path, subprocess.DEVNULL, (1, 1, 0)))  # (the reducers fill it)
    spec, source = _replay_wordcount(tmp_path)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["home"], 30, "home registered")
        job_id = client.submit(spec)

        def states() -> list[str]:
            return [task["state"] for task in client.job(job_id)["tasks"]]

        _wait_for(lambda: states() == ["pending", "running", "running"], 30, "the reducers run, the source waits")
        client.stop(job_id)
        report = client.wait(job_id, timeout=30)["report"]
        assert states() == ["unstarted", "committed", "committed"]
    finally:
        client.close()
    assert report["status"] == "succeeded" and report["continuous"]["stopped"]
    assert report["continuous"]["sources_unstarted"] == [{"index": 0, "url": source}]


def test_a_standalone_coordinator_says_when_it_finds_a_worker_lost(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A worker killed outright: the coordinator's terminal said nothing when it declared it lost and ran its tasks
    again, and its user could not tell why a job slowed down; it names the worker and how long it was silent. The
    last live worker's tasks run nowhere, and its running jobs fail: it said they ran again on other workers."""
    coordinator, address, client = _coordinator_with_w0(tmp_path, processes, "--heartbeat-timeout", "1")
    w0 = processes[-1]
    processes.append(_worker(address, "w1", tmp_path))
    try:
        _wait_for(lambda: sorted(w["name"] for w in client.workers() if w["alive"]) == ["w0", "w1"], 30, "w1 in")
        processes[-1].kill()
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w1 declared lost")
        thread, outcome = _run_in_thread(address, "slow_map", source, tmp_path / "out", num_reduces=1)
        _wait_for(lambda: maps_running(client), 30, "the job's maps started")
        w0.kill()
        thread.join(timeout=60)
        assert not thread.is_alive() and "no live workers" in str(outcome.get("error")), outcome
    finally:
        client.close()
    coordinator.terminate()
    told = coordinator.communicate(timeout=30)[1].decode()
    assert "hop coordinator: worker w1 lost (silent " in told, told
    assert " s); its running tasks run again on other workers\n" in told, told
    assert "hop coordinator: worker w0 lost (silent " in told, told
    assert " s); it was the last live worker: 1 running job fails for want of one\n" in told, told


def test_a_task_that_kills_every_worker_it_runs_on_fails_its_job_on_a_cluster_that_restarts_them(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A map whose code kills the worker it runs under, on a cluster whose worker is started again whenever it dies
    (as a service manager restarts it): an attempt lost with its worker counted for nothing, so the map ran again
    on each new worker for ever and the job never ended. The job now fails once the map was running on a worker
    as it died twice --max-attempts times, naming the map, its input and the worker; one death is still retried
    (``test_a_task_whose_worker_was_killed_once_is_retried_even_with_one_attempt``)."""
    source = tmp_path / "in.txt"
    source.write_text("a b\nboom\nc d\n", encoding="utf-8")
    address = f"ipc://{tmp_path}/coordinator"
    # Each death is found as the restarted w0 registers under its name, however long a loaded machine takes to start
    # it: with the default timeout, a start slower than 5 s found w0 lost with no other worker, another failure.
    _coordinator(address, processes, "--heartbeat-timeout", "120")
    supervising = threading.Event()
    supervising.set()

    def supervise() -> None:
        while supervising.is_set():
            processes.append(_worker(address, "w0", tmp_path))
            while processes[-1].poll() is None and supervising.is_set():
                time.sleep(0.02)

    supervisor = threading.Thread(target=supervise)
    supervisor.start()
    client = Client(address, timeout=30)
    try:
        began = time.monotonic()
        with pytest.raises(JobFailed) as failure:
            run_job(client, "worker_killing_map", [source], tmp_path / "out", options={"max_attempts": 1})
        took = time.monotonic() - began
    finally:
        supervising.clear()
        supervisor.join(timeout=30)
        client.close()
    error = failure.value.status["error"]
    assert error.startswith(f"map-00000 ({source}[0:13]) was running each of the 2 times its worker died (w0 2 times)")
    assert "check whether its code ends the process it runs under" in error, error
    assert error.endswith("gave up after 2 attempts lost with their worker (2 x --max-attempts 1)"), error
    assert [a["status"] for a in failure.value.status["report"]["attempts"] if a["kind"] == "map"] == ["lost"] * 2
    assert took < 60, took


def test_a_worker_restarted_under_its_name_publishes_its_samples_where_the_old_one_did(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """``hop monitor --coordinator`` subscribes to every worker's sample stream once, when it starts: a worker killed
    and restarted under its name published on a new port, and the monitor showed it missing for good."""
    import msgpack
    import zmq

    address = f"ipc://{tmp_path}/coordinator"
    _coordinator(address, processes)
    processes.append(_worker(address, "w0", tmp_path))
    client = Client(address, timeout=30)
    monitor = zmq.Context.instance().socket(zmq.SUB)  # as the monitor's source and feed for w0
    monitor.setsockopt(zmq.LINGER, 0)
    monitor.setsockopt(zmq.SUBSCRIBE, b"")
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
        [before] = client.workers()
        monitor.connect(before["samples"])
        assert monitor.poll(30_000), "no sample from w0"
        processes[-1].kill()
        processes[-1].wait(timeout=10)
        processes.append(_worker(address, "w0", tmp_path))
        _wait_for(lambda: client.workers()[0]["pid"] == processes[-1].pid, 30, "the new w0 registered")
        _wait_for(lambda: client.workers()[0]["samples"] == before["samples"], 30, "the new w0 took over the endpoint")
        while monitor.poll(0):  # what the old w0 published before it was killed
            monitor.recv()
        assert monitor.poll(30_000), "no sample from the new w0 where the old one published"
        sample = msgpack.unpackb(monitor.recv(), raw=False)
    finally:
        monitor.close()
        client.close()
    assert sample["worker"] == "w0"


def test_hop_shutdown_stops_the_coordinator_and_its_workers(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A coordinator stopped by a signal leaves its workers up, and no command stopped a whole cluster: `hop
    shutdown` does. It refuses a cluster running a job unless --force, which cancels the job first (its _job.json
    says so) and then stops every process."""
    address = f"ipc://{tmp_path}/coordinator"
    _coordinator(address, processes)
    processes += [_worker(address, name, tmp_path) for name in ("w0", "w1")]
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: sum(w["alive"] for w in client.workers()) == 2, 30, "both workers registered")
        thread, outcome = _run_in_thread(address, "slow_map", source, tmp_path / "out", num_reduces=1)
        _wait_for(lambda: maps_running(client), 30, "a map running")
    finally:
        client.close()
    command = [sys.executable, "-m", "hop", "shutdown", "--coordinator", address]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "is running 1 job:" in refused.stderr and "--force" in refused.stderr
    assert "stop it first (hop stop JOB_ID" in refused.stderr, refused.stderr  # one job: 'it', not 'them'
    assert all(process.poll() is None for process in processes), "nothing was stopped"
    forced = subprocess.run([*command, "--force"], capture_output=True, text=True, timeout=120)
    assert forced.returncode == 0, forced.stderr
    assert "and its 2 workers are shutting down; 1 job stopped first" in forced.stdout
    thread.join(timeout=60)
    assert isinstance(outcome.get("error"), JobFailed)
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["status"] == "failed" and report["error"].startswith("cancelled by hop shutdown --force: the "), (
        report["error"]  # (it said 'cancelled (hop stop, or an interrupted hop run or hop submit)')
    )
    for process in processes:
        assert process.wait(timeout=30) == 0, process.args


def test_the_submitter_of_a_job_hop_shutdown_force_ended_is_told_how_it_ended(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """``hop shutdown --force`` stops a job, waits for it to end and shuts the cluster down at once. Its submitter
    (``hop submit`` of a continuous job polls every 0.2 s, then asks for the new windows) asked after that: with the
    coordinator gone it waited 30 s and failed, 'coordinator did not answer', exit 3, though its job had drained and
    succeeded. The coordinator now answers its submitters' status and windows requests a moment longer."""
    address = f"ipc://{tmp_path}/coordinator"
    _coordinator(address, processes)
    processes.append(_worker(address, "w0", tmp_path, subprocess.DEVNULL, (1, 2, 1)))
    spec, _ = _replay_wordcount(tmp_path)
    submitter = Client(address, timeout=5)
    try:
        _wait_for(lambda: [w["name"] for w in submitter.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
        job_id = submitter.submit(spec)
        _wait_for(lambda: submitter.windows(job_id) != [], 30, "a window written")
        command = [sys.executable, "-m", "hop", "shutdown", "--coordinator", address, "--force"]
        forced = subprocess.run(command, capture_output=True, text=True, timeout=60)  # (the submitter not asking)
        assert forced.returncode == 0, forced.stderr
        status = submitter.follow(job_id)
        windows = submitter.windows(job_id)
    finally:
        submitter.close()
    assert status["state"] == "succeeded", status
    assert windows and status["report"]["continuous"]["windows_written"] == windows[-1]["seq"], windows
    for process in processes:
        assert process.wait(timeout=30) == 0, process.args


def test_a_worker_already_found_lost_that_is_then_stopped_is_answered(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A worker paused past the heartbeat timeout (declared lost) and then stopped: its word that it leaves got a
    ``reinit`` instead of an answer, and it said the coordinator did not answer, 2 s later."""
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = [sys.executable, "-m", "hop", "coordinator", "--bind", address, "--heartbeat-timeout"]
    processes.append(subprocess.Popen([*coordinator, "1"]))
    worker = _worker(address, "w0", tmp_path, stderr=subprocess.PIPE)
    processes.append(worker)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
        worker.send_signal(signal.SIGSTOP)
        try:
            _wait_for(lambda: not client.workers()[0]["alive"], 30, "w0 declared lost")
            worker.send_signal(signal.SIGTERM)  # (taken once it runs again)
        finally:
            worker.send_signal(signal.SIGCONT)
    finally:
        client.close()
    said = worker.communicate(timeout=30)[1].decode()
    assert f"hop worker w0: stopped; the coordinator at {address} knows" in said, said
    assert "no answer" not in said, said


def test_a_worker_whose_terminal_closed_stops_as_on_sigterm(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """SIGHUP (its terminal or SSH session closed) killed a standalone worker outright: the coordinator found it lost
    only after its heartbeat timeout, and its spill directory stayed. It stops as on SIGTERM now: it tells the
    coordinator, removes its spill directory and exits 0."""
    address = f"ipc://{tmp_path}/coordinator"
    _coordinator(address, processes)
    spills = tmp_path / "spills"
    spills.mkdir()
    command = ["-m", "hop.worker", "--coordinator", address, "--name", "w0", "--spill-dir", str(spills)]
    worker = subprocess.Popen(  # (SIGHUP at its default, whatever this process was started with: nohup would ignore it)
        [sys.executable, *command],
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    processes.append(worker)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
        assert len(list(spills.iterdir())) == 1  # (its spill directory)
        worker.send_signal(signal.SIGHUP)
        said = worker.communicate(timeout=30)[1].decode()
        assert worker.returncode == 0, (worker.returncode, said)
        assert f"hop worker w0: stopped; the coordinator at {address} knows" in said, said
        assert not client.workers()[0]["alive"]  # (told, not found lost 5 s later)
    finally:
        client.close()
    assert list(spills.iterdir()) == []


def test_a_worker_stopped_with_its_coordinator_hung_says_it_had_no_answer_and_ends(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A worker stopped while its coordinator does not answer (stopped with SIGSTOP: its connection stays up) waits
    at most ``LEAVE_ANSWER_SECONDS`` for the answer to its word that it leaves, then ends, saying what the
    coordinator will do. (One whose coordinator's connection closed says at once that it was not told:
    test_a_worker_stopped_after_its_coordinator_ended_says_it_was_not_told.)"""
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = _coordinator(address, processes)
    worker = _worker(address, "w0", tmp_path, stderr=subprocess.PIPE)
    processes.append(worker)
    client = Client(address, timeout=30)
    try:
        _wait_for(lambda: [w["name"] for w in client.workers() if w["alive"]] == ["w0"], 30, "w0 registered")
    finally:
        client.close()
    coordinator.send_signal(signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        worker.terminate()
        said = worker.communicate(timeout=30)[1].decode()
    finally:
        coordinator.send_signal(signal.SIGCONT)
    assert time.monotonic() - stopped < 10 and worker.returncode == 0, said
    assert f"hop worker w0: stopped; no answer from the coordinator at {address} within 2 s: it declares this " in said
    assert "worker lost once its heartbeat timeout passes (no task was running)" in said, said


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT", "hop shutdown"])
def test_a_stopped_coordinator_removes_its_socket_file(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]], stop: str
) -> None:
    """A standalone ``hop coordinator --bind ipc://PATH`` stopped (by a signal or ``hop shutdown``) left its socket
    file behind, though the README says a stopped one removes it: ZeroMQ removes it only once its I/O thread closes
    the listener, which the exiting process did not wait for."""
    path = tmp_path / "coordinator"
    coordinator = _coordinator(f"ipc://{path}", processes)
    client = Client(f"ipc://{path}", timeout=30)
    try:
        assert client.workers() == []  # (it listens)
        if stop == "hop shutdown":
            client.shutdown()
        else:
            coordinator.send_signal(getattr(signal, stop))
    finally:
        client.close()
    assert coordinator.wait(timeout=30) == 0
    assert not path.exists(), f"{path} left behind by a coordinator stopped by {stop}"


def test_a_stopping_coordinator_leaves_the_socket_file_of_one_started_in_its_place(tmp_path: Path) -> None:
    """The socket file a coordinator removes as it stops is its own: one another process bound at that path since
    (a coordinator restarted there while the old one ended) stays."""
    from hop.protocol import SocketFile

    path = tmp_path / "coordinator"
    with socket.socket(socket.AF_UNIX) as first:
        first.bind(str(path))
        own = SocketFile.bound_at(f"ipc://{path}")
        assert own is not None and SocketFile.bound_at(f"tcp://127.0.0.1:{5555}") is None
        assert SocketFile.bound_at("ipc://@abstract") is None
        path.unlink()
        with socket.socket(socket.AF_UNIX) as second:
            second.bind(str(path))
            own.remove()
            assert path.exists(), "the file of the socket bound since was removed"
            SocketFile.bound_at(f"ipc://{path}").remove()  # type: ignore[union-attr]
            assert not path.exists()


@pytest.mark.parametrize("then", [None, "topk"], ids=["one job", "the first of two jobs run through files"])
def test_a_coordinator_stopped_by_a_signal_fails_its_jobs_and_answers_their_clients(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]], then: str | None
) -> None:
    """A standalone coordinator stopped by SIGTERM while a job ran left its client waiting 30 s for an answer, then
    failing with 'did not answer' (exit 3) and nothing in the output: the job was lost without a word. It fails the
    job as it stops: the client is answered at once, and the output's _job.json says what happened and what to do.
    With a job after it (--blocking), OUT/_job.json was not written at all: the run passed the loss on untold."""
    coordinator, address, client = _coordinator_with_w0(tmp_path, processes)
    try:
        thread, outcome = _run_in_thread(address, "slow_map", source, tmp_path / "out", then, num_reduces=1)
        _wait_for(lambda: maps_running(client), 30, "a map running")
    finally:
        client.close()
    coordinator.terminate()
    thread.join(timeout=15)
    assert not thread.is_alive(), "the client was not answered"
    assert isinstance(outcome.get("error"), JobLost), outcome  # (exit code 3: the cluster went, not the job)
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["status"] == "failed" and "was stopped (Ctrl-C or SIGTERM) while the job ran" in report["error"]
    assert report["error"] in str(outcome["error"]) and "submit it again" in report["error"]
    told = coordinator.communicate(timeout=30)[1].decode()
    assert f"hop coordinator: stopped while running 1 job, failed: {report['job_id']}" in told, told


def test_a_client_polling_when_its_coordinator_is_stopped_is_told_the_job_failed(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """A client whose status request was not held when SIGTERM came (polls without a wait here, so that none ever
    is) sent its next one after the coordinator had closed its socket: with no coordinator there, it got no answer;
    with one restarted in its place, it was told that the job was lost in a restart rather than failed and why. The
    stopping coordinator keeps answering status requests until the job's failure was told."""
    coordinator, address, client = _coordinator_with_w0(tmp_path, processes)
    spec = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), num_reduces=1)
    poller = Client(address, timeout=10)
    try:
        job_id = poller.submit(spec)
        _wait_for(lambda: maps_running(client), 30, "a map running")
        coordinator.terminate()
        deadline = time.monotonic() + 10
        while (status := poller.follow(job_id))["state"] == "running":
            assert time.monotonic() < deadline, "the job still running 10 s after SIGTERM"
    finally:
        poller.close()
        client.close()
    assert status["state"] == "failed" and status.get("coordinator_stopped"), status
    assert "was stopped (Ctrl-C or SIGTERM) while the job ran" in status["error"], status
    told = coordinator.communicate(timeout=15)[1].decode()
    assert coordinator.returncode == 0 and f"stopped while running 1 job, failed: {job_id}" in told, told


def test_a_worker_named_by_its_host_and_pid_is_not_told_of_a_namesake(tmp_path: Path) -> None:
    """A worker started before its coordinator says after 10 s that nothing answers; one named by its host and pid
    (no --name) was also told that a namesake could keep it out and to give each worker its own --name, which it
    cannot have and had not been given."""
    address = f"ipc://{tmp_path}/coordinator"
    command = [sys.executable, "-m", "hop.worker", "--coordinator", address, "--spill-dir", str(tmp_path)]
    worker = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert worker.stderr is not None
        said = worker.stderr.readline()  # (the warning, after 10 s; empty if it exited)
    finally:
        worker.terminate()
        said += worker.communicate(timeout=30)[1]
    assert f"no answer from a coordinator at {address} within 10 s; nothing has taken a connection there" in said, said
    assert "Is the coordinator running, at that address?\n" in said and "--name" not in said, said


def test_a_malformed_message_is_answered_with_an_error_and_the_coordinator_goes_on(
    tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    """Anything can connect to the coordinator's port: a message that was not msgpack, or not an engine message, or
    of more than one frame, raised out of its loop and took the coordinator down with every job it ran."""
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = _coordinator(address, processes)
    client = Client(address, timeout=30)
    context = zmq.Context.instance()
    stranger = context.socket(zmq.DEALER)
    stranger.setsockopt(zmq.LINGER, 0)
    try:
        assert client.workers() == []  # (it is up)
        stranger.connect(address)
        answers = []
        for frames in ([b"\xc1"], [b"\x92\x01\x02"], [b"GET / HTTP/1.0\r\n\r\n"], [b"a", b"b"]):
            stranger.send_multipart(frames)
            assert stranger.poll(10_000), f"no answer to {frames}"
            answers.append(unpack(stranger.recv()))
        assert [answer["type"] for answer in answers] == ["error"] * 4, answers
        assert all("malformed engine message" in answer["message"] for answer in answers), answers
        assert client.workers() == [] and coordinator.poll() is None
    finally:
        stranger.close()
        client.close()
