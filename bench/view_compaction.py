"""What keeping the materialized view up to date costs: a compaction in a fresh child against one in the kept child.

    python -m bench.view_compaction [--compactions 4] [--keys 2000] [--json PATH]
    python -m bench.view_compaction --age 1000 [--compactions 8] [--keys 200] [--json PATH]

A continuous job with its view on (the default) compacts its new checkpoint deltas every ``--view-interval``
(30 s). Each compaction writes a window's deltas (``--keys`` rows per reducer partition, 2 partitions) and
compacts them, the same sequence twice:

- *fresh*: ``python -m hop.stream.view compact OUT`` per compaction, a new Python process, JVM and SparkSession
  each time;
- *kept*: :class:`hop.stream.compactor.Compactor`, whose child keeps its SparkSession between compactions.

It reports each compaction's wall time and the CPU of the whole child tree (Python and JVM), so the fixed cost of a
JVM start is told from the cost of compacting.

``--age N`` measures what the view's age costs instead: the kept child first compacts ``N`` windows' deltas at once
(a view as old as a job that wrote ``N`` windows, ``N * 2 * --keys`` rows; not timed with the others), then
``--compactions`` compactions of one new window each against it: each one's wall time and the view's pieces after
it, and the CPU of them all (the kept child's and its JVM's, read while they run). A compaction that rewrites the
whole base grows with ``N``; one that writes only the pieces its deltas touch does not.
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


def aged_view(out: Path, age: int, compactions: int, keys: int) -> dict[str, Any]:
    """Compact ``age`` windows at once in a kept child, then ``compactions`` single windows after them, timed."""
    compactor = Compactor(out, run_timeout=RUN_TIMEOUT)
    walls, pieces = [], []
    try:
        for seq in range(age):
            write_window(out, seq, keys)
        info = compactor.compact_now(RUN_TIMEOUT)
        if compactor.last_error or info is None:
            raise RuntimeError(f"the compaction of {age} windows failed: {compactor.last_error}")
        aged = {"wall_s": compactor.last_seconds, "rows": info.rows, "windows": info.windows}
        cpu = tree_cpu(compactor)
        for seq in range(age, age + compactions):
            write_window(out, seq, keys)
            info = compactor.compact_now(RUN_TIMEOUT)
            if compactor.last_error or pending_deltas(out) or info is None:
                raise RuntimeError(f"compaction {seq} failed: {compactor.last_error}")
            assert compactor.last_seconds is not None
            walls.append(compactor.last_seconds)
            pieces.append(getattr(info, "pieces", 1))  # (a view without pieces is one)
        cpu = tree_cpu(compactor) - cpu
    finally:
        compactor.stop(final=False)
    return {"aged": aged, "walls_s": walls, "pieces": pieces, "rows": info.rows, "cpu_s": cpu}


def tree_cpu(compactor: Compactor) -> float:
    """CPU seconds of the compactor's kept child and its JVM so far (both still running, so not in RUSAGE_CHILDREN)."""
    import psutil

    assert compactor._child is not None  # (the bench's own look inside: the child is the compactor's)
    root = psutil.Process(compactor._child.process.pid)
    times = [process.cpu_times() for process in [root, *root.children(recursive=True)]]
    return sum(t.user + t.system for t in times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--compactions", type=int, default=4, help="compactions in each sequence (default 4)")
    parser.add_argument("--keys", type=int, default=2000, help="rows per partition per window (default 2000)")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    parser.add_argument("--age", type=int, default=None, help="compact against a view of this many windows instead")
    args = parser.parse_args(argv)
    if args.age is not None:
        return main_aged(args)
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
    _write_results(args, {"fresh": fresh, "kept": kept, "summary": summary})


def main_aged(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="hop-bench-view-") as scratch:
        result = aged_view(Path(scratch, "aged"), args.age, args.compactions, args.keys)
    summary = {"median_wall_s": statistics.median(result["walls_s"]), "max_wall_s": max(result["walls_s"])}
    aged = result["aged"]
    built = f"{aged['rows']:,} rows, compacted at once in {aged['wall_s']:.1f} s"
    print(f"a view of {aged['windows']:,} windows ({built}),")
    print(f"then {args.compactions} compactions of one window ({2 * args.keys:,} new rows) each:")
    print(f"  walls {', '.join(f'{w:.2f}' for w in result['walls_s'])} s, CPU {result['cpu_s']:.1f} s")
    print(f"  pieces after each: {', '.join(map(str, result['pieces']))}")
    print(f"  median wall {summary['median_wall_s']:.2f} s, max {summary['max_wall_s']:.2f} s")
    _write_results(args, {"aged": result, "summary": summary})


def _write_results(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """Write ``results`` with the machine, the command and its options to ``--json``, if given."""
    if args.json is None:
        return
    record = {"machine": machine_info(), "command": sys.argv, "options": vars(args) | {"json": str(args.json)}}
    args.json.write_text(json.dumps(record | results, indent=1) + "\n", encoding="utf-8")
    print(f"results in {args.json}")


if __name__ == "__main__":
    main()
