"""The same job on Spark: its output files equal hop's byte for byte, in local mode and on a standalone cluster.

Every Spark run happens in a subprocess, so the JVM (and PySpark's warnings) stay out of the pytest process. To pay
the JVM's start-up once, the runs on ``local[2]`` share one subprocess (the ``spark_runs`` fixture runs them one
after another through :func:`run_batch`); each test then runs the same job on the session's hop cluster and compares.
The standalone test starts a Spark master and worker from the pyspark distribution and runs ``python -m
hop.spark_engine`` against them. ``hop compare`` runs end to end through the ``register``-ed subcommand.

Skipped when Java or PySpark is missing (the engine itself needs neither).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from hop.client import Client
from hop.compare import compare_outputs, format_table, values_equal
from hop.gen.text import generate_text
from hop.inputs import DEFAULT_SPLIT_BYTES
from hop.runner import JobFailed
from tests.conftest import (
    QUICK_JVM_OPTIONS,
    ROOT,
    TEST_JOBS,
    interrupted_as_spark_starts,
    job_path,
    needs_spark,
    read_output,
    run_job,
    write_nan_keys_job,
)
from tests.test_exactness import tricky_text

# One test process runs this module (--dist loadgroup): split over two, each would start the batch of Spark runs
# (``spark_runs``, over a minute) for its share of the tests.
pytestmark = [needs_spark, pytest.mark.xdist_group("spark_runs")]

SPARK_TIMEOUT = 240
SPLIT_SIZE = 100_000
SPILL_RECORDS = 8_000
"""A map task of ``words.txt`` (about 15,000 words) spills twice with it: after 2,000 words, then at the end (a
folding buffer's second spill holds more); with hop's default, once."""


@dataclass(frozen=True)
class SparkRun:
    """One job run on Spark by :func:`run_batch`; ``cli`` runs it through ``python -m hop.spark_engine``'s main."""

    name: str
    job: str
    inputs: list[str]
    reducers: int
    job_class: str | None = None
    cli: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    takes_output: str | None = None
    """``WHEN HOW`` of ``output_remover``'s input line: the run's input is then one line, that and its output."""
    reader_gone: bool = False
    """(``cli``) Run as ``hop run --engine spark`` (``hop.cli.main``) whose messages' reader has gone: its standard
    error a pipe closed at the other end (``hop run ... 2>&1 | head -1``)."""


RUNS = [
    # First: the JVM starts with this run's (not quiet) logging, which the quiet runs after it must replace.
    SparkRun("failing_verbose", "failing_map", ["fail.txt"], reducers=1, options={"quiet": False}),
    SparkRun("wordcount", "wordcount", ["words.txt", "more.txt.gz"], reducers=3),
    SparkRun("generic", "wordcount_generic", ["words.txt"], reducers=2),
    SparkRun("two_steps", "two_steps", ["words.txt"], reducers=2),
    SparkRun("jsonl", "json_fields", ["records.jsonl"], reducers=2),
    SparkRun("counters", "counting_wordcount", ["words.txt"], reducers=3),
    SparkRun("mean", "mean_length", ["words.txt"], reducers=2, job_class="WordLengths"),
    SparkRun("distinct", "mean_length", ["words.txt"], reducers=2, job_class="DistinctWords"),
    SparkRun("mixed_keys", "mixed_keys", ["mixed.txt"], reducers=2),
    SparkRun("enum_keys", "enum_keys", ["colors.txt"], reducers=2),
    SparkRun("big_ints", "big_ints", ["big.jsonl"], reducers=2),
    SparkRun("counted_states", "counted_states", ["words.txt"], reducers=2),
    SparkRun("counted_spills", "counted_states", ["words.txt"], reducers=2, options={"spill_records": SPILL_RECORDS}),
    SparkRun("none_value", "optional_values", ["optional.txt"], reducers=1),
    SparkRun("hooks", "hooked_wordcount", ["words.txt"], reducers=2),
    # Line reading and key grouping over bytes made to trip them (tests/test_exactness.py), split and spilled.
    SparkRun(
        "tricky",
        "lines_and_keys",
        ["tricky.txt", "empty.txt", "crlf.txt.gz"],
        reducers=3,
        options={"spill_records": 500},
    ),
    SparkRun("list_keys", "list_keys", ["fail.txt"], reducers=2),
    SparkRun("odd_keys", "odd_keys", ["odd.txt"], reducers=2, job_class="OddKeys"),
    SparkRun("set_value", "odd_values", ["odd.txt"], reducers=2, job_class="SetValue"),
    SparkRun("surrogate_key", "odd_values", ["odd.txt"], reducers=2, job_class="SurrogateKey"),
    SparkRun("surrogate_value", "odd_values", ["odd.txt"], reducers=2, job_class="SurrogateValue"),
    SparkRun("bad_output_line", "wordcount", ["bad-output.txt"], reducers=1, options={"input_format": "output"}),
    SparkRun("truncated_gzip", "wordcount", ["truncated.txt.gz"], reducers=1),
    SparkRun(
        "first_step_reduce_fails",
        "counted_then_failing",
        ["unsummable.txt"],
        reducers=1,
        options={"input_format": "output"},
    ),  # fmt: skip
    SparkRun("reads_stdin", "task_misuse", ["fail.txt"], reducers=1, job_class="ReadsStdin"),
    SparkRun("exits_in_step_two", "task_misuse", ["fail.txt"], reducers=1, job_class="ExitsInStepTwo", cli=True),
    SparkRun("empty", "wordcount", ["empty.txt"], reducers=2, cli=True, options={"quiet": False}),
    SparkRun("named_twice", "wordcount", ["colors.txt", "./colors.txt"], reducers=1, cli=True),
    SparkRun("failing", "failing_map", ["fail.txt"], reducers=1, cli=True),
    SparkRun("failing_verbose_cli", "failing_map", ["fail.txt"], reducers=1, cli=True, options={"quiet": False}),
    SparkRun("two_steps_cli", "two_steps", ["fail.txt"], reducers=1, cli=True, options={"quiet": False}),
    SparkRun("status_per_record", "status_per_record", ["colors.txt"], reducers=1, cli=True),
    *(
        SparkRun(f"output_{how}_in_{when}", "output_remover", [], reducers=1, cli=True, takes_output=f"{when} {how}")
        # (replaced: moved away, and a folder made under its name; a Spark run costs a second or two)
        for when, how in [("map", "removed"), ("map", "replaced"), ("reduce", "replaced")]
    ),
    # Last: hop.cli.main leaves its handlers of signals and its state of a command that ended in this process.
    SparkRun(
        "reader_gone", "wordcount", ["colors.txt"], reducers=1, cli=True, reader_gone=True, options={"quiet": False}
    ),
]
BY_NAME = {run.name: run for run in RUNS}
RUN_MARKER = "<<spark-run>> "


def run_batch(plan_file: str) -> None:
    """Subprocess side of ``spark_runs``: run every planned job on ``local[2]`` in this one process."""
    import io

    import hop.spark_engine
    from hop.loader import load_job_file
    from hop.spark_cli import main
    from hop.spark_engine import SparkJobFailed, run_on_spark, shutdown_jvm

    plan = json.loads(Path(plan_file).read_text())
    results: dict[str, Any] = {}
    try:
        for item in plan["runs"]:
            run = SparkRun(**item)
            # The JVM writes to this process's stderr: the marker says which run its lines belong to.
            os.write(2, f"\n{RUN_MARKER}{run.name}\n".encode())
            output = str(Path(plan["outputs"]) / run.name)
            given = run.inputs
            if run.takes_output is not None:
                line = Path(plan["results"]).with_name(f"{run.name}.txt")
                line.write_text(f"{run.takes_output} {output}\n")
                given = [str(line)]
            inputs = [str(Path(plan["inputs"]) / name) for name in given]
            if run.cli:  # from the inputs' directory, naming them relative to it
                stderr = io.StringIO()
                argv = [job_path(run.job), *given, "-o", output, "--reducers", str(run.reducers)]
                argv += ["--spark-master", "local[2]", "--split-size", str(SPLIT_SIZE)]
                argv += ["--quiet"] if run.options.get("quiet", True) else []
                argv += ["--job-class", run.job_class] if run.job_class else []
                # main() ends the JVM when its run ends: this process keeps it for the next run and ends it last.
                hop.spark_engine.shutdown_jvm = lambda: None
                try:
                    with contextlib.redirect_stderr(stderr), contextlib.chdir(plan["inputs"]):
                        code = hop_run_without_a_reader(argv) if run.reader_gone else main(argv)
                finally:
                    hop.spark_engine.shutdown_jvm = shutdown_jvm
                results[run.name] = {"exit_code": code, "stderr": stderr.getvalue()}
                continue
            try:
                report = run_on_spark(
                    load_job_file(job_path(run.job), run.job_class),
                    inputs,
                    output,
                    num_reduces=run.reducers,
                    master="local[2]",
                    split_size=SPLIT_SIZE,
                    **run.options,
                )
                results[run.name] = {"report": report}
            except SparkJobFailed as failure:
                results[run.name] = {"error": str(failure), "traceback": failure.user_traceback}
    finally:
        os.write(2, f"\n{RUN_MARKER}\n".encode())
        shutdown_jvm()
        Path(plan["results"]).write_text(json.dumps(results))


def hop_run_without_a_reader(argv: list[str]) -> int:
    """``hop run ARGV --engine spark`` through ``hop.cli.main``, its standard error a pipe nobody reads any more."""
    import hop.cli

    read, write = os.pipe()
    os.close(read)
    # (line-buffered, as Python's own standard error is: each line written finds the reader gone)
    with open(write, "w", encoding="utf-8", buffering=1) as gone, contextlib.redirect_stderr(gone):
        code = hop.cli.main(["run", *argv, "--engine", "spark"])
        with contextlib.suppress(BrokenPipeError):  # (what is left in its buffer has no reader either)
            gone.flush()
        return code


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small inputs: Zipf text (plain and gzip), JSON lines, mixed-type keys and a line the failing job rejects."""
    folder = tmp_path_factory.mktemp("spark-inputs")
    generate_text(folder / "words.txt", 400_000, seed=11, vocabulary=5_000)
    generate_text(folder / "more.txt", 100_000, seed=12, vocabulary=5_000)
    with open(folder / "more.txt", "rb") as plain, gzip.open(folder / "more.txt.gz", "wb") as packed:
        shutil.copyfileobj(plain, packed)
    (folder / "more.txt").unlink()
    with open(folder / "records.jsonl", "w", encoding="utf-8") as file:
        for number in range(3_000):
            file.write(json.dumps({"user": f"user-{number % 37}", "amount": number * 7 % 101}) + "\n")
            if number % 500 == 0:
                file.write("\n")
    (folder / "colors.txt").write_text("red green red\ngreen red\n")
    (folder / "mixed.txt").write_text("1 2 2.5 none true false x,y a 3 1.0 z é\n7 a,b,c b false 2.5\n")
    (folder / "fail.txt").write_text("a b\nc boom d\n")
    (folder / "odd.txt").write_text("a\nodd\nb\n")
    big = "1" + "0" * 5000  # (as text: this process keeps Python's 4,300-digit limit on int <-> str)
    (folder / "big.jsonl").write_text(f"{big}\n{big}\n3\n")
    (folder / "empty.txt").write_text("")
    (folder / "tricky.txt").write_bytes(tricky_text(random.Random(20), 3_000).encode("utf-8"))
    (folder / "crlf.txt.gz").write_bytes(gzip.compress(b"one two\r\nthree\r\n\r\n"))
    (folder / "unsummable.txt").write_text('"a"\t1\n"a"\tnull\n')
    (folder / "optional.txt").write_text("x 3\ny -\n")
    (folder / "bad-output.txt").write_text('"a"\t"x y"\n"b"\t{oops\n')
    truncated = gzip.compress(b"".join(b"line %d of some text\n" % n for n in range(20_000)))
    (folder / "truncated.txt.gz").write_bytes(truncated[: len(truncated) // 2])
    return folder


@pytest.fixture(scope="module")
def spark_runs(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Run every job of ``RUNS`` on Spark in one subprocess; maps a run's name to its report or failure."""
    work = tmp_path_factory.mktemp("spark-runs")
    plan = {
        "runs": [asdict(run) for run in RUNS],
        "inputs": str(corpus),
        "outputs": str(work / "out"),
        "results": str(work / "results.json"),
    }
    (work / "plan.json").write_text(json.dumps(plan))
    code = f"from tests.test_spark import run_batch; run_batch({str(work / 'plan.json')!r})"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=SPARK_TIMEOUT)
    assert done.returncode == 0, done.stderr[-5000:]
    results: dict[str, dict[str, Any]] = json.loads((work / "results.json").read_text())
    sections = dict(part.partition("\n")[::2] for part in done.stderr.split(RUN_MARKER)[1:])
    for name, result in results.items():
        result["output"] = work / "out" / name
        result["process_stderr"] = sections[name]
    return results


def hop_output(client: Client, run: SparkRun, corpus: Path, output: Path, **settings: Any) -> dict[str, Any]:
    """Run ``run``'s job on the test cluster with its split size and ``spill_records`` (and ``settings``)."""
    inputs = [corpus / name for name in run.inputs]
    if "spill_records" in run.options:
        settings["spill_records"] = run.options["spill_records"]
    return run_job(
        client,
        run.job,
        inputs,
        output,
        job_class=run.job_class,
        num_reduces=run.reducers,
        split_size=SPLIT_SIZE,
        **settings,
    )


def assert_same_files(hop_out: Path, spark_out: Path) -> None:
    parts = sorted(path.name for path in hop_out.glob("part-*"))
    assert sorted(path.name for path in spark_out.iterdir()) == sorted([*parts, "_SUCCESS", "_job.json"])
    for name in parts:
        assert (spark_out / name).read_bytes() == (hop_out / name).read_bytes(), f"{name} differs"


def builtin_counters(counters: dict[str, Any]) -> dict[str, Any]:
    names = ("map_input_records", "map_output_records", "reduce_output_records", "user")
    return {name: counters[name] for name in names}


@pytest.mark.parametrize(
    "name",
    [
        "wordcount",
        "generic",
        "two_steps",
        "jsonl",
        "counters",
        "mean",
        "distinct",
        "mixed_keys",
        "enum_keys",
        "big_ints",
        "counted_states",
        "hooks",
        "tricky",
    ],
)
def test_spark_output_equals_hop_byte_for_byte(
    client: Client, corpus: Path, tmp_path: Path, spark_runs: dict[str, dict[str, Any]], name: str
) -> None:
    run, result = BY_NAME[name], spark_runs[name]
    assert "report" in result, result
    hop_report = hop_output(client, run, corpus, tmp_path / "hop-out")
    assert_same_files(tmp_path / "hop-out", result["output"])
    report = json.loads((result["output"] / "_job.json").read_text())
    assert report == result["report"]
    assert report["engine"] == "spark" and report["status"] == "succeeded" and report["master"] == "local[2]"
    assert report["start"] < report["start"] + report["spark_startup_seconds"] <= report["end"]
    assert report["num_reduces"] == run.reducers
    # The same map tasks read the input (a later step's maps differ: hop packs the step before's small part files
    # into one map, Spark's stages keep one partition per reducer).
    first_maps = [(r.get("steps") or [r])[0]["num_maps"] for r in (report, hop_report)]
    assert first_maps[0] == first_maps[1], first_maps
    assert builtin_counters(report["counters"]) == builtin_counters(hop_report["counters"])
    earlier = [builtin_counters(step["counters"]) for step in report.get("steps", [])]
    assert earlier == [builtin_counters(step["counters"]) for step in hop_report.get("steps", [])]


def test_a_spark_tasks_last_status_is_printed_as_it_ends(spark_runs: dict[str, dict[str, Any]]) -> None:
    """A status set on every record is printed at most once a second, and the task's last one as it ends: Spark's
    Python workers outlive their tasks, and the last message of a task, held back by that limit, was never printed
    (here ``mapped 2``, a second message within the second of the first)."""
    result = spark_runs["status_per_record"]
    assert result["exit_code"] == 0, result["stderr"]
    printed = re.findall(r"StatusPerRecord status \(task pid \d+\): (.*)", result["process_stderr"])
    assert printed == ["mapped 1", "mapped 2"], result["process_stderr"][-3000:]


def test_multi_step_and_user_counters(spark_runs: dict[str, dict[str, Any]]) -> None:
    two_steps = spark_runs["two_steps"]["report"]
    assert two_steps["num_steps"] == 2 and len(two_steps["steps"]) == 1
    words = two_steps["steps"][0]["counters"]["reduce_output_records"]
    lines = two_steps["steps"][0]["counters"]["map_input_records"]
    # As on hop: the top level's user counters are summed over the steps, each earlier step's own in "steps".
    assert two_steps["counters"]["user"] == {"steps": {"lines": lines, "words": words}}
    assert two_steps["steps"][0]["counters"]["user"] == {"steps": {"lines": lines}}
    counters = spark_runs["counters"]["report"]
    run = BY_NAME["counters"]
    tasks = counters["num_maps"] + run.reducers
    assert counters["counters"]["user"]["tasks"] == {"setup": tasks, "teardown": tasks}
    assert counters["counters"]["user"]["lines"]["all"] == counters["counters"]["map_input_records"]


def test_user_error_surfaces_with_traceback(spark_runs: dict[str, dict[str, Any]], corpus: Path) -> None:
    """The error names the record's file absolutely, as hop's engine does, though the run named it relative to its
    working directory (Spark's error named it as given: ``map at fail.txt byte offset 4``); so does the report."""
    failed = spark_runs["failing"]
    assert failed["exit_code"] == 1
    traceback, _, last_line = failed["stderr"].rstrip("\n").rpartition("\n")
    assert last_line.startswith(f"hop: error: job failed: map at {corpus / 'fail.txt'} byte offset 4: "), last_line
    assert "cannot handle boom" in last_line
    assert 'tests/jobs/failing_map.py", line 9, in map' in traceback
    assert traceback.endswith("RuntimeError: cannot handle boom")
    report = json.loads((failed["output"] / "_job.json").read_text())
    assert report["status"] == "failed" and "cannot handle boom" in report["error"]
    assert report["inputs"] == [str(corpus / "fail.txt")]
    assert sorted(path.name for path in failed["output"].iterdir()) == ["_job.json"]


def test_an_input_without_records_succeeds_and_says_so_as_on_hop(spark_runs: dict[str, dict[str, Any]]) -> None:
    """``--engine spark`` over an empty file succeeded with "0 input records" alone; it now adds the line hop's
    engine adds (test_cli.py has hop's), naming the input as given."""
    result = spark_runs["empty"]
    assert result["exit_code"] == 0, result["stderr"]
    summary, note = result["stderr"].splitlines()
    assert summary.startswith("hop: spark ") and "0 input records, 0 output records" in summary, summary
    assert note == "hop: the input held no records: it read empty.txt (0 bytes)"
    written = sorted(path.name for path in result["output"].iterdir())
    assert written == ["_SUCCESS", "_job.json", "part-00000", "part-00001"]


def test_a_file_named_twice_is_read_once_and_named_in_a_warning_as_on_hop(
    spark_runs: dict[str, dict[str, Any]], corpus: Path
) -> None:
    """``--engine spark`` read a file named twice once, as hop's engine does, but without the warning hop's engine
    prints (test_inputs.py has hop's), so the two engines' runs of the same command said different things."""
    result = spark_runs["named_twice"]
    assert result["exit_code"] == 0, result["stderr"]
    colors = str(corpus / "colors.txt")  # (absolute, as hop's engine names the inputs)
    assert result["stderr"].splitlines() == [
        f"hop: warning: input file {colors} is named 2 times ({colors!r} twice): it is read once"
    ]
    counts = (result["output"] / "part-00000").read_text()
    assert counts == '"green"\t2\n"red"\t3\n'


def test_a_multi_step_runs_summary_counts_the_input_records_as_on_hop(spark_runs: dict[str, dict[str, Any]]) -> None:
    """``--engine spark`` said a two-step job read "5 input records" from a file of 2 lines: the last step's input
    (the first step's 5 words); hop's summary counts the first step's, the records of the input (and says "1 output
    record", where Spark's said "1 output records")."""
    result = spark_runs["two_steps_cli"]
    assert result["exit_code"] == 0, result["stderr"]
    summary = result["stderr"].splitlines()[0]
    assert summary.startswith("hop: spark ") and ": 2 input records, 1 output record in " in summary, summary


def test_a_run_that_succeeded_exits_0_when_its_summary_has_no_reader(spark_runs: dict[str, dict[str, Any]]) -> None:
    """``hop run --engine spark ... 2>&1 | head -1`` (head gone with Spark's first line, the JVM's) exited 141, as if
    interrupted, though its job had succeeded and its output was whole: its summary found no reader. hop's engine
    exits 0 then, what was left to print dropped (README, Exit codes)."""
    result = spark_runs["reader_gone"]
    assert result["exit_code"] == 0, result["stderr"]
    assert (result["output"] / "_SUCCESS").exists()
    assert (result["output"] / "part-00000").read_text() == '"green"\t2\n"red"\t3\n'


SPARK_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ([A-Z]+ \S+): ", re.M)
"""A line of Spark's log; the group is its level and logger."""


@pytest.mark.parametrize("name", ["failing", "none_value", "list_keys"])
def test_a_quiet_failed_run_prints_no_spark_log_line(spark_runs: dict[str, dict[str, Any]], name: str) -> None:
    """A failed run under ``--quiet`` printed Spark's "ERROR TaskSetManager: Task 0 in stage 0.0 failed 1 times;
    aborting job" before hop's own report of the error (the user's traceback and record); now hop's report is all
    (this JVM started with the logging of a run that was not quiet, and each session sets its own)."""
    result = spark_runs[name]
    assert "error" in result or result.get("exit_code") == 1, result
    assert SPARK_LOG_LINE.findall(result["process_stderr"]) == []


def test_no_run_prints_the_jvm_incubator_warning(spark_runs: dict[str, dict[str, Any]]) -> None:
    """Every start of the JVM printed "WARNING: Using incubator modules: jdk.incubator.vector" (Spark's launcher
    adds the module), even under --quiet; hop's JVM now drops that line (the other lines are asserted above)."""
    for name, result in spark_runs.items():
        assert "incubator" not in result["process_stderr"], name


def test_the_jvm_stderr_filter_drops_the_incubator_line_only_and_holds_back_nothing_else() -> None:
    from hop.spark_gateway import INCUBATOR_WARNING, StderrFilter

    other = b"WARNING: Using incubator modules: jdk.incubator.vector, jdk.incubator.other\n"
    bar = b"\r[Stage 0:>                (0 + 2) / 2]\r          \r"
    stream = INCUBATOR_WARNING + b"Error: a real one\n" + other + bar + b"x" + INCUBATOR_WARNING + b"WARNING: Using"
    expected = stream.replace(INCUBATOR_WARNING, b"", 1)  # (the second one is not at a line start)
    for first in range(len(stream)):
        for second in range(first, len(stream), 7):
            written: list[bytes] = []
            kept = StderrFilter(written.append)
            for chunk in (stream[:first], stream[first:second], stream[second:]):
                kept.feed(chunk)
            kept.close()
            assert b"".join(written) == expected, (first, second)
    written = []
    StderrFilter(written.append).feed(bar[:12])
    assert written == [bar[:12]]  # a progress bar shows at once


def failed_start(java_options: str) -> subprocess.CompletedProcess[str]:
    """A process that starts a session whose JVM cannot start (with ``java_options``) and prints hop's error."""
    code = (
        "import sys\n"
        "from hop.spark_engine import SparkUnavailable, start_session\n"
        f"options = {{'spark.driver.extraJavaOptions': {java_options!r}}}\n"
        "try:\n"
        "    start_session('local[1]', 'hop test', quiet=True, conf=options)\n"
        "except SparkUnavailable as error:\n"
        "    print(f'hop: error: {error}', file=sys.stderr)\n"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_spark_still_prints_its_errors_before_hops_report() -> None:
    """What Spark's launcher and JVM print on stderr still reaches it (through hop's filter), before hop's own
    "Spark did not start"."""
    done = failed_start("-Xmx1g")
    spark, _, report = done.stderr.partition("hop: error: ")
    assert "Error: Not allowed to specify max heap(Xmx) memory settings" in spark, done.stderr
    assert report.startswith("Spark did not start on master local[1]"), done.stderr


def test_a_jvm_that_starts_does_not_print_the_incubator_warning() -> None:
    """The JVM starts (and fails at once: its error goes to stdout): its stderr no longer has the warning."""
    done = failed_start("-Djava.security.manager=no.such.Manager")
    assert "ClassNotFoundException: no.such.Manager" in done.stdout
    assert done.stderr.startswith("hop: error: Spark did not start"), done.stderr
    assert "incubator" not in done.stderr


def test_java_missing_or_a_wrong_java_home_says_what_to_install_or_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A JAVA_HOME without bin/java, with a java on the PATH, was taken for Java found: Spark's launcher runs
    JAVA_HOME's, and the run failed with "/nonexistent/bin/java: No such file or directory" and "Java gateway
    process exited before sending its port number". It is refused before Spark starts, saying what to set."""
    (tmp_path / "in.txt").write_text("a\n")
    wrong = tmp_path / "no-jdk"
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    done = subprocess.run(
        command, cwd=tmp_path, env={**os.environ, "JAVA_HOME": str(wrong)}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr == (
        f"hop: error: JAVA_HOME is {wrong}, which holds no bin/java, and Spark runs the java there: set JAVA_HOME to "
        f"a Java 17 installation (the directory holding bin/java), or unset it to use the java on the PATH "
        f"({shutil.which('java')})\n"
    )
    assert not (tmp_path / "out").exists()
    from hop.spark_gateway import java_problem

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # (no java there)
    assert (java_problem() or "").startswith("Java is not installed (Spark needs Java 17): install a JDK or JRE 17")


def test_an_unreachable_spark_master_is_named_at_once(tmp_path: Path) -> None:
    """``--spark-master spark://HOST:PORT`` where no master listens ran Spark, which retried it for a minute (77 s
    here), printed a Java stack trace per attempt and failed with "All masters are unresponsive" and a py4j error
    naming neither the URL nor what to do. hop now connects first and says so, before any JVM starts."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "in.txt").write_text("a\n")
    master = f"spark://127.0.0.1:{port}"
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--spark-master", master], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith(
        f"hop: error: the Spark master {master} could not be reached (127.0.0.1:{port} refused the connection: "
        "nothing listens there): start it"
    ), done.stderr
    assert done.stderr.count("\n") == 1 and "local[N]" in done.stderr, done.stderr  # (no JVM, no stack trace)
    assert time.monotonic() - started < 15
    assert not (tmp_path / "out").exists()
    malformed = subprocess.run(
        [*command, "--spark-master", "spark://127.0.0.1"], cwd=tmp_path, capture_output=True, text=True, timeout=30
    )
    assert malformed.returncode == 2 and "'127.0.0.1' is not HOST:PORT" in malformed.stderr, malformed.stderr


def test_a_bad_output_line_is_named_as_hop_names_it(spark_runs: dict[str, dict[str, Any]], corpus: Path) -> None:
    """``--input-format output`` on Spark reads part files with hop's reader, and its error (the hop engine's
    reader is tested in test_inputs.py and test_pipeline.py), named by its map task as hop names it; it read "input
    raised InputError: ...", after the traceback of hop's reader (no frame of the user's)."""
    from hop.inputs import OUTPUT_LINES

    where = f"input file {corpus / 'bad-output.txt'}: line at byte offset 10"
    problem = "has a value that is not JSON: Expecting property name enclosed in double quotes"
    assert spark_runs["bad_output_line"]["error"] == f"map task 0: {where} {problem}: {OUTPUT_LINES}"
    assert spark_runs["bad_output_line"]["traceback"] is None


def test_a_reduce_that_yields_no_pair_is_shown_at_its_yield_as_on_hop() -> None:
    """A reduce yielding a bare value failed on Spark, as on hop, with the NotPairsError alone as its traceback; it
    is now the user's ``yield`` line (test_engine.py has hop's). The reduce task runs here, outside Spark, on the
    pairs a map would give it."""
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, reduce_task

    jobs = job_path("not_pairs")
    plan = StepPlan(dump_job_class(load_job_file(jobs, "ReduceYieldsValues")), 0, 1, "text")
    counters: Any = None  # (a failed task adds none)
    with pytest.raises(TaskFailure) as failed:
        list(reduce_task(plan, counters, [("a", [1, 1])]))
    reason, shown = failure_of(failed.value) or ("", "")
    assert reason.startswith("reduce at key 'a' raised NotPairsError: the reduce gave something other than"), reason
    assert f'File "{jobs}", line 20, in reduce\n    yield sum(counts)' in shown, shown


def test_a_bad_line_between_steps_is_named_as_hop_names_a_bad_output_line() -> None:
    """A later step's map reads the step before's lines with hop's reader of output lines; the Spark engine had its
    own, whose error was json's message alone. (Its lines are hop's own output, so the map task runs here, outside
    Spark, with a line no reduce writes.)"""
    from hop.inputs import OUTPUT_LINES
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, map_task

    plan = StepPlan(dump_job_class(load_job_file(job_path("two_steps"))), 1, 2, "lines")
    counters: Any = None  # (a failed task adds none)
    with pytest.raises(TaskFailure) as failed:
        list(map_task(plan, counters, ['"a"\t1\n', '"b"\t{oops\n']))
    reason, shown = failure_of(failed.value) or ("", "")
    problem = "has a value that is not JSON: Expecting property name enclosed in double quotes"
    assert reason == f"map task 0: the output of step 1 (a reducer): line 2 {problem}: {OUTPUT_LINES}"
    assert shown is None


def test_a_spark_map_tasks_combine_keeps_large_aggregate_states_to_its_byte_budget() -> None:
    """A Spark map task's combine folded an aggregate's states until 200,000 keys whatever they held, as hop's map
    buffer did: 3,000 ``TopK(1000)`` states of 20 strings of 100 characters (about 3.5 KB each) all went out at the
    end. It measures them as hop's buffer does and combines at about its byte budget (1 MiB here: about 300 keys).
    (Run here, outside Spark.)"""
    from hop.aggregates import TopK
    from hop.spark_tasks import _combined, _Position

    consumed = [0]

    def outputs() -> Iterator[list[tuple[str, str]]]:
        for number in range(3000 * 20):  # a key's values one after another
            consumed[0] = number + 1
            yield [(f"k{number // 20:05d}", f"{number:0100d}")]

    flushed: dict[int, int] = {}  # keys combined, by the records read when they were
    values: dict[str, int] = {}
    for key, state in _combined(TopK(1000), outputs(), _Position(keyed=False), 10**9, spill_bytes=1 << 20):
        flushed[consumed[0]] = flushed.get(consumed[0], 0) + 1
        values[key] = values.get(key, 0) + len(state)
    assert len(values) == 3000 and set(values.values()) == {20}
    held = list(flushed.values())
    assert len(held) >= 8 and max(held) <= 450 and min(held[:-1]) >= 150, held


def map_failure(job: str, job_class: str | None, step: int, input_format: str, items: list[Any]) -> tuple[str, Any]:
    """The reason and traceback of a Spark map task of ``job`` that fails on ``items``, run here, outside Spark."""
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, map_task

    plan = StepPlan(dump_job_class(load_job_file(job_path(job), job_class)), step, 2, input_format)
    counters: Any = None  # (a failed task adds none)
    with pytest.raises(TaskFailure) as failed:
        list(map_task(plan, counters, items))
    return failure_of(failed.value) or ("", "")


@pytest.mark.parametrize(
    ("job_class", "reason"),
    [
        ("CancelledInMap", "map at {source} byte offset 4: 'c boom d' raised CancelledError: the map's request was"),
        ("CancelledInSetup", "setup raised CancelledError: the setup's request was cancelled"),
        ("HaltsInReduce", "reduce at key 'boom' raised Halt: the reduce halted"),
    ],
)
def test_a_user_error_that_is_no_exception_fails_the_spark_task_as_on_hop(
    tmp_path: Path, job_class: str, reason: str
) -> None:
    """An ``asyncio.CancelledError`` or a job's own ``BaseException`` subclass passed the Spark task's handlers (they
    caught ``Exception`` and ``SystemExit``) and ended its Python worker: Spark's "Python worker exited unexpectedly",
    naming no record. It now fails as on hop's engine (test_engine.py), naming the record or key and showing the
    user's traceback. The tasks run here, outside Spark."""
    from hop.inputs import Split
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, reduce_task

    source = tmp_path / "in.txt"
    source.write_text("a b\nc boom d\n")
    if job_class == "HaltsInReduce":
        plan = StepPlan(dump_job_class(load_job_file(job_path("odd_exceptions"), job_class)), 0, 1, "text")
        with pytest.raises(TaskFailure) as failed:
            list(reduce_task(plan, None, [("a", [1]), ("boom", [1])]))  # type: ignore[arg-type]
        reason_found, shown = failure_of(failed.value) or ("", "")
    else:
        reason_found, shown = map_failure("odd_exceptions", job_class, 0, "text", [Split(str(source), 0, -1)])
    assert reason_found.startswith(reason.format(source=source)), reason_found
    assert 'odd_exceptions.py", line ' in (shown or ""), shown


@pytest.mark.parametrize("job_class", ["MapYieldsCodes", "CombineYieldsSet", "ReduceYieldsText"])
def test_a_str_or_set_given_as_a_pair_is_refused_as_on_hop(tmp_path: Path, job_class: str) -> None:
    """A map yielding a two-letter code, a combine a two-item set and a reduce its key alone ran on Spark, as on
    hop, with wrong output (Python unpacks them as pairs); they are refused now with hop's message (test_engine.py),
    shown at the user's ``yield``. The tasks run here, outside Spark."""
    from hop.inputs import Split
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, reduce_task

    source = tmp_path / "in.txt"
    source.write_text("de Haupt 5\n")
    if job_class == "ReduceYieldsText":
        plan = StepPlan(dump_job_class(load_job_file(job_path("not_pairs"), job_class)), 0, 1, "text")
        counters: Any = None  # (a failed task adds none)
        with pytest.raises(TaskFailure) as failed:
            list(reduce_task(plan, counters, [("de", [1])]))
        reason, shown = failure_of(failed.value) or ("", "")
    else:
        split = Split(str(source), 0, source.stat().st_size)
        reason, shown = map_failure("not_pairs", job_class, 0, "text", [split])
    where = {"MapYieldsCodes": f"map at {source} byte offset 0: 'de Haupt 5'", "CombineYieldsSet": "combine at key "
             "'de'", "ReduceYieldsText": "reduce at key 'de'"}[job_class]  # fmt: skip
    kind = "set" if job_class == "CombineYieldsSet" else "str"
    assert reason.startswith(f"{where} raised NotPairsError: "), reason
    assert f"(TypeError: a {kind} is not a (key, value) pair: " in reason, reason
    assert f'File "{job_path("not_pairs")}", line ' in (shown or ""), shown


@pytest.mark.parametrize("reduce", ["combine = reduce = Sum()", "def reduce(self, key, values):\n        yield key, 1"])
def test_a_nan_key_fails_a_spark_map_task_naming_its_record_as_on_hop(tmp_path: Path, reduce: str) -> None:
    """A float NaN key passed a Spark map task's key check (hop's map buffer refuses it): equal to nothing, and
    hashed by identity, its records went on as groups of their own. The map task now fails with hop's error, naming
    the record (test_engine.py), whether the map output is folded or sent as it is. The task runs here, outside
    Spark."""
    from hop.inputs import Split
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, map_task

    job, source = write_nan_keys_job(tmp_path, reduce)
    plan = StepPlan(dump_job_class(load_job_file(str(job))), 0, 2, "text")
    with pytest.raises(TaskFailure) as failed:
        list(map_task(plan, None, [Split(str(source), 0, -1)]))
    reason, shown = failure_of(failed.value) or ("", "")
    assert reason.startswith(
        f"map at {source} byte offset 0: 'aaaaa x a' raised NanKeyError: map output key nan is or holds a float NaN"
    ), reason
    assert reason.endswith("yield None (or a str) for a missing number") and shown is None


def test_what_the_engine_finds_wrong_is_named_by_its_task_without_a_traceback_as_on_hop(tmp_path: Path) -> None:
    """A combiner that changed its key and a partition out of range failed on Spark with messages of their own
    ("a combiner must keep its key", "partition raised ValueError: ...") after a traceback of the bare error;
    they are now hop's (test_engine.py: "map task 0: ..." and no traceback)."""
    from hop.inputs import Split
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import TaskFailure, UserPartition, failure_of

    (tmp_path / "in.txt").write_text("a a\n")
    reason, shown = map_failure("not_pairs", "CombineChangesKey", 0, "text", [Split(str(tmp_path / "in.txt"), 0, -1)])
    assert reason == "map task 0: combine('a', ...) yielded key 'A'; a combiner must keep the key it was given"
    assert shown is None
    partition = UserPartition(dump_job_class(load_job_file(job_path("not_pairs"), "PartitionOutOfRange")), 2)
    with pytest.raises(TaskFailure) as failed:
        partition("a")
    assert failure_of(failed.value) == ("map task 0: partition('a') returned 3; expected an int in range(2)", None)


def test_a_record_of_a_hop_output_is_named_by_its_key_as_on_hop(tmp_path: Path) -> None:
    """A map over ``--input-format output`` (or a later step's) that raised named its record "byte offset KEY"
    (``map at OUT/part-00000 byte offset mackshaickbeang: '5'``): as on hop, it is the record with that key."""
    from hop.inputs import Split

    part = tmp_path / "part-00000"
    part.write_text('"apple"\t5\n"melon"\t2\n')
    reason, _ = map_failure("failing_topk", None, 0, "output", [Split(str(part), 0, -1)])
    assert reason == f"map at {part} record with key 'melon': 2 raised RuntimeError: refusing melon"
    reason, _ = map_failure("two_steps_failing", None, 1, "lines", ['"x"\t1\n', '"y"\t3\n'])
    where = "the output of step 1 (a reducer) record with key 'y': 3"
    assert reason == f"map at {where} raised ValueError: refusing 'y', counted 3 times"


@pytest.mark.parametrize(
    ("job_class", "where", "call"),
    [
        ("ExitsInMap", "map at {source} byte offset 4: 'c boom d'", "sys.exit(2)"),
        ("ExitsInCombine", "combine at key 'boom'", "sys.exit()"),
        ("ExitsInReduce", "reduce at key 'boom'", "sys.exit(0)"),
    ],
)
def test_sys_exit_in_a_task_fails_it_as_on_hop(tmp_path: Path, job_class: str, where: str, call: str) -> None:
    """``sys.exit()`` in a map, combine or reduce raised SystemExit past the Spark task's handlers (they caught
    ``Exception``): the job failed with "Spark job failed: An exception was thrown from the Python worker:" and
    PySpark's frames. It now fails as on hop's engine (test_cli.py), naming the record or key and the user's line.
    The tasks run here, outside Spark (``exits_in_step_two`` has it on Spark)."""
    from hop.inputs import Split
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, reduce_task

    source = tmp_path / "in.txt"
    source.write_text("a b\nc boom d\n")
    if job_class == "ExitsInReduce":
        plan = StepPlan(dump_job_class(load_job_file(job_path("task_misuse"), job_class)), 0, 1, "text")
        counters: Any = None  # (a failed task adds none)
        with pytest.raises(TaskFailure) as failed:
            list(reduce_task(plan, counters, [("a", [1]), ("boom", [1])]))
        reason, shown = failure_of(failed.value) or ("", "")
    else:
        reason, shown = map_failure("task_misuse", job_class, 0, "text", [Split(str(source), 0, -1)])
    assert reason == (
        f"{where.format(source=source)} called {call}, which fails the job as an exception does (a task cannot "
        "exit early)"
    )
    assert 'task_misuse.py", line ' in (shown or "") and f"    {call}\nSystemExit" in (shown or ""), shown


def test_an_error_message_with_a_lone_surrogate_is_escaped_as_on_hop(tmp_path: Path) -> None:
    """A map whose error message held a lone surrogate failed the run with exit code 2 and "'utf-8' codec can't
    encode character '\\ud800'", the user's error lost (the driver could not write it); it is escaped, as hop's
    engine escapes it (``hop.usercode.sendable``)."""
    from hop.inputs import Split

    (tmp_path / "in.txt").write_text("x\n")
    reason, shown = map_failure("task_misuse", "SurrogateError", 0, "text", [Split(str(tmp_path / "in.txt"), 0, -1)])
    assert reason.endswith("raised ValueError: cannot take 'x' \\ud800"), reason
    assert (shown or "").endswith("ValueError: cannot take 'x' \\ud800\n"), shown
    reason.encode("utf-8")  # (what the report and the terminal need)


@pytest.mark.parametrize(
    ("job_class", "expected"),
    [
        (
            "WritesSurrogate",
            "reduce at key 'a' raised NotUTF8OutputError: its output cannot be written as UTF-8 ('utf-8' codec can't "
            "encode character '\\ud800' in position 6: surrogates not allowed); yield valid text",
        ),
        (
            "FinalYieldsSet",
            "reducer_final at key 'fin' raised NotJSONError: output value {1} is a set, which has no JSON form: yield "
            "a list or tuple instead (sorted, for the same output in every run)",
        ),
    ],
)
def test_output_json_or_utf8_cannot_hold_is_named_as_on_hop(job_class: str, expected: str) -> None:
    """A reduce whose output held a lone surrogate failed writing its part file, outside the reduce: "Spark job
    failed: An exception was thrown from the Python worker:" and PySpark's frames; a ``reducer_final`` yielding a
    set was named without its key, after a traceback of the JSON encoder's error alone. Both read as on hop's engine
    now, without a traceback (no frame of the user's raised them). The reduce task runs here, outside Spark."""
    from hop.jobspec import dump_job_class
    from hop.loader import load_job_file
    from hop.spark_tasks import StepPlan, TaskFailure, failure_of, reduce_task

    plan = StepPlan(dump_job_class(load_job_file(job_path("task_misuse"), job_class)), 0, 1, "text")
    counters: Any = None  # (a failed task adds none)
    with pytest.raises(TaskFailure) as failed:
        list(reduce_task(plan, counters, [("a", [1])]))
    assert failure_of(failed.value) == (expected, None)


def test_a_map_reading_stdin_fails_as_on_hop(spark_runs: dict[str, dict[str, Any]], corpus: Path) -> None:
    """A map reading ``sys.stdin`` (a streaming mapper's loop) read the Spark worker's /dev/null: nothing, and the
    job succeeded with no output. It fails as on hop's engine, saying where a map's records are."""
    failed = spark_runs["reads_stdin"]
    assert "error" in failed, failed  # (it succeeded)
    from hop.usercode import NO_STANDARD_INPUT

    assert failed["error"] == (
        f"map at {corpus / 'fail.txt'} byte offset 0: 'a b' raised NoStandardInputError: {NO_STANDARD_INPUT}"
    ), failed
    assert 'task_misuse.py", line ' in failed["traceback"] and "for text in sys.stdin" in failed["traceback"]


def test_a_failed_step_of_several_is_named_and_reported_as_on_hop(spark_runs: dict[str, dict[str, Any]]) -> None:
    """A job of three steps failing in its second said "job failed: ...", and its _job.json said ``step`` 2 (the
    last planned) with that step's empty counters at the top level. As on hop's engine: "job failed in step 2/3
    (JOB_ID)", ``step`` 1, that step's counters, and the steps before it in ``steps``. The failure is a reduce's
    ``sys.exit()`` under Spark."""
    result = spark_runs["exits_in_step_two"]
    assert result["exit_code"] == 1, result["stderr"]
    report = json.loads((result["output"] / "_job.json").read_text())
    last = result["stderr"].rstrip("\n").rpartition("\n")[2]
    assert last == (
        f"hop: error: job failed in step 2/3 ({report['job_id']}): reduce at key 'words' called sys.exit(3), which "
        "fails the job as an exception does (a task cannot exit early)"
    )
    assert 'task_misuse.py", line ' in result["stderr"] and "    sys.exit(3)\nSystemExit: 3\n" in result["stderr"]
    assert (report["status"], report["step"], report["num_steps"]) == ("failed", 1, 3)
    assert report["traceback"].endswith("    sys.exit(3)\nSystemExit: 3\n"), report["traceback"]  # (none was kept)
    assert report["counters"]["map_input_records"] == 5  # (the second step's: the first one's 5 words)
    assert [step["step"] for step in report["steps"]] == [0]
    assert report["steps"][0]["counters"]["map_input_records"] == 2


def test_a_failed_reduce_of_an_earlier_step_is_reported_as_the_users(spark_runs: dict[str, dict[str, Any]]) -> None:
    """A step's reduce that raised, in a job of several steps, failed with "Spark job failed: An exception was
    thrown from the Python worker:" and PySpark's traceback quoting it: the next step's map, which reads its lines in
    the same Spark task, wrapped its failure into one of its own. It is now the reduce's, as on hop."""
    failed = spark_runs["first_step_reduce_fails"]
    assert (
        failed["error"] == "reduce at key 'a' raised TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'"
    )
    assert failed["traceback"].startswith("Traceback (most recent call last):\n"), failed["traceback"]
    assert 'counted_then_failing.py", line 13, in sum_reduce' in failed["traceback"]
    assert "pyspark" not in failed["traceback"] and "spark_tasks.py" not in failed["traceback"]


@pytest.mark.parametrize("name", ["output_removed_in_map", "output_replaced_in_map", "output_replaced_in_reduce"])
def test_an_output_removed_while_its_spark_job_runs_fails_the_run_writing_nothing_there(
    spark_runs: dict[str, dict[str, Any]], name: str
) -> None:
    """``OUT`` removed, moved away or replaced by a folder of the user's while the Spark job ran: the reduce tasks made
    ``OUT/_temporary`` with all its parents, so ``OUT`` came back (or they wrote into the user's folder), and the run
    succeeded there, ``_SUCCESS`` and all; taken away once the part file was open, the run ended in a
    ``FileNotFoundError`` traceback. As on hop's engine, the run now fails saying so, writing nothing under ``OUT``'s
    name, and removes its temporary files from the folder moved away."""
    result = spark_runs[name]
    output, elsewhere = result["output"], Path(f"{result['output']}.elsewhere")
    assert result["exit_code"] == 1, result["stderr"]
    assert result["stderr"].endswith(
        f"hop: error: job failed: output directory {output} was removed or moved while the job ran, so its result "
        "cannot be complete: run the job again\n"
    ), result["stderr"]
    if name.startswith("output_removed"):
        assert not output.exists(), sorted(output.rglob("*"))
    else:
        assert [path.name for path in output.iterdir()] == ["mine.txt"]
        assert list(elsewhere.iterdir()) == []


def test_a_failed_run_that_is_not_quiet_does_not_bury_the_error_under_stack_traces(
    spark_runs: dict[str, dict[str, Any]],
) -> None:
    """Without ``--quiet``, a map that raised printed ~100 lines before hop's report: the executor's error and the
    scheduler's "Lost task" warning, each with the Python worker's traceback (PySpark's frames, hop's task
    failure payload) and the JVM's stack; then "ERROR TaskSetManager: Task 0 in stage 0.0 failed 1 times; aborting
    job", which says less than hop's report after it. Spark's log now has none of them, and the progress bar is
    cleared instead of leaving hop's report to start at its end. Hadoop's "WARN NativeCodeLoader: Unable to load
    native-hadoop library" on every start is not printed either."""
    result = spark_runs["failing_verbose"]
    assert "cannot handle boom" in result["error"]
    assert 'failing_map.py", line 9, in map' in result["traceback"]
    printed = result["process_stderr"]
    errors = [line for line in SPARK_LOG_LINE.findall(printed) if line.startswith("ERROR")]
    assert errors == []  # (WARN lines of the start-up may be there)
    assert "aborting job" not in printed
    for noise in ("\tat org.apache.spark", "pyspark/worker.py", "hop-task-failure", "Lost task", "NativeCodeLoader"):
        assert noise not in printed
    if "[Stage" in printed:  # (its carriage returns read as line ends here)
        last_line = printed.rstrip("\n").rpartition("\n")[2]
        assert last_line.isspace() and len(last_line) >= 40, repr(printed[-300:])


def test_a_failed_hop_run_that_is_not_quiet_prints_hops_error_without_sparks_abort_line(
    spark_runs: dict[str, dict[str, Any]], corpus: Path
) -> None:
    """``hop run --engine spark`` of a map that raised, without ``--quiet``, printed Spark's "ERROR TaskSetManager:
    Task 0 in stage 0.0 failed 1 times; aborting job" (on the progress bar's line) above hop's own error, which names
    the record and shows the user's traceback; hop's error is now all there is of the failure (the JVM's lines are
    ``process_stderr``, hop's ``stderr``)."""
    result = spark_runs["failing_verbose_cli"]
    assert result["exit_code"] == 1, result["stderr"]
    traceback, _, last_line = result["stderr"].rstrip("\n").rpartition("\n")
    assert last_line == (
        f"hop: error: job failed: map at {corpus / 'fail.txt'} byte offset 4: 'c boom d' raised RuntimeError: "
        "cannot handle boom"
    ), result["stderr"]
    assert traceback.startswith("Traceback (most recent call last):\n") and 'failing_map.py", line 9' in traceback
    printed = result["process_stderr"]
    assert "aborting job" not in printed and "TaskSetManager" not in printed, printed[-3000:]
    assert [line for line in SPARK_LOG_LINE.findall(printed) if line.startswith("ERROR")] == [], printed[-3000:]


def spark_run_parser() -> argparse.ArgumentParser:
    """The ``hop run`` arguments ``run_spark_from_args`` reads, as hop/cli.py defines them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("job")
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("-o", "--output", required=True)
    parser.add_argument("--reducers", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--overwrite", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--split-size", type=int, default=DEFAULT_SPLIT_BYTES)
    parser.add_argument("--input-format", default=None)
    parser.add_argument("--job-class", default=None)
    parser.add_argument("--spark-master", default=None)
    return parser


def test_run_spark_from_args_rejects_bad_usage_before_starting_spark(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hop.spark_cli import run_spark_from_args

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "part-00000").write_text("x\n")
    parser = spark_run_parser()
    args = parser.parse_args([job_path("wordcount"), str(corpus / "words.txt"), "-o", str(taken), "--quiet"])
    assert run_spark_from_args(args) == 2
    assert "not empty" in capsys.readouterr().err
    args = parser.parse_args([str(tmp_path / "missing.py"), str(corpus / "words.txt"), "-o", str(tmp_path / "o")])
    assert run_spark_from_args(args) == 2
    args = parser.parse_args([job_path("wordcount"), str(tmp_path / "nothing.txt"), "-o", str(tmp_path / "o")])
    assert run_spark_from_args(args) == 2
    assert "does not exist" in capsys.readouterr().err
    assert (taken / "part-00000").read_text() == "x\n"


def test_a_spark_local_dir_that_cannot_be_made_is_refused_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--spark-conf spark.local.dir=DIR`` where DIR cannot be made (a file on its path; ``/proc/x``): Spark's driver
    printed a page of "ERROR JavaUtils: Failed to create directory" with their Java stacks, and the run failed
    with "Spark did not start on master local[2]: [Errno 111] Connection refused", exit code 3, naming neither the
    setting nor what to do. It is refused as bad usage now (exit code 2), naming it, before Spark starts; by ``hop
    compare`` before either engine runs."""
    from hop.spark_cli import register

    (tmp_path / "in.txt").write_text("a b\n")
    (tmp_path / "file").write_text("")
    setting = f"spark.local.dir={tmp_path / 'ok'},{tmp_path / 'file' / 'sub'}"
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    run = subprocess.run([*command, "--spark-conf", setting], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    expected = f"hop: error: --spark-conf {setting}: cannot make or write the folder {tmp_path / 'file' / 'sub'} (Not a"
    assert (run.returncode, run.stderr.startswith(expected)) == (2, True), run.stderr
    assert "ERROR" not in run.stderr and not (tmp_path / "out").exists()
    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["compare", job_path("wordcount"), str(tmp_path / "in.txt"), "--spark-conf", setting])
    assert args.func(args) == 2
    assert capsys.readouterr().err.startswith(expected)


def test_hop_compare_end_to_end(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hop.spark_cli import register

    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    # A reduce that counts its combined values, with a --spill-records other than the default: equal outputs when
    # both engines combine where hop's map buffer spills with it (Spark took the default and counted fewer).
    job, words = job_path("counted_states"), str(corpus / "words.txt")
    argv = ["compare", job, words, "--reducers", "2", "--workers", "2", "--spark-master", "local[2]"]
    argv += ["--split-size", str(SPLIT_SIZE), "--spill-records", str(SPILL_RECORDS)]
    args = parser.parse_args(argv)
    assert args.func(args) == 0, capsys.readouterr().out
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["engine", "exit", "wall", "s", "CPU", "s", "peak", "RSS", "MB", "start-up", "s"]
    rows = {line.split()[0]: line.split()[1:] for line in table[1:3]}
    assert set(rows) == {"hop", "spark"}
    for values in rows.values():
        exit_code, wall, cpu, rss = values[:4]
        assert exit_code == "0" and float(wall) > 0 and float(cpu) > 0 and float(rss) > 10
    assert float(rows["spark"][4]) > 0  # Spark's start-up, from its _job.json
    assert float(rows["spark"][2]) > float(rows["spark"][4]) / 4  # the JVM's CPU time is counted
    assert table[3].startswith("outputs equal:") and "byte-identical" in table[3]


def test_hop_compare_gives_its_spark_run_the_spark_conf_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``hop compare`` took ``--spark-master`` and no ``--spark-conf KEY=VALUE``, which every other command that runs
    a job on Spark takes (usage error: unrecognized arguments). Its Spark run gets the settings now: here an
    environment variable of Spark's executors (``spark.executorEnv.NAME``), which the job's map reads, so that the
    outputs differ by it (hop's engine runs without it)."""
    from hop.spark_cli import register

    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    (tmp_path / "names.txt").write_text("HOP_COMPARE_SETTING\n")
    argv = ["compare", job_path("environment_variable"), str(tmp_path / "names.txt"), "--workers", "1"]
    argv += ["--spark-conf", "spark.executorEnv.HOP_COMPARE_SETTING=given to Spark"]
    args = parser.parse_args(argv)
    assert args.func(args) == 1
    table = capsys.readouterr().out.splitlines()
    assert [row.split()[:2] for row in table[1:3]] == [["hop", "0"], ["spark", "0"]], table
    assert table[3:] == [
        "outputs DIFFER: 1 key differs; first:",
        '  key "HOP_COMPARE_SETTING": hop [null], spark ["given to Spark"]',
    ], table


def test_a_spark_master_given_in_spark_conf_is_the_runs_master_everywhere(tmp_path: Path) -> None:
    """``--spark-conf spark.master=URL`` set the master Spark ran on, but the input was cut for ``--spark-master``'s
    or ``local[WORKERS]``'s cores, and ``_job.json`` and the summary named that one: here 2 maps cut for
    ``local[2]`` on a ``local[1]`` session, reported as ``local[2]``. The setting is the run's one master now (its
    refusals: ``test_cli.py``)."""
    from hop.inputs import expand_inputs
    from hop.planning import plan_map_inputs

    data = tmp_path / "in.txt"
    data.write_text("word " * 500_000)  # (2.5 MB: a map per core, not less than 1 MiB each; hop.inputs)
    files = expand_inputs([str(data)])
    maps = {slots: len(plan_map_inputs(files, DEFAULT_SPLIT_BYTES, slots=slots)) for slots in (1, 2)}
    assert maps == {1: 1, 2: 2}  # (what tells the two masters apart here)
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    command += ["--workers", "2", "--spark-conf", "spark.master=local[1]"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=SPARK_TIMEOUT)
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert (report["master"], report["num_maps"]) == ("local[1]", maps[1])
    summary = [line for line in done.stderr.splitlines() if line.startswith("hop: spark ")]
    assert len(summary) == 1 and " on local[1] succeeded in " in summary[0], done.stderr[-3000:]


def test_an_interrupted_compare_lets_its_spark_run_clean_up(tmp_path: Path) -> None:
    """``hop compare`` interrupted while its Spark run started killed that run (SIGKILL), which left the logging
    configuration it had written in the temporary directory (``hop-spark-log4j2-*.properties``), one per
    interruption. The run is now interrupted as Ctrl-C would, once, and ends cleanly."""
    temporary = tmp_path / "tmp"  # (the runs' temporary directory: what they leave there is this test's to see)
    temporary.mkdir()
    (tmp_path / "in.txt").write_text("a b\n")
    command = [sys.executable, "-m", "hop", "compare", job_path("wordcount"), "in.txt", "--workers", "1"]
    environment = {**os.environ, "TMPDIR": str(temporary)}
    run = subprocess.Popen(command, cwd=tmp_path, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not list(temporary.glob("hop-spark-log4j2-*")):  # (the Spark run is starting its JVM)
            assert time.monotonic() < deadline and run.poll() is None, run.communicate(timeout=10)
            time.sleep(0.02)
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate(timeout=10)
    assert run.returncode == 130 and b"interrupted" in stderr, (run.returncode, stderr)
    assert sorted(path.name for path in temporary.iterdir()) == [], "left in the temporary directory"


def test_hop_compare_of_standard_input_says_it_reads_files(capsys: pytest.CaptureFixture[str]) -> None:
    """Each engine reads the input: ``-`` said "input '/current/dir/-' does not exist"."""
    from hop.spark_cli import register

    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["compare", job_path("wordcount"), "-"])
    assert args.func(args) == 2
    assert "standard input (-) can be read once: save it to a file" in capsys.readouterr().err


def test_hop_compare_of_a_run_hop_refuses_as_bad_usage_does_not_start_spark(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--reducers 2000``, more processes than hop's embedded cluster starts: hop's run exited 2 at once, Spark's then
    ran (64 s on the build machine) and the comparison exited 1, "outputs not compared: hop exited with code 2". It
    now exits 2 with hop's error, Spark not started (its start-up alone takes seconds)."""
    from hop.spark_cli import register

    (tmp_path / "in.txt").write_text("a b\n")
    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["compare", job_path("wordcount"), str(tmp_path / "in.txt"), "--reducers", "2000"])
    started = time.monotonic()
    assert args.func(args) == 2
    assert time.monotonic() - started < 5, "Spark's run was started"
    printed = capsys.readouterr()
    assert printed.err.startswith("hop: error: --workers ") and "--reducers 2000 would start" in printed.err
    assert printed.out == ""


@pytest.mark.parametrize("cause", ["master", "java"])
def test_hop_compare_that_spark_cannot_start_for_is_refused_before_either_engine_runs(
    cause: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spark runs second: a master that does not answer (or no Java) failed it only once hop's run had ended, under
    a table and exit code 1, as an engine that failed; ``hop run --engine spark`` refuses it before it starts, exit
    code 3, and so does ``hop compare`` now, before either engine runs."""
    from hop.spark_cli import register

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # (where hop compare would make its scratch folder)
    monkeypatch.setattr(tempfile, "tempdir", None)
    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    (tmp_path / "in.txt").write_text("a b\n")
    argv = ["compare", job_path("wordcount"), str(tmp_path / "in.txt"), "--workers", "1"]
    if cause == "master":
        with socket.socket() as closed:  # (a port bound, not listening: refused)
            closed.bind(("127.0.0.1", 0))
            args = parser.parse_args([*argv, "--spark-master", f"spark://127.0.0.1:{closed.getsockname()[1]}"])
            code = args.func(args)
        expected = "could not be reached"
    else:
        monkeypatch.setenv("JAVA_HOME", str(tmp_path))
        args = parser.parse_args(argv)
        code = args.func(args)
        expected = "holds no bin/java"
    captured = capsys.readouterr()
    assert code == 3 and expected in captured.err and captured.out == "", captured
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"], "an engine ran"


def write_output(folder: Path, lines: list[str]) -> Path:
    folder.mkdir()
    (folder / "part-00000").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


def test_compare_outputs_tolerance_and_differences(tmp_path: Path) -> None:
    hop_out = write_output(tmp_path / "hop-out", ['"a"\t1', '"b"\t0.30000000000000004', '"c"\t[1,2.0]', '"d"\t"x"'])
    close = write_output(tmp_path / "close", ['"a"\t1', '"b"\t0.3', '"c"\t[1,2.0000000000001]', '"d"\t"x"'])
    result = compare_outputs(hop_out, close, 1e-9)
    assert result["equal"] and result["keys"] == 4 and not result["byte_identical"]
    far = write_output(tmp_path / "far", ['"a"\t2', '"b"\t0.31', '"c"\t[1,2.0]', '"e"\t"x"'])
    result = compare_outputs(hop_out, far, 1e-9)
    assert not result["equal"] and result["differing_keys"] == 4
    assert [d["key"] for d in result["differences"]] == ["a", "b", "d", "e"]
    assert result["differences"][0] == {"key": "a", "hop": [1], "spark": [2]}
    assert values_equal(float("nan"), float("nan"), 0.0) and not values_equal(1, True, 0.5)
    summary = {
        "equal": False,
        "tolerance": 1e-9,
        "error": None,
        "comparison": result,
        "engines": {
            "hop": {"exit_code": 0, "wall_seconds": 1, "cpu_seconds": 1, "peak_rss_bytes": 1e8, "startup_seconds": None}
        },
    }
    assert 'key "a": hop [1], spark [2]' in format_table(summary)
    one_key = write_output(tmp_path / "one-key", ['"a"\t1', '"b"\t0.3', '"c"\t[1,2.0]', '"d"\t"y"'])
    lines = format_table({**summary, "comparison": compare_outputs(hop_out, one_key, 0.1)}).splitlines()
    assert lines[2] == "outputs DIFFER: 1 key differs; first:"  # (it said "1 keys differ")
    alone = write_output(tmp_path / "alone", ['"a"\t1'])
    lines = format_table({**summary, "comparison": compare_outputs(alone, alone, 0.1)}).splitlines()
    assert lines[2].startswith("outputs equal: 1 key, tolerance 1e-09 ")


def test_compare_outputs_of_an_int_no_float_holds_beside_a_float_says_how_they_differ(tmp_path: Path) -> None:
    """An int past a float's range (an exact sum of big numbers) on one side and a float on the other raised
    OverflowError from ``math.isnan``/``math.isclose``: ``hop compare`` ended in a traceback once both engines had
    run, instead of listing the key that differs."""
    big = "1" + "0" * 400
    hop_out = write_output(tmp_path / "hop-out", [f'"a"\t{big}', f'"b"\t{big}', '"c"\t1.5', f'"d"\t[{big}]'])
    other = write_output(tmp_path / "other", ['"a"\t1e300', f'"b"\t{big}', f'"c"\t{big}', '"d"\t[Infinity]'])
    result = compare_outputs(hop_out, other, 1e-9)
    assert (result["equal"], result["differing_keys"]) == (False, 3)
    assert [d["key"] for d in result["differences"]] == ["a", "c", "d"]
    assert values_equal(int(big), float("1e400"), 1e-9) is False  # (an infinity: no int equals it)
    assert values_equal(2**1024, 1.7976931348623157e308, 1e-9)  # (the largest float, within 1e-16 of it)
    assert not values_equal(2**1030, 1.7976931348623157e308, 1e-9) and not values_equal(-(2**1030), 1.5, 1e-9)


def test_compare_outputs_of_ints_past_pythons_digit_limit(tmp_path: Path) -> None:
    """An output value of more than 4,300 digits (tests/jobs/big_ints.py's, on either engine) failed ``hop compare``
    with "ValueError: Exceeds the limit (4300 digits) for integer string conversion" once both engines had run; its
    verdict writes such a value too. The limit is what it was again after (Python's default here: a test run before
    in this process may have lifted it, as a Spark task's job does, hop.spark_tasks)."""
    big = "1" + "0" * 5000
    hop_out = write_output(tmp_path / "hop-out", [f'"a"\t{big}', f'"b"\t{big}'])
    other = write_output(tmp_path / "other", [f'"a"\t{big}', f'"b"\t{big}1'])
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(4300)
    try:
        result = compare_outputs(hop_out, other, 1e-9)
        assert (result["equal"], result["differing_keys"], result["keys"]) == (False, 1, 2)
        summary = {"equal": False, "tolerance": 1e-9, "error": None, "comparison": result, "engines": {}}
        assert f'key "b": hop [{big}], spark [{big}1]' in format_table(summary)
        assert compare_outputs(hop_out, hop_out, 0.0)["equal"] and sys.get_int_max_str_digits() == 4300
    finally:
        sys.set_int_max_str_digits(limit)


@pytest.mark.parametrize("tolerance", ["-1", "nan"])
def test_hop_compare_refuses_a_negative_or_nan_tolerance_before_either_engine_runs(
    tolerance: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A negative one failed with math.isclose's traceback, once both engines had run, at the first float; a NaN
    one compared floats exactly, saying "tolerance nan"."""
    from hop.spark_cli import register

    parser = argparse.ArgumentParser(prog="hop")
    register(parser.add_subparsers(dest="command", required=True))
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["compare", job_path("wordcount"), "in.txt", "--tolerance", tolerance])
    assert exit_.value.code == 2 and f"must be 0 or more, got {tolerance}" in capsys.readouterr().err


def wait_for_log(path: Path, pattern: str, process: subprocess.Popen[bytes], timeout: float = 90) -> re.Match[str]:
    """Wait until ``path`` (a process's log) has a match of ``pattern``; fail if the process exits or time runs out.

    The Spark daemons pick their own free ports (port 0) and log them: ports picked here and passed on could be
    taken by another process in between (the test cluster's workers bind ports all the time), and Spark then moves
    to the next port without saying so to whoever polls the first."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{process.args!r} exited with {process.returncode}"
        match = regex.search(path.read_text(errors="replace")) if path.exists() else None
        if match is not None:
            return match
        time.sleep(0.2)
    pytest.fail(f"{pattern!r} did not appear in {path} within {timeout:.0f}s")


def wait_for_worker(ui_port: int, processes: list[subprocess.Popen[bytes]], timeout: float = 90) -> None:
    """Poll the master's JSON page until a worker is ALIVE; fail if a process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in processes:
            assert process.poll() is None, f"{process.args!r} exited with {process.returncode}"
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as response:
                state = json.load(response)
            if any(worker.get("state") == "ALIVE" for worker in state.get("workers", [])):
                return
        time.sleep(0.5)
    pytest.fail(f"no Spark worker registered with the master within {timeout:.0f}s")


@contextlib.contextmanager
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """A Spark standalone master and one worker (1 core, 1 GB) from the pyspark distribution; yields the master URL."""
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None
    spark_home = Path(spec.origin).parent
    work_dir, log_dir = tmp_path / "spark-work", tmp_path / "spark-logs"
    env = dict(
        os.environ,
        SPARK_HOME=str(spark_home),
        SPARK_WORKER_DIR=str(work_dir),
        SPARK_LOG_DIR=str(log_dir),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    spark_class = str(spark_home / "bin" / "spark-class")
    processes: list[subprocess.Popen[bytes]] = []
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    logs = [open(master_log, "wb"), open(worker_log, "wb")]  # noqa: SIM115 (closed below, after the processes end)
    try:
        master_command = [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master_command += ["--port", "0", "--webui-port", "0"]
        processes.append(subprocess.Popen(master_command, env=env, stdout=logs[0], stderr=logs[0]))
        master = wait_for_log(master_log, r"Starting Spark master at (spark://\S+)", processes[0]).group(1)
        ui = wait_for_log(master_log, r"Bound MasterWebUI to .*started at http://\S+:(\d+)", processes[0])
        ui_port = int(ui.group(1))
        worker_command = [spark_class, "org.apache.spark.deploy.worker.Worker", master]
        worker_command += ["--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0"]
        processes.append(subprocess.Popen(worker_command, env=env, stdout=logs[1], stderr=logs[1]))
        wait_for_worker(ui_port, processes)
        yield master
    finally:
        descendants = []
        for process in processes:
            with contextlib.suppress(psutil.Error):
                descendants += psutil.Process(process.pid).children(recursive=True)
        for process in reversed(processes):  # the worker first, then the master
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _, alive = psutil.wait_procs(descendants, timeout=10)
        for leftover in alive:
            leftover.kill()
        for log in logs:
            log.close()
        shutil.rmtree(work_dir, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)


def test_standalone_master_and_worker(client: Client, corpus: Path, tmp_path: Path) -> None:
    run = SparkRun("standalone", "wordcount", ["words.txt", "more.txt.gz"], reducers=2)
    hop_output(client, run, corpus, tmp_path / "hop-out")
    spark_out = tmp_path / "spark"
    with standalone_cluster(tmp_path) as master:
        command = [sys.executable, "-m", "hop.spark_engine", job_path(run.job), *(str(corpus / n) for n in run.inputs)]
        command += ["-o", str(spark_out), "--quiet", "--reducers", str(run.reducers)]
        command += ["--spark-master", master, "--split-size", str(SPLIT_SIZE)]
        command += ["--spark-conf", "spark.executor.memory=512m", "--spark-conf", "spark.executor.cores=1"]
        command += ["--spark-conf", f"spark.executor.extraJavaOptions={QUICK_JVM_OPTIONS}"]  # (see conftest)
        done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=SPARK_TIMEOUT)
    assert done.returncode == 0, done.stderr[-5000:]
    assert_same_files(tmp_path / "hop-out", spark_out)
    report = json.loads((spark_out / "_job.json").read_text())
    assert report["master"] == master and report["job_id"].startswith("app-")
    assert not (tmp_path / "spark-work").exists() and not (tmp_path / "spark-logs").exists()


def test_spark_cuts_input_for_its_local_cores_as_hop_does_for_its_slots() -> None:
    from hop.spark_engine import _local_cores

    cores = os.cpu_count() or 1
    assert [_local_cores(m) for m in ("local", "local[3]", "local[*]", "local[4,2]")] == [1, 3, cores, 4]
    assert _local_cores("spark://10.0.0.5:7077") == 1


def test_a_hand_written_reduce_after_an_aggregate_combiner_gets_a_state_per_map(
    spark_runs: dict[str, dict[str, Any]],
) -> None:
    """Spark merged the aggregate's states across the maps before the reduce, which then counted 1 state per word
    where hop's reduce counted one per map (so ``hop compare`` reported every word as differing); now each map's
    state reaches the reduce, as on hop (the byte-for-byte comparison is in the test above)."""
    result = spark_runs["counted_states"]
    report = result["report"]
    assert report["num_maps"] > 1
    values = dict(pair.split("\t") for pair in (result["output"] / "part-00000").read_text().splitlines())
    states = [json.loads(value)[1] for value in values.values()]
    assert max(states) == report["num_maps"] and min(states) >= 1


def test_a_reduce_counting_combined_values_gets_as_many_as_on_hop_with_the_same_spill_records(
    client: Client, corpus: Path, tmp_path: Path, spark_runs: dict[str, dict[str, Any]]
) -> None:
    """Spark combined where hop's map buffer spills with its default ``--spill-records`` whatever the run's was:
    with a smaller one, a reduce counting its combined values got one per map on Spark and one per spill on hop.
    (hop runs blocking here: its flow control cannot merge a map's two spills.)"""
    result = spark_runs["counted_spills"]
    assert "report" in result, result
    hop_output(client, BY_NAME["counted_spills"], corpus, tmp_path / "hop-out", mode="blocking")
    assert_same_files(tmp_path / "hop-out", result["output"])
    values = [
        json.loads(line.split("\t")[1])
        for part in result["output"].glob("part-*")
        for line in part.read_text().splitlines()
    ]
    assert max(states for _, states in values) > result["report"]["num_maps"]


def test_differing_outputs_of_a_job_that_combines_before_a_hand_written_reduce_say_why() -> None:
    """``hop compare`` listed the differing keys of such a job (a reduce counting its states) and nothing more; the
    verdict now says the job's output depends on how many spills were combined and what to change."""
    from hop.compare import combine_caveat

    caveat = combine_caveat(job_path("counted_states"))
    assert caveat is not None and "combines (Count())" in caveat and "sum a Count's states" in caveat
    assert combine_caveat(job_path("wordcount")) is None  # an aggregate reduce: the same however it was combined
    assert combine_caveat(job_path("wordcount_nocombine")) is None
    # A step is named by its number from 1, as hop run's messages name it (its first step said "step 0").
    assert (combine_caveat(job_path("two_steps")) or "").startswith("note: step 1 of the job combines ("), "step 1"
    run = {"exit_code": 0, "wall_seconds": 1.0, "cpu_seconds": 1.0, "peak_rss_bytes": 1, "startup_seconds": None}
    comparison = {
        "equal": False,
        "differing_keys": 1,
        "differences": [{"key": "a", "hop": [[3, 2]], "spark": [[3, 1]]}],
    }
    result = {"engines": {"hop": run, "spark": run}, "comparison": comparison, "error": None, "caveat": caveat}
    table = format_table(result).splitlines()
    assert table[-3:] == ["outputs DIFFER: 1 key differs; first:", '  key "a": hop [[3, 2]], spark [[3, 1]]', caveat]


def test_a_value_the_aggregate_cannot_fold_fails_as_on_hop(
    client: Client, corpus: Path, tmp_path: Path, spark_runs: dict[str, dict[str, Any]]
) -> None:
    """``Sum`` of a key whose only value is ``None`` was ``null`` on Spark (its state was ``None``) where hop fails
    naming the aggregate, key and record; Spark now fails with hop's reason."""
    failed = spark_runs["none_value"]
    assert "error" in failed, failed
    with pytest.raises(JobFailed) as failure:
        hop_output(client, BY_NAME["none_value"], corpus, tmp_path / "hop-out")
    reason = failure.value.status["error"]
    assert f"{corpus / 'optional.txt'} byte offset 4: 'y -'" in reason and "Sum() got None" in reason
    assert failed["error"] == reason
    assert "spark_tasks.py" not in failed["traceback"]


def test_init_and_final_hooks_run_on_spark_as_on_hop(spark_runs: dict[str, dict[str, Any]]) -> None:
    """A job with mrjob's ``mapper_init``/``mapper_final``/``reducer_init``/``reducer_final`` was refused by the
    Spark engine ("does not run init/final hooks"); they run now, with hop's output (the byte-for-byte comparison
    is in the test above): every map task's pairs and every reducer's first and last lines."""
    result = spark_runs["hooks"]
    assert "report" in result, result
    report = result["report"]
    lines = [part.read_text().splitlines() for part in sorted(result["output"].glob("part-*"))]
    assert all(part[0] == '"reducer started"\ttrue' and part[-1] == '"reducer ended"\tnull' for part in lines)
    values = dict(line.split("\t") for part in lines for line in part[1:-1])
    assert json.loads(values['"map tasks"']) == report["num_maps"] > 1
    assert json.loads(values['"lines"']) == report["counters"]["map_input_records"]


def test_a_truncated_gzip_input_fails_naming_where_its_text_ends_as_on_hop(
    client: Client, corpus: Path, tmp_path: Path, spark_runs: dict[str, dict[str, Any]]
) -> None:
    """Both engines read a truncated .gz with hop's reader, which said "near byte 0 of its text"; both now say how
    far its text and the file were read (test_inputs.py has the whole message)."""
    import zlib

    path = corpus / "truncated.txt.gz"
    size, text_bytes = path.stat().st_size, len(zlib.decompressobj(wbits=31).decompress(path.read_bytes()))
    where = f"input file {path}: cannot decompress it past byte {text_bytes:,} of its text, having read {size:,} of"
    failed = spark_runs["truncated_gzip"]
    assert failed["error"].startswith(f"map task 0: {where}"), failed
    assert f"check it with `gzip -t {path}`" in failed["error"]
    with pytest.raises(JobFailed) as failure:
        hop_output(client, BY_NAME["truncated_gzip"], corpus, tmp_path / "hop-out")
    assert failure.value.status["error"] == failed["error"] and failed["traceback"] is None


def test_a_list_key_fails_naming_the_record_as_on_hop(
    client: Client, corpus: Path, tmp_path: Path, spark_runs: dict[str, dict[str, Any]]
) -> None:
    """A list key failed inside Spark's own grouping ("Spark job failed: An exception was thrown from the Python
    worker ... TypeError: unhashable type: 'list'" and PySpark's frames); it now fails with hop's reason."""
    failed = spark_runs["list_keys"]
    assert "error" in failed, failed
    with pytest.raises(JobFailed) as failure:
        hop_output(client, BY_NAME["list_keys"], corpus, tmp_path / "hop-out")
    assert failed["error"] == failure.value.status["error"]
    assert "byte offset 0: 'a b' raised UnhashableKeyError" in failed["error"]
    assert "pyspark" not in failed["traceback"] and "spark_tasks.py" not in failed["traceback"]


def test_a_key_the_shuffle_cannot_sort_fails_naming_the_record_as_on_hop(
    client: Client, corpus: Path, tmp_path: Path, spark_runs: dict[str, dict[str, Any]]
) -> None:
    """A date key failed on Spark as "shuffle raised TypeError: key datetime.date(2020, 1, 2) of type date is not a
    msgpack-able key" (the reduce side's sort), naming no record and saying nothing of what to yield instead; it
    now fails with hop's reason and, as on hop, no traceback (no frame of the user's raised it)."""
    failed = spark_runs["odd_keys"]
    assert "error" in failed, failed
    with pytest.raises(JobFailed) as failure:
        hop_output(client, BY_NAME["odd_keys"], corpus, tmp_path / "hop-out")
    assert failed["error"] == failure.value.status["error"]
    where = f"map at {corpus / 'odd.txt'} byte offset 2: 'odd'"
    assert failed["error"].startswith(f"{where} raised UnencodableRecordError: map output key datetime.date("), failed
    assert "yield the date's data as one of those" in failed["error"]
    assert failed["traceback"] is None


def test_a_key_the_shuffle_cannot_sort_is_named_where_the_map_task_folds_or_a_hook_yields_it(
    client: Client, corpus: Path, tmp_path: Path
) -> None:
    """A map task that folds its pairs (the reduce is an aggregate) checks a key as it first meets it, while its
    record is known (it is sorted on the reduce side, long after); one yielded by ``mapper_final`` is named by the
    task and the hook. The tasks run here, outside Spark."""
    from hop.inputs import Split

    split = Split(str(corpus / "odd.txt"), 0, -1)
    reason, shown = map_failure("odd_keys", "OddKeysSummed", 0, "text", [split])
    with pytest.raises(JobFailed) as failure:
        run_job(client, "odd_keys", [corpus / "odd.txt"], tmp_path / "hop-out", job_class="OddKeysSummed")
    assert reason == failure.value.status["error"]
    assert reason.startswith(f"map at {split.path} byte offset 2: 'odd' raised UnencodableRecordError: "), reason
    assert "holding frozenset({'odd'}) (type frozenset), cannot be encoded by the shuffle: yield a list" in reason
    assert shown is None
    reason, shown = map_failure("odd_keys", "OddFinalKey", 0, "text", [split])
    assert reason.startswith("map task 0: mapper_final output key datetime.date(2020, 1, 2) (type date) cannot be "), (
        reason
    )
    assert shown is None


@pytest.mark.parametrize(
    ("name", "output"),
    [
        ("set_value", "value {'odd'} (type set) of key 'odd' cannot be encoded by the shuffle: yield a list or tuple"),
        ("surrogate_key", "key 'odd\\ud800' (type str) cannot be encoded by the shuffle: the str holds a lone"),
        ("surrogate_value", "value 'odd\\udc80' (type str) of key 'odd' cannot be encoded by the shuffle: the str"),
    ],
)  # fmt: skip
def test_an_output_the_shuffle_cannot_encode_fails_naming_the_record_as_on_hop(
    client: Client, corpus: Path, tmp_path: Path, spark_runs: dict[str, dict[str, Any]], name: str, output: str
) -> None:
    """A set value or a str with a lone surrogate (key or value) fails on hop's engine, whose msgpack shuffle cannot
    encode it; Spark's pickle carries both, and the job succeeded with output hop never writes (the set counted as
    one value, the surrogate written as replacement characters by the reduce). It now fails with hop's reason."""
    failed = spark_runs[name]
    assert "error" in failed, failed
    with pytest.raises(JobFailed) as failure:
        hop_output(client, BY_NAME[name], corpus, tmp_path / "hop-out")
    assert failed["error"] == failure.value.status["error"]
    where = f"map at {corpus / 'odd.txt'} byte offset 2: 'odd'"
    assert failed["error"].startswith(f"{where} raised UnencodableRecordError: map output {output}"), failed
    assert failed["traceback"] is None


@pytest.mark.parametrize(
    ("job_class", "reason"),
    [
        ("CombineYieldsSet", "combine at key 'a' raised UnencodableRecordError: combine output value {{'a'}} (type"),
        ("CombinePassesSet", "map at {path} byte offset 2: 'odd' raised UnencodableRecordError: map output value {{'o"),
        ("MaxOfSets", "map at {path} byte offset 0: 'a' raised UnencodableRecordError: map output value {{'a'}} (type"),
    ],
)  # fmt: skip
def test_a_combine_output_the_shuffle_cannot_encode_is_named_as_on_hop(
    client: Client, corpus: Path, tmp_path: Path, job_class: str, reason: str
) -> None:
    """A combiner yielding a set is named by its key; one passing on the map's set is the map's, whose record the
    task finds by mapping its splits again, as hop's does, and so is an aggregate's state that is a set (``Max`` of
    sets). All ran on Spark with the set pickled. The tasks run here, outside Spark."""
    from hop.inputs import Split

    split = Split(str(corpus / "odd.txt"), 0, -1)
    found, shown = map_failure("odd_values", job_class, 0, "text", [split])
    with pytest.raises(JobFailed) as failure:
        run_job(client, "odd_values", [corpus / "odd.txt"], tmp_path / "hop-out", job_class=job_class)
    assert found == failure.value.status["error"]
    assert found.startswith(reason.format(path=split.path)), found
    assert shown is None


@contextlib.contextmanager
def _busy_spark_run(tmp_path: Path, temporary: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``hop run --engine spark`` of a map that spins, in ``tmp_path`` with ``temporary`` as its TMPDIR and its
    standard error in ``tmp_path/stderr``, given once its Spark job has started; killed, if it still runs, after."""
    job = str(TEST_JOBS / "busy_map.py")
    command = [sys.executable, "-m", "hop", "run", job, "in.txt", "-o", "out", "--engine", "spark", "--workers", "1"]
    environment = {**os.environ, "TMPDIR": str(temporary)}
    with open(tmp_path / "stderr", "w+") as stderr:
        process = subprocess.Popen(command, cwd=tmp_path, env=environment, stderr=stderr, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while "[Stage 0:" not in (tmp_path / "stderr").read_text() and process.poll() is None:
                assert time.monotonic() < deadline, "the Spark job did not start"
                time.sleep(0.2)
            yield process
        finally:
            process.kill()
            process.wait()


def _said_interrupted_and_reported_cancelled(tmp_path: Path, temporary: Path) -> str:
    """Check what a :func:`_busy_spark_run` ended by Ctrl-C left: its last line ``interrupted``, ``OUT/_job.json``
    saying the job was cancelled by SIGINT, no ``_SUCCESS``, its temporary directory empty; return what it printed."""
    printed = (tmp_path / "stderr").read_text()
    assert printed.endswith("hop: error: interrupted\n"), printed[-2000:]
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    # (as hop's engine reports a batch job cancelled so; it said status "interrupted", hop's engine "failed")
    assert (report["status"], report["error"]) == ("failed", "cancelled: hop run was interrupted by SIGINT")
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert os.listdir(temporary) == []
    return printed


def test_ctrl_c_cancels_the_spark_job_and_ends_without_py4j_tracebacks(tmp_path: Path) -> None:
    """Ctrl-C during a Spark run printed 47 lines of py4j tracebacks ("ERROR:root:Exception while sending command",
    "KeyboardInterrupt while sending command": PySpark's handler cancels the jobs inside the py4j call the run waits
    in) before "interrupted", and left no _job.json; the job is now cancelled from another thread, the run exits 130
    saying "interrupted", and its report says so.

    The JVM kept its shuffle files and ``spark-*`` folders in /tmp whatever ``TMPDIR`` said (Java ignores it), where
    a JVM killed outright left them; they are in a directory of the run's own there now, removed as the run ends."""
    (tmp_path / "in.txt").write_text("spin\n")
    # The run's temporary directory (what it leaves there is this test's to see), named as the JVM's options could
    # not take it: a space split them, and Spark did not start ("Could not find or load main class").
    temporary = tmp_path / "tmp dir 'x'"
    temporary.mkdir()
    with _busy_spark_run(tmp_path, temporary) as process:
        assert list(temporary.glob("hop-spark-tmp-*/blockmgr-*")), "Spark's shuffle folder is in TMPDIR"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    printed = _said_interrupted_and_reported_cancelled(tmp_path, temporary)
    assert "Traceback" not in printed and "ERROR:root" not in printed and "\tat org.apache" not in printed, printed


def test_a_ctrl_c_delivered_twice_at_once_cancels_the_spark_job_as_one_does(tmp_path: Path) -> None:
    """``timeout -s INT 60 hop run --engine spark ...`` delivers its SIGINT to the run, then to its process group:
    twice, a fraction of a millisecond apart (hop.cli.SAME_SIGNAL_SECONDS). The second was taken for a second
    Ctrl-C, which ends the run at once: it left no ``_job.json`` (nor its output folder) and printed the cancelling
    thread's traceback, a page of Java stack ("Cannot call methods on a stopped SparkContext"). It is now the one
    Ctrl-C it is. (Sent 20 ms apart: two signals that come before Python's handler has run are one to Python.)"""
    (tmp_path / "in.txt").write_text("spin\n")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with _busy_spark_run(tmp_path, temporary) as process:
        process.send_signal(signal.SIGINT)
        time.sleep(0.02)  # (past the handler's run for the first, well before the job's cancellation ends)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    printed = _said_interrupted_and_reported_cancelled(tmp_path, temporary)
    assert "Traceback" not in printed and "\tat org.apache" not in printed and "\norg.apache" not in printed, printed


def test_the_reader_of_its_messages_gone_cancels_the_spark_job_as_on_hop(tmp_path: Path) -> None:
    """``hop run --engine spark ... 2>&1 | head -1`` whose reader went away while the job ran: the run waits in the
    job's call, writing nothing itself, and the JVM's lines (its progress bar) that found the reader gone were
    dropped, so the job ran to its end for nobody and exited 0. As on hop's engine (``hop.closed_output``), the job
    is now cancelled, at the bar's next change, and the run exits 141, saying why in its report."""
    with open(tmp_path / "in.txt", "w") as file:  # (20 maps of 64,000 bytes: 3 s each, a minute's job on 1 core)
        file.writelines(f"word {number % 1000:04d}\n" for number in range(128_000))
    command = [sys.executable, "-m", "hop", "run", job_path("slow_map"), "in.txt", "-o", "out", "--engine", "spark"]
    command += ["--workers", "1", "--split-size", "64000"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None
        printed, deadline = b"", time.monotonic() + 120
        while b"[Stage 0:" not in printed:  # (the job runs: its progress bar shows)
            assert time.monotonic() < deadline and process.poll() is None, printed.decode()[-3000:]
            printed += os.read(process.stderr.fileno(), 65536)
        process.stderr.close()  # (as head does once it has its line)
        assert process.wait(timeout=45) == 128 + signal.SIGPIPE
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert (report["status"], report["error"]) == (
        "failed",
        "cancelled: the reader of hop run's output or messages went away (SIGPIPE)",
    )
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_a_quiet_run_that_succeeds_prints_nothing(tmp_path: Path) -> None:
    """``hop run --engine spark --quiet`` of a job that succeeded printed PySpark's accumulator server's traceback as
    it ended ("Exception occurred during processing of request from ('127.0.0.1', ...)", 20 lines to ``EOFError``):
    the server, shut down in a thread of its own, read the JVM's end of its connection as an update cut short."""
    (tmp_path / "in.txt").write_text("a b a\n")
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    done = subprocess.run([*command, "--quiet"], cwd=tmp_path, capture_output=True, text=True, timeout=SPARK_TIMEOUT)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert (tmp_path / "out" / "_SUCCESS").exists()


def test_a_driver_jvm_killed_during_the_job_is_reported_as_such(tmp_path: Path) -> None:
    """The driver JVM killed outright while its job ran (the kernel's out-of-memory killer does so) ended the run
    with "SparkJobFailed: Spark job failed: [Errno 111] Connection refused" and the traceback of stopping the session
    over the lost connection, and its temporary directory stayed until the next run. The run now says the JVM was
    killed, and what to do if memory ran out, and removes it."""
    (tmp_path / "in.txt").write_text("spin\n")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with _busy_spark_run(tmp_path, temporary) as process:
        (jvm,) = [child for child in psutil.Process(process.pid).children() if child.name() == "java"]
        jvm.kill()
        assert process.wait(timeout=60) == 1
    printed = (tmp_path / "stderr").read_text()
    assert printed.endswith(
        "hop: error: job failed: Spark's driver JVM was killed by SIGKILL during the job: if the kernel's "
        "out-of-memory killer ended it (`dmesg` says so), run with fewer --workers, or where more memory is free\n"
    ), printed[-2000:]
    assert "Traceback" not in printed, printed
    assert json.loads((tmp_path / "out" / "_job.json").read_text())["status"] == "failed"
    assert os.listdir(temporary) == []


def test_an_output_replaced_while_spark_starts_is_neither_cleared_nor_written(tmp_path: Path) -> None:
    """``OUT`` moved away while Spark started, and a folder of the user's made under its name: the run's
    ``--overwrite`` cleared that folder (its start-up takes seconds) and wrote its output there. The run now fails
    as when ``OUT`` is taken away while its job runs, leaving both folders as they were, and its temporary files
    removed."""
    output, elsewhere, temporary = tmp_path / "out", tmp_path / "elsewhere", tmp_path / "tmp"
    temporary.mkdir()
    (tmp_path / "in.txt").write_text("a b\n")
    output.mkdir()
    (output / "old.txt").write_text("the previous output\n")
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    command += ["--overwrite", "--quiet", "--workers", "1"]
    environment = {**os.environ, "TMPDIR": str(temporary)}
    run = subprocess.Popen(
        command, cwd=tmp_path, env=environment, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(run.pid).children():  # (once PySpark has started the JVM's launch)
            assert time.monotonic() < deadline and run.poll() is None, "the JVM started"
            time.sleep(0.02)
        output.rename(elsewhere)
        output.mkdir()
        (output / "mine.txt").write_text("the user's\n")
        _, stderr = run.communicate(timeout=SPARK_TIMEOUT)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=10)
    assert run.returncode == 1, stderr
    assert stderr.endswith(
        f"hop: error: job failed: output directory {output} was removed or moved while the job ran, so its result "
        "cannot be complete: run the job again\n"
    ), stderr
    assert [path.name for path in output.iterdir()] == ["mine.txt"]
    assert [path.name for path in elsewhere.iterdir()] == ["old.txt"]
    assert os.listdir(temporary) == []


@needs_spark
def test_a_standard_library_name_in_the_current_directory_does_not_replace_sparks_python_workers(
    tmp_path: Path,
) -> None:
    """PySpark starts its Python workers as ``python -m pyspark.daemon`` in the driver's current directory, first on
    their path: a user's ``json.py`` there replaced the standard library's, and ``hop run --engine spark`` failed
    with a page of Java stack traces ending "module 'json' has no attribute 'loads'". The command runs as the
    installed ``hop`` does, its own path holding no current directory."""
    (tmp_path / "in.txt").write_text("a b a\n")
    for name in ("json", "selectors"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('{name}.py of the current directory was imported')\n")
    command = [sys.executable, "-P", "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out"]
    command += ["--engine", "spark", "--quiet", "--workers", "1"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=SPARK_TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(read_output(tmp_path / "out")) == [("a", 2), ("b", 1)]


@needs_spark
def test_sigterm_while_spark_starts_exits_143_and_ends_the_jvm(tmp_path: Path) -> None:
    """SIGTERM to ``hop run --engine spark`` while its JVM started ended it with 130, Ctrl-C's code, and left the
    JVM running for good: PySpark lost it, and it no longer watched its stdin. It ends with 143 now, the JVM too."""

    def started() -> list[psutil.Process]:  # (by their directory: one left running is no child of the run)
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.cwd() == str(tmp_path) and process.pid != run.pid:
                    found.append(process)
        return found

    (tmp_path / "in.txt").write_text("a b\n")
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    run = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not psutil.Process(run.pid).children():  # (signalled once PySpark has started the JVM's launch)
            assert time.monotonic() < deadline and run.poll() is None, "the JVM started"
            time.sleep(0.02)
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=30)
        _, alive = psutil.wait_procs(started(), timeout=2)  # (the JVM, or the script that would start it)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate(timeout=10)
        for process in started():
            process.kill()
    assert run.returncode == 143 and "interrupted" in stderr, (run.returncode, stderr)
    assert not alive, alive


def test_ctrl_c_while_the_session_starts_prints_no_py4j_traceback(tmp_path: Path) -> None:
    """Ctrl-C once the JVM was up but the session still starting (the main thread waiting in a call into the JVM)
    printed py4j's "ERROR:root:KeyboardInterrupt while sending command." and a traceback through hop's signal
    handler, then at times "ERROR:py4j.clientserver:Exception occurred while shutting down connection" and two
    more, before "interrupted". Now "interrupted" alone, as Ctrl-C before or after that window."""
    (tmp_path / "in.txt").write_text("a b\n")
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--engine", "spark"]
    code, stderr = interrupted_as_spark_starts(command, cwd=tmp_path)
    assert code == 130 and stderr == "hop: error: interrupted\n", (code, stderr)


SESSION_KEEPS_HANDLER = """
import signal
from hop.spark_engine import shutdown_jvm, start_session, stop_session

def ours(signum, frame):
    raise KeyboardInterrupt

signal.signal(signal.SIGINT, ours)
spark = start_session("local[1]", "handler", quiet=True)
print(signal.getsignal(signal.SIGINT) is ours)
stop_session(spark)
shutdown_jvm()
"""


def test_a_started_session_leaves_the_callers_sigint_handler_in_place() -> None:
    """PySpark's context set its own SIGINT handler, which cancels the jobs from inside the call into the JVM the
    main thread waits in: Ctrl-C while the session was created (``getOrCreate``), or outside the job's
    ``collect``, printed "ERROR:root:Exception while sending command." and the "reentrant call" traceback before
    "interrupted". The caller's handler (``hop run``'s) is put back as soon as the context exists."""
    done = subprocess.run(
        [sys.executable, "-c", SESSION_KEEPS_HANDLER], cwd=ROOT, capture_output=True, text=True, timeout=SPARK_TIMEOUT
    )
    assert done.returncode == 0 and done.stdout == "True\n", (done.stdout, done.stderr[-3000:])


BLOCK_MANAGER_ERRORS = """
from hop.spark_engine import flush_jvm_stderr, shutdown_jvm, start_session, stop_session

spark = start_session("local[1]", "logging", quiet=False)
log4j = spark.sparkContext._jvm.org.apache.logging.log4j
logger = log4j.LogManager.getLogger("org.apache.spark.storage.DiskBlockManager")
failure = spark.sparkContext._jvm.java.io.IOException("Failed to delete: /tmp/x/blockmgr-1/0c/shuffle_0_1_0.data")
logger.error("Exception while deleting local spark dir: /tmp/x/blockmgr-1", failure)
logger.error("Failed to create local dir in /full/disk. Ignoring this directory.", failure)
flush_jvm_stderr()
stop_session(spark)
shutdown_jvm()
"""


def test_the_block_managers_failure_to_delete_its_shuffle_folder_is_not_printed() -> None:
    """Ctrl-C of a run on Spark printed, now and then, the block manager's "Exception while deleting local spark
    dir" with a page of Java stack trace ("Failed to delete: .../blockmgr-..."): the cancelled job's task still wrote
    a shuffle file there as the session stopped. The run removes the JVM's whole temporary directory itself once the
    JVM has ended, so that line is dropped; the block manager's other errors are still printed."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_MANAGER_ERRORS], cwd=ROOT, capture_output=True, text=True, timeout=SPARK_TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Failed to create local dir in /full/disk" in done.stderr, done.stderr[-3000:]
    assert "Exception while deleting local spark dir" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.count("Failed to delete: /tmp/x/blockmgr-1") == 1, done.stderr[-3000:]  # (the other's cause)


def test_a_second_ctrl_c_ends_the_spark_run_at_once_and_reports_it_as_the_first_would(tmp_path: Path) -> None:
    """A second Ctrl-C (past SAME_SIGNAL_SECONDS) while the first cancels the job ends the run at once: it left no
    ``_job.json`` and removed the output folder, left empty, where the README says an interrupted run reports
    ``cancelled: hop run was interrupted by SIGINT``."""
    (tmp_path / "in.txt").write_text("spin\n")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with _busy_spark_run(tmp_path, temporary) as process:
        process.send_signal(signal.SIGINT)
        time.sleep(0.7)  # (a second Ctrl-C, not the first delivered again)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    _said_interrupted_and_reported_cancelled(tmp_path, temporary)
