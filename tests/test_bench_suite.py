"""The benchmark suite's own waits: the reference run that checks other contenders' output."""

from __future__ import annotations

import time
from pathlib import Path

from bench.datasets import Dataset
from bench.stats import Run
from bench.suite import CaseState, Options, Suite
from bench.workloads import Case

REPO = Path(__file__).resolve().parent.parent


def test_the_reference_run_keeps_to_the_timeout_and_leaves_its_runs_unchecked(tmp_path: Path) -> None:
    """The untimed hop run that checks the runs of contenders with no hop run beside them had no timeout: a hung
    one held the whole benchmark. Past ``--timeout`` the runs waiting for it say they were not checked, and why."""
    source = tmp_path / "in.txt"
    source.write_text("a b a\n" * 200_000)
    suite = Suite([], Options(repeats=1, parallelism=1, timeout=0.05, runs_dir=tmp_path / "runs"))
    case = Case("wordcount", "wordcount", str(REPO / "jobs" / "wordcount.py"), Dataset(source, "text"))
    waiting = Run(1, "wordcount", "wordcount", "serial", 1, source.stat().st_size, 1.0, 1.0, 1.0, 10.0, 0)
    state = CaseState(pending=[(waiting, tmp_path / "serial-out", "tsv")])
    started = time.monotonic()
    suite._reference_run(case, state, None)
    assert time.monotonic() - started < 10, "the reference run was waited for past its timeout"
    assert waiting.verification == "not checked: the reference hop run took over the --timeout of 0.05 s"
    assert state.pending == [] and state.reference is None
