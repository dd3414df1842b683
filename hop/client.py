"""Talking to a coordinator: submit a job, poll its status, ask for shutdown.

Every request waits at most ``timeout`` seconds for its reply; a coordinator that does not answer raises
:class:`CoordinatorUnavailable` instead of hanging the CLI.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import zmq

from hop.jobspec import JobSpec
from hop.protocol import close_socket, message, unpack


class CoordinatorUnavailable(RuntimeError):
    """The coordinator did not answer in time."""

    exit_code = 3
    """What a ``hop`` command exits with when this ends it (README: exit codes)."""


class JobRejected(ValueError):
    """The coordinator refused a request; the message says why."""

    exit_code = 2  # a usage error: no such job, a job it cannot run


class Client:
    def __init__(self, address: str, timeout: float = 30.0) -> None:
        self.address = address
        self.timeout = timeout
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self._socket = self._connect()
        self.submitted: list[str] = []
        """The jobs this client submitted, in order (what an interrupted ``hop submit`` cancels)."""

    def _connect(self) -> zmq.Socket:
        socket = self.context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(self.address)
        return socket

    def request(self, msg_type: str, /, **fields: Any) -> dict[str, Any]:
        kind = msg_type
        self._socket.send(message(msg_type, **fields))
        try:
            answered = self._socket.poll(int(self.timeout * 1000))
            reply = unpack(self._socket.recv()) if answered else None
        except BaseException:
            # Interrupted while waiting (Ctrl-C, SIGTERM: hop run then stops its continuous job with this client).
            self._forget_pending()
            raise
        if reply is None:
            self._forget_pending()
            raise CoordinatorUnavailable(
                f"coordinator {self.address} did not answer {kind!r} within {self.timeout:.0f}s"
            )
        if reply["type"] == "error":
            raise JobRejected(reply["message"])
        return reply

    def _forget_pending(self) -> None:
        """Start a fresh socket: the reply to a request given up on must not be taken for the next one's."""
        close_socket(self._socket)
        self._socket = self._connect()

    def submit(self, spec: JobSpec) -> str:
        job_id = str(self.request("submit", job=spec.to_wire())["job_id"])
        self.submitted.append(job_id)
        return job_id

    def status(self, job_id: str) -> dict[str, Any]:
        return self.request("status", job_id=job_id)

    def wait(
        self,
        job_id: str,
        on_status: Callable[[dict[str, Any]], None] | None = None,
        poll_seconds: float = 0.1,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Poll until the job finishes; returns the final status (with ``report``). ``on_status`` gets a status
        about every ``poll_seconds``; the coordinator holds each poll until then or until the job ends, so the end
        is seen at once."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.request("status", job_id=job_id, wait=poll_seconds)
            if on_status is not None:
                on_status(status)
            if status["state"] != "running":
                return status
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still running after {timeout}s")

    def jobs(self) -> list[dict[str, Any]]:
        """Every job the coordinator knows: id, name, state, progress, output directory, snapshot count."""
        return list(self.request("jobs")["jobs"])

    def job(self, job_id: str) -> dict[str, Any]:
        """One job's summary plus ``tasks``: every map and reduce task's state and progress."""
        reply = self.request("job", job_id=job_id)
        reply.pop("type", None)
        return reply

    def snapshots(self, job_id: str, after: int = -1) -> list[dict[str, Any]]:
        """The job's snapshots with ``seq > after``, oldest first, with their rows (see ``hop.online.tracker``)."""
        return list(self.request("snapshots", job_id=job_id, after=after)["snapshots"])

    def snapshot_now(self, job_id: str) -> dict[str, Any]:
        """Ask the reducers of a running job for a snapshot now; returns its ``seq`` and ``label``."""
        return self.request("snapshot", job_id=job_id)

    def stop(self, job_id: str) -> dict[str, Any]:
        """Ask a continuous job to stop (its maps drain, its reducers write the last windows and checkpoint), or
        cancel a batch job (it fails as cancelled, its tasks are ended); the reply says which (``cancelled``)."""
        return self.request("stop_job", job_id=job_id)

    def windows(self, job_id: str, after: int = 0, *, limit: int = 100, all_rows: bool = False) -> list[dict[str, Any]]:
        """A continuous job's windows with ``seq > after`` (as in their ``_window.json``, plus ``rows``), oldest
        first, at most ``limit`` (``after=0``: the newest ``limit``; ask again after the last for more). ``rows``
        holds the first rows of each window the coordinator kept; ``all_rows`` reads every row from the windows'
        part files."""
        return list(self.window_listing(job_id, after, limit=limit, all_rows=all_rows)["windows"])

    def window_listing(
        self, job_id: str, after: int = 0, *, limit: int = 100, all_rows: bool = False
    ) -> dict[str, Any]:
        """``windows`` with ``omitted``: how many windows with ``seq > after`` the answer left out (past ``limit``,
        or older than the coordinator keeps in memory; every window is in ``OUT/windows/``)."""
        return dict(self.request("windows", job_id=job_id, after=after, limit=limit, all_rows=all_rows))

    def cluster(self) -> dict[str, Any]:
        """The coordinator's sample stream address (``events``) and its recent ``faults``."""
        reply = self.request("cluster")
        reply.pop("type", None)
        return reply

    def workers(self) -> list[dict[str, Any]]:
        return list(self.request("workers")["workers"])

    def shutdown(self) -> None:
        self.request("shutdown")

    def close(self) -> None:
        close_socket(self._socket)
