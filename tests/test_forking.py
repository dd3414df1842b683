"""hop.forking: the forked task-process handle behaves like the subprocess.Popen part the worker uses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hop.forking import fork_call


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
