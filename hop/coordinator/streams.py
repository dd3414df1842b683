"""Continuous jobs (``hop.stream``): stopping, windows, reducers' memory pauses and checkpoints.

``hop stop`` asks a continuous job's maps to drain and end (their reducers then write the last windows), or with
``now`` ends it at once as interrupted; a batch job is cancelled. ``--duration`` stops a job that has run its time,
and a stopping job's sources still waiting for a slot after :data:`SOURCE_SLOT_GRACE_SECONDS` end unstarted. Each
window every partition reported gets its ``_window.json``; a reducer over its memory budget pauses the maps at the
lowest pane any reducer still needs; once every partition's checkpoint covers a spill, workers are told to forget it.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from hop.coordinator.actions import _removed_output_error
from hop.coordinator.host import CoordinatorHost
from hop.outputs import OutputRemovedError, OutputWriteError, writing_output
from hop.scheduler import JobState
from hop.stream.tracker import WindowTracker

SOURCE_SLOT_GRACE_SECONDS = 2.0
"""How long a stopping continuous job's source still waiting for a slot may wait for one before it ends unstarted
(a stop's own drain frees slots within that: a source whose worker just left gets one and drains)."""


class ContinuousJobs(CoordinatorHost):
    """Handlers and checks of continuous jobs: stop, windows, pauses, checkpoints."""

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
            others = [other for other in self._pipeline_of(job) if other is not job and other.state == "running"]
            self._execute(job, job.fail(str(reason)))
            # The steps of its pipeline that it ended (those streaming into it, those it streamed into), named in the
            # reply: hop stop said the one job was cancelled, the others ending unsaid.
            ended = [other.spec.job_id for other in others if other.state != "running"]
            self._send(identity, "stopping", job_id=job.spec.job_id, state=job.state, cancelled=cancelled, ended=ended)
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

    def _pipeline_of(self, job: JobState) -> list[JobState]:
        """The jobs of the pipeline ``job`` is a step of that this coordinator still knows, in step order (``job``
        alone for a job run alone)."""
        first = job
        while (before := self.jobs.get(str(first.spec.options.get("upstream") or ""))) is not None:
            first = before
        steps = [first]
        while (after := self.jobs.get(self.downstream.get(steps[-1].spec.job_id, ""))) is not None:
            steps.append(after)
        return steps

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
        if job is None:
            self._unknown_job(identity, msg["job_id"])  # (mistyped, retired, or of a coordinator before this one)
            return
        if job.windows is None:
            self._send(
                identity,
                "error",
                message=f"no continuous job {msg['job_id']}: it is a batch job, which has no windows (`hop status "
                f"{msg['job_id']} --coordinator {self.address}` gives its state)",
            )
            return
        after = int(msg.get("after", 0))
        windows = job.windows.since(after, int(msg.get("limit", 100)))
        if msg.get("rows") is False:  # (a line per window printed: its rows are not read)
            windows = [{name: value for name, value in window.items() if name != "rows"} for window in windows]
        elif msg.get("all_rows"):
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
        self._remove_old_windows(job)

    def on_windows_skipped(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A stream reducer closed a stretch of windows holding no data cell of its own (``hop.stream.tracker``);
        taken from any attempt, as ``window_done`` is."""
        job = self._job_for(msg)
        if job is None or job.windows is None:
            return
        for summary in job.windows.on_windows_skipped(msg["index"], msg["window"], msg["end"], msg["reason"]):
            self._write_window_json(job, summary)
        self._remove_old_windows(job)

    def _remove_old_windows(self, job: JobState) -> None:
        """Remove the window folders ``--keep-windows`` no longer keeps (``WindowTracker.take_removals``), in the
        directory the job was accepted with (relative to the descriptor held: one put under its name gets nothing
        removed)."""
        assert job.windows is not None
        held = job.output_held
        for label in job.windows.take_removals():
            if held is not None:
                shutil.rmtree(Path("windows", label), ignore_errors=True, dir_fd=held.descriptor)

    def _write_window_json(self, job: JobState, summary: dict[str, Any]) -> None:
        """``OUT/windows/<label>/_window.json`` of a window every partition reported (tmp + rename), in the directory
        the job was accepted with, unless that was removed or replaced (``OutputGuard.folder`` checks it): the job
        fails instead, and writes nothing there, nor makes it again. Written by name after the check, it went into
        a directory given the name in between."""
        held = job.output_held
        if held is None:  # (the job has ended, its hold with it: a late window of an interrupted job)
            return
        described = {k: v for k, v in summary.items() if k not in ("rows", "seq")}
        folder = Path(job.spec.output) / "windows" / summary["label"]
        try:
            with writing_output(folder / "_window.json"):
                held.folder(folder)
                held.write_whole(folder / "_window.json", json.dumps(described, indent=2) + "\n")
        except (OutputRemovedError, FileNotFoundError):
            if not held.changed():
                raise
            self._execute(job, job.fail(_removed_output_error(job.spec.output)))
        except OutputWriteError as error:
            # A full disk (a quota, an I/O error): the window's parts are written, but a window without its summary
            # is not one a reader can take as complete, nor would those after it be. Failed at once, saying so: it
            # was an internal error, with the coordinator's traceback.
            reason = (
                f"window {summary['label']}: {error}; its parts are written but not its _window.json, so the job "
                "failed (the windows before it are complete)"
            )
            self._execute(job, job.fail(reason))

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
