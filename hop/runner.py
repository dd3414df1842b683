"""Running a job from the client side: build the specs of its steps, submit them in turn, show progress.

A multi-step job runs step after step; each intermediate step writes to a temporary directory beside the output,
which is read back by the next step (``input_format="output"``) and deleted at the end. The final ``_job.json``
holds the last step's report plus the earlier steps' reports under ``"steps"``, its ``counters.user`` summed over every
step (:func:`_whole_run_fields`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hop.bad_records import hold_bad_records, place_bad_records, rename_files
from hop.client import Client, CoordinatorGone, CoordinatorUnavailable, JobLost, JobRejected
from hop.counters import total_user_counters
from hop.inputs import absolute_inputs, expand_inputs
from hop.job import Job, Step
from hop.jobspec import JobSpec, dump_job_class, load_job_class_in_client
from hop.lifetime import Interrupted
from hop.outputs import JOB_REPORT, output_write_error, prepare_output, write_job_report
from hop.spilldirs import kept_step_output, scratch_folder
from hop.stdin_input import inputs_as_given
from hop.task_status import StatusFeed
from hop.wording import counted, progress_percent


class JobFailed(RuntimeError):
    """The job ended in failure; ``status`` holds the coordinator's last status including the report. ``step``
    names the step that failed in a run of several (``"step 2/3"``, numbered from 1 over the whole run as the
    run's progress lines number them), else is ``None``."""

    def __init__(self, status: dict[str, Any], step: str | None = None) -> None:
        self.status = status
        self.step = step
        super().__init__(status.get("error") or "job failed")

    def __str__(self) -> str:
        # From the status, which _name_kept_outputs may rewrite after the exception is made.
        return str(self.status.get("error") or "job failed")


STALLED_NOTE_SECONDS = 120.0
"""How long a running attempt goes without advancing (no record read, no key group reduced) before ``hop run`` says
so, once per attempt: as long as the cluster monitor's stuck-task alert waits (``--alert-stuck``)."""


def stalled_note(attempt: dict[str, Any], job_id: str, address: str) -> str:
    """A job status's ``stalled`` attempt in words, with what may be wrong and the command that cancels the job;
    with the job's ``--task-timeout`` (its ``task_timeout``), when the attempt will be killed and run again."""
    timeout = attempt.get("task_timeout")
    stop = f"hop stop {job_id} --coordinator {address}"
    then = (
        f"the job waits for it ({stop} cancels it)"
        if timeout is None
        else f"at {timeout:g} s ({attempt.get('task_timeout_setting', '--task-timeout')}) it fails, killed, and runs "
        f"again while --max-attempts allows ({stop} cancels the job)"
    )
    return (
        f"{attempt['task']} (attempt {attempt['attempt']}, on worker {attempt['worker']}) has not advanced for "
        f"{attempt['stalled_s']:.0f} s, at {attempt['fraction']:.0%}: its code may be looping or blocked (on I/O, a "
        f"lock, a stopped process); {then}"
    )


class LostWorkerNote:
    """Notices, from a job's successive statuses (``workers_alive``), that the cluster lost workers, and words it:
    a lost worker sends a batch job's progress back, and restarts a continuous job's tasks elsewhere, neither of
    which may pass in silence. ``address`` is the coordinator's, for the command the line gives."""

    def __init__(self, label: str, address: str) -> None:
        self.label = label
        self.address = address
        self._alive: int | None = None

    def line(self, status: dict[str, Any]) -> str | None:
        """The line to print for this status (fewer workers alive than at the previous one), else None."""
        alive = status.get("workers_alive")
        before, self._alive = self._alive, alive if alive is not None else self._alive
        if alive is None or before is None or alive >= before or status.get("state", "running") != "running":
            return None  # (a job that ended as it lost them, failed for want of workers: its error says so)
        # With none left, a job still running waits for one: an embedded cluster's worker that was stopped or starved
        # (hop.coordinator.workers.still_runs_here) rejoins when it runs again.
        then = "the job's tasks that ran there run again" if alive else "the job waits for a worker to rejoin"
        return (
            f"hop: {self.label}{status.get('job_id', 'job')}: the cluster lost {counted(before - alive, 'worker')}, "
            f"{alive} left: {then} (hop status --coordinator {self.address} lists the workers)"
        )


class ProgressDisplay:
    """Map and reduce progress with records/s on stderr; does nothing when disabled.

    On a terminal: two tqdm bars, redrawn up to ten times a second. Elsewhere (a log file, a pipe, CI) a plain line
    every few seconds and one at the end: bars written there come out as cursor-movement escapes.

    Enabled, it first names the job and how to follow it (``hop status``), so that a job on a cluster can be looked
    at, or stopped, while it runs, and it says when the cluster loses a worker (its progress then goes back). A
    status's ``waiting`` (why the job's tasks wait for ever, ``Coordinator._slots_held_from``) is printed once each
    time it changes, disabled or not: a job that waits must say why. So is each task status message (a job's
    ``set_status``, ``hop.task_status``) its ``task_status`` brings, the job's own words: above the bars, once each
    (a task process printing it on the terminal itself left a copy of the map bar behind per message, and one on a
    standalone cluster's worker reached no one). Enabled, it says once of each attempt that has not advanced for
    :data:`STALLED_NOTE_SECONDS` which it is (a status's ``stalled``): nothing else would end such a wait. ``address``
    is the coordinator's, for the commands these lines give.
    """

    def __init__(
        self,
        enabled: bool,
        label: str = "",
        *,
        address: str,
        messages: StatusFeed | None = None,
        named: bool = False,
    ) -> None:
        """``messages``: the task status messages said so far, shared by the displays of a run's steps (a pipeline's
        later steps send theirs while an earlier step is followed). ``named``: the job's :func:`submitted_line` was
        said already (a pipeline says each step's as it submits it, before any step's messages)."""
        self.enabled = enabled
        self.label = label
        self.address = address
        self._bars: list[Any] = []
        terminal = sys.stderr.isatty()
        self._interval = 0.1 if terminal else 5.0
        self._last = 0.0
        self._waiting: dict[str, Any] | None = None
        self.messages = StatusFeed() if messages is None else messages
        self._named = named
        self._lost = LostWorkerNote(label, address)
        self._stalled: set[tuple[str, int]] = set()
        """The attempts said to be stalled (``task``, ``attempt``): each is said once."""
        if enabled and terminal:
            # Imported here: tqdm takes ~20 ms to import (its version lookup reads package metadata), which a
            # quiet run (--quiet, scripts, the benchmarks) need not pay.
            from tqdm import tqdm

            class Bar(tqdm):
                """A bar followed by ``counts`` as they are: tqdm's ``{postfix}`` puts ", " before its text, so the
                bars read "|, 3/8 maps"."""

                counts = ""

                @property
                def format_dict(self) -> dict[str, Any]:
                    return {**super().format_dict, "counts": self.counts}

            fmt = "{desc:<14}{percentage:5.1f}%|{bar:30}| {counts}"
            self._bars = [
                Bar(total=100, desc=f"{label}map", position=0, file=sys.stderr, bar_format=fmt, leave=True),
                Bar(total=100, desc=f"{label}reduce", position=1, file=sys.stderr, bar_format=fmt, leave=True),
            ]

    def update(self, status: dict[str, Any]) -> None:
        job_id = status.get("job_id", "job")  # (a coordinator's status names it; a made-up one may not)
        if self.enabled and not self._named and "job_id" in status:
            self._named = True
            self._say(submitted_line(self.label, job_id, self.address))
        lost = self._lost.line(status)
        if self.enabled and lost is not None:
            self._say(lost)
        for attempt in status.get("stalled") or ():
            said = (attempt["task"], attempt["attempt"])
            if self.enabled and attempt["stalled_s"] >= STALLED_NOTE_SECONDS and said not in self._stalled:
                self._stalled.add(said)
                self._say(f"hop: {self.label}{job_id}: {stalled_note(attempt, job_id, self.address)}")
        waiting = status.get("waiting")
        if waiting is not None and waiting != self._waiting:
            self._say(f"hop: {self.label}{job_id}: {waiting_note(waiting, self.address)}")
        self._waiting = waiting
        for line in self.messages.lines(status, self.label):
            self._say(line)
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self._interval and status["state"] == "running":
            return
        self._last = now
        map_percent = progress_percent(status["map_fraction"])
        reduce_percent = progress_percent(status["reduce_fraction"])
        # The maps' rate over the time they ran (it was held at the first report's once the maps were done: a job
        # faster than the report interval ended on "0 records/s").
        rate = status["input_records"] / max(status["map_seconds"], 1e-9)
        maps = f"{status['maps_done']}/{status['maps_total']} maps, {rate:,.0f} records/s"
        reduces = f"{status['reduces_done']}/{status['reduces_total']} reduces"
        if not self._bars:
            sys.stderr.write(
                f"{self.label}map {map_percent:5.1f}% ({maps}) | reduce {reduce_percent:5.1f}% ({reduces})\n"
            )
            sys.stderr.flush()
            return
        map_bar, reduce_bar = self._bars
        map_bar.n, map_bar.counts = map_percent, maps
        reduce_bar.n, reduce_bar.counts = reduce_percent, reduces
        for bar in self._bars:
            bar.refresh()

    def _say(self, line: str) -> None:
        """``line`` on stderr, above the bars if there are any."""
        if self._bars:
            self._bars[0].write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        for bar in self._bars:
            bar.close()


def submitted_line(label: str, job_id: str, address: str) -> str:
    """The line naming a run's job (step ``label``) and how to follow it while it runs."""
    return f"hop: {label}{job_id} submitted (hop status {job_id} --coordinator {address})"


def waiting_note(waiting: dict[str, Any], address: str) -> str:
    """A job status's ``waiting`` in words, with the commands that end the wait on the cluster at ``address``."""
    kind, held_by = waiting["kind"], waiting["held_by"]
    stop = " and ".join(f"hop stop {job_id} --coordinator {address}" for job_id in held_by)
    return (
        f"{counted(waiting['tasks'], kind + ' task')} wait: all {waiting['slots']} {kind} slots of the live workers "
        f"are held until stopped by continuous job {' and '.join(held_by)}, whose tasks found no free stream slot. "
        f"Start another worker (hop worker --coordinator {address}), or stop that job ({stop})"
    )


def build_spec(job_class: type[Job], inputs: list[str], output: str, **settings: Any) -> JobSpec:
    input_format = settings.pop("input_format", None) or job_class.input_format
    return JobSpec(
        job_code=dump_job_class(job_class),
        name=job_class.__name__,
        # Absolute paths: the coordinator that expands them may run in another directory (or on another host).
        inputs=tuple(absolute_inputs(inputs)),
        output=str(Path(output).resolve()),
        input_format=input_format,
        **settings,
    )


STOP_EARLY_SEQUENTIAL = (
    "--stop-when-accurate ends the job once its estimates' intervals are narrow, and those intervals assume input "
    "chunks read in random order: add --order random (in the default sequential order the first chunks of each "
    "file are read first, a biased sample on whose intervals the job would stop with a wrong claim of accuracy)"
)

SNAPSHOTS_IN_FILE_ORDER = (
    "snapshots of a job read in file order (no --order random): their estimates' intervals assume a random sample "
    "of input chunks, and the first chunks of each file are one only if the input's order is unrelated to its values "
    "(input sorted by key, value or time gives narrow intervals that miss the final value): add --order random"
)


def online_options(
    job_class: type[Job],
    inputs: list[str],
    *,
    snapshot_every: float | None = None,
    order: str = "sequential",
    seed: int = 0,
    chunk_size: int = 1 << 20,
    confidence: float = 0.95,
    stop_when_accurate: float | None = None,
) -> dict[str, Any]:
    """The JobSpec options of online aggregation and input order (see ``hop.online``).

    ``stop_when_accurate`` without ``snapshot_every`` takes snapshots every 5% of the input; it needs ``order``
    random (``ValueError``: :data:`STOP_EARLY_SEQUENTIAL`). The job's strata (``Job.input_stratum``) are computed
    here, on the submitting machine, once per input file.
    """
    if stop_when_accurate is not None and order != "random":
        raise ValueError(STOP_EARLY_SEQUENTIAL)
    if stop_when_accurate is not None and snapshot_every is None:
        snapshot_every = 0.05
    options: dict[str, Any] = {"order": order, "seed": seed, "chunk_size": chunk_size}
    if snapshot_every is not None:
        options.update(online=True, snapshot_every=snapshot_every, confidence=confidence)
    if stop_when_accurate is not None:
        options["stop_when_accurate"] = stop_when_accurate
    if snapshot_every is not None and job_class.input_stratum is not Job.input_stratum:
        job = job_class()
        options["strata"] = {os.path.abspath(path): str(job.input_stratum(path)) for path in expand_inputs(inputs)}
    return options


def _scratch(
    final_output: Path, kind: str = "steps", one_step: bool = False
) -> contextlib.AbstractContextManager[Path]:
    """The directory for a run's intermediate outputs, hidden beside ``final_output`` and removed when the block
    ends (``hop.spilldirs.scratch_folder``: a Ctrl-C as it is made no longer leaves it behind). ``one_step``: the
    run has one step, so no intermediate output, as the error of a folder that cannot be made then says."""
    return scratch_folder(final_output.parent, final_output.name, kind, one_step)


def run_steps(
    client: Client,
    base: JobSpec,
    *,
    keep_intermediate: bool = False,
    progress: bool = True,
    timeout: float | None = None,
    hold: Path | None = None,
    deadline: float | None = None,
    step_offset: int = 0,
    steps_in_run: int | None = None,
    run_output: Path | None = None,
) -> dict[str, Any]:
    """Run every step of the job in ``base`` (step 0's spec) to completion, one after another through files;
    returns the last step's report. ``timeout`` counts the whole run, every step (``deadline``: a
    ``time.monotonic()`` it must end by, for a caller running several jobs under one timeout).
    ``keep_intermediate`` moves each earlier step's output to ``OUT/_steps/step-N`` (``N`` the step's number, from
    1) as :func:`run_pipeline` does; ``hold`` is a directory to move them to instead (for :func:`run_staged_jobs`,
    which moves them to its ``OUT/_steps`` once every job is done). ``step_offset``: the steps the run had before
    this job, and ``steps_in_run`` its steps in all (default: this job's), so that messages, intermediate and kept
    outputs and skipped records (``hop.bad_records``) name each step by its number over the whole run, as a
    pipeline names them. ``run_output``: the output of the run this job is the first of, which its first step
    claims (:func:`_claiming`; default: this job's output)."""
    deadline = _deadline(timeout) if deadline is None else deadline
    steps = _instantiate(base).resolved_steps()
    num_steps = len(steps)
    total = steps_in_run or num_steps
    final_output = Path(base.output)
    prepare_output(str(final_output), base.overwrite, base.inputs, clear=False)  # (cleared as the job is accepted)
    with _scratch(final_output, one_step=num_steps == 1) as scratch:
        reports: list[dict[str, Any]] = []
        running: Path | None = None  # the output of the step submitted and not yet ended
        kept = hold or (final_output / "_steps" if keep_intermediate else None)  # (a failed run's go there too)
        try:
            inputs = base.inputs
            for step in range(num_steps):
                last = step == num_steps - 1
                spec = dataclasses.replace(
                    base,
                    step=step,
                    num_steps=num_steps,
                    num_reduces=base.step_num_reduces(step),
                    inputs=tuple(inputs),
                    output=str(final_output if last else scratch / f"step-{step_offset + step + 1}"),
                    input_format=base.input_format if step == 0 else "output",
                    overwrite=True,
                    options=_step_options(base.options, steps[step], reads_a_step=bool(step or step_offset)),
                )
                spec = _numbered(spec, step_offset + step + 1, total)
                if step == 0:
                    spec = _claiming(spec, run_output or final_output, base.overwrite)
                label = f"step {step_offset + step + 1}/{total} " if total > 1 else ""
                # Set before the submit: a Ctrl-C that comes during it acts as it returns, and the step it
                # submitted, cancelled then, must be reported (OUT got no _job.json, the step's being in scratch).
                running = Path(spec.output)
                job_id = client.submit(spec)
                ending = (reports, scratch, final_output, kept, step_offset, None)
                reports.append(_await_step(client, job_id, label, progress, deadline, timeout, ending))
                running = None
                inputs = (spec.output,)
                if not last:
                    hold_bad_records(Path(spec.output), scratch / "_bad_records", step_offset + step + 1)
            if num_steps > 1 or step_offset:
                place_bad_records(scratch / "_bad_records", final_output, step_offset + num_steps)
            for step, report in enumerate(reports[:-1]):
                number = step_offset + step + 1
                keep_stopping_snapshot(report, scratch / f"step-{number}", final_output, number, kept is not None)
            if kept is not None:
                _keep_steps(scratch, range(step_offset + 1, step_offset + num_steps), kept)
            if kept is not None and hold is None:  # (a staged run names them once every job's are kept)
                _name_kept_files(final_output, kept)
        except (KeyboardInterrupt, TimeoutError) as error:  # (a coordinator gone has no job left to cancel)
            ending = (reports, scratch, final_output, kept, step_offset, None)
            _end_interrupted(client, error, timeout, [running] if running else [], ending)
            raise
    final = reports[-1]
    if len(reports) > 1:
        final["steps"] = reports[:-1]
        _whole_run_fields(final, reports)
        _note_earlier_stop(final, step_offset)
        _write_run_report(final_output, final)
    return final


def _claiming(spec: JobSpec, run_output: Path, overwrite: bool) -> JobSpec:
    """``spec``, the first job a run submits, made to claim the run's output ``run_output`` (the job's own, or the
    run's last step's beside a first step's scratch output): its coordinator refuses it along with the job, and
    clears it (``overwrite``) only once it has accepted the job. Cleared here before the submit, the old output
    was lost to a job the coordinator then refused: one reading a running job's output, one whose input it could
    not read, one writing the output of a running job, whose parts went too and which failed for it."""
    options = spec.options if Path(spec.output) == run_output else {**spec.options, "run_output": str(run_output)}
    return dataclasses.replace(spec, overwrite=overwrite, options=options)


def _numbered(spec: JobSpec, number: int, total: int) -> JobSpec:
    """``spec``, step ``number`` of a run of ``total`` steps (from 1 over the whole run, every job file's steps in
    order), told so when the run has several: its report (``_job.json``) and ``hop status`` then give ``run_step``
    and ``run_steps``, as the run's progress lines, errors and kept outputs number it (``step 2/3``). Its own
    ``step``/``num_steps`` are its place among its job's ``steps()`` (from 0), so every job file of a pipeline of
    one-step jobs said ``"step": 0, "num_steps": 1``, and a failed later step's report (``OUT/_job.json``, reading
    a pipe: no inputs) did not say which step of the run it was."""
    if total < 2:
        return spec
    return dataclasses.replace(spec, options={**spec.options, "run_step": number, "run_steps": total})


def _step_options(options: dict[str, Any], step: Step, reads_a_step: bool = False) -> dict[str, Any]:
    """The options of a step of a run staged step by step: ``options`` (the job's), less ``stop_when_accurate`` for
    a step whose reduce has no intervals (``Min``, ``Max``, ``TopK``, a hand-written one), which can never stop
    early. Given it, such a step reported why its snapshots could not stop it (``stop_held_back``, "no group was
    read yet" of a ``TopK`` after a ``Sum`` step), and the run's summary gave that as the reason the run ran to
    its end. It still takes the snapshots the option asks for (``snapshot_every``).

    ``reads_a_step``: the step reads the output of the step before (of this job, or of the job before in a staged
    run of several): it gets ``map_per_part``, a map per part file of that step, an empty one too
    (``hop.planning.plan_map_inputs``'s ``per_file``), as a pipelined run's later step has a map per partition.
    Its maps were those of any input (small parts packed into one map, an empty one in none), so its
    ``mapper_init``/``mapper_final`` ran as many times as the parts' bytes made maps, none at all after an empty
    output, where a pipelined run ran them once per partition: the same job gave another output by mode."""
    if reads_a_step:
        options = {**options, "map_per_part": True}
    if options.get("stop_when_accurate") is None:
        return options
    # (imported here, past the return: every run paid for hop.online's import, ~4 ms, between its cluster's start
    # and its job's submission)
    from hop.online.state import estimate_kind

    if estimate_kind(step.reducer) is not None:
        return options
    return {name: value for name, value in options.items() if name != "stop_when_accurate"}


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def timeout_reason(timeout: float | None) -> str:
    """The error of a job cancelled because the run's ``--timeout`` passed."""
    return f"cancelled: --timeout {timeout:g}s passed"


TASKS_END_SECONDS = 5.0
"""How long cancelling the embedded cluster's jobs waits for their tasks to end (they are killed: it takes
milliseconds) before the cluster is stopped."""


def cancel_submitted(interrupted: Client | None, everything: bool = False, reason: str | None = None) -> None:
    """Cancel the still-running jobs an interrupted run had submitted through ``interrupted`` (a fresh connection:
    the old one may be in the middle of a request); ``everything``: every running job (the embedded cluster's jobs
    are all this run's, including one whose submission was interrupted before its id came back), then wait until
    their tasks have ended (:func:`_await_tasks_ended`). ``reason``: the
    jobs' error (default: the coordinator's, for ``hop stop`` or an interruption). A job already ended is left as it
    is, so calling this twice cancels once; a coordinator gone is no error. The coordinator has written a cancelled
    job's ``_job.json`` by the time this returns."""
    if interrupted is None or not (interrupted.submitted or everything):
        return
    client = Client(interrupted.address, timeout=5)
    try:
        running: list[str] = []
        if everything:
            with contextlib.suppress(CoordinatorUnavailable):
                running = [job["job_id"] for job in client.jobs() if job["state"] == "running"]
        for job_id in dict.fromkeys([*interrupted.submitted, *running]):
            if job_id in interrupted.cancel_unanswered:
                continue  # (asked already, unanswered: a run cancels before its scratch folder goes, then as it ends)
            try:
                if client.stop(job_id, reason).get("cancelled"):
                    print(f"hop: cancelled {job_id}", file=sys.stderr)
            except CoordinatorGone:
                pass  # (its jobs went with it)
            except CoordinatorUnavailable:
                interrupted.cancel_unanswered.append(job_id)  # (a hung coordinator: the job may run on)
            except JobRejected:
                pass
        if everything:
            _await_tasks_ended(client, TASKS_END_SECONDS)
    finally:
        client.close()


def _await_tasks_ended(client: Client, timeout: float) -> None:
    """Wait until every live worker has all its slots free, at most ``timeout`` seconds. A cancelled job's tasks are
    killed after it ended, and one may write in the meantime (a snapshot's files, its output, under
    ``OUT/_temporary``); the coordinator removes that as it hears of each kill, which a cluster stopped at once never
    told it: a Ctrl-C left a reducer's files of a snapshot that was never completed in ``OUT``."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(CoordinatorUnavailable):
        while time.monotonic() < deadline:
            workers = [worker for worker in client.workers() if worker["alive"]]
            if all(
                worker[f"free_{pool}"] >= worker[f"{pool}_slots"]
                for worker in workers
                for pool in ("map", "reduce", "stream")
            ):
                return
            time.sleep(0.02)


def _cancel_before_cleanup(client: Client, error: BaseException, timeout: float | None) -> None:
    """A run ends on ``error`` (Ctrl-C, SIGTERM, ``--timeout``) while its jobs may still run: cancel them now,
    before the run deletes its intermediate outputs. Cancelled later (by ``hop run`` on its way out), a job still
    wrote there: its coordinator failed to write the cancelled step's ``_job.json`` in the deleted directory and
    said so, and ``OUT`` never learnt why the run ended."""
    reason = None
    if isinstance(error, TimeoutError):
        reason = timeout_reason(timeout)
    elif isinstance(error, Interrupted):
        reason = error.cancel_reason()  # (which signal, as a run on Spark says)
    with contextlib.suppress(Exception):  # (the run's own error is what the user must see)
        cancel_submitted(client, reason=reason)


_RunEnding = tuple[list[dict[str, Any]], Path, Path, Path | None, int, list[str] | None]
"""What :func:`_end_failed_run` needs besides the failed step's status: the reports of the steps before it, the
run's scratch directory, its output, where ``--keep-intermediate`` keeps the earlier steps' outputs, the steps
the run had before the first of those reports, and a pipeline's inputs (as given: ``None`` for a run step by
step, whose failed step without earlier reports is its first, reading them)."""


def _await_step(
    client: Client,
    job_id: str,
    label: str,
    progress: bool,
    deadline: float | None,
    timeout: float | None,
    ending: _RunEnding,
    labels: dict[str, str] | None = None,
    messages: StatusFeed | None = None,
    status_of: Sequence[str] = (),
    named: bool = False,
) -> dict[str, Any]:
    """Wait for the submitted step ``job_id``, showing its progress under ``label``, and return its report; a step
    that did not succeed ends the run (:func:`_end_failed_run`, then :class:`JobFailed`), reported as the step that
    failed (:func:`_failed_step`), named by its label: ``labels`` gives those of the run's other steps by job id.
    The task status messages of the step and of the steps ``status_of`` names (a pipeline's later ones, running
    beside it) are said as they come, those ``messages`` said already not again. ``named``: the step's
    :func:`submitted_line` was said already."""
    display = ProgressDisplay(progress, label, address=client.address, messages=messages, named=named)
    try:
        status = _wait(client, job_id, display.update, deadline, timeout, label.strip(), display.messages, status_of)
    except TimeoutError as error:
        if not status_of:
            raise
        # The steps after it run too, and it cannot end before they take its output: said, or a step waiting on a
        # slow later one read as the slow one.
        later = ", ".join(f"{(labels or {}).get(later, '').strip() or 'job'} ({later})" for later in status_of)
        raise TimeoutError(f"{error}, as are the steps after it, which it streams into: {later}") from None
    finally:
        display.close()
    if status["state"] != "succeeded":
        status = _failed_step(client, status)
        _end_failed_run(status, *ending)
        if status.get("coordinator_stopped"):  # the cluster went, not the job: exit code 3, as for a restart
            raise JobLost(f"job {status.get('job_id', job_id)} failed: {status.get('error')}", status)
        failed_label = (labels or {}).get(status.get("job_id", job_id), label).strip()
        raise JobFailed(status, failed_label or None)
    report: dict[str, Any] = status["report"]
    return report


def _failed_step(client: Client, status: dict[str, Any]) -> dict[str, Any]:
    """The status of the step whose failure ended a pipeline, given that of the step the run waited for: a later
    step that failed fails the steps before it (``failed_by``), and the run must report the one that failed, its
    error and traceback, not an earlier step and the id of a job the user was never shown. The later steps ended
    with it; one the coordinator no longer knows leaves ``status`` as it is."""
    while status.get("failed_by"):
        try:
            status = client.status(status["failed_by"])
        except (CoordinatorUnavailable, JobRejected):
            break
    return status


def _end_interrupted(
    client: Client, error: BaseException, timeout: float | None, running: list[Path], ending: _RunEnding
) -> None:
    """A run ends on Ctrl-C, SIGTERM or ``--timeout`` (``error``): its jobs are cancelled before its scratch
    directory goes, and the first step that did not succeed of those that were running (``running``, their outputs
    in step order: a pipeline's steps run side by side, and its first may have ended before a later one's submit
    was interrupted) is reported as a failed one, so that ``OUT/_job.json`` says why, with the steps before it."""
    _cancel_before_cleanup(client, error, timeout)
    cancelled = next(filter(None, map(_cancelled_status, running)), None)
    if cancelled is not None:
        _end_failed_run(cancelled, *ending)


def _cancelled_status(output: Path) -> dict[str, Any] | None:
    """The status of the job cancelled by :func:`_cancel_before_cleanup` that wrote to ``output``, from the
    ``_job.json`` its coordinator wrote there (``None`` when it wrote none: not submitted yet, or the coordinator
    is gone)."""
    try:
        report = json.loads((output / "_job.json").read_text())
    except (OSError, ValueError):
        return None
    if report.get("status") == "succeeded":
        return None
    return {"state": report.get("status"), "error": report.get("error"), "report": report}


def _wait(
    client: Client,
    job_id: str,
    on_status: Callable[[dict[str, Any]], None],
    deadline: float | None,
    timeout: float | None,
    step: str = "",
    messages: StatusFeed | None = None,
    status_of: Sequence[str] = (),
) -> dict[str, Any]:
    """``client.wait`` for what is left of ``deadline``; past it, a ``TimeoutError`` naming the whole run's
    ``timeout`` (not what was left of it for this step), and the step (``"step 2/3"``) of a run of several. Its
    statuses bring the task status messages after those ``messages`` said, of the job and of ``status_of``'s."""
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    after = 0 if messages is None else messages.seen
    try:
        return client.wait(job_id, on_status, timeout=left, status_after=after, status_of=status_of)
    except TimeoutError:
        which = f" ({step})" if step else ""
        raise TimeoutError(f"job {job_id}{which} still running after {timeout:g}s") from None


def _end_failed_run(
    status: dict[str, Any],
    reports: list[dict[str, Any]],
    scratch: Path,
    final_output: Path,
    kept: Path | None,
    first: int,
    run_inputs: list[str] | None = None,
) -> None:
    """A step of a run failed after ``reports`` (the steps before it, none for a one-step job; ``first``: the
    steps before those) succeeded.

    With ``kept`` (``--keep-intermediate``), the earlier steps' outputs move from ``scratch/step-N`` to
    ``kept/step-N`` as on success, and the failure's error and traceback name them there. Without, an error naming
    a file of ``scratch`` (about to be deleted) says so. ``OUT/_job.json`` then holds the failed step's report (with
    that error) and the earlier ones under ``"steps"``: the coordinator writes only the last step's. Its user
    counters are the run's so far, its ``inputs`` the run's (:func:`_whole_run_fields`; ``run_inputs``, a
    pipeline's, when no step finished before it: a later step reading a pipe has none of its own, and the run's
    report said ``"inputs": []``). An ``OUT`` removed or moved away while the run ran (:func:`_output_gone`) is
    left gone."""
    if _output_gone(status, scratch, final_output):
        return
    if kept is not None:
        numbers = range(first + 1, first + len(reports) + 1)
        _keep_steps(scratch, numbers, kept)
        for number in numbers:
            _rename_in_failure(status, scratch / f"step-{number}", kept / f"step-{number}")
    else:
        _note_deleted_input(status, scratch)
    if reports:
        failed = status["report"]
        status["report"] = {**failed, "steps": reports}
        _whole_run_fields(status["report"], [*reports, failed])
    elif run_inputs is not None:
        status["report"] = {**status["report"], "inputs": run_inputs}
    _write_report(final_output, status["report"], status)


def _output_gone(status: dict[str, Any], scratch: Path, final_output: Path) -> bool:
    """Whether the output of a failed run is gone: made as the run began (``prepare_output``), it was removed or
    moved away by its user meanwhile (the coordinator failed the job that wrote it for that). It is not made again,
    to hold only a failed run's report, or part of a result (earlier steps' outputs, ``--keep-intermediate``): the
    run's error says what happened, and a next run of that output would be refused it as not empty. An error naming
    a file of ``scratch`` says that it is deleted with the run."""
    if final_output.is_dir() and not status.get("output_removed"):
        return False  # (with it, a folder made under OUT's name since is someone else's: nothing is written there)
    _note_deleted_input(status, scratch)
    return True


def _write_report(output: Path, report: dict[str, Any], status: dict[str, Any]) -> None:
    """Write a failed run's ``OUT/_job.json``. One that cannot be written (a full disk) is said in the run's error
    (``status``'s, which the run ends with): the write's traceback hid the job's own error and left no word of why
    ``OUT`` had no report."""
    try:
        output.mkdir(parents=True, exist_ok=True)
        write_job_report(output, report)
    except OSError as error:
        report_path = str(output / JOB_REPORT)
        if report_path not in str(status.get("error")):  # (else the coordinator's error says it could not either)
            status["error"] = f"{status.get('error') or 'job failed'}; and {_report_unwritten(output, error)}"


def _write_run_report(output: Path, report: dict[str, Any]) -> None:
    """Write the ``OUT/_job.json`` of a run of several steps or jobs that succeeded, over the last one's (which the
    coordinator wrote, then ``_SUCCESS``: the output is whole). One that cannot be written (a full disk) is warned
    of, not raised: its traceback hid that the run's output was whole."""
    try:
        write_job_report(output, report)
    except OSError as error:
        print(f"hop: warning: {_report_unwritten(output, error)}", file=sys.stderr, flush=True)


def _report_unwritten(output: Path, error: OSError) -> str:
    """What a run says of the ``_job.json`` it could not write in ``output``, and what ``output`` holds instead."""
    report = output / JOB_REPORT
    instead = (
        f"{report} is the one the coordinator wrote, of the last step alone"
        if report.is_file()
        else f"{output} has no _job.json"
    )
    return f"{output_write_error(report, error)}: {instead}"


def _end_failed_jobs(
    status: dict[str, Any], reports: list[dict[str, Any]], scratch: Path, final_output: Path, keep: bool
) -> None:
    """A job of a staged run (``--blocking`` over several jobs) failed after ``reports`` succeeded; its own steps
    are already handled (:func:`_end_failed_run`). With ``keep``, the outputs kept so far in ``scratch/steps`` and
    the previous job's output (this one's input, in ``scratch/step-N``, ``N`` that job's last step's number over the
    run) move to ``OUT/_steps``, numbered as on success, and the failure names them there; without, the snapshots
    earlier steps stopped early on do, as on success (the reports name them there). ``OUT/_job.json`` gets the
    failed job's report, the earlier jobs' under ``"jobs"``, its user counters the run's so far
    (:func:`_whole_run_fields`). An ``OUT`` removed or moved away while the run ran (:func:`_output_gone`) is left
    gone."""
    if _output_gone(status, scratch, final_output):
        return
    if keep:
        held, kept = scratch / "steps", final_output / "_steps"
        stage = sum(len(report.get("steps", [])) + 1 for report in reports)  # (the previous job's last step)
        previous = scratch / f"step-{stage}"
        if reports and previous.exists():
            shutil.move(str(previous), held / previous.name)
            _rename_in_failure(status, previous, held / previous.name)
        for step in sorted(held.iterdir()):
            kept.mkdir(parents=True, exist_ok=True)
            shutil.move(str(step), kept / step.name)
            _rename_in_failure(status, step, kept / step.name)
    else:
        _note_deleted_input(status, scratch)
        # The snapshots earlier steps stopped early on, which their reports name under OUT/_steps (run_staged_jobs).
        _move_into(scratch / "stopped" / "_steps", final_output / "_steps")
    report = {**status["report"], "jobs": reports}
    _whole_run_fields(report, [*reports, status["report"]])
    _write_report(final_output, report, status)


DELETED_INPUT = " (in an intermediate output, deleted when the run ended: --keep-intermediate keeps it)"


def _note_deleted_input(status: dict[str, Any], scratch: Path) -> None:
    """An error naming a file under ``scratch``, which the run deletes, says so and how to keep it (once); not when
    ``scratch`` is gone already (removed while the run ran: the error says so)."""
    error = str(status.get("error") or "")
    if str(scratch) in error and scratch.is_dir() and not error.endswith(DELETED_INPUT):
        status["error"] = status["report"]["error"] = error + DELETED_INPUT


def _rename_in_failure(status: dict[str, Any], old: Path, new: Path) -> None:
    """Name ``new`` wherever the failure's error or traceback (and its report's) named ``old`` or a file in it."""
    pattern = re.compile(re.escape(str(old)) + r"(?![\w.-])")
    for holder in (status, status.get("report") or {}):
        for field in ("error", "traceback"):
            if isinstance(holder.get(field), str):
                holder[field] = pattern.sub(lambda _: str(new), holder[field])


def keep_stopping_snapshot(report: dict[str, Any], output: Path, final_output: Path, number: int, kept: bool) -> None:
    """Keep the snapshot an earlier step (``number``, from 1 over the whole run) stopped early on, if it did: its
    intervals are the only measure of the run's accuracy, and they went with the step's output in the scratch
    folder, while the run's ``approximate.intervals`` named ``_snapshots/LABEL/estimates-*.jsonl`` in ``OUT``, where
    no such file was (or the last step's snapshot of that label). Moved from the step's ``output`` to
    ``final_output/_steps/step-N/_snapshots/LABEL`` (unless the whole step is ``kept`` there: ``--keep-intermediate``),
    and the report's ``intervals`` made relative to ``final_output``."""
    approximate = report.get("approximate")
    if not approximate or "step" in approximate:  # (a job's report that only notes an earlier step's stop)
        return
    where = Path("_steps") / f"step-{number}" / "_snapshots" / approximate["snapshot"]
    source = output / "_snapshots" / approximate["snapshot"]
    if not kept and source.is_dir():
        (final_output / where).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), final_output / where)
    approximate["intervals"] = str(where / "estimates-*.jsonl")


def _keep_steps(scratch: Path, numbers: range, kept: Path) -> None:
    """Move ``scratch/step-N`` to ``kept/step-N`` for each step number ``N`` of ``numbers`` (numbered from 1 over the
    whole run, as its messages and ``_bad_records`` listings number the steps)."""
    if numbers:
        kept.mkdir(exist_ok=True)
    for number in numbers:
        shutil.move(str(scratch / f"step-{number}"), kept / f"step-{number}")


def _name_kept_files(final_output: Path, kept: Path, pipes: dict[str, int] | None = None) -> None:
    """The run's skipped records (``OUT/_bad_records``) read from an earlier step's output name the file where
    ``--keep-intermediate`` kept it (``kept/step-N``): they named a scratch file deleted with the run, or a pipe
    (``pipe:JOB_ID/part-N``, its offsets those of the part file; ``pipes`` numbers the steps by job id)."""

    def renamed(name: str) -> str | None:
        if name.startswith("pipe:"):
            job_id, _, part = name.removeprefix("pipe:").partition("/")
            number = (pipes or {}).get(job_id)
            return None if number is None else str(kept / f"step-{number}" / part)
        folder = kept_step_output(str(Path(name).parent))
        return None if folder is None else str(folder / Path(name).name)

    rename_files(final_output, renamed)


def _move_into(folder: Path, target: Path) -> None:
    """Move what ``folder`` holds (if it exists) into ``target``, merging folders of the same name."""
    if not folder.is_dir():
        return
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and (target / entry.name).is_dir():
            _move_into(entry, target / entry.name)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.move(str(entry), target / entry.name)


def pipeline_specs(jobs: list[JobSpec]) -> list[JobSpec]:
    """One spec per step of every job in ``jobs`` (each given as its step-0 spec), in pipeline order."""
    specs = []
    for base in jobs:
        num_steps = len(_instantiate(base).resolved_steps())
        specs += [
            dataclasses.replace(base, step=step, num_steps=num_steps, num_reduces=base.step_num_reduces(step))
            for step in range(num_steps)
        ]
    return specs


def reducers_at_once(steps: list[JobSpec], pipelined: bool) -> int:
    """How many of a run's reducers run at the same time, ``steps`` its steps' specs (:func:`pipeline_specs`): a
    pipelined run's steps run theirs side by side (their sum); steps run one after another need the most any has."""
    reducers = [step.num_reduces for step in steps]
    return sum(reducers) if pipelined else max(reducers)


STOP_EARLY_PIPELINE = (
    "--stop-when-accurate ends one job early, not a pipeline whose steps stream into each other: add --blocking "
    "(the steps then run one after another, each may stop early), or read the last step's snapshots in "
    "OUT/_snapshots/ (--snapshot-every)"
)


def run_pipeline(
    client: Client,
    jobs: list[JobSpec],
    *,
    keep_intermediate: bool = False,
    progress: bool = True,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run the steps of ``jobs`` (step-0 specs; the first one's inputs and output count) as one pipeline.

    Every step is submitted at once: each later step's maps read the previous step's reduce output as it is
    produced (``hop.pipe``), and the coordinator gives upstream steps slots first. Intermediate outputs go to a
    scratch directory (kept for retries until the pipeline ends) and are deleted, or moved to ``OUT/_steps/`` with
    ``keep_intermediate``. Returns the last step's report, with the earlier ones under ``"steps"``.
    """
    deadline = _deadline(timeout)
    first, last_job = jobs[0], jobs[-1]
    if any(job.options.get("stop_when_accurate") is not None for job in jobs):
        # A step ended at its accurate snapshot would leave the next step's maps waiting for its stream.
        raise ValueError(STOP_EARLY_PIPELINE)
    final_output = Path(last_job.output)
    prepare_output(str(final_output), first.overwrite, first.inputs, clear=False)  # (cleared as step 1 is accepted)
    run_inputs = inputs_as_given(first.inputs, first.options)  # (for the report of a failed later step)
    with _scratch(final_output) as scratch:
        stages = pipeline_specs(jobs)
        reports: list[dict[str, Any]] = []
        job_ids: list[str] = []
        outputs: list[Path] = []
        running: list[Path] | None = None  # the output of the step waited for (None: of every step submitted)
        kept = final_output / "_steps" if keep_intermediate else None  # where a failed run's steps go
        try:
            for number, stage in enumerate(stages):
                last = number == len(stages) - 1
                options = dict(stage.options)
                if not last:
                    options["pipe_output"] = True
                if number:
                    options["upstream"] = job_ids[-1]
                spec = dataclasses.replace(
                    stage,
                    inputs=first.inputs if number == 0 else (),
                    input_format=first.input_format if number == 0 else "output",
                    output=str(final_output if last else scratch / f"step-{number + 1}"),
                    overwrite=True,
                    options=options,
                )
                spec = _numbered(spec, number + 1, len(stages))
                if number == 0:
                    spec = _claiming(spec, final_output, first.overwrite)
                # Noted before the submit: a Ctrl-C during it acts as it returns, and the step it submitted is
                # reported, cancelled, if no earlier step was (the earlier ones may have ended meanwhile).
                outputs.append(Path(spec.output))
                job_ids.append(client.submit(spec))
                if progress:
                    # Said now, not as the step is followed: its task status messages are said from the start,
                    # while an earlier step is followed, and came before the line that gives its job id.
                    label = f"step {number + 1}/{len(stages)} " if len(stages) > 1 else ""
                    print(submitted_line(label, job_ids[-1], client.address), file=sys.stderr, flush=True)
            labels = {
                job_id: f"step {number + 1}/{len(job_ids)} " if len(job_ids) > 1 else ""
                for number, job_id in enumerate(job_ids)
            }
            # The steps run side by side and are followed one at a time: each one's display says the messages of
            # the steps after it too, as they come (they were said only once their step was followed, the latest
            # of each task alone).
            messages = StatusFeed(
                {job_id: (labels[job_id], stage.name) for job_id, stage in zip(job_ids, stages, strict=True)}
            )
            for number, job_id in enumerate(job_ids):
                running = [outputs[number]]
                ending = (reports, scratch, final_output, kept, 0, run_inputs)
                later = job_ids[number + 1 :]
                label = labels[job_id]
                step = _await_step(
                    client, job_id, label, progress, deadline, timeout, ending, labels, messages, later, named=True
                )
                reports.append(step)
                running = []
            for number in range(len(job_ids) - 1):
                hold_bad_records(scratch / f"step-{number + 1}", scratch / "_bad_records", number + 1)
            place_bad_records(scratch / "_bad_records", final_output, len(job_ids))
            if kept is not None:
                _keep_steps(scratch, range(1, len(job_ids)), kept)
                _name_kept_files(final_output, kept, {job_id: number for number, job_id in enumerate(job_ids, 1)})
        except (KeyboardInterrupt, TimeoutError) as error:  # (a coordinator gone has no job left to cancel)
            ending = (reports, scratch, final_output, kept, 0, run_inputs)
            _end_interrupted(client, error, timeout, outputs if running is None else running, ending)
            raise
    final = reports[-1]
    if len(reports) > 1:
        final["steps"] = reports[:-1]
        final["pipelined"] = True
        _whole_run_fields(final, reports)
        _write_run_report(final_output, final)
    return final


def run_staged_jobs(
    client: Client,
    jobs: list[JobSpec],
    *,
    keep_intermediate: bool = False,
    progress: bool = True,
    timeout: float | None = None,
) -> dict[str, Any]:
    """Run a list of jobs one after another through files (``--blocking``): each job's output, in a scratch
    directory, is the next one's input. ``keep_intermediate`` keeps every step's output but the last in
    ``OUT/_steps/step-N``, numbered over all the jobs' steps as :func:`run_pipeline` numbers them."""
    deadline = _deadline(timeout)
    counts = [len(_instantiate(job).resolved_steps()) for job in jobs]
    final_output = Path(jobs[-1].output)
    prepare_output(str(final_output), jobs[0].overwrite, jobs[0].inputs, clear=False)  # (as its first job is accepted)
    with _scratch(final_output, "jobs") as scratch:
        held = scratch / "steps"  # the earlier steps' outputs, until the last job has written OUT
        held.mkdir()
        stopped = scratch / "stopped"  # the snapshots earlier steps stopped early on (keep_stopping_snapshot)
        reports: list[dict[str, Any]] = []
        inputs, input_format = jobs[0].inputs, jobs[0].input_format
        stage = 0
        for number, job in enumerate(jobs):
            last = number == len(jobs) - 1
            output = final_output if last else scratch / f"step-{stage + counts[number]}"  # (its last step's number)
            spec = dataclasses.replace(
                job,
                inputs=tuple(inputs),
                input_format=input_format,
                output=str(output),
                overwrite=job.overwrite if number == 0 else True,
            )
            hold = held if keep_intermediate else None
            try:
                report = run_steps(
                    client,
                    spec,
                    progress=progress,
                    timeout=timeout,
                    hold=hold,
                    deadline=deadline,
                    step_offset=stage,
                    steps_in_run=sum(counts),
                    run_output=final_output if number == 0 else None,
                )
            except JobFailed as failure:
                _end_failed_jobs(failure.status, reports, scratch, final_output, keep_intermediate)
                raise
            except JobLost as lost:  # (its coordinator failed it as it stopped: reported as a failure is)
                if lost.status is not None:
                    _end_failed_jobs(lost.status, reports, scratch, final_output, keep_intermediate)
                raise
            except (KeyboardInterrupt, TimeoutError):  # run_steps cancelled its job, saying why in its _job.json
                cancelled = _cancelled_status(output)
                if cancelled is not None:
                    _end_failed_jobs(cancelled, reports, scratch, final_output, keep_intermediate)
                raise
            reports.append(report)
            if keep_intermediate and number:  # the job before's output, read by this one: its last step's output
                shutil.move(inputs[0], held / Path(inputs[0]).name)
            stage += len(reports[-1].get("steps", [])) + 1
            if not last:  # the snapshots it stopped early on, if it did, held until OUT is written
                if not keep_intermediate:
                    _move_into(output / "_steps", stopped / "_steps")  # (those of its earlier steps: run_steps)
                keep_stopping_snapshot(report, output, stopped, stage, keep_intermediate)  # (its last step's number)
            if not last:
                hold_bad_records(output, scratch / "_bad_records", stage)
            inputs, input_format = (str(output),), "output"
        place_bad_records(scratch / "_bad_records", final_output, stage)
        if keep_intermediate:
            _keep_steps(held, range(1, stage), final_output / "_steps")
            _name_kept_files(final_output, final_output / "_steps")
        else:
            _move_into(stopped / "_steps", final_output / "_steps")
    final = reports[-1]
    final["jobs"] = reports[:-1]
    _whole_run_fields(final, reports)
    _note_earlier_stop(final)
    _write_run_report(final_output, final)
    return final


def _whole_run_fields(report: dict[str, Any], parts: list[dict[str, Any]]) -> None:
    """``report`` (the last step's, the run's ``_job.json``) gets the run's fields, from ``parts``, the reports of
    every step (the last one's included), or of every job of a staged run (each job's already made a run's):

    - ``inputs``: the run's, those of its first step (the last step's own were an earlier step's output: a scratch
      directory removed at the end, or none when it was streamed to it); each step's own stay in its report.
    - ``counters.user``: summed over ``parts``. A user reads the job's totals there; each earlier step's own stay in
      its report under ``"steps"``, and the engine's counters beside them stay the last step's own (each step's
      input and output records are that step's, adding them up would count the data once per step)."""
    report["inputs"] = parts[0].get("inputs", report.get("inputs"))
    totals = total_user_counters(part.get("counters", {}).get("user", {}) for part in parts)
    report["counters"] = {**report.get("counters", {}), "user": totals}


def earlier_reports(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The reports of a run's steps before the last (``report``), in order (step 1 first): each earlier job's steps
    and that job (``"jobs"``, a ``--blocking`` run of several job files), then the last job's earlier steps
    (``"steps"``)."""
    earlier: list[dict[str, Any]] = []
    for job in report.get("jobs") or ():
        earlier += [*(job.get("steps") or ()), job]
    return earlier + list(report.get("steps") or ())


def no_records_note(report: dict[str, Any], inputs: list[str], output: str, stdin_copy: str | None) -> str | None:
    """The line ``hop run`` adds (on either engine) for a run whose input held no record (empty files, blank lines of
    a jsonl file), naming what it read as given (``stdin_copy``: the file standing for standard input); ``None`` when
    it held records. Such an input is valid, as in Hadoop, and the run succeeds, but "0 input records" alone leaves
    the user to guess whether the right input was given."""
    first = (earlier_reports(report) or [report])[0]
    if first["counters"]["map_input_records"] or report.get("approximate"):
        return None
    read = []
    for given in inputs:
        files = expand_inputs([given], output)
        size = sum(os.path.getsize(file) for file in files)
        name = "standard input" if given == stdin_copy else given
        count = "" if files == [given] else f"{counted(len(files), 'file')}, "
        read.append(f"{name} ({count}{size:,} bytes)")
    return f"hop: the input held no records: it read {', '.join(read)}"


def _note_earlier_stop(final: dict[str, Any], offset: int = 0) -> None:
    """A run whose earlier step stopped early (``--stop-when-accurate``) is approximate as a whole, since every
    later step's result is built on that step's estimates: ``final`` (the last step's report, the run's
    ``_job.json``) gets ``approximate`` as that step has it, plus ``step`` (its number, from 1 over the whole run:
    ``offset`` is the steps the run had before the first of ``final``'s, for a job of a run of several), its
    ``job_id`` and ``steps_stopped_early`` (every such step), unless the last step stopped early itself (its own
    ``approximate``, without ``step``, says so)."""
    own = final.get("approximate")
    if own and "step" not in own:
        return
    # (A job's report of a --blocking run of several jobs notes the stop of a step of its own too, with "step".)
    stopped = [(number, r) for number, r in enumerate(earlier_reports(final), offset + 1) if stopped_early(r)]
    if stopped:
        number, first = stopped[0]
        numbers = [n for n, _ in stopped]
        final["approximate"] = {
            **first["approximate"],
            "step": number,
            "job_id": first["job_id"],
            "steps_stopped_early": numbers,
        }


def stopped_early(report: dict[str, Any]) -> bool:
    """Whether the step of ``report`` itself stopped early (not only an earlier step of its job: ``step``)."""
    approximate = report.get("approximate") or {}
    return bool(approximate) and "step" not in approximate


def _instantiate(spec: JobSpec) -> Job:
    return load_job_class_in_client(spec.job_code)()


def wall_time(report: dict[str, Any]) -> float:
    return float(report["end"] - report["start"]) if report.get("end") else time.time() - report["start"]
