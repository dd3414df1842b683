"""The coordinator's sample stream for the cluster monitor: running jobs, workers and faults, every second.

The coordinator binds a ZeroMQ PUB socket (its address: ``Client.cluster()["events"]``) and publishes one msgpack
map per second::

    {"ts": seconds since the epoch, "kind": "coordinator",
     "jobs": [job summary + failures + elapsed (up to now, or to its end), ...],
     "workers": [{worker, host, address, rack, alive, silent_s}, ...],
     "tasks": [{job_id, name, task, attempt, worker, host, address, fraction, records, stalled_s}, ...],
     "faults": [faults since the previous sample: {id, ts, kind, worker?, host?, address?, job_id?, task?, ...}]}

``tasks`` are the running attempts of batch jobs (``JobState.running_attempts``), ``stalled_s`` the seconds since
each last advanced (started, or reported another fraction or record count): the monitor's stuck-task alert. A
continuous job's attempts are not listed, nor a reduce's while its maps run, nor a pipeline step's while the step
before it runs (its maps read that step's output as it comes).

A worker's ``host`` is the host name its own samples carry (``monitoring.publisher``, the ``host`` label of the
Prometheus series; ``hop worker --host-label``), so faults and workers join them on it; ``address`` is the network
address peers reach the worker at.

Faults are task failures (``task_failed``), workers silent for three heartbeats (``heartbeat_missed``), workers
declared lost (``worker_lost``; with ``left`` true, one that said it was stopped), lost workers that registered again
(``worker_rejoined``) and live workers whose name a new process registered under (``worker_replaced``: the old one's
attempts are lost); the monitor shows them as annotations. The last ``KEEP_FAULTS`` are also kept for
``Client.cluster()``.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import msgpack
import zmq

KEEP_FAULTS = 200


def advertised_host(bind_host: str) -> str:
    """The host others reach a socket bound on ``bind_host`` at: itself, or for every interface (``0.0.0.0``,
    ``*``) this host's name, as workers name their hosts (loopback would point a monitor elsewhere at itself)."""
    return socket.gethostname() if bind_host in ("0.0.0.0", "*", "") else bind_host


class ClusterEvents:
    def __init__(self, context: zmq.Context, bind_host: str, interval: float = 1.0) -> None:
        self.socket = context.socket(zmq.PUB)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 100)
        port = self.socket.bind_to_random_port(f"tcp://{bind_host}")
        self.endpoint = f"tcp://{advertised_host(bind_host)}:{port}"
        """Where the monitor's stream map, on any worker, connects: a wildcard bind advertises this host's name."""
        self.interval = interval
        self.faults: deque[dict[str, Any]] = deque(maxlen=KEEP_FAULTS)
        self._new: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._next = time.monotonic()

    def fault(self, kind: str, **details: Any) -> None:
        """Record a fault; it goes out with the next sample."""
        entry = {"id": next(self._ids), "ts": time.time(), "kind": kind, **details}
        self.faults.append(entry)
        self._new.append(entry)

    def tick(self, snapshot: Callable[[], dict[str, Any]]) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = max(self._next + self.interval, now)
        sample = {"ts": time.time(), "kind": "coordinator", **snapshot(), "faults": self._new}
        self._new = []
        self.socket.send(msgpack.packb(sample, default=str), zmq.NOBLOCK)

    def close(self) -> None:
        self.socket.close(linger=0)
