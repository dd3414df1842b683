"""The cluster monitor: the monitoring query over recorded samples equals a batch computation per window; on a live
cluster an induced CPU hog on one worker raises an alert for it, and a killed worker shows as a fault and as
missing in the windows' scoreboard."""

from __future__ import annotations

import json
import math
import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec
from hop.stream.options import stream_options
from hop.stream.runner import run_stream
from monitoring.cli import MONITOR_JOB, monitor_spec, wait_for_workers
from monitoring.feed import MonitorFeed
from tests.conftest import job_path, run_job
from tests.test_stream_engine import read_windows

pytestmark = pytest.mark.slow

T0 = 1_700_000_000.0004
HOSTS = {"h1": "rack-a", "h2": "rack-a", "h3": "rack-b"}


def recorded_samples(folder: Path, seconds: int) -> dict[str, list[dict[str, Any]]]:
    """One JSON-lines file of worker samples per host, one sample a second, as ``monitoring.publisher`` sends."""
    rng = random.Random(4)
    per_host: dict[str, list[dict[str, Any]]] = {}
    for host, rack in HOSTS.items():
        samples = []
        for second in range(seconds):
            samples.append(
                {
                    "ts": T0 + second,
                    "kind": "worker",
                    "worker": f"w-{host}",
                    "host": host,
                    "rack": rack,
                    "host_metrics": {
                        "cpu_percent": round(rng.uniform(0, 100), 2),
                        "load1": round(rng.uniform(0, 4), 2),
                        "cpu_per_core": [1.0, 2.0],  # lists are not windowed
                    },
                    "engine": {"running_maps": rng.randint(0, 2), "unsent_spills": rng.randint(0, 9)},
                }
            )
        per_host[host] = samples
        (folder / f"{host}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    return per_host


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def test_monitoring_query_over_recorded_samples_equals_batch(cluster: LocalCluster, tmp_path: Path) -> None:
    per_host = recorded_samples(tmp_path, 40)
    sources = [f"replay:{tmp_path / f'{host}.jsonl'}" for host in HOSTS]
    spec = build_spec(
        load_job_file(str(MONITOR_JOB)),
        [],
        str(tmp_path / "out"),
        num_reduces=2,
        options={"stream": stream_options(sources, "10s", "2s")},
    )
    client = Client(cluster.address, timeout=30)
    try:
        run_stream(client, spec, progress=False, timeout=120, view_interval=None)
    finally:
        client.close()
    windows = read_windows(tmp_path / "out")
    assert len(windows) == 24  # windows of 10 s sliding by 2 s over 40 s of samples
    everything = [s for samples in per_host.values() for s in samples]
    for start, (meta, rows) in windows.items():
        inside = [s for s in everything if start <= s["ts"] < start + 10]
        assert set("".join(meta["scoreboard"]["grid"])) <= {"D", "E"} and meta["reason"] == "complete"
        expected: dict[tuple[str, ...], list[float]] = {}
        for sample in inside:
            for name, value in {**sample["host_metrics"], **sample["engine"]}.items():
                if isinstance(value, list):
                    continue
                for key in (("host", sample["host"], name), ("rack", sample["rack"], name), ("cluster", "", name)):
                    expected.setdefault(key, []).append(float(value))
        metric_rows = {k: v for k, v in rows.items() if k[0] in ("host", "rack", "cluster")}
        assert set(metric_rows) == set(expected)
        for key, values in expected.items():
            got = metric_rows[key]
            assert got["n"] == len(values)
            assert got["mean"] == pytest.approx(sum(values) / len(values))
            assert got["max"] == max(values) and got["p95"] == p95(values)
            if key[0] == "host":
                assert got["rack"] == HOSTS[key[1]]


@contextmanager
def running_monitor(cluster: LocalCluster, output: Path) -> Iterator[MonitorFeed]:
    """``hop monitor``'s pieces against ``cluster``: the monitoring job in a thread, and its feed."""
    client = Client(cluster.address, timeout=30)
    spec, names = monitor_spec(client, str(output), "10s", "2s", 3.0)
    endpoints = [w["samples"] for w in wait_for_workers(client, cluster.num_workers)]
    feeds: list[MonitorFeed] = []
    errors: list[BaseException] = []

    def follow(job_id: str) -> None:
        feed = MonitorFeed(cluster.address, job_id, str(output), names, endpoints)
        feeds.append(feed)
        feed.start()

    def run() -> None:
        try:
            run_stream(client, spec, progress=False, timeout=300, view_interval=None, on_submitted=follow)
        except BaseException as error:  # reported by the test
            errors.append(error)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while not feeds and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feeds, "the monitoring job should have been submitted"
        yield feeds[0]
    finally:
        watcher = Client(cluster.address, timeout=30)
        try:
            if feeds:
                watcher.stop(feeds[0].job_id)
        finally:
            watcher.close()
        runner.join(timeout=60)
        for feed in feeds:
            feed.stop()
        client.close()
    assert not errors, errors


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def test_cpu_hog_on_one_worker_raises_an_alert_for_it(tmp_path: Path) -> None:
    with (
        LocalCluster(workers=3, map_slots=3, reduce_slots=2, racks=2) as cluster,
        running_monitor(cluster, tmp_path / "monitor") as feed,
    ):
        wait_for(lambda: feed.snapshot()["windows_seen"] >= 3, 60, "the first monitoring windows")
        started = time.monotonic()
        hog = threading.Thread(target=_run_hog, args=(cluster, tmp_path))
        hog.start()
        busy = wait_for(lambda: _busy_worker(cluster), 30, "the hog to start on a worker")
        alert = wait_for(
            lambda: next((a for a in feed.snapshot()["alerts"] if a["host"] == busy and a["state"] == "alert"), None),
            90,
            f"an alert for {busy}",
        )
        took = time.monotonic() - started
        assert alert["metric"] in ("cpu_percent", "load1") and alert["tentative_count"] >= 10
        assert took < 90
        others = [a for a in feed.snapshot()["alerts"] if a["host"] != busy and a["state"] == "alert"]
        assert not others, f"only the busy worker should alert: {others}"
    # The cluster is gone, and the hog's job with it (its client gives up): no need to wait for the loop to end.
    hog.join(timeout=60)
    assert not hog.is_alive()
    logged = [json.loads(line) for line in (tmp_path / "monitor" / "_alerts.jsonl").read_text().splitlines()]
    assert any(entry["host"] == busy and entry["state"] == "alert" for entry in logged)


def _run_hog(cluster: LocalCluster, tmp_path: Path) -> None:
    source = tmp_path / "hog.txt"
    source.write_text("spin\n")
    client = Client(cluster.address, timeout=5)
    try:
        run_job(client, "busy_map", [source], tmp_path / "hog-out")
    except Exception:
        pass  # the test ends the cluster once the alert is seen, with the hog still spinning
    finally:
        client.close()


def _busy_worker(cluster: LocalCluster) -> str | None:
    client = Client(cluster.address, timeout=30)
    try:
        for job in client.jobs():
            if job["name"] == "BusyMap" and job["state"] == "running":
                tasks = client.job(job["job_id"])["tasks"]
                running = [t for t in tasks if t["kind"] == "map" and t["state"] == "running"]
                if running and running[0].get("worker"):
                    return str(running[0]["worker"])
    finally:
        client.close()
    return None


def test_killed_worker_is_a_fault_and_missing_from_the_scoreboard(tmp_path: Path) -> None:
    with (
        LocalCluster(workers=3, map_slots=3, reduce_slots=2, heartbeat_timeout=1.5) as cluster,
        running_monitor(cluster, tmp_path / "monitor") as feed,
    ):
        wait_for(lambda: feed.snapshot()["windows_seen"] >= 2, 60, "the first monitoring windows")
        victim_name = "local-2"
        cluster.workers[2].send_signal(signal.SIGKILL)
        fault = wait_for(
            lambda: next(
                (f for f in feed.snapshot()["faults"] if f["kind"] == "worker_lost" and f["worker"] == victim_name),
                None,
            ),
            60,
            "the lost worker's fault",
        )
        assert fault["silent_s"] >= 1.5
        latest = wait_for(
            lambda: (feed.snapshot()["latest"] or {}).get("missing_hosts") and feed.snapshot()["latest"],
            60,
            "a window with the killed worker missing",
        )
        assert victim_name in latest["missing_hosts"]
        row = latest["scoreboard"]["grid"][latest["scoreboard"]["names"].index(victim_name)]
        assert set(row) <= {"M", "L"}
        assert latest["reason"] in ("latency", "source failure")
    faults = [json.loads(line) for line in (tmp_path / "monitor" / "_faults.jsonl").read_text().splitlines()]
    assert any(f["kind"] == "worker_lost" and f["worker"] == victim_name for f in faults)
    assert job_path("cluster_monitor")
