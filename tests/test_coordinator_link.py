"""A standalone worker's view of its connection to the coordinator (``hop.coordinator_link``), on real sockets."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import zmq

from hop.coordinator_link import CoordinatorLink
from hop.protocol import connect_soon


def _until(condition: Callable[[], bool], link: CoordinatorLink, what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"{what} within 10 s"
        link.take_events()
        time.sleep(0.01)


def test_a_link_the_worker_reconnects_is_down_until_the_new_connections_handshake(tmp_path: Path) -> None:
    """A worker sends its registration again over a new connection (``Worker._retry_ignored_registration``).
    ZeroMQ reports no disconnection of a connection its own socket closed, so the link counted as up from the old
    handshake on: had the coordinator stopped answering then, the worker never took its connection for closed. It is
    down from the reconnection until the new connection's handshake, then up again."""
    context = zmq.Context.instance()
    address = f"ipc://{tmp_path}/coordinator"
    coordinator = context.socket(zmq.ROUTER)
    coordinator.bind(address)
    worker = context.socket(zmq.DEALER)
    link = CoordinatorLink(worker)
    try:
        connect_soon(worker, address)
        _until(lambda: link.up_for() is not None, link, "the first handshake")
        assert link.gone_for() is None
        link.reconnect(address)
        assert link.up_for() is None and link.gone_for() is not None, "down until the new handshake"
        _until(lambda: link.up_for() is not None, link, "the new connection's handshake")
        assert link.gone_for() is None and link.ever_connected
    finally:
        link.close()
        worker.close(linger=0)
        coordinator.close(linger=0)
