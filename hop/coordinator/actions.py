"""The state machine's actions carried out, the output directory's commits, and the end of a job.

``JobState`` decides; this carries out its actions (:class:`hop.scheduler.Action`): broadcasts, attempts killed,
reduce outputs renamed to their part files, superseded ones removed, and the job finished: ``_job.json``, skipped
records and ``_SUCCESS`` written, a failed batch job's parts removed, ``job_done`` broadcast. The coordinator notes
``OUT``'s device and inode as it accepts the job and holds it open until the job ends (``hop.outputs.OutputGuard``):
every file is written in the directory it accepted, wherever that was moved, and an output removed or replaced while
the job ran fails the job, which writes nothing there (nor makes it again).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import sys
import time
from pathlib import Path

from hop.coordinator.host import CoordinatorHost
from hop.outputs import (
    JOB_REPORT,
    OutputGuard,
    OutputRemovedError,
    OutputWriteError,
    job_report_text,
    output_changed,
    output_removed,
    remove_from_output,
    writing_output,
)
from hop.scheduler import Action, Broadcast, CommitOutput, DiscardOutput, FinishJob, JobState, KillAttempt
from hop.spilldirs import scratch_step


class ActionExecution(CoordinatorHost):
    """Carries out ``JobState``'s actions; commits and finishes in the output directory held for the job."""

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
                reason = (
                    str(error)
                    if isinstance(error, OutputWriteError)
                    else f"cannot write the job's files in {output}: {error.strerror or error}"
                )
                print(f"hop coordinator: job {job.spec.job_id}: {reason}", file=sys.stderr, flush=True)
                if held is not None and not failed:
                    reason = self._report_unwritten(job, held, reason)
                elif failed:  # (its error is what the client shows: it says there is no report to read it in)
                    job.error = f"{job.error or 'failed'}; and {reason}, so {output} has no _job.json"
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

    def _report_unwritten(self, job: JobState, held: OutputGuard, error: str) -> str:
        """A job that ran to its end could not be marked so (its ``_job.json`` or ``_SUCCESS`` could not be written:
        ``error``, a full disk): it failed. Its reason, as its report and ``hop run`` give it; that report written
        if it now can be. A batch job's parts go, as any failed one's (its parts are no result without the report
        and marker saying they are whole), which also makes room for the report: without it, the output held a
        whole result and no word of why it was not marked done."""
        if job.windows is not None:
            reason = f"the job ran to its end, but {error}; its windows are written, its report of its end is not"
        else:
            reason = (
                f"the job ran to its end, but {error}; without it the output is incomplete: the job failed and its "
                "part files were removed"
            )
            for name in fnmatch.filter(held.listdir(Path(held.output)), "part-*"):
                with contextlib.suppress(OSError):
                    held.unlink(Path(held.output) / name)
        job.state, job.error = "failed", reason
        try:
            self._write_job_files(job, held, succeeded=False)
        except OSError as again:  # (said in the job's error, which its client shows, and here, on the coordinator's)
            print(f"hop coordinator: job {job.spec.job_id}: {again}", file=sys.stderr, flush=True)
            reason = f"{reason}; {held.output} has no _job.json"
        return reason

    @staticmethod
    def _write_job_files(job: JobState, held: OutputGuard, succeeded: bool, mark: bool = True) -> None:
        """The output directory's own files: skipped records, ``_job.json``, and ``_SUCCESS`` if ``succeeded`` (and
        ``mark``: not when the client marks it, ``success_by_client``). Written in the directory the job was accepted
        with (``held``): by name, an output replaced after its check got them (a ``_SUCCESS`` marked the user's folder
        done). Raises ``OutputRemovedError`` if it went before the folder of skipped records is made, and
        ``OutputWriteError`` naming the file a full disk (or an I/O error) kept it from writing."""
        ActionExecution._remove_temporary(job)  # (with the snapshots never completed)
        output = Path(held.output)
        bad = job.bad_records()
        if bad:
            folder = held.folder(output / "_bad_records")
            for task_id, records in bad.items():
                lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
                with writing_output(folder / f"{task_id}.jsonl"):
                    held.write_whole(folder / f"{task_id}.jsonl", lines)
        with writing_output(output / JOB_REPORT):
            held.write_whole(output / JOB_REPORT, job_report_text(job.report()))
        if succeeded and mark:
            with writing_output(output / "_SUCCESS"):
                held.write_whole(output / "_SUCCESS", "")

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
