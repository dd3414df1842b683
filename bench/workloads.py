"""The workloads: which job runs on which input, with which hop options, for which contenders.

- ``wordcount-zipf``: ``jobs/wordcount.py`` on ``--size`` of Zipf text (vocabulary 100,000).
- ``wordcount-uniform``: the same job on uniform text (the combiner barely shrinks anything).
- ``pageviews``: ``jobs/pageviews.py`` on about ``--size`` of hourly page-count files.
- ``heavy-reduce``: ``bench/jobs/heavy_reduce.py`` (no combiner, costly reduce) on the Zipf text, hop with
  ``--reducers 4``: pipelined against blocking.
- ``scaling``: word count on Zipf text of 1x, 2x and 4x ``--scaling-base``, hop-pipelined only.

A workload has one or more *cases* (scaling has three); contenders run on every case of a workload,
interleaved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench import datasets
from bench.environment import BENCH_DIR, REPO_ROOT

CONTENDERS = ("hop-pipelined", "hop-blocking", "serial", "bare-split", "pyspark-rdd", "spark-sql", "mrjob")
WORKLOADS = ("wordcount-zipf", "wordcount-uniform", "pageviews", "heavy-reduce", "scaling")
SCALING_FACTORS = (1, 2, 4)

WORDCOUNT = str(REPO_ROOT / "jobs" / "wordcount.py")
PAGEVIEWS = str(REPO_ROOT / "jobs" / "pageviews.py")
HEAVY_REDUCE = str(BENCH_DIR / "jobs" / "heavy_reduce.py")


@dataclass(frozen=True)
class Case:
    """One input and job: the unit a table row (per contender) describes."""

    workload: str
    label: str
    job: str
    dataset: datasets.Dataset
    hop_args: tuple[str, ...] = ()
    sql_query: str | None = None
    skip: dict[str, str] = field(default_factory=dict)
    """Contenders that do not run this case, with the reason."""


@dataclass(frozen=True)
class Workload:
    name: str
    cases: list[Case]


@dataclass(frozen=True)
class Settings:
    """The parameters that shape the inputs."""

    data_dir: Path
    size: int
    scaling_base: int


def _only(contenders: tuple[str, ...], reason: str) -> dict[str, str]:
    return {name: reason for name in CONTENDERS if name not in contenders}


def build(name: str, settings: Settings) -> Workload:
    """The workload ``name`` with its inputs generated (or found in the cache)."""
    data, size = settings.data_dir, settings.size
    if name in ("wordcount-zipf", "wordcount-uniform"):
        text = datasets.text(data, size, uniform=name.endswith("uniform"))
        return Workload(name, [Case(name, name, WORDCOUNT, text, sql_query="wordcount")])
    if name == "pageviews":
        views = datasets.pageviews(data, size)
        return Workload(name, [Case(name, name, PAGEVIEWS, views, sql_query="pageviews")])
    if name == "heavy-reduce":
        skip = {"spark-sql": "not expressible: the reduce is Python code (sorts each key's values)"}
        text = datasets.text(data, size)
        return Workload(name, [Case(name, name, HEAVY_REDUCE, text, hop_args=("--reducers", "4"), skip=skip)])
    if name == "scaling":
        skip = _only(("hop-pipelined",), "scaling is measured for hop-pipelined only")
        sizes = [(factor, datasets.text(data, factor * settings.scaling_base)) for factor in SCALING_FACTORS]
        cases = [Case(name, f"scaling-{factor}x", WORDCOUNT, text, skip=skip) for factor, text in sizes]
        return Workload(name, cases)
    raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
