"""The cost of a failure: word count with one worker killed mid-map, against the same job without failure.

    python -m bench.failure_cost [--size 60MB] [--workers 3] [--kill-after 1.0] [--repeats 3] [--json PATH]

Each repeat runs the job twice on a fresh embedded cluster of ``--workers`` workers: once clean, once with one worker
SIGKILLed ``--kill-after`` seconds after submission (its running maps, and committed maps whose output it held, run
again elsewhere). Both outputs must be byte-identical. Prints the median wall times, the slowdown, and how many
attempts the failure cost; writes JSON beside the other results.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.environment import REPO_ROOT
from hop.client import Client
from hop.gen.cli import parse_size
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, run_steps


def run_once(source: Path, output: Path, workers: int, kill_after: float | None) -> dict[str, Any]:
    with LocalCluster(workers=workers, map_slots=1, reduce_slots=1, heartbeat_timeout=2.0) as cluster:
        client = Client(cluster.address)
        killer = threading.Timer(kill_after, cluster.workers[0].kill) if kill_after is not None else None
        spec = build_spec(
            load_job_file(str(REPO_ROOT / "jobs" / "wordcount.py")),
            [str(source)],
            str(output),
            num_reduces=workers,
            split_size=8 << 20,
            overwrite=True,
        )
        started = time.perf_counter()
        if killer is not None:
            killer.start()
        try:
            report = run_steps(client, spec, progress=False, timeout=600)
        finally:
            if killer is not None:
                killer.join(timeout=30)
            client.close()
        wall = time.perf_counter() - started
    extra = sum(a["status"] in ("failed", "lost") for a in report["attempts"])
    return {
        "wall_s": round(wall, 3),
        "failed_or_lost_attempts": extra,
        "attempts": len(report["attempts"]),
        "parts": [p.read_bytes() for p in sorted(output.glob("part-*"))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("60MB"))
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--kill-after", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(REPO_ROOT / "bench" / "results" / "failure-cost.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hop-failure-cost-") as scratch:
        source = Path(scratch) / "words.txt"
        generate_text(source, args.size, seed=1)
        runs: dict[str, list[dict[str, Any]]] = {"clean": [], "worker_killed": []}
        for _ in range(args.repeats):  # interleaved, so machine noise hits both alike
            runs["clean"].append(run_once(source, Path(scratch) / "clean", args.workers, None))
            runs["worker_killed"].append(run_once(source, Path(scratch) / "killed", args.workers, args.kill_after))
            if runs["clean"][-1]["parts"] != runs["worker_killed"][-1]["parts"]:
                raise SystemExit("MISMATCH: the run with a killed worker produced different output")
    clean = statistics.median(r["wall_s"] for r in runs["clean"])
    killed = statistics.median(r["wall_s"] for r in runs["worker_killed"])
    summary = {
        "command": f"python -m bench.failure_cost --size {args.size} --workers {args.workers} "
        f"--kill-after {args.kill_after} --repeats {args.repeats}",
        "size_bytes": args.size,
        "workers": args.workers,
        "kill_after_s": args.kill_after,
        "clean_median_s": clean,
        "worker_killed_median_s": killed,
        "slowdown": round(killed / clean, 3),
        "runs": {k: [{f: v for f, v in r.items() if f != "parts"} for r in rs] for k, rs in runs.items()},
        "outputs_identical": True,
    }
    print(
        f"clean: {clean:.2f} s   one worker killed at {args.kill_after:.1f} s: {killed:.2f} s   "
        f"slowdown x{killed / clean:.2f}   outputs identical"
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
