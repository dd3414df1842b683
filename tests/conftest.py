"""Shared fixtures: a real local cluster (coordinator + workers as processes) and a leak check.

The cluster is started once per session: starting processes costs about a second, and every engine test runs on the
same code paths as ``hop run``. After the session the leak check asserts that no process started by the tests is
still alive.
"""

from __future__ import annotations

import compileall
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hypothesis
import psutil
import pytest
import zmq

from hop.client import Client
from hop.coordinator import Coordinator, WorkerInfo
from hop.lifetime import STOP_SIGNALS, become_subreaper
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.outputs import OutputGuard
from hop.protocol import message, unpack
from hop.runner import build_spec, online_options, run_steps
from hop.spark_gateway import java_found

ROOT = Path(__file__).resolve().parent.parent
TEST_JOBS = Path(__file__).resolve().parent / "jobs"

# The JVMs the tests start (Spark sessions, their child processes, the view's compactions) process a few megabytes at
# most: compiling with C1 only roughly halves their start-up CPU, which is most of what they cost. Spark's launcher
# adds SPARK_SUBMIT_OPTS to the driver JVM's options (the executors' too in local mode); a standalone master and
# worker read SPARK_DAEMON_JAVA_OPTS. Inherited by every process the tests start.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM_OPTIONS)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", QUICK_JVM_OPTIONS)

PROJECT_PACKAGES = ("hop", "shuffle", "monitoring", "jobs")


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the project once, before any test process starts (in the controller of a parallel run only), as
    installing it would. Python reads bytecode whatever PYTHONDONTWRITEBYTECODE says but, with it set (CI's machine
    has it), writes none: every ``hop`` command, launcher and coordinator the tests start compiled the engine's
    sources again, about 0.15 s of CPU each, hundreds of times a run."""
    if not hasattr(config, "workerinput"):
        for package in PROJECT_PACKAGES:
            compileall.compile_dir(ROOT / package, quiet=1)


# The property tests assert what the code computes, not how fast: Hypothesis's per-example deadline (200 ms) and its
# too-slow health check turn a stall of a loaded machine (the suite runs beside the CI's other work, two processes on
# two cores) into a failure that says nothing about the code. Examples stay random: a failure names its inputs.
hypothesis.settings.register_profile("hop", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("hop")

# The tests check what hop does on Ctrl-C and on a hang-up, in this process and in every process it starts, which
# inherit ignored dispositions: a suite started as a shell's background job (`pytest &` with no job control ignores
# SIGINT) or under nohup (SIGHUP) failed those tests (a worker sent SIGINT kept running; `hop run` rightly keeps a
# hang-up ignored, as under nohup). They start from the defaults.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


SPARK_MISSING = (
    "Java is not installed; Spark needs Java 17 (.ci/run installs it)"
    if not java_found()
    else "PySpark is not installed (pip install -e '.[dev]')"
    if importlib.util.find_spec("pyspark") is None
    else None
)
"""Why Spark cannot run here, or None. The engine itself needs neither Java nor PySpark."""

needs_spark = pytest.mark.skipif(SPARK_MISSING is not None, reason=SPARK_MISSING or "")


@pytest.fixture(scope="session", autouse=True)
def no_leaked_processes() -> Iterator[None]:
    become_subreaper()  # orphans (task processes of a worker a test killed) stay ours, so they are checked too
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    leaked = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    _, alive = psutil.wait_procs(leaked, timeout=10)
    for process in alive:
        process.kill()
    assert not alive, f"processes left running by the tests: {[p.cmdline() for p in alive]}"


@pytest.fixture(scope="session", autouse=True)
def shared_browser_closed() -> Iterator[None]:
    """The browser tests' Chromium (``tests.browser``: one per test process) is closed at the session's end, before
    the leak check above (set up earlier, so torn down later) looks for processes left running."""
    yield
    from tests.browser import close_shared_browser

    close_shared_browser()


@pytest.fixture(autouse=True)
def stop_signal_handlers_kept() -> Iterator[None]:
    """Every test ends with the Ctrl-C and SIGTERM handlers it started with. Code a test runs in this process installs
    its own (``hop``'s main defers both while it ends; a SparkContext cancels its jobs on Ctrl-C), which would change
    what a later test's Ctrl-C does according to the order the tests run in, which two processes (pytest-xdist)
    change: a Ctrl-C that a later test expects to raise KeyboardInterrupt was only noted."""
    handlers = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    yield
    for number, handler in handlers.items():
        signal.signal(number, signal.SIG_DFL if handler is None else handler)


@pytest.fixture()
def ctrl_c_as_scratch_is_made(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A Ctrl-C that comes right after a run's scratch directory beside its output is made (``hop.spilldirs``), before
    the caller holds it: what the code under test must survive without leaving the directory. Ctrl-C raises
    ``KeyboardInterrupt`` meanwhile, as in a ``hop run``."""
    import time

    import hop.spilldirs

    made = hop.spilldirs.make_spill_dir

    def made_then_interrupted(root: str | None, prefix: str = hop.spilldirs.PREFIX) -> Path:
        folder = made(root, prefix)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # (a handler runs between bytecodes: here, unless held)
        return folder

    monkeypatch.setattr(hop.spilldirs, "make_spill_dir", made_then_interrupted)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as local:
        yield local


@pytest.fixture()
def client(cluster: LocalCluster) -> Iterator[Client]:
    connection = Client(cluster.address, timeout=30)
    yield connection
    connection.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One in-process SparkSession (``local[1]``, UTC, 2 shuffle partitions) for every test that reads or checks
    with Spark SQL: a JVM start costs seconds of CPU. Stopped with its JVM before the leak check runs."""
    if SPARK_MISSING is not None:
        pytest.skip(SPARK_MISSING)
    from hop.spark_engine import shutdown_jvm, start_session, stop_session

    conf = {
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
    }
    session = start_session("local[1]", "hop tests", quiet=True, conf=conf)
    try:
        yield session
    finally:
        stop_session(session)
        shutdown_jvm()


def hop(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the ``hop`` command line (this interpreter's) and capture its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "hop", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def maps_running(client: Client, on: str | None = None) -> bool:
    """Whether the newest running job has a map running (on worker ``on``, if given): for a test that acts once
    its job is under way (a fixed delay may act before it is, on a loaded machine)."""
    jobs = [job for job in client.jobs() if job["state"] == "running"]
    tasks = client.job(jobs[-1]["job_id"])["tasks"] if jobs else []
    return any(t["kind"] == "map" and t["state"] == "running" and on in (None, t["worker"]) for t in tasks)


def job_path(name: str) -> str:
    """A job file from ``jobs/`` (shipped jobs) or ``tests/jobs/`` (test-only jobs)."""
    for folder in (ROOT / "jobs", TEST_JOBS):
        if (folder / f"{name}.py").exists():
            return str(folder / f"{name}.py")
    raise FileNotFoundError(name)


def run_job(
    client: Client, job: str, inputs: list[Any], output: Path, job_class: str | None = None, **settings: Any
) -> dict[str, Any]:
    """Run a job file on the test cluster and return its report."""
    spec = build_spec(load_job_file(job_path(job), job_class), [str(i) for i in inputs], str(output), **settings)
    return run_steps(client, spec, progress=False, timeout=120)


def read_output(output: Path) -> list[tuple[Any, Any]]:
    """All (key, value) pairs of an output directory, part by part, in file order (JSON arrays as lists)."""
    pairs = []
    for part in sorted(output.glob("part-*")):
        # (by "\n" only: a JSON string may hold U+2028 or U+0085 as they are, which splitlines() takes for line ends)
        *lines, after_last = part.read_text(encoding="utf-8").split("\n")
        assert after_last == "", f"{part} does not end with a line end"
        for line in lines:
            key, value = line.split("\t")
            pairs.append((json.loads(key), json.loads(value)))
    return pairs


def output_dict(output: Path) -> dict[Any, Any]:
    return {(tuple(k) if isinstance(k, list) else k): v for k, v in read_output(output)}


class PairChannel:
    """A task's channel to a test standing in for its worker: a PAIR socket each side (``hop.tasks``)."""

    def __init__(self, context: zmq.Context, address: str) -> None:
        self._socket = context.socket(zmq.PAIR)
        self._socket.connect(address)

    @property
    def control_socket(self) -> zmq.Socket:
        return self._socket

    def send(self, msg_type: str, /, **fields: Any) -> None:
        self._socket.send(message(msg_type, **fields))

    def receive(self, timeout: float) -> dict[str, Any] | None:
        return unpack(self._socket.recv()) if self._socket.poll(int(timeout * 1000)) else None

    def close(self) -> None:
        self._socket.close(linger=0)


def write_nan_keys_job(folder: Path, reduce: str) -> tuple[Path, Path]:
    """A job whose map yields a float NaN key for the word ``x`` (a number for the others; ``Sum`` in scope,
    ``reduce`` its combine/reduce definitions) and an input with two such words: the job file and the input."""
    job = folder / "nan_keys.py"
    job.write_text(
        "from hop import Job\nfrom hop.aggregates import Sum\n\n\nclass NanKeys(Job):\n"
        "    def map(self, offset, line):\n        for word in line.split():\n"
        "            yield (float('nan') if word == 'x' else len(word) / 2), 1\n\n"
        f"    {reduce}\n"
    )
    source = folder / "in.txt"
    source.write_text("aaaaa x a\nx b\n")
    return job, source


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    """A coordinator (not serving: the test calls its handlers) with one worker, ``w``, of two map and two reduce
    slots."""
    coordinator = Coordinator(f"ipc://{tmp_path}/coordinator")
    coordinator.workers["w"] = WorkerInfo(
        identity=b"w", name="w", host="127.0.0.1", pid=0, map_slots=2, reduce_slots=2,
        free_map=2, free_reduce=2, last_seen=time.time(),
    )  # fmt: skip
    try:
        yield coordinator
    finally:
        coordinator.events.close()
        coordinator.socket.close(linger=0)


def submit_to_handlers(
    coordinator: Coordinator, source: Path, output: Path, snapshot_every: float | None = None
) -> str:
    """Submit a word count of ``source`` into ``output`` (replacing what is there; with snapshots every
    ``snapshot_every`` of the input, if given) and give its map and its reduce to worker ``w`` (the run_task messages
    go nowhere: no worker is connected); its id."""
    job_class = load_job_file(job_path("wordcount"))
    options = online_options(job_class, [str(source)], snapshot_every=snapshot_every) if snapshot_every else {}
    spec = build_spec(job_class, [str(source)], str(output), num_reduces=1, overwrite=True, options=options)
    known = set(coordinator.jobs)
    coordinator.on_submit(b"client", {"job": spec.to_wire()})
    (job_id,) = set(coordinator.jobs) - known
    coordinator._schedule()
    job = coordinator.jobs[job_id]
    assert [len(job.maps[0].attempts), len(job.reduces[0].attempts)] == [1, 1], "both attempts given to w"
    return job_id


def relay(coordinator: Coordinator, report: dict[str, Any]) -> None:
    """Hand ``report`` to its handler, as the coordinator's loop does (not through ``handle``, which would report an
    exception as the job's internal error instead of failing the test)."""
    getattr(coordinator, f"on_{report['type']}")(b"w", report)


def write_as_a_late_reduce(output: Path) -> list[Path]:
    """The files a reduce attempt writes under ``OUT/_temporary`` after its job's end removed it: its output and its
    files of a snapshot that will never be published."""
    temporary = output / "_temporary"
    files = [temporary / "part-00000.attempt-0", temporary / "snapshots" / "0.500" / "part-00000"]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('"a"\t1\n')
    return files


def guard_replaced_after_its_check(elsewhere: Path, replace: Callable[[Path], None]) -> type[OutputGuard]:
    """An ``OutputGuard`` whose output directory ``replace(OUT)`` replaces right after its first check (its first
    ``changed``, which ``check`` asks too; once: while ``elsewhere``, where ``replace`` moves it, does not exist), so
    that what is written after a check meets the replacement."""

    class ReplacedAfterItsCheck(OutputGuard):
        def changed(self) -> bool:
            changed = super().changed()
            if not elsewhere.exists():
                replace(Path(self.output))
            return changed

    return ReplacedAfterItsCheck


def interrupted_as_spark_starts(command: list[str], **popen: Any) -> tuple[int, str]:
    """Run ``command`` (a hop command that starts Spark; ``popen``: ``cwd``, ``env``) in a session of its own,
    press Ctrl-C once it has connected to the JVM's gateway but its SparkSession is still starting (the main thread
    waits in a call into the JVM), and return its exit code and what it printed on stderr."""
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True, **popen)
    try:
        deadline = time.monotonic() + 60
        # Until the run has connected to the started JVM's gateway (its first call, of the session's many).
        while not any(c.status == psutil.CONN_ESTABLISHED for c in psutil.Process(run.pid).net_connections()):
            assert time.monotonic() < deadline and run.poll() is None, "the JVM's gateway started"
            time.sleep(0.02)
        time.sleep(0.3)  # (the session's start-up takes seconds more)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=10)
    return run.returncode, stderr
