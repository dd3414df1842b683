"""The cluster monitor's dashboard against a live monitor on a real cluster: its JSON API, ``/metrics``, the pushed
state, the routes without a monitor, and the page in headless Chromium (drill-down from the cluster to a rack to a
host with live charts; an alert raised by an induced CPU hog showing up without a reload; a killed worker as a fault
and a missing host; a worker that registered after the monitor started named as unwatched).

One cluster and one monitoring job serve the whole module (starting them costs seconds; windows come every 2 s).
Its windows are short and its alert rules quick (``hop monitor --window 4s --alert-average 10s --alert-after 3
--alert-stuck 2s``), so a killed worker is missing from a whole window, a blocked map stuck and a hog confirmed within
seconds, not after the 10 s windows, 20 s
averages and 10 tentative alerts in a row of the defaults."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hop.client import Client
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import JobFailed, build_spec
from hop.stream.runner import run_stream
from hop.web.server import WebServer
from monitoring.cli import monitor_spec, monitoring_job, wait_for_workers
from monitoring.feed import MonitorFeed
from tests.browser import (
    RETRY_WAIT,
    assert_backs_off,
    assert_follows_a_restart_at_its_next_attempt,
    browser_page,
    needs_chromium,
    pause_clock,
    retry_wait,
)
from tests.conftest import job_path, run_job
from tests.test_monitor import _busy_worker, _run_hog, wait_for
from tests.test_web import get, get_json, read_events

pytestmark = pytest.mark.slow

WORKERS = ["local-0", "local-1", "local-2"]
RACKS = {"rack-0": ["local-0", "local-2"], "rack-1": ["local-1"]}  # LocalCluster(racks=2): round robin
WINDOW, SLIDE, PANES = "4s", "2s", 2
ALERT_AVERAGE, ALERT_AFTER = 10.0, 3
"""A host's moving average in the alert rule, and the tentative alerts in a row that make an alert (``hop monitor
--alert-average``, ``--alert-after``)."""
STUCK_AFTER = 2.0
"""Seconds without progress that make a running task stuck (``hop monitor --alert-stuck``)."""
MONITOR_SECONDS = 900
"""The monitoring job's time limit: longer than the module (``tests.test_monitor.running_monitor`` stops at 300 s)."""


@dataclass
class Monitored:
    cluster: LocalCluster
    feed: MonitorFeed
    web: WebServer


@contextmanager
def monitor(cluster: LocalCluster, output: Path) -> Iterator[MonitorFeed]:
    """``hop monitor``'s pieces against ``cluster`` (as ``tests.test_monitor.running_monitor``, for longer)."""
    client = Client(cluster.address, timeout=30)
    wait_for_workers(client, cluster.num_workers)
    job = monitoring_job(short_window=ALERT_AVERAGE, tentative_to_alert=ALERT_AFTER, stuck_after=STUCK_AFTER)
    spec, names, endpoints = monitor_spec(client, str(output), WINDOW, SLIDE, 3.0, job=job)
    feeds: list[MonitorFeed] = []
    errors: list[BaseException] = []

    def follow(job_id: str) -> None:
        feed = MonitorFeed(cluster.address, job_id, str(output), names, endpoints, alert_rule=job.alert_rule())
        feeds.append(feed)
        feed.start()

    def run() -> None:
        try:
            run_stream(client, spec, progress=False, timeout=MONITOR_SECONDS, view_interval=None, on_submitted=follow)
        except BaseException as error:  # reported below
            errors.append(error)

    runner = threading.Thread(target=run, name="monitoring-job")
    runner.start()
    try:
        wait_for(lambda: feeds, 60, "the monitoring job's submission")
        yield feeds[0]
    finally:
        watcher = Client(cluster.address, timeout=30)
        try:
            if feeds:
                watcher.stop(feeds[0].job_id)
        finally:
            watcher.close()
        runner.join(timeout=90)
        for feed in feeds:
            feed.stop()
        client.close()
    assert not runner.is_alive(), "the monitoring job should have stopped"
    assert not errors, errors


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitored]:
    output = tmp_path_factory.mktemp("dashboard") / "monitor"
    with (
        LocalCluster(workers=3, map_slots=3, reduce_slots=2, racks=2) as cluster,
        monitor(cluster, output) as feed,
        WebServer(cluster.address, 0, monitor=[feed]) as web,
    ):
        yield Monitored(cluster, feed, web)


def full_state(web: WebServer) -> dict[str, Any] | None:
    """The dashboard's state once a window has every worker in it (a loaded machine may emit one without)."""
    status, state = get_json(web.url + "api/monitor/state")
    assert status == 200, state
    latest = state["latest"]
    if state["windows_seen"] >= 3 and latest and sorted(latest["hosts"]) == WORKERS:
        return dict(state)
    return None


def series(web: WebServer, query: str) -> tuple[int, Any]:
    return get_json(web.url + "api/monitor/series?" + query)


# The API -----------------------------------------------------------------------------------------------------------
def test_state_fills_with_the_cluster_its_racks_and_hosts(monitored: Monitored) -> None:
    state = wait_for(lambda: full_state(monitored.web), 90, "a window with every worker")
    latest = state["latest"]
    assert {rack: entry["hosts"] for rack, entry in latest["racks"].items()} == RACKS
    assert {host: entry["rack"] for host, entry in latest["hosts"].items()} == {
        host: rack for rack, hosts in RACKS.items() for host in hosts
    }
    for stats in (latest["cluster"]["cpu_percent"], latest["racks"]["rack-1"]["metrics"]["running_maps"]):
        assert set(stats) == {"mean", "max", "p95", "n"} and stats["n"] > 0
        assert stats["mean"] <= stats["max"] and stats["p95"] <= stats["max"]
    assert "mem_used_bytes" in latest["hosts"]["local-0"]["metrics"]
    assert state["sources"] == [*WORKERS, "coordinator"] and latest["scoreboard"]["names"] == state["sources"]
    assert latest["end"] - latest["start"] == 4
    monitoring = [job for job in state["jobs"] if job["job_id"] == monitored.feed.job_id]
    assert monitoring and monitoring[0]["continuous"] and monitoring[0]["name"] == "ClusterMonitor"
    assert sorted(state["samples"]) == WORKERS and state["version"] >= 1
    # Hosts by label everywhere, the coordinator's labels of the workers alongside (here each worker's own name).
    assert state["host_labels"] == {worker: worker for worker in WORKERS}
    assert latest["scoreboard"]["hosts"] == state["sources"]


def test_series_grow_window_by_window(monitored: Monitored) -> None:
    wait_for(lambda: full_state(monitored.web), 90, "a window with every worker")
    status, first = series(monitored.web, "level=host&name=local-1&metric=cpu_percent")
    assert status == 200 and (first["level"], first["name"], first["metric"]) == ("host", "local-1", "cpu_percent")
    points = first["points"]
    assert points and all(set(point) == {"t", "mean", "max", "p95"} for point in points)
    assert [p["t"] for p in points] == sorted({p["t"] for p in points}), "one point per window, oldest first"
    grown = wait_for(
        lambda: (lambda reply: len(reply[1]["points"]) > len(points) and reply[1]["points"])(
            series(monitored.web, "level=host&name=local-1&metric=cpu_percent")
        ),
        60,
        "the series to grow",
    )
    assert grown[: len(points)] == points, "a series only grows at its end"
    status, cluster = series(monitored.web, "level=cluster&metric=load1")  # the cluster needs no name
    assert status == 200 and cluster["name"] == "" and cluster["points"]
    status, rack = series(monitored.web, "level=rack&name=rack-0&metric=running_maps")
    assert status == 200 and rack["points"]


def test_bad_series_requests_get_json_errors(monitored: Monitored) -> None:
    wait_for(lambda: full_state(monitored.web), 90, "a window with every worker")
    status, body = series(monitored.web, "level=planet&name=local-0&metric=cpu_percent")
    assert status == 400 and "level must be one of host, rack, cluster" in body["error"]
    status, body = series(monitored.web, "level=host&name=local-0")
    assert status == 400 and "metric is required" in body["error"]
    status, body = series(monitored.web, "level=rack&metric=cpu_percent")
    assert status == 400 and "name is required" in body["error"]
    status, body = series(monitored.web, "level=cluster&name=rack-0&metric=load1")  # was ignored
    assert status == 400 and "level cluster takes none, got 'rack-0'" in body["error"], body
    status, body = series(monitored.web, "level=host&name=local-0&metric=load1&window=5")
    assert status == 400 and "unknown query parameter 'window'" in body["error"], body
    status, body = series(monitored.web, "level=host&name=nobody&metric=cpu_percent")
    assert status == 404 and "no series" in body["error"]
    status, body = series(monitored.web, "level=cluster&metric=no_such_metric")
    assert status == 404 and "no_such_metric" in body["error"]
    status, body = get_json(monitored.web.url + "api/monitor/nothing")
    assert status == 404 and body["error"]


def test_metrics_are_a_prometheus_exposition(monitored: Monitored) -> None:
    wait_for(lambda: full_state(monitored.web), 90, "a window with every worker")
    status, kind, body = get(monitored.web.url + "metrics")
    assert status == 200 and kind.startswith("text/plain") and "version=" in kind
    families = {family.name: family for family in text_string_to_metric_families(body.decode())}
    cpu = families["hop_host_cpu_percent"]
    assert cpu.type == "gauge"
    assert sorted(sample.labels["worker"] for sample in cpu.samples) == WORKERS
    assert all(sample.labels["rack"] in RACKS and sample.value >= 0 for sample in cpu.samples)
    windows = {
        (s.labels["level"], s.labels["name"], s.labels["metric"], s.labels["stat"]): s.value
        for s in families["hop_window_metric"].samples
    }
    for stat in ("mean", "max", "p95"):
        assert ("cluster", "", "cpu_percent", stat) in windows
        assert ("rack", "rack-1", "load1", stat) in windows
        assert all(("host", host, "running_maps", stat) in windows for host in WORKERS)
    assert {"hop_sample_age_seconds", "hop_alert", "hop_engine_running_maps"} <= set(families)
    assert {s.labels["worker"]: s.value for s in families["hop_worker_up"].samples} == dict.fromkeys(WORKERS, 1)


def scrape(web: WebServer) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``/metrics`` as {family: {sorted label pairs: value}}, with each counter's samples under its family name."""
    status, kind, body = get(web.url + "metrics")
    assert status == 200, body
    families: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(body.decode()):
        series = families.setdefault(family.name, {})
        for sample in family.samples:
            if sample.name in (family.name, f"{family.name}_total"):
                series[tuple(sorted(sample.labels.items()))] = sample.value
    return families


def of_job(series: dict[tuple[tuple[str, str], ...], float], job_id: str) -> dict[str, float]:
    """The series of ``job_id`` by their ``task`` label (by ``job_id`` for per-job series)."""
    found = {}
    for labels, value in series.items():
        named = dict(labels)
        if named.get("job_id") == job_id:
            found[named.get("task", job_id)] = value
    return found


@contextmanager
def blocked_job(cluster: LocalCluster, folder: Path) -> Iterator[str]:
    """A batch job with two maps: ``map-00000`` crashes once then reads its record, ``map-00001`` is blocked on its
    record (60 s, cancelled on leaving)."""
    (folder / "fails-once.txt").write_text(f"fail-once {folder / 'failed-once'}\n")
    (folder / "blocked.txt").write_text("block\n")
    inputs = [str(folder / "fails-once.txt"), str(folder / "blocked.txt")]
    spec = build_spec(
        load_job_file(job_path("blocked_map"), "BlockedMap"),
        inputs,
        str(folder / "out"),
        num_reduces=1,
        options={"map_per_file": True},  # (small files are packed into one map otherwise)
    )
    client = Client(cluster.address, timeout=30)
    job_id = client.submit(spec)
    try:
        yield job_id
    finally:
        client.stop(job_id, "the test is done with it")
        client.close()


def test_metrics_show_a_blocked_map_stuck_and_the_jobs_progress_and_faults(
    monitored: Monitored, tmp_path: Path
) -> None:
    web = monitored.web
    wait_for(lambda: full_state(web), 90, "a window with every worker")
    failed_before = scrape(web)["hop_faults"].get((("kind", "task_failed"),), 0.0)
    with blocked_job(monitored.cluster, tmp_path) as job_id:
        metrics = wait_for(
            lambda: (m := scrape(web)) and of_job(m["hop_task_stuck"], job_id) and m, 60, "the blocked map stuck"
        )
        started = time.monotonic()
        assert of_job(metrics["hop_task_stuck"], job_id) == {"map-00001": 1.0}  # the blocked map, not the other
        assert of_job(metrics["hop_task_stalled_seconds"], job_id)["map-00001"] >= STUCK_AFTER
        # The job's progress: one of its two maps done (after one failed attempt), its reduce has that map's output
        # (the shuffle is the first half of a reduce's progress).
        metrics = wait_for(
            lambda: (m := scrape(web)) and of_job(m["hop_job_failed_attempts"], job_id) == {job_id: 1.0} and m,
            30,
            "the job's failed attempt",
        )
        assert of_job(metrics["hop_job_map_progress_ratio"], job_id) == {job_id: 0.5}
        assert of_job(metrics["hop_job_reduce_progress_ratio"], job_id) == {job_id: 0.25}
        assert of_job(metrics["hop_job_input_records"], job_id)[job_id] >= 0
        assert metrics["hop_faults"][(("kind", "task_failed"),)] >= failed_before + 1
        _, state = get_json(web.url + "api/monitor/state")
        stuck = [task for task in state["stuck_tasks"] if task["job_id"] == job_id]
        assert [(t["task"], t["attempt"], t["name"], t["stuck_after_s"]) for t in stuck] == [
            ("map-00001", 0, "BlockedMap", STUCK_AFTER)
        ], stuck
    # Cancelled: the stuck task clears, and so does the job.
    wait_for(lambda: not of_job(scrape(web)["hop_task_stuck"], job_id), 30, "the stuck task to clear")
    assert not of_job(scrape(web)["hop_job_map_progress_ratio"], job_id)
    logged = [json.loads(line) for line in (monitored.feed.output / "_alerts.jsonl").read_text().splitlines()]
    states = [entry["state"] for entry in logged if entry["metric"] == "stuck_task" and entry["job_id"] == job_id]
    assert states == ["alert", "cleared"], logged
    assert time.monotonic() - started < 60


def test_events_push_the_state_after_every_window(monitored: Monitored) -> None:
    wait_for(lambda: full_state(monitored.web), 90, "a window with every worker")
    pushed: list[dict[str, Any]] = []
    started = time.monotonic()
    with urllib.request.urlopen(monitored.web.url + "api/monitor/events", timeout=30) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        for name, data in read_events(stream):
            assert name == "state", name
            pushed.append(data)
            if len(pushed) == 3:
                break
    versions = [state["version"] for state in pushed]
    assert versions == sorted(set(versions)), "a state per new window, never the same twice"
    assert pushed[-1]["windows_seen"] > pushed[0]["windows_seen"]
    assert pushed[-1]["latest"]["end"] > pushed[0]["latest"]["end"]
    assert time.monotonic() - started < 30, "windows come every 2 s"


def test_monitor_routes_only_with_a_monitor(monitored: Monitored) -> None:
    paths = ["monitor", "metrics", "api/monitor/state", "api/monitor/series?level=cluster&metric=load1"]
    with WebServer(monitored.cluster.address) as plain:
        for path in [*paths, "api/monitor/events"]:
            status, body = get_json(plain.url + path)
            assert status == 404 and body["error"], path
        status, jobs = get_json(plain.url + "api/jobs")
        assert status == 200 and any(job["job_id"] == monitored.feed.job_id for job in jobs)
    with WebServer(monitored.cluster.address, monitor=[]) as waiting:  # hop monitor before its job is submitted
        for path in paths[1:]:
            status, body = get_json(waiting.url + path)
            assert status == 503 and "has not started yet" in body["error"], path
        status, kind, page = get(waiting.url + "monitor")
        assert status == 200 and kind.startswith("text/html")
        assert b"/static/vendor/chart.umd.min.js" in page and b"/static/monitor.js" in page
        assert b"http://" not in page and b"https://" not in page, "no CDN: every asset is served by hop"
        for asset in ("static/monitor.js", "static/monitor.css"):
            status, _, _ = get(waiting.url + asset)
            assert status == 200, asset
        with urllib.request.urlopen(waiting.url + "api/monitor/events", timeout=30) as stream:
            name, data = next(read_events(stream))
        assert name == "waiting" and "monitoring job" in data["message"]


# The page ----------------------------------------------------------------------------------------------------------
CHART_POINTS = """([level, name, metric]) => {
  const card = document.querySelector(
    `.chart-card[data-level="${level}"][data-name="${name}"][data-metric="${metric}"]`);
  const chart = card && Chart.getChart(card.querySelector("canvas"));
  return chart ? chart.data.datasets[1].data.length : -1;
}"""


def chart_points(page: Any, level: str, name: str, metric: str) -> int:
    return int(page.evaluate(CHART_POINTS, [level, name, metric]))


def texts(page: Any, selector: str) -> list[str]:
    return [element.inner_text().strip() for element in page.query_selector_all(selector)]


@needs_chromium
def test_dashboard_drills_down_with_live_charts(monitored: Monitored, tmp_path: Path) -> None:
    web = monitored.web
    wait_for(lambda: full_state(web), 90, "a window with every worker")
    with browser_page() as (page, errors):
        page.goto(web.url, timeout=30_000)  # the jobs view links the dashboard
        page.wait_for_selector("#monitor-link", state="visible", timeout=30_000)
        page.click("#monitor-link")
        page.wait_for_url("**/monitor", timeout=30_000)
        # The cluster: its racks, and its charts filling window by window without a reload.
        page.wait_for_selector("#children tbody tr[data-level=rack]", timeout=30_000)
        assert sorted(texts(page, "#children tbody tr td:first-child")) == sorted(RACKS)
        assert page.is_hidden("#waiting") and page.inner_text("#connection") == "live"
        page.wait_for_function(f"({CHART_POINTS})(['cluster', '', 'cpu_percent']) > 0", timeout=30_000)
        before = chart_points(page, "cluster", "", "cpu_percent")
        page.wait_for_function(
            f"n => ({CHART_POINTS})(['cluster', '', 'cpu_percent']) >= n + 2", arg=before, timeout=30_000
        )
        for metric in ("load1", "mem_used_bytes", "shuffle_out_bytes_s", "running_maps"):
            assert chart_points(page, "cluster", "", metric) > 0, metric
        assert len(page.query_selector_all("#scoreboard .cell")) == 4 * PANES  # 4 sources x the panes of 2 s
        assert texts(page, "#scoreboard .source") == [*WORKERS, "coordinator"]
        legend = page.query_selector_all("#scoreboard-legend li")
        assert [item.get_attribute("data-state") for item in legend] == ["D", "E", "M", "L", "S", "C"]
        assert page.query_selector(f"#jobs tbody tr[data-job-id='{monitored.feed.job_id}']")
        # Into a rack: its hosts.
        page.click("#children tbody tr[data-name='rack-0']")
        page.wait_for_function("document.querySelector('#level-title').textContent === 'Rack rack-0'")
        assert page.url.endswith("#/rack/rack-0")
        assert texts(page, "#children tbody tr td:first-child") == RACKS["rack-0"]
        assert texts(page, "#breadcrumb a") == ["Cluster", "rack-0"]
        page.wait_for_function(f"({CHART_POINTS})(['rack', 'rack-0', 'cpu_percent']) > 0", timeout=30_000)
        # Into a host: its metrics and its charts, with the history the monitor kept.
        page.click("#children tbody tr[data-name='local-2']")
        page.wait_for_function("document.querySelector('#level-title').textContent === 'Host local-2'")
        assert texts(page, "#breadcrumb a") == ["Cluster", "rack-0", "local-2"]
        page.wait_for_function(f"({CHART_POINTS})(['host', 'local-2', 'cpu_percent']) > 1", timeout=30_000)
        status, kept = series(web, "level=host&name=local-2&metric=cpu_percent")
        shown = chart_points(page, "host", "local-2", "cpu_percent")
        assert status == 200 and abs(shown - len(kept["points"])) <= 2, (shown, len(kept["points"]))
        assert not page.query_selector(".chart-card[data-level=cluster]"), "only the host's charts"
        assert page.query_selector("#children tbody tr[data-metric=cpu_percent]")
        assert page.query_selector("#children tbody tr[data-metric=running_maps]")
        before = chart_points(page, "host", "local-2", "cpu_percent")
        page.wait_for_function(
            f"n => ({CHART_POINTS})(['host', 'local-2', 'cpu_percent']) > n", arg=before, timeout=30_000
        )
        page.screenshot(path=str(tmp_path / "monitor-host.png"), full_page=True)
        # Back up through the breadcrumb.
        page.click("#breadcrumb a >> text=Cluster")
        page.wait_for_function("document.querySelector('#level-title').textContent === 'Cluster'")
        page.wait_for_function(f"({CHART_POINTS})(['cluster', '', 'cpu_percent']) > 0", timeout=30_000)
        page.screenshot(path=str(tmp_path / "monitor-cluster.png"), full_page=True)
        assert (tmp_path / "monitor-cluster.png").stat().st_size > 20_000
        assert not errors, errors


@needs_chromium
def test_dashboard_waits_for_the_monitoring_job(monitored: Monitored) -> None:
    """``hop monitor`` serves the page before its job is submitted: the page waits, then fills with the history."""
    wait_for(lambda: full_state(monitored.web), 90, "a window with every worker")
    box: list[Any] = []
    with WebServer(monitored.cluster.address, monitor=box) as web, browser_page() as (page, _):
        page.goto(web.url + "monitor#/host/local-0", timeout=30_000)
        page.wait_for_function(
            "document.querySelector('#waiting').textContent.includes('waiting for the monitoring job')",
            timeout=30_000,
        )
        assert page.is_visible("#waiting") and page.inner_text("#level-title") == "Host local-0"
        box.append(monitored.feed)  # the job was submitted
        page.wait_for_selector("#waiting", state="hidden", timeout=30_000)
        _, kept = series(monitored.web, "level=host&name=local-0&metric=cpu_percent")
        page.wait_for_function(
            f"n => ({CHART_POINTS})(['host', 'local-0', 'cpu_percent']) >= n",
            arg=len(kept["points"]),
            timeout=30_000,
        )


def _feed_of_one_window(monitored: Monitored) -> tuple[MonitorFeed, dict[str, Any]]:
    """A feed holding the monitoring query's latest window with every worker (its thread not started: no other
    window comes), and that window."""
    wait_for(lambda: full_state(monitored.web), 90, "a window with every worker")
    client = Client(monitored.cluster.address, timeout=30)
    try:
        window = client.windows(monitored.feed.job_id, all_rows=True)[-1]
    finally:
        client.close()
    feed = MonitorFeed(monitored.cluster.address, monitored.feed.job_id, "", monitored.feed.state.source_names, [])
    feed.state.add_window(window)
    return feed, window


@needs_chromium
def test_dashboard_ages_its_last_window_when_no_new_one_comes(monitored: Monitored) -> None:
    """The window's age ("emitted 0 s ago") was worked out once per state, from the server's time in it: with no
    new window (the monitor stopped, its server gone, the query stalled) the page said it for good, a stale window
    passing for a fresh one. The age counts on. (A feed holding one window, its thread not started: none comes.)"""
    feed, _ = _feed_of_one_window(monitored)
    age = re.compile(r"emitted (\d+) s ago$")
    with WebServer(monitored.cluster.address, 0, monitor=[feed]) as web, browser_page() as (page, errors):
        page.goto(web.url + "monitor", timeout=30_000)
        page.wait_for_function("document.querySelector('#window-status').textContent.includes('emitted')")
        first = page.inner_text("#window-status")
        page.wait_for_timeout(3_500)
        later = page.inner_text("#window-status")
        assert not errors, errors
    before, after = (age.search(text) for text in (first, later))
    assert before and after, (first, later)
    assert 2 <= int(after[1]) - int(before[1]) <= 6, (first, later)  # (3.5 s, each text up to 1 s old)


TIME_AXIS = """() => {
  const chart = Chart.getChart(document.querySelector('.chart-card[data-metric=cpu_percent] canvas'));
  const x = chart.scales.x;
  return { min: x.min, max: x.max, ticks: x.ticks.map((t) => t.value), labels: x.ticks.map((t) => t.label) };
}"""


@needs_chromium
def test_dashboard_charts_a_single_window_on_that_windows_time(monitored: Monitored) -> None:
    """A dashboard one window old: each chart has one point, and Chart.js widened the axis of zero width by 5% of
    its value (some 3 years at seconds since the epoch), labelled with times of day of other days. Its axis spans the
    window its point stands for. (A feed holding one real window of the monitoring query, so the page stays there.)"""
    feed, window = _feed_of_one_window(monitored)
    end, start = float(window["end"]), float(window["start"])
    with WebServer(monitored.cluster.address, 0, monitor=[feed]) as web, browser_page() as (page, errors):
        page.goto(web.url + "monitor", timeout=30_000)
        page.wait_for_function(f"({CHART_POINTS})(['cluster', '', 'cpu_percent']) === 1", timeout=30_000)
        axis = page.evaluate(TIME_AXIS)
        assert (axis["min"], axis["max"]) == (start, end), axis
        assert axis["ticks"] and all(start <= tick <= end for tick in axis["ticks"]), axis
        seconds = [time.strftime("%H:%M:%S", time.gmtime(tick)) for tick in axis["ticks"]]
        assert axis["labels"] == seconds and len(set(seconds)) == len(seconds), axis
        assert not errors, errors


@needs_chromium
def test_dashboard_shows_the_alert_of_a_cpu_hog(monitored: Monitored, tmp_path: Path) -> None:
    web, cluster = monitored.web, monitored.cluster
    wait_for(lambda: full_state(web), 90, "a window with every worker")
    with browser_page() as (page, errors):
        page.goto(web.url + "monitor", timeout=30_000)
        page.wait_for_selector("#children tbody tr[data-level=rack]", timeout=30_000)
        assert not page.query_selector("#alerts li[data-state=alert]")
        rule = page.inner_text("#alert-rule")  # the rule this monitor runs, not the defaults
        assert f"{ALERT_AVERAGE:g} s average of CPU, 1-minute load or memory" in rule, rule
        assert "other hosts' 120 s average" in rule, rule
        assert f"; {ALERT_AFTER} windows in a row make an alert" in rule, rule
        hog = threading.Thread(target=_run_hog, args=(cluster, tmp_path), name="hog")
        hog.start()
        try:
            busy = wait_for(lambda: _busy_worker(cluster), 60, "the hog to start on a worker")
            started = time.monotonic()
            # Pushed to the open page: the alert in the list, and on the host and its rack.
            page.wait_for_selector(f"#alerts li[data-host='{busy}'][data-state=alert]", timeout=90_000)
            took = time.monotonic() - started
            rack = next(rack for rack, hosts in RACKS.items() if busy in hosts)
            page.wait_for_selector(f".host-chip[data-host='{busy}'] .badge.alert")
            page.wait_for_selector(f"#children tbody tr[data-name='{rack}'] .badge.alert")
            alert = page.query_selector(f"#alerts li[data-host='{busy}'][data-state=alert]")
            assert alert is not None
            metric = alert.get_attribute("data-metric")
            assert metric in ("cpu_percent", "load1") and f"{ALERT_AVERAGE:g} s average" in alert.inner_text()
            # (the streak so far: it grows while the hog runs, by the time the page is read on a loaded machine)
            in_a_row = re.search(r"(\d+)× in a row", alert.inner_text())
            assert in_a_row and int(in_a_row[1]) >= ALERT_AFTER, alert.inner_text()
            assert "over 120 s" in alert.inner_text()
            status, kind, body = get(web.url + "metrics")
            exposed = {
                (s.labels["host"], s.labels["metric"], s.labels["state"])
                for family in text_string_to_metric_families(body.decode())
                if family.name == "hop_alert"
                for s in family.samples
            }
            assert (busy, metric, "alert") in exposed
            page.click(f"#alerts li[data-host='{busy}'][data-state=alert]")  # to the host
            page.wait_for_function(f"document.querySelector('#level-title').textContent === 'Host {busy}'")
            page.wait_for_selector(f"#children tbody tr.alerted.alert[data-metric={metric}]")
            assert page.query_selector("#level-badges .badge.alert")
            page.screenshot(path=str(tmp_path / "monitor-alert.png"), full_page=True)
            assert (tmp_path / "monitor-alert.png").stat().st_size > 20_000
            _, state = get_json(web.url + "api/monitor/state")
            others = [a for a in state["alerts"] if a["host"] != busy and a["state"] == "alert"]
            assert not others, f"only the busy worker should alert: {others}"
            logged = [json.loads(line) for line in (monitored.feed.output / "_alerts.jsonl").read_text().splitlines()]
            assert any(entry["host"] == busy and entry["state"] == "alert" for entry in logged)
        finally:
            _cancel_hog(cluster)  # (it would spin for 45 s)
            hog.join(timeout=60)
        assert not hog.is_alive(), "the hog job should have ended"
        assert took < 90
        assert not errors, errors


@needs_chromium
def test_dashboard_shows_a_blocked_map_as_a_stuck_task(monitored: Monitored, tmp_path: Path) -> None:
    web = monitored.web
    wait_for(lambda: full_state(web), 90, "a window with every worker")
    with browser_page() as (page, errors):
        page.goto(web.url + "monitor", timeout=30_000)
        page.wait_for_selector("#stuck-tasks li.none", timeout=30_000)
        # (The page's own words, "for a while", until the first state says the rule's seconds: waited for, as the
        # list's "none" may be the page's own too; read at once it failed so once.)
        rule = f"for {STUCK_AFTER:g} s, its worker heartbeating"
        page.wait_for_function(f"document.querySelector('#stuck-rule').textContent.includes({rule!r})", timeout=30_000)
        with blocked_job(monitored.cluster, tmp_path) as job_id:
            stuck = f"#stuck-tasks li[data-job='{job_id}'][data-task=map-00001]"
            page.wait_for_selector(stuck, timeout=60_000)  # pushed to the open page
            text = page.inner_text(stuck)
            assert "map-00001 #0" in text and "BlockedMap" in text and "no progress for" in text, text
            assert page.inner_text("#stuck-count") == "1"
        assert not errors, errors  # (its clearing: test_metrics_show_a_blocked_map_stuck_and_the_jobs_progress...)


@contextmanager
def late_worker(address: str, name: str, spill_dir: Path) -> Iterator[None]:
    """A standalone worker of the cluster at ``address``, started now (``hop worker``), stopped on leaving."""
    spill_dir.mkdir()
    command = ["worker", "--coordinator", address, "--name", name, "--map-slots", "1", "--reduce-slots", "1"]
    options = ["--sample-scope", "process", "--sample-interval", "0.5", "--spill-dir", str(spill_dir)]
    worker = subprocess.Popen([sys.executable, "-m", "hop", *command, *options])
    try:
        yield
    finally:
        worker.terminate()  # (a standalone worker stops on SIGTERM, telling the coordinator)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=5)


@contextmanager
def _dashboard_of_a_one_worker_cluster(tmp_path: Path) -> Iterator[tuple[LocalCluster, MonitorFeed, Any, list[str]]]:
    """A cluster of one worker with one map and one reduce slot (fewer than the monitoring query's three tasks: its
    coordinator stream waits for a slot), its monitor, and the dashboard open in a browser page (and its errors)."""
    with (
        LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster,
        monitor(cluster, tmp_path / "monitor") as feed,
        WebServer(cluster.address, 0, monitor=[feed]) as web,
        browser_page() as (page, errors),
    ):
        page.goto(web.url + "monitor", timeout=30_000)
        yield cluster, feed, page, errors


@needs_chromium
def test_dashboard_names_a_worker_that_registered_after_the_monitor_started(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The query watches the workers there were when it started: one that registers later is in none of its windows,
    charts or alerts. The dashboard said nothing of it (only stderr and ``unwatched_workers`` in the JSON state did);
    it names it, pushed to the open page, and says to restart the monitor.

    The cluster's worker has one map and one reduce slot for the query's three tasks (its samples, the coordinator's
    stream, the reducer): the coordinator's stream waits for a slot, and the late worker, whose slots are free, runs
    it (which it said as it stopped: "its 1 running task"; a task that never had a slot may run anywhere). The
    wait was said nowhere: the monitor names the waiting task on stderr and the dashboard, and where it runs then."""
    with _dashboard_of_a_one_worker_cluster(tmp_path) as (cluster, feed, page, errors):
        page.wait_for_selector("#children tbody tr[data-level=rack]", timeout=60_000)  # a window is shown
        assert page.is_hidden("#unwatched-workers")
        waiting = "#waiting-tasks:not([hidden]) [data-task=map-00001]"
        page.wait_for_selector(waiting, timeout=30_000)
        assert page.inner_text(waiting) == "its task for the coordinator's stream (map-00001)"
        assert "every slot of the cluster being taken" in page.inner_text("#waiting-tasks")
        assert (
            "the monitoring query's task for the coordinator's stream (map-00001) has had no slot"
            in capfd.readouterr().err
        )
        with late_worker(cluster.address, "late-0", tmp_path / "spills"):
            page.wait_for_selector("#unwatched-workers:not([hidden]) [data-worker=late-0]", timeout=30_000)
            text = page.inner_text("#unwatched-workers")
            assert text.startswith("Unwatched worker: late-0 registered after the monitor started"), text
            assert "Restart hop monitor to watch it." in text, text
            assert page.is_visible("#unwatched-workers")
            page.wait_for_selector("#waiting-tasks", state="hidden", timeout=30_000)  # the late worker runs it
            page.screenshot(path=str(tmp_path / "monitor-unwatched.png"))
        assert not errors, errors
    assert feed.snapshot()["unwatched_workers"] == ["late-0"]
    said = capfd.readouterr().err
    assert "coordinator's stream (map-00001) runs, on worker late-0 (one the query does not watch" in said, said
    assert "hop worker late-0: stopped; the coordinator at" in said and "its 1 running task again" in said, said


@needs_chromium
def test_dashboard_lists_the_running_jobs_that_no_window_has(tmp_path: Path) -> None:
    """The Jobs panel listed the jobs of the query's windows only, which have them once the query's coordinator
    source runs: on a cluster of one worker with one map and one reduce slot, that source waits for a slot (the
    worker's source and the reducer hold both), and the panel said "No job seen yet" with the monitoring job and a
    batch job running. It lists the coordinator's jobs, records/s and failures left to the windows."""
    with _dashboard_of_a_one_worker_cluster(tmp_path) as (cluster, feed, page, errors):
        monitoring = f"#jobs tbody tr[data-job-id='{feed.job_id}'][data-state=running]"
        page.wait_for_selector(monitoring, timeout=30_000)
        assert "continuous" in page.inner_text(monitoring)
        with blocked_job(cluster, tmp_path) as job_id:  # (it waits for a slot: running, no task started)
            batch = f"#jobs tbody tr[data-job-id='{job_id}'][data-state=running]"
            page.wait_for_selector(batch, timeout=30_000)  # pushed to the open page
            cells = texts(page, f"{batch} td")
            assert cells[0].startswith("BlockedMap") and cells[2] == "0/2" and cells[7] == "–", cells
            assert "2 running" in page.inner_text("#jobs-info")
        page.wait_for_selector(f"#jobs tbody tr[data-job-id='{job_id}'][data-state=failed]", timeout=30_000)
        assert not errors, errors


def test_the_monitor_takes_no_fault_from_before_its_query_started(tmp_path: Path) -> None:
    """The coordinator keeps its last 200 faults, which the feed merges (those its stream carried while the query's
    source for it restarted): a monitor started later wrote every one of them, hours old, to its new
    ``_faults.jsonl``, showed them on the dashboard and counted them in ``hop_faults_total`` ("faults seen since the
    monitor started"). Only faults from the query's submission on are the monitor's (the coordinator's clock); the
    query's first coordinator sample, which carries the faults of the second before it, brings none older either."""
    (tmp_path / "boom.txt").write_text("boom\n")
    (tmp_path / "once.txt").write_text(f"a\nfail-once {tmp_path / 'failed'}\n")
    output = tmp_path / "monitor"
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1, stream_slots=3) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            with pytest.raises(JobFailed):
                run_job(client, "failing_map", [tmp_path / "boom.txt"], tmp_path / "out", options={"max_attempts": 1})
            with monitor(cluster, output) as feed:
                wait_for(lambda: feed.snapshot()["windows_seen"], 60, "a window")
                run_job(client, "blocked_map", [tmp_path / "once.txt"], tmp_path / "out2", "BlockedMap")
                after = next(job["job_id"] for job in client.jobs() if job["name"] == "BlockedMap")
                wait_for(lambda: feed.snapshot()["fault_counts"], 30, "the later job's fault")
                time.sleep(1)  # a few more polls
                kinds_and_jobs = [(fault["kind"], fault.get("job_id")) for fault in feed.snapshot()["faults"]]
                counts = feed.snapshot()["fault_counts"]
            kept = [fault["job_id"] for fault in client.cluster()["faults"]]
        finally:
            client.close()
    assert len(kept) == 2 and kept[1] == after, "a fault of each job, both kept by the coordinator"
    assert kinds_and_jobs == [("task_failed", after)]
    assert counts == {"task_failed": 1}
    logged = (output / "_faults.jsonl").read_text().splitlines()
    assert [json.loads(line)["job_id"] for line in logged] == [after]


def _cancel_hog(cluster: LocalCluster) -> None:
    client = Client(cluster.address, timeout=30)
    try:
        for job in client.jobs():
            if job["name"] == "BusyMap" and job["state"] == "running":
                client.stop(job["job_id"], "the test saw its alert")
    finally:
        client.close()


@needs_chromium
def test_dashboard_shows_a_killed_worker_as_a_fault_and_missing(monitored: Monitored, tmp_path: Path) -> None:
    """Last in the module: it kills a worker of the shared cluster."""
    web, cluster = monitored.web, monitored.cluster
    victim = "local-1"  # alone in rack-1
    wait_for(lambda: full_state(web), 90, "a window with every worker")
    with browser_page() as (page, errors):
        page.goto(web.url + "monitor", timeout=30_000)
        page.wait_for_selector("#children tbody tr[data-level=rack]", timeout=30_000)
        assert page.is_hidden("#missing-hosts")
        cluster.workers[WORKERS.index(victim)].send_signal(signal.SIGKILL)
        lost = f"#faults details.fault[data-kind=worker_lost]:has-text('{victim}')"
        page.wait_for_selector(lost, timeout=60_000)
        page.click(f"{lost} summary")  # expand: every field of the fault
        details = page.inner_text(f"{lost} dl")
        assert "silent_s" in details and victim in details
        # The victim is named missing, and only the victim once the windows settle: on a loaded machine a live
        # worker's pane can be late for a window, and it is shown missing from that one (even before the victim).
        page.wait_for_selector(f"#missing-hosts:not([hidden]):has-text('{victim}')", timeout=60_000)
        page.wait_for_function(
            """v => [...document.querySelectorAll('#scoreboard .source.missing')]
                    .map(e => e.innerText.trim()).join(',') === v""",
            arg=victim,
            timeout=60_000,
        )
        assert texts(page, "#scoreboard .source.missing") == [victim]
        page.wait_for_selector(f".host-chip[data-host='{victim}'] .badge.missing")
        page.wait_for_selector("#children tbody tr[data-name='rack-1'] .badge.missing")
        # Marked on the charts' time axis; the expanded entry stays open as new windows arrive.
        page.wait_for_function(
            """() => Chart.getChart(document.querySelector(
                '.chart-card[data-metric=cpu_percent] canvas')).$faultMarks > 0""",
            timeout=30_000,
        )
        version = page.evaluate("monitorView.snapshot.version")
        page.wait_for_function("v => monitorView.snapshot.version > v", arg=version, timeout=30_000)
        assert page.get_attribute(lost, "open") is not None
        page.screenshot(path=str(tmp_path / "monitor-fault.png"), full_page=True)
        assert not errors, errors
        faults = [json.loads(line) for line in (monitored.feed.output / "_faults.jsonl").read_text().splitlines()]
        assert any(f["kind"] == "worker_lost" and f["worker"] == victim for f in faults)
    # /metrics: the host missing from the windows, the worker lost to the coordinator, and the fault counted.
    metrics = scrape(web)
    assert metrics["hop_host_missing"] == {(("host", victim),): 1.0}
    alive = {dict(labels)["worker"]: value for labels, value in metrics["hop_worker_alive"].items()}
    assert alive == {"local-0": 1.0, "local-1": 0.0, "local-2": 1.0}
    heard = {dict(labels)["worker"]: value for labels, value in metrics["hop_worker_heartbeat_age_seconds"].items()}
    assert heard[victim] > heard["local-0"] and heard["local-0"] < 5, heard  # (the victim was lost as it ended)
    assert metrics["hop_faults"][(("kind", "worker_lost"),)] >= 1


@needs_chromium
def test_dashboard_backs_off_once_its_monitor_is_gone_and_follows_one_started_again(tmp_path: Path) -> None:
    """Once ``hop monitor`` had stopped, the browser's own reconnection asked for the event stream every 3 s
    forever, each a refused connection logged in the console. The page says it is not live and asks again after
    waits that double (1 s, 2 s, 4 s, ... up to 30 s); it follows a monitor started again at its address, at once
    when its window gets the focus, else at its next attempt. (Its server waiting for the monitoring job: the page
    asks nothing of the coordinator, at an address where there is none.) The waits are run on the page's clock
    (tests/browser.py: assert_backs_off), not waited out."""
    address = f"ipc://{tmp_path}/no-coordinator"
    refused: list[str] = []
    first = WebServer(address, monitor=[])
    first.start()
    port = first.port
    servers = [first]
    try:
        with browser_page() as (page, errors):

            def on_failure(request: Any) -> None:
                if "/api/monitor/events" in request.url and "CONNECTION_REFUSED" in (request.failure or ""):
                    refused.append(request.url)

            page.on("requestfailed", on_failure)
            live = "document.querySelector('#connection').textContent === 'live'"
            page.clock.install()
            page.goto(first.url + "monitor", timeout=30_000)
            page.wait_for_function(live, timeout=30_000)
            pause_clock(page)
            first.stop()
            assert_backs_off(page, refused, [1, 2, 4, 8, 16, 30])
            said = page.inner_text("#connection")
            assert said.startswith("not live: no answer from the monitor since") and RETRY_WAIT.search(said), said
            assert retry_wait(page) == 30, "at most 30 s"
            # Started again: the page is live at once when its window gets the focus (its next attempt is 30 s away,
            # and its clock is not run).
            servers.append(WebServer(address, port, monitor=[]))
            servers[-1].start()
            page.evaluate("window.dispatchEvent(new Event('focus'))")
            page.wait_for_function(live, timeout=10_000)
            assert page.inner_text("#waiting").startswith("waiting for the monitoring job")
            assert len(refused) == 6, refused

            # Gone and back again: the waits start over from 1 s, and the page follows it by itself at its next
            # attempt, not before.
            def start_again() -> None:
                servers.append(WebServer(address, port, monitor=[]))
                servers[-1].start()

            assert_follows_a_restart_at_its_next_attempt(page, refused, servers[-1].stop, start_again, live)
            assert len(refused) == 7, refused
            assert not errors, errors
    finally:
        for server in servers:
            server.stop()
