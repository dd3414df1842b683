"""Workers as the coordinator sees them: registration, heartbeats, slots given back, and a worker's loss.

A worker registers with its slots (``register``), heartbeats every :data:`HEARTBEAT_SECONDS` and reports each slot freed
with the attempt that held it. One silent for longer than the heartbeat timeout, one of an embedded cluster whose
process has ended (this process forked it: ``ended_workers``; lost :data:`ENDED_GRACE_SECONDS` later), replaced by a new
process under its name, or that says it stops (``leaving``) is lost: its attempts run again elsewhere
(``JobState.on_worker_lost``), and with no worker left the running jobs fail, unless a lost worker of an embedded
cluster still runs (stopped or starved, it rejoins when it runs again: :func:`still_runs_here`). A lost worker heard
from again is told to ``reinit`` (drop everything and register afresh), as is a worker of a coordinator that ran at this
address before. A pause of the coordinator itself (:data:`PAUSE_SECONDS`) is not counted against the workers.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Collection
from typing import Any

import psutil

from hop.coordinator.host import CoordinatorHost, WorkerInfo
from hop.lifetime import embedded
from hop.wording import counted

HEARTBEAT_TIMEOUT = 5.0
"""Seconds without a heartbeat (workers send one every 0.5 s) before a worker is declared lost."""
HEARTBEAT_SECONDS = 0.5
"""How often workers heartbeat (hop.worker); three missed in a row are reported as a fault."""
PAUSE_SECONDS = 1.0
"""A gap this long between two turns of the coordinator's loop (which turns at least every 0.1 s) means the
coordinator itself did not run: stopped (SIGSTOP), suspended with its machine, or starved. Workers could not be
heard meanwhile, and their heartbeats are still arriving, so that silence is not counted against them."""
ENDED_GRACE_SECONDS = 0.3
"""How long after this process saw an embedded cluster's worker end it is lost. Meanwhile it takes no task, and what
it sent before it ended (a task's start, a map's output) is read first. Lost at once, its tasks went to another
worker killed in the same moment but not yet reaped, and the job's error then said they "ran on each" worker."""


class WorkerTracking(CoordinatorHost):
    """Registration, heartbeats and loss of workers (:class:`hop.coordinator.host.WorkerInfo`)."""

    # State of its own (set up in ``Coordinator.__init__``)
    heartbeat_timeout: float
    ended_workers: Callable[[], Collection[int]]
    """The pids of the workers this process forked (an embedded cluster's) that have ended: lost at once."""
    _last_turn: float
    _last_lost: str | None
    """The worker lost last when none was left alive, while the running jobs wait for one of the lost to rejoin
    (``_fail_if_no_worker_can_return``); None otherwise."""

    def on_register(self, identity: bytes, msg: dict[str, Any]) -> None:
        name = msg["worker"]
        earlier = self.workers.get(name)
        if (
            earlier is not None
            and earlier.alive
            and (earlier.pid, earlier.incarnation) == (msg["pid"], int(msg.get("incarnation", 0)))
        ):
            # The same registration sent again over a new connection (hop.worker.Worker._retry_ignored_registration):
            # the answer went to the connection the worker gave up. Answered again; the worker's slots, tasks and
            # sample stream stay as they are (taken afresh, its running tasks' slots would count as free).
            earlier.identity, earlier.last_seen = identity, time.time()
            self._answer_registration(identity, {})
            self._send_run_tasks_again(earlier)
            return
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
        # (The heartbeat timeout: a worker cut off from this coordinator that long is taken for lost here, so it
        # ends its tasks then, hop.worker.Worker._check_link.)
        self._answer_registration(identity, {"samples": predecessor} if predecessor else {})

    def _answer_registration(self, identity: bytes, extra: dict[str, Any]) -> None:
        """``registered`` (with the heartbeat timeout and ``extra``), then where the running jobs' reducers are."""
        self._send(identity, "registered", heartbeat_timeout=self.heartbeat_timeout, **extra)
        for job in self.jobs.values():  # a late worker must know where running reducers are
            if job.state == "running":
                for index, (attempt, address) in job.reducer_addresses.items():
                    self._send(
                        identity, "reducer_at", job_id=job.spec.job_id, index=index, attempt=attempt, address=address
                    )

    def _send_run_tasks_again(self, worker: WorkerInfo) -> None:
        """Send ``worker`` again the ``run_task`` of each attempt assigned to it that has not said it started. The
        worker sends its registration again only when no answer came to it: whatever followed that answer (tasks
        assigned since the registration was taken) went to the connection it gave up, and such an attempt was
        waited for, holding its job, for ever. A worker that had it after all (it came over the new connection)
        takes it once (``hop.worker.Worker.tasks_taken``)."""
        for job in self.jobs.values():
            if job.state != "running":
                continue
            for kind in ("map", "reduce"):
                for task in job.tasks(kind):
                    for record in task.attempts:
                        if record.worker == worker.name and record.status == "assigned":
                            self._send_run_task(job, kind, task.index, record.attempt, worker, record.pool or kind)

    def on_leaving(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A standalone worker stopped on its own (Ctrl-C, SIGTERM): it is lost now, its attempts running again
        elsewhere at once rather than after the heartbeat timeout. A ``left`` answer lets it say so."""
        worker = self.workers.get(msg["worker"])
        if worker is not None and worker.alive and worker.incarnation == msg.get("incarnation"):
            silent = time.time() - worker.last_seen
            self.events.fault("worker_lost", worker=worker.name, **worker.where(), silent_s=round(silent, 2), left=True)
            if not embedded():
                print(
                    f"hop coordinator: worker {worker.name} stopped; {self._after_losing(worker)}",
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

    def on_heartbeat(self, identity: bytes, msg: dict[str, Any]) -> None:
        worker = self.workers.get(msg["worker"])
        if worker is not None:
            worker.last_seen = time.time()
        else:
            # A worker registered with an earlier coordinator at this address: it must drop what it ran for that
            # one and register here, or it would heartbeat into the void with its slots never used.
            self.succeeded_a_coordinator = True
            self._send(identity, "reinit", incarnation=msg.get("incarnation"), why="unknown")

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

    def _free_slot(self, msg: dict[str, Any], kind: str) -> None:
        """A worker's slot is free again: the worker names its pool (``kind``'s unless a stream slot; None when the
        message is an attempt's last words after the worker ended it and reported its slot free already)."""
        worker = self.workers.get(msg.get("worker", ""))
        pool = msg.get("pool", kind)
        if worker is not None and pool is not None:
            worker.give_back(pool)

    def _check_heartbeats(self) -> None:
        now = time.time()
        turn = time.monotonic()
        paused, self._last_turn = turn - self._last_turn, turn
        if paused > PAUSE_SECONDS:
            # Woken after a pause longer than the heartbeat timeout, the coordinator took every worker for lost
            # (a job on one worker failed for want of workers) before reading the heartbeats queued meanwhile.
            for worker in self.workers.values():
                worker.last_seen = min(now, worker.last_seen + paused)
        ended = self.ended_workers()
        for worker in self.workers.values():
            silent = now - worker.last_seen
            if worker.alive and worker.pid in ended:
                # An embedded cluster's worker killed (or crashed): its process is gone, so no heartbeat will come.
                # Its attempts ran again only after the heartbeat timeout (5 s by default) before.
                if worker.ended_at is None:
                    worker.ended_at = turn
                if turn - worker.ended_at < ENDED_GRACE_SECONDS:
                    continue
                where = worker.where()
                self.events.fault("worker_lost", worker=worker.name, **where, silent_s=round(silent, 2), ended=True)
                self._worker_lost(worker, now)
                continue
            if worker.alive and not worker.heartbeat_late and silent > 3 * HEARTBEAT_SECONDS:
                worker.heartbeat_late = True
                self.events.fault("heartbeat_missed", worker=worker.name, **worker.where(), silent_s=round(silent, 2))
            elif worker.heartbeat_late and silent <= HEARTBEAT_SECONDS:
                worker.heartbeat_late = False
            if worker.alive and now - worker.last_seen > self.heartbeat_timeout:
                self.events.fault("worker_lost", worker=worker.name, **worker.where(), silent_s=round(silent, 2))
                if not embedded():
                    print(
                        f"hop coordinator: worker {worker.name} lost (silent {silent:.1f} s); "
                        f"{self._after_losing(worker)}",
                        file=sys.stderr,
                        flush=True,
                    )
                self._worker_lost(worker, now)
        self._fail_if_no_worker_can_return()

    def _after_losing(self, worker: WorkerInfo) -> str:
        """What becomes of the work of ``worker``, about to be lost, as a standalone coordinator says it: with no
        other live worker its tasks run nowhere, and the running jobs fail (:meth:`_fail_if_no_worker_can_return`);
        it said they ran again on other workers, of which there were none."""
        if any(other.alive for other in self.workers.values() if other is not worker):
            return "its running tasks run again on other workers"
        running = sum(job.state == "running" for job in self.jobs.values())
        if not running:
            return "it was the last live worker: the cluster has none now"
        fail = "fails" if running == 1 else "fail"
        return f"it was the last live worker: {counted(running, 'running job')} {fail} for want of one"

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
            self._last_lost = worker.name
            self._fail_if_no_worker_can_return()

    def _fail_if_no_worker_can_return(self) -> None:
        """With no live worker left, fail the running jobs rather than let their clients wait for ever; but not while
        a lost worker's process still runs here (an embedded cluster's worker stopped with SIGSTOP or starved past
        the heartbeat timeout, not dead): heard from again, it registers afresh and the jobs go on. A job on one
        worker failed "no live workers" after a pause of 5 s that the worker survived. Checked again at every turn
        of the loop, so a job waiting so still fails once that process ends."""
        if self._last_lost is None or any(w.alive for w in self.workers.values()):
            self._last_lost = None
            return
        if any(still_runs_here(w.pid) for w in self.workers.values()):
            return
        last, self._last_lost = self._last_lost, None
        for job in self.jobs.values():
            if job.state == "running":
                self._execute(job, job.fail(job.no_live_workers(last)))


def still_runs_here(pid: int) -> bool:
    """Whether ``pid`` is a worker this embedded coordinator forked (``hop.cluster_launch`` forks the workers, then
    becomes the coordinator) and it has not ended: stopped or starved, not killed. Always False on a standalone
    cluster, whose workers may run on other hosts: there a job with no live worker fails at once."""
    if not embedded():
        return False
    try:
        process = psutil.Process(pid)
        return process.ppid() == os.getpid() and process.status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False
