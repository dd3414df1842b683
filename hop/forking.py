"""Child processes forked from a prepared parent, behind the part of :class:`subprocess.Popen` a worker uses.

A worker's task processes all run ``hop.taskproc``. Starting each with a fresh interpreter costs about 0.15 s of
CPU (interpreter, site, the engine's imports); forking the worker after it imported the same modules costs a few
milliseconds. On a 2-core machine an embedded cluster starts its task processes all at once, so this is start-up
time every ``hop run`` pays. The embedded cluster starts the same way: its coordinator forks the workers
(``hop.cluster_launch``), and the process that launched it holds them as :class:`DescendantProcess`.

Contract of :func:`fork_call`: only call it while the parent holds no ZeroMQ context and runs no other thread (the
child gets a copy of whatever state they were in); the child runs ``function(*args)``, flushes stdout and stderr and
ends with ``os._exit`` and the function's return value (1 and a printed traceback if it raised), so it never returns
into the parent's code and runs no ``atexit`` handler of the parent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["DescendantProcess", "ForkedProcess", "fork_call", "wait_or_kill"]


class _Handle:
    """``returncode``, ``wait``, ``send_signal``, ``terminate`` and ``kill`` as on :class:`subprocess.Popen`, over a
    subclass's ``poll``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        raise NotImplementedError

    def wait(self, timeout: float) -> int:
        """The exit code; raises :class:`subprocess.TimeoutExpired` if the process still runs after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while (code := self.poll()) is None:
            if time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(delay)
            # At most 5 ms between checks: an embedded cluster's stop waits on these, and every `hop run` waits
            # for its stop (a 50 ms cap made it notice an ended worker up to ~16 ms late).
            delay = min(delay * 2, 0.005)
        return code

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # ended since
                os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkedProcess(_Handle):
    """A forked child of this process (see :class:`_Handle` for what it offers)."""

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = self._unwaitable()
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def _unwaitable(self) -> int | None:
        """The return code when this process cannot wait for it: reaped elsewhere (a subreaper's loop), its code
        is lost and it is gone."""
        return -1


class DescendantProcess(ForkedProcess):
    """A process another process of ours forked (an embedded cluster's worker, forked by its coordinator).

    Its exit code is its parent's to collect, so ``returncode`` is -1 once it has ended (or the code, if this
    process adopted and reaped it as a subreaper). An ended process is one that no longer exists, or a zombie: the
    embedded coordinator reaps its workers as they end, unless it is stopped or hung. A pid reused
    within the life of one cluster would read as alive: Linux hands out pids in order up to ``pid_max`` before it
    wraps around.
    """

    def _unwaitable(self) -> int | None:
        import psutil  # (here: a process that never waits for a descendant does not pay for the import)

        try:
            # A zombie has ended: its parent has not reaped it yet, being stopped (SIGSTOP) or hung. Seen as
            # running, a killed worker of a hung coordinator held an embedded cluster's stop for 5 s, then
            # ended it with TimeoutExpired before the coordinator was killed.
            if psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE:
                return None
        except psutil.NoSuchProcess:
            pass
        return -1


def wait_or_kill(processes: Iterable[_Handle | subprocess.Popen[bytes]], deadline: float) -> None:
    """Wait for each process to end until ``deadline`` (``time.monotonic()``; at least 0.1 s each), then kill and
    reap the ones still running."""
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def fork_call(function: Callable[..., int | None], *args: Any) -> ForkedProcess:
    """Run ``function(*args)`` in a forked child (see the module's contract) and return its handle."""
    # Unflushed output would otherwise be written twice, once by each process.
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedProcess(pid)
    code = 1
    try:
        code = function(*args) or 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
