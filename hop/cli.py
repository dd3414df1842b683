"""The ``hop`` command line.

    hop run JOB.py INPUT... -o OUT [--workers N] [--reducers R] [--blocking] [--overwrite] [--quiet]
    hop submit JOB.py INPUT... -o OUT --coordinator tcp://HOST:PORT     (same options, an existing cluster)
    hop run --mrjob MR_JOB.py INPUT... -o OUT [-- the job's options]     (an unmodified mrjob job)
    hop run JOB.py --source URL --window 60s [--slide 10s] -o OUT        (a continuous job, until stopped)
    hop stop JOB_ID / hop windows JOB_ID / hop view JOB_ID|OUT            (continuous jobs)
    hop monitor [--coordinator tcp://HOST:PORT]                          (the cluster monitor and its dashboard)
    hop coordinator [--bind tcp://HOST:PORT]
    hop worker --coordinator tcp://HOST:PORT [--map-slots N] [--reduce-slots N] [--stream-slots N] [--rack R]
    hop shutdown --coordinator tcp://HOST:PORT [--force]                 (the coordinator and all its workers)
    hop gen text|pageviews ...                                            (seeded test data)

Exit codes: 0 success, 1 the job failed, 2 bad usage or input (argparse), 3 the cluster did not answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

from hop import prelaunch, worker_options
from hop.claims import input_claimed, inputs_left_partial, output_written_by_job, running_outputs
from hop.client import Client, CoordinatorGone, CoordinatorUnavailable, JobRejected
from hop.closed_output import watched_output
from hop.counters import print_user_counters
from hop.gen.cli import (
    COORDINATOR_HELP,
    DEFAULT_BIND,
    DEFAULT_BIND_HELP,
    ArgumentParser,
    bind_address,
    coordinator_address,
    non_negative_int,
    output_argument,
    path_argument,
    positive_float,
    positive_int,
    size_argument,
    size_at_least,
)
from hop.gen.cli import register as register_gen
from hop.given_options import Given, GivenFlag, flags_given
from hop.inputs import (
    DEFAULT_SPLIT_BYTES,
    KEEP_BYTES,
    MIN_SPLIT_SIZE_OPTION,
    InputError,
    expand_inputs,
    input_being_written,
    is_compressed,
    repeated_inputs,
)
from hop.job import INPUT_FORMATS, Job
from hop.jobspec import dump_job_class
from hop.lifetime import (
    SAME_SIGNAL_SECONDS,
    SERVING_COMMANDS,
    Interrupted,
    redeliver_swallowed_interruptions,
    redelivered,
    stop_signals_taken,
)
from hop.loader import JobFileError, load_job_file
from hop.local_cluster import ClusterStartError, LocalCluster
from hop.mrjob_adapter import MRJobRun
from hop.outputs import OutputError, OutputExistsError, OutputWriteError, check_output, claim_output
from hop.runner import (
    SNAPSHOTS_IN_FILE_ORDER,
    STOP_EARLY_PIPELINE,
    STOP_EARLY_SEQUENTIAL,
    JobFailed,
    build_spec,
    cancel_submitted,
    earlier_reports,
    no_records_note,
    online_options,
    pipeline_specs,
    reducers_at_once,
    run_pipeline,
    run_staged_jobs,
    run_steps,
    stopped_early,
    timeout_reason,
    wall_time,
)
from hop.shutdown_cli import register as register_shutdown
from hop.spark_cli import add_spark_arguments, run_spark_from_args
from hop.spark_cli import register as register_spark
from hop.stdin_input import STDIN, STDIN_COPY_OPTION, stdin_as_file
from hop.stream.cli import STREAM_ONLY, add_stream_arguments, positive_seconds, run_stream_from_args
from hop.stream.cli import register as register_stream
from hop.web.cli import add_web_arguments, unused_port, web_view
from hop.web.cli import register as register_web
from hop.wording import counted, percent, percent_like, share
from monitoring.cli import register as register_monitor


def _add_job_arguments(parser: argparse.ArgumentParser, embedded: bool, continuous: bool = False) -> None:
    parser.add_argument(
        "job",
        help="a Python file defining one hop.Job subclass, or with --mrjob an MRJob (several job files first: a "
        "pipeline, see inputs)",
    )
    parser.add_argument(
        "inputs",
        # A continuous job (--source) has no inputs; otherwise at least one, which also lets argparse take inputs
        # given after options (an optional positional would be matched, empty, too early).
        nargs="*" if continuous else "+",
        type=path_argument,
        help="input files, directories or globs (- is standard input); leading .py files are further jobs, run as "
        "a pipeline that feeds each job's output into the next (none for a continuous job: give --source)",
    )
    parser.add_argument(
        "-o", "--output", type=output_argument, required=True, help="output directory (must be empty or absent)"
    )
    parser.add_argument(
        "--reducers",
        type=positive_int,
        default=None,
        help="number of reduce tasks (default: one per worker, of the embedded cluster or of the cluster's live ones, "
        "or this machine's cores on a cluster with none live yet; "
        "with --mrjob, what the job's jobconf sets, mapreduce.job.reduces, where it does: --reducers wins over it)",
    )
    parser.add_argument(
        "--blocking",
        action=GivenFlag,
        help="Hadoop-style baseline: reducers get a map's output only after it commits",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress display, job id, summary line or user counters: only warnings, errors, task status "
        "messages and the count of bad records skipped",
    )
    parser.add_argument(
        "--split-size",
        action=Given,
        type=size_at_least(MIN_SPLIT_SIZE_OPTION, "--split-size"),
        default=DEFAULT_SPLIT_BYTES,
        help="bytes per input split, at least 64KB (default 128MiB); smaller when the input would leave map slots "
        "without a task",
    )
    parser.add_argument(
        "--spill-records",
        action=Given,
        type=positive_int,
        default=2_000_000,
        help=(
            "map output records buffered before a spill (default 2,000,000; fewer when values are large: "
            "a map without an aggregate combiner holds about 256MiB of values)"
        ),
    )
    parser.add_argument(
        "--reduce-memory",
        action=Given,
        type=size_argument,
        default=256 << 20,
        help="memory budget of a reducer for received data; past it runs are merged on disk (default 256MiB)",
    )
    parser.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default=None,
        help="override the job's input_format (output: a hop job's part files, as (key, value) pairs)",
    )
    parser.add_argument(
        "--job-class",
        default=None,
        help="the class to run when the file defines several (in a pipeline: in each job file defining one so named)",
    )
    parser.add_argument(
        "--mrjob",
        action="store_true",
        help="JOB is an unmodified mrjob MRJob file; its own options go after --",
    )
    parser.add_argument(
        "--max-attempts",
        action=Given,
        type=positive_int,
        default=4,
        help="attempts per task before the job fails (default 4)",
    )
    parser.add_argument(
        "--task-timeout",
        action=Given,
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="fail a task attempt that has not advanced (no record read, no key group reduced) for this long, "
        "e.g. 30s or 10m: its process is killed and it runs again, counting against --max-attempts (default: "
        "off; hop run only says so of one that has not for 120 s)",
    )
    parser.add_argument(
        "--skip-bad-records",
        action=Given,
        type=non_negative_int,
        default=0,
        metavar="N",
        help="skip up to N bad records per task (a map record: the map raised, or the line cannot be decoded or "
        "parsed; a reduce key: the reduce raised); list them in OUT/_bad_records/",
    )
    parser.add_argument(
        "--speculative",
        action=GivenFlag,
        help="run a backup attempt of straggling maps on another worker; the first to finish wins",
    )
    parser.add_argument(
        "--no-tail-split",
        action=GivenFlag,
        help="do not hand the rest of a running map's input to a map slot that idles at the end of the maps "
        "(tail splitting: on by default, for batch jobs taking no snapshots)",
    )
    parser.add_argument(
        "--max-line-bytes",
        action=Given,
        type=size_argument,
        default=256 << 20,
        help="longest input line accepted (default 256MiB); with --source, a longer line is a bad record, dropped",
    )
    online = parser.add_argument_group("online aggregation")
    online.add_argument(
        "--snapshot-every",
        action=Given,
        type=_fraction,
        default=None,
        metavar="F",
        help="reducers publish a snapshot with estimates at each F of the map input (e.g. 0.1) in OUT/_snapshots/, "
        "labelled with the fraction of the input it holds at least; thresholds passed together (between two "
        "progress reports, or while the snapshot before was taken) make one snapshot",
    )
    online.add_argument(
        "--order",
        action=Given,
        choices=["sequential", "random"],
        default="sequential",
        help="read input chunks in file order (default) or in a seeded random order (unbiased early estimates)",
    )
    online.add_argument("--seed", action=Given, type=int, default=None, help="seed of --order random (default 0)")
    online.add_argument(
        "--chunk-size",
        action=Given,
        type=size_at_least(MIN_CHUNK_BYTES, "--chunk-size"),
        default=1 << 20,
        help="bytes per input chunk, the unit estimates sample (default 1MiB, at least 64KB; "
        "a compressed file is one chunk)",
    )
    online.add_argument(
        "--confidence",
        action=Given,
        type=_fraction,
        default=None,
        help="confidence of the snapshots' intervals (default 0.95)",
    )
    online.add_argument(
        "--stop-when-accurate",
        action=Given,
        type=_fraction,
        default=None,
        metavar="REL",
        help="end the job with its last snapshot as the result once every interval's half-width is within REL "
        "of its estimate (marked approximate in _job.json); snapshots every 0.05 unless --snapshot-every; needs "
        "--order random",
    )
    add_stream_arguments(parser)
    parser.add_argument(
        "--keep-intermediate",
        action=GivenFlag,
        help="a pipeline (multi-step job, or several job files) also keeps each earlier step's output in "
        "OUT/_steps/step-N, N the step's number from 1 (those that finished, if a later step fails)",
    )
    parser.add_argument(
        "--timeout",
        action=Given,
        type=positive_float,
        default=None,
        help="give up after this many seconds (the whole run: all steps); the job is cancelled",
    )
    parser.add_argument(
        "--engine",
        choices=["hop", "spark"],
        default="hop",
        # (hop submit takes it only to refuse --engine spark with the reason: not listed in its help)
        help="run on hop (default) or on PySpark, unchanged, for comparison" if embedded else argparse.SUPPRESS,
    )
    add_spark_arguments(parser, listed=embedded)
    add_web_arguments(parser)
    if embedded:
        parser.add_argument(
            "--workers",
            type=positive_int,
            default=None,
            help="worker processes of the embedded cluster, one map slot each (default: cores)",
        )
        parser.add_argument(
            "--coordinator",
            action=Given,
            type=coordinator_address,
            default=None,
            help="submit to this cluster instead of starting one",
        )
    else:
        parser.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)


def _run(args: argparse.Namespace) -> int:
    if args.source:
        return _run_job(args)
    try:
        given = list(args.inputs)
        with stdin_as_file(given, args.output) as args.inputs:
            args.stdin_copy = next((copy for name, copy in zip(given, args.inputs, strict=True) if name == STDIN), None)
            return _run_job(args)
    except (InputError, OutputError) as error:  # (standard input's copy could not be made)
        return _fail(str(error), 2)
    except KeyboardInterrupt:  # while standard input was being copied (a run handles its own interruption)
        return _fail("interrupted", _interrupted_code())


BATCH_ONLY = (
    "blocking",
    "split_size",
    "spill_records",
    "skip_bad_records",
    "speculative",
    "no_tail_split",
    "keep_intermediate",
    "order",
    "seed",
    "chunk_size",
    "confidence",
    "stop_when_accurate",
    "task_timeout",
)
"""The options of ``hop run``/``hop submit`` that only a batch job uses: a continuous job (``--source``) ignored them
(``--stop-when-accurate`` promised an early stop that never came), so it refuses them, even at their default value:
each is declared with ``action=Given``/``GivenFlag``, which notes it as given (``hop.given_options``)."""


HOP_ENGINE_ONLY = (
    "blocking",
    "reduce_memory",
    "max_attempts",
    "task_timeout",
    "skip_bad_records",
    "speculative",
    "no_tail_split",
    "max_line_bytes",
    "snapshot_every",
    "order",
    "seed",
    "chunk_size",
    "confidence",
    "stop_when_accurate",
    "keep_intermediate",
    "timeout",
    "web",
    "port",
    "web_wait",
    "coordinator",
)
"""The options of a batch ``hop run`` that only hop's own engine uses: ``--engine spark`` ran without them (no
snapshots for ``--snapshot-every``, no cancel at ``--timeout``, a local Spark for ``--coordinator``), so it refuses
them. ``--split-size`` and ``--spill-records`` mean the same on Spark (``hop.spark_cli``)."""


def _given_flags(given: list[str]) -> tuple[str, str, str]:
    """``(flags, it, applies)`` for a message naming the options ``given``, in the singular or the plural."""
    one = len(given) == 1
    return ", ".join(given), "it" if one else "them", "applies" if one else "apply"


def _not_on_spark(args: argparse.Namespace) -> str | None:
    """Why options of hop's own engine were given to ``--engine spark``, which would ignore them."""
    given = flags_given(args, HOP_ENGINE_ONLY)
    if not given:
        return None
    flags, it, applies = _given_flags(given)
    return f"{flags} {applies} to hop's own engine, not to --engine spark, which would ignore {it}: drop {it}"


def _wrong_kind_of_run(args: argparse.Namespace) -> str | None:
    """Why options of a continuous job were given to a batch run, or a batch job's to a continuous one: each would
    do nothing there (``--window 60s`` on input files ran one batch job over them all, without a word)."""
    given = flags_given(args, BATCH_ONLY if args.source else STREAM_ONLY)
    if not given:
        return None
    flags, it, applies = _given_flags(given)
    if args.source:
        return f"{flags} {applies} to a batch job over input files, not to a continuous job (--source): drop {it}"
    return (
        f"{flags} {applies} to a continuous job, and this run has no --source: it would run a batch job over the input "
        f"files, ignoring {it}. Give --source URL (a continuous job reads a stream, not input files), or drop {it}"
    )


def _unused_spark_options(args: argparse.Namespace) -> str | None:
    """Why ``--spark-master``/``--spark-conf`` were given to a batch run that starts no Spark of theirs: a run on
    hop's own engine, or ``hop submit``, ran without them, exit 0. A continuous job's are checked by
    ``hop.stream.cli`` (its materialized view is compacted on ``--spark-master`` unless ``--no-view``)."""
    if args.source or args.engine == "spark":
        return None
    given = [
        flag for flag, value in (("--spark-master", args.spark_master), ("--spark-conf", args.spark_conf)) if value
    ]
    if not given:
        return None
    flags, it, applies = _given_flags(given)
    if args.coordinator:  # hop submit, or hop run --coordinator: a hop cluster runs the job
        return (
            f"{flags} {applies} to --engine spark, and this run is on the hop cluster at {args.coordinator}: drop {it}"
        )
    return f"{flags} {applies} to --engine spark, and this run is on hop's own engine: add --engine spark, or drop {it}"


def _run_job(args: argparse.Namespace) -> int:
    if getattr(args, "workers", None) and args.coordinator:
        return _fail("--workers sizes the embedded cluster; with --coordinator the cluster's own workers run it", 2)
    # (--port on Spark is refused below as an option of hop's engine: "add --web" led to a refusal of --web)
    port = unused_port(args) if args.engine != "spark" else None
    wrong_kind = _wrong_kind_of_run(args) or port or _unused_spark_options(args)
    if wrong_kind is not None:
        return _fail(wrong_kind, 2)
    if args.job_args and not args.mrjob:
        return _fail(f"the arguments after -- ({' '.join(args.job_args)}) are an mrjob job's options: add --mrjob", 2)
    if args.source:  # (it refuses --engine spark: continuous queries run on hop)
        return run_stream_from_args(args)
    if args.engine == "spark":
        if args.mrjob:
            return _fail("--mrjob runs on hop's own engine: drop --engine spark", 2)
        if not hasattr(args, "workers"):  # hop submit (its --coordinator is required, not noted as given)
            return _fail("hop submit runs a job on a hop cluster: drop --engine spark, or run it with hop run", 2)
        not_on_spark = _not_on_spark(args)
        if not_on_spark is not None:
            return _fail(not_on_spark, 2)
        try:
            job_files, _ = _job_list(args.job, args.inputs)
        except JobFileError as error:
            return _fail(str(error), 2, error.user_traceback)
        if len(job_files) > 1:
            return _fail(
                f"--engine spark runs one job file, not a pipeline ({', '.join(job_files)}): run the pipeline on hop, "
                "or write it as one job with steps()",
                2,
            )
        return run_spark_from_args(args, ending=_defer_interrupts)
    mrjob_run: MRJobRun | None = None
    try:
        job_files, args.inputs = _job_list(args.job, args.inputs)
        args.later_jobs = job_files[1:]
        if args.mrjob:
            if len(job_files) > 1:
                raise JobFileError(f"--mrjob runs one mrjob file, not a pipeline of jobs ({', '.join(job_files)})")
            if args.input_format is not None:  # (jsonl, csv: the mapper got dicts or lists, and failed in hop's code)
                raise JobFileError(
                    f"--input-format {args.input_format} sets how a hop job reads its input; an mrjob job reads lines "
                    "through its INPUT_PROTOCOL: drop --input-format (set INPUT_PROTOCOL in the job, e.g. "
                    "JSONValueProtocol for JSON lines)"
                )
            online = [
                option
                for option, given in (
                    ("--snapshot-every", args.snapshot_every),
                    ("--stop-when-accurate", args.stop_when_accurate),
                )
                if given is not None
            ]
            if online:  # (snapshots were taken, their files in hop's own lines, not the job's OUTPUT_PROTOCOL)
                raise JobFileError(
                    f"{' and '.join(online)}: snapshots are hop's online aggregation, for hop jobs: an mrjob job's "
                    "would hold hop's own lines, not its OUTPUT_PROTOCOL's, and estimate nothing (its reducers are "
                    "not hop's aggregates); drop it"
                )
            mrjob_run = MRJobRun(args.job, args.job_args, args.output, args.job_class)
            job_class = mrjob_run.job_class
        else:
            job_class = load_job_file(args.job, args.job_class, of_several=len(job_files) > 1)
        later_classes = [_load_later_job(path, args.job_class) for path in job_files[1:]]
        if args.job_class is not None and args.job_class not in [c.__name__ for c in (job_class, *later_classes)]:
            runs = zip(job_files, (job_class, *later_classes), strict=True)
            raise JobFileError(
                f"no job file defines a hop.Job subclass {args.job_class} (--job-class): "
                + "; ".join(f"{path} runs {c.__name__}" for path, c in runs)
            )
    except JobFileError as error:
        return _fail(str(error), 2, error.user_traceback)
    try:
        return _run_loaded(args, job_class, later_classes, mrjob_run)
    finally:
        if mrjob_run is not None:
            mrjob_run.close()  # the tasks' working directory


def _run_loaded(
    args: argparse.Namespace, job_class: type[Job], later_classes: list[type[Job]], mrjob_run: MRJobRun | None
) -> int:
    try:
        online_options = _online_options(args, job_class, later_classes)
    except InputError as error:
        return _fail(str(error), 2)
    workers = getattr(args, "workers", None) or os.cpu_count() or 1
    reducers = args.reducers or workers
    step_reducers = mrjob_run.step_reducers if mrjob_run is not None else None
    step_timeouts = mrjob_run.step_task_timeouts if mrjob_run is not None else None
    spec = build_spec(
        job_class,
        args.inputs,
        args.output,
        num_reduces=reducers,
        mode="blocking" if args.blocking else "pipelined",
        split_size=args.split_size,
        spill_records=args.spill_records,
        reduce_memory=args.reduce_memory,
        overwrite=args.overwrite,
        input_format=args.input_format,
        options={
            "max_attempts": args.max_attempts,
            **({"task_timeout": args.task_timeout} if args.task_timeout is not None else {}),
            "skip_bad_records": args.skip_bad_records,
            "speculative": args.speculative,
            "tail_split": not args.no_tail_split,
            "max_line_bytes": args.max_line_bytes,
            # mrjob jobs: a mapper per file (hop.planning.plan_map_inputs), lines that are not UTF-8 with their
            # bytes kept, for the job's INPUT_PROTOCOL to read (as Latin-1 for mrjob's text protocols); the output
            # rewritten in its OUTPUT_PROTOCOL by this process, which then writes _SUCCESS.
            **(
                {"map_per_file": True, "fallback_encoding": KEEP_BYTES, "success_by_client": True}
                if mrjob_run is not None
                else {}
            ),
            # An mrjob job's jobconf may set each step's reducers; --reducers wins over it.
            **({"step_reduces": steps} if (steps := _jobconf_per_step(args.reducers, step_reducers)) else {}),
            # And its task timeout (mapreduce.task.timeout); --task-timeout wins over it.
            **({"step_task_timeouts": per} if (per := _jobconf_per_step(args.task_timeout, step_timeouts)) else {}),
            # An mrjob job's mapper_raw reads each input file whole, once (hop.mrjob_adapter).
            **({"whole_files": True} if mrjob_run is not None and mrjob_run.whole_files else {}),
            **({STDIN_COPY_OPTION: os.path.abspath(copy)} if (copy := getattr(args, "stdin_copy", None)) else {}),
            **online_options,
        },
    )
    later = [dataclasses.replace(spec, job_code=dump_job_class(c), name=c.__name__) for c in later_classes]
    if mrjob_run is None and reads_parts_per_map(spec.input_format, job_class):
        spec = dataclasses.replace(spec, options={**spec.options, "map_per_part": True})
    step_specs = pipeline_specs([spec, *later])
    stages = len(step_specs)
    pipelined = stages > 1 and not args.blocking
    if pipelined and args.stop_when_accurate is not None:
        return _fail(STOP_EARLY_PIPELINE, 2)  # checked before a cluster starts (run_pipeline refuses it too)
    if args.keep_intermediate and stages == 1:
        return _fail(
            f"--keep-intermediate keeps the outputs of a pipeline's earlier steps, and {spec.name} is one step run "
            "alone, with none: drop it (or give the next job files, or define steps())",
            2,
        )
    cluster: LocalCluster | None = None
    address: str | None = args.coordinator
    client: Client | None = None
    release: Callable[[], None] | None = None
    try:
        try:
            release = claim_output(spec.output)
            # Before starting a cluster: fail fast.
            check_output(spec.output, spec.overwrite, spec.inputs, [args.job, *args.later_jobs])
        except OutputExistsError as error:
            # "not empty" (or another run's hold) said less than the coordinator's word on its job writing it.
            raise OutputExistsError(output_written_by_job(address, spec.output) or str(error)) from None
        try:
            repeats = repeated_inputs(list(spec.inputs), spec.output)  # (raises for an input that cannot be read)
        except InputError:
            _refuse_input_being_written(address, list(spec.inputs), spec.output)
            raise
        if input_claimed(spec.inputs, spec.output) is not None:  # (the coordinator's word first, if its job)
            _refuse_input_being_written(address, list(spec.inputs), spec.output)
        for repeated in [*repeats, *inputs_left_partial(spec.inputs, spec.output)]:
            print(f"hop: warning: {repeated}", file=sys.stderr)
        if address is None:
            reduce_slots = -(-reducers_at_once(step_specs, pipelined) // workers)
            _refuse_a_swarm(args, workers, reduce_slots)
            cluster = LocalCluster(
                workers=workers, map_slots=1, reduce_slots=reduce_slots, prelaunched=prelaunch.take()
            )
            cluster.start()
            address = cluster.address
            if not args.quiet:  # for hop snapshot / hop web / hop status while it runs
                print(f"hop: embedded cluster's coordinator at {address}", file=sys.stderr, flush=True)
        client = Client(address)
        try:
            if cluster is None:
                spec, later = _on_cluster(args, client, spec, later, pipelined)
            with web_view(args, address):
                report = _submit(args, client, spec, later, pipelined)
        finally:
            client.close()
    except JobFailed as failure:
        status = failure.status
        if status.get("traceback"):
            sys.stderr.write(status["traceback"])
        if failure.step is not None:  # (which of the run's steps: its progress lines number them so)
            return _fail(f"job failed in {failure.step} ({status.get('job_id', 'job')}): {failure}", 1)
        return _fail(f"job failed: {failure}", 1)
    except (JobRejected, InputError, ValueError) as error:
        return _fail(str(error), 2)
    except TimeoutError as error:
        # Given up, as on Ctrl-C: the job is cancelled, leaving OUT/_job.json saying why (stopping the embedded
        # cluster alone left no trace of the run, not even OUT; on a cluster of its own the job ran on unwatched).
        _defer_interrupts()
        cancel_submitted(client, everything=cluster is not None, reason=timeout_reason(args.timeout))
        _say_uncancelled(client if cluster is None else None)
        what = f"--timeout {args.timeout:g}s passed, and the job was cancelled" if args.timeout else None
        return _fail(f"{error}: {what}; give a longer --timeout if it needs more time" if what else str(error), 3)
    except CoordinatorGone as error:
        # Killed or crashed while the run waited on it: said at once (it waited out a 30 s timeout per request),
        # with what became of the job and its output.
        jobs = client.submitted if client is not None else []
        return _fail(error.lost_jobs(jobs, spec.output, embedded=cluster is not None), error.exit_code)
    except (CoordinatorUnavailable, ClusterStartError) as error:
        return _fail(str(error), 3)
    except KeyboardInterrupt as interruption:
        # On a cluster of its own the job would run on without anyone waiting for it; on the embedded one, the
        # cancellation is what writes OUT/_job.json saying so (and removes committed parts) before the cluster stops.
        _defer_interrupts()
        reason = interruption.cancel_reason() if isinstance(interruption, Interrupted) else None
        cancel_submitted(client, everything=cluster is not None, reason=reason)
        _say_uncancelled(client if cluster is None else None)
        return _fail("interrupted", _interrupted_code())
    finally:
        _defer_interrupts()
        if cluster is not None:
            cluster.stop()
        if release is not None:
            release()
    if mrjob_run is not None:
        try:
            mrjob_run.write_output(args.output, report)  # mrjob's OUTPUT_PROTOCOL, then _SUCCESS (success_by_client)
        except OutputWriteError as error:  # (a full disk: the job failed, its parts removed)
            return _fail(f"job failed: {error}", 1)
    failed_snapshots = _failed_snapshots(report, args.output)
    if failed_snapshots is not None:
        print(failed_snapshots, file=sys.stderr)
    if args.quiet:
        # No summary, but records left out of the output are said even so: --quiet drops the progress display,
        # and a script running quietly would otherwise never learn its output is missing records.
        skipped = _skipped_records_line(report, args.output)
        if skipped is not None:
            print(skipped, file=sys.stderr)
    else:
        print(_summary(report, args.output, args.stop_when_accurate), file=sys.stderr)
        no_records = no_records_note(report, list(args.inputs), args.output, getattr(args, "stdin_copy", None))
        if no_records is not None:
            print(no_records, file=sys.stderr)
        print_user_counters(report["counters"].get("user", {}))  # the whole run's, summed over its steps
    return 0


def _skipped_records(report: dict[str, Any]) -> int:
    """The bad records (map records and reduce keys) a run skipped, over all its steps: each is listed in OUT."""
    return sum(r["counters"].get("bad_records_skipped", 0) for r in [*earlier_reports(report), report])


def _skipped_records_line(report: dict[str, Any], output: str) -> str | None:
    """What ``hop run --quiet`` says of a run that skipped bad records (``None``: it skipped none)."""
    skipped = _skipped_records(report)
    if not skipped:
        return None
    return f"hop: {counted(skipped, 'bad record')} skipped, not in the output: {os.path.join(output, '_bad_records')}"


def _jobconf_per_step(given: object, per_step: list[Any] | None) -> list[Any] | None:
    """What an mrjob job's jobconf sets per step (``per_step``: ``None`` for a step without the setting), unless
    the option that wins over it was ``given``; ``None`` when there is nothing to set (no mrjob job, or no step
    sets it)."""
    if per_step is None or given is not None or all(value is None for value in per_step):
        return None
    return per_step


def _refuse_input_being_written(address: str | None, inputs: list[str], output: str) -> None:
    """Raise the coordinator's refusal (:func:`hop.inputs.input_being_written`) when ``inputs`` are (or hold) the
    output of a batch job still running on the cluster at ``address``, else :func:`hop.claims.input_claimed`'s
    when they are (or hold) one a run or job on this machine writes: it would read the part files committed so
    far as if they were all, or (before its first part commits) say that the output holds no file to read, as if
    the path were wrong, where the coordinator, asked a moment later, says to wait for that job. A run writing it
    makes it empty as it starts, before its job reaches a coordinator."""
    if address is not None:
        refusal = input_being_written(inputs, running_outputs(address), address)
        if refusal is not None:
            raise InputError(refusal)
    refusal = input_claimed(inputs, output)
    if refusal is not None:
        raise InputError(refusal)


def _on_cluster(
    args: argparse.Namespace, client: Client, spec: Any, later: list[Any], pipelined: bool
) -> tuple[Any, list[Any]]:
    """The job's specs for the cluster ``client`` talks to (``hop submit``, ``hop run --coordinator``): without
    ``--reducers``, one reducer per live worker, as the option says (it was this machine's core count); a cluster
    with no worker yet is told of, the job waiting for one, and an online job with more reducers than the live
    workers' reduce slots is warned that the partitions of those waiting are in no early result (a ``pipelined``
    run's steps run their reducers side by side: their sum counts; steps run in turn: the most any has)."""
    # The run's first request: --timeout (the whole run's) bounds its wait for a coordinator that does not answer
    # too, which was the client's 30 s whatever --timeout said.
    waits = client.timeout
    client.timeout = min(waits, args.timeout) if args.timeout else waits
    try:
        live = [worker for worker in client.workers() if worker["alive"]]
    finally:
        client.timeout = waits
    alive = len(live)
    if not alive:
        # No live worker to count: the reducers stay this machine's cores, and the user is told so (the help's
        # "one per live worker" cannot apply).
        sized = (
            ""
            if args.reducers is not None or "step_reduces" in spec.options  # (given, or an mrjob jobconf's)
            else f", with {counted(spec.num_reduces, 'reducer')} (this machine's cores; --reducers sets them)"
        )
        print(
            f"hop: the coordinator at {client.address} has no workers yet: the job waits for one "
            f"(hop worker --coordinator {client.address}){sized}",
            file=sys.stderr,
            flush=True,
        )
        return spec, later
    if args.reducers is None:
        spec, later = (
            dataclasses.replace(spec, num_reduces=alive),
            [dataclasses.replace(s, num_reduces=alive) for s in later],
        )
    slots = sum(worker["reduce_slots"] for worker in live)
    steps = pipeline_specs([spec, *later])
    reducers = reducers_at_once(steps, pipelined)
    if spec.options.get("online") and reducers > slots:
        side_by_side = f" at once ({len(steps)} pipelined steps')" if pipelined else ""
        fitting = slots // len(steps) if pipelined else slots
        advice = f"give --reducers {fitting} or fewer" if fitting else "run the steps in turn (--blocking)"
        # A reducer waiting for a slot starts once another ends, after the maps: until then every snapshot lacks
        # its partition, and a job asked to stop when accurate never can.
        print(
            f"hop: warning: {counted(reducers, 'reducer')}{side_by_side} on {counted(slots, 'reduce slot')} of the "
            "live workers: a partition whose reducer waits for a slot is in no snapshot until the maps end (nor can "
            f"--stop-when-accurate stop the job early); {advice} for early results of every partition",
            file=sys.stderr,
            flush=True,
        )
    return spec, later


def _failed_snapshots(report: dict[str, Any], output: str) -> str | None:
    """A warning for the snapshots of the run's last step that a partition could not take (its reduce or the job's
    ``key_stratum`` raised on partial data: the task goes on), naming the first error and where the others are;
    ``None`` if there were none. They were told of only in their ``_snapshot.json``: a run whose every snapshot
    failed looked fine."""
    failed = [
        (snapshot["label"], partition)
        for snapshot in report.get("snapshots") or []
        for partition in snapshot.get("partitions") or []
        if partition.get("error")
    ]
    if not failed:
        return None
    labels = list(dict.fromkeys(label for label, _ in failed))
    label, partition = failed[0]
    where = os.path.join(output, "_snapshots", label, "_snapshot.json")
    return (
        f"hop: warning: {counted(len(labels), 'snapshot')} could not be taken ({', '.join(labels[:5])}"
        f"{', ...' if len(labels) > 5 else ''}): partition {partition['index']} of {label}: {partition['error']} "
        f"(each snapshot's _snapshot.json has its partitions' errors: {where})"
    )


def _accurate_to(approximate: dict[str, Any]) -> str:
    """How accurate an early stop's result is, as precise as the bound asked: ``--stop-when-accurate 0.0005`` gave
    "accurate to 0.0% (asked 0.1%)"; now "0.04% (asked 0.05%)"."""
    return percent_like(approximate["max_relative_half_width"], approximate.get("stop_when_accurate") or 0.1)


def _summary(report: dict[str, Any], output: str, stop_when_accurate: float | None = None) -> str:
    """The line ``hop run`` prints for a job that succeeded: records in and out, or for a job that
    ``--stop-when-accurate`` ended early, the snapshot its output is and how much of the input that saw (and for one
    it did not end early, that it ran to the end, so its result is exact). For a
    pipeline (``report`` the last step's, the earlier ones under ``"steps"``/``"jobs"``): the whole run's time and
    the first step's input records (the last step's own were printed, and with ``--blocking`` its time alone), and
    an earlier step that stopped early is named, since every later step's result is built on its estimates."""
    earlier = earlier_reports(report)
    first = earlier[0] if earlier else report
    seconds = wall_time({**report, "start": min(r["start"] for r in [*earlier, report])})
    head = f"hop: {report['job_id']} succeeded in {seconds:.2f}s: "
    approximate = report.get("approximate")
    if approximate and "step" not in approximate:  # the last step stopped early itself (else an earlier one did)
        rows = approximate.get("rows", 0)
        confidence, intervals = approximate.get("confidence"), approximate.get("intervals")
        # The level as given (--confidence 0.9995, which the README suggests for 100 groups, said 100%).
        return (
            f"{head}stopped early, accurate to {_accurate_to(approximate)} (asked "
            f"{percent(approximate['stop_when_accurate'])}"
            + (f", each group's {percent(confidence, 0)} interval" if confidence else "")
            + f") after {share(approximate['input_fraction'], 1)} of the input: {rows:,} estimated rows (snapshot "
            f"{approximate['snapshot']}) in {output}"
            + (f", intervals in {os.path.join(output, intervals)}" if intervals else "")
            + "; groups none of whose records were read are not in it"
        )
    skipped = _skipped_records(report)
    bad = f" ({counted(skipped, 'bad record')} skipped: {os.path.join(output, '_bad_records')})" if skipped else ""
    stopped = [
        f"step {number} stopped early after {share(r['approximate']['input_fraction'], 1)} of its input, so the result "
        f"is approximate (accurate to {_accurate_to(r['approximate'])} there"
        + (
            f", intervals in {os.path.join(output, r['approximate']['intervals'])}"
            if r["approximate"].get("intervals")
            else ""
        )
        + ")"
        for number, r in enumerate(earlier, 1)
        if stopped_early(r)  # (a job's report noting the stop of a step of its own is no second stop)
    ]
    if stop_when_accurate is not None and not stopped:
        from hop.online.tracker import MIN_CHUNKS_PER_STRATUM

        # Said, not left to be inferred from a missing "stopped early": the run was asked to stop early. Why, for
        # every step that could have stopped (of several, named: the last step's alone was said, though the step
        # that could stop was often an earlier one).
        steps = [*earlier, report]
        held = [(number, r["stop_held_back"]) for number, r in enumerate(steps, 1) if r.get("stop_held_back")]
        stopped.append(
            f"no snapshot met --stop-when-accurate {percent(stop_when_accurate)} (every group's interval within it, at "
            f"least {MIN_CHUNKS_PER_STRATUM} chunks of every stratum read), so the job ran to the end and the result "
            "is exact"
            + "".join(
                f"; at the last that could have stopped {f'step {number}' if len(steps) > 1 else 'it'} "
                f"({why['snapshot']}): {why['reason']}"
                for number, why in held
            )
        )
    # Said, as a skipped record is: a job that succeeded after task attempts failed (or were lost with a worker) is
    # exact, but the faults behind them (a flaky disk, a worker dying, a map killed by --task-timeout) were told
    # only as they happened, or not at all with --quiet.
    retried = [a for r in [*earlier, report] for a in r.get("attempts", ()) if a.get("status") in ("failed", "lost")]
    if retried:
        lost = sum(a["status"] == "lost" for a in retried)
        failed = len(retried) - lost
        how = ", ".join(
            [*([f"{failed:,} failed"] if failed else []), *([f"{lost:,} lost with a worker"] if lost else [])]
        )
        stopped.append(f"task attempts run again: {how} (attempts in {os.path.join(output, '_job.json')})")
    return (
        f"{head}{first['counters']['map_input_records']:,} input records, "
        f"{counted(report['counters']['reduce_output_records'], 'output record')} in {output}{bad}"
        + "".join(f"; {note}" for note in stopped)
    )


def _say_uncancelled(client: Client | None) -> None:
    """Say which jobs of an interrupted run on a standalone cluster (``client``'s) its coordinator did not answer
    the cancellation of (hung, or starved): such a job runs on, and Ctrl-C said only "interrupted", as if it were
    cancelled (one ran to its end, writing ``_SUCCESS``)."""
    if client is None:
        return
    for job_id in client.cancel_unanswered:
        print(
            f"hop: warning: the coordinator at {client.address} did not answer the cancellation of {job_id}: the job "
            f"may still run there (hop stop {job_id} --coordinator {client.address} cancels it)",
            file=sys.stderr,
        )


def _submit(args: argparse.Namespace, client: Client, spec: Any, later: list[Any], pipelined: bool) -> dict[str, Any]:
    """Run the job (a pipeline, a staged list of jobs, or one job's steps) and return its report."""
    if pipelined:
        return run_pipeline(
            client,
            [spec, *later],
            keep_intermediate=args.keep_intermediate,
            progress=not args.quiet,
            timeout=args.timeout,
        )
    keep = args.keep_intermediate
    if later:
        return run_staged_jobs(
            client, [spec, *later], keep_intermediate=keep, progress=not args.quiet, timeout=args.timeout
        )
    return run_steps(client, spec, keep_intermediate=keep, progress=not args.quiet, timeout=args.timeout)


MAX_EMBEDDED_PROCESSES = 1024
"""The most processes ``hop run`` starts for its embedded cluster: every worker and every slot's task process
starts at once, each some 25 MB; ``--reducers 5000`` on 2 cores started 5,000, whose start starved the workers'
heartbeats: the job failed after minutes blaming the job's code for ending its processes (``--reducers 100000``:
"workers did not register within 60s")."""


def _refuse_a_swarm(args: argparse.Namespace, workers: int, reduce_slots: int) -> None:
    """Raise :class:`InputError` if the embedded cluster of ``workers`` workers, with one map slot and
    ``reduce_slots`` reduce slots each, would start more than :data:`MAX_EMBEDDED_PROCESSES` processes."""
    processes = workers * (2 + reduce_slots)  # (a worker, its map slot's task process and its reduce slots')
    if processes <= MAX_EMBEDDED_PROCESSES:
        return
    given = " and ".join(f"--{name} {value}" for name in ("workers", "reducers") if (value := getattr(args, name)))
    given = given or "the run's reducers"  # (an mrjob job's jobconf sets them)
    raise InputError(
        f"{given} would start {processes:,} processes for the embedded cluster, at most {MAX_EMBEDDED_PROCESSES:,}: "
        "each worker starts a task process per map slot and per reduce slot at once, and every reducer of a run "
        "has its own slot, to take map output as the maps write it; give fewer (the default is one worker per "
        "core, and one reducer per worker), or run on a cluster (--coordinator), where reducers beyond its slots "
        "wait for one"
    )


def _job_list(job: str, rest: list[str]) -> tuple[list[str], list[str]]:
    """``hop run A.py B.py IN...``: the leading ``.py`` arguments are the jobs of a pipeline, the rest inputs."""
    jobs = [job]
    rest = list(rest)
    if not job.endswith(".py") and (py := next((item for item in rest if item.endswith(".py")), None)):
        # (``hop run in.txt wc.py``: wc.py was taken for a pipeline's next job, and the error said no input was given)
        raise JobFileError(
            f"job file {job} is not a Python file (.py): the job file comes first, then its inputs "
            f"(hop run {py} {job} ... -o OUT)"
        )
    while rest and rest[0].endswith(".py") and os.path.isfile(rest[0]):
        jobs.append(rest.pop(0))
    if not rest:
        if len(jobs) > 1:  # (``hop run wc.py src/*.py``: the shell's .py files were all taken for jobs)
            raise JobFileError(f"no input given after the job files {', '.join(jobs)}: {LATER_JOBS}")
        raise JobFileError("no input given after the job file")
    return jobs, rest


LATER_JOBS = (
    ".py files after the first job file are further jobs of a pipeline; to read .py files as input, give their "
    "directory or a quoted glob ('src/*.py')"
)
"""How ``hop run`` reads ``.py`` files after the job file, for an error that may come of it."""


def reads_parts_per_map(input_format: str, job_class: type[Job]) -> bool:
    """Whether a run of ``job_class`` reading ``input_format`` has a map per input file, an empty one too
    (``map_per_part``, as a pipeline's later step has one per partition of the step before): when it reads a hop
    job's part files (``output``) and its first step's map has ``mapper_init``/``mapper_final``, whose output
    depends on how many maps run. Small part files shared a map, so the job run on a saved output gave another
    output than run after that job in a pipeline (a map counting its records in ``mapper_final``: 1 map, against 2
    for 2 reducers' parts). Jobs without those hooks keep the packing: their output does not depend on it."""
    if input_format != "output":
        return False
    first = job_class().resolved_steps()[0]
    return first.mapper_init is not None or first.mapper_final is not None


def _load_later_job(path: str, class_name: str | None = None) -> type[Job]:
    """The job class of ``path``, a pipeline's further job file (``class_name``: ``--job-class``, which picks the
    class of that name in each job file defining one); a file that defines none may have been meant as input, and
    the error says how to give it so."""
    try:
        return load_job_file(path, class_name, of_several=True)
    except JobFileError as error:
        if "(found: none)" not in str(error):
            raise
        raise JobFileError(f"{error} ({LATER_JOBS})", error.user_traceback) from None


MIN_CHUNK_BYTES = 64_000
"""The smallest ``--chunk-size``, 64KB in the decimal units sizes are given in (it was 64 KiB, so the documented
``--chunk-size 64KB`` was refused as below 64KB): every chunk is a run per reducer and a unit of the estimator's
bookkeeping, so tiny chunks cost far more than they add to the randomness (1 KB chunks made a 1 MB job take 5 s,
10-byte ones failed it)."""


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1 (exclusive), got {text}")
    return value


def _online_options(args: argparse.Namespace, job_class: type[Job], later_classes: list[type[Job]]) -> dict[str, Any]:
    """The online options of ``hop run``/``hop submit`` (``later_classes``: a pipeline's further jobs, which get the
    same); raises :class:`InputError` for one that would do nothing (it was silently ignored: a user thought the job
    used it)."""
    if args.seed is not None and args.order != "random":
        raise InputError("--seed seeds the order of --order random, which this run does not use: add --order random")
    if args.stop_when_accurate is not None and args.order != "random":
        raise InputError(STOP_EARLY_SEQUENTIAL)  # (online_options refuses it too, for callers of the API)
    if args.stop_when_accurate is not None and not _estimates(job_class, later_classes):
        raise InputError(
            "--stop-when-accurate stops on the intervals of the estimates of Sum, Count and Mean, and no step of "
            "this run reduces with one (Min, Max, TopK, a hand-written reduce: their snapshots hold the values so "
            "far, which no interval bounds), so the job would always run to the end: drop it, or use "
            "--snapshot-every F to watch the values so far"
        )
    chunked = args.order == "random" or args.snapshot_every is not None or args.stop_when_accurate is not None
    if flags_given(args, ["chunk_size"]) and not chunked:
        raise InputError(
            "--chunk-size sets the chunks that snapshots and --order random read input in, and this run uses neither "
            "(its maps read --split-size splits): add --snapshot-every F or --order random, or drop it"
        )
    if flags_given(args, ["chunk_size"]) and chunked:
        _check_chunk_size_applies(list(args.inputs))
    if args.confidence is not None and args.snapshot_every is None and args.stop_when_accurate is None:
        raise InputError(
            "--confidence sets the intervals of the snapshots' estimates, which this run does not take: add "
            "--snapshot-every F (or --stop-when-accurate REL)"
        )
    if args.snapshot_every is not None and args.order != "random" and _estimates(job_class, later_classes):
        # Said, not left to docs/online.md: the snapshots' intervals look the same in either order.
        print(f"hop: warning: {SNAPSHOTS_IN_FILE_ORDER}", file=sys.stderr)
    return online_options(
        job_class,
        list(args.inputs),
        snapshot_every=args.snapshot_every,
        order=args.order,
        seed=0 if args.seed is None else args.seed,
        chunk_size=args.chunk_size,
        confidence=0.95 if args.confidence is None else args.confidence,
        stop_when_accurate=args.stop_when_accurate,
    )


def _check_chunk_size_applies(inputs: list[str]) -> None:
    """Raise :class:`InputError` when every input file is compressed: each is read whole as one chunk, so
    ``--chunk-size`` changed nothing (``hop gen pageviews`` writes .gz files, and docs/online.md advises smaller
    chunks for skewed data)."""
    if STDIN in inputs:
        return  # (read into a plain file)
    try:
        files = expand_inputs(inputs)
    except InputError:
        return  # (said when the job is built)
    if files and all(is_compressed(file) for file in files):
        raise InputError(
            f"--chunk-size cuts plain input files into chunks, and every input file of this run is compressed "
            f"({len(files):,} file{'s' if len(files) != 1 else ''}), which is read whole as one chunk: drop it, or "
            "decompress the input to read it in smaller chunks"
        )


def _estimates(job_class: type[Job], later_classes: list[type[Job]]) -> bool:
    """Whether a step of the run's jobs reduces with an aggregate whose snapshots estimate with intervals."""
    from hop.online.state import estimate_kind

    return any(
        estimate_kind(step.reducer) is not None
        for job in (job_class, *later_classes)
        for step in job().resolved_steps()
    )


def _snapshot(args: argparse.Namespace) -> int:
    client = Client(args.coordinator, timeout=10, running=True)
    try:
        reply = client.snapshot_now(args.job_id)
        output = client.job(args.job_id).get("output")  # (it printed "OUT/_snapshots/...": the user had to know)
    except (CoordinatorUnavailable, JobRejected) as error:
        return _fail(str(error), error.exit_code)
    finally:
        client.close()
    folder = os.path.join(output or "OUT", "_snapshots", reply["label"])
    print(f"snapshot {reply['label']} requested (seq {reply['seq']}); it appears under {folder}")
    return 0


def _fail(reason: str, code: int, user_traceback: str | None = None) -> int:
    """Print ``hop: error: REASON`` on stderr, after the user's traceback if there is one; return ``code``."""
    if user_traceback:
        sys.stderr.write(user_traceback)
    print(f"hop: error: {reason}", file=sys.stderr)
    return code


def _coordinator(args: argparse.Namespace) -> int:
    from hop import coordinator

    argv = ["--bind", args.bind, "--heartbeat-timeout", str(args.heartbeat_timeout)]
    if args.keep_jobs is not None:
        argv += ["--keep-jobs", str(args.keep_jobs)]
    return coordinator.main(argv)


def _worker(args: argparse.Namespace) -> int:
    from hop import worker

    return worker.main(worker_options.to_argv(args))


def _status(args: argparse.Namespace) -> int:
    client = Client(args.coordinator, timeout=10, running=True)
    try:
        if args.job_id is None:  # the cluster at a glance: its workers and every job it knows
            status: Any = {"workers": client.workers(), "jobs": client.jobs()}
        else:
            status = client.status(args.job_id)
    except (CoordinatorUnavailable, JobRejected) as error:
        return _fail(str(error), error.exit_code)
    finally:
        client.close()
    print(json.dumps(status, indent=2))
    return 0


def build_parser(continuous: bool = False) -> argparse.ArgumentParser:
    """The whole command line; ``continuous``: ``run``/``submit`` got ``--source`` (a continuous job, no inputs)."""
    parser = ArgumentParser(prog="hop", description="A pipelined MapReduce engine.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a job (on an embedded local cluster unless --coordinator)")
    _add_job_arguments(run, embedded=True, continuous=continuous)
    run.set_defaults(func=_run)
    submit = commands.add_parser("submit", help="run a job on an existing cluster")
    _add_job_arguments(submit, embedded=False, continuous=continuous)
    submit.set_defaults(func=_run)
    coord = commands.add_parser("coordinator", help="start a coordinator; prints its address")
    coord.add_argument(
        "--bind", type=bind_address, default=DEFAULT_BIND, help=f"address to listen on ({DEFAULT_BIND_HELP})"
    )
    coord.add_argument(
        "--heartbeat-timeout",
        type=positive_float,
        default=5.0,
        help="seconds of silence after which a worker is lost and its tasks run again (default 5)",
    )
    coord.add_argument(
        "--keep-jobs",
        type=positive_int,
        default=None,
        help="finished jobs kept in memory (default 100; older ones: see their _job.json)",
    )
    coord.set_defaults(func=_coordinator)
    work = commands.add_parser("worker", help="start a worker for a coordinator")
    worker_options.add_arguments(work)
    work.set_defaults(func=_worker)
    status = commands.add_parser(
        "status", help="print a job's status (or, without one, the cluster's workers and jobs) as JSON"
    )
    status.add_argument("job_id", nargs="?", help="the job (as hop run or hop submit printed it); none: the cluster")
    status.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)
    status.set_defaults(func=_status)
    snapshot = commands.add_parser("snapshot", help="ask a running job's reducers for a snapshot now")
    snapshot.add_argument("job_id", help="the running job")
    snapshot.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)
    snapshot.set_defaults(func=_snapshot)
    register_stream(commands)
    register_monitor(commands)
    register_gen(commands)
    register_web(commands)
    register_spark(commands)
    register_shutdown(commands)
    return parser


_signalled: list[int] = []
"""The signals that interrupted the command, first first (its exit code is 128 + the first's number)."""

_taken_signals: list[int] = []
"""The signals the command stops on (``hop.lifetime.stop_signals_taken``), as found when it started."""

_last_interruption: list[float] = []
"""When (monotonic) the latest signal taken as an interruption came."""


def _interrupt(signum: int, frame: object) -> None:
    """The handler of Ctrl-C and SIGTERM: raise :class:`~hop.lifetime.Interrupted`, a KeyboardInterrupt, once per
    :data:`SAME_SIGNAL_SECONDS`, and again when Python swallowed the one raised (``hop.lifetime.redelivered``)."""
    if redelivered(signum):
        raise Interrupted(signum, _command_name())  # (noted already, when it first came)
    now = time.monotonic()
    if _last_interruption and now - _last_interruption[-1] < SAME_SIGNAL_SECONDS:
        return
    _last_interruption.append(now)
    _signalled.append(signum)
    raise Interrupted(signum, _command_name())  # (which: a run on Spark sets its own exit code, hop.spark_cli)


_command: list[str] = []
"""The command being run (``run``, ``submit``...), once ``main`` parsed it: what a cancelled job's error names."""


def _command_name() -> str | None:
    return f"hop {_command[0]}" if _command else None


def _defer_interrupts() -> None:
    """From now on Ctrl-C and SIGTERM are noted (the exit code says so) but interrupt nothing: ``hop run`` is
    ending, cancelling its job and stopping the embedded cluster (both bounded). A second Ctrl-C or SIGTERM that
    landed there ended ``hop run`` with a KeyboardInterrupt traceback, exit code 130 whatever the signal, and the
    cluster's temporary directory left in /tmp. A reader of its output going away then interrupts nothing either
    (:func:`_output_closed`): what is left to print is dropped."""
    _deferred.append(True)
    for number in _taken_signals:
        signal.signal(number, lambda signum, frame: _signalled.append(signum))


_deferred: list[bool] = []
"""Not empty once :func:`_defer_interrupts` was called: the command is ending."""


def _output_closed() -> None:
    """The reader of the command's standard output or error went away (``hop run ... | head -1``;
    :mod:`hop.closed_output`): an interruption, as SIGPIPE (exit code 141), so that a run cancels its job and says
    why in its ``_job.json``; it ended on a ``BrokenPipeError`` past all that, its job abandoned. Once the command is
    ending (:func:`_defer_interrupts`), nothing: a run that succeeded still exits 0, its summary dropped."""
    if _deferred:
        return
    _signalled.append(signal.SIGPIPE)
    raise Interrupted(signal.SIGPIPE, _command_name())


def _interrupted_code() -> int:
    """The shell's exit code for the interruption: 130 for Ctrl-C (SIGINT), 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + (_signalled[0] if _signalled else signal.SIGINT)


def _mrjob_options_hint(argv: list[str], unknown: list[str]) -> str:
    """For ``hop run --mrjob`` given options hop does not know: where an mrjob job's own options go (``python
    mr_job.py --top 2 IN`` takes them among the inputs, hop after ``--``)."""
    if "--mrjob" not in argv:
        return ""
    usage = f"hop {argv[0]} --mrjob JOB IN... -o OUT -- {' '.join(unknown)} ..."
    return f" (an mrjob job's own options go after --, with their values: {usage})"


def _submit_workers_hint(argv: list[str], unknown: list[str]) -> str:
    """For ``hop submit --workers N``: the option sizes ``hop run``'s embedded cluster, which ``hop submit`` has not
    (``hop run --coordinator`` says so as it refuses it)."""
    if argv[:1] != ["submit"] or not any(word == "--workers" or word.startswith("--workers=") for word in unknown):
        return ""
    return " (--workers sizes hop run's embedded cluster; hop submit runs on the cluster's own workers: drop it)"


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``argv`` names (``hop gen text``), whose usage and name an error about its
    arguments gives: the whole command's said ``usage: hop [-h] {run,submit,...}`` and ``hop: error: ...``, as if
    the command itself were unknown."""
    for word in argv:
        commands = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        if not commands or word not in commands[0].choices:
            break
        parser = commands[0].choices[word]
    return parser


class _NoInputs(Exception):
    """``hop run --mrjob JOB -o OUT`` was given no input (:func:`_parse_known_args`)."""


def _parse_known_args(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """``parser.parse_known_args(argv)``; for ``hop run --mrjob`` (or ``submit``) given no input, with standard
    input (``-``) as its input, as an mrjob job reads it given none (``python mr_job.py < IN``): hop's usage error
    for the missing inputs was all a user moving that command got. (Inputs stay required otherwise: an optional
    positional would be matched, empty, before the options that may come between the job and its inputs.)"""
    if argv[:1] not in (["run"], ["submit"]) or "--mrjob" not in argv:
        return parser.parse_known_args(argv)
    command = _command_parser(parser, argv)
    complain = command.error

    def error(message: str) -> NoReturn:
        if message.endswith("required: inputs"):
            raise _NoInputs
        complain(message)

    command.error = error  # type: ignore[method-assign]
    try:
        return parser.parse_known_args(argv)
    except _NoInputs:
        pass
    finally:
        command.error = complain  # type: ignore[method-assign]
    return parser.parse_known_args([*argv, STDIN])


def main(argv: list[str] | None = None) -> int:
    # SIGTERM (``kill``, a timeout) and SIGHUP (the terminal closed) end a run like Ctrl-C does: the embedded
    # cluster is stopped on the way out.
    _taken_signals[:] = stop_signals_taken()
    redeliver_swallowed_interruptions()
    for number in _taken_signals:
        signal.signal(number, _interrupt)
    argv = list(sys.argv[1:] if argv is None else argv)
    job_args: list[str] = []
    if argv[:1] in (["run"], ["submit"]) and "--" in argv:  # what follows -- are an mrjob job's own options
        argv, job_args = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    continuous = any(arg == "--source" or arg.startswith("--source=") for arg in argv)
    try:
        # (inside the try: a Ctrl-C while the parser was built, some 20 ms, printed an Interrupted traceback and
        # exited 1)
        parser = build_parser(continuous)
        args, unknown = _parse_known_args(parser, argv)
        if unknown:
            hints = _mrjob_options_hint(argv, unknown) + _submit_workers_hint(argv, unknown)
            message = f"unrecognized arguments: {' '.join(unknown)}{hints}"
            _command_parser(parser, argv).error(message)
        args.job_args = job_args
        _command[:] = argv[:1]
        with watched_output(_output_closed):
            return int(args.func(args))
    except KeyboardInterrupt:  # a command without a clean-up of its own (hop gen, hop status...): no traceback
        if argv[:1] and argv[0] in SERVING_COMMANDS:
            return 0  # (stopped while it started: as when stopped while it serves; it cleaned up what it had made)
        if _signalled[:1] == [signal.SIGPIPE]:
            return 128 + signal.SIGPIPE  # (its output's reader went away: `hop status | head` wants no word more)
        return _fail("interrupted", _interrupted_code())
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        return 128 + signal.SIGPIPE  # as a command killed by SIGPIPE: `hop status | head` wants no traceback


def _stdout_closed() -> bool:
    """Whether standard output's reader has gone (``hop windows JOB | head``); if so, it is pointed at /dev/null so
    that the interpreter's last flush at exit does not fail again."""
    import select

    poller = select.poll()
    poller.register(sys.stdout.fileno(), select.POLLOUT)
    if not any(event & (select.POLLERR | select.POLLHUP) for _, event in poller.poll(0)):
        return False  # (a pipe without a reader polls as an error)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return True


if __name__ == "__main__":
    sys.exit(main())
