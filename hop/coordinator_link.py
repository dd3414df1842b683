"""Whether a standalone worker's connection to its coordinator is up, from ZeroMQ's own socket events.

A worker gets no answer to its heartbeats, so without this it could not tell a coordinator that died (its process
ended, its host went down and the connection was reset) from one that is quiet, and said nothing for as long as
it waited for a new one. ZeroMQ reconnects by itself; this only watches: :meth:`CoordinatorLink.gone_for` says how
long the connection has been down (``None`` while it is up).

A coordinator that is stopped (SIGSTOP, its machine suspended) or cut off without a reset (its packets dropped)
keeps a TCP or IPC connection open, and a new one is even accepted by the kernel on its behalf. So the socket
sends ZMTP pings (``PING_SECONDS``, ``PONG_TIMEOUT_SECONDS``): ZeroMQ's I/O thread in the coordinator answers them
whatever its Python code is doing (a busy or GIL-bound coordinator still answers), so only a process that does
not run, or cannot be reached, lets the connection time out. The link is up only once ZeroMQ's handshake with the
coordinator succeeded, not when the kernel took the connection. The clock starts when the silent connection is
closed: ``PONG_TIMEOUT_SECONDS`` or so after the coordinator went quiet.
"""

from __future__ import annotations

import time

import zmq
from zmq.utils.monitor import recv_monitor_message

from hop.protocol import connect_soon

__all__ = ["CoordinatorLink"]

_EVENTS = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED

PING_SECONDS = 1.0
"""How often the worker's socket sends a ZMTP ping to the coordinator while the connection is idle."""
PONG_TIMEOUT_SECONDS = 3.0
"""How long after a ping without any answer (nor other traffic) the connection is closed as silent."""


class CoordinatorLink:
    """Watches ``socket`` (a DEALER, made before it connects: its pings are set here) for its connection going
    down and coming up again."""

    def __init__(self, socket: zmq.Socket[bytes]) -> None:
        self._socket = socket
        socket.setsockopt(zmq.HEARTBEAT_IVL, int(PING_SECONDS * 1000))
        socket.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(PONG_TIMEOUT_SECONDS * 1000))
        self._events: zmq.Socket[bytes] | None = socket.get_monitor_socket(_EVENTS)
        self._down_since: float | None = None
        self._up_since: float | None = None
        self.ever_connected = False
        """Whether a handshake ever succeeded (else no coordinator took a connection at the address)."""

    @property
    def events(self) -> zmq.Socket[bytes] | None:
        """The socket its events arrive on, for the caller's poller (``None`` once closed)."""
        return self._events

    def take_events(self) -> None:
        """Read the events that have arrived (without waiting): a disconnection starts the clock, a handshake with
        the coordinator stops it."""
        while self._events is not None and self._events.poll(0):
            event = recv_monitor_message(self._events)["event"]
            if event == zmq.EVENT_DISCONNECTED:
                self._up_since = None
                if self._down_since is None:
                    self._down_since = time.monotonic()
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._down_since, self._up_since, self.ever_connected = None, time.monotonic(), True

    def gone_for(self) -> float | None:
        """Seconds since the connection went down, or ``None`` while it is up (or was never down)."""
        return None if self._down_since is None else time.monotonic() - self._down_since

    def reconnect(self, address: str) -> None:
        """Close the connection and open a new one to ``address``: down from now until the new one's handshake
        succeeds. (ZeroMQ reports no disconnection of a connection its own socket closed: without this, a link
        whose new connection never completed its handshake, the coordinator stopped meanwhile, counted as up for
        ever.)"""
        self.take_events()  # (what came before: not the new connection's)
        self._socket.disconnect(address)
        connect_soon(self._socket, address)
        self._up_since = None
        if self._down_since is None:
            self._down_since = time.monotonic()

    def up_for(self) -> float | None:
        """Seconds since the latest handshake with the coordinator, or ``None`` while the connection is not up."""
        return None if self._up_since is None else time.monotonic() - self._up_since

    def close(self) -> None:
        """Stop watching; before the watched socket is closed."""
        if self._events is not None:
            self._socket.disable_monitor()
            self._events.close(linger=0)
            self._events = None
