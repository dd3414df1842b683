"""Continuous queries: sustained throughput, latency under load, memory over a long run, differential windows.

    python -m bench.continuous [--quick] [--records 2000000] [--minutes 5] [--repeats 3] [--latency-seconds 30]
                               [--json bench/results/continuous.json]

Every run is one ``replay:`` source (so one stream map) and 2 reducers on an embedded cluster of 2 workers (1 map
slot and 1 reduce slot each), jobs from ``jobs/event_wordcount.py``, inputs cached in ``bench/data``: N events
``{"ts", "text"}`` of 4-8 Zipf words, 10,000 per second of event time, and the same texts as plain lines.

1. Throughput: ``EventWordCount``, 1 s tumbling windows of event time, the events replayed as fast as possible.
   *Steady* records/s: the records of every window after the first over the time from the first window written to
   the last (``_window.json`` ``emitted_at``, latest partition); *whole*: all records from the stream map's start to
   the last window (cluster start-up and submission excluded). CPU: user + system of every process of the cluster
   (coordinator, workers, task processes; psutil, every 0.2 s and at the end), hence records per CPU-second.
2. Latency: ``ArrivalWordCount``, 1 s tumbling windows of arrival time, over ``replay:LINES?rate=R&loop=1`` for
   ``--latency-seconds`` at R = 50%, 80% and 100% of the steady rate; a window's latency is its ``emitted_at``
   minus its end. Windows flushed by the stop at the end of the run are left out.
3. Memory: the 50% run for ``--minutes`` on a fresh cluster; every 5 s (a twelfth of a shorter run) the summed RSS
   of its processes, the bytes under its spill directory (workers delete the spills every reducer's checkpoint
   covers) and under ``OUT/_checkpoints`` (deltas stay until the materialized view compacts them; the view is off).
   First and last minute (a third of a shorter run) compared.
4. Differential: ``EventWordCount`` (panes merged) against ``EventWordCountDifferential`` (``uncombine``), 24 s
   windows sliding by 1 s over N/4 events of 20,000 distinct words, alternating; reducer CPU and job wall; every
   window must be byte-identical. In process: ``WindowAssembler`` fed 223 panes of 5,000 keys (200 full windows of 24
   panes), merged against differential, median of 5 alternating repeats, groups compared window by window.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from bench.environment import REPO_ROOT, slot_kind
from bench.report import machine_info
from hop.client import Client
from hop.gen.text import build_vocabulary
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec
from hop.stream.assembler import WindowAssembler
from hop.stream.options import stream_options
from hop.stream.runner import run_stream
from hop.stream.windows import WindowSpec

JOBS = REPO_ROOT / "jobs" / "event_wordcount.py"
RESULTS = REPO_ROOT / "bench" / "results"
T0 = 1_700_000_000.0
EVENTS_PER_SECOND = 10_000
REDUCERS = 2
JOB_TIMEOUT = 900.0
TARGET_LATENCY_S = 0.5
TARGET_RSS_GROWTH = 0.10


# Inputs ------------------------------------------------------------------------------------------------------------
def make_inputs(data_dir: Path, records: int, vocabulary: int, seed: int = 1) -> tuple[Path, Path]:
    """(events.jsonl, lines.txt), generated once: the same texts with and without an event time."""
    stem = data_dir / f"stream-events-{records}-v{vocabulary}-s{seed}"
    events, lines = stem.with_suffix(".jsonl"), stem.with_suffix(".txt")
    if events.exists() and lines.exists():
        return events, lines
    data_dir.mkdir(parents=True, exist_ok=True)
    words = build_vocabulary(seed, vocabulary)
    weights = 1.0 / np.arange(1, vocabulary + 1)
    rng = np.random.default_rng(seed)
    with open(f"{events}.tmp", "w", encoding="utf-8") as jsonl, open(f"{lines}.tmp", "w", encoding="utf-8") as txt:
        for start in range(0, records, 100_000):
            count = min(100_000, records - start)
            draws = rng.choice(vocabulary, size=(count, 8), p=weights / weights.sum()).tolist()
            sizes = rng.integers(4, 9, count).tolist()
            texts = [" ".join([words[i] for i in row[:k]]) for row, k in zip(draws, sizes, strict=True)]
            stamps = (T0 + 0.00004 + np.arange(start, start + count) / EVENTS_PER_SECOND).tolist()
            jsonl.writelines(
                f'{{"ts": {t:.6f}, "text": {json.dumps(x, ensure_ascii=False)}}}\n'
                for t, x in zip(stamps, texts, strict=True)
            )
            txt.writelines(f"{x}\n" for x in texts)
    os.replace(f"{events}.tmp", events)
    os.replace(f"{lines}.tmp", lines)
    return events, lines


# Measuring the cluster ---------------------------------------------------------------------------------------------
def tree_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):  # spills and temporaries come and go during the walk
                total += os.stat(os.path.join(root, name)).st_size
    return total


def process_label(process: psutil.Process) -> str:
    if slot_kind(process) is not None:
        return f"task {process.name()}"
    command = process.cmdline()
    flag = command.index("-m") if "-m" in command[1:3] else None  # (python -m M, or python -P -m M: hop.interpreter)
    module = command[flag + 1] if flag is not None and len(command) > flag + 1 else command[-1]
    if module == "hop.cluster_launch":  # the coordinator, and the workers it forked (named local-N)
        name = process.name()
        return f"worker {name}" if re.fullmatch(r"local-\d+", name) else "coordinator"
    return f"task {command[4]}" if module == "hop.taskproc" and len(command) > 4 else module.replace("hop.", "")


class ClusterMeter(threading.Thread):
    """Samples every process of a LocalCluster: CPU seconds used since the meter started (a process first seen
    later counts from zero), summed RSS and, given ``folders``, their bytes on disk."""

    def __init__(self, cluster: LocalCluster, interval: float, folders: dict[str, Path] | None = None) -> None:
        super().__init__(name="cluster-meter", daemon=True)
        assert cluster.coordinator is not None
        self.roots = [cluster.coordinator.pid, *(worker.pid for worker in cluster.workers)]
        self.interval, self.folders = interval, folders or {}
        self.first: dict[tuple[int, float], float] = {}
        self.last: dict[tuple[int, float], float] = {}
        self.samples: list[dict[str, Any]] = []
        self.began = time.monotonic()
        self._halt = threading.Event()

    def __enter__(self) -> ClusterMeter:
        self.sample(initial=True)
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self.join(timeout=30)
        self.sample()

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            self.sample()

    def sample(self, initial: bool = False) -> None:
        rss: dict[str, int] = {}
        for root in self.roots:
            with contextlib.suppress(psutil.Error):
                top = psutil.Process(root)
                for process in [top, *top.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error), process.oneshot():
                        times, key = process.cpu_times(), (process.pid, process.create_time())
                        self.first.setdefault(key, times.user + times.system if initial else 0.0)
                        self.last[key] = times.user + times.system
                        rss[process_label(process)] = process.memory_info().rss
        sample = {"t": round(time.monotonic() - self.began, 2), "rss": sum(rss.values()), "rss_by_process": rss}
        self.samples.append({**sample, **{name: tree_bytes(path) for name, path in self.folders.items()}})

    def cpu(self, pids: set[int] | None = None) -> float:
        return sum(self.last[k] - self.first[k] for k in self.last if pids is None or k[0] in pids)


# Running a job -----------------------------------------------------------------------------------------------------
def run_job(
    client: Client,
    job: str,
    source: str,
    output: Path,
    window: str,
    slide: str | None = None,
    seconds: float | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run to the end of the source, or for ``seconds`` and then stop it; (job report, windows by start)."""
    spec = build_spec(
        load_job_file(str(JOBS), job),
        [],
        str(output),
        num_reduces=REDUCERS,
        overwrite=True,
        options={"stream": stream_options([source], window, slide)},
    )
    report = run_stream(client, spec, progress=False, timeout=seconds or JOB_TIMEOUT, view_interval=None)["report"]
    if seconds is None and report["continuous"]["stopped"]:
        raise RuntimeError(f"{job} over {source} did not end within {JOB_TIMEOUT:.0f}s")
    windows = []
    for folder in sorted((output / "windows").iterdir()):
        meta = json.loads((folder / "_window.json").read_text())
        meta["emitted"] = max(part["emitted_at"] for part in meta["partitions"])
        windows.append(meta)
    return report, sorted(windows, key=lambda w: w["start"])


def attempt(report: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [a for a in report["attempts"] if a["kind"] == kind and a["status"] == "succeeded"]


def windows_digest(output: Path) -> str:
    digest = hashlib.sha256()
    for part in sorted((output / "windows").glob("*/part-*")):
        digest.update(part.parent.name.encode() + part.read_bytes())
    return digest.hexdigest()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


def latency_summary(report: dict[str, Any], windows: list[dict[str, Any]], rate: int) -> dict[str, Any]:
    latencies = [w["emitted"] - w["end"] for w in windows if w["reason"] == "complete"]
    mapper = attempt(report, "map")[0]
    return {
        "rate_asked": rate,
        "rate_achieved": round(report["counters"]["map_input_records"] / (mapper["end"] - mapper["start"])),
        "windows": len(latencies),
        "median_s": round(statistics.median(latencies), 4),
        "p95_s": round(percentile(latencies, 0.95), 4),
        "max_s": round(max(latencies), 4),
        "latencies_s": [round(x, 4) for x in latencies],
    }


# The four measurements ---------------------------------------------------------------------------------------------
def throughput(client: Client, cluster: LocalCluster, events: Path, scratch: Path, repeats: int) -> dict[str, Any]:
    runs = []
    for _ in range(repeats):
        with ClusterMeter(cluster, 0.2) as meter:
            report, windows = run_job(client, "EventWordCount", f"replay:{events}", scratch / "tp", "1s")
        records = report["counters"]["map_input_records"]
        first, last = windows[0], windows[-1]
        runs.append(
            {
                "records": records,
                "windows": len(windows),
                "job_wall_s": round(report["end"] - report["start"], 3),
                "steady_records_per_s": round(
                    sum(w["records"] for w in windows[1:]) / (last["emitted"] - first["emitted"])
                ),
                "whole_records_per_s": round(records / (last["emitted"] - attempt(report, "map")[0]["start"])),
                "cluster_cpu_s": round(meter.cpu(), 2),
                "map_cpu_s": round(meter.cpu({a["pid"] for a in attempt(report, "map")}), 2),
                "reduce_cpu_s": round(meter.cpu({a["pid"] for a in attempt(report, "reduce")}), 2),
                "records_per_cpu_s": round(records / meter.cpu()),
            }
        )
        print(f"throughput: {runs[-1]}", flush=True)
    return {"runs": runs, **{key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "windows"}}


def latency(client: Client, lines: Path, scratch: Path, rate: float, seconds: float) -> dict[str, Any]:
    levels = {}
    for share in (0.5, 0.8, 1.0):
        asked = int(share * rate)
        source = f"replay:{lines}?rate={asked}&loop=1"
        report, windows = run_job(client, "ArrivalWordCount", source, scratch / "lat", "1s", seconds=seconds)
        levels[f"{share:.0%}"] = summary = latency_summary(report, windows, asked)
        print(f"latency at {share:.0%}: { {k: v for k, v in summary.items() if k != 'latencies_s'} }", flush=True)
    return levels


def memory(lines: Path, scratch: Path, rate: float, seconds: float) -> dict[str, Any]:
    output = scratch / "mem"
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=60)
        spill_dir = Path(cluster._socket_dir or "")  # the workers' spill directories live under it
        folders = {
            "spill_bytes": spill_dir,
            "state_bytes": output / "_checkpoints" / "state",
            "delta_bytes": output / "_checkpoints" / "deltas",
        }
        try:
            with ClusterMeter(cluster, min(5.0, seconds / 12), folders) as meter:
                source = f"replay:{lines}?rate={int(0.5 * rate)}&loop=1"
                report, windows = run_job(client, "ArrivalWordCount", source, output, "1s", seconds=seconds)
        finally:
            client.close()
    running = [s for s in meter.samples[1:] if s["t"] <= seconds]  # not the idle sample before, nor the drain
    span = min(60.0, seconds / 3)
    head = [s for s in running if s["t"] <= running[0]["t"] + span]
    tail = [s for s in running if s["t"] >= running[-1]["t"] - span]

    def mean(rows: list[dict[str, Any]], key: str) -> int:
        return round(statistics.mean(r[key] for r in rows))

    result = {
        "seconds": seconds,
        "span_s": span,
        "latency": latency_summary(report, windows, int(0.5 * rate)),
        **{
            f"{key}_{part}": mean(rows, key)
            for key in ("rss", "spill_bytes", "state_bytes", "delta_bytes")
            for part, rows in (("first", head), ("last", tail))
        },
        "spill_bytes_max_first": max(s["spill_bytes"] for s in head),
        "spill_bytes_max_last": max(s["spill_bytes"] for s in tail),
        "rss_by_process_first": head[0]["rss_by_process"],
        "rss_by_process_last": tail[-1]["rss_by_process"],
        "samples": meter.samples,
    }
    result["rss_growth"] = round(result["rss_last"] / result["rss_first"] - 1, 4)
    return result


def differential(client: Client, cluster: LocalCluster, events: Path, scratch: Path, repeats: int) -> dict[str, Any]:
    jobs = {"merged": "EventWordCount", "differential": "EventWordCountDifferential"}
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in jobs}
    digests = set()
    for repeat in range(repeats):
        for mode in list(jobs) if repeat % 2 == 0 else list(reversed(jobs)):
            with ClusterMeter(cluster, 0.2) as meter:
                report, windows = run_job(client, jobs[mode], f"replay:{events}", scratch / mode, "24s", "1s")
            digests.add(windows_digest(scratch / mode))
            runs[mode].append(
                {
                    "windows": len(windows),
                    "job_wall_s": round(report["end"] - report["start"], 3),
                    "reduce_cpu_s": round(meter.cpu({a["pid"] for a in attempt(report, "reduce")}), 2),
                    "cluster_cpu_s": round(meter.cpu(), 2),
                }
            )
            print(f"differential, {mode}: {runs[mode][-1]}", flush=True)
    if len(digests) != 1:
        raise SystemExit("MISMATCH: merged and differential windows differ")
    summary = {mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()}
    ratios = {k: round(summary["differential"][k] / summary["merged"][k], 3) for k in ("job_wall_s", "reduce_cpu_s")}
    return {"runs": runs, "summary": summary, "ratio_differential_to_merged": ratios, "windows_identical": True}


def assembler_micro(windows: int, panes: int, keys: int, vocabulary: int, repeats: int) -> dict[str, Any]:
    """In process: ``WindowAssembler`` fed ``windows + panes - 1`` panes, merged vs differential."""
    spec, rng = WindowSpec.parse(f"{panes}s", "1s"), random.Random(1)
    names = [f"key-{i:06d}" for i in range(vocabulary)]
    cells = [sorted((k, rng.randint(1, 9)) for k in rng.sample(names, keys)) for _ in range(windows + panes - 1)]
    base = spec.pane_of(T0)

    def assembler(diff: bool) -> WindowAssembler:
        uncombine = (lambda k, a, b: a - b) if diff else None
        return WindowAssembler(spec, 1, False, lambda k, a, b: a + b, uncombine=uncombine)

    def feed(target: WindowAssembler, number: int) -> list[Any]:
        target.add_cell(0, base + number, keys, cells[number], base + number + 1)
        return [target.emit(w, why) for w, why in target.due(0.0)]

    merged, diff = assembler(False), assembler(True)  # check: the same groups, window by window
    built = 0
    for number in range(len(cells)):
        for a, b in zip(feed(merged, number), feed(diff, number), strict=True):
            assert a is not None and b is not None and a.groups == b.groups, f"window {a and a.window} differs"
            built += 1
    times: dict[str, list[float]] = {"merged": [], "differential": []}
    for repeat in range(repeats):
        for mode in list(times) if repeat % 2 == 0 else list(reversed(times)):
            target = assembler(mode == "differential")
            began = time.perf_counter()
            for number in range(len(cells)):
                feed(target, number)
            times[mode].append(round(time.perf_counter() - began, 4))
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    return {
        "panes_fed": len(cells),
        "windows_built": built,
        "full_windows": windows,
        "keys_per_pane": keys,
        "times_s": times,
        "median_s": medians,
        "groups_identical": True,
        "ratio_differential_to_merged": round(medians["differential"] / medians["merged"], 3),
    }


# Report ------------------------------------------------------------------------------------------------------------
def table(results: dict[str, Any]) -> tuple[str, dict[str, bool]]:
    tp, lat, mem = results["throughput"], results["latency"], results.get("memory")
    lines = [
        f"throughput: {tp['steady_records_per_s']:,.0f} records/s steady (first to last window), "
        f"{tp['whole_records_per_s']:,.0f} records/s from map start; {tp['records_per_cpu_s']:,.0f} records per "
        f"CPU-second (cluster CPU {tp['cluster_cpu_s']:.1f} s: map {tp['map_cpu_s']:.1f}, reducers "
        f"{tp['reduce_cpu_s']:.1f})"
    ]
    for level, row in lat.items():
        lines.append(
            f"latency at {level:>4} ({row['rate_achieved']:>7,} rec/s achieved of {row['rate_asked']:,}): "
            f"median {row['median_s'] * 1000:6.0f} ms  p95 {row['p95_s'] * 1000:6.0f} ms  "
            f"max {row['max_s'] * 1000:6.0f} ms  ({row['windows']} windows)"
        )

    def quick_enough(row: dict[str, Any]) -> bool:
        return max(row["median_s"], row["p95_s"]) < TARGET_LATENCY_S

    targets = {"latency median and p95 < 500 ms at 50%": quick_enough(lat["50%"])}
    if mem:
        lines.append(
            f"memory over {mem['seconds']:.0f} s: RSS {mem['rss_first'] / 2**20:.0f} MB (first "
            f"{mem['span_s']:.0f} s) -> {mem['rss_last'] / 2**20:.0f} MB (last), growth "
            f"{mem['rss_growth']:+.1%}; spill bytes (mean) {mem['spill_bytes_first']:,} -> "
            f"{mem['spill_bytes_last']:,} (max {mem['spill_bytes_max_first']:,} -> "
            f"{mem['spill_bytes_max_last']:,}); checkpoint state {mem['state_bytes_first']:,} -> "
            f"{mem['state_bytes_last']:,} bytes, deltas {mem['delta_bytes_first']:,} -> "
            f"{mem['delta_bytes_last']:,} bytes"
        )
        long = mem["latency"]
        lines.append(
            f"latency at  50% over the memory run ({long['windows']} windows): median "
            f"{long['median_s'] * 1000:.0f} ms  p95 {long['p95_s'] * 1000:.0f} ms  "
            f"max {long['max_s'] * 1000:.0f} ms"
        )
        targets["latency median and p95 < 500 ms at 50%, memory run"] = quick_enough(long)
        targets["RSS growth < 10%"] = mem["rss_growth"] < TARGET_RSS_GROWTH
        targets["spill bytes flat (last-span mean <= first-span mean + 1 MiB)"] = (
            mem["spill_bytes_last"] <= mem["spill_bytes_first"] + 2**20
        )
    diff, micro = results["differential"], results["assembler"]
    by_mode, ratio = diff["summary"], diff["ratio_differential_to_merged"]
    lines.append(
        "24-pane windows in the engine, differential / merged: reducer CPU "
        f"{by_mode['differential']['reduce_cpu_s']:.1f} / {by_mode['merged']['reduce_cpu_s']:.1f} s "
        f"(x{ratio['reduce_cpu_s']}), job wall {by_mode['differential']['job_wall_s']:.1f} / "
        f"{by_mode['merged']['job_wall_s']:.1f} s (x{ratio['job_wall_s']}); windows identical"
    )
    lines.append(
        f"WindowAssembler, {micro['windows_built']} windows of up to 24 panes x {micro['keys_per_pane']:,} "
        f"keys: differential {micro['median_s']['differential']:.2f} s, merged "
        f"{micro['median_s']['merged']:.2f} s (x{micro['ratio_differential_to_merged']}); groups identical"
    )
    lines += [f"{'met' if ok else 'NOT MET'}: {name}" for name, ok in targets.items()]
    return "\n".join(lines), targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in about a minute")
    parser.add_argument("--records", type=int, default=None, help="events in the input (default 2,000,000)")
    parser.add_argument("--minutes", type=float, default=None, help="length of the memory run (default 5)")
    parser.add_argument("--repeats", type=int, default=None, help="throughput and differential runs (default 3)")
    parser.add_argument("--latency-seconds", type=float, default=None, help="each latency run (default 30)")
    parser.add_argument("--data-dir", default=str(REPO_ROOT / "bench" / "data"))
    parser.add_argument("--json", help="default bench/results/continuous.json (with --quick: the temp dir)")
    args = parser.parse_args()
    quick = args.quick
    records = args.records or (100_000 if quick else 2_000_000)
    minutes = args.minutes if args.minutes is not None else (0.2 if quick else 5.0)
    repeats = args.repeats or (1 if quick else 3)
    seconds = args.latency_seconds or (4.0 if quick else 30.0)
    events, lines = make_inputs(Path(args.data_dir), records, 100_000)
    diff_events, _ = make_inputs(Path(args.data_dir), max(records // 4, 50_000), 20_000)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="hop-continuous-bench-") as scratch_dir:
        scratch = Path(scratch_dir)
        with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
            client = Client(cluster.address, timeout=60)
            try:
                results["throughput"] = throughput(client, cluster, events, scratch, repeats)
                rate = results["throughput"]["steady_records_per_s"]
                results["latency"] = latency(client, lines, scratch, rate, seconds)
                results["differential"] = differential(client, cluster, diff_events, scratch, repeats)
            finally:
                client.close()
        if minutes > 0:
            results["memory"] = memory(lines, scratch, rate, minutes * 60)
    results["assembler"] = assembler_micro(*((50, 24, 2_000, 20_000, 1) if quick else (200, 24, 5_000, 20_000, 5)))
    text, targets = table(results)
    print(text)
    document = {
        "command": "python -m bench.continuous " + " ".join(sys.argv[1:]),
        "machine": machine_info(),
        "repo_root": str(REPO_ROOT),
        "records": records,
        "events_per_second_of_event_time": EVENTS_PER_SECOND,
        "reducers": REDUCERS,
        "targets": targets,
        "results": results,
        "table": text,
    }
    default = Path(tempfile.gettempdir(), "hop-continuous-quick.json") if quick else RESULTS / "continuous.json"
    path = Path(args.json or default)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written to {path}")


if __name__ == "__main__":
    main()
