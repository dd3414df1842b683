"""The embedded cluster's launcher started before the ``hop`` command's imports (``hop.prelaunch``): handed over to
the cluster when a run wants one, ended whenever it does not, never left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hop import prelaunch
from hop.client import Client
from hop.cluster_launch import _wait_for_config
from hop.interpreter import module_environment, root_needed
from hop.lifetime import PARENT_VARIABLE
from hop.loader import load_job_file
from hop.local_cluster import ClusterStartError, LocalCluster
from hop.runner import build_spec
from tests.conftest import ROOT, job_path, maps_running, read_output, run_job


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "job.py", "in", "-o", "out"], True),
        (["run", "--mrjob", "job.py", "in", "-o", "out", "--", "--coordinator", "x"], True),  # the job's options
        (["run", "job.py", "in", "-o", "out", "--coordinator", "tcp://h:1"], False),
        (["run", "job.py", "in", "-o", "out", "--coord=tcp://h:1"], False),  # argparse takes prefixes
        (["run", "job.py", "-o", "out", "--engine", "spark"], False),
        (["run", "job.py", "--source", "replay:x", "-o", "out"], False),
        (["run", "-h"], False),
        (["run", "--he"], False),
        (["submit", "job.py", "in", "-o", "out", "--coordinator", "tcp://h:1"], False),
        (["gen", "text", "x.txt"], False),
        ([], False),
    ],
)
def test_which_commands_start_a_launcher_early(argv: list[str], expected: bool) -> None:
    assert prelaunch.wants_embedded_cluster(argv) is expected


def _pipe_with(data: bytes, keep_open: bool = False) -> tuple[int, int]:
    """A pipe holding ``data``; its write end stays open (returned) only with ``keep_open``, else it is -1."""
    read, write = os.pipe()
    os.write(write, data)
    if keep_open:
        return read, write
    os.close(write)
    return read, -1


def test_the_launcher_reads_one_line_of_options() -> None:
    line = json.dumps({"arguments": ["--workers", "2"], "environment": {"A": "1"}}).encode()
    read, _ = _pipe_with(line + b"\n")
    assert _wait_for_config(read) == {"arguments": ["--workers", "2"], "environment": {"A": "1"}}
    # A copy of the write end still open elsewhere (a process forked by user code) does not keep it waiting.
    read, write = _pipe_with(line + b"\n", keep_open=True)
    try:
        assert _wait_for_config(read) is not None
    finally:
        os.close(write)
    read, _ = _pipe_with(b"")
    assert _wait_for_config(read) is None  # the command ended without wanting a cluster
    read, _ = _pipe_with(line)
    assert _wait_for_config(read) is None  # ended in the middle of the line: nothing to act on
    read, _ = _pipe_with(b'{"arguments": ["--workers", 2], "environment": {}}\n')
    with pytest.raises(ValueError, match="on --config-fd"):
        _wait_for_config(read)


def test_a_prelaunched_launcher_becomes_the_cluster_and_runs_a_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "in.txt").write_text("a b a\nc a\n")
    (tmp_path / "names.txt").write_text("HOP_TEST_SET_LATE\n")
    launcher = prelaunch.Prelaunch()
    launcher_process = psutil.Process(launcher.process.pid)
    # Set after the launcher started (as a job module may do when the command loads it): the cluster's processes
    # still get it, with the rest of the environment of the moment the cluster starts.
    monkeypatch.setenv("HOP_TEST_SET_LATE", "set after the launcher started")
    with LocalCluster(workers=2, prelaunched=launcher) as cluster:
        assert cluster.coordinator is launcher.process
        assert "--config-fd" in launcher_process.cmdline()
        workers = [psutil.Process(worker.pid) for worker in cluster.workers]
        assert [w.ppid() for w in workers] == [launcher_process.pid] * 2
        client = Client(cluster.address, timeout=30)
        try:
            report = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out", num_reduces=2)
            run_job(client, "environment_variable", [tmp_path / "names.txt"], tmp_path / "environment")
        finally:
            client.close()
        assert report["status"] == "succeeded"
        assert sorted(read_output(tmp_path / "out")) == [("a", 3), ("b", 1), ("c", 1)]
        assert read_output(tmp_path / "environment") == [("HOP_TEST_SET_LATE", "set after the launcher started")]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in [launcher_process, *workers])


def test_a_cluster_that_never_starts_ends_its_prelaunched_launcher() -> None:
    launcher = prelaunch.Prelaunch()
    LocalCluster(workers=1, prelaunched=launcher).stop()
    assert launcher.process.returncode is not None


def test_a_launcher_that_died_before_its_options_is_a_clear_start_error() -> None:
    launcher = prelaunch.Prelaunch()
    launcher.process.kill()
    launcher.process.wait(timeout=10)
    cluster = LocalCluster(workers=1, prelaunched=launcher)
    with pytest.raises(ClusterStartError, match=r"coordinator failed to start \(exit code -9\)"):
        cluster.start()
    assert cluster.coordinator is None  # stopped on the way out


def test_a_cluster_interrupted_as_its_workers_register_ends_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while the embedded cluster's workers registered: its stop asked the coordinator to shut down, which a
    worker not yet registered never heard, and waited the full 10 s for it (the launcher waits for its workers)."""

    def interrupted(*args: object) -> object:
        raise KeyboardInterrupt  # as the first look at the registered workers is made

    monkeypatch.setattr(Client, "workers", interrupted)
    launcher = prelaunch.Prelaunch()
    cluster = LocalCluster(workers=2, prelaunched=launcher)
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        cluster.start()
    assert time.monotonic() - began < 5.0, "ended at once, not after STOP_TIMEOUT"
    assert launcher.process.returncode is not None and cluster.coordinator is None


def test_a_cluster_interrupted_before_its_launcher_reported_its_workers_ends_them_too(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C after the launcher forked its workers, before the command read their pids: the stop killed the
    launcher alone and removed the cluster's directory, and the orphaned workers went on starting, one printing a
    FileNotFoundError traceback for its spill directory after ``hop: error: interrupted``."""
    launcher = prelaunch.Prelaunch()
    launcher_process = psutil.Process(launcher.process.pid)
    forked: list[psutil.Process] = []

    def interrupted(self: LocalCluster, report: object) -> str:
        deadline = time.monotonic() + 60
        while len(launcher_process.children()) < 2:  # forked, and not yet read from its report
            assert time.monotonic() < deadline, "the launcher forked its workers"
            time.sleep(0.001)
        forked.extend(launcher_process.children())
        raise KeyboardInterrupt

    monkeypatch.setattr(LocalCluster, "_read_report", interrupted)
    cluster = LocalCluster(workers=2, prelaunched=launcher)
    with pytest.raises(KeyboardInterrupt):
        cluster.start()
    assert cluster.workers == [] and launcher.process.returncode is not None
    running = [p for p in forked if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not running, "the workers were ended with their launcher, not left to start on their own"
    psutil.wait_procs(forked, timeout=30)
    assert "Traceback" not in capfd.readouterr().err


def test_a_run_that_fails_before_its_cluster_starts_ends_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[prelaunch.Prelaunch] = []

    class Recorded(prelaunch.Prelaunch):
        def __init__(self) -> None:
            super().__init__()
            started.append(self)

    monkeypatch.setattr(prelaunch, "Prelaunch", Recorded)
    argv = ["hop", "run", job_path("wordcount"), str(tmp_path / "missing.txt"), "-o", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", argv)
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        assert prelaunch.main() == 2  # no such input: found before any cluster is started
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # the command's own handler, installed in this process
    assert len(started) == 1
    assert started[0].process.returncode is not None  # killed and reaped, not left to finish its imports
    assert prelaunch.take() is None


def test_the_launcher_ends_by_itself_when_the_command_dies_without_ending_it() -> None:
    # A command killed between starting the launcher and configuring it: here a process that starts one, prints
    # its pid and exits at once, skipping every clean-up.
    script = "import os; from hop.prelaunch import Prelaunch; print(Prelaunch().process.pid, flush=True); os._exit(0)"
    command = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert command.stdout is not None
        line = command.stdout.readline()  # not to the end: the launcher holds a copy of that pipe while it runs
        assert command.wait(timeout=60) == 0
    finally:
        if command.stdout is not None:
            command.stdout.close()
    try:
        launcher = psutil.Process(int(line))
    except psutil.NoSuchProcess:
        return  # ended and reaped already (adopted by init where this test session is not a subreaper)
    # Its options pipe reached end-of-file: it exits without starting a cluster.
    _, alive = psutil.wait_procs([launcher], timeout=30)
    assert not alive, launcher.cmdline()
    assert launcher.returncode in (0, None)  # None: not this process's child, its status went to its new parent


def test_a_launcher_whose_command_is_gone_as_it_reports_ends_its_workers_quietly(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    launcher = prelaunch.Prelaunch()
    options = ["--bind", f"ipc://{tmp_path}/coordinator", "--workers", "2", "--spill-dir", str(tmp_path)]
    report = launcher.configure(options)
    report.close()  # the command is gone before the launcher (still importing) reports its workers
    assert launcher.process.wait(timeout=30) == 0
    assert "Traceback" not in capfd.readouterr().err, "no BrokenPipeError traceback"


def _cluster_processes(cluster: LocalCluster) -> list[psutil.Process]:
    """The coordinator, the workers and, once each worker has started them, every worker's task processes."""
    assert cluster.coordinator is not None
    workers = [psutil.Process(worker.pid) for worker in cluster.workers]
    deadline = time.monotonic() + 60
    while not all(worker.children() for worker in workers):  # task slots are forked as a worker starts
        assert time.monotonic() < deadline, "every worker started its task processes"
        time.sleep(0.05)
    return [psutil.Process(cluster.coordinator.pid), *workers, *(t for w in workers for t in w.children())]


def _hop_run_beside_standard_library_names(folder: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """``hop run ARGUMENTS`` started in ``folder``, which holds a ``json.py`` and a ``selectors.py`` that end any
    process importing them, run as the installed ``hop`` command runs: its own path holds its script's folder, not
    the current directory. ``PYTHONPATH`` is this project's root and a folder of the user's, ``user-path``."""
    for name in ("json", "selectors"):
        (folder / f"{name}.py").write_text(f"raise SystemExit('{name}.py of the current directory was imported')\n")
    path = os.pathsep.join([str(ROOT), "user-path"])
    return subprocess.run(
        [sys.executable, "-P", "-m", "hop", "run", *arguments],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_standard_library_name_in_the_current_directory_does_not_replace_the_launchers(tmp_path: Path) -> None:
    """``python -m hop.cluster_launch`` put the directory ``hop run`` was started in first on the launcher's path: a
    ``json.py`` or ``selectors.py`` there (the user's, no module of the job's) was imported in place of the standard
    library's, and the cluster failed to start (exit code 3, ``coordinator failed to start``) whatever the job."""
    (tmp_path / "in.txt").write_text("a b a\n")
    result = _hop_run_beside_standard_library_names(tmp_path, job_path("wordcount"), "in.txt", "-o", "out")
    assert result.returncode == 0, result.stderr
    assert sorted(read_output(tmp_path / "out")) == [("a", 2), ("b", 1)]


def test_an_installed_hop_starts_its_interpreters_with_the_pythonpath_as_given(tmp_path: Path) -> None:
    """hop's root goes first on a ``-P`` interpreter's ``PYTHONPATH`` only where that interpreter would not find hop
    otherwise (a checkout run in place): a site directory there would come before the standard library, so that a
    package installed under a standard module's name would replace it, as the current directory's ``json.py`` did."""
    import site

    assert not root_needed(site.getsitepackages()[0])
    assert root_needed(str(tmp_path))
    assert root_needed(str(ROOT))  # (this checkout: installed in editable mode, not in a site directory)
    given = {"PYTHONPATH": "user-path", "OTHER": "1"}
    assert module_environment(given)["PYTHONPATH"] == os.pathsep.join([str(ROOT), "user-path"])


KILLED_ONCE_JOB = """
import os
from pathlib import Path

from hop import Job


class KilledOnce(Job):
    def map(self, offset, line):
        marker = Path(os.environ["HOP_TEST_MARKER"])
        if not marker.exists():
            marker.write_text("killed")
            os.kill(os.getpid(), 9)
        yield "PYTHONPATH", os.environ.get("PYTHONPATH")
"""


def test_a_task_process_restarted_beside_standard_library_names_runs_with_the_users_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker restarts a slot whose task process died as ``python -m hop.taskproc`` in its own current directory:
    a ``json.py`` there failed every restart, and the job, with no other slot, waited for ever. Restarted without
    that directory on its path, the retried map sees the ``PYTHONPATH`` the user gave, not the one hop's own start
    needed."""
    (tmp_path / "in.txt").write_text("one line\n")
    (tmp_path / "killed_once.py").write_text(KILLED_ONCE_JOB)
    monkeypatch.setenv("HOP_TEST_MARKER", str(tmp_path / "killed"))
    result = _hop_run_beside_standard_library_names(tmp_path, "killed_once.py", "in.txt", "-o", "out", "--workers", "1")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "killed").exists(), "the first attempt's task process was killed"
    assert read_output(tmp_path / "out") == [("PYTHONPATH", os.pathsep.join([str(ROOT), "user-path"]))]


def test_an_embedded_cluster_leaves_sigint_and_sigterm_to_the_process_that_started_it(tmp_path: Path) -> None:
    """``kill -TERM -PGID`` (or Ctrl-C, systemd, a container's stop) reaches every process of the cluster: they
    ignore it, so that ``hop run`` can drain its job and stop them in order; its stop still ends them all."""
    (tmp_path / "in.txt").write_text("a b a\n")
    with LocalCluster(workers=1) as cluster:
        processes = _cluster_processes(cluster)
        names = [process.name() for process in processes]
        for number in (signal.SIGINT, signal.SIGTERM):
            for process in processes:
                process.send_signal(number)
        client = Client(cluster.address, timeout=30)
        try:  # the cluster still runs jobs: nothing died, not even a task process the job would have needed
            report = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out", num_reduces=1)
        finally:
            client.close()
        assert report["status"] == "succeeded", report
        assert {attempt["status"] for attempt in report["attempts"]} == {"succeeded"}, report["attempts"]
        assert all(process.is_running() and process.status() != psutil.STATUS_ZOMBIE for process in processes), names
    _, alive = psutil.wait_procs(processes, timeout=30)
    assert not alive, names


def _busiest_child(parent: psutil.Process) -> list[psutil.Process]:
    """The child of ``parent`` that used the most CPU over the next second, if it used any to speak of: the task
    process spinning in a user's map. (Asking for 50% of a core failed on a loaded machine, a spinner sharing its
    core with 8 other busy processes for 60 s; a spare task process starting beside it uses less over a second.)"""
    children = parent.children()
    before = {child: sum(child.cpu_times()[:2]) for child in children}
    time.sleep(1)
    used = {child: sum(child.cpu_times()[:2]) - start for child, start in before.items() if child.is_running()}
    busiest = max(used, key=used.__getitem__, default=None)
    return [busiest] if busiest is not None and used[busiest] > 0.05 else []


def test_a_task_busy_in_user_code_ends_with_its_killed_worker(tmp_path: Path) -> None:
    """A task process looked for its worker only between records: one long record (here 45 s of spinning) kept it
    running, a core busy for nobody, after its worker was killed."""
    (tmp_path / "in.txt").write_text("spin\n")
    with LocalCluster(workers=1) as cluster:
        worker = _cluster_processes(cluster)[1]
        client = Client(cluster.address, timeout=30)
        try:
            spec = build_spec(load_job_file(job_path("busy_map")), [str(tmp_path / "in.txt")], str(tmp_path / "out"))
            client.submit(spec)
            deadline = time.monotonic() + 60
            busy: list[psutil.Process] = []
            while not busy:  # the map's task process, spinning in the user's map
                assert time.monotonic() < deadline, "the busy map started"
                busy = _busiest_child(worker) if maps_running(client) else []
            worker.kill()
            _, alive = psutil.wait_procs(busy, timeout=5)
            assert not alive, [t.name() for t in alive]
        finally:
            client.close()


def test_a_cluster_stopped_while_a_task_is_busy_in_user_code_stops_at_once(tmp_path: Path) -> None:
    """A worker shutting down sent its busy task processes a stop they read only after their record, and waited 5 s
    before killing them: ``hop run --timeout 2`` exited after 7.4 s. A busy task is ended at once."""
    (tmp_path / "in.txt").write_text("spin\n")
    cluster = LocalCluster(workers=1)
    cluster.start()
    try:
        client = Client(cluster.address, timeout=30)
        try:
            spec = build_spec(load_job_file(job_path("busy_map")), [str(tmp_path / "in.txt")], str(tmp_path / "out"))
            client.submit(spec)
            deadline = time.monotonic() + 60
            while not maps_running(client):  # the map's task process, spinning in the user's map (45 s)
                assert time.monotonic() < deadline, "the busy map started"
                time.sleep(0.05)
        finally:
            client.close()
        began = time.monotonic()
        cluster.stop()
        took = time.monotonic() - began
    finally:
        cluster.stop(grace=0)
    assert took < 4.0, f"the cluster took {took:.1f} s to stop"


def test_a_standalone_worker_still_stops_on_its_own_sigterm(tmp_path: Path) -> None:
    """Only an embedded cluster's processes leave SIGTERM to their parent: ``hop worker`` (and its task processes,
    which it ends) stops on it, as a service manager expects."""
    with LocalCluster(workers=1) as cluster:  # its own: the stopped worker stays listed, as lost
        command = [sys.executable, "-m", "hop.worker", "--coordinator", cluster.address, "--name", "standalone"]
        command += ["--map-slots", "1", "--reduce-slots", "1", "--spill-dir", str(tmp_path)]
        environment = {name: value for name, value in os.environ.items() if name != PARENT_VARIABLE}
        worker = subprocess.Popen(command, env=environment)
        client = Client(cluster.address, timeout=30)
        try:
            deadline = time.monotonic() + 60
            # Registered: past start-up (its handler is installed before it registers), its task processes started.
            while not any(w["name"] == "standalone" and w["alive"] for w in client.workers()):
                assert time.monotonic() < deadline and worker.poll() is None, "the worker registered"
                time.sleep(0.05)
            tasks = psutil.Process(worker.pid).children()
            assert tasks
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0
            _, alive = psutil.wait_procs(tasks, timeout=30)
            assert not alive, "a worker's task processes end with it"
        finally:
            client.close()
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)


def test_the_command_starts_its_launcher_before_its_heavy_imports() -> None:
    """``import hop.prelaunch`` (the ``hop`` command's entry point) imported ``hop.job`` through the package, and so
    the shuffle, ZeroMQ and msgpack, before the launcher could start: 0.13-0.24 s of start-up it did not overlap,
    and a Ctrl-C then ended the command with a traceback."""
    script = "import sys, hop.prelaunch; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    heavy = {name for name in loaded.stdout.split() if name.split(".")[0] in ("shuffle", "zmq", "msgpack")}
    assert not heavy and "hop.job" not in loaded.stdout.split(), loaded.stdout
    from hop import Job, Step  # still the public API, imported on first use

    assert Job.__module__ == Step.__module__ == "hop.job"


def test_a_launcher_interrupted_while_it_starts_up_lives_on_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C reaches the whole process group: the launcher, still importing, died of it with a traceback (or
    "Fatal Python error" from its site import) printed after ``hop run``'s own message. It now starts with the
    stop signals ignored, as a cluster's processes run, and ends when the command ends it."""
    launcher = prelaunch.Prelaunch()
    try:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # through the interpreter's start-up and the launcher's imports
            launcher.process.send_signal(signal.SIGINT)
            time.sleep(0.01)
        assert launcher.process.poll() is None, "the launcher died of Ctrl-C"
        status = psutil.Process(launcher.process.pid).status()
        assert status != psutil.STATUS_ZOMBIE
    finally:
        launcher.discard()
    assert "Traceback" not in capfd.readouterr().err


def test_ctrl_c_as_the_command_starts_up_is_its_interruption_not_a_traceback(tmp_path: Path) -> None:
    """Ctrl-C to ``hop run``'s process group while the command still imports its modules (its launcher just
    started): the command's message and exit code 130, no traceback from either process, nothing left running."""
    (tmp_path / "in.txt").write_text("a b a\n")
    command = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hop",
            "run",
            job_path("wordcount"),
            str(tmp_path / "in.txt"),
            "-o",
            str(tmp_path / "o"),
        ],
        start_new_session=True,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (launchers := psutil.Process(command.pid).children()):  # started before the command's imports
            assert time.monotonic() < deadline and command.poll() is None, "the command started its launcher"
            time.sleep(0.002)
        os.killpg(command.pid, signal.SIGINT)
        _, stderr = command.communicate(timeout=60)
    finally:
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)
            command.wait(timeout=30)
    assert command.returncode == 130, stderr
    assert "Traceback" not in stderr and "hop: error: interrupted" in stderr, stderr
    _, alive = psutil.wait_procs(launchers, timeout=30)
    assert not alive, "the launcher ended with the command"


_SIGNAL_DURING_CLI_IMPORT = """
import importlib.abc, os, signal, sys

class SignalOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "hop.cli":
            sys.meta_path.remove(self)
            print("launcher", __import__("hop.prelaunch").prelaunch._pending.process.pid, flush=True)
            os.kill(os.getpid(), signal.{signal_name})
            for _ in range(1000):  # (a handler runs between bytecodes: here, inside the import)
                pass
        return None

sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["hop", "run", sys.argv[1], sys.argv[2], "-o", sys.argv[3]]
from hop.prelaunch import main
sys.exit(main())
"""


@pytest.mark.parametrize(("signal_name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_stop_signal_during_the_commands_imports_is_its_interruption(
    tmp_path: Path, signal_name: str, code: int
) -> None:
    """Ctrl-C or SIGTERM as the command imports ``hop.cli`` (its launcher started): exit 130 or 143 with the
    command's message, no traceback, no output, the launcher ended. SIGTERM there killed the command with no word
    (exit -15), and a Ctrl-C raised inside the import machinery could be printed as "Exception ignored" and lost."""
    _assert_interrupted_before_running(tmp_path, _SIGNAL_DURING_CLI_IMPORT, signal_name, code)


def _assert_interrupted_before_running(tmp_path: Path, script: str, signal_name: str, code: int) -> None:
    """Run ``script`` (which sends ``signal_name`` to its own ``hop run`` before the command runs, printing
    ``launcher PID``): it exits ``code`` with the command's message alone, no output made, its launcher ended."""
    (tmp_path / "in.txt").write_text("a b a\n")
    command = subprocess.run(
        [
            sys.executable,
            "-c",
            script.replace("{signal_name}", signal_name),
            job_path("wordcount"),
            str(tmp_path / "in.txt"),
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert command.returncode == code, command.stderr
    assert command.stderr == "hop: error: interrupted\n"
    assert not (tmp_path / "o").exists()
    launcher = int(command.stdout.split()[1])
    assert not psutil.pid_exists(launcher) or psutil.Process(launcher).status() == psutil.STATUS_ZOMBIE


_SIGNAL_WHILE_PARSING = """
import os, signal, sys
import hop.cli

build_parser = hop.cli.build_parser

def signalled_build_parser(*args):
    print("launcher", __import__("hop.prelaunch").prelaunch._pending.process.pid, flush=True)
    os.kill(os.getpid(), signal.{signal_name})  # (its handler runs at the next bytecode: in here)
    return build_parser(*args)

hop.cli.build_parser = signalled_build_parser
sys.argv = ["hop", "run", sys.argv[1], sys.argv[2], "-o", sys.argv[3]]
from hop.prelaunch import main
sys.exit(main())
"""


@pytest.mark.parametrize(("signal_name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_stop_signal_while_the_command_parses_its_arguments_is_its_interruption(
    tmp_path: Path, signal_name: str, code: int
) -> None:
    """Ctrl-C or SIGTERM once ``hop.cli`` took the signals but before it ran the command (building the argument
    parser takes some 20 ms): it printed a ``hop.lifetime.Interrupted`` traceback and exited 1, a failed job's
    code. It now exits 130 or 143 with the command's message, as an interruption anywhere else does. The parser
    is the real one; only its builder is wrapped, to send the signal at that point every time."""
    _assert_interrupted_before_running(tmp_path, _SIGNAL_WHILE_PARSING, signal_name, code)


def test_a_handled_ctrl_c_that_passed_through_a_string_exec_exits_130_not_by_sigint(tmp_path: Path) -> None:
    """CPython notes a KeyboardInterrupt leaving code run by ``exec`` of a string (as ``dataclass`` and
    ``namedtuple`` make classes) as unhandled, even when caught later, and then ends ``python -m`` by killing
    itself with SIGINT: ``python -m hop run`` interrupted there printed its message and died of SIGINT (exit -2)
    instead of exiting 130. Here the command's body is a stand-in that meets exactly that; the entry point around it
    is the real one, run as ``python -m`` runs ``hop``."""
    (tmp_path / "entry_with_a_handled_interrupt.py").write_text(
        "import sys, types\n"
        "def body():\n"
        "    try:\n"
        "        exec('raise KeyboardInterrupt')\n"
        "    except KeyboardInterrupt:\n"
        "        print('hop: error: interrupted', file=sys.stderr)\n"
        "        return 130\n"
        "sys.modules['hop.cli'] = types.SimpleNamespace(main=body)\n"
        "sys.argv = ['hop', 'status']\n"
        "from hop.prelaunch import main\n"
        "sys.exit(main())\n"
    )
    command = subprocess.run(
        [sys.executable, "-m", "entry_with_a_handled_interrupt"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert command.returncode == 130, command.stderr
    assert command.stderr == "hop: error: interrupted\n"


def test_a_launcher_started_from_another_thread() -> None:
    """Only the main thread may set signal handlers: a cluster started from another thread starts its launcher
    without the early ignored signals (it ignores them once it has imported), not with a ValueError."""
    import threading

    started: list[prelaunch.Prelaunch] = []
    thread = threading.Thread(target=lambda: started.append(prelaunch.Prelaunch()))
    thread.start()
    thread.join(timeout=60)
    assert len(started) == 1, "the thread started a launcher"
    assert started[0].process.poll() is None
    started[0].discard()


def test_stop_signals_held_act_after_the_block_and_only_then() -> None:
    """A Ctrl-C inside ``stop_signals_held`` lets the block finish (the child it starts gets recorded), then raises
    as it would have; a SIGTERM goes to the handler there was before; with none, nothing happens."""
    from hop.lifetime import stop_signals_held

    terms: list[int] = []
    # The handlers this process had (a test before may have left hop's own): Python's Ctrl-C, a recording SIGTERM.
    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda number, _frame: terms.append(number)),
    }
    try:
        done = []
        with pytest.raises(KeyboardInterrupt), stop_signals_held():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # (a handler runs between bytecodes: it would have raised here)
            done.append("recorded")
        assert done == ["recorded"]
        with stop_signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert terms == []
        assert terms == [signal.SIGTERM]
        with stop_signals_held():
            pass
        assert terms == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, "the handlers are put back"
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


_SIGNAL_IN_A_SWALLOWING_CALLBACK = """
import argparse, os, signal, subprocess, sys, time
from hop import cli

def signal_and_run_on():
    os.kill(os.getpid(), signal.{signal_name})
    for _ in range(100_000):  # (the handler runs in here, where Python cannot pass its exception on)
        pass

class SignalledWhenCollected:
    def __del__(self):
        signal_and_run_on()

def command(args):
    if "{where}" == "at-fork":  # as PySpark starts its JVM: logging's at-fork hook runs in the parent
        os.register_at_fork(after_in_parent=signal_and_run_on)
        subprocess.Popen(["true"], preexec_fn=lambda: None).wait(timeout=30)
    else:
        SignalledWhenCollected()
    time.sleep(20)
    print("ran on")
    return 0

def parser(continuous=False):
    found = argparse.ArgumentParser()
    found.set_defaults(func=command)
    return found

cli.build_parser = parser
sys.exit(cli.main([]))
"""


@pytest.mark.parametrize("where", ["at-fork", "__del__"])
@pytest.mark.parametrize(("signal_name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_an_interruption_python_swallowed_still_interrupts_the_command(where: str, signal_name: str, code: int) -> None:
    """A Ctrl-C or SIGTERM whose handler ran inside a callback that cannot raise (an at-fork hook, a ``__del__``)
    was printed as "Exception ignored" and lost: ``hop run --engine spark`` sent SIGTERM just as PySpark forked its
    JVM ran its job to the end and exited 0. The command is interrupted now, with its usual message and code."""
    script = _SIGNAL_IN_A_SWALLOWING_CALLBACK.replace("{signal_name}", signal_name).replace("{where}", where)
    started = time.monotonic()
    command = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert (command.returncode, command.stdout, command.stderr) == (code, "", "hop: error: interrupted\n")
    assert time.monotonic() - started < 15, "interrupted in its sleep, not after it"


def test_the_command_leaves_its_objects_out_of_the_collections_at_exit(tmp_path: Path) -> None:
    """The interpreter's garbage collections at exit walked every object of the command's imports, ~20 ms after
    every ``hop run``: they are frozen (``gc.freeze``) once the command's exit handlers have run, and not before,
    so that a process that calls ``main`` and goes on still collects its garbage."""
    script = (
        f"import atexit, gc, sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "atexit.register(lambda: print('at exit', gc.get_freeze_count()))  # (runs after those registered later)\n"
        "from hop.prelaunch import main\n"
        "sys.argv = ['hop', 'run', 'missing.py', 'in.txt', '-o', 'out']\n"
        "print('returned', main(), gc.get_freeze_count())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    returned, at_exit = (line.split() for line in done.stdout.splitlines())
    assert returned == ["returned", "2", "0"], done.stderr  # (no such job file)
    assert at_exit[0] == "at" and int(at_exit[-1]) > 10_000, done.stdout
