"""The cluster monitor's own cost: a batch word count with and without the monitor running beside it.

    python -m bench.monitor_cost [--size 100MB] [--workers 2] [--repeats 3] [--json PATH]

Each repeat runs the same batch job (``jobs/wordcount.py``) on two fresh embedded clusters of identical shape,
alternating which goes first:

- *off*: workers do not sample (``sample_interval=0``) and no monitoring job runs;
- *on*: workers sample every second and ``jobs/cluster_monitor.py`` runs continuously (10 s windows sliding by 2 s,
  one source per worker plus the coordinator's), as ``hop monitor`` runs it.

Both clusters have the shape ``hop monitor`` starts (one map slot per worker, and stream slots where the
monitoring job runs, idle when off). It reports the batch job's wall time in both (the slowdown, target under 5%:
of the medians, and the median of each repeat's paired ratio), and the monitor's CPU share of the cores measured
directly: the CPU of the stream-slot task processes (the monitoring query) while the batch job ran, plus the
samplers (their per-sample cost, measured in-process, at one sample per second per worker). The difference of the
two clusters' whole CPU is reported too, but it is as noisy as the batch job itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
import timeit
from pathlib import Path
from typing import Any

import psutil

from bench.environment import REPO_ROOT, slot_kind
from bench.report import machine_info
from hop.client import Client
from hop.gen.cli import parse_size
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, run_steps
from hop.stream.runner import run_stream
from monitoring.cli import monitor_spec, wait_for_workers


def _tree_cpu(pids: list[int], only_stream_slots: bool = False) -> float:
    """CPU seconds used so far by these processes and their children (live ones); ``only_stream_slots``: only the
    task processes of stream slots (``local-N/sN``), where the monitoring job's sources and reducer run."""
    total = 0.0
    counted: set[int] = set()  # the coordinator's tree holds the workers' (it forked them): count each once
    for pid in pids:
        try:
            root = psutil.Process(pid)
            for process in [root, *root.children(recursive=True)]:
                if process.pid in counted or (only_stream_slots and slot_kind(process) != "s"):
                    continue
                counted.add(process.pid)
                with_children = process.cpu_times()
                total += with_children.user + with_children.system
        except psutil.Error:
            continue
    return total


def run_once(source: Path, scratch: Path, workers: int, monitored: bool) -> dict[str, Any]:
    with LocalCluster(  # the shape ``hop monitor`` starts, in both modes alike (idle stream slots when off)
        workers=workers,
        map_slots=1,
        reduce_slots=2,
        stream_slots=-(-(workers + 2) // workers),
        racks=2,
        sample_interval=1.0 if monitored else 0.0,
    ) as cluster:
        client = Client(cluster.address)
        monitor_thread = None
        monitor_ids: list[str] = []
        try:
            if monitored:
                wait_for_workers(client, workers)
                spec, _, _ = monitor_spec(client, str(scratch / "monitor"), "10s", "2s", 3.0)
                monitor_client = Client(cluster.address)

                def monitor() -> None:
                    try:
                        run_stream(
                            monitor_client,
                            spec,
                            progress=False,
                            timeout=3600,
                            view_interval=None,
                            on_submitted=monitor_ids.append,
                        )
                    finally:
                        monitor_client.close()

                monitor_thread = threading.Thread(target=monitor)
                monitor_thread.start()
                deadline = time.monotonic() + 60
                while len(list((scratch / "monitor").glob("windows/*/_window.json"))) < 2:
                    if time.monotonic() > deadline:
                        raise SystemExit("the monitoring job wrote no window within 60 s")
                    time.sleep(0.2)
            else:
                time.sleep(2.0)  # the same settling time before the batch job
            pids = [p.pid for p in cluster.workers] + ([cluster.coordinator.pid] if cluster.coordinator else [])
            job = build_spec(
                load_job_file(str(REPO_ROOT / "jobs" / "wordcount.py")),
                [str(source)],
                str(scratch / "out"),
                num_reduces=workers,
                overwrite=True,
            )
            cpu_before = _tree_cpu(pids)
            query_before = _tree_cpu(pids, only_stream_slots=True)
            started = time.perf_counter()
            run_steps(client, job, progress=False, timeout=1200)
            wall = time.perf_counter() - started
            cpu = _tree_cpu(pids) - cpu_before
            query_cpu = _tree_cpu(pids, only_stream_slots=True) - query_before
            windows = len(list((scratch / "monitor").glob("windows/*/_window.json"))) if monitored else 0
        finally:
            if monitor_ids:
                client.stop(monitor_ids[0])
            if monitor_thread is not None:
                monitor_thread.join(timeout=120)
            client.close()
    return {
        "wall_s": round(wall, 3),
        "cluster_cpu_s": round(cpu, 3),
        "query_cpu_s": round(query_cpu, 3),
        "monitor_windows": windows,
    }


def sampler_cost() -> dict[str, float]:
    from monitoring.sampler import HostSampler

    costs = {}
    for scope in ("host", "process"):
        sampler = HostSampler(scope, os.getpid())
        sampler.sample()
        costs[f"{scope}_ms_per_sample"] = round(1000 * timeit.timeit(sampler.sample, number=200) / 200, 3)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("100MB"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(REPO_ROOT / "bench" / "results" / "monitor-cost.json"))
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="hop-monitor-cost-") as scratch_dir:
        scratch = Path(scratch_dir)
        source = scratch / "words.txt"
        generate_text(source, args.size, seed=5)
        for repeat in range(args.repeats):  # alternate which goes first: machine noise hits both alike
            order = ["off", "on"] if repeat % 2 == 0 else ["on", "off"]
            for mode in order:
                run_scratch = scratch / f"{mode}-{repeat}"
                run_scratch.mkdir()
                runs[mode].append(run_once(source, run_scratch, args.workers, mode == "on"))
                print(f"repeat {repeat + 1} monitor {mode}: {runs[mode][-1]}", flush=True)
    off = statistics.median(r["wall_s"] for r in runs["off"])
    on = statistics.median(r["wall_s"] for r in runs["on"])
    cpu_off = statistics.median(r["cluster_cpu_s"] for r in runs["off"])
    cpu_on = statistics.median(r["cluster_cpu_s"] for r in runs["on"])
    cores = os.cpu_count() or 1
    sampler = sampler_cost()
    # Measured directly, not as a difference of two noisy totals: the monitoring job's task processes (stream
    # slots) over the batch job's wall time, plus each worker's sampler at one sample per second.
    query_share = statistics.median(r["query_cpu_s"] / (r["wall_s"] * cores) for r in runs["on"])
    sampler_share = args.workers * sampler["process_ms_per_sample"] / 1000 / cores
    summary = {
        "command": f"python -m bench.monitor_cost --size {args.size} --workers {args.workers} --repeats {args.repeats}",
        "machine_cores": cores,
        "machine": machine_info(),
        "batch_wall_off_median_s": off,
        "batch_wall_on_median_s": on,
        "slowdown": round(on / off - 1, 4),
        "paired_slowdown_median": round(
            statistics.median(a["wall_s"] / b["wall_s"] - 1 for a, b in zip(runs["on"], runs["off"], strict=True)), 4
        ),
        "target_slowdown": 0.05,
        "cluster_cpu_off_median_s": cpu_off,
        "cluster_cpu_on_median_s": cpu_on,
        "cpu_difference_share_of_machine": round((cpu_on - cpu_off) / (on * cores), 4),
        "query_cpu_share_of_machine": round(query_share, 4),
        "sampler_cpu_share_of_machine": round(sampler_share, 4),
        "monitor_cpu_share_of_machine": round(query_share + sampler_share, 4),
        "sampler": sampler,
        "runs": runs,
    }
    print(
        f"batch word count {args.size / 1e6:.0f} MB: monitor off {off:.2f} s, on {on:.2f} s "
        f"(slowdown of the medians {100 * summary['slowdown']:+.1f}%, median of paired slowdowns "
        f"{100 * summary['paired_slowdown_median']:+.1f}%; target < 5%); monitor CPU share of the machine "
        f"{100 * summary['monitor_cpu_share_of_machine']:.1f}% (query {100 * query_share:.1f}%, samplers "
        f"{100 * sampler_share:.2f}%; from the cluster CPU difference "
        f"{100 * summary['cpu_difference_share_of_machine']:.1f}%, noisy); sampler {sampler}"
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
