"""Talking to a coordinator: submit a job, poll its status, ask for shutdown.

Every request waits at most ``timeout`` seconds for its reply; a coordinator that does not answer raises
:class:`CoordinatorUnavailable` instead of hanging the CLI. An address nothing connects to is noted on stderr after
``WAITING_NOTE_SECONDS`` (still waiting, how long, what to check), so that the wait does not look like a hang.

A connection that breaks while a request waits (the coordinator stopped or restarted) takes the reply with it: a
request that only reads is asked again of whatever coordinator listens at the address then, any other fails at once
rather than at the timeout. Once the coordinator has answered, a request made or waiting while its connection is
broken and nothing listens at the address any more fails at once (:class:`CoordinatorGone`): it stopped, and waiting
out the timeout (``hop submit`` waiting for its job, ``hop monitor``) would only delay the error. Before any answer
the client waits, since a coordinator may be starting there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import stat
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq

from hop.gen.cli import unresolved_coordinator
from hop.inputs import absolute_inputs
from hop.jobspec import JobSpec
from hop.lifetime import stop_signals_held
from hop.protocol import close_socket, message, unpack


class CoordinatorUnavailable(RuntimeError):
    """The coordinator did not answer in time."""

    exit_code = 3
    """What a ``hop`` command exits with when this ends it (README: exit codes)."""


class CoordinatorAddressError(CoordinatorUnavailable):
    """The coordinator's address names a host that does not resolve (ZeroMQ would retry it in silence)."""

    exit_code = 2  # a usage error: the address is wrong (a typo, or a name this host's resolver does not know)


class JobLost(CoordinatorUnavailable):
    """The coordinator no longer knows a job that was running on it: it was restarted (jobs do not survive that),
    or it failed the job as it was stopped; then ``status`` is the job's last status, its report included."""

    def __init__(self, message: str, status: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status


class JobRejected(ValueError):
    """The coordinator refused a request; the message says why, ``reason`` (if any) in a word."""

    exit_code = 2  # a usage error: no such job, a job it cannot run

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


WAITING_NOTE_SECONDS = 2.0
"""After this long without a connection to the coordinator, a request says on stderr that it is still waiting."""

ALL_KEPT_WINDOWS = 0
"""A window listing's ``limit`` for every window the coordinator keeps (``hop windows --limit 0``, the web view's
``limit=0``)."""
_ALL_KEPT_LIMIT = 1_000_000
"""What ``ALL_KEPT_WINDOWS`` asks the coordinator for: more than any coordinator keeps
(``hop.stream.tracker.KEEP_WINDOWS``), whatever its version."""

GONE_CHECK_SECONDS = 0.1
"""How often a request waiting on a broken connection to a coordinator that was there looks whether it is gone."""
TCP_PROBE_SECONDS = 0.25
"""How long a probe of a tcp address waits for a connection (refused comes at once; no answer tells nothing)."""

RESEND_SECONDS = 0.1
"""The least time between a request's connections: one asked again on a fresh socket once its connection broke waits
until this long after the previous socket connected (ZeroMQ's own reconnect interval). A peer that accepts every
connection and drops it at once (a port forward or proxy whose backend is down, a server that is no coordinator)
broke each fresh socket at once, and a ``hop windows`` made 29,000 connections in its 10 s at a full core."""

RESENDABLE = frozenset({"status", "workers", "jobs", "job", "snapshots", "windows", "cluster"})
"""Requests that only read: asked again when the connection broke before their reply came."""


def check_resolvable(address: str) -> None:
    """Raise :class:`CoordinatorAddressError` naming the host if ``address`` (``tcp://HOST:PORT``) names a host that
    does not resolve: ZeroMQ connects in the background and retries such an address forever without a word."""
    problem = unresolved_coordinator(address)
    if problem is not None:
        raise CoordinatorAddressError(problem)


def missing_socket_directory(address: str) -> str | None:
    """Why nothing can listen at ``ipc://DIR/NAME`` when its directory ``DIR`` does not exist (an embedded cluster
    that has ended: its directory is removed with it), which ZeroMQ would wait on until a request's timeout; else
    None. Only the directory is checked: a missing socket file in an existing directory is no answer, since a
    coordinator started a moment ago binds it once its interpreter is up (``hop coordinator --bind ipc://... &``
    then ``hop submit``). (An abstract ``ipc://@NAME`` has no file.)"""
    path = address.removeprefix("ipc://")
    if path == address or path.startswith("@") or os.path.exists(path):
        return None
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(directory):
        return None
    if os.path.basename(directory).startswith("hop-cluster-"):  # (hop.local_cluster.CLUSTER_PREFIX)
        # The address ``hop run`` printed for its embedded cluster, given once the run ended (its "hop status ..."
        # line copied after it): where the job's report is now is what the user is after.
        return (
            f"no coordinator at {address}: it was the embedded cluster of a hop run, which ended with its run (its "
            "directory is gone); an ended job's report is its output directory's _job.json"
        )
    return (
        f"no coordinator at {address}: the directory {directory} does not exist, so nothing listens there (the "
        "coordinator has stopped, or never ran there)"
    )


_ASK_FOR_ADDRESS = (
    "Give the address it printed (hop run: 'embedded cluster's coordinator at ...'; hop coordinator: its --bind)"
)
"""What an error about an ``ipc://`` address that nothing listens on asks for."""


def missing_socket_file(address: str) -> str | None:
    """Why nothing listens at ``ipc://PATH`` when the socket file ``PATH`` does not exist (its directory's absence
    first, :func:`missing_socket_directory`); else None, also for an abstract ``ipc://@NAME`` (no file) and tcp. For
    commands about a coordinator that must be running already (``hop status``, ``hop stop``): one starting up may
    not have bound its file yet, which is why a client that may be first (``hop submit``) does not check it."""
    gone = missing_socket_directory(address)
    path = address.removeprefix("ipc://")
    if gone is not None or path == address or path.startswith("@") or os.path.exists(path):
        return gone
    return (
        f"no coordinator at {address}: its socket file {path} does not exist (a coordinator that stopped removes "
        "it); is the coordinator running? " + _ASK_FOR_ADDRESS
    )


def refused_socket(address: str) -> str | None:
    """Why nothing listens at ``ipc://PATH`` whose socket file exists (a coordinator killed before it could remove
    it, or a file that is no socket), or at an abstract ``ipc://@NAME``: a connect to a unix socket no process
    listens on is refused at once, where ZeroMQ would retry it in the background until a request's timeout. None
    when something listens (or its backlog is full), for a file that does not exist (:func:`missing_socket_file`),
    for tcp, and when the probe cannot tell (a path too long for a socket address, no permission). For commands
    about a coordinator that must be running already; the probe's connection, to a live coordinator, is closed at
    once and costs it nothing."""
    path = address.removeprefix("ipc://")
    if path == address or not path or not (path.startswith("@") or os.path.exists(path)):
        return None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)  # (a listener whose backlog is full answers EAGAIN, not a wait)
        try:
            probe.connect("\0" + path[1:] if path.startswith("@") else path)
        except ConnectionRefusedError:
            pass
        except OSError:  # EAGAIN (a listener, busy), ENAMETOOLONG, EACCES...: left to ZeroMQ and the timeout
            return None
        else:
            return None  # something listens
    if path.startswith("@"):
        return f"no coordinator at {address}: nothing listens on the abstract socket {path} (connection refused)"
    with contextlib.suppress(OSError):  # (removed meanwhile: then it is the socket file it was)
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            return f"no coordinator at {address}: {path} is not a socket file. " + _ASK_FOR_ADDRESS
    return (
        f"no coordinator at {address}: nothing listens on its socket file {path} (connection refused: the "
        "coordinator that bound it has ended without removing it, killed or crashed); is the coordinator running? "
        + _ASK_FOR_ADDRESS
    )


def coordinator_not_listening(address: str) -> str | None:
    """Why no coordinator can answer at an ``ipc://`` address, for a command about one that must be running
    already: no directory or socket file (:func:`missing_socket_file`), or a socket nothing listens on
    (:func:`refused_socket`); else None."""
    return missing_socket_file(address) or refused_socket(address)


def tcp_refused(address: str) -> str | None:
    """Why nothing listens at ``tcp://HOST:PORT``, when a connection to it is refused at once (the host is up, no
    process holds the port); else None, also when the probe cannot tell (no answer within a moment: a host down or
    behind a firewall) or something accepts it. The probe's connection, to a live coordinator, is closed at once
    and costs it nothing (it ignores what is not the engine)."""
    match = re.fullmatch(r"tcp://\[?([^\]]+?)\]?:(\d+)", address)
    if match is None:
        return None
    try:
        socket.create_connection((match[1], int(match[2])), timeout=TCP_PROBE_SECONDS).close()
    except ConnectionRefusedError:
        return f"connections to {match[1]}:{match[2]} are refused"
    except OSError:
        return None
    return None


def gone_coordinator(address: str) -> str | None:
    """Why the coordinator at ``address``, whose connection broke, is gone rather than restarting: nothing listens
    there now (an ``ipc://`` socket file or its directory removed, or refusing; a tcp port refusing), said from what
    was found; else None (it may be coming back: a client waits for it)."""
    path = address.removeprefix("ipc://")
    if path == address:
        return tcp_refused(address)
    if not path.startswith("@") and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        return f"its socket's directory {os.path.dirname(os.path.abspath(path))} no longer exists"
    if not path.startswith("@") and not os.path.exists(path):
        return f"its socket file {path} no longer exists (a coordinator that stops removes it)"
    if refused_socket(address) is not None:
        return "nothing listens on its socket any more (connection refused: it was killed, or crashed)"
    return None


class CoordinatorGone(CoordinatorUnavailable):
    """The coordinator answered this client before, its connection broke, and nothing listens at its address now:
    it stopped (killed, crashed, or ended), and the client fails at once rather than wait out its timeout.
    ``address``: the coordinator's; ``why``: what was found there (:func:`gone_coordinator`)."""

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"the coordinator at {address} is gone: its connection broke, and {why}; is it running?")
        self.address = address
        self.why = why

    def lost_jobs(self, jobs: list[str], output: str, *, embedded: bool = False, continuous: bool = False) -> str:
        """What a command waiting on ``jobs`` (the ids it submitted, writing ``output``) says once this ended it:
        that they went with the coordinator (a coordinator's jobs end with it; one started again does not know
        them), what ``output`` holds then (no ``_job.json``: the coordinator writes it), and what to do. The
        ``embedded`` cluster's coordinator was ended from outside the run (``hop run`` stops it only after); a
        ``continuous`` job's windows so far are kept."""
        which = f"{'jobs' if len(jobs) > 1 else 'job'} {', '.join(jobs)}" if jobs else "the job"
        where = (
            f"the embedded cluster's coordinator at {self.address}"
            if embedded
            else f"the coordinator at {self.address}"
        )
        written = os.path.isdir(output) and bool(os.listdir(output))
        if not written:
            holds = f"nothing of it is in {output}"
        elif continuous:
            holds = f"its windows so far stay in {os.path.join(output, 'windows')}, and no _job.json is written"
        else:
            holds = f"{output} holds what it wrote so far and no result (no _job.json is written)"
        again = (
            "run the job again"
            if embedded
            else f"start the coordinator again (hop coordinator --bind {self.address}; its workers register again) and "
            "submit the job again"
        )
        return (
            f"{where} is gone: its connection broke, and {self.why}. {which[0].upper()}{which[1:]} went with it (a "
            f"coordinator's jobs end with it, and one started again does not know them): {holds}. To get the "
            f"result, {again}{' with --overwrite' if written else ''}"
        )


class Client:
    def __init__(
        self,
        address: str,
        timeout: float = 30.0,
        *,
        waiting_note: float | None = WAITING_NOTE_SECONDS,
        running: bool = False,
    ) -> None:
        """``timeout``: how long each request waits for its reply. ``waiting_note``: after this many seconds of a
        request without any connection to ``address`` (nothing listens there, or not yet), say once on stderr that
        the client is still waiting, for how long, and what to check, so that a command does not look hung for its
        whole ``timeout`` before its error (``None``: never). ``running``: the coordinator must be running already
        (a command about it or its jobs): an ``ipc://`` socket file that does not exist, or that nothing listens on,
        fails a request at once (:func:`coordinator_not_listening`) instead of waiting ``timeout`` for a coordinator
        to bind it. Whatever ``running``, once a connection was made (the coordinator was there), a request made or
        waiting while its connection is broken fails at once when nothing listens at the address any more
        (:func:`gone_coordinator`: :class:`CoordinatorGone`); one that never connected waits (a coordinator may be
        starting)."""
        check_resolvable(address)
        self.address = address
        self.running = running
        self.timeout = timeout
        self.waiting_note = waiting_note
        self._noted = False
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.connected = False
        """Whether a coordinator's connection was ever made: a ZeroMQ handshake that succeeded (else nothing listens
        there, it is unreachable, or what took the connection is no ZeroMQ peer: a port forward with nothing
        behind it, another server; a coordinator stopped or hung since before the connection too)."""
        self.reached = False
        """Whether a connection to the address was ever made at all, handshake or not."""
        self.linked = False
        """Whether the socket has a coordinator's connection now (made, and not broken since)."""
        self._socket, self._monitor = self._connect()
        self.submitted: list[str] = []
        """The jobs this client submitted, in order (what an interrupted ``hop submit`` cancels)."""
        self.cancel_unanswered: list[str] = []
        """Those whose cancellation the coordinator did not answer (``hop.runner.cancel_submitted``): they may run
        on, which the interrupted command says."""

    def _connect(self) -> tuple[zmq.Socket, zmq.Socket]:
        """A DEALER connected to the coordinator, and a monitor socket that tells when its connection breaks."""
        socket = self.context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        monitor = socket.get_monitor_socket(
            zmq.EVENT_CONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
        )
        socket.connect(self.address)
        self._connected_at = time.monotonic()
        return socket, monitor

    def request(self, msg_type: str, /, **fields: Any) -> dict[str, Any]:
        kind = msg_type
        frame = message(msg_type, **fields)
        self._connection_broke()  # a break before this request is not one under it
        missing = coordinator_not_listening if self.running else missing_socket_directory
        if not self.connected and (why := missing(self.address)) is not None:
            raise CoordinatorUnavailable(why)
        if (gone := self._gone()) is not None:
            raise CoordinatorGone(self.address, gone)
        deadline = time.monotonic() + self.timeout
        broke = False
        try:
            # Inside: pyzmq runs the signal handlers as send returns, the frame sent, so a Ctrl-C there leaves a reply
            # coming that the next request would take for its own ('stop' answered by this 'status' reply).
            self._socket.send(frame)
            while (outcome := self._await_reply(deadline)) == "broken":
                # The reply went with the connection: ask again on a fresh socket, of whichever coordinator
                # listens at the address now (a restarted one answers at once; ZeroMQ sends once it is up).
                broke = True
                # (A connection broken before its handshake carried no request: ZeroMQ sends once it succeeds.)
                if kind not in RESENDABLE and self.connected:  # (the handler below starts a fresh socket)
                    raise CoordinatorUnavailable(
                        f"the connection to coordinator {self.address} broke before it answered {kind!r} (it "
                        f"stopped or restarted); whether it took the request is unknown: see `hop status "
                        f"--coordinator {self.address}`"
                    )
                time.sleep(max(0.0, min(self._connected_at + RESEND_SECONDS, deadline) - time.monotonic()))
                self._forget_pending()
                self._socket.send(frame)
            if outcome == "gone":
                raise CoordinatorGone(self.address, self._gone() or "nothing listened at its address a moment ago")
            reply = unpack(self._socket.recv()) if outcome == "reply" else None
        except BaseException:
            # Interrupted while waiting (Ctrl-C, SIGTERM: hop run then stops its continuous job with this client).
            self._forget_pending()
            raise
        if reply is None:
            self._forget_pending()
            raise CoordinatorUnavailable(self._unanswered(kind, broke))
        if reply["type"] == "error":
            raise JobRejected(reply["message"], reply.get("reason"))
        return reply

    def _gone(self) -> str | None:
        """For a client whose coordinator was there before (a connection was made) and whose connection is broken
        now: why it is gone (:func:`gone_coordinator`), for the error a request fails with at once
        (:class:`CoordinatorGone`); else None. (Not
        only for ``running`` clients: ``hop submit`` waiting for its job waited its whole timeout, then 30 s per
        status poll, on a coordinator that had been killed.)"""
        if not self.connected or self.linked:
            return None
        return gone_coordinator(self.address)

    def _unanswered(self, kind: str, broke: bool) -> str:
        """Why a request got no reply in time, as far as the connection tells."""
        if not self.reached:
            return (
                f"cannot connect to coordinator {self.address}: no connection within {self.timeout:g}s "
                f"({self._what_to_check()})"
            )
        if not self.connected:
            # A connection was taken, but no ZeroMQ peer answered on it: not a hop coordinator's, or one stopped.
            return (
                f"coordinator {self.address} did not answer {kind!r} within {self.timeout:.0f}s: connections there are "
                "taken but none was answered as a hop coordinator answers (another server listens at that address, "
                "a port forward with nothing behind it, or a coordinator stopped or hung)"
            )
        gone = " (its connection broke meanwhile: it stopped and has not come back)" if broke else ""
        return f"coordinator {self.address} did not answer {kind!r} within {self.timeout:.0f}s{gone}"

    def _what_to_check(self) -> str:
        """What to check when nothing connects at the address: said by the waiting note and the final error."""
        if self.address.startswith("ipc://"):
            return "is hop coordinator running with that --bind? A coordinator that stopped removes its socket file"
        return "is hop coordinator running at that address and port, and reachable from this host?"

    def _note_still_waiting(self, waited: float) -> None:
        """Say once on stderr that this client has had no connection for ``waited`` seconds and how long it waits
        in all: a command waiting on an address where nothing listens said nothing until its error, 10 or 30 s on,
        and looked hung."""
        self._noted = True
        print(
            f"hop: still waiting for the coordinator at {self.address}: no connection after {waited:g}s; waiting up "
            f"to {self.timeout:g}s in all. Check that the cluster is started and the address is right: "
            f"{self._what_to_check()}",
            file=sys.stderr,
            flush=True,
        )

    def _await_reply(self, deadline: float) -> str:
        """Wait until the reply is there ("reply"), the connection breaks ("broken") or ``deadline`` passes; past
        ``waiting_note`` seconds without a connection, say so once (:meth:`_note_still_waiting`). Once a connection
        was made, "gone" when the coordinator is found gone while its connection is broken (:meth:`_gone`: looked
        for every ``GONE_CHECK_SECONDS``; its socket file may go a moment after the connection broke)."""
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        started = deadline - self.timeout
        note_at = None if self.waiting_note is None or self._noted else started + self.waiting_note
        watch_gone = self.connected
        while (left := deadline - time.monotonic()) > 0:
            if note_at is not None:
                left = min(left, max(0.0, note_at - time.monotonic()))  # (wake for the note)
            if watch_gone and not self.linked:
                left = min(left, GONE_CHECK_SECONDS)
            ready = dict(poller.poll(max(1, int(left * 1000))))
            if self._socket in ready:
                return "reply"
            if self._monitor in ready and self._connection_broke():
                return "broken"
            if watch_gone and not self.linked and self._gone() is not None:
                return "gone"
            if note_at is not None and time.monotonic() >= note_at:
                if not self.reached and deadline - time.monotonic() > 0.5:  # (else the error comes now anyway)
                    self._note_still_waiting(self.waiting_note or 0.0)
                note_at = None
        return "timeout"

    def _connection_broke(self) -> bool:
        """Whether the monitor reported a broken connection since it was last asked (reads every event, and notes
        a connection made in ``connected``)."""
        broke = False
        while self._monitor.poll(0):
            event = _monitor_event(self._monitor.recv_multipart())
            broke |= event == zmq.EVENT_DISCONNECTED
            self.reached |= event == zmq.EVENT_CONNECTED
            self.connected |= event == zmq.EVENT_HANDSHAKE_SUCCEEDED
            if event in (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED):
                # (EVENT_CONNECTED is the kernel's: it fires for any listener, a stopped process's too)
                self.linked = event == zmq.EVENT_HANDSHAKE_SUCCEEDED
        return broke

    def _forget_pending(self) -> None:
        """Start a fresh socket: the reply to a request given up on must not be taken for the next one's."""
        self._close_sockets()
        self._socket, self._monitor = self._connect()
        self.linked = False

    def _close_sockets(self) -> None:
        """Close the socket and its monitor. A second call does nothing, as a second ``close`` of a ZeroMQ socket
        does (``disable_monitor`` would fail on the closed socket)."""
        if not self._socket.closed:
            self._socket.disable_monitor()
        close_socket(self._monitor)
        close_socket(self._socket)

    def submit(self, spec: JobSpec) -> str:
        """Submit ``spec``; its job id is in ``submitted`` before any Ctrl-C or SIGTERM that came meanwhile acts.

        Between the request going out and its reply, an interruption left the job running on the cluster with its
        id unknown, so the interrupted run could not cancel it (it printed "interrupted" and the job ran on). Stop
        signals are held for the request (at most this client's timeout: the reply normally takes milliseconds); a
        second one acts at once (a coordinator that stopped answering would hold the first for that whole timeout),
        leaving the job's id unknown if it was submitted.

        A relative output or input path in ``spec`` is taken from this process's current directory, as ``hop run``
        and :func:`hop.runner.build_spec` take it (the coordinator runs in a directory of its own)."""
        # (the current directory, which --overwrite must not clear: the coordinator's own is another one)
        here = None
        with contextlib.suppress(OSError):
            here = os.getcwd()
        if here is not None:
            spec = _paths_from(spec)
        with stop_signals_held(repeat_acts=True):
            job_id = str(self.request("submit", job=spec.to_wire(), working_directory=here)["job_id"])
            self.submitted.append(job_id)
        return job_id

    def status(self, job_id: str) -> dict[str, Any]:
        """A job's progress (and ``report`` once it ended), as ``hop status JOB_ID`` prints it."""
        reply = self.request("status", job_id=job_id)
        reply.pop("type", None)  # (the message's, not the job's)
        return reply

    def follow(
        self, job_id: str, wait: float = 0.0, status_after: int | None = None, status_of: Sequence[str] = ()
    ) -> dict[str, Any]:
        """The status of a job known to be running on this coordinator (it was submitted, or reported running),
        held up to ``wait`` seconds while it runs. ``status_after``: its ``task_status`` holds the task status
        messages numbered after that one (the default: those of the tasks running now), and those of the jobs
        ``status_of`` names too (each message names its ``job_id``). A coordinator that no longer knows the job was
        restarted meanwhile: that raises :class:`JobLost`, which says so and what to do."""
        fields: dict[str, Any] = {} if status_after is None else {"status_after": status_after}
        if status_of and status_after is not None:
            fields["status_of"] = list(status_of)
        try:
            return self.request("status", job_id=job_id, wait=wait, **fields)
        except JobRejected as error:
            if error.reason != "unknown_job":
                raise
            raise JobLost(
                f"coordinator {self.address} no longer knows job {job_id}: it was restarted while the job ran, and "
                "a restarted coordinator gets its workers back but not its jobs (the job's output is not written); "
                "submit the job again"
            ) from None

    def wait(
        self,
        job_id: str,
        on_status: Callable[[dict[str, Any]], None] | None = None,
        poll_seconds: float = 0.1,
        timeout: float | None = None,
        *,
        status_after: int = 0,
        status_of: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Poll until the job finishes; returns the final status (with ``report``). ``on_status`` gets a status
        about every ``poll_seconds``; the coordinator holds each poll until then or until the job ends, so the end
        is seen at once. Each status's ``task_status`` holds the task status messages sent since the one before
        (the first one's, those numbered after ``status_after``), of the job and of the jobs ``status_of`` names
        (a pipeline's later steps, which run while it waits for an earlier one)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = status_after  # (the last task status message numbered in a status so far)
        while True:
            status = self.follow(job_id, wait=poll_seconds, status_after=seen, status_of=status_of)
            seen = max([seen, *(entry["seq"] for entry in status.get("task_status", ()))])
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

    def stop(self, job_id: str, reason: str | None = None, *, now: bool = False) -> dict[str, Any]:
        """Ask a continuous job to stop (its maps drain, its reducers write the last windows and checkpoint), or
        cancel a batch job (it fails as cancelled, its tasks are ended, ``reason`` its error if given); the reply
        says which (``cancelled``). ``now``: a continuous job ends at once as ``interrupted``, without draining, its
        ``_job.json`` written before the reply (``interrupted``: whether it was still running)."""
        fields: dict[str, Any] = {} if reason is None else {"reason": reason}
        return self.request("stop_job", job_id=job_id, **fields, **({"now": True} if now else {}))

    def windows(self, job_id: str, after: int = 0, *, limit: int = 100, all_rows: bool = False) -> list[dict[str, Any]]:
        """A continuous job's windows with ``seq > after`` (as in their ``_window.json``, plus ``rows``), oldest
        first, at most ``limit`` (``after=0``: the newest ``limit``; ask again after the last for more;
        ``ALL_KEPT_WINDOWS``, 0: every window the coordinator keeps). ``rows``
        holds the first rows of each window the coordinator kept; ``all_rows`` reads every row from the windows'
        part files."""
        return list(self.window_listing(job_id, after, limit=limit, all_rows=all_rows)["windows"])

    def window_listing(
        self, job_id: str, after: int = 0, *, limit: int = 100, all_rows: bool = False, rows: bool = True
    ) -> dict[str, Any]:
        """``windows`` with ``omitted``: how many windows with ``seq > after`` the answer left out (past ``limit``,
        or older than the coordinator keeps in memory; every window is in ``OUT/windows/``). Without ``rows``, the
        windows come without their ``rows`` (for a caller that prints a line per window: up to 2,000 rows each
        crossed the socket for nothing)."""
        if limit < 0:
            raise ValueError(f"a window listing's limit is 0 (every window kept) or more, got {limit}")
        asked = _ALL_KEPT_LIMIT if limit == ALL_KEPT_WINDOWS else limit
        fields = {} if rows else {"rows": False}
        return dict(self.request("windows", job_id=job_id, after=after, limit=asked, all_rows=all_rows, **fields))

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
        self._close_sockets()


def _paths_from(spec: JobSpec) -> JobSpec:
    """``spec`` with a relative output and relative inputs made absolute against this process's current directory,
    as :func:`hop.runner.build_spec` makes them (the output resolved, inputs by ``hop.inputs.absolute_inputs``): the
    coordinator took them from its own working directory, reading and writing elsewhere than the user meant.
    Absolute paths are sent as they are."""
    output = spec.output if os.path.isabs(spec.output) else str(Path(spec.output).resolve())
    inputs = tuple(path if os.path.isabs(path) else absolute_inputs([path])[0] for path in spec.inputs)
    if output == spec.output and inputs == spec.inputs:
        return spec
    return dataclasses.replace(spec, output=output, inputs=inputs)


def _monitor_event(frames: list[bytes]) -> int:
    """The event number of a ZeroMQ socket monitor's message: a first frame of a 16-bit event and a 32-bit value
    (native order, no padding), then the endpoint. Read here rather than with ``zmq.utils.monitor``, whose import
    brings in asyncio and ssl: a fifth of the ``hop`` command's imports, on the path to every job's start."""
    return int(struct.unpack("=hi", frames[0])[0])
