"""Whether a standalone worker's connection to its coordinator is up, from ZeroMQ's own socket events.

A worker gets no answer to its heartbeats, so without this it could not tell a coordinator that died (its process
ended, its host went down and the connection was reset) from one that is quiet, and said nothing for as long as
it waited for a new one. ZeroMQ reconnects by itself; this only watches: :meth:`CoordinatorLink.gone_for` says how
long the connection has been down (``None`` while it is up). A coordinator that is stopped (SIGSTOP) or cut off
without a reset keeps the connection up and is not seen here.
"""

from __future__ import annotations

import time

import zmq
from zmq.utils.monitor import recv_monitor_message

__all__ = ["CoordinatorLink"]

_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED


class CoordinatorLink:
    """Watches ``socket`` (a connected DEALER) for its connection going down and coming up again."""

    def __init__(self, socket: zmq.Socket[bytes]) -> None:
        self._socket = socket
        self._events: zmq.Socket[bytes] | None = socket.get_monitor_socket(_EVENTS)
        self._down_since: float | None = None
        self.ever_connected = False
        """Whether a connection was ever made (else nothing accepted one at the address: no coordinator there)."""

    @property
    def events(self) -> zmq.Socket[bytes] | None:
        """The socket its events arrive on, for the caller's poller (``None`` once closed)."""
        return self._events

    def take_events(self) -> None:
        """Read the events that have arrived (without waiting): a disconnection starts the clock, a connection
        stops it."""
        while self._events is not None and self._events.poll(0):
            event = recv_monitor_message(self._events)["event"]
            if event == zmq.EVENT_DISCONNECTED:
                if self._down_since is None:
                    self._down_since = time.monotonic()
            elif event == zmq.EVENT_CONNECTED:
                self._down_since, self.ever_connected = None, True

    def gone_for(self) -> float | None:
        """Seconds since the connection went down, or ``None`` while it is up (or was never down)."""
        return None if self._down_since is None else time.monotonic() - self._down_since

    def close(self) -> None:
        """Stop watching; before the watched socket is closed."""
        if self._events is not None:
            self._socket.disable_monitor()
            self._events.close(linger=0)
            self._events = None
