"""The embedded local cluster: a coordinator and workers started as processes of this machine.

``hop run`` without ``--coordinator`` uses it. It runs the same coordinator and worker programs as a real cluster
(``hop.coordinator``, ``hop.worker``), so there is no in-process shortcut to diverge from; to start in one
interpreter's time, one process (``hop.cluster_launch``) imports them, forks the workers and becomes the
coordinator; the ``hop`` command starts that interpreter before importing the rest of itself and hands it over
(``prelaunched``, ``hop.prelaunch``). :meth:`LocalCluster.stop` asks the coordinator to shut down (which stops the
workers and their task processes), then kills anything still running after ``STOP_TIMEOUT``, so nothing outlives
it. Only that stop ends them while this process lives: they ignore SIGINT and SIGTERM sent to the whole process
group (``hop.lifetime.ignore_stop_signals``), so that ``hop run`` can drain its job first.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
import time
from types import TracebackType
from typing import TextIO

from hop.client import Client, CoordinatorUnavailable
from hop.forking import DescendantProcess, wait_or_kill
from hop.prelaunch import Prelaunch
from hop.spilldirs import make_marked_dir

CLUSTER_PREFIX = "hop-cluster-"
"""The name of an embedded cluster's directory in the system's temporary directory, up to its random part."""

START_TIMEOUT = 60.0

STOP_TIMEOUT = 10.0
"""Seconds :meth:`LocalCluster.stop` waits for the cluster's processes to end once asked, before it kills them."""


class ClusterStartError(RuntimeError):
    pass


IPC_PATH_MAX = 107
"""The longest path a Unix socket can have on Linux (``sizeof(sockaddr_un.sun_path)`` less its final NUL; 103 on
macOS), which ZeroMQ refuses to exceed."""


def coordinator_address(socket_dir: str) -> str:
    """The embedded coordinator's ``ipc://`` address: a socket file in the cluster's directory, or on Linux, where
    that path is too long for a Unix socket (a long ``TMPDIR``), an abstract socket (no file) named after the
    directory, as unique as it is. Elsewhere a path too long stays, and the coordinator's start fails naming it."""
    path = os.path.join(socket_dir, "coordinator")
    if len(path.encode()) <= IPC_PATH_MAX or not sys.platform.startswith("linux"):
        return f"ipc://{path}"
    return f"ipc://@{os.path.basename(socket_dir)}-{os.getpid()}"


class LocalCluster:
    def __init__(
        self,
        workers: int | None = None,
        map_slots: int = 1,
        reduce_slots: int = 1,
        heartbeat_timeout: float = 5.0,
        racks: int = 1,
        sample_interval: float = 1.0,
        stream_slots: int = 0,
        prelaunched: Prelaunch | None = None,
    ) -> None:
        """``prelaunched``: a launcher already started and waiting for its options (``hop.prelaunch``), which this
        cluster then owns (:meth:`stop` discards it if the cluster was never started; without one, :meth:`start`
        starts one); ``stream_slots``: per worker, slots only continuous jobs use
        (0: they take map and reduce slots); ``racks``: workers get rack labels ``rack-0``... round robin (the
        monitor's roll-up); every worker samples its own process tree every ``sample_interval`` seconds (0: not at
        all), since all of them share this machine and the monitor shows each as a host."""
        self.num_workers = workers or os.cpu_count() or 1
        self.racks = max(1, racks)
        self.sample_interval = sample_interval
        self.map_slots = map_slots
        self.reduce_slots = reduce_slots
        self.stream_slots = stream_slots
        self.heartbeat_timeout = heartbeat_timeout
        self.coordinator: subprocess.Popen[bytes] | None = None
        """The coordinator's process: the launcher (``hop.cluster_launch``), which forked the workers."""
        self.workers: list[DescendantProcess] = []
        self.address = ""
        self._socket_dir: str | None = None
        self._prelaunched = prelaunched

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            # Failed or interrupted (Ctrl-C) while starting: no job ran, nothing is to be drained, and a polite stop
            # waited STOP_TIMEOUT (10 s) for a coordinator whose address was not read yet, or for workers that had
            # not registered yet and so never heard its shutdown. Ended at once instead.
            self.stop(grace=0.0)
            raise

    def _start(self) -> None:
        # A local ipc endpoint known in advance lets the workers start alongside the coordinator (ZeroMQ connects
        # retry until the bind exists), which halves start-up: it matters for short jobs.
        # Marked as this process's (hop.spilldirs): its coordinator removes it if this process dies without a stop,
        # but with its whole process group killed (`timeout -s KILL`, `kill -9 -PGID`) nobody did, and it held the
        # workers' spill files; the next cluster started on this host removes it.
        self._socket_dir = str(make_marked_dir(None, CLUSTER_PREFIX))
        planned = coordinator_address(self._socket_dir)
        options = [
            "--bind",
            planned,
            "--heartbeat-timeout",
            str(self.heartbeat_timeout),
            "--workers",
            str(self.num_workers),
            "--map-slots",
            str(self.map_slots),
            "--reduce-slots",
            str(self.reduce_slots),
            "--stream-slots",
            str(self.stream_slots),
            # Spill files under the cluster's directory: removed at stop even if a worker was killed.
            "--spill-dir",
            self._socket_dir,
            "--racks",
            str(self.racks),
            "--sample-interval",
            str(self.sample_interval),
        ]
        launcher, self._prelaunched = self._prelaunched, None
        if launcher is None:
            launcher = Prelaunch()
        self.coordinator = launcher.process
        with launcher.configure(options) as report:
            self.address = self._read_report(report)
        if self.address != planned:
            raise ClusterStartError(f"coordinator did not bind {planned}")
        client = Client(self.address, timeout=10)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while sum(w["alive"] for w in client.workers()) < self.num_workers:
                for process in self.workers:
                    if process.poll() is not None:
                        raise ClusterStartError(f"worker pid {process.pid} exited at start-up (see its output above)")
                if time.monotonic() > deadline:
                    raise ClusterStartError(f"workers did not register within {START_TIMEOUT:.0f}s")
                time.sleep(0.01)
        finally:
            client.close()

    def _read_report(self, report: TextIO) -> str:
        """Take the workers' pids from the launcher's report (``hop.cluster_launch``); return the coordinator's
        address, its last line."""
        deadline = time.monotonic() + START_TIMEOUT
        selector = selectors.DefaultSelector()
        selector.register(report, selectors.EVENT_READ)
        try:
            while True:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    raise ClusterStartError(f"coordinator did not start within {START_TIMEOUT:.0f}s")
                line = report.readline()
                kind, _, rest = line.strip().partition(" ")
                if kind == "worker":
                    self.workers.append(DescendantProcess(int(rest.rsplit(" ", 1)[1])))
                elif kind == "coordinator":
                    return rest
                else:
                    assert self.coordinator is not None
                    code = self.coordinator.wait(timeout=5) if not line else None
                    raise ClusterStartError(f"coordinator failed to start (exit code {code}): {line!r}")
        finally:
            selector.close()

    def _unreported_workers(self) -> list[DescendantProcess]:
        """The workers the launcher forked that its report has not named yet (Ctrl-C as the cluster started), the
        launcher suspended first so that it forks no more: killed with it rather than left orphaned, each going on
        to start (a traceback for a spill directory the stop had removed) until it found its launcher gone."""
        import psutil  # (here: only a cluster interrupted as it starts pays for the import)

        assert self.coordinator is not None
        try:
            launcher = psutil.Process(self.coordinator.pid)
            launcher.suspend()
            children = launcher.children()
        except psutil.Error:  # (ended already: its workers end once they find it gone, hop.lifetime.orphaned)
            return []
        known = {worker.pid for worker in self.workers}
        return [DescendantProcess(child.pid) for child in children if child.pid not in known]

    def stop(self, grace: float = STOP_TIMEOUT) -> None:
        """Ask the coordinator to shut the cluster down and wait up to ``grace`` seconds for its processes, then
        kill those still running; ``grace=0`` kills them at once, without asking."""
        prelaunched, self._prelaunched = self._prelaunched, None
        if prelaunched is not None:  # never started
            prelaunched.discard()
        if self.coordinator is not None and self.coordinator.poll() is None and self.address and grace > 0:
            client = Client(self.address, timeout=5)
            try:
                client.shutdown()
            except (CoordinatorUnavailable, Exception):
                pass
            finally:
                client.close()
        processes: list[subprocess.Popen[bytes] | DescendantProcess] = list(self.workers)
        if self.coordinator is not None:
            if grace <= 0:
                processes += self._unreported_workers()
            processes.append(self.coordinator)
        # Killed, not terminated, past the deadline: they ignore SIGTERM (hop.lifetime.ignore_stop_signals).
        wait_or_kill(processes, time.monotonic() + grace)
        self.workers = []
        self.coordinator = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
