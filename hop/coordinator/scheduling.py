"""Slots given to pending tasks, and tail splits (``hop.scheduler`` decides which; this sends ``run_task``).

Each turn of the loop, jobs that read their input go before jobs that read a pipe; within a job reduces before maps,
each on the live worker with the most free slots of its pool, preferring those its earlier attempts did not fail on.
A continuous job's tasks take stream slots while any are free (``_pool``). A task with no slot preempts a pipeline's
later job; map slots idle while no map waits ask the running maps furthest from their end to split.
"""

from __future__ import annotations

import time
from typing import Any

from hop.coordinator.host import CoordinatorHost, WorkerInfo
from hop.coordinator.workers import HEARTBEAT_SECONDS
from hop.scheduler import JobState, tail_splits_to_ask


class SlotAssignment(CoordinatorHost):
    """Assigns pending tasks to worker slots and asks long maps to split their tails."""

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
            if any(w.takes_tasks and w.free(pool) > 0 for w in self.workers.values()):
                return pool
        return kind

    def _pick_worker(self, pool: str, avoid: set[str]) -> WorkerInfo | None:
        """The live worker with the most free slots in ``pool``, preferring those not in ``avoid``."""
        candidates = [w for w in self.workers.values() if w.takes_tasks and w.free(pool) > 0]
        if not candidates:
            return None
        return max(candidates, key=lambda w: (w.name not in avoid, w.free(pool)))

    def _assign(self, job: JobState, kind: str, index: int, worker: WorkerInfo, pool: str | None = None) -> None:
        pool = pool or kind
        # (a worker silent this long is likely dead, not yet found lost: what it is sent now cannot have ended it)
        silent = time.time() - worker.last_seen > 3 * HEARTBEAT_SECONDS
        attempt = job.assign(kind, index, worker.name, pool, silent=silent)
        worker.take(pool)
        self._send_run_task(job, kind, index, attempt.attempt, worker, pool)

    def _send_run_task(self, job: JobState, kind: str, index: int, number: int, worker: WorkerInfo, pool: str) -> None:
        """Send ``worker`` the ``run_task`` of attempt ``number`` of ``job``'s task (assigned to it, in ``pool``),
        as the job stands now."""
        attempt = job.tasks(kind)[index].attempts[number]
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
                # (``file``: the part file the map reads, as the job's ``input_file``, whether streamed or not)
                fields["pipe"] = {"host": worker.host, "committed": path if committed else None, "file": path}
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
            if tracker is not None:
                # A pipeline's later job: the snapshots recomputed from the job before's that its partition has not
                # answered. Asked only as the attempt said it was ready, they reached a reducer started once its
                # maps had all committed (it waited for a slot, or ran again) after it had every run and left for
                # its final reduce, and the coordinator answered them with the partition's final output: the later
                # job's snapshot labelled 0.300 held its final result there, not what the job before's 0.300 gives.
                fields["derived_snapshots"] = [
                    {"seq": snapshot.seq, "label": snapshot.label, "source": snapshot.source}
                    for snapshot in tracker.unanswered(index)
                    if snapshot.source is not None
                ]
            if job.windows is not None:
                # Told to the reducers as they went: a reduce attempt started since (a retry) never heard it.
                fields["sources_gone"] = sorted(job.sources_told_gone)
            downstream = self.jobs.get(self.downstream.get(job.spec.job_id, ""))
            reader = self.pipe_readers.get((downstream.spec.job_id, index)) if downstream is not None else None
            # Only a reader still live: the one that read the failed attempt is restarted with it, and a retry
            # pointed at its dead address waited a minute (PipeSender.finish) for acknowledgements that never came,
            # when the new reader's pipe_at did not reach it (sent while the retry still waited for its slot).
            if reader is not None and downstream is not None and downstream.attempt_live("map", index, reader[0]):
                fields["pipe_to"] = reader[1]
        self._send(worker.identity, "run_task", **fields)
