"""A worker's sample stream: its host and engine metrics, published every ``interval`` seconds.

Each worker binds a ZeroMQ PUB socket and publishes one msgpack map per interval::

    {"ts": seconds since the epoch, "kind": "worker", "worker": name, "host": host label, "rack": rack label,
     "host_metrics": {...HostSampler.sample()...}, "engine": {...engine metrics...}}

The cluster monitor (``jobs/cluster_monitor.py``, started by ``hop monitor``) reads every worker's stream as one
source of a continuous job (``zmq+sub:ENDPOINT``), so a worker that stops publishing shows as missing in each
window's C2 scoreboard. Publishing never blocks the worker: PUB drops what no subscriber takes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import msgpack
import zmq


class SamplePublisher:
    """Samples and publishes on a schedule; the worker calls :meth:`tick` from its loop."""

    def __init__(
        self,
        context: zmq.Context,
        bind_host: str,
        worker: str,
        host_label: str,
        rack: str,
        interval: float = 1.0,
        scope: str = "host",
    ) -> None:
        from monitoring.sampler import HostSampler

        self.worker, self.host_label, self.rack, self.interval = worker, host_label, rack, interval
        self.sampler = HostSampler(scope, os.getpid())
        self.context, self.bind_host = context, bind_host
        self.socket = self._socket()
        port = self.socket.bind_to_random_port(f"tcp://{bind_host}")
        self.endpoint = f"tcp://{bind_host}:{port}"
        self.sampler.sample()  # the first call only primes the rates
        self._next = time.monotonic() + interval
        self.published = 0
        self.seconds_spent = 0.0
        """CPU-time cost of sampling so far (the monitor's own cost, reported by the bench)."""

    def _socket(self) -> zmq.Socket:
        socket = self.context.socket(zmq.PUB)
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.SNDHWM, 100)
        return socket

    def move_to(self, endpoint: str) -> bool:
        """Publish at ``endpoint`` instead, where a predecessor of this worker (same name, same host) published: a
        running monitor's sources and feeds subscribe to that endpoint and reconnect to it, so they get this
        worker's samples. Returns False, publishing where it did, if the endpoint is on another host or taken."""
        if endpoint.rsplit(":", 1)[0] != f"tcp://{self.bind_host}":
            return False
        moved = self._socket()
        try:
            moved.bind(endpoint)
        except zmq.ZMQError:
            moved.close(linger=0)
            return False
        self.socket.close(linger=0)
        self.socket, self.endpoint = moved, endpoint
        return True

    def tick(self, engine_metrics: Callable[[], dict[str, float]]) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = max(self._next + self.interval, now)
        started = time.process_time()
        sample: dict[str, Any] = {
            "ts": time.time(),
            "kind": "worker",
            "worker": self.worker,
            "host": self.host_label,
            "rack": self.rack,
            "host_metrics": self.sampler.sample(),
            "engine": engine_metrics(),
        }
        self.socket.send(msgpack.packb(sample), zmq.NOBLOCK)
        self.published += 1
        self.seconds_spent += time.process_time() - started

    def close(self) -> None:
        self.socket.close(linger=0)
