"""The contenders: how each is launched as a subprocess, whether it can run here, what figures it adds.

- ``hop-pipelined`` / ``hop-blocking``: ``hop run JOB INPUT -o OUT --overwrite --quiet --workers N
  [--blocking]`` (the embedded cluster's start-up included); extra figures from ``OUT/_job.json``.
- ``serial``, ``bare-split``, ``pyspark-rdd``, ``spark-sql``, ``mrjob``: the scripts in ``bench/runners``, which
  print their own figures (job time, Spark start-up) as a ``BENCH-RESULT {json}`` line.
- ``mrjob`` runs on a slice of the input (``slice_bytes``); the suite scales its time to the full size.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from bench.environment import hop_command, python_module, subprocess_env
from bench.runners.common import RESULT_MARK, load_plan
from hop.spark_gateway import java_problem


@dataclass(frozen=True)
class RunSpec:
    """Everything one run of a contender needs."""

    job: str
    inputs: list[str]
    out: Path
    hop_args: tuple[str, ...]
    sql_query: str | None
    parallelism: int


class Contender:
    """Base: a named command line; subclasses fill in the details."""

    output_format = "tsv"
    """``tsv``: hop's ``json(key) TAB json(value)`` lines; ``jsonl``: ``{"key": ..., "value": ...}`` lines."""
    slice_bytes: int | None = None
    """When set, the contender runs on this many bytes of the input, its time scaled to the full size."""

    def __init__(self, name: str) -> None:
        self.name = name

    def unavailable(self) -> str | None:
        """Why this contender cannot run on this machine, or None."""
        return None

    def skip_reason(self, spec: RunSpec) -> str | None:
        """Why this contender cannot express this job, or None."""
        return None

    def command(self, spec: RunSpec) -> list[str]:
        raise NotImplementedError

    def extras(self, spec: RunSpec, stdout: str) -> dict[str, Any]:
        """Figures the run reported about itself."""
        for line in reversed(stdout.splitlines()):
            if line.startswith(RESULT_MARK):
                return dict(json.loads(line[len(RESULT_MARK) :]))
        return {}


class Hop(Contender):
    def __init__(self, name: str, blocking: bool) -> None:
        super().__init__(name)
        self.blocking = blocking

    def command(self, spec: RunSpec) -> list[str]:
        mode = ["--blocking"] if self.blocking else []
        return [
            *hop_command(),
            "run",
            spec.job,
            *spec.inputs,
            "-o",
            str(spec.out),
            "--overwrite",
            "--quiet",
            "--workers",
            str(spec.parallelism),
            *mode,
            *spec.hop_args,
        ]

    def extras(self, spec: RunSpec, stdout: str) -> dict[str, Any]:
        try:
            report = json.loads((spec.out / "_job.json").read_text())
        except (OSError, ValueError):
            return {}
        start, end, first = report.get("start"), report.get("end"), report.get("first_shuffle_at")
        figures: dict[str, Any] = {
            "mode": report.get("mode"),
            "num_maps": report.get("num_maps"),
            "num_reduces": report.get("num_reduces"),
        }
        if start and end:
            figures["job_wall_s"] = end - start
        if start and first:
            figures["first_shuffle_s"] = first - start
            if end and end > start:
                figures["first_shuffle_fraction"] = (first - start) / (end - start)
        if start and report.get("last_map_commit_at"):
            figures["last_map_commit_s"] = report["last_map_commit_at"] - start
            if report.get("last_reduce_input_at"):  # how long the shuffle ran on after the last map committed
                figures["shuffle_after_maps_s"] = report["last_reduce_input_at"] - report["last_map_commit_at"]
        counters = report.get("counters", {})
        wanted = ("map_output_records", "shuffle_bytes")
        figures["counters"] = {name: counters[name] for name in wanted if name in counters}
        for kind in ("map", "reduce"):  # the tasks' own CPU, apart from the cluster's and the command's
            if f"{kind}_cpu_seconds" in counters:
                figures[f"{kind}_cpu_s"] = counters[f"{kind}_cpu_seconds"]
        return figures


class Script(Contender):
    """One of the ``bench.runners`` scripts, given the job file."""

    def __init__(self, name: str, module: str, needs: tuple[str, ...] = ()) -> None:
        super().__init__(name)
        self.module = module
        self.needs = needs

    def unavailable(self) -> str | None:
        return _missing(self.needs)

    def command(self, spec: RunSpec) -> list[str]:
        return [
            *python_module(self.module),
            "--job",
            spec.job,
            "--out",
            str(spec.out),
            *self._options(spec),
            *spec.inputs,
        ]

    def _options(self, spec: RunSpec) -> list[str]:
        return []


class ParallelScript(Script):
    """A script given the run's parallelism (``--parallelism N``), as hop is given ``--workers N``."""

    def _options(self, spec: RunSpec) -> list[str]:
        return ["--parallelism", str(spec.parallelism)]


class PySparkRdd(ParallelScript):
    pass


class BareSplit(ParallelScript):
    def skip_reason(self, spec: RunSpec) -> str | None:
        if load_plan(spec.job).aggregate is None:
            return "no aggregate to merge the processes' results with (splitting a generic reduce needs a shuffle)"
        return None


class SparkSql(Contender):
    output_format = "jsonl"

    def unavailable(self) -> str | None:
        return _missing(("pyspark", "java"))

    def skip_reason(self, spec: RunSpec) -> str | None:
        return None if spec.sql_query else "no DataFrame version of this job"

    def command(self, spec: RunSpec) -> list[str]:
        return [
            *python_module("bench.runners.spark_sql"),
            "--query",
            str(spec.sql_query),
            "--out",
            str(spec.out),
            "--parallelism",
            str(spec.parallelism),
            *spec.inputs,
        ]


class MrJob(Script):
    def __init__(self, name: str, slice_bytes: int) -> None:
        super().__init__(name, "bench.runners.mr_job", needs=("mrjob",))
        self.slice_bytes = slice_bytes


_IMPORTS = {"mrjob": "import mrjob.job, mrjob.inline", "pyspark": "import pyspark.sql"}


@cache
def _check(need: str) -> str | None:
    """Why ``need`` (a Python package or ``java``) is not usable, or None."""
    if need == "java":  # the java Spark runs: $JAVA_HOME/bin/java when JAVA_HOME is set, whatever the PATH holds
        problem = java_problem()
        if problem:
            return problem
        java_home = os.environ.get("JAVA_HOME")
        probe = [os.path.join(java_home, "bin", "java") if java_home else shutil.which("java") or "java", "-version"]
    else:
        if importlib.util.find_spec(need) is None:
            return f"Python package {need!r} is not installed (pip install {need})"
        probe = [sys.executable, "-W", "ignore", "-c", _IMPORTS.get(need, f"import {need}")]
    try:
        result = subprocess.run(probe, capture_output=True, text=True, timeout=120, env=subprocess_env())
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{need} does not start: {error}"
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no message)"])[-1]
        return f"{need} does not work on Python {sys.version.split()[0]}: {last}"
    return None


def _missing(needs: tuple[str, ...]) -> str | None:
    for need in needs:
        reason = _check(need)
        if reason:
            return reason
    return None


def build(names: list[str], mrjob_slice: int) -> list[Contender]:
    """The contenders called ``names``, in that order."""
    known: dict[str, Contender] = {
        "hop-pipelined": Hop("hop-pipelined", blocking=False),
        "hop-blocking": Hop("hop-blocking", blocking=True),
        "serial": Script("serial", "bench.runners.serial"),
        "bare-split": BareSplit("bare-split", "bench.runners.split"),
        "pyspark-rdd": PySparkRdd("pyspark-rdd", "bench.runners.spark_rdd", needs=("pyspark", "java")),
        "spark-sql": SparkSql("spark-sql"),
        "mrjob": MrJob("mrjob", mrjob_slice),
    }
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(known)}")
    return [known[name] for name in names]
