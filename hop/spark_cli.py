"""Command-line glue for the Spark engine: ``hop compare`` and ``hop run --engine spark``.

- :func:`register` adds ``hop compare JOB INPUT... [--reducers R] [--workers N] [--spark-master URL]
  [--spark-conf KEY=VALUE]... [--tolerance X] [--split-size S] [--spill-records N] [--input-format F]
  [--job-class C]`` to the ``hop`` subcommands; it exits 0 when the outputs are equal, 1 when they differ or an
  engine failed, 2 on bad usage, 3 when Spark cannot start (no Java, a master that does not answer: found before
  either engine runs).
- :func:`run_spark_from_args` runs ``hop run ... --engine spark`` from the parsed ``hop run`` arguments (``job``,
  ``inputs``, ``output``, ``reducers``, ``overwrite``, ``quiet``, ``split_size``, ``input_format``, ``job_class``,
  and if present ``workers``, ``spill_records``, ``spark_master``, ``spark_conf``). Exit codes as ``hop run``: 0
  success, 1 the job failed (the user's traceback is printed), 2 bad usage or input, 3 Spark could not start.
- :func:`main` is ``python -m hop.spark_engine JOB INPUT... -o OUT [...]``, the same run as a standalone command.

Defaults follow ``hop run``: ``--workers`` is the number of cores, ``--reducers`` the number of workers, and the
Spark master ``local[WORKERS]``; ``--spark-conf spark.master=URL`` gives the master as ``--spark-master`` does
(:func:`_master`). Nothing here imports PySpark until a Spark run starts.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hop.claims import input_claimed, inputs_left_partial
from hop.counters import print_user_counters
from hop.gen.cli import ArgumentParser, non_negative_float, output_argument, positive_int, size_at_least
from hop.inputs import (
    DEFAULT_SPLIT_BYTES,
    MIN_SPLIT_SIZE_OPTION,
    InputError,
    absolute_inputs,
    expand_inputs,
    repeated_inputs,
)
from hop.job import INPUT_FORMATS
from hop.loader import JobFileError, load_job_file
from hop.outputs import check_output, claim_output
from hop.runner import earlier_reports, no_records_note
from hop.spark_master import malformed_master, master_addresses, spark_master_url
from hop.stdin_input import STDIN
from hop.wording import counted
from shuffle.buffer import DEFAULT_SPILL_RECORDS


def _setting(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return name, value


def _fail(reason: str, code: int, user_traceback: str | None = None) -> int:
    """Print ``hop: error: REASON`` on stderr, after the user's traceback if there is one; return ``code``."""
    if user_traceback:
        sys.stderr.write(user_traceback)
    print(f"hop: error: {reason}", file=sys.stderr)
    return code


MASTER_SETTING = "spark.master"
"""The Spark setting of the master, which ``--spark-conf`` may give instead of ``--spark-master``."""


def _defaults(args: argparse.Namespace) -> tuple[int, int, str]:
    """``(workers, reducers, master)`` with ``hop run``'s defaults; the master is :func:`_master`'s (raises its
    ValueError)."""
    workers = getattr(args, "workers", None) or os.cpu_count() or 1
    reducers = getattr(args, "reducers", None) or workers
    return workers, reducers, _master(args, workers)


def _master(args: argparse.Namespace, workers: int) -> str:
    """The run's one Spark master: ``--spark-master URL``, or ``--spark-conf spark.master=URL``, else
    ``local[WORKERS]``. Whichever way it is given, it is the master of everything the master decides: the session
    Spark starts, the input's splits (cut for a local master's cores, as hop's engine cuts them for its map
    slots), the check that a ``spark://`` master answers, ``_job.json``'s ``master`` and the summary. Spark takes
    ``spark.master`` from any of its settings (``spark-defaults.conf``, ``spark-submit --conf``), so a user
    carrying their settings over gives it so; the session ran on it while the splits, the report and the summary
    took ``--spark-master``'s or ``local[WORKERS]``. A malformed one is refused as ``--spark-master``'s is, naming
    the setting; both options naming different masters are refused (ValueError: bad usage), since which one a user
    means cannot be told (``spark-submit`` takes ``--master`` over ``--conf spark.master``, where hop's session
    took the setting)."""
    option = getattr(args, "spark_master", None)
    setting = dict(getattr(args, "spark_conf", None) or []).get(MASTER_SETTING)
    if setting is None:
        return option or f"local[{workers}]"
    given = f"--spark-conf {MASTER_SETTING}={setting}"
    malformed = malformed_master(setting, given)
    if malformed is not None:
        raise ValueError(malformed)
    master_addresses(setting, given)  # (a spark:// URL without a port: ValueError)
    if option is not None and option != setting:
        raise ValueError(
            f"--spark-master {option} and {given} name two different masters: give one of them (--spark-master)"
        )
    return setting


LOCAL_DIR_SETTING = "spark.local.dir"
"""The Spark setting of the driver's scratch folders (comma-separated), where it keeps its block and shuffle files."""


def _check_local_dirs(args: argparse.Namespace) -> None:
    """Raise ValueError (bad usage) naming a ``--spark-conf spark.local.dir`` folder that cannot be made or written,
    before Spark starts: Spark's driver then printed a page of "ERROR JavaUtils: Failed to create directory" and
    their Java stacks, and the run failed with "Spark did not start on master local[2]: [Errno 111] Connection
    refused", which named neither the setting nor what to do. Each folder is made as Spark would make it (with the
    folders it is in), and written to (a probe folder, removed): what this user may write, root too, on a file
    system that takes it."""
    value = dict(getattr(args, "spark_conf", None) or []).get(LOCAL_DIR_SETTING)
    for folder in (part.strip() for part in (value or "").split(",")):
        if not folder:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
            os.rmdir(tempfile.mkdtemp(prefix=".hop-probe-", dir=folder))
        except OSError as error:
            why = error.strerror or type(error).__name__
            raise ValueError(
                f"--spark-conf {LOCAL_DIR_SETTING}={value}: cannot make or write the folder {folder} ({why}), where "
                "Spark's driver keeps its block and shuffle files: give folders this user can write, or drop the "
                "setting (hop then gives Spark a folder of the run's own in the temporary directory)"
            ) from None


def add_spark_arguments(parser: argparse.ArgumentParser, *, listed: bool = True) -> None:
    """``--spark-master`` and ``--spark-conf``, for any parser that runs jobs on Spark; not ``listed`` in its help
    where they are taken only to be refused with the reason (``hop submit``: its jobs run on the hop cluster)."""
    parser.add_argument(
        "--spark-master",
        type=spark_master_url,
        default=None,
        help="Spark master URL (default: local[WORKERS])" if listed else argparse.SUPPRESS,
    )
    parser.add_argument(
        "--spark-conf",
        type=_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra Spark setting, e.g. spark.executor.memory=2g (repeatable)" if listed else argparse.SUPPRESS,
    )


def run_spark_from_args(args: argparse.Namespace, ending: Callable[[], None] | None = None) -> int:
    """Run the job named by ``hop run``'s arguments on Spark; returns the exit code (see the module docstring).

    ``ending`` is called once the Spark job has ended (or the run failed before it), before the JVM is stopped and
    the summary printed: ``hop run`` stops taking Ctrl-C, SIGTERM or a reader of its messages gone as an
    interruption there, as it does once its own engine's job has ended (a summary that had no reader made a run
    that succeeded exit 141, as if interrupted)."""
    from hop.spark_engine import SparkJobFailed, SparkUnavailable, run_on_spark, shutdown_jvm

    try:
        job_class = load_job_file(args.job, args.job_class)
    except JobFileError as error:
        return _fail(str(error), 2, error.user_traceback)
    release: Callable[[], None] | None = None
    try:
        _, reducers, master = _defaults(args)
        release = claim_output(args.output)
        check_output(args.output, args.overwrite, list(args.inputs), [args.job])  # (before Spark starts)
        # As hop's engine warns of them (hop.cli), naming them as it does (absolute): a file named twice is read once.
        # The output of a run still running (partial; before its first part, a folder holding no file) is refused
        # so, naming that run.
        refusal = input_claimed(list(args.inputs), args.output)
        if refusal is not None:
            raise InputError(refusal)
        repeats = repeated_inputs(absolute_inputs(list(args.inputs)), args.output)
        for repeated in [*repeats, *inputs_left_partial(list(args.inputs), args.output)]:
            print(f"hop: warning: {repeated}", file=sys.stderr)
        _check_local_dirs(args)
        report = run_on_spark(
            job_class,
            list(args.inputs),
            args.output,
            num_reduces=reducers,
            master=master,
            input_format=args.input_format,
            overwrite=args.overwrite,
            split_size=args.split_size,
            spill_records=getattr(args, "spill_records", None) or DEFAULT_SPILL_RECORDS,
            quiet=args.quiet,
            conf=dict(getattr(args, "spark_conf", None) or []),
            stdin_copy=getattr(args, "stdin_copy", None),
        )
    except SparkJobFailed as failure:
        if failure.user_traceback:
            sys.stderr.write(failure.user_traceback.rstrip("\n") + "\n")
        if failure.step is not None:  # (which of the job's steps, as hop's engine says it)
            return _fail(f"job failed in {failure.step} ({failure.report.get('job_id')}): {failure}", 1)
        return _fail(f"job failed: {failure}", 1)
    except SparkUnavailable as error:
        return _fail(str(error), 3)
    except (InputError, ValueError) as error:
        return _fail(str(error), 2)
    except KeyboardInterrupt as interrupt:  # (SIGTERM as well, from hop.cli's handler or the run's own)
        signum = getattr(interrupt, "signum", signal.SIGINT)
        if signum == signal.SIGPIPE:  # (its messages' reader has gone: no word more, as hop.cli ends then)
            return 128 + signum
        return _fail("interrupted", 128 + signum)
    finally:
        if ending is not None:
            ending()
        if release is not None:
            release()
        shutdown_jvm()
    if not args.quiet:
        counters = report["counters"]
        # The input's records, as hop's summary counts them: the first step's (the top level is the last step's).
        read = (earlier_reports(report) or [report])[0]["counters"]["map_input_records"]
        print(
            f"hop: spark {report['job_id']} on {master} succeeded in {report['end'] - report['start']:.2f}s "
            f"(Spark start-up {report['spark_startup_seconds']:.2f}s): {read:,} input "
            f"records, {counted(counters['reduce_output_records'], 'output record')} in {args.output}",
            file=sys.stderr,
        )
        no_records = no_records_note(report, list(args.inputs), args.output, getattr(args, "stdin_copy", None))
        if no_records is not None:
            print(no_records, file=sys.stderr)
        print_user_counters(counters.get("user", {}))
    return 0


def _compare(args: argparse.Namespace) -> int:
    from hop.compare import HopRefused, SparkCannotStart, compare, format_table

    try:  # (a job file that is no hop job, e.g. an mrjob job's, is refused before either engine runs)
        load_job_file(args.job, args.job_class)
    except JobFileError as error:
        return _fail(str(error), 2, error.user_traceback)
    jobs = [path for path in args.inputs if path.endswith(".py") and Path(path).is_file()]
    if jobs:  # (Spark would read a second job file as text input: "outputs differ" on the job's source lines)
        return _fail(
            f"hop compare runs one job file, not a pipeline ({args.job}, {', '.join(jobs)}): compare each job, or "
            "write the pipeline as one job with steps()",
            2,
        )
    if STDIN in args.inputs:  # (it said "input '/current/dir/-' does not exist")
        return _fail(
            "hop compare runs the job twice, once per engine, and standard input (-) can be read once: save it to a "
            "file and give that",
            2,
        )
    try:  # (a missing input ran both engines, each refusing it, and printed their table with exit code 1)
        expand_inputs(absolute_inputs(list(args.inputs)))
    except InputError as error:
        return _fail(str(error), 2)
    try:
        workers, reducers, master = _defaults(args)
        _check_local_dirs(args)
    except ValueError as error:
        return _fail(str(error), 2)
    try:
        result = compare(
            args.job,
            list(args.inputs),
            reducers=reducers,
            workers=workers,
            master=master,
            spark_conf=list(args.spark_conf),
            tolerance=args.tolerance,
            split_size=args.split_size,
            spill_records=args.spill_records,
            input_format=args.input_format,
            job_class=args.job_class,
        )
    except SparkCannotStart as error:
        return _fail(str(error), 3)
    except HopRefused as refused:  # (its own "hop: error: ..." lines, as hop run printed them)
        print(refused, file=sys.stderr)
        return 2
    print(format_table(result))
    return 0 if result["equal"] else 1


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="a Python file defining one hop.Job subclass")
    parser.add_argument("inputs", nargs="+", help="input files, directories or globs")
    parser.add_argument("--reducers", type=positive_int, default=None, help="number of reduce tasks (default: workers)")
    parser.add_argument("--workers", type=positive_int, default=None, help="parallelism (default: cores)")
    parser.add_argument(
        "--split-size",
        type=size_at_least(MIN_SPLIT_SIZE_OPTION, "--split-size"),
        default=None,
        help="bytes per input split, at least 64KB (default 128MiB)",
    )
    parser.add_argument(
        "--spill-records",
        type=positive_int,
        default=None,
        help="map output records buffered before a spill, as in hop run (default 2,000,000); combining is per spill",
    )
    parser.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default=None,
        help="override the job's input_format (output: a hop job's part files, as (key, value) pairs)",
    )
    parser.add_argument("--job-class", default=None, help="the class to run when the file defines several")


def register(subparsers: Any) -> None:
    """Add ``hop compare`` to the ``hop`` command's subparsers (``argparse`` ``add_subparsers()`` result)."""
    parser = subparsers.add_parser(
        "compare", help="run a job on hop and on Spark, check the outputs agree, compare time and memory"
    )
    _add_common(parser)
    add_spark_arguments(parser)
    parser.add_argument(
        # (a negative one failed with math.isclose's traceback once both engines had run)
        "--tolerance",
        type=non_negative_float,
        default=1e-9,
        help="relative tolerance for floating-point values (default 1e-9)",
    )
    parser.set_defaults(func=_compare)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m hop.spark_engine``."""
    parser = ArgumentParser(prog="python -m hop.spark_engine", description="Run a hop job on Spark.")
    _add_common(parser)
    parser.add_argument(
        "-o", "--output", type=output_argument, required=True, help="output directory (must be empty or absent)"
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    parser.add_argument("--quiet", action="store_true", help="no Spark progress bar, logs only at ERROR")
    add_spark_arguments(parser)
    parser.set_defaults(func=run_spark_from_args)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.split_size is None:
        args.split_size = DEFAULT_SPLIT_BYTES
    return int(args.func(args))
