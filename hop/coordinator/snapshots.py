"""Online jobs' snapshots (``hop.online``): requests to the reducers, their answers, publication, stopping early.

The coordinator asks every reducer for a snapshot at each threshold of map input (``hop.online.tracker``), or on
``hop snapshot``; a restarted reducer is asked the ones its partition has not answered, and a committed partition
answers with its final output. Once every partition has answered, the snapshot is published in ``OUT/_snapshots/``
(in the output directory held for the job), flows down a pipeline (the next job recomputes from it), and with
``--stop-when-accurate`` may become the job's result. Answers from attempts no longer live, or after the job ended,
are dropped.
"""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

from hop.coordinator.actions import _removed_output_error
from hop.coordinator.host import CoordinatorHost
from hop.online.snapshots import publish_snapshot, snapshot_directory, staging_directory, write_final_partition_snapshot
from hop.online.tracker import Snapshot
from hop.outputs import OutputRemovedError
from hop.scheduler import FinishJob, JobState


class SnapshotRequests(CoordinatorHost):
    """Snapshot requests and answers of online jobs, and ``hop snapshot`` / ``snapshots`` queries."""

    def _request_snapshot(self, job: JobState, snapshot: Snapshot) -> None:
        self._ask_reducers(job, snapshot)
        self._answer_from_committed(job)  # they have no reducer left to answer

    def _ask_reducers(self, job: JobState, snapshot: Snapshot, worker: bytes | None = None, index: int = -1) -> None:
        """Send a snapshot request to every reducer of ``job``, or to reducer ``index`` on ``worker``."""
        fields: dict[str, Any] = {"job_id": job.spec.job_id, "seq": snapshot.seq, "label": snapshot.label}
        if snapshot.source is not None:
            fields["source"] = snapshot.source
        if snapshot.awaits is not None:  # a threshold's: answered once the reducer holds that much of the input
            fields["fraction"] = snapshot.awaits
        if worker is None:
            self._broadcast("snapshot", **fields)
        else:
            self._send(worker, "snapshot", index=index, **fields)

    def on_snapshot(self, identity: bytes, msg: dict[str, Any]) -> None:
        """``hop snapshot JOB_ID``: ask every reducer of a running job for a snapshot now (of a pipeline's later job,
        those of the pipeline's first job still running: the snapshot flows down to it)."""
        job = self.jobs.get(msg["job_id"])
        if job is None or job.snapshots is None:
            self._unknown_job(identity, msg["job_id"])
            return
        if job.state != "running":
            self._send(identity, "error", message=f"job {msg['job_id']} is not running (it {job.state})")
            return
        # A pipeline's later job takes its snapshots from the job before it: asked of it, the snapshot is taken by
        # the pipeline's first job still running and flows down to it under that job's label. Its own, labelled by
        # its own count, took the label of one flowing down (hop snapshot of both steps at the same progress), and
        # publishing the second failed the pipeline.
        source, tracker = job, job.snapshots
        while (upstream := source.upstream) is not None and upstream.state == "running":
            if upstream.snapshots is None:
                break
            source, tracker = upstream, upstream.snapshots
        snapshot = tracker.request_now(source.input_fraction())
        self._request_snapshot(source, snapshot)
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
            folder = self._publish_snapshot(job, snapshot.label, description, snapshot.staged_as)
        except OutputRemovedError:  # (removed since the loop's check: its answer made it again, mkdir -p)
            self._execute(job, job.fail(_removed_output_error(job.spec.output)))
            return
        if self._downstream_running(job) is not None:
            snapshot.flows_down = ({"job_id": job.spec.job_id, **description}, str(folder))
            self._flow_down(job)
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

    def _downstream_running(self, job: JobState) -> JobState | None:
        """The running job of a pipeline that takes its snapshots from ``job``'s, if there is one."""
        downstream = self.jobs.get(self.downstream.get(job.spec.job_id, ""))
        if downstream is not None and downstream.state == "running" and downstream.snapshots is not None:
            return downstream
        return None

    def _flow_down(self, job: JobState) -> None:
        """Snapshots flow down a pipeline: the next job recomputes one from each of ``job``'s published ones, under
        its label and progress, in the order ``job`` took them, up to its first not complete yet. Two taken at once
        (``hop snapshot`` twice) may complete in either order (a reducer that starts between the two requests gets
        the second as broadcast before the first, asked again as it says it is ready), and flowed down as they
        completed they were listed by the next job in the other order than by ``job``. One held so waits for those
        before it only while their partitions answer: a partition that commits answers every snapshot it owes
        with its final output, before the next job's maps may end."""
        downstream = self._downstream_running(job)
        assert job.snapshots is not None
        for snapshot in job.snapshots.snapshots:
            if not snapshot.complete:
                return
            if snapshot.flows_down is None or downstream is None or downstream.snapshots is None:
                continue
            upstream, folder = snapshot.flows_down
            snapshot.flows_down = None
            derived = downstream.snapshots.request_derived(snapshot.label, snapshot.progress, upstream, folder)
            self._ask_reducers(downstream, derived)

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

    @staticmethod
    def _publish_snapshot(job: JobState, label: str, description: dict[str, Any], staged_as: str | None = None) -> Path:
        """Publish snapshot ``label`` (``hop.online.snapshots.publish_snapshot``; its files written under
        ``staged_as``, if given) in the directory the job was accepted with; raises ``OutputRemovedError`` if that
        is no longer the one of its name."""
        held = job.output_held
        if held is None:  # (the job has ended: its hold with it)
            raise OutputRemovedError(_removed_output_error(job.spec.output))
        try:
            return publish_snapshot(held, label, description, staged_as)
        except FileNotFoundError:  # (the directory held was deleted since its check)
            if held.changed():
                raise OutputRemovedError(_removed_output_error(job.spec.output)) from None
            raise
