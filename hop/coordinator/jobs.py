"""Jobs as clients ask about them: submission, status, the job list, and retiring jobs that ended.

``submit`` plans the job's map inputs (``hop.planning``), checks and prepares its output (refused while a running job
writes it, or when it reads a running batch job's output) and holds that output open until the job ends
(``hop.outputs.OutputGuard``). ``status`` with ``wait`` is held until the job ends or the wait runs out. A coordinator
keeps its newest :data:`KEEP_JOBS` ended jobs (``hop coordinator --keep-jobs``) and remembers :data:`RETIRED_IDS`
more by id, so that a question about one says where its report is; an id of a job from before it started is said to
be a predecessor's (job ids carry their submission time: :data:`JOB_ID_SHAPE`).
"""

from __future__ import annotations

import collections
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hop.claims import input_claimed
from hop.coordinator.host import CoordinatorHost
from hop.inputs import InputError, Split, expand_inputs, input_being_written
from hop.jobspec import JobSpec
from hop.online.tracker import SnapshotTracker
from hop.outputs import OutputExistsError, OutputGuard, check_output, coordinator_kept, prepare_output
from hop.planning import plan_map_inputs
from hop.scheduler import FinishJob, JobState, task_timeout, task_timeout_setting
from hop.spilldirs import kept_step_output, scratch_step
from hop.stream.tracker import WindowTracker

if TYPE_CHECKING:
    from hop.stream.options import StreamOptions

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


STALLED_STATUS_SECONDS = 5.0
"""A job's status lists its running attempts that have not advanced for this long (``stalled``): ``hop run`` says
so of one stalled much longer (``hop.runner.STALLED_NOTE_SECONDS``)."""

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
class StatusWaiter:
    """A ``status`` request held until its job ends or its wait runs out (``on_status``), with what it asked."""

    identity: bytes
    job_id: str
    deadline: float
    """``time.monotonic()`` at which it is answered if the job still runs."""
    status_after: int | None
    status_of: tuple[str, ...]


class JobRequests(CoordinatorHost):
    """Clients' requests about jobs: ``submit``, ``status``, ``jobs``, ``job``; retiring ended jobs."""

    # State of its own (set up in ``Coordinator.__init__``)
    keep_jobs: int
    started_at: float
    retired: collections.OrderedDict[str, str]
    submitters: dict[str, bytes]
    status_waiters: list[StatusWaiter]
    _job_numbers: Iterator[int]
    _status_numbers: Iterator[int]

    def on_submit(self, identity: bytes, msg: dict[str, Any]) -> None:
        try:
            spec = JobSpec.from_wire(msg["job"])
            job_id = f"job-{time.strftime(JOB_ID_TIME)}-{next(self._job_numbers):04d}"
            spec = spec.with_id(job_id)
            options = spec.options
            online = bool(options.get("online"))
            upstream = self._upstream_of(spec)
            self._refuse_input_being_written(spec, upstream)
            stream = _stream_options(spec) if options.get("stream") else None
            task_timeout(options, spec.step)  # (refused here, before any output is cleared: JobState takes it)
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
                    per_file=bool(options.get("map_per_part")),
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
                self._refuse_shared_output(output, spec.overwrite)
                check_output(output, spec.overwrite, spec.inputs, kept=kept)
            for output in outputs:
                prepare_output(output, spec.overwrite, spec.inputs, kept=kept)
            held = OutputGuard(spec.output)  # (gone again at once: refused, as removed)
            if stream is None:
                # Never empty while the job runs: a run that made this directory as it started, to hold it against
                # other runs on its host (hop.outputs.claim_output), removes it as it ends if empty, and one refused
                # meanwhile took it from this job, accepted without that hold (from another host, or the API),
                # before its reducers got a slot to make this folder in it. Removed as the job ends. Held until
                # then, so that a run on this host that would read or write it learns it is being written, also
                # when the job's own run holds nothing there (hop.claims).
                held.folder(Path(spec.output) / "_temporary")
                held.hold_scratch()
        except (InputError, OutputExistsError, ValueError, TypeError, OSError) as error:
            self._send(identity, "error", message=str(error))
            return
        max_attempts = int(options.get("max_attempts", 4))
        job = self.jobs[job_id] = JobState(spec, splits, max_attempts, status_numbers=self._status_numbers)
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
            job.windows = WindowTracker(
                spec.num_reduces, len(stream.sources), stream.window.describe(), stream.keep_windows
            )
        self._send(identity, "submitted", job_id=job_id, maps=len(splits))
        self.submitters[job_id] = identity
        if not splits and not self.jobs[job_id].reduces:
            self._execute(self.jobs[job_id], [FinishJob("succeeded")])

    def _refuse_shared_output(self, output: str, overwrite: bool) -> None:
        """Refuse a job that would write ``output`` while a running job writes it: both would write its parts (and
        with ``--overwrite`` the new one would first delete the running one's). With ``overwrite``, also one whose
        ``output`` holds an input file of a running batch job, or a running job's output: clearing it
        deleted them under that job, which then failed (its input gone, or its output), though this coordinator
        knew of it, as it knows of a job reading a running job's output (:meth:`_refuse_input_being_written`)."""
        target = Path(output).resolve()
        for other in self.jobs.values():
            if other.state != "running":
                continue
            job_id = other.spec.job_id
            if Path(other.spec.output) == Path(output):
                raise OutputExistsError(
                    f"output directory {output} is being written by job {job_id}, still running; "
                    f"wait for it, stop it (hop stop {job_id}) or choose another"
                )
            if Path(other.spec.output).resolve() in target.parents:
                # Its files would be among that job's parts: a job reading that output would read them too.
                raise OutputExistsError(
                    f"output directory {output} is inside {other.spec.output}, the output of job {job_id}, still "
                    "running: its files would be mixed with that job's; choose a folder outside it"
                )
            if not overwrite:
                continue  # (nothing is cleared: a folder holding either is not empty, which check_output refuses)
            if target in Path(other.spec.output).resolve().parents:
                what = f"holds {other.spec.output}, the output of job {job_id}"
            else:
                read = _file_read_within(other, target) or _source_within(other, target)
                if read is None:
                    continue
                what = f"holds {read}, an input of job {job_id}"
            raise OutputExistsError(
                f"output directory {output} {what}, still running: --overwrite would delete it under that job; "
                f"wait for it, stop it (hop stop {job_id}) or choose another"
            )

    def _refuse_input_being_written(self, spec: JobSpec, upstream: JobState | None) -> None:
        """Refuse a job that would read the output directory of a batch job still running, or a folder holding it:
        it read the part files committed so far, part of the data, and succeeded on it as if on all (or said the
        directory held no file). A pipeline reads its ``upstream`` job's output as it is written, through the pipe;
        a continuous job's windows are each complete once written, so reading them as they come is left alone. A job
        reading the output of a batch run on this machine that this coordinator does not run is refused too
        (:func:`hop.claims.input_claimed`; the run's output that a first step claims, ``run_output``, is its own)."""
        writing = {
            Path(job.spec.output).resolve(): job.spec.job_id
            for job in self.jobs.values()
            if job.state == "running" and job.windows is None and job is not upstream
        }
        refusal = input_being_written(spec.inputs, writing, self.address)
        if refusal is None and upstream is None and not spec.options.get("stream"):
            # A run on this machine with a cluster of its own (``hop run``) is unknown to this coordinator: its
            # holds say it writes there. A client of hop's own tested them before submitting; a job given through
            # the API, or by a client on another host, was accepted and read the parts committed so far as all.
            refusal = input_claimed(spec.inputs, str(spec.options.get("run_output") or spec.output))
        if refusal is not None:
            raise InputError(refusal)

    def on_status(self, identity: bytes, msg: dict[str, Any]) -> None:
        """A job's progress (and report, once it ended). With ``wait`` (seconds, at most 5) the reply to a running
        job is held until it ends or the wait runs out, so that a client learns of the end at once, not at its
        next poll."""
        job = self.jobs.get(msg["job_id"])
        if job is None:
            self._unknown_job(identity, msg["job_id"])
            return
        wait = min(float(msg.get("wait") or 0.0), 5.0)
        after = msg.get("status_after")
        status_of = tuple(msg.get("status_of") or ())
        if wait > 0 and job.state == "running":
            self.status_waiters.append(StatusWaiter(identity, msg["job_id"], time.monotonic() + wait, after, status_of))
            return
        self._send_status(identity, job, after, status_of)

    def _answer_status_waiters(self) -> None:
        if not self.status_waiters:
            return
        now = time.monotonic()
        held = []
        for waiter in self.status_waiters:
            job = self.jobs[waiter.job_id]
            if job.state == "running" and now < waiter.deadline:
                held.append(waiter)
            else:
                self._send_status(waiter.identity, job, waiter.status_after, waiter.status_of)
        self.status_waiters = held

    def _poll_milliseconds(self) -> int:
        """How long the loop may wait for a message: 100 ms, less when a held status reply falls due sooner."""
        if not self.status_waiters:
            return 100
        due = min(waiter.deadline for waiter in self.status_waiters) - time.monotonic()
        return max(0, min(100, math.ceil(due * 1000)))

    def _send_status(
        self, identity: bytes, job: JobState, status_after: int | None = None, status_of: tuple[str, ...] = ()
    ) -> None:
        """``status_after``: the task status messages the client has (``JobState.task_statuses``); with it,
        ``status_of`` names more jobs (a pipeline's other steps, which run beside the one the client waits for)
        whose messages since then come too, numbered with the job's (a job this coordinator no longer knows brings
        none)."""
        status = job.progress()
        status["name"] = job.spec.name
        messages = job.task_statuses(status_after)
        if status_after is not None and status_of:
            for other in filter(None, map(self.jobs.get, status_of)):
                if other is not job:
                    messages += other.task_statuses(status_after)
            messages.sort(key=lambda entry: entry["seq"])
        status["task_status"] = messages
        status["workers_alive"] = sum(w.alive for w in self.workers.values())
        waiting = self._slots_held_from(job)
        if waiting is not None:
            status["waiting"] = waiting
        stalled = [a for a in self._advancing_attempts(job, time.time()) if a["stalled_s"] >= STALLED_STATUS_SECONDS]
        if stalled:
            if job.task_timeout is not None:  # (hop run's note says the attempt will be killed then)
                setting = task_timeout_setting(job.spec.options, job.task_timeout)
                stalled = [{**a, "task_timeout": job.task_timeout, "task_timeout_setting": setting} for a in stalled]
            status["stalled"] = stalled
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

    def _job_summary(self, job: JobState) -> dict[str, Any]:
        progress = job.progress()
        return {
            **{k: progress[k] for k in ("job_id", "state", "map_fraction", "reduce_fraction", "maps_total")},
            **{k: progress[k] for k in ("maps_done", "reduces_total", "reduces_done", "input_records", "error")},
            "name": job.spec.name,
            "step": job.spec.step,  # (from 0, of num_steps: a multi-step job's steps share its name)
            "num_steps": job.spec.num_steps,
            **job.run_step,  # (from 1 over the run that submitted it, as its messages number its steps)
            "submitted_at": job.submitted_at,
            "finished_at": job.finished_at,
            "output": job.spec.output,
            **_step_output(job),
            "input_fraction": job.processed_fraction(),
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
            self.chunk_strata.pop(job_id, None)  # (an online job's lists a stratum per input chunk)
            self._forget_links(job_id)
            self.retired[job_id] = job.spec.output
            if len(self.retired) > RETIRED_IDS:
                self.retired.popitem(last=False)

    def _no_job(self, job_id: str) -> str:
        """Why this coordinator knows no job ``job_id``. An id from before it started is a job of the coordinator
        that ran at its address before when one did (its workers came over: restarted coordinators do not know
        their predecessors' jobs); with no sign of one, the id is most likely mistyped, and the reply says both."""
        if not submitted_before(job_id, self.started_at):
            # (a bare "no job ID" left a user who mistyped it, or asked another cluster, with nothing to do next)
            return (
                f"no job {job_id}: check the id (`hop status --coordinator {self.address}` lists the jobs this one "
                "knows)"
            )
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


def _stream_options(spec: JobSpec) -> StreamOptions:
    """The options of continuous job ``spec``. The modules of continuous jobs (their options, windows and sources,
    ~7 ms) are imported by the first that comes: an embedded cluster's launcher imports this module before every
    ``hop run`` can start its job, and a batch job needs none of them."""
    from hop.stream.options import StreamOptions

    return StreamOptions.from_spec(spec)


def _source_within(job: JobState, folder: Path) -> Path | None:
    """A ``tail:`` or ``replay:`` path of continuous ``job`` (a relative one in the directory the job was run from)
    that is ``folder`` or lies below it, or None: an ``--overwrite`` clearing it deleted the files the job follows,
    and the lines written to them since."""
    stream = job.spec.options.get("stream")
    if not stream:
        return None  # (a batch job)
    from hop.stream.sources import source_paths  # (continuous jobs only: see _stream_options)

    directory = Path(stream.get("directory") or ".")
    for path in source_paths(list(stream.get("sources") or ())):
        where = (directory / path).resolve()
        if where == folder or folder in where.parents:
            return where
    return None


def _file_read_within(job: JobState, folder: Path) -> Path | None:
    """One of ``job``'s input files (as its map tasks name them, resolved) that is ``folder`` or lies below it, or
    None. Resolved per directory, since a job may read thousands of files of a few directories."""
    directories: dict[str, Path] = {}
    for task_input in job.splits:
        for split in [task_input] if isinstance(task_input, Split) else [chunk.split for chunk in task_input]:
            name, file = os.path.split(split.path)
            if name not in directories:
                directories[name] = Path(name).resolve()
            where = directories[name]
            if where == folder or folder in where.parents:
                return where / file
    return None
