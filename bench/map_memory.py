"""Peak memory of a folding map buffer whose aggregate keeps a large state per key, against the buffer's budget.

    python -m bench.map_memory [--case topk|distinct|zipf] [--keys 300000] [--values 20] [--spill-bytes 256MB]
        [--json PATH]

Runs a real map buffer's loop (``shuffle.buffer.MapOutputBuffer.run_map``, 2 partitions, unsorted runs as a map
whose reducer folds them, a first spill of a quarter of ``--spill-records`` as a map task's) in a fresh Python
process and reports that process's peak resident memory (``VmHWM``, reset through ``/proc/self/clear_refs`` just
before the loop: Linux only) above its resident memory then, its CPU seconds, its spills and the most keys a spill
held. Each input record yields one pair; a value is a new 100-character string, as a map parsing its input makes.
Cases:

- ``topk``: ``TopK(1000)`` over ``--keys`` keys of ``--values`` values each, a key's values one after another (a
  job reading an earlier job's output, sorted by key): every key's heap holds all its values;
- ``distinct``: ``CountDistinct`` over the same pairs (every value distinct: a dict of them per key);
- ``zipf``: ``TopK(1000)`` over the same number of pairs with keys drawn from a Zipf law over ``--keys`` keys (a
  few hot keys with full heaps, a long tail of one or two values).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hop.aggregates import CountDistinct, TopK
from hop.gen.cli import parse_size
from hop.peak_memory import PeakMemory
from shuffle.buffer import DEFAULT_SPILL_BYTES, DEFAULT_SPILL_RECORDS, FIRST_SPILL_DIVISOR, MapOutputBuffer

CASES = ("topk", "distinct", "zipf")


def _keys(case: str, keys: int, values: int) -> Iterator[str]:
    if case != "zipf":
        return (f"k{number // values:07d}" for number in range(keys * values))
    rng = random.Random(1)
    names = [f"k{number:07d}" for number in range(keys)]
    weights = [1 / (rank + 1) for rank in range(keys)]
    return iter(rng.choices(names, weights, k=keys * values))


def measure_in_this_process(case: str, keys: int, values: int, spill_bytes: int, directory: Path) -> dict[str, Any]:
    aggregate = CountDistinct() if case == "distinct" else TopK(1000)
    buffer = MapOutputBuffer(
        directory,
        2,
        None,
        aggregate,
        spill_bytes=spill_bytes,
        first_spill_records=DEFAULT_SPILL_RECORDS // FIRST_SPILL_DIVISOR,
        sort_runs=False,
    )
    spill_keys: list[int] = []

    def spilled(spill: Any) -> None:
        spill_keys.append(spill.records)
        spill.path.unlink()  # (a worker pushes and deletes them; only the map's memory is measured here)

    buffer.on_spill = spilled
    records = ((key, number) for number, key in enumerate(_keys(case, keys, values)))
    memory = PeakMemory()  # (the peak so far, and the parent's kept by ru_maxrss, forgotten)
    started = time.process_time()
    for _ in buffer.run_map(records, lambda key, number: ((key, f"{number:0100d}"),)):
        pass
    buffer.spill()
    cpu = time.process_time() - started
    span = memory.report()
    if span is None:
        raise RuntimeError("measuring a peak needs Linux's /proc/self/clear_refs")
    peak, start_rss = span["peak_bytes"], span["start_bytes"]
    return {
        "case": case,
        "keys": keys,
        "values_per_key": values,
        "spill_bytes_budget_mb": spill_bytes / 2**20,
        "peak_above_start_mb": round((peak - start_rss) / 2**20, 1),
        "cpu_seconds": round(cpu, 2),
        "spills": len(spill_keys),
        "most_keys_in_a_spill": max(spill_keys),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, default="topk")
    parser.add_argument("--keys", type=int, default=300_000)
    parser.add_argument("--values", type=int, default=20, help="values per key (the mean, for zipf)")
    parser.add_argument("--spill-bytes", type=parse_size, default=DEFAULT_SPILL_BYTES)
    parser.add_argument("--json", type=Path, help="append the result to this file as one JSON line")
    parser.add_argument("--measure-in", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_in:
        result = measure_in_this_process(args.case, args.keys, args.values, args.spill_bytes, args.measure_in)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="hop-map-memory-") as directory:
        command = [sys.executable, "-m", "bench.map_memory", *sys.argv[1:], "--measure-in", directory]
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=True)
    line = done.stdout.strip().splitlines()[-1]
    print(line)
    if args.json:
        with args.json.open("a", encoding="utf-8") as file:
            file.write(line + "\n")


if __name__ == "__main__":
    main()
