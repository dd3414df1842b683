"""Host metrics for the cluster monitor: one :meth:`HostSampler.sample` call per second in every worker.

``HostSampler(scope, root_pid).sample()`` returns a flat dict of plain floats (``cpu_per_core`` is a list of floats),
so it packs with msgpack and JSON as is. Names (:func:`host_metric_names`):

=====================  =================================================  ==========================================
name                   ``scope="host"`` (the machine)                     ``scope="process"`` (``root_pid``'s tree)
=====================  =================================================  ==========================================
cpu_percent            mean over cores of the busy share, 0-100           tree CPU seconds / wall seconds / cores
                                                                          * 100, 0-100 (a busy loop on 1 of 2 cores
                                                                          is ~50)
cpu_per_core           busy share per core, 0-100 each                    ``[cpu_percent]``
load1, load5           load averages (machine-wide in both scopes)        same
mem_percent            (total - available) / total * 100                  tree RSS / total memory * 100
mem_used_bytes         total - available                                  tree RSS (shared pages count per process)
swap_percent           swap used / swap total * 100 (0 without swap)      same (machine-wide)
disk_read_bytes_s      bytes/s read from physical disks                   the tree's ``read_bytes`` per second
disk_write_bytes_s     bytes/s written to physical disks                  the tree's ``write_bytes`` per second
disk_busy_percent      busiest physical disk's busy time share, 0-100     same (machine-wide: not per process)
net_sent_bytes_s       bytes/s sent, all interfaces incl. loopback        same (machine-wide)
net_recv_bytes_s       bytes/s received, all interfaces incl. loopback    same (machine-wide)
open_files             open file handles of the system (Linux:            open file descriptors of the tree
                       ``/proc/sys/fs/file-nr``; elsewhere the tree's)
=====================  =================================================  ==========================================

Rates and CPU shares are computed from the previous call of the same sampler (the first call primes them and
returns 0); every sampler keeps its own previous counters, so several samplers in one process do not disturb each
other (``psutil.cpu_percent(interval=None)`` would: its state is shared per thread). A counter that goes backwards
(a reset, a reused pid) counts as restarted from 0, never as a negative rate; a disk that appears has no rate until
the next call.

Process scope is for several workers on one machine (the embedded local cluster), each shown as its own "host":
the tree (``root_pid`` and all its descendants) is listed again on every call, from
``/proc/PID/task/TID/children`` on Linux (about 20 us per process; ``psutil.Process.children`` reads every process
on the machine, 1.6 ms here with 76 processes) and with psutil elsewhere. CPU and I/O are summed per process as
deltas against the process's previous counters: a process that ends between two calls loses its last partial
interval (a zombie, ended but not yet reaped, still reads: its last CPU counts, with 0 RSS), one first seen after
the first call (born in the interval) counts all of its CPU and I/O so far, and one that cannot be read in full
during a call (it ended mid-call, belongs to another user) is skipped for that call; nothing raises, and a
``root_pid`` that is gone gives 0 for the tree's metrics. Per-process disk I/O needs ``/proc/PID/io`` (Linux, same
user); where it is not readable the process adds 0, and on macOS the disk rates of this scope are 0.

Disks (host scope and ``disk_busy_percent``): on Linux, the block devices with a ``/sys/block/NAME/device`` link,
i.e. physical disks, so LVM/dm, md, loop and zram devices are not counted twice (all disks psutil lists when none
has one). ``disk_busy_percent`` is 0 where psutil has no ``busy_time`` (macOS).

Cost of one ``sample()`` call, steady state (``python -m monitoring.sampler``: 200 calls after a priming one; Python
3.11, psutil 7.2, a 2-core Linux 6.18 VM with ~90 processes, measured while other test suites kept it at load 5-8,
hence the spread): ``scope="host"`` 0.21-0.31 ms CPU (0.22-0.58 ms wall); ``scope="process"`` 0.26-0.40 ms CPU
(0.32-0.95 ms wall) for a tree of 1 process and 0.57-0.97 ms CPU (0.59-1.9 ms wall) for a tree of 5, i.e. about
0.1 ms per process in the tree. A process seen for the first time costs ~25 us more (``psutil.Process``).
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import Any

import psutil

HOST_METRICS: tuple[str, ...] = (
    "cpu_percent",
    "cpu_per_core",
    "load1",
    "load5",
    "mem_percent",
    "mem_used_bytes",
    "swap_percent",
    "disk_read_bytes_s",
    "disk_write_bytes_s",
    "disk_busy_percent",
    "net_sent_bytes_s",
    "net_recv_bytes_s",
    "open_files",
)
"""Every key of :meth:`HostSampler.sample`, in both scopes."""

ENGINE_METRICS: tuple[str, ...] = (
    "running_maps",
    "running_reduces",
    "spill_queue",
    "unsent_spills",
    "shuffle_out_bytes_s",
    "blocked_reducers",
    "backpressure_seconds",
    "heartbeat_lag_ms",
)
"""The engine metrics a worker sends next to its host metrics (``"engine"`` in a sample)."""

SCOPES = ("host", "process")

_LINUX = sys.platform.startswith("linux")
_HAS_IO = hasattr(psutil.Process, "io_counters")
_HAS_FDS = hasattr(psutil.Process, "num_fds")


def host_metric_names() -> tuple[str, ...]:
    """The keys of every :meth:`HostSampler.sample` (``cpu_per_core`` is the only list)."""
    return HOST_METRICS


def engine_metric_names() -> tuple[str, ...]:
    """The engine metrics workers publish alongside the host metrics, so the dashboard and ``/metrics`` know them."""
    return ENGINE_METRICS


@dataclass(slots=True)
class _Seen:
    """A process of the tree at the previous call, with its cumulative counters then."""

    process: psutil.Process
    cpu: float
    read: int | None
    write: int | None


def _memory() -> tuple[int, int, float]:
    """(total, available, swap used %) of the machine: one read of ``/proc/meminfo`` on Linux, psutil elsewhere."""
    if _LINUX:
        try:
            fields: dict[bytes, int] = {}
            with open("/proc/meminfo", "rb") as file:
                for line in file:
                    name, value, *_ = line.split()
                    fields[name] = int(value) * 1024
            total, available = fields[b"MemTotal:"], fields[b"MemAvailable:"]
            swap_total, swap_free = fields.get(b"SwapTotal:", 0), fields.get(b"SwapFree:", 0)
            return total, available, (swap_total - swap_free) / swap_total * 100 if swap_total else 0.0
        except (OSError, KeyError, ValueError):  # no MemAvailable before Linux 3.14: psutil estimates it
            pass
    memory = psutil.virtual_memory()
    with warnings.catch_warnings():  # psutil warns when it cannot read swap-in/out counters, which are not used
        warnings.simplefilter("ignore")
        swap = psutil.swap_memory()
    return memory.total, memory.available, float(swap.percent)


def _delta(current: float, previous: float) -> float:
    """The growth of a counter; a counter that went backwards (reset, reused) counts as new from 0."""
    return current - previous if current >= previous else current


class HostSampler:
    """Samples the machine (``scope="host"``) or the process tree of ``root_pid`` (``scope="process"``)."""

    def __init__(self, scope: str = "host", root_pid: int | None = None) -> None:
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}")
        self.scope = scope
        self.root_pid = os.getpid() if root_pid is None else int(root_pid)
        self.cores = psutil.cpu_count() or 1
        self.total_memory = psutil.virtual_memory().total
        self._last: float | None = None  # time.monotonic() of the previous call
        self._cpu: list[tuple[float, float]] = []  # per core: (busy, total) seconds
        self._disks: dict[str, tuple[int, int, int]] = {}  # name: (read_bytes, write_bytes, busy_ms)
        self._net: tuple[int, int] | None = None
        self._tree: dict[int, _Seen] = {}
        self._physical: dict[str, bool] = {}
        self._children_files = _LINUX and os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")

    def sample(self) -> dict[str, float | list[float]]:
        """The metrics since the previous call (see the module docstring); never raises for vanished processes."""
        now = time.monotonic()
        seconds = 0.0 if self._last is None else now - self._last
        primed = seconds > 0
        out: dict[str, float | list[float]] = {}

        disk_read, disk_write, disk_busy = self._disk_rates(seconds)
        if self.scope == "host":
            per_core = self._host_cpu(primed)
            out["cpu_percent"] = round(sum(per_core) / len(per_core), 3) if per_core else 0.0
            out["cpu_per_core"] = [round(share, 3) for share in per_core]
        else:
            cpu_seconds, rss, fds, tree_read, tree_write = self._sample_tree(primed)
            cpu = cpu_seconds / seconds / self.cores * 100 if primed else 0.0
            share = round(min(max(cpu, 0.0), 100.0), 3)
            out["cpu_percent"], out["cpu_per_core"] = share, [share]
            disk_read = tree_read / seconds if primed else 0.0
            disk_write = tree_write / seconds if primed else 0.0

        load1, load5, _ = psutil.getloadavg()
        out["load1"], out["load5"] = float(load1), float(load5)
        total, available, swap_percent = _memory()
        if self.scope == "host":
            used = total - available
            out["mem_percent"] = round(used / total * 100, 3) if total else 0.0
            out["mem_used_bytes"] = float(used)
        else:
            out["mem_percent"] = round(rss / self.total_memory * 100, 3) if self.total_memory else 0.0
            out["mem_used_bytes"] = float(rss)
        out["swap_percent"] = round(swap_percent, 3)
        out["disk_read_bytes_s"] = round(disk_read, 1)
        out["disk_write_bytes_s"] = round(disk_write, 1)
        out["disk_busy_percent"] = round(disk_busy, 3)
        out["net_sent_bytes_s"], out["net_recv_bytes_s"] = self._net_rates(seconds)
        if self.scope == "host":
            out["open_files"] = float(self._system_open_files())
        else:
            out["open_files"] = float(fds)
        self._last = now
        return out

    # Machine-wide ----------------------------------------------------------------------------------------------

    def _host_cpu(self, primed: bool) -> list[float]:
        current = []
        for times in psutil.cpu_times(percpu=True):
            total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
            busy = total - times.idle - getattr(times, "iowait", 0.0)
            current.append((busy, total))
        previous, self._cpu = self._cpu, current
        if not primed or len(previous) != len(current):  # first call, or a core went on/offline
            return [0.0] * len(current)
        shares = []
        for (busy_before, total_before), (busy, total) in zip(previous, current, strict=True):
            elapsed = total - total_before
            shares.append(min(max((busy - busy_before) / elapsed * 100, 0.0), 100.0) if elapsed > 0 else 0.0)
        return shares

    def _is_physical(self, name: str) -> bool:
        physical = self._physical.get(name)
        if physical is None:
            physical = self._physical[name] = os.path.exists(f"/sys/block/{name.replace('/', '!')}/device")
        return physical

    def _disk_rates(self, seconds: float) -> tuple[float, float, float]:
        """(read bytes/s, write bytes/s, busiest disk's busy %) over the physical disks."""
        try:
            disks = psutil.disk_io_counters(perdisk=True, nowrap=False) or {}
        except (OSError, RuntimeError):  # no /proc/diskstats (some containers)
            disks = {}
        if _LINUX:
            physical = {name: io for name, io in disks.items() if self._is_physical(name)}
            disks = physical or disks
        current = {name: (io.read_bytes, io.write_bytes, getattr(io, "busy_time", 0)) for name, io in disks.items()}
        previous, self._disks = self._disks, current
        if seconds <= 0:
            return 0.0, 0.0, 0.0
        read = write = busy = 0.0
        for name, (read_now, write_now, busy_now) in current.items():
            before = previous.get(name)
            if before is None:  # a disk that appeared: no rate yet
                continue
            read += _delta(read_now, before[0])
            write += _delta(write_now, before[1])
            busy = max(busy, _delta(busy_now, before[2]) / (seconds * 1000) * 100)
        return read / seconds, write / seconds, min(busy, 100.0)

    def _net_rates(self, seconds: float) -> tuple[float, float]:
        counters = psutil.net_io_counters(nowrap=False)
        current = (counters.bytes_sent, counters.bytes_recv) if counters is not None else (0, 0)
        previous, self._net = self._net, current
        if previous is None or seconds <= 0:
            return 0.0, 0.0
        return (
            round(_delta(current[0], previous[0]) / seconds, 1),
            round(_delta(current[1], previous[1]) / seconds, 1),
        )

    def _system_open_files(self) -> int:
        if _LINUX:
            try:
                with open("/proc/sys/fs/file-nr", "rb") as file:
                    allocated, free, _ = file.read().split()
                return int(allocated) - int(free)
            except (OSError, ValueError):
                pass
        return self._sample_tree(False, keep=False)[2]

    # The process tree ------------------------------------------------------------------------------------------

    def tree_pids(self) -> list[int]:
        """``root_pid`` and all its descendants now (only ``root_pid`` if it cannot be listed; it may be gone)."""
        if not self._children_files:
            try:
                return [self.root_pid, *(child.pid for child in psutil.Process(self.root_pid).children(recursive=True))]
            except psutil.Error:
                return [self.root_pid]
        pids, seen, index = [self.root_pid], {self.root_pid}, 0
        while index < len(pids):
            pid = pids[index]
            index += 1
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:  # it ended
                continue
            for thread in threads:  # a child is listed under the thread that forked it
                try:
                    with open(f"/proc/{pid}/task/{thread}/children", "rb") as file:
                        children = file.read().split()
                except OSError:
                    continue
                for child in map(int, children):
                    if child not in seen:
                        seen.add(child)
                        pids.append(child)
        return pids

    def _sample_tree(self, primed: bool, keep: bool = True) -> tuple[float, int, int, int, int]:
        """(CPU seconds, RSS, fds, read bytes, write bytes) of the tree: CPU and I/O since the previous call."""
        previous = self._tree
        current: dict[int, _Seen] = {}
        cpu_total = 0.0
        rss = fds = read_total = write_total = 0
        for pid in self.tree_pids():
            seen = previous.get(pid)
            try:
                process = seen.process if seen is not None else psutil.Process(pid)
                with process.oneshot():
                    times = process.cpu_times()
                    memory = process.memory_info().rss
                    descriptors = process.num_fds() if _HAS_FDS else 0
                    read, write = self._process_io(process)
            except psutil.Error:  # ended (mid-call) or not ours to read
                continue
            cpu = times.user + times.system
            rss += memory
            fds += descriptors
            current[pid] = _Seen(process, cpu, read, write)
            if not primed:
                continue
            if seen is None:  # born since the previous call: all of it is new
                cpu_total += cpu
                read_total += read or 0
                write_total += write or 0
                continue
            cpu_total += _delta(cpu, seen.cpu)
            if read is not None and seen.read is not None:
                read_total += int(_delta(read, seen.read))
            if write is not None and seen.write is not None:
                write_total += int(_delta(write, seen.write))
        if keep:
            self._tree = current
        return cpu_total, rss, fds, read_total, write_total

    @staticmethod
    def _process_io(process: psutil.Process) -> tuple[int | None, int | None]:
        if not _HAS_IO:
            return None, None
        try:
            counters: Any = process.io_counters()
        except psutil.AccessDenied:
            return None, None
        return counters.read_bytes, counters.write_bytes


def _bench(calls: int = 200, children: int = 4) -> None:
    """Print the cost of one ``sample()`` per scope, wall and CPU time (the figures in the module docstring)."""
    import subprocess

    def cost(sampler: HostSampler) -> str:
        sampler.sample()
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            sampler.sample()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return f"{wall / calls * 1000:.3f} ms wall, {cpu / calls * 1000:.3f} ms CPU"

    print(f"scope=host: {cost(HostSampler('host'))}")
    print(f"scope=process, tree of 1: {cost(HostSampler('process'))}")
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(children)]
    try:
        time.sleep(0.5)
        print(f"scope=process, tree of {children + 1}: {cost(HostSampler('process'))}")
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait(timeout=10)


if __name__ == "__main__":
    _bench()
