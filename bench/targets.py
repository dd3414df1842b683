"""The performance targets, judged on the medians of this run.

- wordcount-zipf: hop-pipelined wall <= 0.25 x pyspark-rdd, <= 0.5 x spark-sql, <= 0.55 x serial.
- heavy-reduce: hop-pipelined wall <= 0.9 x hop-blocking; its first shuffle within 10% of the job's wall time
  (``first_shuffle_at - start`` over ``end - start``, both from ``_job.json``).
- every workload mrjob ran on: hop-pipelined >= 10x faster than mrjob's scaled time.
- scaling: the 4x input takes <= 4.4 x the 1x time.

A target whose figures are missing (contender not selected, unavailable or failed) is ``n/a``, never a pass;
one whose runs produced mismatching output says so next to its verdict. Each ratio also lists the repeats' own
ratios (the two contenders of one repeat ran one after the other, so a drift in the machine's speed touches both):
for information, the verdict stays on the medians. :func:`split_lines` sets hop beside ``bare-split``, the same loop
split over the workers with no engine.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from bench.stats import Row


@dataclass
class Target:
    name: str
    passed: bool | None
    detail: str

    def line(self) -> str:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[self.passed]
        return f"[{verdict}] {self.name}: {self.detail}"


def _ratio_target(
    rows: dict[tuple[str, str], Row],
    name: str,
    case: str,
    fast: str,
    slow: str,
    limit: float,
    *,
    at_least: bool = False,
) -> Target:
    """Median wall of ``fast`` / ``slow`` on ``case`` <= ``limit`` (``at_least``: ``slow/fast`` >= it)."""
    a, b = rows.get((case, fast)), rows.get((case, slow))
    pairs = ((fast, a), (slow, b))
    missing = [f"{who} has no successful run" for who, row in pairs if not (row and row.good)]
    if missing or a is None or b is None or not a.median_wall or not b.median_wall:
        return Target(name, None, "; ".join(missing) or "no figures")
    if at_least:
        value = b.median_wall / a.median_wall
        passed, need = value >= limit, f"{value:.1f}x (need >= {limit:g}x)"
        detail = f"{slow} / {fast} = {b.median_wall:.2f} s / {a.median_wall:.2f} s = {need}"
    else:
        value = a.median_wall / b.median_wall
        passed, need = value <= limit, f"{value:.3f} (need <= {limit:g})"
        detail = f"{fast} / {slow} = {a.median_wall:.2f} s / {b.median_wall:.2f} s = {need}"
    paired = paired_ratios(b, a) if at_least else paired_ratios(a, b)
    if paired:
        detail += f"; the repeats' own: {_listed(paired)}"
    if "MISMATCH" in a.status or "MISMATCH" in b.status:
        detail += "  !! outputs MISMATCH: see the table"
    return Target(name, passed, detail)


def paired_ratios(a: Row, b: Row) -> list[float]:
    """``a``'s wall over ``b``'s in each repeat where both ran well, in repeat order."""
    walls = {run.repeat: run.scaled_wall_s for run in b.good}
    return [run.scaled_wall_s / walls[run.repeat] for run in a.good if walls.get(run.repeat)]


def _listed(ratios: list[float]) -> str:
    return f"{' '.join(f'{ratio:.3f}' for ratio in ratios)} (median {statistics.median(ratios):.3f})"


def split_lines(row_list: list[Row]) -> list[str]:
    """For each case ``bare-split`` ran on: its wall over ``serial``'s (what the day's machine gives plain
    processes) and hop-pipelined's over its (hop against them), medians and the repeats' own ratios."""
    rows = {(row.case, row.contender): row for row in row_list}
    lines = []
    for case in dict.fromkeys(row.case for row in row_list):
        split = rows.get((case, "bare-split"))
        if not split or not split.median_wall:
            continue
        for fast, slow, meaning in (
            ("bare-split", "serial", "the plain split against one process"),
            ("hop-pipelined", "bare-split", "hop against the plain split"),
        ):
            a, b = rows.get((case, fast)), rows.get((case, slow))
            if a and b and a.median_wall and b.median_wall:
                ratio = a.median_wall / b.median_wall
                lines.append(
                    f"{case}: {fast} / {slow} = {a.median_wall:.2f} s / {b.median_wall:.2f} s = {ratio:.3f} "
                    f"({meaning}); the repeats' own: {_listed(paired_ratios(a, b))}"
                )
    return lines


def evaluate(row_list: list[Row]) -> list[Target]:
    rows = {(row.case, row.contender): row for row in row_list}
    cases = list(dict.fromkeys(row.case for row in row_list))
    pipelined = "hop-pipelined"
    targets: list[Target] = []
    if "wordcount-zipf" in cases:
        for other, limit in (("pyspark-rdd", 0.25), ("spark-sql", 0.5), ("serial", 0.55)):
            targets.append(
                _ratio_target(
                    rows,
                    f"wordcount-zipf: hop-pipelined <= {limit} x {other}",
                    "wordcount-zipf",
                    pipelined,
                    other,
                    limit,
                )
            )
    if "heavy-reduce" in cases:
        targets.append(
            _ratio_target(
                rows, "heavy-reduce: pipelined <= 0.9 x blocking", "heavy-reduce", pipelined, "hop-blocking", 0.9
            )
        )
        targets.append(_first_shuffle(rows.get(("heavy-reduce", pipelined))))
    mrjob_cases = [case for case in cases if (case, "mrjob") in rows]
    for case in mrjob_cases:
        targets.append(
            _ratio_target(
                rows,
                f"{case}: hop-pipelined >= 10x faster than mrjob (scaled)",
                case,
                pipelined,
                "mrjob",
                10.0,
                at_least=True,
            )
        )
    if not mrjob_cases:
        targets.append(
            Target(
                "hop-pipelined >= 10x faster than mrjob (scaled)",
                None,
                "mrjob did not run (not selected or unavailable: see above)",
            )
        )
    if "scaling-1x" in cases and "scaling-4x" in cases:
        targets.append(_scaling(rows.get(("scaling-1x", pipelined)), rows.get(("scaling-4x", pipelined))))
    return targets


def _first_shuffle(row: Row | None) -> Target:
    name = "heavy-reduce: pipelined first shuffle within 10% of wall"
    fraction = row.median_extra("first_shuffle_fraction") if row else None
    if row is None or fraction is None:
        return Target(name, None, "no hop-pipelined run with first_shuffle_at in _job.json")
    first, job = row.median_extra("first_shuffle_s"), row.median_extra("job_wall_s")
    detail = f"first shuffle at {first:.2f} s of a {job:.2f} s job = {fraction:.1%} (need <= 10%)"
    return Target(name, fraction <= 0.10, detail)


def _scaling(one: Row | None, four: Row | None) -> Target:
    name = "scaling: 4x input <= 4.4 x the 1x time"
    if not one or not four or not one.median_wall or not four.median_wall:
        return Target(name, None, "scaling-1x or scaling-4x has no successful run")
    ratio = four.median_wall / one.median_wall
    return Target(name, ratio <= 4.4, f"{four.median_wall:.2f} s / {one.median_wall:.2f} s = {ratio:.2f} (need <= 4.4)")
