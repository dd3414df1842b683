"""The command-line parts of continuous jobs: ``hop run JOB --source ...``, ``hop stop``, ``hop windows``,
``hop view``.

    hop run jobs/stream_wordcount.py --source tail:logs/ --window 60s --slide 10s -o out/
    hop run jobs/stream_wordcount.py --source zmq:tcp://127.0.0.1:5600 --window 1000r -o out/
    hop stop JOB_ID --coordinator ADDRESS        (or Ctrl-C in the hop run)
    hop windows JOB_ID --coordinator ADDRESS     (the windows written so far, as JSON lines)
    hop view OUT | JOB_ID --coordinator ADDRESS  (where the Parquet materialized view is)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hop.client import Client, CoordinatorGone, CoordinatorUnavailable, JobRejected
from hop.gen.cli import COORDINATOR_HELP, coordinator_address, non_negative_int, positive_int
from hop.given_options import Given, GivenFlag, flags_given
from hop.spark_master import spark_master_url
from hop.stream.tracker import KEEP_WINDOWS
from hop.stream.windows import WindowSpec, WindowSpecError, parse_duration
from hop.wording import counted

__all__ = ["STREAM_ONLY", "add_stream_arguments", "register", "run_stream_from_args"]

STREAM_ONLY = (
    "window",
    "slide",
    "lateness",
    "fidelity",
    "max_latency",
    "checkpoint_every",
    "checkpoint_seconds",
    "sink",
    "view_interval",
    "no_view",
    "duration",
    "keep_windows",
)
"""The options of :func:`add_stream_arguments` besides ``--source``: only a continuous job uses them, so a batch run
refuses them (``hop.cli``); each is declared with ``action=Given``/``GivenFlag`` so that one given at its default
value is told from one left out (``hop.given_options``)."""


def positive_seconds(text: str) -> float:
    """A duration above zero, ``"30s"``, ``"5m"`` or a plain number of seconds (``--duration 0`` would stop the
    job as it starts; ``--task-timeout 0`` would kill every attempt at once)."""
    negative = str(text).strip().startswith("-")  # (told as zero is, not as a duration option that may be 0)
    seconds = -1.0 if negative else _seconds(text)
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"expected a duration above zero such as 30s or 5m, got {text!r}")
    return seconds


def _seconds(text: str) -> float:
    """``"2s"``, ``"500ms"``, ``"0s"`` or a plain number of seconds, 0 or more (``windows.parse_duration``)."""
    try:
        return parse_duration(text)
    except WindowSpecError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("continuous jobs (run until the sources end or the job is stopped)")
    group.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="URL",
        help="a stream to read, one map each: tail:DIR, zmq:tcp://HOST:PORT (PULL, bound), zmq+sub:ENDPOINT, "
        "tcp:HOST:PORT (line server), replay:FILE?rate=N",
    )
    group.add_argument(
        "--window", action=Given, default=None, help="window range: 60s, 500ms, 1000r (records), 64KB (bytes)"
    )
    group.add_argument(
        "--slide", action=Given, default=None, help="window slide in the same unit (default: tumbling windows)"
    )
    group.add_argument(
        "--lateness",
        action=Given,
        type=_seconds,
        default=0.0,
        help="time windows: how long panes wait for out-of-order records",
    )
    group.add_argument(
        "--fidelity",
        action=Given,
        type=float,
        default=1.0,
        help="emit a window once this share of its source x pane cells arrived (C2; default 1: all)",
    )
    group.add_argument(
        "--max-latency",
        action=Given,
        type=_seconds,
        default=None,
        help="emit a window at most this long (e.g. 2s) after the first source sealed past its end, even if "
        "others have not; one no source sealed past (a single source gone quiet) waits for data or a stop",
    )
    group.add_argument(
        "--checkpoint-every",
        action=Given,
        type=positive_int,
        default=5,
        metavar="N",
        help="checkpoint every N windows (default 5)",
    )
    group.add_argument(
        "--checkpoint-seconds",
        action=Given,
        type=_seconds,
        default=5.0,
        help="... or after this long with new windows (5s)",
    )
    group.add_argument(
        "--sink",
        action=Given,
        default=None,
        metavar="ENDPOINT",
        help="also publish every window on a ZeroMQ PUB socket to ENDPOINT",
    )
    group.add_argument(
        "--view-interval",
        action=Given,
        type=_seconds,
        default=30.0,
        help="compact checkpoint deltas into the Parquet view (Spark) this often (default 30s)",
    )
    group.add_argument("--no-view", action=GivenFlag, help="do not maintain the Parquet materialized view")
    group.add_argument(
        "--duration",
        action=Given,
        type=positive_seconds,
        default=None,
        help="stop the continuous job after this long (e.g. 5m)",
    )
    group.add_argument(
        "--keep-windows",
        action=Given,
        type=positive_int,
        default=None,
        metavar="N",
        help="keep the folders of the newest N windows in OUT/windows, removing older ones as the job runs "
        "(default: all)",
    )


def warn_about_windows(window: WindowSpec, window_text: str, slide_text: str | None) -> None:
    """Print to stderr what is costly about these windows (many panes a window, many windows a record), naming the
    options as given: ``hop run --source`` and ``hop monitor`` warn alike."""
    for warning in filter(None, (window.many_panes_warning(), window.many_windows_warning())):
        print(f"hop: warning: --window {window_text} --slide {slide_text}: {warning}", file=sys.stderr)


def run_stream_from_args(args: argparse.Namespace) -> int:
    """``hop run``/``hop submit`` with ``--source``: build and run a continuous job."""
    from hop.claims import output_written_by_job
    from hop.cli import _defer_interrupts, _fail, _interrupted_code
    from hop.loader import JobFileError, load_job_file
    from hop.local_cluster import ClusterStartError, LocalCluster
    from hop.outputs import OutputExistsError, check_output, claim_output, output_identity
    from hop.runner import JobFailed, build_spec
    from hop.stream.options import stream_options
    from hop.stream.runner import EndedNow, end_now, report_unanswered, run_stream
    from hop.web.cli import web_view

    if args.inputs:
        return _fail(f"a continuous job reads its --source, not input files ({' '.join(args.inputs)})", 2)
    if args.window is None:
        return _fail("a continuous job needs --window (e.g. --window 60s --slide 10s, or --window 1000r)", 2)
    refused = [
        (option, why)
        for option, given, why in (
            ("--mrjob", args.mrjob, "an mrjob job runs in batch only"),
            (f"--engine {args.engine}", args.engine != "hop", "a continuous job runs on hop's own engine"),
            ("--snapshot-every", args.snapshot_every is not None, "a continuous job writes windows, not snapshots"),
        )
        if given
    ]
    if refused:  # (each named with its reason: the message listed all three, whichever was given)
        options, reasons = " and ".join(o for o, _ in refused), "; ".join(w for _, w in refused)
        return _fail(f"--source runs a continuous job, and {reasons}: drop {options}", 2)
    unused = _unused_spark_options(args)
    if unused is not None:
        return _fail(unused, 2)
    try:
        job_class = load_job_file(args.job, args.job_class)
    except JobFileError as error:
        return _fail(str(error), 2, error.user_traceback)
    from hop.stream.sources import SourceError, check_sink, check_source, source_paths

    try:
        for url in args.source:
            # Here, not first in a map task after the job started; the embedded cluster's maps run on this host.
            warning = check_source(url, here=not args.coordinator)
            if warning is not None:
                print(f"hop: warning: {warning}", file=sys.stderr)
        if args.sink is not None:
            check_sink(args.sink, here=not args.coordinator)  # (its reducers, too)
    except SourceError as error:
        return _fail(str(error), 2)
    try:
        stream = stream_options(
            args.source,
            args.window,
            args.slide,
            lateness=args.lateness,
            fidelity=args.fidelity,
            max_latency=args.max_latency,
            checkpoint_windows=args.checkpoint_every,
            checkpoint_seconds=args.checkpoint_seconds,
            sink=args.sink,
            deltas=not args.no_view,
            duration=args.duration,
            keep_windows=args.keep_windows,
            directory=os.getcwd(),  # (relative tail: and replay: paths: a worker started elsewhere reads here)
        )
        window = WindowSpec.from_wire(stream["window"])  # (as stream_options parsed it)
        warn_about_windows(window, args.window, args.slide)
        if job_class.uncombine is not None and job_class.combine is None and not hasattr(job_class.reduce, "merge"):
            raise ValueError(f"{job_class.__name__} defines uncombine but no combine to add values with")
        if (args.input_format or job_class.input_format) == "output":
            raise ValueError(
                "input format 'output' reads the part files of a batch job; a continuous job's records are its "
                "sources' lines or messages (text, jsonl or csv)"
            )
        steps = job_class().resolved_steps()
        if len(steps) > 1 or steps[0].hooks:  # (each window is one map/combine/reduce: nothing would run them)
            raise ValueError(
                f"{job_class.__name__} has {len(steps)} steps and hooks {steps[0].hooks or 'none'}: a continuous job "
                "runs one step of map/combine/reduce per window, without init/final hooks"
            )
    except ValueError as error:
        return _fail(str(error), 2)
    workers = getattr(args, "workers", None) or os.cpu_count() or 1
    reducers = args.reducers or 1
    spec = build_spec(
        job_class,
        [],
        args.output,
        num_reduces=reducers,
        overwrite=args.overwrite,
        input_format=args.input_format,
        reduce_memory=args.reduce_memory,
        options={"max_attempts": args.max_attempts, "max_line_bytes": args.max_line_bytes, "stream": stream},
    )
    cluster = None
    release: Callable[[], None] | None = None
    submitted: list[str] = []
    accepted: list[tuple[int, int] | None] = []
    """OUT's identity once the coordinator accepted the job (it made OUT then): a report written here later is
    written only into that directory (``report_unanswered``)."""

    def note_submitted(job_id: str) -> None:
        submitted.append(job_id)
        accepted.append(output_identity(spec.output))

    try:
        try:
            release = claim_output(spec.output, read_as_written=True)  # (its windows are read as they come)
            # Before starting a cluster: fail fast, and never let --overwrite clear the job file or what a source
            # reads.
            check_output(spec.output, spec.overwrite, source_paths(args.source), [args.job])
        except OutputExistsError as error:  # (the coordinator's word on its job writing it says more)
            raise OutputExistsError(output_written_by_job(args.coordinator, spec.output) or str(error)) from None
        address = args.coordinator
        if address is None:
            # Stream maps hold their slot for the whole job: one map slot per source at least.
            map_slots = max(1, -(-len(args.source) // workers))
            cluster = LocalCluster(workers=workers, map_slots=map_slots, reduce_slots=-(-reducers // workers))
            cluster.start()
            address = cluster.address
            if not args.quiet:
                print(f"hop: embedded cluster's coordinator at {address}", file=sys.stderr, flush=True)
        client = Client(address)
        try:
            with web_view(args, address):
                status = run_stream(
                    client,
                    spec,
                    progress=not args.quiet,
                    timeout=args.timeout,  # (--duration is kept by the coordinator: stream_options)
                    view_interval=None if args.no_view else args.view_interval,
                    spark_master=args.spark_master or "local[1]",
                    on_submitted=note_submitted,
                )
        finally:
            client.close()
    except JobFailed as failure:
        if failure.status.get("traceback"):
            sys.stderr.write(failure.status["traceback"])
        return _fail(f"job failed: {failure}", 1)
    except (JobRejected, ValueError) as error:
        return _fail(str(error), 2)
    except CoordinatorGone as error:  # (killed or crashed: said at once, with what became of the job)
        return _fail(
            error.lost_jobs(submitted, spec.output, embedded=cluster is not None, continuous=True), error.exit_code
        )
    except (CoordinatorUnavailable, ClusterStartError, TimeoutError) as error:
        return _fail(str(error), 3)
    except KeyboardInterrupt as interruption:
        if not submitted:
            return _fail("interrupted before the job started", _interrupted_code())
        # Once the job runs, run_stream turns the first Ctrl-C into a stop: one reaching here is a second one, which
        # means "stop now". The job is ended at once, so OUT/_job.json says it was interrupted and how far it got
        # (stopping the embedded cluster alone left windows and no report), then the cluster is stopped. run_stream
        # did so itself (EndedNow) unless the Ctrl-C came as it asked for the stop.
        _defer_interrupts()
        if isinstance(interruption, EndedNow):
            ended, answered = interruption.line, interruption.answered
        else:
            ended, answered = end_now(address, submitted[0], Path(spec.output))
        if cluster is not None and not answered:
            # The coordinator did not end the job (hung): asking it to shut the cluster down would wait for nothing
            # (15 s more), and once its processes are killed no report can come but the one written here.
            cluster.stop(grace=0)
            ended = "interrupted while stopping" + report_unanswered(spec, submitted[0], address, accepted[0])
        return _fail(ended, _interrupted_code())
    finally:
        if cluster is not None:
            cluster.stop()
        if release is not None:
            release()
    del status
    return 0


def _unused_spark_options(args: argparse.Namespace) -> str | None:
    """Why a continuous job was given Spark options it would ignore (each ran without a word): ``--spark-conf``
    (the view compacts with settings of its own, ``hop.stream.view.SPARK_CONF``), and with ``--no-view``, which runs
    no Spark, ``--view-interval`` and ``--spark-master``."""
    if getattr(args, "spark_conf", None):
        return (
            "--spark-conf applies to --engine spark; a continuous job's materialized view compacts with Spark "
            "settings of its own: drop it"
        )
    if args.no_view:
        given = flags_given(args, ["view_interval"]) + (["--spark-master"] if args.spark_master else [])
        if given:
            flags, it = ", ".join(given), "it" if len(given) == 1 else "them"
            return f"{flags} sets the materialized view's compaction, which --no-view turns off: drop {it}"
    return None


def _client_call(args: argparse.Namespace, call: Any) -> Any:
    client = Client(args.coordinator, timeout=10, running=True)
    try:
        return call(client)
    finally:
        client.close()


def _stop(args: argparse.Namespace) -> int:
    try:
        # (the reason is a batch job's error: a continuous job drains and succeeds)
        reply = _client_call(args, lambda client: client.stop(args.job_id, "cancelled by hop stop"))
    except (CoordinatorUnavailable, JobRejected) as error:
        print(f"hop: error: {error}", file=sys.stderr)
        return error.exit_code
    if reply.get("cancelled"):
        ended = reply.get("ended") or []
        also = f", and with it the other steps of its pipeline: {', '.join(ended)}" if ended else ""
        print(f"hop: {args.job_id} is cancelled{also}")
    elif "cancelled" in reply or reply["state"] != "running":  # a job that had ended already
        print(f"hop: {args.job_id} had already ended ({reply['state']}): nothing to stop")
    else:
        print(f"hop: {args.job_id} is stopping: its last windows are being written")
    return 0


def _windows(args: argparse.Namespace) -> int:
    try:
        listing = _client_call(args, lambda client: client.window_listing(args.job_id, args.after, limit=args.limit))
    except (CoordinatorUnavailable, JobRejected) as error:
        print(f"hop: error: {error}", file=sys.stderr)
        return error.exit_code
    for window in listing["windows"]:
        window.pop("rows", None)
        print(json.dumps(window))
    if listing.get("omitted"):
        # Left out by the user's --limit, or (a first listing) by the coordinator, which keeps the newest only.
        limited = bool(args.limit) and len(listing["windows"]) >= args.limit
        why = f"past --limit {args.limit}" if limited else f"the coordinator keeps the newest {KEEP_WINDOWS}"
        which = "older" if args.after <= 0 else "newer"
        print(
            f"hop: {listing['omitted']:,} {which} windows not listed ({why}): use --after SEQ / --limit N; every "
            "window's _window.json is in OUT/windows/",
            file=sys.stderr,
        )
    return 0


def _view(args: argparse.Namespace) -> int:
    from hop.stream.view import DeltaError, compact, pending_deltas, view_info

    output = Path(args.target)
    if args.spark_master is not None and not args.compact:
        # (it was taken and ignored: only a compaction starts Spark; hop refuses options that would do nothing)
        print(
            f"hop: error: --spark-master {args.spark_master} applies to --compact, which starts Spark; this hop view "
            "only reads the view's manifest: add --compact, or drop --spark-master",
            file=sys.stderr,
        )
        return 2
    if not output.is_dir():
        if not args.coordinator:
            # (it said "is not an output directory" of a path that did not exist too, leaving the typo unnamed)
            what = "is not a directory" if output.exists() else "does not exist"
            print(
                f"hop: error: {args.target} {what}: give a continuous job's output directory (its -o), or its job id "
                "with --coordinator",
                file=sys.stderr,
            )
            return 2
        try:
            job = _client_call(args, lambda client: client.job(args.target))
        except (CoordinatorUnavailable, JobRejected) as error:
            print(f"hop: error: {error}", file=sys.stderr)
            return error.exit_code
        output = Path(job["output"])
    if args.compact:
        from hop.spark_engine import SparkUnavailable

        try:
            compact(output, args.spark_master or "local[1]")
        except SparkUnavailable as error:  # no Java, or the session did not start: exit code 3, as hop run's
            print(f"hop: error: {error}", file=sys.stderr)
            return 3
        except (DeltaError, RuntimeError) as error:  # a bad delta line; another compaction of OUT running
            print(f"hop: error: {error}", file=sys.stderr)
            return 1
    info = view_info(output)
    pending = pending_deltas(output)
    waiting = f"; {counted(len(pending), 'checkpoint delta')} not in it yet: `hop view {output} --compact`"
    waiting = waiting if pending else ""
    if info is None:
        run = None if pending else _continuous_report(output)
        if run is not None and run.get("options", {}).get("deltas") is False:
            # It said "no materialized view yet (no compaction has run)", as if one were coming. (Of a monitor's
            # output, "its job ran with --no-view" named an option hop monitor has not.)
            folder = output / "windows"  # (named also when the job wrote no window: a folder that was not there)
            where = f"its windows are in {folder}" if folder.is_dir() else "nor did it write a window"
            print(
                f"hop: error: {output} has no materialized view: its job ran without one (--no-view, as hop monitor's "
                f"query always runs), so it kept no checkpoint deltas to build one from ({where})",
                file=sys.stderr,
            )
            return 1
        if run == {}:  # (as if one were coming, too)
            print(
                f"hop: error: {output} is a batch job's output: only a continuous job (hop run --source) keeps a "
                "materialized view; give the output directory of one",
                file=sys.stderr,
            )
            return 2  # (bad usage, as the README's exit codes say: the wrong folder given, not a failure)
        if run is None and not pending and not any((output / name).exists() for name in ("_checkpoints", "windows")):
            # A folder no continuous job wrote in (OUT/windows, a typo's parent) said "no materialized view yet (no
            # compaction has run)", as if one were coming. A job writes _checkpoints as its first map starts.
            print(
                f"hop: error: {output} is not a continuous job's output directory (it holds no windows/, _checkpoints/ "
                "or _job.json): give the output directory (-o) of a continuous job (hop run --source), or its job id "
                "with --coordinator",
                file=sys.stderr,
            )
            return 2
        print(f"hop: error: {output} has no materialized view yet (no compaction has run{waiting})", file=sys.stderr)
        return 1
    print(info.base)
    print(
        f"hop: version {info.version}, {counted(info.rows, 'row')} over {counted(info.windows, 'window')}; read it "
        "with Spark SQL: "
        f"spark.read.parquet({str(info.base)!r}){waiting}",
        file=sys.stderr,
    )
    return 0


def _continuous_report(output: Path) -> dict[str, Any] | None:
    """The ``continuous`` part of ``output/_job.json`` (its options say whether the job ran with ``--no-view``):
    ``{}`` for a batch job's report, None when there is no readable report (a job still running has none)."""
    try:
        report = json.loads((output / "_job.json").read_text(encoding="utf-8"))
        continuous = report.get("continuous") or {}
        return continuous if isinstance(continuous, dict) and isinstance(continuous.get("options", {}), dict) else None
    except (OSError, ValueError, AttributeError):
        return None


def register(commands: Any) -> None:
    stop = commands.add_parser(
        "stop", help="stop a continuous job (drain, write the last windows, checkpoint) or cancel a batch job"
    )
    stop.add_argument("job_id", help="the job to stop (continuous) or cancel (batch)")
    stop.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)
    stop.set_defaults(func=_stop)
    windows = commands.add_parser("windows", help="print a continuous job's windows so far, as JSON lines")
    windows.add_argument("job_id", help="the continuous job")
    windows.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)
    windows.add_argument(
        "--after",
        type=non_negative_int,  # (refused below 0 as the web API's after=N is: window seqs start at 1)
        default=0,
        help="only windows with seq above this, oldest first (0 or more; default 0: the newest --limit)",
    )
    windows.add_argument(
        "--limit",
        type=non_negative_int,
        default=100,
        help="at most this many windows (default 100: the newest, or the first "
        "after --after; 0: every window the coordinator keeps); the count left out goes to stderr",
    )
    windows.set_defaults(func=_windows)
    view = commands.add_parser("view", help="print where a continuous job's Parquet materialized view is")
    view.add_argument("target", help="the job's output directory, or its job id with --coordinator")
    view.add_argument(
        "--coordinator",
        type=coordinator_address,
        default=None,
        help="the cluster running the job, when TARGET is its job id: " + COORDINATOR_HELP,
    )
    view.add_argument(
        "--compact", action="store_true", help="first merge the checkpoint deltas not in the view yet (starts Spark)"
    )
    view.add_argument(
        "--spark-master", type=spark_master_url, default=None, help="Spark master of --compact (default local[1])"
    )
    view.set_defaults(func=_view)
