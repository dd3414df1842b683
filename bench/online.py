"""Calibration of online aggregation: are early estimates accurate, and do the 95% intervals hold?

    python -m bench.online [--days 60] [--size 300MB] [--seeds 1,2,3] [--workers 2] [--json PATH]

Generates ``--days`` days of hourly page-count files (``days * 24`` files, cached under ``bench/data``; as in the
real dumps every popular page appears in every hour's file), then per seed runs ``jobs/pageviews.py`` on an
embedded cluster with ``--order random --seed S --snapshot-every 0.05``. For the snapshots at 5, 10, 25 and 50% of
the input it compares every (language, hour) group's estimate with the job's final (exact) answer and reports:

- the median relative error of the estimates;
- the coverage: the fraction of groups whose 95% interval contains the final value (groups whose stratum was seen
  completely count as covered only if exact; groups with no interval yet count as misses, and their share is shown);
- when the snapshot was complete, as a fraction of the job's wall time.

Targets (issue 5): at 10% a median relative error <= 2.5%; coverage between 90% and 98% at every snapshot from 10%
on; the first snapshot within 15% of the job's wall time. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.environment import REPO_ROOT
from hop.client import Client
from hop.gen.cli import parse_size
from hop.gen.pageviews import DEFAULT_VIEWS_PER_HOUR, generate_pageviews
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, online_options, run_steps
from jobs.pageviews import file_hour

LABELS = ("0.050", "0.100", "0.250", "0.500")


def dataset(days: int, size: int) -> Path:
    # Named by everything that shapes the files, so a cache made with other settings is never reused.
    folder = REPO_ROOT / "bench" / "data" / f"pageviews-{days}d-{size >> 20}MB-{DEFAULT_VIEWS_PER_HOUR}vph"
    if not (folder / "_complete").exists():
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        generate_pageviews(folder, days=days, size_bytes=size, seed=0)
        (folder / "_complete").write_text(f"generated in {time.perf_counter() - started:.1f}s\n")
    return folder


def ideal_stratified_error(data: Path, fraction: float = 0.1, trials: int = 20, seed: int = 0) -> float:
    """The reference: the median relative error of (language, hour) totals estimated from exactly ``fraction`` of
    each hour's files drawn at random (proportional stratified sampling, expansion estimator), straight from the
    files with no engine. It says how variable the data is, i.e. what any estimator can reach at that fraction."""
    per_file: dict[Path, dict[str, int]] = {}
    for path in sorted(data.glob("pagecounts-*.gz")):
        totals: dict[str, int] = {}
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                lang, _, views, _ = line.split(" ")
                totals[lang] = totals.get(lang, 0) + int(views)
        per_file[path] = totals
    by_hour: dict[int, list[Path]] = {}
    for path in per_file:
        by_hour.setdefault(file_hour(path.name), []).append(path)
    rng = random.Random(seed)
    errors = []
    for _ in range(trials):
        for files in by_hour.values():
            sample = rng.sample(files, max(2, round(fraction * len(files))))
            langs = {lang for path in files for lang in per_file[path]}
            for lang in langs:
                truth = sum(per_file[path].get(lang, 0) for path in files)
                seen = sum(per_file[path].get(lang, 0) for path in sample)
                errors.append(abs(len(files) * seen / len(sample) - truth) / truth)
    return statistics.median(errors)


def read_rows(folder: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = {}
    for part in sorted(folder.glob("estimates-*.jsonl")):
        for line in part.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows[tuple(row["key"])] = row
    return rows


def read_final(output: Path) -> dict[tuple[Any, ...], float]:
    final = {}
    for part in sorted(output.glob("part-*")):
        for line in part.read_text(encoding="utf-8").splitlines():
            key, value = line.split("\t")
            final[tuple(json.loads(key))] = float(json.loads(value))
    return final


def score(rows: dict[tuple[Any, ...], dict[str, Any]], final: dict[tuple[Any, ...], float]) -> dict[str, Any]:
    errors, covered, without_interval = [], 0, 0
    for key, truth in final.items():
        row = rows.get(key)
        if row is None:  # a group not seen yet
            without_interval += 1
            continue
        estimate = row["estimate"] if row["estimate"] is not None else row["value"]
        errors.append(abs(estimate - truth) / truth if truth else 0.0)
        if row["final"]:
            covered += row["value"] == truth
        elif row["low"] is None:
            without_interval += 1
        else:
            covered += row["low"] <= truth <= row["high"]
    return {
        "groups": len(final),
        "groups_seen": sum(key in rows for key in final),
        "median_relative_error": statistics.median(errors) if errors else None,
        "coverage": covered / len(final),
        "without_interval": without_interval / len(final),
    }


def run_seed(data: Path, seed: int, workers: int, scratch: Path) -> dict[str, Any]:
    job_file = str(REPO_ROOT / "jobs" / "pageviews.py")
    job_class = load_job_file(job_file)
    output = scratch / f"out-{seed}"
    options = online_options(job_class, [str(data)], snapshot_every=0.05, order="random", seed=seed)
    # Enough map tasks to keep every slot busy and progress smooth: 8 per worker.
    total = sum(path.stat().st_size for path in data.glob("pagecounts-*"))
    split_size = max(1 << 20, total // (8 * workers))
    spec = build_spec(
        job_class, [str(data)], str(output), num_reduces=workers, split_size=split_size, options=options, overwrite=True
    )
    with LocalCluster(workers=workers, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            report = run_steps(client, spec, progress=False, timeout=1800)
        finally:
            client.close()
    final = read_final(output)
    wall = report["end"] - report["start"]
    complete = sorted((s for s in report.get("snapshots", []) if s["complete"]), key=lambda s: s["progress"])
    result: dict[str, Any] = {"seed": seed, "wall_s": round(wall, 2), "snapshots": {}}
    for label in LABELS:
        # Progress can pass two thresholds between checks; then one snapshot stands for both (the higher label).
        info = next((s for s in complete if s["progress"] >= float(label) - 1e-9), None)
        if info is None:
            result["snapshots"][label] = None
            continue
        scored = score(read_rows(output / "_snapshots" / info["label"]), final)
        scored["snapshot"] = info["label"]
        scored["input_fraction"] = info["input_fraction"]
        scored["time_fraction_of_wall"] = (info["time"] - report["start"]) / wall
        result["snapshots"][label] = scored
    first = min(complete, key=lambda s: s["time"], default=None)
    result["first_snapshot_time_fraction"] = (first["time"] - report["start"]) / wall if first else None
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for label in LABELS:
        scored = [run["snapshots"][label] for run in runs if run["snapshots"].get(label)]
        if not scored:
            continue
        summary[label] = {
            key: statistics.median(s[key] for s in scored)
            for key in (
                "median_relative_error",
                "coverage",
                "without_interval",
                "input_fraction",
                "time_fraction_of_wall",
            )
        }
        summary[label]["coverage_min"] = min(s["coverage"] for s in scored)
        summary[label]["coverage_max"] = max(s["coverage"] for s in scored)
    firsts = [run["first_snapshot_time_fraction"] for run in runs if run["first_snapshot_time_fraction"] is not None]
    at_10 = summary.get("0.100", {})
    later = [summary[label] for label in LABELS[1:] if label in summary]
    summary["targets"] = {
        "median_relative_error_at_10pct <= 0.025": at_10.get("median_relative_error", 1) <= 0.025,
        "coverage_in_[0.90,0.98]_from_10pct": bool(later)
        and all(s["coverage_min"] >= 0.90 and s["coverage_max"] <= 0.98 for s in later),
        "first_snapshot <= 0.15 of wall": bool(firsts) and max(firsts) <= 0.15,
    }
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--size", type=parse_size, default=parse_size("300MB"))
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default=str(REPO_ROOT / "bench" / "results" / "online.json"))
    args = parser.parse_args()
    data = dataset(args.days, args.size)
    runs = []
    with tempfile.TemporaryDirectory(prefix="hop-online-bench-") as scratch:
        for seed in (int(s) for s in args.seeds.split(",")):
            runs.append(run_seed(data, seed, args.workers, Path(scratch)))
            print(f"seed {seed}: wall {runs[-1]['wall_s']}s", flush=True)
    summary = summarize(runs)
    summary["ideal_stratified_median_relative_error_at_10pct"] = ideal_stratified_error(data)
    print(f"\n{'snapshot':>9} {'input':>7} {'med.err':>8} {'coverage':>9} {'no CI':>6} {'time/wall':>9}")
    for label in LABELS:
        s = summary.get(label)
        if s:
            print(
                f"{label:>9} {s['input_fraction']:7.3f} {s['median_relative_error']:8.4f} "
                f"{s['coverage']:9.3f} {s['without_interval']:6.3f} {s['time_fraction_of_wall']:9.3f}"
            )
    print(
        f"reference: an ideal stratified estimator from exactly 10% of each hour's files gets a median relative "
        f"error of {summary['ideal_stratified_median_relative_error_at_10pct']:.4f} on this data"
    )
    for target, met in summary["targets"].items():
        print(f"{'met' if met else 'NOT MET':>8}  {target}")
    document = {
        "command": f"python -m bench.online --days {args.days} --size {args.size >> 20}MB --seeds {args.seeds} "
        f"--workers {args.workers}",
        "machine": {
            "cores": __import__("os").cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "dataset": {"days": args.days, "files": args.days * 24, "size_bytes": args.size, "path": str(data)},
        "runs": runs,
        "summary": summary,
    }
    Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
