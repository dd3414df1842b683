"""Where a word count's map CPU goes: the parts of the loop, each timed alone in this process.

    python -m bench.map_loop [--size 40MB] [--repeats 11] [--json PATH]

On ``--size`` of Zipf text (``hop gen text``, vocabulary 100,000), decoded and split into lines once, times:

- ``split``: ``line.split()`` of every line, the words dropped;
- ``map``: the job's own map generator (``jobs/wordcount.py``) read to its end, the pairs dropped;
- ``fold in Python``: the map's pairs added into a dict (``d[k] = d.get(k, 0) + v``), as the one-process
  contender does;
- ``count in C``: the same words counted by ``collections.Counter``'s C loop, the least a dict of counts costs;
- ``hop's map loop``: ``shuffle.buffer.MapOutputBuffer.run_map`` with the job's ``Sum`` folding in place, no spill.

Process CPU time, the minimum and median of interleaved repeats (the machine is shared: the minimum is the cost, the
median what a run sees). What it shows: the dict of counts, not the engine, is most of a word count's map.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.environment import REPO_ROOT
from hop.aggregates import Sum
from hop.gen.cli import parse_size
from hop.gen.text import generate_text
from hop.loader import load_job_file
from shuffle.buffer import MapOutputBuffer


def _parts(lines: list[str], spill_dir: str) -> dict[str, Callable[[], Any]]:
    job = load_job_file(str(REPO_ROOT / "jobs" / "wordcount.py"))()
    mapper = job.map

    def split() -> None:
        for line in lines:
            for _ in line.split():
                pass

    def map_only() -> None:
        for number, line in enumerate(lines):
            for _ in mapper(number, line):
                pass

    def fold_in_python() -> None:
        counts: dict[str, int] = {}
        get = counts.get
        for number, line in enumerate(lines):
            for key, value in mapper(number, line):
                counts[key] = get(key, 0) + value

    def count_in_c() -> None:
        counts: Counter[str] = Counter()
        for line in lines:
            counts.update(line.split())

    def hop_loop() -> None:
        buffer = MapOutputBuffer(spill_dir, 1, None, Sum(), spill_records=1 << 60, spill_keys=1 << 60)
        for _ in buffer.run_map(enumerate(lines), mapper):
            pass

    return {
        "split": split,
        "map": map_only,
        "fold in Python": fold_in_python,
        "count in C": count_in_c,
        "hop's map loop": hop_loop,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("40MB"))
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hop-map-loop-") as scratch:
        source = Path(scratch) / "words.txt"
        generate_text(source, args.size, seed=1)
        lines = source.read_text(encoding="utf-8").split("\n")
        parts = _parts(lines, scratch)
        seconds: dict[str, list[float]] = {name: [] for name in parts}
        for repeat in range(args.repeats):
            order = list(parts.items())
            for name, part in order if repeat % 2 == 0 else reversed(order):
                began = time.process_time()
                part()
                seconds[name].append(time.process_time() - began)
    words = sum(len(line.split()) for line in lines)
    print(f"{args.size / 1e6:g} MB of Zipf text, {len(lines):,} lines, {words:,} words; CPU s, {args.repeats} repeats")
    print(f"{'part':<16}{'min':>8}{'median':>8}{'ns/word':>9}")
    figures = {}
    for name, values in seconds.items():
        low, middle = min(values), statistics.median(values)
        figures[name] = {"min_s": low, "median_s": middle, "all_s": values}
        print(f"{name:<16}{low:8.3f}{middle:8.3f}{low / words * 1e9:9.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"size": args.size, "words": words, "parts": figures}, indent=1) + "\n")


if __name__ == "__main__":
    main()
