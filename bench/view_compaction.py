"""What keeping the materialized view up to date costs: a compaction in a fresh child against one in the kept child.

    python -m bench.view_compaction [--compactions 4] [--keys 2000] [--json PATH]

A continuous job with its view on (the default) compacts its new checkpoint deltas every ``--view-interval``
(30 s). Each compaction writes a window's deltas (``--keys`` rows per reducer partition, 2 partitions) and
compacts them, the same sequence twice:

- *fresh*: ``python -m hop.stream.view compact OUT`` per compaction, a new Python process, JVM and SparkSession
  each time;
- *kept*: :class:`hop.stream.compactor.Compactor`, whose child keeps its SparkSession between compactions.

It reports each compaction's wall time and the CPU of the whole child tree (Python and JVM), so the fixed cost of a
JVM start is told from the cost of compacting.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.environment import subprocess_env
from bench.report import machine_info
from hop.stream.compactor import Compactor
from hop.stream.view import DELTAS_DIR, pending_deltas

RUN_TIMEOUT = 600.0


def write_window(out: Path, seq: int, keys: int) -> None:
    """The deltas a 2-reducer job writes for window ``seq``: ``keys`` rows per partition, tmp + rename."""
    deltas = out / DELTAS_DIR
    deltas.mkdir(parents=True, exist_ok=True)
    for partition in range(2):
        temporary = deltas / f".tmp-delta-{partition}-{seq}"
        with open(temporary, "w", encoding="utf-8") as file:
            for key in range(keys):
                row = {"window_start": seq * 10, "window_end": seq * 10 + 10, "partition": partition}
                row.update(key=f"k{key}", value=key)
                file.write(json.dumps(row) + "\n")
        os.replace(temporary, deltas / f"delta-{partition:05d}-{seq:08d}.jsonl")


def children_cpu() -> float:
    """CPU seconds of this process's ended (waited-for) descendants, the JVMs their Python processes waited for too."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fresh_children(out: Path, compactions: int, keys: int) -> dict[str, Any]:
    walls, cpus = [], []
    for seq in range(compactions):
        write_window(out, seq, keys)
        cpu, started = children_cpu(), time.monotonic()
        command = [sys.executable, "-m", "hop.stream.view", "compact", str(out)]
        done = subprocess.run(command, capture_output=True, text=True, env=subprocess_env(), timeout=RUN_TIMEOUT)
        if done.returncode:
            raise RuntimeError(f"compaction {seq} failed: {done.stderr[-2000:]}")
        walls.append(time.monotonic() - started)
        cpus.append(children_cpu() - cpu)
    return {"walls_s": walls, "cpu_s": sum(cpus), "cpu_each_s": cpus}


def kept_child(out: Path, compactions: int, keys: int) -> dict[str, Any]:
    compactor = Compactor(out, run_timeout=RUN_TIMEOUT)
    walls = []
    cpu = children_cpu()
    for seq in range(compactions):
        write_window(out, seq, keys)
        compactor.compact_now(RUN_TIMEOUT)
        if compactor.last_error or pending_deltas(out):
            raise RuntimeError(f"compaction {seq} failed: {compactor.last_error}")
        assert compactor.last_seconds is not None
        walls.append(compactor.last_seconds)
    compactor.stop(final=False)
    return {"walls_s": walls, "cpu_s": children_cpu() - cpu, "children_started": compactor.children_started}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compactions", type=int, default=4, help="compactions in each sequence (default 4)")
    parser.add_argument("--keys", type=int, default=2000, help="rows per partition per window (default 2000)")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hop-bench-view-") as scratch:
        fresh = fresh_children(Path(scratch, "fresh"), args.compactions, args.keys)
        kept = kept_child(Path(scratch, "kept"), args.compactions, args.keys)
    later_fresh = statistics.median(fresh["walls_s"][1:])
    later_kept = statistics.median(kept["walls_s"][1:])
    summary = {
        "fresh_cpu_per_compaction_s": fresh["cpu_s"] / args.compactions,
        "kept_cpu_per_compaction_s": kept["cpu_s"] / args.compactions,
        "later_compaction_wall_s": {"fresh": later_fresh, "kept": later_kept},
    }
    print(f"{args.compactions} compactions of {2 * args.keys:,} new rows each:")
    print(f"  fresh child each: walls {', '.join(f'{w:.2f}' for w in fresh['walls_s'])} s, CPU {fresh['cpu_s']:.1f} s")
    print(f"  kept child:       walls {', '.join(f'{w:.2f}' for w in kept['walls_s'])} s, CPU {kept['cpu_s']:.1f} s")
    print(f"  after the first: median wall {later_fresh:.2f} s fresh against {later_kept:.2f} s kept")
    if args.json is not None:
        record = {
            "machine": machine_info(),
            "command": sys.argv,
            "options": vars(args) | {"json": str(args.json)},
            "fresh": fresh,
            "kept": kept,
            "summary": summary,
        }
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"results in {args.json}")


if __name__ == "__main__":
    main()
