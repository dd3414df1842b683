"""Job-to-job pipelining: word count then top-k, as one pipeline against two jobs through files.

    python -m bench.pipeline [--size 100MB] [--workers 2] [--repeats 3] [--json PATH]

Each repeat runs, on one embedded cluster, ``jobs/wordcount.py`` followed by ``jobs/topk.py`` twice, alternating the
order: pipelined (``hop.runner.run_pipeline``: the top-k maps read the word counts as the reducers write them) and
staged (``run_staged_jobs``: the second job starts when the first has written its output), and a third time
pipelined with snapshots every 10% of the word count's input, which flow down to the top-k job. All results must be
equal. Reports the median time from submission to the first top-k (the first non-empty top-k snapshot, or the
result) and to the result, and the top-k job's own time after the word count finished (what pipelining hides).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.environment import REPO_ROOT
from hop.client import Client
from hop.gen.cli import parse_size
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, online_options, run_pipeline, run_staged_jobs


def run_once(
    client: Client, source: Path, output: Path, workers: int, pipelined: bool, snapshots: bool = False
) -> dict[str, Any]:
    jobs = [
        build_spec(
            load_job_file(str(REPO_ROOT / "jobs" / name)),
            [str(source)],
            str(output),
            num_reduces=workers,
            split_size=16 << 20,
            overwrite=True,
        )
        for name in ("wordcount.py", "topk.py")
    ]
    if snapshots:
        options = online_options(
            load_job_file(str(REPO_ROOT / "jobs" / "wordcount.py")),
            [str(source)],
            snapshot_every=0.1,
            order="random",
            seed=1,
        )
        jobs = [dataclasses.replace(spec, options={**spec.options, **options}) for spec in jobs]
    started = time.time()
    if pipelined:
        report = run_pipeline(client, jobs, progress=False, timeout=1800)
        upstream = report["steps"][0]
    else:
        report = run_staged_jobs(client, jobs, progress=False, timeout=1800)
        upstream = report["jobs"][0]
    first = min(
        (snap["time"] for snap in report.get("snapshots", []) if snap["complete"] and snap["groups"]), default=None
    )
    return {
        "first_top_k_s": round((first if first is not None else report["end"]) - started, 3),
        "wall_s": round(report["end"] - started, 3),
        "after_upstream_s": round(report["end"] - upstream["end"], 3),
        "result": (output / "part-00000").read_text() + (output / "part-00001").read_text(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("100MB"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(REPO_ROOT / "bench" / "results" / "pipeline.json"))
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"pipelined": [], "staged": [], "pipelined+snapshots": []}
    with tempfile.TemporaryDirectory(prefix="hop-pipeline-bench-") as scratch:
        source = Path(scratch) / "words.txt"
        generate_text(source, args.size, seed=1)
        with LocalCluster(workers=args.workers, map_slots=1, reduce_slots=args.workers) as cluster:
            client = Client(cluster.address, timeout=60)
            try:
                for repeat in range(args.repeats):
                    order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
                    for mode in order:
                        run = run_once(
                            client,
                            source,
                            Path(scratch) / "out",
                            args.workers,
                            pipelined=mode != "staged",
                            snapshots=mode == "pipelined+snapshots",
                        )
                        runs[mode].append(run)
                        print(
                            f"{mode:>19}: first top-k {run['first_top_k_s']:.2f}s, done {run['wall_s']:.2f}s "
                            f"(top-k {run['after_upstream_s']:.2f}s after the word count)",
                            flush=True,
                        )
            finally:
                client.close()
    results = {run["result"] for mode in runs.values() for run in mode}
    assert len(results) == 1, "pipelined and staged results differ"
    summary = {
        mode: {
            "median_first_top_k_s": statistics.median(r["first_top_k_s"] for r in mode_runs),
            "median_wall_s": statistics.median(r["wall_s"] for r in mode_runs),
            "median_after_upstream_s": statistics.median(r["after_upstream_s"] for r in mode_runs),
        }
        for mode, mode_runs in runs.items()
    }
    summary["ratio_pipelined_to_staged"] = round(
        summary["pipelined"]["median_wall_s"] / summary["staged"]["median_wall_s"], 3
    )
    print(json.dumps(summary, indent=2))
    document = {
        "command": f"python -m bench.pipeline --size {args.size >> 20}MB --workers {args.workers} "
        f"--repeats {args.repeats}",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": {mode: [{k: v for k, v in r.items() if k != "result"} for r in rs] for mode, rs in runs.items()},
        "summary": summary,
    }
    Path(args.json).write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
