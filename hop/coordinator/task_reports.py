"""What task attempts report: started, progress, checkpoints, splits, reducers listening, done and failed.

Reports go to the job's ``JobState``, whose actions are carried out (``hop.coordinator.actions``); a report that
frees a slot gives it back first. Reports that steer other attempts (a reducer's address, a pipeline map's
``map_done``) count only from a live attempt (``JobState.attempt_live``): the late word of one that ended, after its
retry's, must not undo the retry's. A pipeline's later map that read an upstream attempt not committed yet has its
``map_done`` held until that attempt commits (``hop.coordinator.pipelines``).
"""

from __future__ import annotations

import time
from typing import Any

from hop.coordinator.actions import _removed_output_error
from hop.coordinator.host import CoordinatorHost
from hop.scheduler import JobState


class TaskReports(CoordinatorHost):
    """Handlers of the task attempts' reports, relayed by their workers."""

    def on_task_started(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            job.on_started(msg["kind"], msg["index"], msg["attempt"], msg["pid"], msg["at"])

    def on_task_progress(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            more = {key: msg[key] for key in ("bad", "written", "taken", "from_file") if key in msg}
            job.on_progress(msg["kind"], msg["index"], msg["attempt"], msg["fraction"], msg["records"], **more)

    def on_task_status(self, identity: bytes, msg: dict[str, Any]) -> None:
        job = self._job_for(msg)
        if job is not None:
            job.on_task_status(msg["kind"], msg["index"], msg["attempt"], str(msg["message"]))

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
                actions = job.on_map_split(
                    msg["index"], msg["attempt"], msg.get("chunk"), msg.get("cut"), time.time(), bool(msg.get("never"))
                )
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
