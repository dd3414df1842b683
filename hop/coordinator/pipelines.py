"""Pipelines (``hop.pipe``): a job whose maps read the reduce output of the job before it, as it is written.

Map ``i`` of the later job binds a socket (``pipe_ready``); the coordinator points the upstream reduce attempt(s) of
partition ``i`` at it (``pipe_at``), or, once that partition committed, the map at the committed file
(``pipe_file``). Upstream jobs get slots first: a downstream attempt gives its slot back when an upstream task has none
(one preemption per kind of slot every :data:`PREEMPT_SECONDS`), and pipelined reduces waiting for their reader
commit at once when a task waits for a reduce slot. Downstream maps restart when the upstream attempt they read fails
or is lost.
"""

from __future__ import annotations

import time
from typing import Any

from hop.coordinator.host import CoordinatorHost
from hop.jobspec import JobSpec
from hop.scheduler import JobState

PREEMPT_SECONDS = 2.0
"""How long after a pipeline step's later job gave a slot of one kind back to an upstream task (``_preempt_downstream``)
it may be asked for another of that kind: the first is reported free meanwhile."""


class PipelineLinks(CoordinatorHost):
    """The links between a pipeline's jobs: readers, upstream commits and failures, preemption."""

    # State of its own (set up in ``Coordinator.__init__``)
    pipe_released: set[tuple[str, int, int]]
    _last_preemption: dict[tuple[str, str], float]

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

    def _forget_links(self, job_id: str) -> None:
        """Drop every entry about ``job_id`` from the links' tables, as the job is retired (``_retire``): they are
        keyed by job, and entries a job left when it ended (its maps' readers, a preemption's time, a release or a
        deferred ``map_done`` of an attempt that never committed) grew with every pipeline a coordinator ran."""
        for reader in [key for key in self.pipe_readers if key[0] == job_id]:
            del self.pipe_readers[reader]
        for deferred in [key for key in self.deferred_done if key[0] == job_id]:
            del self.deferred_done[deferred]
        for preempted in [key for key in self._last_preemption if key[0] == job_id]:
            del self._last_preemption[preempted]
        self.pipe_released -= {key for key in self.pipe_released if key[0] == job_id}

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
