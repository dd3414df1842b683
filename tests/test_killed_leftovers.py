"""What a command killed outright (-9) leaves in the temporary directory: the Spark driver's logging configuration
(``hop-spark-log4j2-*``) and its JVM's temporary directory (``hop-spark-tmp-*``, Spark's shuffle files), a
compaction child's temporary directory (``hop-compaction-*``), ``hop compare``'s two outputs (``hop-compare-*``).
Nothing removed them; each is marked with its owner now (``hop.spilldirs``), and the next command making one of that
kind on the host removes those whose owner is dead, never a running one's. Real processes killed with SIGKILL, each
in a temporary directory of the test's own (``TMPDIR``)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hop.spark_engine import write_log_config
from hop.spark_gateway import make_jvm_scratch
from hop.stream.compactor import _Child
from tests.conftest import job_path

TIMEOUT = 60


@pytest.fixture
def temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The temporary directory of this process (``tempfile.tempdir``) and of the processes it starts (``TMPDIR``)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    yield folder


def _holder(statement: str) -> tuple[subprocess.Popen[str], Path]:
    """A process that prints the path ``statement`` evaluates to, then sleeps; and that path."""
    code = f"import time; from pathlib import Path; print({statement}, flush=True); time.sleep({TIMEOUT})"
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, Path(process.stdout.readline().strip())


def _end(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=TIMEOUT)


def test_the_logging_configuration_of_a_spark_driver_killed_as_it_started(temporary: Path) -> None:
    statement = "__import__('hop.spark_engine').spark_engine.write_log_config(True)"
    killed, abandoned = _holder(statement)
    _end(killed)
    live, held = _holder(statement)
    try:
        mine = write_log_config(True)
        assert "rootLogger.level" in mine.read_text()
        assert sorted(temporary.iterdir()) == sorted([held.parent, mine.parent]), f"{abandoned.parent} is removed"
    finally:
        _end(live)


def test_the_temporary_directory_of_a_spark_driver_killed_with_its_jvm(temporary: Path) -> None:
    """Spark's files (``spark-*``, shuffle files in ``blockmgr-*``) were in /tmp, left by a JVM killed outright."""
    statement = "__import__('hop.spark_gateway').spark_gateway.make_jvm_scratch()"
    killed, abandoned = _holder(statement)
    (abandoned / "blockmgr-1").mkdir()
    _end(killed)
    live, held = _holder(statement)
    try:
        mine = make_jvm_scratch()
        assert sorted(temporary.iterdir()) == sorted([held, mine]), f"{abandoned} is removed"
    finally:
        _end(live)


def test_the_temporary_directory_of_a_compaction_child_whose_parent_was_killed(temporary: Path) -> None:
    statement = "__import__('hop.stream.compactor').stream.compactor._Child.start(Path('view'), 'local[1]').scratch"
    killed, abandoned = _holder(statement)  # (its child ends as its stdin does, with the killed parent)
    _end(killed)
    live, held = _holder(statement)
    try:
        mine = _Child.start(temporary.parent / "view", "local[1]")
        try:
            assert sorted(temporary.iterdir()) == sorted([held, Path(mine.scratch)]), f"{abandoned} is removed"
        finally:
            mine.close(time.monotonic() + TIMEOUT)
    finally:
        _end(live)


def test_the_outputs_of_a_killed_compare(temporary: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two outputs as large as the job's, left by a ``hop compare`` killed while its hop run ran. (No JVM starts: the
    killed one's Spark master is a port that takes connections, and a ``JAVA_HOME`` whose java is ``false``; the next
    one's master refuses them, which it finds once it has made its folder, before either engine runs.)"""
    (temporary.parent / "in.txt").write_text("a b a\n")
    java = temporary.parent / "java-home" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.symlink_to(shutil.which("false") or "/bin/false")
    monkeypatch.setenv("JAVA_HOME", str(java.parent.parent))
    command = [sys.executable, "-m", "hop", "compare", job_path("wordcount"), "in.txt", "--workers", "1"]
    with socket.socket() as master:
        master.bind(("127.0.0.1", 0))
        master.listen()
        address = f"spark://127.0.0.1:{master.getsockname()[1]}"
        killed = subprocess.Popen(
            [*command, "--spark-master", address],
            cwd=temporary.parent,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + TIMEOUT
            while not (
                runs := psutil.Process(killed.pid).children()
            ):  # (its hop run started, in the scratch made first)
                assert time.monotonic() < deadline and killed.poll() is None, "the hop run started"
                time.sleep(0.01)
        finally:
            killed.kill()
            killed.wait(timeout=TIMEOUT)
    psutil.wait_procs(runs, timeout=TIMEOUT)  # (the orphaned hop run ends on its own, its output written there)
    (abandoned,) = temporary.glob("hop-compare-*")
    command += ["--spark-master", address]  # (closed now: refused)
    result = subprocess.run(command, cwd=temporary.parent, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 3 and "could not be reached" in result.stderr, result.stdout + result.stderr
    assert not abandoned.exists() and not list(temporary.glob("hop-compare-*"))
    assert os.listdir(temporary) == []


def test_a_task_process_whose_worker_died_as_it_started_ends(tmp_path: Path) -> None:
    """A worker restarts a slot's task process (after ending its task: a speculative loser, a stopped job) as a new
    interpreter, which takes a good part of a second to start; killed meanwhile, it left the process a child of
    init, which the process then took for its worker: it never saw the worker gone and waited for it for ever (four
    such processes of one killed worker were still there 16 minutes later). Here the "worker" exits as soon as it
    has started the process."""
    code = (
        "import os, subprocess, sys; "
        f"child = subprocess.Popen([sys.executable, '-m', 'hop.taskproc', 'ipc://{tmp_path}/slots', 'w/m0', "
        f"'{tmp_path}', str(os.getpid())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
        "print(child.pid, flush=True); os._exit(0)"
    )
    worker = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT)
    task = psutil.Process(int(worker.stdout))
    try:
        task.wait(timeout=10)
    except psutil.TimeoutExpired:
        pytest.fail("the task process outlived its worker")
    finally:
        if task.is_running():
            task.kill()


def test_a_worker_names_the_spill_directories_of_dead_workers_it_removed(tmp_path: Path) -> None:
    """A ``hop worker`` that removed one dead worker's spill directory said "removed 1 spill directories"; it now
    counts in the singular or plural, and the directory is gone."""
    import socket

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / "hop-worker-left"
    left.mkdir()
    (left / "owner").write_text(f"{socket.gethostname()} {int(dead.stdout)} 1.0\n", encoding="utf-8")
    command = [sys.executable, "-m", "hop", "worker", "--coordinator", f"ipc://{tmp_path}/nobody.sock",
               "--spill-dir", str(tmp_path), "--sample-interval", "0"]  # fmt: skip
    worker = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert worker.stderr is not None
        line = worker.stderr.readline()  # (its first: said as it starts, before it waits for a coordinator)
    finally:
        worker.terminate()
        worker.communicate(timeout=30)
    assert line == "hop worker: removed 1 spill directory of workers that died\n", line
    assert not left.exists()
