"""Calibration of online estimates when input chunks differ greatly in size.

    python -m bench.online_skew [--files 40] [--seeds 1,2,3,4,5] [--uniform] [--workers 2] [--json PATH]

Writes ``--files`` text files whose sizes are log-uniform between 1 KB and 10 MB (``--uniform``: all of one size,
the same total), each line a word of a 20-word vocabulary drawn with the file's own mix of words (as files from
different sources differ; ``--same-mix``: one mix for all), so a word's count in a chunk follows the chunk's
size. Per seed it runs
``jobs/wordcount.py`` with ``--order random --seed S --snapshot-every 0.1 --chunk-size 256KB --split-size 4MB``
(``python -m hop run``, the code on ``PYTHONPATH``) and compares every snapshot's estimates with the exact output:
the median relative error and the coverage (the fraction of words whose 95% interval holds the final count; a word
without an interval counts as a miss). Prints one line per snapshot label, pooled over seeds, and writes JSON.
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
from pathlib import Path
from typing import Any

VOCABULARY = [f"w{i:02d}" for i in range(20)]


def write_inputs(folder: Path, files: int, uniform: bool, same_mix: bool, seed: int = 0) -> int:
    """The input files; returns their total size in bytes."""
    rng = random.Random(seed)
    sizes = [int(math.exp(rng.uniform(math.log(1 << 10), math.log(10 << 20)))) for _ in range(files)]
    if uniform:
        sizes = [sum(sizes) // files] * files
    shared = [rng.random() ** 3 for _ in VOCABULARY] if same_mix else None
    for number, size in enumerate(sizes):
        # Each file its own, uneven mix of words (or, --same-mix, every file the same one).
        weights = shared or [rng.random() ** 3 for _ in VOCABULARY]
        words = rng.choices(VOCABULARY, weights, k=size // 4 + 1)  # 4 bytes a line: "wNN\n"
        (folder / f"part-{number:03d}.txt").write_text("\n".join(words) + "\n")
    return sum(size for size in sizes)


def run(inputs: Path, output: Path, seed: int, workers: int) -> None:
    command = [
        *(sys.executable, "-m", "hop", "run", "jobs/wordcount.py", str(inputs), "-o", str(output)),
        *("--order", "random", "--seed", str(seed), "--snapshot-every", "0.1"),
        *("--chunk-size", "256KB", "--split-size", "4MB", "--workers", str(workers), "--quiet"),
    ]
    subprocess.run(command, check=True, timeout=600, stdout=subprocess.DEVNULL)


def score(output: Path) -> dict[str, tuple[list[float], list[bool]]]:
    """Per snapshot label: the relative errors and whether each interval held the final count."""
    final: dict[str, int] = {}
    for part in output.glob("part-*"):
        for line in part.read_text().splitlines():
            key, value = line.split("\t")
            final[json.loads(key)] = int(value)
    scores: dict[str, tuple[list[float], list[bool]]] = {}
    for folder in sorted((output / "_snapshots").iterdir()):
        errors: list[float] = []
        covered: list[bool] = []
        for estimates in folder.glob("estimates-*.jsonl"):
            for line in estimates.read_text().splitlines():
                row = json.loads(line)
                truth = final[row["key"]]
                errors.append(abs(row["estimate"] - truth) / truth)
                covered.append(row["low"] is not None and row["low"] <= truth <= row["high"])
        scores[folder.name] = (errors, covered)
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--uniform", action="store_true", help="files of one size (the same total)")
    parser.add_argument("--same-mix", action="store_true", help="every file the same mix of words")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    pooled: dict[str, tuple[list[float], list[bool]]] = {}
    with tempfile.TemporaryDirectory(prefix="online-skew-") as scratch:
        inputs = Path(scratch) / "in"
        inputs.mkdir()
        total = write_inputs(inputs, args.files, args.uniform, args.same_mix)
        print(f"{args.files} files, {total / 2**20:.1f} MB{' (uniform)' if args.uniform else ''}", file=sys.stderr)
        for seed in (int(s) for s in args.seeds.split(",")):
            output = Path(scratch) / f"out-{seed}"
            run(inputs, output, seed, args.workers)
            for label, (errors, covered) in score(output).items():
                pooled.setdefault(label, ([], []))[0].extend(errors)
                pooled[label][1].extend(covered)
    result: dict[str, Any] = {}
    print("label   groups  median_rel_error  coverage")
    for label in sorted(pooled):
        errors, covered = pooled[label]
        result[label] = {
            "groups": len(errors),
            "median_relative_error": statistics.median(errors),
            "coverage": sum(covered) / len(covered),
        }
        print(f"{label:7} {len(errors):6}  {statistics.median(errors):16.4f}  {sum(covered) / len(covered):8.3f}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "labels": result}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
