"""A standalone process stopped while it starts: it ends, and leaves nothing behind.

``hop worker`` makes its spill directory and forks its task processes before it serves; SIGTERM in that time killed
it outright (its handler was installed only once it had started), its spill directory left in the spill root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from hop.lifetime import PARENT_VARIABLE


def _processes_naming(text: str) -> list[psutil.Process]:
    """The processes whose command line names ``text`` (a worker and the task processes forked from it)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if any(text in part for part in process.info["cmdline"] or ()):
            found.append(process)
    return found


def test_a_worker_terminated_while_it_starts_stops_and_removes_its_spill_directory(tmp_path: Path) -> None:
    """SIGTERM sent the moment the worker's spill directory appears (it then forks its 16 task processes): the
    worker stops once started, exits 0, and its spill directory and task processes are gone."""
    spills = tmp_path / "spills"
    spills.mkdir()
    command = [sys.executable, "-m", "hop.worker", "--coordinator", f"ipc://{tmp_path}/nobody-listens"]
    command += ["--spill-dir", str(spills), "--map-slots", "8", "--reduce-slots", "8", "--stream-slots", "0"]
    command += ["--sample-interval", "0"]
    environment = {name: value for name, value in os.environ.items() if name != PARENT_VARIABLE}
    environment["PYTHONHASHSEED"] = "0"  # (no re-execution: the process started is the worker)
    worker = subprocess.Popen(command, env=environment, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not any(spills.iterdir()):
            assert time.monotonic() < deadline and worker.poll() is None, "the worker made its spill directory"
            time.sleep(0.001)
        worker.send_signal(signal.SIGTERM)
        said = worker.communicate(timeout=30)[1].decode()
        assert worker.returncode == 0, (worker.returncode, said)
        _, alive = psutil.wait_procs(_processes_naming(str(spills)), timeout=10)
        assert not alive, "the worker's task processes ended with it"
        assert list(spills.iterdir()) == [], "the worker removed its spill directory"
        assert "Traceback" not in said, said
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)
        for process in _processes_naming(str(spills)):
            process.kill()


def test_a_coordinator_terminated_while_it_starts_exits_0_and_removes_its_socket_file(tmp_path: Path) -> None:
    """SIGTERM sent the moment the coordinator's ipc:// socket file appears (it then opens its sample stream and
    announces its address): it stops once started, exits 0 as when stopped while it serves, and removes the file.
    It exited 143 and left the file, which made a client take a coordinator for stopped at once only by luck."""
    socket_file = tmp_path / "coordinator.sock"
    command = [sys.executable, "-m", "hop", "coordinator", "--bind", f"ipc://{socket_file}"]
    environment = {name: value for name, value in os.environ.items() if name != PARENT_VARIABLE}
    coordinator = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not socket_file.exists():
            assert time.monotonic() < deadline and coordinator.poll() is None, "the coordinator bound its socket"
            time.sleep(0.0005)
        coordinator.send_signal(signal.SIGTERM)
        said = coordinator.communicate(timeout=30)[1].decode()
        assert coordinator.returncode == 0, (coordinator.returncode, said)
        assert not socket_file.exists(), "the coordinator removed its socket file"
        assert "Traceback" not in said and "error" not in said, said
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
            coordinator.communicate(timeout=10)
