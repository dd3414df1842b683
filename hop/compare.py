"""``hop compare``: run one job on hop and on Spark over the same input, check the outputs agree, and measure both.

Each engine runs as its own subprocess (``python -m hop run ... --quiet`` and ``python -m hop.spark_engine ...``)
writing into a temporary directory, which is removed afterwards. Per engine:

- wall time: from starting the subprocess until it has been waited for;
- CPU time: user + system time of the finished subprocess tree, as the ``resource.getrusage(RUSAGE_CHILDREN)``
  delta around the run (a descendant counts once its parent has waited for it; both engines wait for their
  processes, including Spark's JVM and Python workers);
- peak RSS: the largest sum of resident set sizes over the subprocess tree, sampled with psutil every 50 ms (pages
  shared between processes count once per process, short peaks between samples are missed).

Outputs are equal when both hold the same keys (compared by their JSON text, exactly) and, per key, the same values:
exact for ints, strings, booleans and null, within ``tolerance`` relative to the larger magnitude when either side is
a float (``NaN`` equals ``NaN``), element-wise for arrays and objects. A key with several output values compares its
values as multisets (sorted by their JSON text). Differences are listed for the first keys in hop's output order.

When they differ and a step of the job combines before a hand-written reduce, the verdict says why that may be the
job's doing (:func:`combine_caveat`): such a reduce gets the combiner's output of every map spill, and both engines
cut the same spills (``hop.spark_tasks``; both get ``--split-size`` and ``--spill-records``), but hop's flow control
merges a map's spills while reducers lag, so a reduce whose output depends on how many values it gets cannot give
one answer.
"""

from __future__ import annotations

import contextlib
import filecmp
import json
import math
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import psutil

from hop.aggregates import as_aggregate
from hop.loader import JobFileError, load_job_file
from hop.spark_gateway import java_problem
from hop.spark_master import unreachable_master
from hop.spilldirs import make_marked_dir
from hop.wording import counted

SCRATCH_PREFIX = "hop-compare-"
"""The name of the folder of the two runs' outputs, in the system's temporary directory, up to its random part."""
MAX_DIFFERENCES = 10
SAMPLE_SECONDS = 0.05
ENGINE_STOP_SECONDS = 60
"""How long an engine run that ``hop compare`` was interrupted in has to end as Ctrl-C ends it, before it is killed."""


class SparkCannotStart(Exception):
    """Spark cannot start for the comparison's run (no Java, a ``spark://`` master that does not answer): found
    before either engine runs. Spark runs second, so it failed only once hop's run had ended, under a table, as an
    engine that failed, where ``hop run --engine spark`` refuses it before it starts."""


class HopRefused(Exception):
    """hop's engine refused the run as bad usage (its exit code 2: an option or input it found wrong before its job
    started, ``--reducers 5000`` on the embedded cluster): ``str()`` is what it printed. Spark's run, which ran on
    anyway for a minute and more, is not started, and ``hop compare`` exits 2 with hop's words, not 1 under a
    table."""


@dataclass
class Measurement:
    """One engine's run: how it ended and what it cost."""

    engine: str
    exit_code: int
    wall_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int
    stderr_tail: str
    startup_seconds: float | None = None
    """Spark's start-up (SparkSession creation, from its ``_job.json``); ``None`` for hop."""


def _tree_rss(root: psutil.Process) -> int:
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):  # it ended between listing and sampling
            total += process.memory_info().rss
    return total


def measure(engine: str, command: list[str], log_dir: Path) -> Measurement:
    """Run ``command`` to completion, measuring wall time, CPU time of its process tree and peak tree RSS."""
    stdout_path, stderr_path = log_dir / f"{engine}.stdout", log_dir / f"{engine}.stderr"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        # In a session of its own, so that a terminal's Ctrl-C reaches it once, from here (_stop_engine).
        process = subprocess.Popen(
            command, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, start_new_session=True
        )
        peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            try:
                root = psutil.Process(process.pid)
            except psutil.Error:
                return
            while not done.is_set():
                peak = max(peak, _tree_rss(root))
                done.wait(SAMPLE_SECONDS)

        sampler = threading.Thread(target=sample, name=f"rss-{engine}", daemon=True)
        sampler.start()
        try:
            exit_code = process.wait()
        finally:
            if process.poll() is None:  # interrupted: do not leave the engine running
                _stop_engine(process)
            done.set()
            sampler.join()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tail = stderr_path.read_text(encoding="utf-8", errors="replace")[-4000:]
    return Measurement(engine, exit_code, wall, cpu, peak, tail)


def _stop_engine(process: subprocess.Popen[bytes]) -> None:
    """End an engine run as Ctrl-C ends it, so that it cleans up after itself: its embedded cluster or its JVM, and
    the logging configuration a Spark run writes in the temporary directory, which SIGKILL left there. Killed if it
    has not ended within :data:`ENGINE_STOP_SECONDS`, or if this wait is interrupted."""
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=ENGINE_STOP_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# Output comparison. -------------------------------------------------------------------------------------------
def _read_pairs(output: Path) -> Iterator[tuple[str, Any]]:
    for part in sorted(output.glob("part-*")):
        with open(part, encoding="utf-8") as file:
            for line in file:
                key_text, _, value_text = line.rstrip("\n").partition("\t")
                yield key_text, json.loads(value_text)


@contextlib.contextmanager
def _any_int_digits() -> Iterator[None]:
    """Python's limit of 4,300 digits on int <-> str conversions lifted while inside: a job's output may hold larger
    ints (hop's tasks and Spark's lift it too), and reading them (``json.loads``) or writing them in the verdict
    (``json.dumps``) raised ValueError, a traceback once both engines had run."""
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(limit)


def _grouped(output: Path) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = {}
    for key_text, value in _read_pairs(output):
        groups.setdefault(key_text, []).append(value)
    return groups


def values_equal(a: Any, b: Any, tolerance: float) -> bool:
    """Whether two JSON values agree: floats within ``tolerance`` (relative), everything else exactly."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return _numbers_equal(a, b, tolerance)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_equal(x, y, tolerance) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k], tolerance) for k in a)
    return type(a) is type(b) and a == b


def _numbers_equal(a: float, b: float, tolerance: float) -> bool:
    """Two JSON numbers (not bools): ints exactly, else within ``tolerance`` relative to the larger magnitude. An
    int past a float's range (a job's exact big sums) is compared exactly too: ``math.isnan`` and ``math.isclose``
    raised OverflowError on one beside a float, and ``hop compare`` ended in a traceback once both engines had run."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    nans = [isinstance(x, float) and math.isnan(x) for x in (a, b)]
    if any(nans):
        return all(nans)
    if a == b:  # (Python compares an int with a float exactly, whatever its size)
        return True
    try:
        return math.isclose(a, b, rel_tol=tolerance, abs_tol=0.0)
    except OverflowError:  # an int no float holds, beside a float
        if any(isinstance(x, float) and math.isinf(x) for x in (a, b)):
            return False  # (finite: the int)
        if math.isinf(tolerance):
            return True
        exact_a, exact_b = Fraction(a), Fraction(b)
        return abs(exact_a - exact_b) <= Fraction(tolerance) * max(abs(exact_a), abs(exact_b))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def compare_outputs(hop_output: Path, spark_output: Path, tolerance: float) -> dict[str, Any]:
    """Compare two output directories; returns ``equal``, ``keys``, the first ``differences`` and counts."""
    with _any_int_digits():
        return _compare_outputs(hop_output, spark_output, tolerance)


def _compare_outputs(hop_output: Path, spark_output: Path, tolerance: float) -> dict[str, Any]:
    hop_groups, spark_groups = _grouped(hop_output), _grouped(spark_output)
    differences: list[dict[str, Any]] = []
    differing = 0
    for key_text in [*hop_groups, *(k for k in spark_groups if k not in hop_groups)]:
        ours, theirs = hop_groups.get(key_text), spark_groups.get(key_text)
        if ours is not None and theirs is not None:
            ours_sorted, theirs_sorted = sorted(ours, key=_canonical), sorted(theirs, key=_canonical)
            if values_equal(ours_sorted, theirs_sorted, tolerance):
                continue
        differing += 1
        if len(differences) < MAX_DIFFERENCES:
            differences.append({"key": json.loads(key_text), "hop": ours, "spark": theirs})
    hop_parts = sorted(p.name for p in hop_output.glob("part-*"))
    identical = hop_parts == sorted(p.name for p in spark_output.glob("part-*")) and all(
        filecmp.cmp(hop_output / name, spark_output / name, shallow=False) for name in hop_parts
    )
    return {
        "equal": differing == 0,
        "keys": len(hop_groups),
        "differing_keys": differing,
        "differences": differences,
        "byte_identical": identical,
    }


def combine_caveat(job_file: str, job_class: str | None = None) -> str | None:
    """Why a job's output may differ between two correct runs: a step that combines before a hand-written reduce
    (``None`` for any other job, or a job file that does not load)."""
    try:
        steps = load_job_file(job_file, job_class)().resolved_steps()
    except (JobFileError, ValueError):
        return None
    for number, step in enumerate(steps, 1):  # (from 1, as hop run numbers steps)
        if step.combiner is None or step.reducer is None or as_aggregate(step.reducer) is not None:
            continue
        combiner: object = as_aggregate(step.combiner) or getattr(step.combiner, "__qualname__", step.combiner)
        where = f"step {number} of the job" if len(steps) > 1 else "the job"
        return (
            f"note: {where} combines ({combiner}) before a hand-written reduce, which gets the combined values of "
            "every map spill: how many there are is not fixed (input splits, --split-size, --spill-records, and hop's "
            "flow control, which merges a map's spills while reducers lag, decide it), so a reduce whose output "
            "depends on how "
            "many values it gets (counting or listing them) differs between runs and engines; make the reduce fold "
            "its values as the combiner does (sum a Count's states), or drop the combiner"
        )
    return None


# The comparison. ------------------------------------------------------------------------------------------------
def _options(
    split_size: int | None, spill_records: int | None, input_format: str | None, job_class: str | None
) -> list[str]:
    """The command-line options both engines get (each means the same to both)."""
    options: list[str] = []
    if split_size is not None:
        options += ["--split-size", str(split_size)]
    if spill_records is not None:
        options += ["--spill-records", str(spill_records)]
    if input_format is not None:
        options += ["--input-format", input_format]
    if job_class is not None:
        options += ["--job-class", job_class]
    return options


def compare(
    job_file: str,
    inputs: list[str],
    *,
    reducers: int,
    workers: int,
    master: str,
    tolerance: float = 1e-9,
    split_size: int | None = None,
    spill_records: int | None = None,
    input_format: str | None = None,
    job_class: str | None = None,
    spark_conf: list[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Run ``job_file`` on hop (``workers`` workers) and on Spark (``master``, with the settings ``spark_conf``,
    ``--spark-conf``'s pairs), both with ``reducers`` reducers.

    Raises :class:`SparkCannotStart` before either engine runs if Spark cannot start, and :class:`HopRefused` (Spark
    not run) if hop's engine refused the run as bad usage. Returns ``{"equal",
    "caveat", "tolerance", "engines": {"hop": ..., "spark": ...}, "comparison": ...,
    "error"}`` where each engine is a :class:`Measurement` as a dict, ``comparison`` comes from
    :func:`compare_outputs` (``None`` when an engine failed), ``error`` says which engine failed and ``caveat``
    (outputs that differ only) why the job itself may give different outputs (:func:`combine_caveat`).
    :func:`format_table` renders it.
    """
    options = _options(split_size, spill_records, input_format, job_class)
    # Marked as this process's (hop.spilldirs): the two outputs, as large as the job's, that a `hop compare` killed
    # outright left are removed by the next one on this host.
    scratch = make_marked_dir(None, SCRATCH_PREFIX)
    try:
        # (once the folder is made: those of comparisons killed outright are removed by this one, refused or not)
        cannot_start = java_problem() or unreachable_master(master)
        if cannot_start is not None:
            raise SparkCannotStart(cannot_start)
        hop_out, spark_out = scratch / "hop", scratch / "spark"
        common = [job_file, *inputs]
        hop_command = [sys.executable, "-m", "hop", "run", *common, "-o", str(hop_out), "--quiet"]
        hop_command += ["--workers", str(workers), "--reducers", str(reducers), *options]
        spark_command = [sys.executable, "-m", "hop.spark_engine", *common, "-o", str(spark_out), "--quiet"]
        spark_command += ["--spark-master", master, "--reducers", str(reducers), *options]
        for name, value in spark_conf or []:
            spark_command += ["--spark-conf", f"{name}={value}"]
        hop_run = measure("hop", hop_command, scratch)
        if hop_run.exit_code == 2:
            raise HopRefused((scratch / "hop.stderr").read_text(encoding="utf-8", errors="replace").strip())
        runs = {"hop": hop_run, "spark": measure("spark", spark_command, scratch)}
        report_path = spark_out / "_job.json"
        if report_path.exists():
            runs["spark"].startup_seconds = json.loads(report_path.read_text())["spark_startup_seconds"]
        failed = [name for name, run in runs.items() if run.exit_code != 0]
        comparison = None if failed else compare_outputs(hop_out, spark_out, tolerance)
        error = "; ".join(f"{name} exited with code {runs[name].exit_code}" for name in failed) or None
        differ = comparison is not None and not comparison["equal"]
        return {
            "equal": bool(comparison and comparison["equal"]),
            "caveat": combine_caveat(job_file, job_class) if differ else None,
            "tolerance": tolerance,
            "engines": {name: asdict(run) for name, run in runs.items()},
            "comparison": comparison,
            "error": error,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def format_table(result: dict[str, Any]) -> str:
    """The comparison as a small text table plus a verdict line (and the first differences or engine errors)."""
    with _any_int_digits():
        return _format_table(result)


def _format_table(result: dict[str, Any]) -> str:
    lines = [f"{'engine':<8}{'exit':>6}{'wall s':>10}{'CPU s':>10}{'peak RSS MB':>14}{'start-up s':>12}"]
    for name, run in result["engines"].items():
        startup = "" if run["startup_seconds"] is None else f"{run['startup_seconds']:.2f}"
        lines.append(
            f"{name:<8}{run['exit_code']:>6}{run['wall_seconds']:>10.2f}{run['cpu_seconds']:>10.2f}"
            f"{run['peak_rss_bytes'] / 1e6:>14.1f}{startup:>12}"
        )
    comparison = result["comparison"]
    if result["error"]:
        lines.append(f"outputs not compared: {result['error']}")
        for name, run in result["engines"].items():
            if run["exit_code"] != 0 and run["stderr_tail"].strip():
                lines.append(f"--- {name} stderr (tail) ---\n{run['stderr_tail'].rstrip()}")
    elif comparison["equal"]:
        layout = "part files byte-identical" if comparison["byte_identical"] else "part files differ in bytes"
        lines.append(
            f"outputs equal: {counted(comparison['keys'], 'key')}, tolerance {result['tolerance']:g} ({layout})"
        )
    else:
        differing = comparison["differing_keys"]
        lines.append(f"outputs DIFFER: {counted(differing, 'key')} {'differs' if differing == 1 else 'differ'}; first:")
        for difference in comparison["differences"]:
            lines.append(
                f"  key {json.dumps(difference['key'], ensure_ascii=False)}: "
                f"hop {json.dumps(difference['hop'], ensure_ascii=False)}, "
                f"spark {json.dumps(difference['spark'], ensure_ascii=False)}"
            )
        if result.get("caveat"):
            lines.append(result["caveat"])
    return "\n".join(lines)
