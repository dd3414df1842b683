"""Raw runs and their summary per (case, contender): min/median/max wall time, CPU, peak memory, correctness.

Times of a contender run on a slice are scaled to the full input: the time the script spent in the job is
multiplied by ``full bytes / slice bytes`` and the rest (interpreter and library start-up) is kept as
measured; CPU time is scaled by the same overall factor. ``scale`` and the raw figures stay in the JSON.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Run:
    """One measured run of one contender on one case."""

    seq: int
    workload: str
    case: str
    contender: str
    repeat: int
    input_bytes: int
    wall_s: float
    cpu_s: float
    cpu_sampled_s: float
    peak_rss_mb: float
    returncode: int
    timed_out: bool = False
    scale: float = 1.0
    extras: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    verification: str = "not checked"

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    @property
    def mismatch(self) -> bool:
        return self.verification.startswith("MISMATCH")

    @property
    def scaled_wall_s(self) -> float:
        if self.scale == 1.0:
            return self.wall_s
        job = float(self.extras.get("job_s", self.wall_s))
        return self.wall_s - job + job * self.scale

    @property
    def scaled_cpu_s(self) -> float:
        return self.cpu_s * (self.scaled_wall_s / self.wall_s if self.wall_s else 1.0)


@dataclass
class Row:
    """The summary of every run of one contender on one case."""

    workload: str
    case: str
    contender: str
    runs: list[Run]
    ratio: float | None = None
    """Median wall time over hop-pipelined's on the same case (``scaling-Nx`` rows: over scaling-1x)."""

    @property
    def good(self) -> list[Run]:
        return [run for run in self.runs if run.ok]

    def _median(self, values: list[float]) -> float | None:
        return statistics.median(values) if values else None

    @property
    def wall(self) -> tuple[float, float, float] | None:
        walls = [run.scaled_wall_s for run in self.good]
        return (min(walls), statistics.median(walls), max(walls)) if walls else None

    @property
    def median_wall(self) -> float | None:
        return self.wall[1] if self.wall else None

    @property
    def median_cpu(self) -> float | None:
        return self._median([run.scaled_cpu_s for run in self.good])

    @property
    def median_rss_mb(self) -> float | None:
        return self._median([run.peak_rss_mb for run in self.good])

    def median_extra(self, name: str) -> float | None:
        values = [run.extras.get(name) for run in self.good]
        return self._median([float(value) for value in values if value is not None])

    @property
    def status(self) -> str:
        """``ok``, ``MISMATCH``, ``FAILED`` or ``unchecked``, with counts when not every run agrees."""
        total = len(self.runs)
        failed = sum(not run.ok for run in self.runs)
        mismatched = sum(run.mismatch for run in self.runs)
        checked = sum(run.verification.startswith(("ok", "reference")) for run in self.runs)
        parts = []
        if mismatched:
            parts.append(f"MISMATCH {mismatched}/{total}")
        if failed:
            parts.append(f"FAILED {failed}/{total}")
        if parts:
            return ", ".join(parts)
        return "ok" if checked == total else f"unchecked {total - checked}/{total}"

    def summary(self) -> dict[str, Any]:
        wall = self.wall
        return {
            "workload": self.workload,
            "case": self.case,
            "contender": self.contender,
            "runs": len(self.runs),
            "good_runs": len(self.good),
            "wall_s": {"min": wall[0], "median": wall[1], "max": wall[2]} if wall else None,
            "cpu_s_median": self.median_cpu,
            "peak_rss_mb_median": self.median_rss_mb,
            "ratio_to_hop_pipelined": self.ratio,
            "status": self.status,
            "scaled": any(run.scale != 1.0 for run in self.runs),
        }


def summarize(runs: list[Run]) -> list[Row]:
    """One row per (case, contender), in the order they first ran, with ratios filled in."""
    rows: dict[tuple[str, str], Row] = {}
    for run in runs:
        key = (run.case, run.contender)
        if key not in rows:
            rows[key] = Row(run.workload, run.case, run.contender, [])
        rows[key].runs.append(run)
    for row in rows.values():
        base_case = "scaling-1x" if row.case.startswith("scaling-") else row.case
        base = rows.get((base_case, "hop-pipelined"))
        if base and base.median_wall and row.median_wall is not None:
            row.ratio = row.median_wall / base.median_wall
    return list(rows.values())
