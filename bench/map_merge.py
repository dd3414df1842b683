"""CPU time and peak memory of a map-side merge of 8 held spills (``shuffle.flow.merge_spills``).

    python -m bench.map_merge [--case words|sum|large] [--repeats 3]

Writes 8 spills with a real map buffer (``shuffle.buffer.MapOutputBuffer``, 2 partitions), then merges them in a
fresh Python process and reports that process's CPU seconds for the merge and its peak resident memory (``VmHWM``,
reset just before the merge through ``/proc/self/clear_refs``: Linux only) above its resident memory then. Cases:

- ``words``: a generic combiner summing counts, 8 spills of 200,000 ``(word, 1)`` pairs from a Zipf vocabulary of
  1,000,000 words (what a word count with a plain-function combiner holds back when its reducers lag);
- ``sum``: the same pairs with the ``Sum`` aggregate (spills of folded states);
- ``large``: a generic combiner keeping each key's largest value, 8 spills of 512 values of 64 KiB (32 MiB each).

Repeats are made one after another; the minimum CPU time and the maximum peak are reported. Run it from each
checkout to compare (``PYTHONPATH=CHECKOUT python -m bench.map_merge``).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hop.aggregates import Sum
from hop.peak_memory import PeakMemory
from shuffle.buffer import MapOutputBuffer
from shuffle.spill import SpillFile

SPILLS = 8


def _sum_counts(key: Any, values: list[Any]) -> list[tuple[Any, Any]]:
    return [(key, sum(values))]


def _largest(key: Any, values: list[Any]) -> list[tuple[Any, Any]]:
    return [(key, max(values))]


COMBINERS: dict[str, Any] = {"words": _sum_counts, "sum": Sum(), "large": _largest}


def write_spills(case: str, directory: Path) -> list[SpillFile]:
    rng = random.Random(1)
    buffer = MapOutputBuffer(directory, 2, None, COMBINERS[case], spill_records=10**9, spill_bytes=1 << 40)
    if case == "large":
        values = [bytes([65 + i]) * (64 << 10) for i in range(26)]
        for _ in range(SPILLS):
            buffer.collect([(f"k{rng.randrange(2048):04d}", rng.choice(values).decode()) for _ in range(512)])
            buffer.spill()
    else:
        vocabulary = [f"w{i}" for i in range(1_000_000)]
        weights = [1 / (rank + 1) for rank in range(len(vocabulary))]
        for _ in range(SPILLS):
            buffer.collect([(word, 1) for word in rng.choices(vocabulary, weights, k=200_000)])
            buffer.spill()
    return buffer.counters.spills


def merge_in_this_process(case: str, directory: Path) -> dict[str, Any]:
    from shuffle.flow import merge_spills

    spills = [SpillFile.open(path) for path in sorted(directory.glob("*.spill"))]
    memory = PeakMemory()  # (the peak so far, and the parent's kept by ru_maxrss, forgotten)
    started = time.process_time()
    merged = merge_spills(spills, directory / "merged.out", COMBINERS[case])
    cpu = time.process_time() - started
    span = memory.report()
    if span is None:
        raise RuntimeError("measuring a peak needs Linux's /proc/self/clear_refs")
    peak, start_rss = span["peak_bytes"], span["start_bytes"]
    return {
        "cpu_seconds": cpu,
        "peak_above_start_mb": (peak - start_rss) / 2**20,
        "records_in": sum(spill.records for spill in spills),
        "records_out": merged.records,
        "spill_mb": sum(spill.size for spill in spills) / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(COMBINERS), default="words")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--merge-in", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.merge_in:
        print(json.dumps(merge_in_this_process(args.case, args.merge_in)))
        return
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as directory:
            write_spills(args.case, Path(directory))
            command = [sys.executable, "-m", "bench.map_merge", "--case", args.case, "--merge-in", directory]
            done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
            runs.append(json.loads(done.stdout))
    result = {
        **runs[0],
        "cpu_seconds": min(run["cpu_seconds"] for run in runs),
        "peak_above_start_mb": max(run["peak_above_start_mb"] for run in runs),
    }
    print(json.dumps({"case": args.case, **result}))


if __name__ == "__main__":
    main()
