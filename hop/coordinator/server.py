"""The coordinator's socket loop and message dispatch: :class:`Coordinator`, made of one mixin per concern.

It binds one ROUTER socket; workers and clients connect DEALER sockets (messages in ``hop.protocol``). Each turn of
the loop (at least every 0.1 s) reads every queued message and hands it to the ``on_<type>`` handler of its type, then
answers held ``status`` requests, checks heartbeats and outputs, stops continuous jobs past their time, fails attempts
past their job's ``--task-timeout`` and schedules.
A handler that raises fails the job the message was about (with the traceback), never the coordinator. Stopped by a
signal, a standalone coordinator fails the jobs it runs (no coordinator started in its place knows them) and tells
their submitters before it closes the socket; its workers stay up and register with the next one.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import sys
import time
import traceback
from collections.abc import Callable, Collection, Iterator
from typing import Any

import zmq

from hop.coordinator.actions import ActionExecution
from hop.coordinator.cluster_samples import ClusterSamples
from hop.coordinator.host import WorkerInfo
from hop.coordinator.jobs import KEEP_JOBS, JobRequests, StatusWaiter
from hop.coordinator.pipelines import PipelineLinks
from hop.coordinator.scheduling import SlotAssignment
from hop.coordinator.snapshots import SnapshotRequests
from hop.coordinator.streams import ContinuousJobs
from hop.coordinator.task_reports import TaskReports
from hop.coordinator.timeouts import TaskTimeouts
from hop.coordinator.workers import HEARTBEAT_TIMEOUT, WorkerTracking
from hop.lifetime import embedded, orphaned
from hop.protocol import SocketFile, message, unpack
from hop.scheduler import JobState
from hop.wording import counted
from monitoring.events import ClusterEvents

STOP_TELL_SECONDS = 1.0
"""How long a stopping coordinator keeps answering ``status`` and ``windows`` requests, until the submitter of each
job that ended as it stopped was told how (:meth:`Coordinator._tell_submitters`)."""
FOLLOW_UP_SECONDS = 0.25
"""How long it then waits for more: ``hop submit`` of a continuous job asks for the last windows after the status."""
JUST_ENDED_SECONDS = 5.0
"""A job that ended this recently before ``hop shutdown`` may not have been seen to end by its submitter (which polls
every 0.2 s): ``hop shutdown --force`` stops the jobs, waits for them to end and shuts the cluster down at once."""
STOP_LINGER_MILLISECONDS = 500
"""How long closing the socket then waits for those answers to leave (they were dropped with the socket)."""


class Coordinator(
    WorkerTracking,
    JobRequests,
    TaskReports,
    ActionExecution,
    PipelineLinks,
    SnapshotRequests,
    ContinuousJobs,
    SlotAssignment,
    ClusterSamples,
    TaskTimeouts,
):
    """The coordinator's event loop and the state it does not delegate to ``JobState``. Its message handlers and
    the loop's checks come from one mixin per concern (``hop.coordinator.host`` says how they fit together)."""

    def __init__(
        self,
        bind: str = "tcp://127.0.0.1:*",
        heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
        keep_jobs: int = KEEP_JOBS,
        ended_workers: Callable[[], Collection[int]] = tuple,
    ) -> None:
        self.keep_jobs = keep_jobs
        self.retired: collections.OrderedDict[str, str] = collections.OrderedDict()
        """Jobs forgotten to keep memory flat (``_retire``), newest last: job id -> output directory."""
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self.socket.bind(bind)
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.socket_file = SocketFile.bound_at(self.address)
        """An ``ipc://PATH`` address's file, removed when the coordinator stops (a client then says at once that no
        coordinator runs there)."""
        self.heartbeat_timeout = heartbeat_timeout
        self.ended_workers = ended_workers
        """The pids of workers this process forked that have ended (``hop.coordinator.workers``)."""
        self.workers: dict[str, WorkerInfo] = {}
        self.jobs: dict[str, JobState] = {}
        self._job_numbers = itertools.count(1)
        self.started_at = time.time()
        self.succeeded_a_coordinator = False
        """Whether a worker of a coordinator that ran at this address before heartbeated here (``on_heartbeat``):
        this one was started in its place, and ids of that one's jobs may be asked about."""
        self.downstream: dict[str, str] = {}
        """Pipelines: upstream job -> the job whose maps read its reduce output (``hop.pipe``)."""
        self.pipe_readers: dict[tuple[str, int], tuple[int, str]] = {}
        """(downstream job, map index) -> (attempt, address) of the map attempt waiting for that partition."""
        self.pipe_released: set[tuple[str, int, int]] = set()
        """(upstream job, reduce index, attempt) told to commit rather than wait for its downstream map."""
        self.deferred_done: dict[tuple[str, int], list[dict[str, Any]]] = {}
        """(upstream job, partition) -> ``map_done`` of downstream maps that read an attempt not committed yet."""
        self._last_preemption: dict[tuple[str, str], float] = {}
        """(upstream job, kind) -> when a downstream attempt of that kind last gave its slot back to it."""
        self.chunk_strata: dict[str, list[str] | None] = {}
        """Online jobs: the stratum of every input chunk, by chunk id (sent to reduce tasks)."""
        self.status_waiters: list[StatusWaiter] = []
        """``status`` requests held until their job ends or their wait runs out."""
        self._status_numbers = itertools.count(1)
        """Numbers for the task status messages of every job (``JobState.on_task_status``): one ``status_after``
        counts a pipeline's steps' messages."""
        self.submitters: dict[str, bytes] = {}
        """Job id -> the client that submitted it, until a ``status`` reply told that client how the job ended."""
        self.running = True
        self._last_turn = time.monotonic()
        """When the loop last checked heartbeats (:data:`PAUSE_SECONDS`)."""
        self._timeouts_turn = self._timeouts_checked = self._last_turn
        """When the loop last looked for a pause of its own, and last looked for attempts past their job's
        ``--task-timeout`` (``hop.coordinator.timeouts``)."""
        self._stalls_count_from = time.time()
        """Stalls of attempts count from here at the earliest: the coordinator's start, or the end of its latest
        pause (``hop.coordinator.timeouts``)."""
        self._heard_since: dict[str, float] = {}
        """Worker name -> when it was last found silent (``hop.coordinator.timeouts``): its attempts' stalls count
        from then at the earliest."""
        self._last_lost: str | None = None
        """The worker lost last, while jobs wait for a lost worker still running here to rejoin (``workers``)."""
        self.stop_linger = 0
        """Milliseconds closing the socket waits for messages still queued: none, except for answers to clients
        about jobs failed as the coordinator stopped (:data:`STOP_LINGER_MILLISECONDS`)."""
        self.stop_workers = False
        """Whether stopping tells the workers to stop: on a shutdown request or when orphaned, not on a signal."""
        self.shutdown_requested = False
        """Whether a ``shutdown`` request (``hop shutdown``) stops the coordinator."""
        host = bind.split("://", 1)[1].rsplit(":", 1)[0] if bind.startswith("tcp://") else "127.0.0.1"
        self.events = ClusterEvents(self.context, "0.0.0.0" if host in ("0.0.0.0", "*") else host)
        """The coordinator's own sample stream for the cluster monitor: jobs, workers and faults every second."""

    def serve(self) -> None:
        try:
            while self.running:
                if self.socket.poll(self._poll_milliseconds()):
                    while True:
                        try:
                            frames = self.socket.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._take(frames)
                self._answer_status_waiters()
                self._check_heartbeats()
                self._stop_streams_past_duration()
                self._fail_jobs_whose_output_went()
                self._end_sources_without_slot()
                self._time_out_stalled_attempts()
                self._schedule()
                self.events.tick(self._cluster_sample)
                if orphaned():
                    self.running = False
                    self.stop_workers = True
        finally:
            if not (self.stop_workers or embedded()):
                self._fail_running_jobs()
            alive = [worker for worker in self.workers.values() if worker.alive]
            if self.stop_workers or embedded():
                for worker in alive:
                    self.socket.send_multipart([worker.identity, message("shutdown")])
            elif alive:
                # Stopped by a signal (Ctrl-C, systemd): a restart, most likely. The workers stay up and register
                # again with a coordinator started at this address; `hop shutdown` stops the whole cluster.
                print(
                    f"hop coordinator: stopped; {len(alive)} workers stay up and register again with a coordinator "
                    f"started at {self.address} (hop shutdown --coordinator ADDRESS stops a cluster with its workers)",
                    file=sys.stderr,
                    flush=True,
                )
            if self.shutdown_requested and not embedded():  # (an embedded cluster's client has gone)
                self._tell_submitters_of_jobs_just_ended()
            self.events.close()
            self.socket.close(linger=self.stop_linger)
            if self.socket_file is not None:
                self.socket_file.remove()

    def _fail_running_jobs(self) -> None:
        """A standalone coordinator stopped by a signal (Ctrl-C, SIGTERM) fails the jobs it runs, which no
        coordinator started in its place will know: their ``_job.json`` says why and what to do, their tasks are
        ended on the workers that stay up, and the clients waiting on them (``hop submit``) are answered at once.
        They waited 30 s for a coordinator that had gone, then failed with nothing written in the output."""
        running = [job for job in self.jobs.values() if job.state == "running"]
        if not running:
            return
        reason = (
            f"the coordinator at {self.address} was stopped (Ctrl-C or SIGTERM) while the job ran; submit it again "
            "once a coordinator runs"
        )
        for job in running:
            job.coordinator_stopped = True
        for job in running:
            try:
                self._execute(job, job.fail(reason))
            except Exception as error:  # (the coordinator is going: what it could not end, it names)
                print(f"hop coordinator: job {job.spec.job_id}: cannot end it: {error}", file=sys.stderr, flush=True)
        self._answer_status_waiters()
        self._tell_submitters({job.spec.job_id for job in running})
        self.stop_linger = STOP_LINGER_MILLISECONDS  # (for the answers to the requests that were held, too)
        print(
            f"hop coordinator: stopped while running {counted(len(running), 'job')}, failed: "
            f"{', '.join(job.spec.job_id for job in running)}",
            file=sys.stderr,
            flush=True,
        )

    def _take(self, frames: list[bytes]) -> None:
        """Handle one message as the socket gave it (:meth:`_parsed`)."""
        parsed = self._parsed(frames)
        if parsed is not None:
            self.handle(*parsed)

    def _parsed(self, frames: list[bytes]) -> tuple[bytes, dict[str, Any]] | None:
        """The sender's identity and the engine message of ``frames`` as the socket gave them; ``None`` for one that
        is not an engine message (anything can connect to the port), answered with an error, or dropped if it has
        no frame to answer. It raised out of the loop and took the coordinator down with every job it ran."""
        if len(frames) != 2:
            if len(frames) > 1:
                self._send(frames[0], "error", message=f"malformed engine message: {len(frames) - 1} frames, not 1")
            return None
        identity, frame = frames
        try:
            return identity, unpack(frame)
        except ValueError as error:  # (msgpack's errors are ValueErrors)
            self._send(identity, "error", message=f"malformed engine message: {error}")
            return None

    def _tell_submitters_of_jobs_just_ended(self) -> None:
        """On ``hop shutdown``: tell the submitters of the jobs that ended just before (:data:`JUST_ENDED_SECONDS`)
        and were not told yet. ``hop shutdown --force`` ends the jobs and then the cluster: their ``hop submit``
        asked after the coordinator had gone, waited 30 s and failed ("did not answer"), the job succeeded or not."""
        since = time.time() - JUST_ENDED_SECONDS
        ended = {job_id for job_id, job in self.jobs.items() if (job.finished_at or 0.0) > since}
        self._tell_submitters(ended)

    def _tell_submitters(self, ended: set[str]) -> None:
        """Answer only ``status`` and ``windows`` requests, for up to :data:`STOP_TELL_SECONDS`, until the submitter
        of each job in ``ended`` (ended as this coordinator stops) was told how it ended, and then for as long as
        they keep coming (:data:`FOLLOW_UP_SECONDS`); the socket then lingers for the answers to leave.

        ``hop submit`` polls with requests held 0.1 s each (a continuous job's every 0.2 s, then asks for the new
        windows). One whose request was not held when the job ended sent its next one after this coordinator had
        gone: with none there it got no answer; with one restarted in its place, it was told that the job was lost
        in a restart, not why. Other messages are left unread, as they would be once the socket is closed."""
        if not ended:
            return
        untold = ended & self.submitters.keys()
        self.stop_linger = STOP_LINGER_MILLISECONDS
        now = time.monotonic()
        # Submitters all told already (a held status request was answered as the jobs failed): their follow-up
        # requests still come (a continuous job's run asks for its last windows after the status, and that request,
        # reaching a coordinator started in this one's place, said the job was lost in a restart).
        deadline, quiet_from = now + STOP_TELL_SECONDS, now + FOLLOW_UP_SECONDS if not untold else math.inf
        while (left := min(deadline, quiet_from) - now) > 0:
            if self.socket.poll(max(1, math.ceil(left * 1000))):
                parsed = self._parsed(self.socket.recv_multipart())
                if parsed is not None and parsed[1].get("type") in ("status", "windows"):
                    identity, msg = parsed
                    if msg.get("job_id") in self.jobs:
                        self.handle(identity, msg)
                        if not untold & self.submitters.keys():
                            quiet_from = time.monotonic() + FOLLOW_UP_SECONDS
            now = time.monotonic()

    def _send(self, identity: bytes, msg_type: str, /, **fields: Any) -> None:
        self.socket.send_multipart([identity, message(msg_type, **fields)])

    def _broadcast(self, msg_type: str, /, **fields: Any) -> None:
        for worker in self.workers.values():
            if worker.alive:
                self._send(worker.identity, msg_type, **fields)

    def handle(self, identity: bytes, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        sender = self.workers.get(msg.get("worker", ""))
        if sender is not None and not sender.alive and kind not in ("register", "leaving"):
            # Declared lost (missed heartbeats: stopped, starved or cut off) and heard from again. Its attempts were
            # rescheduled, so it must drop everything it runs and register afresh (Hadoop reinitialises a lost
            # tracker the same way); shutting it down would shrink the cluster for good over a pause. One that
            # leaves is answered (on_leaving): it is going anyway, and says so.
            self._send(identity, "reinit", incarnation=sender.incarnation, why="lost")
            return
        handler = getattr(self, f"on_{kind}", None)
        if handler is None:
            self._send(identity, "error", message=f"unknown message type {kind!r}")
            return
        try:
            handler(identity, msg)
        except Exception as error:
            # One bad message must not take the coordinator down with every other job: report and fail the job.
            job = self._job_for(msg)
            self._internal_error(job, f"handling {kind}", error)
            if job is None and kind in (
                "submit",
                "status",
                "workers",
                "jobs",
                "job",
                "snapshots",
                "snapshot",
                "stop_job",
                "windows",
                "cluster",
            ):
                self._send(identity, "error", message=f"internal error: {type(error).__name__}: {error}")

    def on_shutdown(self, identity: bytes, msg: dict[str, Any]) -> None:
        """Shut the cluster down: the workers are told to stop too (a signal stops the coordinator alone)."""
        self._send(identity, "bye")
        self.running = False
        self.stop_workers = True
        self.shutdown_requested = True
        if not embedded():  # a standalone coordinator says why it ends, as its workers do
            alive = sum(worker.alive for worker in self.workers.values())
            print(
                f"hop coordinator: shut down by hop shutdown; its {counted(alive, 'worker')} "
                f"{'stops' if alive == 1 else 'stop'} too",
                file=sys.stderr,
                flush=True,
            )

    def _job_for(self, msg: dict[str, Any]) -> JobState | None:
        return self.jobs.get(msg.get("job_id", ""))

    @contextlib.contextmanager
    def _failing_job_on_error(self, job: JobState, doing: str) -> Iterator[None]:
        """Run a step of the loop's own work for ``job``: an unexpected error fails that job, with the traceback,
        instead of ending the coordinator and every other job on it."""
        try:
            yield
        except Exception as error:
            self._internal_error(job, doing, error)

    def _internal_error(self, job: JobState | None, doing: str, error: Exception) -> None:
        """Report an unexpected error (with its traceback) of the coordinator ``doing`` something, and fail ``job``,
        the job it was about, if any. Call it from the ``except`` clause."""
        detail = traceback.format_exc()
        about = f" (job {job.spec.job_id})" if job is not None else ""
        print(f"hop coordinator: error {doing}{about}:\n{detail}", file=sys.stderr, flush=True)
        if job is not None:
            self._execute(job, job.fail(f"internal error {doing}: {error}", detail))
