"""What tail splitting saves: the same job with and without ``--no-tail-split``, interleaved, on this machine.

    python -m bench.tail_split [--size 150MB] [--repeats 5] [--skew] [--hog] [--json PATH]

Runs ``jobs/wordcount.py`` (``python -m hop run``, the code on ``PYTHONPATH``, an embedded cluster of 2 workers) on
``--size`` of Zipf text (``hop gen text``, cached in ``bench/data``), alternating the two settings. ``--skew``: two
files of half the size each, one with a 100-word vocabulary and one with 100,000 words, so the two maps (a file
each) differ in cost per byte about twice (the dict of counts stays in the CPU caches for one, not the other), as
files from different sources do. ``--hog`` keeps a busy loop pinned to the last CPU while the runs go. Prints and
writes, per setting, the median and range of the wall time, the maps run and the tail splits (``_job.json``), and
the ratio of the medians (split / not split).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.environment import REPO_ROOT
from hop.gen.cli import parse_size
from hop.gen.text import generate_text

SETTINGS = {"tail split": [], "no tail split": ["--no-tail-split"]}


def _input(size: int, vocabulary: int = 100_000, seed: int = 1) -> Path:
    path = REPO_ROOT / "bench" / "data" / f"text-zipf-{size}B-v{vocabulary}-s{seed}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        generate_text(path, size, seed=seed, vocabulary=vocabulary)
    return path


def _run(sources: list[Path], extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "out"
        command = [sys.executable, "-m", "hop", "run", str(REPO_ROOT / "jobs" / "wordcount.py"), *map(str, sources)]
        started = time.monotonic()
        subprocess.run([*command, "-o", str(output), "--quiet", *extra], check=True, timeout=900)
        wall = time.monotonic() - started
        report = json.loads((output / "_job.json").read_text(encoding="utf-8"))
    return {"wall_s": wall, "num_maps": report["num_maps"], "tail_splits": report.get("tail_splits", 0)}


def _hog() -> subprocess.Popen[bytes]:
    """A busy loop on the last CPU (``taskset``), for as long as the runs go."""
    cpu = str((os.cpu_count() or 1) - 1)
    return subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c", "while True: pass"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("150MB"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skew", action="store_true", help="two files of unequal cost per byte")
    parser.add_argument("--hog", action="store_true", help="keep a busy loop on the last CPU meanwhile")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sources = [_input(args.size // 2, 100, 2), _input(args.size // 2)] if args.skew else [_input(args.size)]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SETTINGS}
    hog = _hog() if args.hog else None
    try:
        for _ in range(args.repeats):
            for name, extra in SETTINGS.items():
                runs[name].append(_run(sources, extra))
                print(f"bench.tail_split: {name}: {runs[name][-1]}", file=sys.stderr, flush=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait(timeout=10)
    summary = {
        name: {
            "wall_s_median": statistics.median(run["wall_s"] for run in done),
            "wall_s_range": [min(run["wall_s"] for run in done), max(run["wall_s"] for run in done)],
            "num_maps": [run["num_maps"] for run in done],
            "tail_splits": [run["tail_splits"] for run in done],
        }
        for name, done in runs.items()
    }
    ratio = summary["tail split"]["wall_s_median"] / summary["no tail split"]["wall_s_median"]
    result = {"size": args.size, "skew": args.skew, "hog": args.hog, "repeats": args.repeats}
    result.update(summary=summary, ratio=ratio, runs=runs)
    for name, line in summary.items():
        print(
            f"{name:14s} {line['wall_s_median']:.2f} s ({line['wall_s_range'][0]:.2f}-{line['wall_s_range'][1]:.2f})"
            f" maps {line['num_maps']} splits {line['tail_splits']}"
        )
    print(f"tail split / no tail split: {ratio:.3f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
