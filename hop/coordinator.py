"""The coordinator process (the JobTracker): accepts jobs, assigns tasks to worker slots, relays commits.

It binds one ROUTER socket; workers and clients connect DEALER sockets (messages in ``hop.protocol``). Per job the
bookkeeping lives in :class:`hop.scheduler.JobState`; this module only moves messages, carries out the state
machine's actions (broadcasts, output renames, the job report) and watches heartbeats.

Run as ``hop coordinator [--bind tcp://HOST:PORT]``; it prints its address on the first line of stdout.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import glob
import itertools
import json
import math
import re
import sys
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq

from hop.inputs import InputError, expand_inputs
from hop.jobspec import JobSpec
from hop.lifetime import embedded, ignore_stop_signals, orphaned
from hop.online.snapshots import (
    publish_snapshot,
    snapshot_directory,
    staging_directory,
    write_final_partition_snapshot,
)
from hop.online.tracker import Snapshot, SnapshotTracker
from hop.outputs import (
    JOB_REPORT,
    OutputExistsError,
    OutputGuard,
    OutputRemovedError,
    check_output,
    coordinator_kept,
    job_report_text,
    output_changed,
    output_removed,
    prepare_output,
    remove_from_output,
)
from hop.planning import plan_map_inputs
from hop.protocol import SocketFile, message, unpack
from hop.scheduler import (
    Action,
    Broadcast,
    CommitOutput,
    DiscardOutput,
    FinishJob,
    JobState,
    KillAttempt,
    tail_splits_to_ask,
)
from hop.spilldirs import kept_step_output, scratch_step
from hop.stream.options import StreamOptions
from hop.stream.tracker import WindowTracker
from hop.wording import counted
from monitoring.events import ClusterEvents, advertised_host

HEARTBEAT_TIMEOUT = 5.0
"""Seconds without a heartbeat (workers send one every 0.5 s) before a worker is declared lost."""
HEARTBEAT_SECONDS = 0.5
"""How often workers heartbeat (hop.worker); three missed in a row are reported as a fault."""
PAUSE_SECONDS = 1.0
"""A gap this long between two turns of the coordinator's loop (which turns at least every 0.1 s) means the
coordinator itself did not run: stopped (SIGSTOP), suspended with its machine, or starved. Workers could not be
heard meanwhile, and their heartbeats are still arriving, so that silence is not counted against them."""
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
PREEMPT_SECONDS = 2.0
"""How long after a pipeline step's later job gave a slot of one kind back to an upstream task (``_preempt_downstream``)
it may be asked for another of that kind: the first is reported free meanwhile."""
SOURCE_SLOT_GRACE_SECONDS = 2.0
"""How long a stopping continuous job's source still waiting for a slot may wait for one before it ends unstarted
(a stop's own drain frees slots within that: a source whose worker just left gets one and drains)."""

BLOCKING_SNAPSHOT_MAPS = 20
"""The most map tasks an online job run with ``--blocking`` is given for its snapshots' sake (``blocking_maps``)."""


def blocking_maps(every: float | None) -> int:
    """The map tasks an online job run with ``--blocking`` has at least (where it has as many input chunks): one
    per snapshot interval ``every``, at most ``BLOCKING_SNAPSHOT_MAPS``. Its reducers get a map's output only once
    the map commits, and its maps were one wave (a task per slot) that committed together at the end: every
    snapshot held nothing, and ``--stop-when-accurate`` (which a pipeline needs ``--blocking`` for) never stopped a
    job early. A word count of 40 MB on 2 workers, snapshots every 0.1 (three runs each, on a busy machine): 2 maps,
    snapshots of 0% of the input but the last (0%, 11%, 50%), 3.4-4.0 s; now 10 maps, snapshots of 0-8% at 0.100 to
    79-89% at 0.900, 4.1-5.0 s."""
    return 1 if not every else min(BLOCKING_SNAPSHOT_MAPS, math.ceil(1 / every - 1e-9))


KEEP_JOBS = 100
"""Finished jobs a coordinator keeps in memory (``hop coordinator --keep-jobs``); older ones are retired."""
RETIRED_IDS = 10_000
"""Retired jobs remembered by id and output directory, so a question about one says where its report is."""
JOB_ID_TIME = "%Y%m%d-%H%M%S"
"""The submission time in a job id (local time): ``job-20261126-071259-0001``."""


JOB_ID_SHAPE = re.compile(r"job-\d{8}-\d{6}-\d{4,}")
"""What every job id a coordinator issues looks like (``JOB_ID_TIME`` and a number of at least four digits)."""


def submitted_before(job_id: str, instant: float) -> bool:
    """Whether ``job_id`` has the shape of a job id (``JOB_ID_SHAPE``) and names a submission (to some
    coordinator) before ``instant`` or in its second (ids hold whole seconds: a coordinator asked about an id it did
    not issue, of the second it started in, did not issue it then either)."""
    if JOB_ID_SHAPE.fullmatch(job_id) is None:
        return False
    parts = job_id.split("-")
    try:
        submitted = time.mktime(time.strptime(f"{parts[1]}-{parts[2]}", JOB_ID_TIME))
    except (ValueError, OverflowError):
        return False
    return submitted <= math.floor(instant)


@dataclass
class WorkerInfo:
    identity: bytes
    name: str
    host: str
    pid: int
    map_slots: int
    reduce_slots: int
    free_map: int
    free_reduce: int
    last_seen: float
    alive: bool = True
    rack: str = "rack-0"
    samples: str | None = None
    """The worker's metric sample stream (``monitoring.publisher``), for the cluster monitor."""
    heartbeat_late: bool = False
    stream_slots: int = 0
    """Slots kept for continuous jobs' tasks (see ``_pool``); ``free_stream`` of them are free."""
    free_stream: int = 0
    incarnation: int = 0
    """How many times this worker has registered: a ``reinit`` names the registration it ends."""
    host_label: str = ""
    """The host name its metric samples carry (``hop worker --host-label``); ``host`` is its network address."""

    def where(self) -> dict[str, str]:
        """How a fault names this worker's host: ``host`` as its samples and Prometheus labels do (so faults join
        them), ``address`` as peers reach it."""
        return {"host": self.host_label or self.host, "address": self.host}

    def free(self, pool: str) -> int:
        """Free slots in ``pool`` ("map", "reduce" or "stream": the ``free_<pool>`` field)."""
        return int(getattr(self, f"free_{pool}"))

    def take(self, pool: str) -> None:
        setattr(self, f"free_{pool}", self.free(pool) - 1)

    def give_back(self, pool: str) -> None:
        setattr(self, f"free_{pool}", min(getattr(self, f"{pool}_slots"), self.free(pool) + 1))


class Coordinator:
    """The coordinator's event loop and the state it does not delegate to ``JobState``."""

    def __init__(
        self, bind: str = "tcp://127.0.0.1:*", heartbeat_timeout: float = HEARTBEAT_TIMEOUT, keep_jobs: int = KEEP_JOBS
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
        self.status_waiters: list[tuple[bytes, str, float]] = []
        """``status`` requests held until their job ends or their wait runs out: (client, job id, deadline)."""
        self.submitters: dict[str, bytes] = {}
        """Job id -> the client that submitted it, until a ``status`` reply told that client how the job ended."""
        self.running = True
        self._last_turn = time.monotonic()
        """When the loop last checked heartbeats (:data:`PAUSE_SECONDS`)."""
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

    # Loop ----------------------------------------------------------------------------------------------------
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

    # Messages ------------------------------------------------------------------------------------------------
    def handle(self, identity: bytes, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        sender = self.workers.get(msg.get("worker", ""))
        if sender is not None and not sender.alive and kind not in ("register", "leaving"):
            # Declared lost (missed heartbeats: stopped, starved or cut off) and heard from again. Its attempts were
            # rescheduled, so it must drop everything it runs and register afresh (Hadoop reinitialises a lost
            # tracker the same way); shutting it down would shrink the cluster for good over a pause. One that
            # leaves is answered (on_leaving): it is going anyway, and says so.
            self._send(identity, "reinit", incarnation=sender.incarnation)
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

    def on_register(self, identity: bytes, msg: dict[str, Any]) -> None:
        name = msg["worker"]
        earlier = self.workers.get(name)
        info = self.workers[name] = WorkerInfo(
            identity,
            name,
            msg["host"],
            msg["pid"],
            msg["map_slots"],
            msg["reduce_slots"],
            msg["map_slots"],
            msg["reduce_slots"],
            time.time(),
            rack=msg.get("rack") or "rack-0",
            samples=msg.get("samples"),
            stream_slots=int(msg.get("stream_slots", 0)),
            free_stream=int(msg.get("stream_slots", 0)),
            incarnation=int(msg.get("incarnation", 0)),
            host_label=str(msg.get("host_label") or msg["host"]),
        )
        if earlier is not None and not earlier.alive:
            self.events.fault("worker_rejoined", worker=name, **info.where())
        if earlier is not None and earlier.alive and (earlier.pid, earlier.incarnation) != (info.pid, info.incarnation):
            # A new process under a live worker's name (restarted within the heartbeat timeout): the attempts the
            # old one ran will never report, so they are lost now rather than never.
            self.events.fault("worker_replaced", worker=name, **info.where(), old_pid=earlier.pid)
            self._worker_lost(earlier, time.time())
        # A worker restarted under its name takes over its predecessor's sample stream endpoint (``samples_at``),
        # which a monitor started before the restart subscribes to.
        same_host = earlier is not None and earlier.host == info.host and info.samples is not None
        predecessor = earlier.samples if earlier is not None and same_host else None
        self._send(identity, "registered", **({"samples": predecessor} if predecessor else {}))
        for job in self.jobs.values():  # a late worker must know where running reducers are
            if job.state == "running":
                for index, (attempt, address) in job.reducer_addresses.items():
                    self._send(
                        identity, "reducer_at", job_id=job.spec.job_id, index=index, attempt=attempt, address=address
                    )

    def on_leaving(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A standalone worker stopped on its own (Ctrl-C, SIGTERM): it is lost now, its attempts running again
        elsewhere at once rather than after the heartbeat timeout. A ``left`` answer lets it say so."""
        worker = self.workers.get(msg["worker"])
        if worker is not None and worker.alive and worker.incarnation == msg.get("incarnation"):
            silent = time.time() - worker.last_seen
            self.events.fault("worker_lost", worker=worker.name, **worker.where(), silent_s=round(silent, 2), left=True)
            if not embedded():
                print(
                    f"hop coordinator: worker {worker.name} stopped; its running tasks run again on other workers",
                    file=sys.stderr,
                    flush=True,
                )
            self._worker_lost(worker, time.time(), left=True)
        self._send(identity, "left")

    def on_samples_at(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A restarted worker now publishes its samples where its predecessor did (see ``on_register``)."""
        worker = self.workers.get(msg["worker"])
        if worker is not None:
            worker.samples = msg["samples"]

    def on_slot_free(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A worker ended an attempt on our request (``kill_task``): its slot is free again."""
        self._free_slot(msg, msg["kind"])
        self._remove_leftovers_of_ended(self._job_for(msg))

    def _remove_leftovers_of_ended(self, job: JobState | None) -> None:
        """An attempt has ended (killed on our request, or done or failed on its own): if its job had ended before
        it (stopped when accurate, failed, cancelled), it may have written under ``OUT/_temporary`` (its output, a
        snapshot's files) after the job's end removed that. It writes no more, so its leftovers go, unless a job
        running now (submitted again with --overwrite) writes its own there. A coordinator that keeps running (a
        standalone cluster) would otherwise leave them for good."""
        if job is None or job.state == "running":
            return
        sharing = any(o.state == "running" and o.spec.output == job.spec.output for o in self.jobs.values())
        if not sharing:  # (only from the directory the job was accepted with: another under its name is not its)
            self._remove_temporary(job)

    @staticmethod
    def _remove_temporary(job: JobState) -> None:
        """Remove the job's ``OUT/_temporary`` from the directory it was accepted with: through the hold on it
        (``JobState.output_held``) while there is one, wherever the directory went (moved away, its part files are
        the user's, but the half-written scratch in it is the job's, and no one else's to clear); once the hold has
        ended, only from a directory of its name that is still that one."""
        if job.output_held is not None:
            job.output_held.remove_tree("_temporary")
        else:
            remove_from_output(job.spec.output, job.output_identity, "_temporary")

    def on_heartbeat(self, identity: bytes, msg: dict[str, Any]) -> None:
        worker = self.workers.get(msg["worker"])
        if worker is not None:
            worker.last_seen = time.time()
        else:
            # A worker registered with an earlier coordinator at this address: it must drop what it ran for that
            # one and register here, or it would heartbeat into the void with its slots never used.
            self.succeeded_a_coordinator = True
            self._send(identity, "reinit", incarnation=msg.get("incarnation"))

    def on_workers(self, identity: bytes, msg: dict[str, Any]) -> None:
        self._send(
            identity,
            "workers",
            workers=[
                {
                    "name": w.name,
                    "host": w.host,
                    "host_label": w.host_label,
                    "pid": w.pid,
                    "alive": w.alive,
                    "map_slots": w.map_slots,
                    "reduce_slots": w.reduce_slots,
                    "free_map": w.free_map,
                    "free_reduce": w.free_reduce,
                    "stream_slots": w.stream_slots,
                    "free_stream": w.free_stream,
                    "rack": w.rack,
                    "samples": w.samples,
                    "last_seen": w.last_seen,
                }
                for w in self.workers.values()
            ],
        )

    def on_submit(self, identity: bytes, msg: dict[str, Any]) -> None:
        try:
            spec = JobSpec.from_wire(msg["job"])
            job_id = f"job-{time.strftime(JOB_ID_TIME)}-{next(self._job_numbers):04d}"
            spec = spec.with_id(job_id)
            options = spec.options
            online = bool(options.get("online"))
            upstream = self._upstream_of(spec)
            self._refuse_input_being_written(spec, upstream)
            stream = StreamOptions.from_spec(spec) if options.get("stream") else None
            splits = (
                [[] for _ in range(upstream.spec.num_reduces)]
                if upstream is not None
                else [[] for _ in stream.sources]  # a continuous job: one stream map per source
                if stream is not None
                else plan_map_inputs(
                    expand_inputs(list(spec.inputs), spec.output),
                    spec.split_size,
                    chunked=online,
                    chunk_size=int(options.get("chunk_size", 1 << 20)),
                    order=str(options.get("order", "sequential")),
                    seed=int(options.get("seed", 0)),
                    strata=options.get("strata"),
                    slots=sum(w.map_slots for w in self.workers.values() if w.alive),
                    pack=not options.get("map_per_file"),
                    whole_files=spec.reads_whole_files,
                    min_tasks=blocking_maps(options.get("snapshot_every")) if online and spec.mode == "blocking" else 1,
                )
            )
            # A pipeline's later jobs take their snapshots from the job before them, not from their own progress.
            every = options.get("snapshot_every") if upstream is None else None
            accurate = options.get("stop_when_accurate") if upstream is None else None
            tracker_args = (float(every) if every else None, float(accurate) if accurate else None)
            SnapshotTracker(spec.num_reduces, [], *tracker_args)  # validates the options before any output
            # A run's first job also claims the run's output (``run_output``: a multi-step run's first step writes a
            # scratch folder). Both are checked before either is cleared: --overwrite deleted the old output on the
            # client before a job this coordinator then refused (hop.runner).
            outputs = [spec.output, *([str(options["run_output"])] if options.get("run_output") else [])]
            kept = coordinator_kept(msg.get("working_directory"))
            for output in outputs:
                self._refuse_shared_output(output)
                check_output(output, spec.overwrite, spec.inputs, kept=kept)
            for output in outputs:
                prepare_output(output, spec.overwrite, spec.inputs, kept=kept)
            held = OutputGuard(spec.output)  # (gone again at once: refused, as removed)
        except (InputError, OutputExistsError, ValueError, TypeError, OSError) as error:
            self._send(identity, "error", message=str(error))
            return
        job = self.jobs[job_id] = JobState(spec, splits, max_attempts=int(options.get("max_attempts", 4)))
        job.output_held, job.output_identity = held, held.identity
        chunks = sorted((chunk for task in splits for chunk in task), key=lambda chunk: chunk.id)
        strata = [chunk.stratum for chunk in chunks] if online else None
        job.snapshots = SnapshotTracker(
            spec.num_reduces,
            [chunk.size for chunk in chunks],
            *tracker_args,
            started_at=job.submitted_at,
            stratum_chunks=dict(collections.Counter(strata)) if strata is not None else None,
            confidence=float(options.get("confidence", 0.95)) if online else None,
            order=str(options.get("order", "sequential")) if online else None,
        )
        self.chunk_strata[job_id] = strata
        if upstream is not None:
            self.downstream[upstream.spec.job_id] = job_id
            job.upstream = upstream
        if stream is not None:
            job.windows = WindowTracker(spec.num_reduces, len(stream.sources), stream.window.describe())
        self._send(identity, "submitted", job_id=job_id, maps=len(splits))
        self.submitters[job_id] = identity
        if not splits and not self.jobs[job_id].reduces:
            self._execute(self.jobs[job_id], [FinishJob("succeeded")])

    def on_status(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A job's progress (and report, once it ended). With ``wait`` (seconds, at most 5) the reply to a running
        job is held until it ends or the wait runs out, so that a client learns of the end at once, not at its
        next poll."""
        job = self.jobs.get(msg["job_id"])
        if job is None:
            self._unknown_job(identity, msg["job_id"])
            return
        wait = min(float(msg.get("wait") or 0.0), 5.0)
        if wait > 0 and job.state == "running":
            self.status_waiters.append((identity, msg["job_id"], time.monotonic() + wait))
            return
        self._send_status(identity, job)

    def _answer_status_waiters(self) -> None:
        if not self.status_waiters:
            return
        now = time.monotonic()
        held = []
        for identity, job_id, deadline in self.status_waiters:
            job = self.jobs[job_id]
            if job.state == "running" and now < deadline:
                held.append((identity, job_id, deadline))
            else:
                self._send_status(identity, job)
        self.status_waiters = held

    def _poll_milliseconds(self) -> int:
        """How long the loop may wait for a message: 100 ms, less when a held status reply falls due sooner."""
        if not self.status_waiters:
            return 100
        due = min(deadline for _, _, deadline in self.status_waiters) - time.monotonic()
        return max(0, min(100, math.ceil(due * 1000)))

    def _send_status(self, identity: bytes, job: JobState) -> None:
        status = job.progress()
        status["workers_alive"] = sum(w.alive for w in self.workers.values())
        waiting = self._slots_held_from(job)
        if waiting is not None:
            status["waiting"] = waiting
        if job.state != "running":
            status["report"] = job.report()
            status.update(_step_output(job))
            if self._output_removed(job):  # (what is under its name now is not the job's: hop.runner leaves it be)
                status["output_removed"] = True
            if self.submitters.get(job.spec.job_id) == identity:
                del self.submitters[job.spec.job_id]  # (told: a stopping coordinator need not wait to tell it)
        self._send(identity, "status", **status)

    def _slots_held_from(self, job: JobState) -> dict[str, Any] | None:
        """Why a batch job's pending tasks of a kind wait for ever, when continuous jobs hold every slot of that kind:
        their tasks run until stopped and take map and reduce slots once no stream slot is free (when the job
        starts, or when a lost worker's tasks start again elsewhere). ``{"kind", "tasks": waiting, "slots": of that
        kind on the live workers, "held_by": [continuous job ids]}`` (``hop.runner.waiting_note`` words it), or None:
        a task waiting for a slot that a batch task holds gets it when that task ends."""
        if job.windows is not None:
            return None
        alive = [w for w in self.workers.values() if w.alive]
        names = {w.name for w in alive}
        for kind in ("map", "reduce"):
            waiting = len(job.pending(kind))
            if not waiting or not alive or any(w.free(kind) > 0 for w in alive):
                continue
            holders = {
                other.spec.job_id: held
                for other in self.jobs.values()
                if other.windows is not None
                and other.state == "running"
                and (
                    held := sum(
                        a.live and a.pool == kind and a.worker in names
                        for tasks in (other.maps, other.reduces)  # (either kind may hold a slot of this kind)
                        for task in tasks
                        for a in task.attempts
                    )
                )
            }
            slots = sum(getattr(w, f"{kind}_slots") for w in alive)
            if sum(holders.values()) >= slots:
                return {"kind": kind, "tasks": waiting, "slots": slots, "held_by": sorted(holders)}
        return None

    # Pipelines (hop.pipe) ---------------------------------------------------------------------------------------
    def _upstream_of(self, spec: JobSpec) -> JobState | None:
        """The job whose reduce output feeds ``spec``'s maps; raises ValueError for an unknown one."""
        upstream_id = spec.options.get("upstream")
        if not upstream_id:
            return None
        upstream = self.jobs.get(upstream_id)
        if upstream is None:
            raise ValueError(f"pipeline: upstream job {upstream_id} is unknown to this coordinator")
        return upstream

    def _to_task(self, worker_name: str, msg_type: str, task: list[Any], **fields: Any) -> None:
        worker = self.workers.get(worker_name)
        if worker is not None and worker.alive:
            self._send(worker.identity, msg_type, task=task, **fields)

    def on_pipe_ready(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A downstream map attempt listens for its partition: point the upstream reduce attempt(s) at it. Not one
        no longer live (restarted as its upstream attempt went, or for its slot): its late word, after its retry's,
        pointed the upstream reduce at a dead address, and the retry, no longer its partition's reader, was never
        told to read the committed file either (``JobState.attempt_live``)."""
        job = self._job_for(msg)
        upstream = self._upstream_of(job.spec) if job is not None else None
        if job is None or upstream is None or not job.attempt_live("map", msg["index"], msg["attempt"]):
            return
        index, attempt, address = msg["index"], msg["attempt"], msg["address"]
        self.pipe_readers[(job.spec.job_id, index)] = (attempt, address)
        if upstream.reduces[index].committed is not None:
            self._to_task(
                msg["worker"],
                "pipe_file",
                [job.spec.job_id, "map", index, attempt],
                job_id=job.spec.job_id,
                path=f"{upstream.spec.output}/part-{index:05d}",
            )
            return
        for record in upstream.live_attempts("reduce", index):
            self._to_task(
                record.worker,
                "pipe_at",
                [upstream.spec.job_id, "reduce", index, record.attempt],
                job_id=upstream.spec.job_id,
                address=address,
            )

    def _upstream_committed(self, upstream: JobState, index: int, piped: dict[str, Any] | None) -> None:
        """Partition ``index`` of ``upstream`` committed: finish the downstream maps that read it; point the ones
        it did not fully serve at the committed file (one it streamed to, slower than the upstream waits for,
        reads on from the first byte it did not get)."""
        self.pipe_released -= {key for key in self.pipe_released if key[:2] == (upstream.spec.job_id, index)}
        job = self.jobs.get(self.downstream.get(upstream.spec.job_id, ""))
        if job is None:
            return
        waiting = self.deferred_done.pop((upstream.spec.job_id, index), [])
        done_attempts = {msg["attempt"] for msg in waiting}
        for msg in waiting:
            self._map_done(msg)
        sent_to = piped.get("address") if piped else None
        complete = bool(piped and piped.get("complete"))
        reader = self.pipe_readers.get((job.spec.job_id, index))
        for record in job.live_attempts("map", index):
            if record.attempt in done_attempts or reader is None or reader[0] != record.attempt:
                continue  # not listening yet: when it announces itself it is told to read the committed file
            if reader[1] == sent_to and complete:
                continue  # it has everything; its map_done is on its way
            self._to_task(
                record.worker,
                "pipe_file",
                [job.spec.job_id, "map", index, record.attempt],
                job_id=job.spec.job_id,
                path=f"{upstream.spec.output}/part-{index:05d}",
                attempt=upstream.reduces[index].committed,
            )

    def _release_pipe_waits(self) -> None:
        """A task waits for a reduce slot: pipelined reduces whose output is whole, waiting (up to ``pipe_wait``)
        for the next job's map to take the end of their stream, commit now and give their slots back. That map reads
        on from the committed file, from the first byte it was not streamed: nothing is lost (``hop.pipe``). (A slow
        downstream map held them: the upstream's other reduces, and the downstream's, waited for it to finish.)"""
        for upstream_id in self.downstream:
            upstream = self.jobs.get(upstream_id)
            if upstream is None or upstream.state != "running":
                continue
            for task in upstream.reduces:
                if task.committed is not None or task.written is None:
                    continue
                for record in upstream.live_attempts("reduce", task.index):
                    key = (upstream_id, task.index, record.attempt)
                    if key not in self.pipe_released:
                        self.pipe_released.add(key)
                        task_id = [upstream_id, "reduce", task.index, record.attempt]
                        self._to_task(record.worker, "pipe_release", task_id, job_id=upstream_id)

    def _upstream_attempt_gone(self, upstream: JobState, index: int, reason: str) -> None:
        """An upstream reduce attempt failed or was lost: downstream maps reading it start again."""
        job = self.jobs.get(self.downstream.get(upstream.spec.job_id, ""))
        if job is None or upstream.reduces[index].committed is not None:
            return
        self.deferred_done.pop((upstream.spec.job_id, index), None)
        for record in job.live_attempts("map", index):
            self._execute(job, job.restart("map", index, record.attempt, reason))

    def _preempt_downstream(self, job: JobState, kind: str) -> None:
        """``job`` has a pending task of ``kind`` and no free slot: a pipeline's upstream comes first, so one
        downstream attempt of that kind gives its slot back (it runs again later)."""
        downstream_id = self.downstream.get(job.spec.job_id)
        now = time.monotonic()
        # One at a time per kind of slot: the freed slot is reported back before another is taken. (Per kind, and
        # timed from a preemption only: a map slot freed does a reduce no good, and a turn that found nothing to
        # take, as every turn does while a step's maps outnumber the slots, held the next preemption back too.)
        if (
            not downstream_id
            or now - self._last_preemption.get((job.spec.job_id, kind), -PREEMPT_SECONDS) < PREEMPT_SECONDS
        ):
            return
        while downstream_id:
            downstream = self.jobs.get(downstream_id)
            if downstream is None or downstream.state != "running":
                return
            for task in downstream.tasks(kind):
                for record in downstream.live_attempts(kind, task.index):
                    if record.status == "running":
                        self._last_preemption[(job.spec.job_id, kind)] = now
                        self._execute(
                            downstream,
                            downstream.restart(kind, task.index, record.attempt, "its slot went to an upstream task"),
                        )
                        return
            downstream_id = self.downstream.get(downstream_id)

    # Snapshots and the web view's queries ---------------------------------------------------------------------
    def _request_snapshot(self, job: JobState, snapshot: Snapshot) -> None:
        self._ask_reducers(job, snapshot)
        self._answer_from_committed(job)  # they have no reducer left to answer

    def _ask_reducers(self, job: JobState, snapshot: Snapshot, worker: bytes | None = None, index: int = -1) -> None:
        """Send a snapshot request to every reducer of ``job``, or to reducer ``index`` on ``worker``."""
        fields: dict[str, Any] = {"job_id": job.spec.job_id, "seq": snapshot.seq, "label": snapshot.label}
        if snapshot.source is not None:
            fields["source"] = snapshot.source
        if worker is None:
            self._broadcast("snapshot", **fields)
        else:
            self._send(worker, "snapshot", index=index, **fields)

    def on_snapshot(self, identity: bytes, msg: dict[str, Any]) -> None:
        """``hop snapshot JOB_ID``: ask every reducer of a running job for a snapshot now."""
        job = self.jobs.get(msg["job_id"])
        if job is None or job.snapshots is None:
            self._unknown_job(identity, msg["job_id"])
            return
        if job.state != "running":
            self._send(identity, "error", message=f"job {msg['job_id']} is not running (it {job.state})")
            return
        snapshot = job.snapshots.request_now(job.input_fraction())
        self._request_snapshot(job, snapshot)
        self._send(identity, "snapshot_requested", seq=snapshot.seq, label=snapshot.label)

    def on_snapshot_done(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A reducer's answer to a snapshot request. Not from an attempt no longer live: the snapshots its partition
        has not answered are asked of its retry as it starts (``on_reducer_ready``), so its own is not missed."""
        job = self._job_for(msg)
        if job is None or job.snapshots is None:
            return
        if job.finished_at is None and not job.attempt_live("reduce", msg["index"], msg["attempt"]):
            return
        if job.finished_at is not None:
            # An answer sent before its reducer heard of the job's end (stopped early, failed, cancelled): the
            # snapshot it completed was published into OUT after the client was told the job had ended (and after
            # _job.json, which lists it incomplete), remaking OUT if it was removed meanwhile, or writing into the
            # output of a job submitted there since. Its files stay in OUT/_temporary, which the job's end removes.
            self._remove_leftovers_of_ended(job)
            return
        fields = {k: v for k, v in msg.items() if k not in ("type", "job_id", "worker", "index", "attempt", "seq")}
        self._snapshot_answered(job, msg["seq"], msg["index"], fields)

    def _snapshot_answered(self, job: JobState, seq: int, index: int, fields: dict[str, Any]) -> None:
        assert job.snapshots is not None
        snapshot = job.snapshots.on_done(seq, index, fields)
        if snapshot is None:
            return
        description = job.snapshots.describe(snapshot, with_rows=False)
        try:
            folder = self._publish_snapshot(job, snapshot.label, description)
        except OutputRemovedError:  # (removed since the loop's check: its answer made it again, mkdir -p)
            self._execute(job, job.fail(_removed_output_error(job.spec.output)))
            return
        downstream = self.jobs.get(self.downstream.get(job.spec.job_id, ""))
        if downstream is not None and downstream.state == "running" and downstream.snapshots is not None:
            # Snapshots flow down a pipeline: the next job recomputes from this one, marked with its progress.
            derived = downstream.snapshots.request_derived(
                snapshot.label, snapshot.progress, {"job_id": job.spec.job_id, **description}, str(folder)
            )
            self._ask_reducers(downstream, derived)
        # Once every map committed, the exact result waits only for the shuffle to end (a fraction of a second): a
        # snapshot then may still hold a small part of the map output (with --blocking a reducer gets a map's output
        # only after it commits), and stopping on it called an answer approximate that was about to be exact.
        tracker = job.snapshots
        if job.state == "running" and tracker.stop_when_accurate is not None and not tracker.ends_exactly(snapshot):
            reason = tracker.held_back(snapshot)
            if reason is None and job.maps_committed():
                if job.stop_held_back is not None:
                    return  # an earlier snapshot's reason says more: this one came once every map had committed
                reason = "every map had committed: the exact result was moments away"
            if reason is None:
                self._stop_early(job, snapshot)
            else:  # in _job.json and the run's summary if none stops it: which groups held the job back, and why
                job.stop_held_back = {"snapshot": snapshot.label, "reason": reason}

    def _answer_from_committed(self, job: JobState) -> None:
        """Every committed partition answers the snapshots it has not answered with its final output."""
        for index, task in enumerate(job.reduces):
            if task.committed is not None:
                self._answer_snapshots_with_final(job, index)

    def _answer_snapshots_with_final(self, job: JobState, index: int) -> None:
        """A partition committed before it answered some snapshots: for those, its final output is its answer."""
        tracker, held = job.snapshots, job.output_held
        if tracker is None or held is None:
            return
        part = Path(job.spec.output) / f"part-{index:05d}"
        for snapshot in tracker.snapshots:
            if snapshot.complete or index in snapshot.partitions or not held.exists(part):
                continue
            folder = staging_directory(job.spec.output, snapshot.label)
            try:  # (never the output made again: one removed or replaced fails the job, which is seen to already)
                held.folder(folder)
            except OutputRemovedError:
                return
            groups, rows = write_final_partition_snapshot(held, folder, index, part)
            fields: dict[str, Any] = {
                "label": snapshot.label,
                "groups": groups,
                "final": True,
                "rows": rows,
                "truncated": groups > len(rows),
            }
            strata = self.chunk_strata.get(job.spec.job_id)
            if strata is not None:  # a committed partition has seen every chunk of every stratum
                fields["chunks_seen"] = list(range(len(strata)))
                fields["strata_seen"] = dict(collections.Counter(strata))
            self._snapshot_answered(job, snapshot.seq, index, fields)

    def _stop_early(self, job: JobState, snapshot: Snapshot) -> None:
        """``--stop-when-accurate``: the snapshot is the result; end the job's tasks and finish it."""
        output, held = Path(job.spec.output), job.output_held
        folder = snapshot_directory(output, snapshot.label)
        try:  # (in the directory the snapshot was published in: one given its name since is not the job's)
            if held is None:
                raise OutputRemovedError(_removed_output_error(job.spec.output))
            for index in range(job.spec.num_reduces):
                held.copy(folder / f"part-{index:05d}", output / f"part-{index:05d}")
        except (OutputRemovedError, FileNotFoundError):
            if held is not None and not held.changed():
                raise
            self._execute(job, job.fail(_removed_output_error(job.spec.output)))
            return
        assert job.snapshots is not None
        job.approximate = {
            "snapshot": snapshot.label,
            "input_fraction": job.snapshots.describe(snapshot, with_rows=False)["input_fraction"] or snapshot.progress,
            "stop_when_accurate": job.snapshots.stop_when_accurate,
            "max_relative_half_width": max(
                float(fields.get("max_relative_half_width") or 0.0) for fields in snapshot.partitions.values()
            ),
            "rows": sum(int(fields.get("groups") or 0) for fields in snapshot.partitions.values()),
            # The part files hold the estimates only: what their intervals are, and where (a user reading OUT saw
            # "accurate to 1.2%" with no confidence level and no way to the intervals).
            "confidence": job.snapshots.confidence,
            "intervals": str(Path("_snapshots") / snapshot.label / "estimates-*.jsonl"),
        }
        self._finish(job, FinishJob("succeeded"), stop_tasks=True)

    def on_snapshots(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self.jobs.get(msg["job_id"])
        if job is None:
            self._unknown_job(identity, msg["job_id"])
            return
        after = int(msg.get("after", -1))
        tracker = job.snapshots
        snapshots = [] if tracker is None else [tracker.describe(s) for s in tracker.snapshots if s.seq > after]
        self._send(identity, "snapshots", snapshots=snapshots)

    def _job_summary(self, job: JobState) -> dict[str, Any]:
        progress = job.progress()
        return {
            **{k: progress[k] for k in ("job_id", "state", "map_fraction", "reduce_fraction", "maps_total")},
            **{k: progress[k] for k in ("maps_done", "reduces_total", "reduces_done", "input_records", "error")},
            "name": job.spec.name,
            "step": job.spec.step,  # (from 0, of num_steps: a multi-step job's steps share its name)
            "num_steps": job.spec.num_steps,
            "submitted_at": job.submitted_at,
            "finished_at": job.finished_at,
            "output": job.spec.output,
            **_step_output(job),
            "input_fraction": job.input_fraction(),
            "approximate": job.approximate is not None,
            # Those every partition answered, written out: a snapshot asked for and never answered (the job was
            # cancelled first) is not in OUT/_snapshots/, and the web view said it was.
            "snapshots": sum(s.complete for s in job.snapshots.snapshots) if job.snapshots is not None else 0,
            "continuous": job.windows is not None,
            "windows": job.windows.total if job.windows is not None else 0,
            "stopping": job.stopping,
        }

    def on_jobs(self, identity: bytes, msg: dict[str, Any]) -> None:
        self._send(identity, "jobs", jobs=[self._job_summary(job) for job in self.jobs.values()])

    def on_job(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self.jobs.get(msg["job_id"])
        if job is None:
            self._unknown_job(identity, msg["job_id"])
            return
        self._send(identity, "job", **self._job_summary(job), tasks=job.task_table())

    # Continuous jobs (hop.stream) ----------------------------------------------------------------------------
    def on_stop_job(self, identity: bytes, msg: dict[str, Any]) -> None:
        """``hop stop``: a continuous job's maps drain their open panes and end; reducers write the last windows
        and checkpoint; then the job ends as succeeded. With ``now``, a continuous job ends at once as
        ``interrupted`` instead, its report written before the reply. A running batch job is cancelled: it fails,
        its tasks end."""
        job = self.jobs.get(msg["job_id"])
        if job is None:
            self._unknown_job(identity, msg["job_id"])
            return
        if job.windows is None:
            # A batch job has no last windows to write: stopping it cancels it (its tasks are ended, no _SUCCESS).
            cancelled = job.state == "running"
            reason = msg.get("reason") or "cancelled (hop stop, or an interrupted hop run or hop submit)"
            self._execute(job, job.fail(str(reason)))
            self._send(identity, "stopping", job_id=job.spec.job_id, state=job.state, cancelled=cancelled)
            return
        if msg.get("now"):
            # Stop now (a second Ctrl-C on hop run): no drain; the report says so and counts the windows written.
            reason = msg.get("reason") or (
                "interrupted before it drained (a second Ctrl-C or SIGTERM on hop run or hop monitor)"
            )
            interrupted = job.state == "running"
            self._execute(job, job.interrupt(str(reason)))
            # (an output removed or replaced got no report: the client must not point to one)
            removed = self._output_removed(job)
            self._send(
                identity, "stopping", job_id=job.spec.job_id, state=job.state, interrupted=interrupted,
                output_removed=removed,
            )  # fmt: skip
            return
        self._stop_stream(job)
        self._send(identity, "stopping", job_id=job.spec.job_id, state=job.state)

    def _stop_stream(self, job: JobState) -> None:
        """Ask a running continuous job's maps to drain and end (its reducers then write the last windows)."""
        if job.state == "running" and not job.stopping:
            job.stopping = True
            self._broadcast("stream_stop", job_id=job.spec.job_id)

    def _end_sources_without_slot(self) -> None:
        """Sources of a stopping job that have waited ``SOURCE_SLOT_GRACE_SECONDS`` for a slot end unstarted
        (``JobState.end_sources_without_slot``): a slot freed by the stop itself may still take them first."""
        now = time.time()
        for job in list(self.jobs.values()):
            if job.stopping and job.state == "running":
                self._execute(job, job.end_sources_without_slot(now, SOURCE_SLOT_GRACE_SECONDS))

    def _stop_streams_past_duration(self) -> None:
        """``--duration``: stop continuous jobs that have run their time, whether or not a client still waits."""
        now = time.time()
        for job in self.jobs.values():
            duration = job.spec.options.get("stream", {}).get("duration") if job.windows is not None else None
            if duration is not None and job.state == "running" and now - job.submitted_at >= duration:
                self._stop_stream(job)

    def on_windows(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self.jobs.get(msg["job_id"])
        if job is None or job.windows is None:
            self._send(identity, "error", message=f"no continuous job {msg['job_id']}")
            return
        after = int(msg.get("after", 0))
        windows = job.windows.since(after, int(msg.get("limit", 100)))
        if msg.get("all_rows"):
            windows = [_with_all_rows(job.spec.output, window) for window in windows]
        omitted = max(0, job.windows.seq - max(after, 0) - len(windows))  # older, or past the limit: ask again
        self._send(identity, "windows", windows=windows, omitted=omitted)

    def on_window_done(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A stream reducer wrote its part of a window. Taken from any attempt, unlike its other reports: the part
        file is written before the report, the tracker ignores a window reported twice, and the state file of an
        attempt that ended may cover this window (saved after the report left), so that its retry, restored from
        it, never writes the window again: dropping the report would leave the window without ``_window.json``."""
        job = self._job_for(msg)
        if job is None or job.windows is None:
            return
        report = {k: v for k, v in msg.items() if k not in ("type", "worker", "job_id", "index", "attempt")}
        summary = job.windows.on_window_done(msg["index"], report)
        if summary is not None:
            self._write_window_json(job, summary)

    def on_windows_skipped(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A stream reducer closed a stretch of windows holding no data cell of its own (``hop.stream.tracker``);
        taken from any attempt, as ``window_done`` is."""
        job = self._job_for(msg)
        if job is None or job.windows is None:
            return
        for summary in job.windows.on_windows_skipped(msg["index"], msg["window"], msg["end"], msg["reason"]):
            self._write_window_json(job, summary)

    def _write_window_json(self, job: JobState, summary: dict[str, Any]) -> None:
        """``OUT/windows/<label>/_window.json`` of a window every partition reported (tmp + rename), in the directory
        the job was accepted with, unless that was removed or replaced (``OutputGuard.folder`` checks it): the job
        fails instead, and writes nothing there, nor makes it again. Written by name after the check, it went into
        a directory given the name in between."""
        held = job.output_held
        if held is None:  # (the job has ended, its hold with it: a late window of an interrupted job)
            return
        described = {k: v for k, v in summary.items() if k not in ("rows", "seq")}
        try:
            folder = held.folder(Path(job.spec.output) / "windows" / summary["label"])
            held.write_whole(folder / "_window.json", json.dumps(described, indent=2) + "\n")
        except (OutputRemovedError, FileNotFoundError):
            if not held.changed():
                raise
            self._execute(job, job.fail(_removed_output_error(job.spec.output)))

    def on_stream_pause(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A stream reducer is over (``pane``) or back under (``None``) its memory budget: maps may not run past
        the lowest pane any reducer still needs while one is over."""
        job = self._job_for(msg)
        if job is None or job.windows is None:
            return
        if not job.attempt_live("reduce", msg["index"], msg["attempt"]):
            # The last words of an attempt that ended, relayed after its failure (its worker waits for them only
            # so long): its retry may run already, under its budget, and would never lift this pause.
            return
        self._set_pause(job.spec.job_id, job.windows, msg["index"], msg.get("pane"))

    def _set_pause(self, job_id: str, windows: WindowTracker, partition: int, pane: int | None) -> None:
        """Record a reducer's pause indicator; tell the maps when the job's (the lowest) changes."""
        changed, lowest = windows.on_pause(partition, pane)
        if changed:
            self._broadcast("stream_pause", job_id=job_id, pane=lowest)

    def on_stream_checkpoint(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A stream reducer's checkpoint covers these spills: once every partition's does, workers forget them.
        Not from an attempt no longer live: its retry restored the state file as it found it, and a checkpoint
        written after that (an attempt still running as it was declared lost or killed) would have the workers
        delete spills the retry still needs. (Ignoring one only delays a trim until the retry checkpoints.)"""
        job = self._job_for(msg)
        if job is None or job.windows is None or not job.attempt_live("reduce", msg["index"], msg["attempt"]):
            return
        for source, attempt, seq in job.windows.on_checkpoint(msg["index"], msg["processed"]):
            self._broadcast("stream_trim", job_id=job.spec.job_id, index=source, attempt=attempt, seq=seq)
        if "checkpoint" in msg:  # every report the reducer sent before it is here: it may forget them
            self._send(identity, "stream_checkpoint_seen", job_id=job.spec.job_id, index=msg["index"],
                       attempt=msg["attempt"], checkpoint=msg["checkpoint"])  # fmt: skip

    # Monitoring (monitoring.events) --------------------------------------------------------------------------
    def _cluster_sample(self) -> dict[str, Any]:
        now = time.time()
        return {
            "jobs": [
                # A job that ended stays in the samples for 10 s more; its time ends with it (the dashboard showed a
                # job of 0.5 s as taking up to 10 s, the time since it was submitted).
                {
                    **self._job_summary(job),
                    "failures": job.failed_attempts(),
                    "elapsed": (job.finished_at or now) - job.submitted_at,
                }
                for job in self.jobs.values()
                if job.state == "running" or (job.finished_at or 0) > now - 10
            ],
            "workers": [
                {"worker": w.name, **w.where(), "rack": w.rack, "alive": w.alive, "silent_s": now - w.last_seen}
                for w in self.workers.values()
            ],
            # Running attempts of batch jobs with the seconds since each advanced (the stuck-task alert)
            "tasks": [
                {"job_id": job.spec.job_id, "name": job.spec.name, **attempt, **self._where(attempt["worker"])}
                for job in self.jobs.values()
                for upstream in [self.jobs.get(str(job.spec.options.get("upstream") or ""))]
                for attempt in job.running_attempts(
                    now,
                    # (the pipeline step before, which feeds its maps)
                    upstream is not None and upstream.state == "running",
                    upstream.finished_at if upstream is not None else None,
                )
            ],
        }

    def _where(self, worker: str) -> dict[str, Any]:
        """The worker's host label and address (``Worker.where``), or nothing for a worker no longer known."""
        known = self.workers.get(worker)
        return known.where() if known is not None else {}

    def on_cluster(self, identity: bytes, msg: dict[str, Any]) -> None:
        """Where the coordinator's sample stream is, and the recent faults."""
        self._send(identity, "cluster", events=self.events.endpoint, faults=list(self.events.faults))

    def on_shutdown(self, identity: bytes, msg: dict[str, Any]) -> None:
        """Shut the cluster down: the workers are told to stop too (a signal stops the coordinator alone)."""
        self._send(identity, "bye")
        self.running = False
        self.stop_workers = True
        self.shutdown_requested = True
        if not embedded():  # a standalone coordinator says why it ends, as its workers do
            alive = sum(worker.alive for worker in self.workers.values())
            print(
                f"hop coordinator: shut down by hop shutdown; its {counted(alive, 'worker')} stop too",
                file=sys.stderr,
                flush=True,
            )

    def _job_for(self, msg: dict[str, Any]) -> JobState | None:
        return self.jobs.get(msg.get("job_id", ""))

    def on_task_started(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            job.on_started(msg["kind"], msg["index"], msg["attempt"], msg["pid"], msg["at"])

    def on_task_progress(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            more = {key: msg[key] for key in ("bad", "written", "taken", "from_file") if key in msg}
            job.on_progress(msg["kind"], msg["index"], msg["attempt"], msg["fraction"], msg["records"], **more)

    def on_source_listening(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            job.on_source_listening(msg["index"], msg["attempt"], msg["address"])

    def on_reducer_ready(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A reduce attempt listens: workers push to it, its partition's pause is lifted (it starts under its
        budget) and it is asked the snapshots its partition has not answered. All of it only from a live attempt:
        the late word of one that ended, after its retry's, pointed the maps at a dead address and lifted the
        retry's pause (``JobState.attempt_live``)."""
        job = self._job_for(msg)
        if job is None or not job.attempt_live("reduce", msg["index"], msg["attempt"]):
            return
        if job.windows is not None:
            self._set_pause(job.spec.job_id, job.windows, msg["index"], None)  # a new attempt starts under its budget
        self._execute(job, job.on_reducer_ready(msg["index"], msg["attempt"], msg["address"]))
        if job.snapshots is not None:  # a restarted reducer: requests its failed attempt never answered
            for snapshot in job.snapshots.unanswered(msg["index"]):
                self._ask_reducers(job, snapshot, identity, msg["index"])

    def on_map_split(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            with self._failing_job_on_error(job, "splitting a map's input"):
                actions = job.on_map_split(msg["index"], msg["attempt"], msg.get("chunk"), msg.get("cut"), time.time())
                self._execute(job, actions)

    def on_map_checkpoint(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            job.on_checkpoint(
                msg["index"],
                msg["attempt"],
                {
                    key: msg[key]
                    for key in (
                        "spills",
                        "records",
                        "offset",
                        "next_spill_records",
                        "counters",
                        "user_counters",
                        "bad_records",
                    )
                },
            )

    def on_first_run(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            job.on_first_run(msg["at"])

    def on_map_done(self, identity: bytes, msg: dict[str, Any]) -> None:
        self._free_slot(msg, "map")
        self._map_done(msg)
        self._remove_leftovers_of_ended(self._job_for(msg))

    def _map_done(self, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        upstream = self._upstream_of(job.spec) if job is not None else None
        if job is not None and upstream is not None and msg.get("upstream_attempt") is not None:
            index, read = msg["index"], msg["upstream_attempt"]
            committed = upstream.reduces[index].committed
            if committed is None and upstream.state == "running":
                # It read everything an upstream attempt sent, and that attempt has not committed yet: wait.
                self.deferred_done.setdefault((upstream.spec.job_id, index), []).append(msg)
                return
            if committed != read:
                self._execute(
                    job,
                    job.on_task_failed(
                        "map",
                        index,
                        msg["attempt"],
                        f"read upstream reduce attempt {read}, which did not commit",
                        None,
                        True,
                        msg["at"],
                    ),
                )
                return
        if job is not None:
            self._execute(
                job,
                job.on_map_done(
                    msg["index"],
                    msg["attempt"],
                    msg["spills"],
                    msg["counters"],
                    msg["user_counters"],
                    msg["at"],
                    msg.get("bad_records"),
                ),
            )

    def on_reduce_done(self, identity: bytes, msg: dict[str, Any]) -> None:
        self._free_slot(msg, "reduce")
        job = self._job_for(msg)
        if job is not None:
            self._execute(
                job,
                job.on_reduce_done(
                    msg["index"],
                    msg["attempt"],
                    msg["path"],
                    msg["counters"],
                    msg["user_counters"],
                    msg.get("first_run_at"),
                    msg["at"],
                    msg.get("bad_records"),
                    input_complete_at=msg.get("input_complete_at"),
                    memory=msg.get("memory"),
                ),
            )
            if job.reduces[msg["index"]].committed == msg["attempt"]:
                self._upstream_committed(job, msg["index"], msg.get("piped"))
                self._answer_snapshots_with_final(job, msg["index"])
        self._remove_leftovers_of_ended(job)

    def on_task_failed(self, identity: bytes, msg: dict[str, Any]) -> None:
        self._free_slot(msg, msg["kind"])
        job = self._job_for(msg)
        sender = self.workers.get(msg.get("worker", ""))
        self.events.fault(
            "task_failed",
            worker=msg.get("worker"),
            **(sender.where() if sender is not None else {}),
            job_id=msg.get("job_id"),
            task=f"{msg['kind']}-{msg['index']:05d}",
            attempt=msg["attempt"],
            error=str(msg.get("error"))[:500],
        )
        if job is not None:
            self._fail_pipeline_whose_input_went(job, msg["kind"])
            error = msg["error"]
            if self._output_removed(job):  # (what the attempt met comes of it: worded as the job's, naming a step's)
                error = f"{msg['kind']} task {msg['index']}: {_removed_output_error(job.spec.output)}"
            self._execute(
                job,
                job.on_task_failed(
                    msg["kind"],
                    msg["index"],
                    msg["attempt"],
                    error,
                    msg.get("traceback"),
                    msg.get("retryable", True),
                    msg["at"],
                ),
            )
            if msg["kind"] == "reduce":
                self._upstream_attempt_gone(job, msg["index"], f"upstream reduce attempt {msg['attempt']} failed")
            if job.state == "running" and self._output_removed(job):
                # (a reducer cannot write there: its retries could not either, and the parts committed are gone)
                self._execute(job, job.fail(_removed_output_error(job.spec.output)))
        self._remove_leftovers_of_ended(job)

    def _fail_pipeline_whose_input_went(self, job: JobState, kind: str) -> None:
        """A map of ``job``, a later step of a pipeline, failed while the step before's output directory was removed
        or moved away (``_output_removed``): it failed on a part file gone with it, which it named as a bad record to
        skip. The pipeline fails for the removal instead, as it does when the step before finds it (failing that
        step fails this one): through the step before while it runs, else through this job."""
        upstream = job.upstream
        if kind != "map" or upstream is None or job.state != "running" or not self._output_removed(upstream):
            return
        why = _removed_output_error(upstream.spec.output)
        if upstream.state == "running":
            self._execute(upstream, upstream.fail(why))
        if job.state == "running":
            self._execute(job, job.fail(f"upstream job {upstream.spec.job_id} failed: {why}"))

    def _free_slot(self, msg: dict[str, Any], kind: str) -> None:
        """A worker's slot is free again: the worker names its pool (``kind``'s unless a stream slot; None when the
        message is an attempt's last words after the worker ended it and reported its slot free already)."""
        worker = self.workers.get(msg.get("worker", ""))
        pool = msg.get("pool", kind)
        if worker is not None and pool is not None:
            worker.give_back(pool)

    # Actions -------------------------------------------------------------------------------------------------
    def _execute(self, job: JobState, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Broadcast):
                self._broadcast(action.kind, **action.fields)
            elif isinstance(action, CommitOutput):
                reason = self._commit(job, action)
                if reason is not None:
                    # The rest of ``actions`` may finish the job as succeeded: it is not, a part file is missing.
                    self._execute(job, job.fail(reason, over_success=True))
                    return
            elif isinstance(action, DiscardOutput):
                try:  # (from the directory the job was accepted with: one given its name may hold a file so named)
                    if job.output_held is not None:
                        job.output_held.unlink(Path(action.path))
                    elif not self._output_removed(job):
                        Path(action.path).unlink(missing_ok=True)
                except OSError as error:  # a superseded attempt's file: nothing depends on its removal
                    print(f"hop coordinator: cannot remove {action.path}: {error}", file=sys.stderr, flush=True)
            elif isinstance(action, FinishJob):
                self._finish(job, action)
            elif isinstance(action, KillAttempt):
                worker = self.workers.get(action.worker)
                if worker is not None and worker.alive:
                    self._send(
                        worker.identity,
                        "kill_task",
                        job_id=job.spec.job_id,
                        kind=action.kind,
                        index=action.index,
                        attempt=action.attempt,
                    )

    @staticmethod
    def _publish_snapshot(job: JobState, label: str, description: dict[str, Any]) -> Path:
        """Publish snapshot ``label`` (``hop.online.snapshots.publish_snapshot``) in the directory the job was
        accepted with; raises ``OutputRemovedError`` if that is no longer the one of its name."""
        held = job.output_held
        if held is None:  # (the job has ended: its hold with it)
            raise OutputRemovedError(_removed_output_error(job.spec.output))
        try:
            return publish_snapshot(held, label, description)
        except FileNotFoundError:  # (the directory held was deleted since its check)
            if held.changed():
                raise OutputRemovedError(_removed_output_error(job.spec.output)) from None
            raise

    def _commit(self, job: JobState, action: CommitOutput) -> str | None:
        """Move a reduce attempt's output to its part file; why it could not be, if it could not. Renamed in the
        directory the job was accepted with (held open): by name, an output replaced after the check got another
        run's file of that name in its _temporary as this part."""
        if self._output_removed(job) or job.output_held is None:
            return _removed_output_error(job.spec.output)
        try:
            job.output_held.replace(Path(action.temporary), Path(action.final))
        except OSError as error:
            if self._output_removed(job):  # (removed since the check)
                return _removed_output_error(job.spec.output)
            return (
                f"cannot move reduce output {action.temporary} to {action.final}: {error.strerror or error} (is the "
                "output directory still there, writable, and on a file system every worker and the coordinator "
                "share?)"
            )
        return None

    def _output_removed(self, job: JobState) -> bool:
        """Whether the output directory of ``job`` was removed or moved away since the job was accepted: it is gone,
        or another directory took its name (``JobState.output_identity``). The job cannot complete it: the parts
        committed before went with it; a continuous job's windows, checkpoints and ``_late`` files went with it, and
        windows written on into a directory of that name would be taken for all of them (its tasks write nothing
        there: ``hop.outputs.OutputGuard``)."""
        if job.output_held is not None:
            return job.output_held.changed()
        accepted = job.output_identity
        return accepted is not None and output_changed(job.spec.output, accepted)

    def _fail_jobs_whose_output_went(self) -> None:
        """Fail the running jobs whose output directory was removed or moved away (``_output_removed``): a
        continuous one whose tasks write nothing (a quiet source) would run on for ever, and its next window find no
        output. Checked every turn of the loop, before attempts are started: an attempt started after the output was
        replaced would take the new one for it (a batch reducer made ``OUT/_temporary`` there)."""
        for job in list(self.jobs.values()):
            if job.state == "running" and self._output_removed(job):
                self._execute(job, job.fail(_removed_output_error(job.spec.output)))

    def _finish(self, job: JobState, action: FinishJob, stop_tasks: bool = False) -> None:
        removed = self._output_removed(job)
        if removed and action.status == "succeeded":
            # (the last parts committed, the output was removed before this: nothing is left to mark done)
            reason = _removed_output_error(job.spec.output)
            job.state, job.error = "failed", reason
            action = FinishJob("failed", reason)
        downstream = self.jobs.get(self.downstream.get(job.spec.job_id, ""))
        if action.status != "succeeded" and downstream is not None and downstream.state == "running":
            self._execute(downstream, downstream.fail(f"upstream job {job.spec.job_id} failed: {job.error}"))
        upstream = self.jobs.get(str(job.spec.options.get("upstream") or ""))
        if action.status != "succeeded" and upstream is not None and upstream.state == "running":
            # The pipeline has failed: the step before would only wait (a minute) for this one's maps to take its
            # output. It fails with this step's error and traceback, which the client waiting on it then shows.
            reason = f"downstream job {job.spec.job_id} failed: {job.error}"
            self._execute(upstream, upstream.fail(reason, job.error_traceback, failed_by=job.spec.job_id))
        output = Path(job.spec.output)
        if job.finished_at is None:
            job.state, job.finished_at = action.status, time.time()
        failed = action.status != "succeeded"
        job.end_live_attempts(f"the job {action.status}" if failed else "the job stopped early (--stop-when-accurate)")
        held = job.output_held  # (held from the job's acceptance until the end of this)
        try:
            if removed or held is None:
                # Nothing is written there: a directory made again under its name would hold a partial result (or,
                # made by someone else since, is not this job's). Its scratch goes from where the job's went.
                self._remove_temporary(job)
                return
            if not failed and job.approximate is None:
                # Before _job.json and _SUCCESS, so the report lists every snapshot complete (the job no longer
                # runs: none of them can stop it early).
                self._answer_from_committed(job)
            if failed and job.windows is None:
                # A batch job's parts are its result only together: a reader of OUT/part-* must not take the parts
                # of the reducers that finished before it failed (or was cancelled). Windows a continuous job wrote
                # were results when they were written, and stay.
                # Listed and removed in the directory the job was accepted with: one given its name since holds
                # someone else's parts.
                for name in fnmatch.filter(held.listdir(output), "part-*"):
                    with contextlib.suppress(OSError):  # not a file of ours (a directory in the way): left alone
                        held.unlink(output / name)
            # An mrjob job's output is rewritten in its OUTPUT_PROTOCOL by the client, which then marks it: a
            # _SUCCESS written here came before that (a reader waiting for it read hop's own encoding), and with
            # the client gone (killed, its host down) it marked an output that never would be.
            spec = job.spec
            client_marks = spec.options.get("success_by_client") and spec.step == spec.num_steps - 1
            self._write_job_files(job, held, succeeded=not failed, mark=not client_marks)
        except (OutputRemovedError, OSError) as error:
            # The job's result is its output directory: without its report (or its _SUCCESS marker) it did not
            # succeed. Clients are answered after this message, so they see the failure.
            if isinstance(error, OSError) and not (held is not None and held.changed()):
                reason = f"cannot write the job's files in {output}: {error.strerror or error}"
                print(f"hop coordinator: job {job.spec.job_id}: {reason}", file=sys.stderr, flush=True)
            else:  # (removed or replaced since the check above)
                reason = _removed_output_error(job.spec.output)
                self._remove_temporary(job)
            if not failed:
                job.state, job.error, failed = "failed", reason, True
        finally:
            if job.snapshots is not None:
                job.snapshots.release()  # no live snapshot any more: history rows only (see hop.online.tracker)
            # Whatever happened to the files, the workers must stop the job's tasks and drop its spills.
            self._broadcast("job_done", job_id=job.spec.job_id, failed=failed, stop_tasks=stop_tasks)
            if job.output_held is not None:  # (not kept with the finished job: it would hold a file system busy)
                job.output_held.close()
                job.output_held = None
            self._retire()

    def _refuse_shared_output(self, output: str) -> None:
        """Refuse a job that would write ``output`` while a running job writes it: both would write its parts (and
        with ``--overwrite`` the new one would first delete the running one's)."""
        for other in self.jobs.values():
            if other.state == "running" and Path(other.spec.output) == Path(output):
                raise OutputExistsError(
                    f"output directory {output} is being written by job {other.spec.job_id}, still running; "
                    f"wait for it, stop it (hop stop {other.spec.job_id}) or choose another"
                )

    def _refuse_input_being_written(self, spec: JobSpec, upstream: JobState | None) -> None:
        """Refuse a job that would read the output directory of a batch job still running, or a folder holding it:
        it read the part files committed so far, part of the data, and succeeded on it as if on all (or said the
        directory held no file). A pipeline reads its ``upstream`` job's output as it is written, through the pipe;
        a continuous job's windows are each complete once written, so reading them as they come is left alone."""
        writing = {
            Path(job.spec.output).resolve(): job.spec.job_id
            for job in self.jobs.values()
            if job.state == "running" and job.windows is None and job is not upstream
        }
        if not writing:
            return
        for pattern in spec.inputs:
            for named in glob.glob(pattern, recursive=True) if glob.has_magic(pattern) else [pattern]:
                path = Path(named).resolve()
                for output, job_id in writing.items():
                    inside = path == output or output in path.parents
                    # (a folder is read without its names starting with _ or .: a pipeline's .OUT.steps-* scratch)
                    around = path in output.parents and not _hidden_below(path, output)
                    if inside or around:
                        what = "is" if inside else f"holds {output},"
                        raise InputError(
                            f"input {pattern} {what} the output of job {job_id}, still running: its part files are "
                            f"not all written yet; submit this job again once it has ended (hop status {job_id} "
                            f"--coordinator {self.address})"
                        )

    def _retire(self) -> None:
        """Forget the oldest finished jobs beyond ``keep_jobs`` (their reports stay in their output directories, as
        Hadoop retires completed jobs): a coordinator that runs for months must not keep every job it ran. A job a
        running pipeline still reads from is kept."""
        finished = [job for job in self.jobs.values() if job.finished_at is not None]
        finished.sort(key=lambda job: job.finished_at or 0.0)
        for job in finished[: max(0, len(finished) - self.keep_jobs)]:
            job_id = job.spec.job_id
            downstream = self.jobs.get(self.downstream.get(job_id, ""))
            if downstream is not None and downstream.finished_at is None:
                continue
            del self.jobs[job_id]
            self.downstream.pop(job_id, None)
            self.submitters.pop(job_id, None)
            self.retired[job_id] = job.spec.output
            if len(self.retired) > RETIRED_IDS:
                self.retired.popitem(last=False)

    def _no_job(self, job_id: str) -> str:
        """Why this coordinator knows no job ``job_id``. An id from before it started is a job of the coordinator
        that ran at its address before when one did (its workers came over: restarted coordinators do not know
        their predecessors' jobs); with no sign of one, the id is most likely mistyped, and the reply says both."""
        if not submitted_before(job_id, self.started_at):
            return f"no job {job_id}"
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        if self.succeeded_a_coordinator:
            return (
                f"no job {job_id}: it was submitted before this coordinator started ({started}), and a restarted "
                "coordinator does not know the jobs of the one before it; see the job's _job.json in its output "
                "directory, if it wrote one, or submit it again"
            )
        return (
            f"no job {job_id}: its id dates from before this coordinator started ({started}), yet no coordinator is "
            "known to have run at this address before it (no worker of one came over): check the id (`hop status "
            f"--coordinator {self.address}` lists the jobs this one knows)"
        )

    def _unknown_job(self, identity: bytes, job_id: str) -> None:
        """Answer a request about a job this coordinator does not hold."""
        output = self.retired.get(job_id)
        if output is None:
            # (``reason``: a client following a job it saw running learns that this coordinator was restarted)
            self._send(identity, "error", message=self._no_job(job_id), reason="unknown_job")
        else:
            self._send(
                identity,
                "error",
                message=f"job {job_id} has finished and this coordinator keeps only its newest {self.keep_jobs} "
                f"finished jobs (--keep-jobs): {_where_report_is(output)}",
                reason="retired_job",
            )

    @staticmethod
    def _write_job_files(job: JobState, held: OutputGuard, succeeded: bool, mark: bool = True) -> None:
        """The output directory's own files: skipped records, ``_job.json``, and ``_SUCCESS`` if ``succeeded`` (and
        ``mark``: not when the client marks it, ``success_by_client``). Written in the directory the job was accepted
        with (``held``): by name, an output replaced after its check got them (a ``_SUCCESS`` marked the user's folder
        done). Raises ``OutputRemovedError`` if it went before the folder of skipped records is made."""
        Coordinator._remove_temporary(job)  # (with the snapshots never completed)
        output = Path(held.output)
        bad = job.bad_records()
        if bad:
            folder = held.folder(output / "_bad_records")
            for task_id, records in bad.items():
                lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
                held.write_whole(folder / f"{task_id}.jsonl", lines)
        held.write_whole(output / JOB_REPORT, job_report_text(job.report()))
        if succeeded and mark:
            held.write_whole(output / "_SUCCESS", "")

    # Scheduling ----------------------------------------------------------------------------------------------
    def _schedule(self) -> None:
        # Jobs that read their input before jobs that read a pipe: a later step's map listening for its partition
        # holds its slot idle until the step before writes it, so a map of any other job (another pipeline's first
        # step above all) takes a free slot first. In submission order, a map of a pipeline submitted after another
        # one's later step waited behind it: after a worker was lost, every map slot was held by later steps whose
        # first steps' re-run maps had none, and the pipelines advanced one preemption (2 s) at a time (30 jobs on a
        # cluster took 205 s instead of 22). (A stable sort: submission order within each kind.)
        running = [job for job in self.jobs.values() if job.state == "running"]
        for job in sorted(running, key=lambda job: bool(job.spec.options.get("upstream"))):
            with self._failing_job_on_error(job, "scheduling"):
                self._schedule_job(job)
        self._split_tails()

    def _split_tails(self) -> None:
        """Map slots idle while no map waits for one: ask the running maps furthest from their end to hand the rest
        of their input over, one per idle slot (``hop.scheduler``, tail splitting). Without it a job's last map
        runs alone at the end, however long, while the other slots idle (a core slowed by other work, a larger
        split, a skewed file)."""
        jobs = [job for job in self.jobs.values() if job.state == "running"]
        free = sum(w.free("map") for w in self.workers.values() if w.alive)
        for job, attempt in tail_splits_to_ask(jobs, free, time.time()):
            worker = self.workers.get(attempt.worker)
            if worker is None or not worker.alive:
                continue
            job.on_split_asked(attempt.index, attempt.attempt)
            self._send(
                worker.identity,
                "split_off",
                job_id=job.spec.job_id,
                task=[job.spec.job_id, "map", attempt.index, attempt.attempt],
                index=attempt.index,
                attempt=attempt.attempt,
                keep=0.5,
            )

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

    def _schedule_job(self, job: JobState) -> None:
        if job.snapshots is not None:
            due = job.snapshots.due(job.input_fraction())
            if due is not None:
                self._request_snapshot(job, due)
        for kind in ("reduce", "map"):
            for task in job.pending(kind):
                if kind == "map" and not job.map_may_start(task.index, time.time()):
                    continue
                pool = self._pool(job, kind)
                worker = self._pick_worker(pool, job.failed_workers(kind, task.index))
                if worker is None:
                    self._preempt_downstream(job, kind)
                    if pool == "reduce":
                        self._release_pipe_waits()
                    break
                self._assign(job, kind, task.index, worker, pool)
        if job.spec.options.get("speculative"):
            for task in job.speculation_candidates(time.time()):
                avoid = {a.worker for a in task.attempts}
                worker = self._pick_worker("map", avoid)
                if worker is None or worker.name in avoid:
                    break  # a backup on the same worker would not help
                self._assign(job, "map", task.index, worker)

    def _pool(self, job: JobState, kind: str) -> str:
        """Which slots a task of ``job`` runs in: a continuous job's tasks run until it is stopped, so they take
        stream slots while the cluster has free ones (batch jobs keep every map and reduce slot); else ``kind``'s,
        and with none of those free the other kind's, since every task of a continuous job must run at once (one
        waiting for a slot its job's own tasks hold would wait forever: a lost worker's stream map, retried where
        the map slots were taken, left its source's rows missing while reduce slots idled). A slot runs any task:
        its kind is only which count it takes from."""
        if job.windows is None:
            return kind
        other = "reduce" if kind == "map" else "map"
        for pool in ("stream", kind, other):
            if any(w.alive and w.free(pool) > 0 for w in self.workers.values()):
                return pool
        return kind

    def _pick_worker(self, pool: str, avoid: set[str]) -> WorkerInfo | None:
        """The live worker with the most free slots in ``pool``, preferring those not in ``avoid``."""
        candidates = [w for w in self.workers.values() if w.alive and w.free(pool) > 0]
        if not candidates:
            return None
        return max(candidates, key=lambda w: (w.name not in avoid, w.free(pool)))

    def _assign(self, job: JobState, kind: str, index: int, worker: WorkerInfo, pool: str | None = None) -> None:
        pool = pool or kind
        # (a worker silent this long is likely dead, not yet found lost: what it is sent now cannot have ended it)
        silent = time.time() - worker.last_seen > 3 * HEARTBEAT_SECONDS
        attempt = job.assign(kind, index, worker.name, pool, silent=silent)
        worker.take(pool)
        fields: dict[str, Any] = {
            "job": job.spec.to_wire(),
            "kind": kind,
            "index": index,
            "attempt": attempt.attempt,
            "pool": pool,
        }
        if kind == "map":
            fields["chunks"] = [chunk.to_wire() for chunk in job.splits[index]]  # type: ignore[union-attr]
            upstream = self._upstream_of(job.spec)
            if upstream is not None:
                committed = upstream.reduces[index].committed is not None
                path = f"{upstream.spec.output}/part-{index:05d}"
                fields["pipe"] = {"host": worker.host, "committed": path if committed else None}
            if attempt.resumed_from:
                fields["resume"] = attempt.resumed_from
            if job.windows is not None:
                fields["resume_below"] = job.windows.covered(index)
                # A map started once the job is stopping (a retry of one on a lost worker) missed the stop
                # broadcast: it would run for ever, and the job with it. It drains and ends at once.
                fields["stopping"] = job.stopping
                # Likewise a reducer's memory pause, broadcast only when it changes: a map started while it holds
                # (a retry, a source started late) ran past the paused pane, and the reducer's memory grew on.
                fields["pause_pane"] = job.windows.pause()
        else:
            fields["num_maps"] = len(job.maps)
            fields["host"] = worker.host
            fields["committed"] = [[i, a, s, seg] for i, (a, s, seg) in job.map_spills.items()]
            fields["chunk_strata"] = self.chunk_strata.get(job.spec.job_id)
            # Every chunk's bytes, which Sum and Count estimates scale by (hop.online.estimators).
            tracker = job.snapshots
            fields["chunk_sizes"] = tracker.chunk_sizes if tracker is not None and fields["chunk_strata"] else None
            if job.windows is not None:
                # Told to the reducers as they went: a reduce attempt started since (a retry) never heard it.
                fields["sources_gone"] = sorted(job.sources_told_gone)
            reader = self.pipe_readers.get((self.downstream.get(job.spec.job_id, ""), index))
            if reader is not None:
                fields["pipe_to"] = reader[1]
        self._send(worker.identity, "run_task", **fields)

    def _check_heartbeats(self) -> None:
        now = time.time()
        turn = time.monotonic()
        paused, self._last_turn = turn - self._last_turn, turn
        if paused > PAUSE_SECONDS:
            # Woken after a pause longer than the heartbeat timeout, the coordinator took every worker for lost
            # (a job on one worker failed for want of workers) before reading the heartbeats queued meanwhile.
            for worker in self.workers.values():
                worker.last_seen = min(now, worker.last_seen + paused)
        for worker in self.workers.values():
            silent = now - worker.last_seen
            if worker.alive and not worker.heartbeat_late and silent > 3 * HEARTBEAT_SECONDS:
                worker.heartbeat_late = True
                self.events.fault("heartbeat_missed", worker=worker.name, **worker.where(), silent_s=round(silent, 2))
            elif worker.heartbeat_late and silent <= HEARTBEAT_SECONDS:
                worker.heartbeat_late = False
            if worker.alive and now - worker.last_seen > self.heartbeat_timeout:
                self.events.fault("worker_lost", worker=worker.name, **worker.where(), silent_s=round(silent, 2))
                if not embedded():
                    print(
                        f"hop coordinator: worker {worker.name} lost (silent {silent:.1f} s); its running tasks run "
                        "again on other workers",
                        file=sys.stderr,
                        flush=True,
                    )
                self._worker_lost(worker, now)

    def _worker_lost(self, worker: WorkerInfo, now: float, left: bool = False) -> None:
        """``worker`` is gone (silent too long, replaced by a new registration under its name, or ``left``: it said
        it stops): its attempts are lost and run again elsewhere (``JobState.on_worker_lost``)."""
        worker.alive = False
        for job in list(self.jobs.values()):
            if job.state == "running":
                with self._failing_job_on_error(job, f"handling the loss of worker {worker.name}"):
                    lost_reduces = [
                        task.index
                        for task in job.reduces
                        if any(a.worker == worker.name for a in job.live_attempts("reduce", task.index))
                    ]
                    self._execute(job, job.on_worker_lost(worker.name, now, left=left))
                    for index in lost_reduces:
                        self._upstream_attempt_gone(job, index, f"upstream reduce lost with {worker.name}")
        if not any(w.alive for w in self.workers.values()):
            # Nothing can run any more: fail running jobs instead of letting clients wait forever.
            for job in self.jobs.values():
                if job.state == "running":
                    self._execute(job, job.fail(job.no_live_workers(worker.name)))


def _removed_output_error(output: str) -> str:
    """The error of a job whose ``output`` was removed or moved while it ran (``hop.outputs.output_removed``), which
    names an earlier step's output as such: it is in the run's hidden scratch folder, not a directory the user
    named."""
    step = scratch_step(output)
    if step is None:
        return output_removed(output)
    run_output, name = step
    return output_removed(
        output, f"{name.replace('-', ' ')}'s output, in the scratch folder of the run writing {run_output}"
    )


def _step_output(job: JobState) -> dict[str, Any]:
    """Whether an ended job's output was a run's earlier step's, since deleted with the run's scratch folder
    (``output_deleted``; the run removes it when it ends, or, for a job of several run ``--blocking``, once that job
    ended), and where ``--keep-intermediate`` kept it (``output_kept``, else ``None``). ``hop status`` listed such a
    path as the job's output while the run went on, with nothing there."""
    output = job.spec.output
    if job.state == "running" or scratch_step(output) is None or Path(output).is_dir():
        return {"output_deleted": False, "output_kept": None}
    kept = kept_step_output(output)
    return {"output_deleted": True, "output_kept": None if kept is None else str(kept)}


def _where_report_is(output: str) -> str:
    """Where the report of a finished job that wrote ``output`` is, for a request about it once it was retired: its
    ``_job.json``; for a run's earlier step, whose output the run deleted with its scratch directory as it ended
    (``hop.spilldirs.scratch_step``), where ``--keep-intermediate`` kept it or else the run's own report, which holds
    the step's under ``"steps"``."""
    report = Path(output) / "_job.json"
    step = scratch_step(output)
    if report.is_file() or step is None:
        return f"its report is {report}" + ("" if report.is_file() else ", which no longer exists")
    kept = kept_step_output(output)
    if kept is not None:
        return f"its report is {kept / '_job.json'}, where the run writing {step[0]} kept the step's output"
    run, name = step
    if (run / "_job.json").is_file():
        return (
            f"it was {name.replace('-', ' ')} of the run writing {run}, which deleted the step's output when it ended "
            f'(--keep-intermediate keeps it): its report is under "steps" in {run / "_job.json"}'
        )
    return (
        f"it was {name.replace('-', ' ')} of the run writing {run}, and its report {report} went with the run's "
        f'scratch directory; {run / "_job.json"}, which would hold it under "steps", does not exist'
    )


def _with_all_rows(output: str, window: dict[str, Any]) -> dict[str, Any]:
    """``window`` with every row of its part files when the coordinator kept fewer (``ROWS_REPORTED`` per
    partition, none for older windows)."""
    if len(window.get("rows", ())) >= int(window.get("output_records", 0)):
        return window
    rows = []
    for part in sorted((Path(output) / "windows" / window["label"]).glob("part-*")):
        with open(part, encoding="utf-8") as file:
            rows += [line.rstrip("\n").split("\t", 1) for line in file if line.strip()]
    return {**window, "rows": rows}


def _hidden_below(folder: Path, path: Path) -> bool:
    """Whether reading ``folder`` leaves ``path``, inside it, out: a name on the way starts with ``_`` or ``.``
    (:func:`hop.inputs.expand_inputs`)."""
    return any(part.startswith(("_", ".")) for part in path.relative_to(folder).parts)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="hop coordinator")
    parser.add_argument("--bind", default="tcp://127.0.0.1:*", help="ZeroMQ address to bind (default: a free port)")
    parser.add_argument("--heartbeat-timeout", type=float, default=HEARTBEAT_TIMEOUT)
    parser.add_argument("--keep-jobs", type=int, default=KEEP_JOBS, help="finished jobs kept in memory (at least 1)")
    args = parser.parse_args(argv)
    return run(args.bind, args.heartbeat_timeout, lambda address: print(address, flush=True), args.keep_jobs)


def _name_the_reachable_address(address: str) -> None:
    """A coordinator bound on every interface (``tcp://0.0.0.0:PORT``) announces that address, which other hosts
    cannot connect to: say on stderr the one they use, by this host's name, as its workers' samples name it."""
    parsed = urllib.parse.urlsplit(address)
    if parsed.scheme != "tcp" or parsed.hostname not in ("0.0.0.0", "::", "*"):
        return
    reachable = f"tcp://{advertised_host('*')}:{parsed.port}"
    print(
        f"hop coordinator: listening on every interface; workers and clients connect to {reachable} (this host's "
        f"name), e.g. hop worker --coordinator {reachable}",
        file=sys.stderr,
        flush=True,
    )


def run(bind: str, heartbeat_timeout: float, announce: Callable[[str], None], keep_jobs: int = KEEP_JOBS) -> int:
    """Bind, tell ``announce`` the address clients and workers reach, and serve until shut down (or orphaned)."""
    ignore_stop_signals()
    try:
        coordinator = Coordinator(bind, heartbeat_timeout, keep_jobs)
    except zmq.ZMQError as error:  # the port is taken, the host is not this machine's, the ipc path is not writable
        print(f"hop coordinator: error: cannot listen on {bind}: {error}", file=sys.stderr, flush=True)
        return 2
    announce(coordinator.address)
    if not embedded():
        _name_the_reachable_address(coordinator.address)
    with contextlib.suppress(KeyboardInterrupt):
        coordinator.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
