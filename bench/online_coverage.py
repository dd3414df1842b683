"""Coverage of the online intervals: how often a snapshot's interval holds the group's final value.

    python -m bench.online_coverage [--data-seeds 1,2,3] [--trials 200] [--values lognormal,pareto,normal]
        [--orders shuffled,sorted] [--aggregates sum,count,mean] [--fractions 0.1,0.25,0.5]
        [--largest 100000] [--engine-runs 0] [--json PATH]

Writes ``key TAB value`` lines: 30 groups of Zipf sizes (``--largest`` records down to 1/42 of that) and six
small ones (500, 200, 80, 30, 12 and 6 records), values ``normal`` (mean 100, sd 20), ``lognormal`` (sigma 1.5:
skewed), ``pareto`` (alpha 1.3: heavy-tailed, infinite variance) or ``sparse`` (0 but for one record in 100,
lognormal sigma 1), the lines ``shuffled`` or ``sorted`` by value, ties by key (the worst case for chunk sampling:
a chunk's values are all alike), 3.6 MB by default, cut into 64 KB chunks (56) as an online job cuts them.

Unit level (every trial): the chunks' per-key states are fed to ``hop.online.state.SnapshotState``, the reducer's
own summary, in a seeded random order, as a reducer receives them with ``--order random``; at each fraction of the
chunks the snapshot's rows are compared with the exact answers. ``--engine-runs N``: also N ``hop run`` jobs
(``bench/jobs/keyed_values.py``, ``--order random --seed S --snapshot-every 0.05 --chunk-size 64KB``) per input
and aggregate, each snapshot scored at the fraction of chunks it covered (the nearest ``--fractions`` within 0.03).

Prints per input, aggregate and group size (small: up to 40 records, medium: up to 2,500, large) the coverage (the
fraction of intervals holding the final value; groups without an interval are left out), how many had no
interval ("no CI": absent from the snapshot, seen in fewer than 2 chunks, or with no spread seen) and the median
width of the intervals over the final value ("width": a correction that held more often only by widening every
interval would show there; ``--json`` has it as ``median_relative_width``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from hop.aggregates import Aggregate, Count, Mean, Sum
from hop.online.state import SnapshotState
from shuffle.runs import encode_run

CHUNK_BYTES = 64_000
"""The engine's smallest ``--chunk-size`` (64KB, decimal)."""

SMALL_GROUPS = (500, 200, 80, 30, 12, 6)
AGGREGATES: dict[str, type[Aggregate]] = {"sum": Sum, "count": Count, "mean": Mean}
JOB_CLASSES = {"sum": "KeyedSum", "count": "KeyedCount", "mean": "KeyedMean"}


def make_lines(seed: int, values: str, order: str, largest: int = 100_000, groups: int = 30) -> list[bytes]:
    """The input's lines (``gNN\\tVALUE\\n``)."""
    rng = random.Random(seed)
    sizes = [int(largest / (g + 1) ** 1.1) for g in range(groups)] + list(SMALL_GROUPS)
    records: list[tuple[float, str]] = []
    for group, size in enumerate(sizes):
        for _ in range(size):
            if values == "normal":
                value = max(0.0, rng.gauss(100, 20))
            elif values == "lognormal":
                value = rng.lognormvariate(2, 1.5)
            elif values == "pareto":
                value = rng.paretovariate(1.3)
            elif values == "sparse":
                value = rng.lognormvariate(2, 1.0) if rng.random() < 0.01 else 0.0
            else:
                raise ValueError(f"unknown value distribution {values!r}")
            records.append((round(value, 3), f"g{group:02d}"))
    if order == "shuffled":
        rng.shuffle(records)
    elif order == "sorted":
        records.sort()
    else:
        raise ValueError(f"unknown order {order!r}")
    return [f"{key}\t{value}\n".encode() for value, key in records]


def cut(lines: list[bytes]) -> list[list[bytes]]:
    """Lines per chunk of ``CHUNK_BYTES``: a line belongs to the chunk its first byte is in, as the engine reads."""
    chunks: list[list[bytes]] = [[]]
    offset = 0
    for line in lines:
        if offset // CHUNK_BYTES >= len(chunks):
            chunks.append([])
        chunks[-1].append(line)
        offset += len(line)
    return chunks


def exact(lines: list[bytes], kind: str) -> tuple[dict[str, Any], dict[str, int]]:
    """The final value of every group, and its record count."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for line in lines:
        key, value = line.decode().split("\t")
        sums[key] += float(value)
        counts[key] += 1
    if kind == "sum":
        return dict(sums), dict(counts)
    if kind == "count":
        return dict(counts), dict(counts)
    return {key: sums[key] / counts[key] for key in sums}, dict(counts)


def chunk_run(lines: list[bytes], aggregate: Aggregate) -> bytes:
    """A chunk's map output as one run, folded per key as the map's combine folds it."""
    states: dict[str, Any] = {}
    for line in lines:
        key, value = line.decode().split("\t")
        lifted = aggregate.lift(float(value))
        states[key] = lifted if key not in states else aggregate.merge(states[key], lifted)
    keys = sorted(states)
    return encode_run(keys, [states[key] for key in keys])


def size_class(records: int) -> str:
    return "small" if records <= 40 else "medium" if records <= 2_500 else "large"


Tally = dict[tuple[str, float], list[Any]]
"""Per (size class, fraction): [intervals, holding the truth, without an interval, widths over the truth]."""


def score_rows(rows: dict[str, Any], truth: dict[str, Any], counts: dict[str, int], fraction: float, tally: Tally):
    """Add one snapshot's rows (key -> (low, high) or None) to ``tally``."""
    for key, value in truth.items():
        cell = tally.setdefault((size_class(counts[key]), fraction), [0, 0, 0, []])
        bounds = rows.get(key)
        if bounds is None or bounds[0] is None:
            cell[2] += 1
            continue
        cell[0] += 1
        cell[1] += bounds[0] <= value <= bounds[1]
        cell[3].append((bounds[1] - bounds[0]) / abs(value) if value else math.inf)


def unit_trials(chunks: list[list[bytes]], kind: str, fractions: list[float], trials: int, truth, counts) -> Tally:
    aggregate = AGGREGATES[kind]()
    runs = [chunk_run(lines, aggregate) for lines in chunks]
    sizes = [sum(len(line) for line in lines) for lines in chunks]
    tally: Tally = {}
    for trial in range(trials):
        order = list(range(len(chunks)))
        random.Random(trial).shuffle(order)
        state = SnapshotState(AGGREGATES[kind](), [""] * len(chunks), chunk_sizes=sizes)
        done = 0
        for fraction in fractions:
            upto = max(1, round(fraction * len(chunks)))
            for chunk in order[done:upto]:
                state.add_run(chunk, 0, 0, runs[chunk], chunk=chunk, end=True)
            done = upto
            rows = {
                row.key: (row.estimate.low, row.estimate.high) if row.estimate is not None else None
                for row in state.rows()
            }
            score_rows(rows, truth, counts, fraction, tally)
    return tally


def engine_runs(path: Path, kind: str, fractions: list[float], runs: int, truth, counts, scratch: Path) -> Tally:
    tally: Tally = {}
    for seed in range(1, runs + 1):
        output = scratch / f"out-{kind}-{seed}"
        command = [
            *(sys.executable, "-m", "hop", "run", "bench/jobs/keyed_values.py", str(path), "-o", str(output)),
            *("--job-class", JOB_CLASSES[kind], "--order", "random", "--seed", str(seed)),
            *("--snapshot-every", "0.05", "--chunk-size", "64KB", "--workers", "2", "--quiet", "--overwrite"),
        ]
        subprocess.run(command, check=True, timeout=600, stdout=subprocess.DEVNULL)
        used: set[float] = set()
        for folder in sorted((output / "_snapshots").iterdir()):
            covered = json.loads((folder / "_snapshot.json").read_text()).get("chunks_fraction")
            near = [f for f in fractions if covered is not None and abs(covered - f) <= 0.03 and f not in used]
            if not near:
                continue
            fraction = min(near, key=lambda f: abs(covered - f))
            used.add(fraction)
            rows: dict[str, Any] = {}
            for estimates in folder.glob("estimates-*.jsonl"):
                for line in estimates.read_text().splitlines():
                    row = json.loads(line)
                    rows[row["key"]] = (row["low"], row["high"])
            score_rows(rows, truth, counts, fraction, tally)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-seeds", default="1,2,3")
    parser.add_argument("--trials", type=int, default=200, help="random chunk orders per input")
    parser.add_argument("--values", default="lognormal,pareto,normal", help="also: sparse")
    parser.add_argument("--orders", default="shuffled,sorted")
    parser.add_argument("--aggregates", default="sum,count,mean")
    parser.add_argument("--fractions", default="0.1,0.25,0.5")
    parser.add_argument("--largest", type=int, default=100_000, help="records of the largest group")
    parser.add_argument("--engine-runs", type=int, default=0, help="hop run jobs per input and aggregate")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    fractions = [float(f) for f in args.fractions.split(",")]
    header = f"{'level':6} {'values':9} {'order':8} {'agg':5} {'groups':6} "
    print(header + " ".join(f"{'cov@' + str(f):>9} {'noCI':>5} {'width':>6}" for f in fractions), flush=True)
    result: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="online-coverage-") as scratch:
        for values in args.values.split(","):
            for order in args.orders.split(","):
                for kind in args.aggregates.split(","):
                    pooled: dict[str, Tally] = {"unit": {}, "engine": {}}
                    for data_seed in (int(s) for s in args.data_seeds.split(",")):
                        lines = make_lines(data_seed, values, order, args.largest)
                        truth, counts = exact(lines, kind)
                        tallies = {"unit": unit_trials(cut(lines), kind, fractions, args.trials, truth, counts)}
                        if args.engine_runs:
                            path = Path(scratch) / f"in-{values}-{order}-{data_seed}.tsv"
                            path.write_bytes(b"".join(lines))
                            tallies["engine"] = engine_runs(
                                path, kind, fractions, args.engine_runs, truth, counts, Path(scratch)
                            )
                        for level, tally in tallies.items():
                            for cell, (n, hits, none, widths) in tally.items():
                                into = pooled[level].setdefault(cell, [0, 0, 0, []])
                                into[0] += n
                                into[1] += hits
                                into[2] += none
                                into[3] += widths
                    for level, tally in pooled.items():
                        for group_class in ("large", "medium", "small"):
                            cells = []
                            for fraction in fractions:
                                n, hits, none, widths = tally.get((group_class, fraction), [0, 0, 0, []])
                                coverage = hits / n if n else math.nan
                                width = statistics.median(widths) if widths else math.nan
                                if n + none:
                                    cells.append(f"{coverage:9.3f} {none / (n + none):5.2f} {width:6.3f}")
                                else:  # (no snapshot near this fraction: an engine's snapshots fall where they do)
                                    cells.append(f"{'-':>9} {'-':>5} {'-':>6}")
                                if n + none:
                                    result.append(
                                        {
                                            **{"level": level, "values": values, "order": order, "aggregate": kind},
                                            **{"groups": group_class, "fraction": fraction, "intervals": n},
                                            **{"coverage": coverage, "without_interval": none / (n + none)},
                                            "median_relative_width": width,
                                        }
                                    )
                            if any(tally.get((group_class, f)) for f in fractions):
                                prefix = f"{level:6} {values:9} {order:8} {kind:5} {group_class:6} "
                                print(prefix + " ".join(cells), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"args": {**vars(args), "json": str(args.json)}, "rows": result}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
