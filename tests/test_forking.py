"""hop.forking: the forked task-process handle behaves like the subprocess.Popen part the worker uses; the
embedded cluster's workers, forked by its coordinator, are held as descendants."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from hop.client import Client
from hop.forking import DescendantProcess, fork_call
from hop.local_cluster import LocalCluster


def _returns(code: int) -> int:
    return code


def _raises() -> int:
    raise RuntimeError("user code failed in the child")


def _exits(code: int) -> int:
    sys.exit(code)


def _sleeps() -> int:
    time.sleep(60)
    return 0


@pytest.mark.parametrize(("function", "args", "expected"), [(_returns, (7,), 7), (_raises, (), 1), (_exits, (4,), 4)])
def test_exit_code_of_the_child(function, args, expected) -> None:
    child = fork_call(function, *args)
    assert child.pid != os.getpid()
    assert child.wait(timeout=10) == expected
    assert child.poll() == expected


def test_exception_in_the_child_prints_its_traceback(capfd) -> None:
    assert fork_call(_raises).wait(timeout=10) == 1
    assert "user code failed in the child" in capfd.readouterr().err


def test_wait_times_out_then_kill_ends_the_child() -> None:
    child = fork_call(_sleeps)
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.05)
    assert child.poll() is None
    child.kill()
    assert child.wait(timeout=10) == -signal.SIGKILL
    child.terminate()  # already gone: no error


def test_terminate_sends_sigterm() -> None:
    child = fork_call(_sleeps)
    child.terminate()
    assert child.wait(timeout=10) == -signal.SIGTERM


def _forks_a_sleeper(report: int) -> int:
    """A middle process that forks a grandchild, reports its pid and waits to be told to end."""
    grandchild = fork_call(_sleeps)
    os.write(report, f"{grandchild.pid}\n".encode())
    time.sleep(60)
    return 0


def test_a_descendant_reads_as_ended_once_killed_and_reaped_by_its_parent() -> None:
    read, write = os.pipe()
    middle = fork_call(_forks_a_sleeper, write)
    os.close(write)
    grandchild: DescendantProcess | None = None
    try:
        with os.fdopen(read) as report:
            grandchild = DescendantProcess(int(report.readline()))
        assert grandchild.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            grandchild.wait(timeout=0.05)
        # Ended: the middle process (its parent) is killed too, so the grandchild is reparented and reaped by
        # whoever adopts it (this process if it is a subreaper, as under pytest's session fixture; else init).
        grandchild.kill()
        middle.kill()
        assert middle.wait(timeout=10) == -signal.SIGKILL
        assert grandchild.wait(timeout=10) in (-1, -signal.SIGKILL)
        grandchild.kill()  # already gone: no error
    finally:
        for process in (grandchild, middle):  # nothing left sleeping if an assertion failed
            if process is not None:
                process.kill()
        middle.wait(timeout=10)


def test_the_embedded_cluster_forks_its_workers_from_the_coordinator() -> None:
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        assert cluster.coordinator is not None
        coordinator = psutil.Process(cluster.coordinator.pid)
        workers = [psutil.Process(worker.pid) for worker in cluster.workers]
        assert [w.ppid() for w in workers] == [coordinator.pid] * 2
        assert [w.name() for w in workers] == ["local-0", "local-1"]
        # A killed worker is reaped by the coordinator (its parent): no zombie, the handle sees it end, and the
        # coordinator keeps serving.
        cluster.workers[1].kill()
        assert cluster.workers[1].wait(timeout=10) == -1
        assert cluster.coordinator.poll() is None
        client = Client(cluster.address, timeout=10)
        try:
            names = sorted(w["name"] for w in client.workers())
        finally:
            client.close()
        assert names == ["local-0", "local-1"]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in [coordinator, *workers])
