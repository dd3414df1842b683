"""Measuring one contender run: wall time, CPU time of the whole process tree and peak memory.

- Wall time: ``time.perf_counter()`` from just before the subprocess starts until it exits.
- CPU time: user + system of the process tree, as the ``resource.getrusage(RUSAGE_CHILDREN)`` delta around the
  run. Processes only count there once they are reaped, so ``hop.lifetime.become_subreaper`` makes this process adopt
  the run's orphans (e.g. Spark's JVM, which outlives the Python driver by a moment) and :func:`measure` reaps
  them before reading the counters. Children of a process that ignores SIGCHLD (PySpark's worker daemon does)
  are reaped by the kernel and never reach those counters, so a thread also samples every descendant's own CPU
  time every 50 ms (the last value seen per process, a lower bound missing < 50 ms each); the suite reports
  the larger of the two figures and keeps both.
- Peak memory: the same thread sums the RSS of all our descendants; the peak of that sum (shared pages of
  forked workers count once per process, as in ``ps``). On Linux the tree is walked through
  ``/proc/PID/task/TID/children``, which costs about 1% of a core; elsewhere through psutil.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

SAMPLE_INTERVAL = 0.05
ORPHAN_GRACE = 30.0


@dataclass
class Measurement:
    """What :func:`measure` saw of one run."""

    wall_s: float
    cpu_s: float
    cpu_sampled_s: float
    peak_rss_bytes: int
    returncode: int
    timed_out: bool
    orphans_killed: int


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC_CHILDREN = Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/children").exists()


def _proc_descendants(root: int) -> list[int]:
    """Descendants of ``root`` from /proc/PID/task/TID/children: reads only our own tree, not all of /proc."""
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as handle:
                    children = [int(child) for child in handle.read().split()]
            except OSError:
                continue
            found.extend(children)
            stack.extend(children)
    return found


def _proc_stat(pid: int) -> tuple[int, float, int] | None:
    """(start time in ticks, user + system seconds, RSS bytes) of a process from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]), (int(fields[11]) + int(fields[12])) / _TICKS, int(fields[21]) * _PAGE


def _psutil_stat(pid: int) -> tuple[int, float, int] | None:
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            return int(process.create_time() * 1000), times.user + times.system, process.memory_info().rss
    except psutil.Error:
        return None


class TreeSampler(threading.Thread):
    """Samples the summed RSS and per-process CPU time of this process's descendants until stopped."""

    def __init__(self, interval: float = SAMPLE_INTERVAL) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.interval = interval
        self.peak_rss = 0
        self._cpu: dict[tuple[int, int], float] = {}
        self._stop_event = threading.Event()

    def run(self) -> None:
        while True:
            self.sample()
            if self._stop_event.wait(self.interval):
                break

    def sample(self) -> None:
        me = os.getpid()
        if _PROC_CHILDREN:
            pids, stat = _proc_descendants(me), _proc_stat
        else:
            try:
                pids = [child.pid for child in psutil.Process(me).children(recursive=True)]
            except psutil.Error:
                return
            stat = _psutil_stat
        total = 0
        for pid in pids:
            figures = stat(pid)
            if figures is not None:
                started, cpu, rss = figures
                total += rss
                self._cpu[(pid, started)] = cpu
        self.peak_rss = max(self.peak_rss, total)

    @property
    def cpu_seconds(self) -> float:
        """CPU time of every process seen, as last sampled (a lower bound: the last < 50 ms is missed)."""
        return sum(self._cpu.values())

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _kill_tree(pid: int) -> None:
    """SIGKILL the run's process group and every descendant of ours."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            child.kill()


def reap_orphans(grace: float = ORPHAN_GRACE) -> int:
    """Wait for adopted descendants to exit (killed after ``grace`` seconds); returns how many were killed."""
    deadline = time.monotonic() + grace
    killed = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed
        if pid:
            continue
        if time.monotonic() > deadline:
            for child in psutil.Process().children():
                with contextlib.suppress(psutil.Error):
                    child.kill()
                    killed += 1
            deadline = time.monotonic() + grace
        time.sleep(0.02)


def measure(
    command: list[str],
    *,
    stdout: Path,
    stderr: Path,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    timeout: float | None = None,
) -> Measurement:
    """Run ``command`` to completion (output to the two files) and measure it; exit codes are not raised."""
    reap_orphans(grace=5.0)  # leftovers of something else would pollute the CPU delta
    cpu_before = _cpu_children()
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        sampler = TreeSampler()
        began = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env, cwd=cwd, start_new_session=True)
        sampler.start()
        timed_out = False
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_tree(process.pid)
            returncode = process.wait()
        except BaseException:  # Ctrl-C: the run is in its own session, so it would outlive us
            _kill_tree(process.pid)
            process.wait()
            sampler.stop()
            raise
        wall = time.perf_counter() - began
        sampler.stop()
    killed = reap_orphans()
    return Measurement(
        wall_s=wall,
        cpu_s=_cpu_children() - cpu_before,
        cpu_sampled_s=sampler.cpu_seconds,
        peak_rss_bytes=sampler.peak_rss,
        returncode=returncode,
        timed_out=timed_out,
        orphans_killed=killed,
    )
