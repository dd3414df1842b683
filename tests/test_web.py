"""The web view's HTTP side against a real cluster: JSON API, errors as JSON, the page, server-sent events; a
continuous job's windows (API, pushed events, stop)."""

from __future__ import annotations

import asyncio
import json
import random
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from hop.client import ALL_KEPT_WINDOWS, Client
from hop.gen.text import generate_text
from hop.jobspec import JobSpec
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, online_options
from hop.stream.options import stream_options
from hop.web.server import WebServer
from tests.conftest import job_path, output_dict, run_job


@pytest.fixture()
def web(cluster: LocalCluster) -> Iterator[WebServer]:
    with WebServer(cluster.address) as server:
        yield server


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return response.status, response.headers.get("Content-Type", ""), response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Content-Type", ""), error.read()


def get_json(url: str) -> tuple[int, Any]:
    status, kind, body = get(url)
    assert kind.startswith("application/json"), (url, kind, body[:200])
    return status, json.loads(body)


def post_json(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=b"", method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        assert error.headers.get("Content-Type", "").startswith("application/json")
        return error.code, json.loads(error.read())


# Continuous jobs (shared with tests/test_web_browser.py) -----------------------------------------------------------
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


def write_events(path: Path, seconds: float, rate: int = 200, seed: int = 0) -> Path:
    """JSON-line events ``{"ts", "text"}``, ``rate`` per second of event time from now on, for ``seconds``."""
    rng = random.Random(seed)
    start = time.time()
    lines = [
        json.dumps({"ts": start + i / rate + 0.0004, "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))})
        for i in range(int(seconds * rate))
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def stream_spec(events: Path, output: Path, window: str = "1s", rate: int = 200) -> JobSpec:
    """``EventWordCount`` over a replay of ``events`` at ``rate`` records a second (so windows close in real
    time), two reducers."""
    options = stream_options([f"replay:{events}?rate={rate}"], window)
    job_class = load_job_file(job_path("event_wordcount"), "EventWordCount")
    return build_spec(job_class, [], str(output), num_reduces=2, options={"stream": options})


@contextmanager
def continuous_job(client: Client, spec: JobSpec) -> Iterator[str]:
    """Submit a continuous job; on the way out stop it if it still runs and wait until it ended."""
    job_id = client.submit(spec)
    try:
        yield job_id
    finally:
        if client.status(job_id)["state"] == "running":
            client.stop(job_id)
        client.wait(job_id, timeout=60)


def window_files(output: Path) -> dict[str, dict[Any, Any]]:
    """label -> the window's rows, from its ``OUT/windows/<label>/part-*`` files."""
    windows: dict[str, dict[Any, Any]] = {}
    for folder in sorted((output / "windows").iterdir()):
        windows[folder.name] = output_dict(folder)
    return windows


def read_events(stream: Any) -> Iterator[tuple[str, Any]]:
    """(event, data) from a server-sent event stream, as they come."""
    name = ""
    for raw in stream:
        line = raw.decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            yield name, json.loads(line[len("data: ") :])


def test_api_serves_jobs_tasks_snapshots_and_results(client: Client, web: WebServer, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=41, vocabulary=200)
    report = run_job(client, "wordcount", [source], tmp_path / "out", num_reduces=2)
    job_id = report["job_id"]
    status, jobs = get_json(web.url + "api/jobs")
    assert status == 200 and any(job["job_id"] == job_id and job["state"] == "succeeded" for job in jobs)
    status, job = get_json(web.url + f"api/jobs/{job_id}")
    assert status == 200 and {t["kind"] for t in job["tasks"]} == {"map", "reduce"}
    assert all(t["state"] == "committed" for t in job["tasks"])
    status, snapshots = get_json(web.url + f"api/jobs/{job_id}/snapshots")
    assert status == 200 and snapshots == []
    status, results = get_json(web.url + f"api/jobs/{job_id}/results")
    assert status == 200 and not results["truncated"]
    assert {row["key"]: row["value"] for row in results["rows"]} == output_dict(tmp_path / "out")


def test_the_steps_of_a_multi_step_job_are_told_apart(client: Client, web: WebServer, tmp_path: Path) -> None:
    """A two-step job's steps were listed as two jobs of the same name, nothing telling which step was which: each
    job says its step (from 0) and how many its job has."""
    (tmp_path / "in.txt").write_text("a b a\nc a\n")
    report = run_job(client, "two_steps", [tmp_path / "in.txt"], tmp_path / "out")
    ids = [step["job_id"] for step in report["steps"]] + [report["job_id"]]
    status, listing = get_json(web.url + "api/jobs")
    assert status == 200
    steps = {job["job_id"]: (job["name"], job["step"], job["num_steps"]) for job in listing if job["job_id"] in ids}
    assert [steps[job_id] for job_id in ids] == [("CountOfCounts", 0, 2), ("CountOfCounts", 1, 2)], steps


def test_results_are_the_largest_rows_not_the_first(tmp_path: Path) -> None:
    """The page got the final output's first 2,000 lines (each part in key order): a word count's most frequent
    words, the top of the table of estimates before, were missing from the final table. It gets the largest rows,
    ranked as a snapshot's rows are (numbers first, largest first, ties in file order)."""
    from hop.web.source import read_results

    (tmp_path / "part-00000").write_text('"a"\t1\n"b"\t5\n"c"\t"text"\n')
    (tmp_path / "part-00001").write_text('"d"\t9\n"e"\t5\n"f"\t2\n')
    results = read_results(str(tmp_path), limit=3)
    assert [(row["key"], row["value"]) for row in results["rows"]] == [("d", 9), ("b", 5), ("e", 5)]
    assert results["total"] == 6 and results["truncated"] and all(row["final"] for row in results["rows"])
    texts = read_results(str(tmp_path), limit=6)["rows"]
    assert [row["key"] for row in texts] == ["d", "b", "e", "f", "a", "c"], "numbers first, then the others"
    assert [row["key"] for row in read_results(str(tmp_path), limit=2)["rows"]] == ["d", "b"], "b came before e"


def test_results_of_a_job_stopped_early_are_its_estimates_with_their_intervals(
    client: Client, web: WebServer, tmp_path: Path
) -> None:
    """A job stopped early (--stop-when-accurate) has a snapshot's estimates as its output: its results were the
    part files' rows, each marked final and without its interval, so the page showed estimates as exact values."""
    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=9, vocabulary=50)
    job_class = load_job_file(job_path("slow_sum_wordcount"))
    options = online_options(
        job_class, [str(source)], snapshot_every=0.1, order="random", chunk_size=64 << 10, stop_when_accurate=0.5
    )
    report = run_job(client, "slow_sum_wordcount", [source], tmp_path / "out", num_reduces=2, options=options)
    assert report["approximate"]
    status, results = get_json(web.url + f"api/jobs/{report['job_id']}/results")
    assert status == 200 and results["approximate"] and results["total"] == 50
    output = output_dict(tmp_path / "out")
    assert {row["key"]: row["estimate"] for row in results["rows"]} == output, "the output is the estimates"
    assert all(row["low"] <= row["estimate"] <= row["high"] for row in results["rows"]), results["rows"][:3]
    assert not all(row["final"] for row in results["rows"]), "a group not seen whole is not final"


def test_final_results_are_read_once_per_job(
    client: Client, web: WebServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranking a final output reads all of it (seconds for a million rows), and every page that opened the job and
    every results request read it again: it is read once per job."""
    import hop.web.app

    reads: list[str] = []
    read = hop.web.app.read_results

    def counted(output: str, **options: Any) -> dict[str, Any]:
        reads.append(output)
        return read(output, **options)

    monkeypatch.setattr(hop.web.app, "read_results", counted)
    (tmp_path / "in.txt").write_text("a b a\n")
    job_id = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    answers = [get_json(web.url + f"api/jobs/{job_id}/results") for _ in range(2)]
    with urllib.request.urlopen(web.url + f"api/events?job={job_id}", timeout=20) as stream:
        pushed = next(data for name, data in read_events(stream) if name == "results")
    assert answers[0] == answers[1] == (200, pushed) and pushed["total"] == 2, answers
    assert reads == [str(tmp_path / "out")]


def test_the_view_of_a_cluster_lists_its_workers(cluster: LocalCluster, client: Client, web: WebServer) -> None:
    """``hop web --coordinator ADDR`` (this server, attached to a running cluster) showed no workers while ``hop
    status --coordinator ADDR`` listed them: the API and the event stream carry them, as ``hop status`` does."""
    expected = sorted(worker["name"] for worker in client.workers())
    assert len(expected) == cluster.num_workers
    status, workers = get_json(web.url + "api/workers")
    assert status == 200 and [worker["name"] for worker in workers] == expected
    assert all(worker["alive"] and worker["rack"] and worker["host_label"] for worker in workers), workers
    assert all(worker["map_slots"] >= worker["free_map"] >= 0 for worker in workers), workers
    with urllib.request.urlopen(web.url + "api/events", timeout=20) as stream:
        name, pushed = next(read_events(stream))  # the first event: the cluster's workers
    assert name == "workers" and [worker["name"] for worker in pushed] == expected


def test_bad_requests_get_json_errors(web: WebServer) -> None:
    status, body = get_json(web.url + "api/jobs/job-nope")
    assert status == 404 and "no job job-nope" in body["error"]
    status, body = get_json(web.url + "api/jobs/job-nope/snapshots?after=x")
    assert status == 400 and "after must be a snapshot's seq, an integer" in body["error"]
    for path in ("api/nothing-here", "api/"):  # (README: "the same data is JSON under /api/")
        status, body = get_json(web.url + path)
        assert status == 404 and body["error"].startswith(f"no page /{path}; the JSON API: GET /api/workers, "), body
        assert "GET /api/jobs/{job_id}/results" in body["error"] and "POST /api/jobs/{job_id}/stop" in body["error"]
    status, body = get_json(web.url + "api/events?job=job-nope")
    assert status == 404


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("api/jobs/job-nope/windows?limit=abc", "limit must be an integer number of windows, 0 or more (0: all kept), "
         "got 'abc'"),
        ("api/jobs/job-nope/windows?limit=-1", "limit must be an integer number of windows, 0 or more"),
        ("api/jobs/job-nope/windows?after=-1", "after must be a window's seq, an integer, 0 or more (0: the newest)"),
        ("api/jobs/job-nope/snapshots?after=-2", "after must be a snapshot's seq, an integer, -1 or more (-1: all)"),
        ("api/jobs/job-nope/snapshots?after=1_0", "after must be a snapshot's seq, an integer, -1 or more (-1: all), "
         "got '1_0'"),
        ("api/jobs/job-nope/windows?limit=%207", "limit must be an integer number of windows, 0 or more (0: all kept), "
         "got ' 7'"),
        ("api/jobs/job-nope/windows?limt=3", "unknown query parameter 'limt': /api/jobs/{job_id}/windows takes only "
         "after, limit"),
        ("api/jobs/job-nope/windows?after=1&after=2", "query parameter 'after' is given more than once"),
        ("api/jobs?limit=5", "unknown query parameter 'limit': /api/jobs takes no query parameters"),
        ("api/events?jobs=job-nope", "unknown query parameter 'jobs': /api/events takes only job, after"),
        ("api/events?after=abc", "after must be the seq of the last snapshot or window the page has (-1: none), "
         "got 'abc'"),
        ("api/events?job=job-nope&after=-2", "after must be the seq of the last snapshot or window the page has"),
    ],
)  # fmt: skip
def test_a_query_parameter_a_route_cannot_take_is_a_400_naming_it(web: WebServer, path: str, message: str) -> None:
    """A windows request's ``limit=abc``, ``limit=-1`` or ``after=-1`` was ignored (the route took no limit, and
    any after): each query parameter is now checked, and one no route takes is named, not ignored. The event
    stream's ``after`` too, before the stream starts: it was a 200 ``text/event-stream`` broken off at once."""
    status, body = get_json(web.url + path)
    assert status == 400 and message in body["error"], body


def test_page_assets_are_served_locally(web: WebServer) -> None:
    status, kind, page = get(web.url)
    assert status == 200 and kind.startswith("text/html") and b"/static/vendor/chart.umd.min.js" in page
    assert b"http://" not in page and b"https://" not in page, "no CDN: every asset is served by hop"
    status, _, script = get(web.url + "static/vendor/chart.umd.min.js")
    assert status == 200 and len(script) > 100_000
    status, _, app = get(web.url + "static/app.js")
    assert status == 200 and b"EventSource" in app


def test_a_missing_page_file_is_a_json_404_naming_it(web: WebServer) -> None:
    """A file under ``/static/`` that is not there was a 404 with an empty body (aiohttp's static route bypassed the
    JSON errors every other path gets); one outside the folder is not served."""
    for path in ("static/nope.js", "static/vendor/none.css", "static/../app.py", "static/%2e%2e/server.py"):
        status, body = get_json(web.url + path)
        assert status == 404 and body["error"].startswith("no file /static/"), (path, body)
    status, kind, style = get(web.url + "static/monitor.css")
    assert status == 200 and kind.startswith("text/css") and len(style) > 100


class _References(HTMLParser):
    """The URLs a page loads (its tags' ``src``, its ``<link>``s' ``href``: not its links to other pages), but for
    ``data:`` ones."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        loaded = ("src", "href") if tag == "link" else ("src",)
        self.urls += [value for name, value in attrs if name in loaded and value and not value.startswith("data:")]


def assets_of(url: str) -> dict[str, int]:
    """Every URL the page at ``url`` references, and those its scripts and stylesheets name in turn (a source map in
    a ``sourceMappingURL`` comment, a stylesheet's ``url()``), each with its status."""
    status, _, page = get(url)
    assert status == 200, url
    references = _References()
    references.feed(page.decode())
    statuses: dict[str, int] = {}
    queue = [urljoin(url, reference) for reference in references.urls]
    while queue:
        asset = queue.pop()
        if asset in statuses:
            continue
        status, _, body = get(asset)
        statuses[asset] = status
        if status == 200 and asset.endswith((".js", ".css")):
            text = body.decode("utf-8", errors="replace")
            named = re.findall(r"[#@] sourceMappingURL=(\S+?)(?:\s|\*/|$)", text, flags=re.MULTILINE)
            named += re.findall(r"url\(\s*['\"]?([^'\")]+)", text) if asset.endswith(".css") else []
            queue += [urljoin(asset, name) for name in named if not name.startswith("data:")]
    return statuses


def test_every_asset_the_pages_reference_is_served(cluster: LocalCluster, web: WebServer) -> None:
    """The vendored chart library ended with a ``sourceMappingURL`` comment naming a map that was not vendored: a
    browser with its developer tools open asked for it and got a 404. Every asset of the jobs view and of the
    monitor's dashboard, and every one their scripts and stylesheets name, is served."""
    with WebServer(cluster.address, monitor=[]) as monitor:  # (its page is served before the monitoring job starts)
        statuses = {**assets_of(web.url), **assets_of(monitor.url + "monitor")}
    assert any(asset.endswith("/static/vendor/chart.umd.min.js") for asset in statuses), statuses
    assert {asset: status for asset, status in statuses.items() if status != 200} == {}


def test_events_stream_pushes_job_state(client: Client, web: WebServer, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 100_000, seed=42, vocabulary=100)
    report = run_job(client, "wordcount", [source], tmp_path / "out")
    asked: list[float] = []  # when the server asked the coordinator for the job's detail
    assert web._source is not None
    ask = web._source.job

    async def counted(job_id: str) -> Any:
        asked.append(time.monotonic())
        return await ask(job_id)

    web._source.job = counted  # type: ignore[method-assign]
    with urllib.request.urlopen(web.url + f"api/events?job={report['job_id']}", timeout=20) as stream:
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        events: dict[str, Any] = {}
        while "results" not in events:
            line = stream.readline().decode()
            if line.startswith("event: "):
                name = line[len("event: ") :].strip()
                events[name] = json.loads(stream.readline().decode()[len("data: ") :])
    assert events["job"]["state"] == "succeeded"
    assert {row["key"]: row["value"] for row in events["results"]["rows"]} == output_dict(tmp_path / "out")
    # The page closed (the stream above): a finished job's stream has nothing more to send, and it used to run on,
    # asking the coordinator every half second, for as long as the server ran.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until 1.5 s pass with no question (the stream asks every 0.5 s)
        quiet_from = max(asked)
        time.sleep(1.5)
        if max(asked) == quiet_from:
            break
    assert time.monotonic() < deadline, "the closed page's event stream still runs"


def snapshot_events(url: str, last_event_id: str | None = None) -> list[tuple[str | None, dict[str, Any]]]:
    """(event id, snapshot) of every ``snapshot`` event a finished job's stream sends before ``results``."""
    request = urllib.request.Request(url, headers={"Last-Event-ID": last_event_id} if last_event_id else {})
    received: list[tuple[str | None, dict[str, Any]]] = []
    event_id: str | None = None
    name = ""
    with urllib.request.urlopen(request, timeout=20) as stream:
        while name != "results":
            line = stream.readline().decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = line[len("id: ") :]
            elif line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: ") and name == "snapshot":
                received.append((event_id, json.loads(line[len("data: ") :])))
    return received


def test_snapshot_events_carry_ids_and_a_reconnect_resumes_after_the_last(
    client: Client, web: WebServer, tmp_path: Path
) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 1_500_000, seed=7, vocabulary=100)
    job_class = load_job_file(job_path("slow_sum_wordcount"))  # slow enough for several snapshots
    options = online_options(job_class, [str(source)], snapshot_every=0.2, order="random", chunk_size=32 << 10)
    report = run_job(client, "slow_sum_wordcount", [source], tmp_path / "out", num_reduces=2, options=options)
    url = web.url + f"api/events?job={report['job_id']}"
    first = snapshot_events(url)
    seqs = [s["seq"] for _, s in first]
    assert len(seqs) >= 2 and seqs == list(range(len(seqs)))
    assert [event_id for event_id, _ in first] == [str(seq) for seq in seqs]
    # The browser sends the last id it got when it reconnects: only what came after, once.
    assert [s["seq"] for _, s in snapshot_events(url, last_event_id="0")] == seqs[1:]
    assert snapshot_events(url, last_event_id=str(seqs[-1])) == []
    # A page that opens the stream again itself (its own waits, not the browser's) says so in ?after=.
    assert [s["seq"] for _, s in snapshot_events(url + "&after=0")] == seqs[1:]
    assert [s["seq"] for _, s in snapshot_events(url + "&after=-1")] == seqs


def test_the_progress_pushed_is_never_behind_the_snapshots_pushed(
    client: Client, web: WebServer, tmp_path: Path
) -> None:
    """The page shows the job's "N% of the input processed" beside the latest snapshot's "M% of the input seen",
    and said 62% processed beside 63% seen: the maps' progress reports lag the chunks their reducers hold, and the
    event stream asked for the job's progress before its snapshots, so one completed in between came with the
    progress before it. Here the coordinator's answers about the job take a while to arrive (as under load), and at
    every snapshot pushed the job's progress pushed last is at least what the snapshot holds."""
    source = tmp_path / "in.txt"
    generate_text(source, 1_500_000, seed=7, vocabulary=100)
    job_class = load_job_file(job_path("slow_sum_wordcount"))
    options = online_options(job_class, [str(source)], snapshot_every=0.05, order="random", chunk_size=32 << 10)
    spec = build_spec(
        job_class, [str(source)], str(tmp_path / "out"), num_reduces=2, split_size=1 << 20, options=options
    )
    job_id = client.submit(spec)
    assert web._source is not None
    ask = web._source.job

    async def late(asked: str) -> Any:
        detail = await ask(asked)
        await asyncio.sleep(0.3)  # (the answer as it was when asked, arriving late)
        return detail

    web._source.job = late  # type: ignore[method-assign]
    pairs: list[tuple[str, float, float]] = []
    processed: float | None = None
    try:
        with urllib.request.urlopen(web.url + f"api/events?job={job_id}", timeout=60) as stream:
            for name, data in read_events(stream):
                if name == "job":
                    processed = data["input_fraction"]
                elif name == "snapshot" and data["input_fraction"] is not None:
                    assert processed is not None
                    pairs.append((data["label"], processed, data["input_fraction"]))
                elif name == "results":
                    break
    finally:
        client.wait(job_id, timeout=120)
    assert len(pairs) >= 3, pairs
    behind = [(label, p, seen) for label, p, seen in pairs if p < seen]
    assert not behind, behind


def test_continuous_job_windows_are_served_pushed_and_stoppable(client: Client, web: WebServer, tmp_path: Path) -> None:
    output = tmp_path / "out"
    events = write_events(tmp_path / "events.jsonl", seconds=20)  # much longer than the test: it stops the job
    with continuous_job(client, stream_spec(events, output)) as job_id:
        pushed: list[dict[str, Any]] = []
        job: dict[str, Any] = {}
        with urllib.request.urlopen(web.url + f"api/events?job={job_id}", timeout=20) as stream:
            for name, data in read_events(stream):
                if name == "job":
                    job = data
                elif name == "window":
                    pushed.append(data)
                    if len(pushed) == 3:
                        status, listing = get_json(web.url + "api/jobs")
                        mine = next(j for j in listing if j["job_id"] == job_id)
                        assert mine["continuous"] and mine["state"] == "running" and mine["windows"] >= 3
                        status, reply = post_json(web.url + f"api/jobs/{job_id}/stop")
                        assert status == 200 and reply["stopping"], reply
                if job.get("state", "running") != "running" and len(pushed) >= job["windows"]:
                    break
        assert job["state"] == "succeeded" and job["stopping"]
    status, windows = get_json(web.url + f"api/jobs/{job_id}/windows")
    assert status == 200 and [w["seq"] for w in windows] == list(range(1, job["windows"] + 1))
    assert [(w["seq"], w["label"], w["rows"]) for w in windows] == [(w["seq"], w["label"], w["rows"]) for w in pushed]
    files = window_files(output)
    assert [w["label"] for w in windows] == sorted(files), "one window per OUT/windows/<label>"
    for window in windows:
        assert not window["truncated"] and window["output_records"] == len(files[window["label"]])
        assert {row["key"]: row["value"] for row in window["rows"]} == files[window["label"]], window["label"]
        assert window["end"] - window["start"] == 1 and window["window_spec"]["range"] == 1
        assert len(window["scoreboard"]["grid"]) == 1 and 0 <= window["fidelity"] <= 1
    assert all(w["reason"] == "complete" for w in windows[:-1])
    # The last window closed at the stop: "stopped" when the stop cut its pane short, "complete" when the source
    # had already sealed past it before the stop came.
    assert windows[-1]["reason"] in ("stopped", "complete")
    assert all(w["fidelity"] == 1.0 and set(w["scoreboard"]["grid"][0]) <= {"D", "E"} for w in windows[:-1])
    if windows[-1]["reason"] == "stopped":  # its one pane cut short by the stop: not present
        assert windows[-1]["scoreboard"]["grid"] == ["C"] and windows[-1]["fidelity"] == 0.0
    meta = json.loads((output / "windows" / windows[-1]["label"] / "_window.json").read_text())
    assert {k: windows[-1][k] for k in meta} == meta, "a window over the API is its _window.json plus rows"
    assert sum(w["records"] for w in windows) == client.job(job_id)["input_records"]
    status, later = get_json(web.url + f"api/jobs/{job_id}/windows?after=2")
    assert status == 200 and [w["seq"] for w in later] == [w["seq"] for w in windows[2:]]
    status, later = get_json(web.url + f"api/jobs/{job_id}/windows?after=2&limit=1")
    assert status == 200 and [w["seq"] for w in later] == [3]
    status, newest = get_json(web.url + f"api/jobs/{job_id}/windows?limit=2")
    assert status == 200 and [w["seq"] for w in newest] == [w["seq"] for w in windows[-2:]]
    status, every = get_json(web.url + f"api/jobs/{job_id}/windows?after=2&limit=0")  # 0: every window kept
    assert status == 200 and [w["seq"] for w in every] == [w["seq"] for w in windows[2:]]
    # (hop windows --limit 0 and the route above: the client takes 0 as every window, not as none after 2)
    listing = client.window_listing(job_id, after=2, limit=ALL_KEPT_WINDOWS)
    assert [w["seq"] for w in listing["windows"]] == [w["seq"] for w in windows[2:]], listing
    status, body = get_json(web.url + f"api/jobs/{job_id}/windows?after=two")
    assert status == 400 and "after must be a window's seq, an integer" in body["error"]
    status, body = post_json(web.url + f"api/jobs/{job_id}/stop")
    assert status == 409 and "already ended" in body["error"]
    status, body = get_json(web.url + f"api/jobs/{job_id}/results")
    assert status == 409 and "windows" in body["error"]


def far_future_window(client: Client, tmp_path: Path) -> tuple[str, Path]:
    """(job id, output) of a finished continuous job whose one window, of events stamped 2**62 s, has window and
    pane numbers past 2**53 (3 s windows: numbers no double holds)."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps({"ts": 2.0**62, "text": text}) + "\n" for text in ("alpha", "alpha beta")))
    output = tmp_path / "out"
    with continuous_job(client, stream_spec(events, output, window="3s", rate=1000)) as job_id:
        client.wait(job_id, timeout=60)
    return job_id, output


def test_window_numbers_past_2_53_reach_a_browser_whole(client: Client, web: WebServer, tmp_path: Path) -> None:
    """A stamp far in the future (2**62 s) makes window and pane numbers past 2**53, which a browser's JSON.parse
    rounds: the API sends them as decimal strings (every smaller int stays a number)."""
    job_id, output = far_future_window(client, tmp_path)
    [label] = window_files(output)
    meta = json.loads((output / "windows" / label / "_window.json").read_text())
    assert meta["window"] > 2**53 and float(meta["window"]) != meta["window"], "a number a double cannot hold"
    with urllib.request.urlopen(web.url + f"api/jobs/{job_id}/windows", timeout=20) as reply:
        text = reply.read().decode()
    [window] = json.loads(text, parse_int=float)  # as JSON.parse reads it: every number a double
    assert window["window"] == str(meta["window"]) and window["label"] == label
    assert window["scoreboard"]["first_pane"] == str(meta["scoreboard"]["first_pane"])
    assert window["records"] == 2 and {row["key"]: row["value"] for row in window["rows"]} == {"alpha": 2, "beta": 1}


def test_window_requests_that_cannot_be_served(client: Client, web: WebServer, tmp_path: Path) -> None:
    status, body = get_json(web.url + "api/jobs/job-nope/windows")
    assert status == 404 and "no job job-nope" in body["error"]
    status, body = get_json(web.url + "api/jobs/job-nope/windows?after=1.5")
    assert status == 400 and "after must be a window's seq, an integer" in body["error"]
    status, body = post_json(web.url + "api/jobs/job-nope/stop")
    assert status == 404 and "no job job-nope" in body["error"]
    source = tmp_path / "in.txt"
    generate_text(source, 20_000, seed=44, vocabulary=50)
    batch = run_job(client, "wordcount", [source], tmp_path / "out")["job_id"]
    status, body = get_json(web.url + f"api/jobs/{batch}/windows")
    assert status == 404 and "not a continuous job" in body["error"]
    status, body = post_json(web.url + f"api/jobs/{batch}/stop")
    assert status == 409 and f"job {batch} already ended (succeeded)" in body["error"]
    status, body = post_json(web.url + f"api/jobs/{batch}/stop", headers={"Origin": "http://example.com"})
    assert status == 403 and body["error"]
    status, listing = get_json(web.url + "api/jobs")
    mine = next(j for j in listing if j["job_id"] == batch)
    assert mine["continuous"] is False and mine["windows"] == 0


def strict_json(body: bytes) -> Any:
    """JSON as a browser's ``JSON.parse`` reads it: ``NaN`` and ``Infinity`` are errors (Python's reader takes them)."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(body, parse_constant=refuse)


def test_nan_and_infinite_values_reach_the_page_as_their_text(client: Client, web: WebServer, tmp_path: Path) -> None:
    """A job's NaN or infinite value made the API answer ``NaN``/``Infinity``, which the page's ``JSON.parse``
    refused: the results (and every later event) never showed. Then it answered ``null``, which the page showed as
    no value at all where the output has ``NaN`` or ``Infinity``. A row sends them as the output's text, a string,
    and names where in ``non_finite``, so that the page tells them from strings."""
    (tmp_path / "in.txt").write_text("nan\ninf\n-inf\n1.5\n")
    job_id = run_job(client, "float_values", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    status, _, body = get(web.url + f"api/jobs/{job_id}/results")
    assert status == 200
    rows = {row["key"]: row for row in strict_json(body)["rows"]}
    assert {key: row["value"] for key, row in rows.items()} == {
        "nan": "NaN",
        "inf": "Infinity",
        "-inf": "-Infinity",
        "1.5": 1.5,
    }
    assert {key: row.get("non_finite") for key, row in rows.items()} == {
        "nan": [["value"]],
        "inf": [["value"]],
        "-inf": [["value"]],
        "1.5": None,
    }
    with urllib.request.urlopen(web.url + f"api/events?job={job_id}", timeout=20) as stream:
        for raw in stream:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                data = strict_json(line[len("data: ") :].encode())
                if isinstance(data, dict) and "rows" in data and "total" in data:  # the results event
                    row = {row["key"]: row for row in data["rows"]}["nan"]
                    assert row["value"] == "NaN" and row["non_finite"] == [["value"]], row
                    break


def test_a_rows_field_inside_a_value_is_sent_as_the_job_wrote_it(
    client: Client, web: WebServer, tmp_path: Path
) -> None:
    """A row holding an int past 2**53 lists where in ``big_ints``, and a value whose own dict has a ``rows`` list
    of dicts (the job's data, not a list of rows) got a ``big_ints`` of its own inside it: the page showed the
    value with a field the job never wrote. Only the row names the int, by its path from the row."""
    big = 2**60 + 1
    value = {"rows": [{"n": big, "s": "x"}], "m": [big]}
    (tmp_path / "in.txt").write_text(f'"k"\t{json.dumps(value)}\n"plain"\t{json.dumps({"rows": [{"n": 1}]})}\n')
    job_id = run_job(client, "json_values", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    status, rows = get_json(web.url + f"api/jobs/{job_id}/results")
    assert status == 200
    by_key = {row["key"]: row for row in rows["rows"]}
    assert by_key["k"]["value"] == {"rows": [{"n": str(big), "s": "x"}], "m": [str(big)]}, by_key["k"]
    assert by_key["k"]["big_ints"] == [["value", "rows", 0, "n"], ["value", "m", 0]], by_key["k"]
    assert by_key["plain"]["value"] == {"rows": [{"n": 1}]} and "big_ints" not in by_key["plain"], by_key["plain"]


def test_results_of_an_earlier_step_kept_by_keep_intermediate_are_read_where_it_was_kept(
    client: Client, web: WebServer, tmp_path: Path
) -> None:
    """An earlier step's output, run with --keep-intermediate, is moved from the run's scratch directory to
    OUT/_steps/step-N when the run ends: its results answered 410, "no longer exists (... unless run with
    --keep-intermediate)", to a run that was. They are read where the run kept them, pipelined or staged (a job's
    earlier steps are in a scratch directory inside the run's there)."""
    from hop.runner import earlier_reports, run_pipeline, run_staged_jobs

    source = tmp_path / "in.txt"
    source.write_text("a b a\nc a b\n")
    for name, run in (("piped", run_pipeline), ("staged", run_staged_jobs)):
        jobs = [
            build_spec(load_job_file(job_path(job)), [str(source)], str(tmp_path / name))
            for job in ("two_steps", "topk")
        ]
        report = run(client, jobs, keep_intermediate=True, progress=False, timeout=120)
        for number, step in enumerate(earlier_reports(report), 1):
            status, body = get_json(web.url + f"api/jobs/{step['job_id']}/results")
            assert status == 200, (name, number, body)
            kept = output_dict(tmp_path / name / "_steps" / f"step-{number}")
            assert {row["key"]: row["value"] for row in body["rows"]} == kept, (name, number)


def test_results_of_a_failed_job_or_a_deleted_output_and_stopping_a_batch_job(
    client: Client, web: WebServer, tmp_path: Path
) -> None:
    from hop.runner import JobFailed, run_pipeline

    (tmp_path / "bad.txt").write_text("fine\nboom now\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "failing_map", [tmp_path / "bad.txt"], tmp_path / "failed")
    failed_id = failure.value.status["job_id"]
    status, body = get_json(web.url + f"api/jobs/{failed_id}/results")
    assert status == 409 and f"job {failed_id} failed: it has no results (map at" in body["error"], body
    source = tmp_path / "in.txt"
    generate_text(source, 50_000, seed=45, vocabulary=100)
    pair = ("wordcount", "topk")
    jobs = [build_spec(load_job_file(job_path(name)), [str(source)], str(tmp_path / "top")) for name in pair]
    report = run_pipeline(client, jobs, progress=False, timeout=120)
    first_step = report["steps"][0]["job_id"]
    status, body = get_json(web.url + f"api/jobs/{first_step}/results")
    assert status == 410 and "no longer exists" in body["error"] and "--keep-intermediate" in body["error"]
    # The page's event stream sent it as a final output of no rows ("final output: 0 rows"): it says it is gone.
    with urllib.request.urlopen(web.url + f"api/events?job={first_step}", timeout=20) as stream:
        pushed = next(data for name, data in read_events(stream) if name == "results")
    assert pushed == {"job_id": first_step, "gone": body["error"]}, pushed
    slow = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "slow"))
    running = client.submit(slow)
    status, body = post_json(web.url + f"api/jobs/{running}/stop")
    assert status == 200 and body["cancelled"] is True, body
    ended = client.wait(running, timeout=30)
    assert ended["state"] == "failed" and "cancelled from the web view" in ended["error"], ended["error"]
    status, body = post_json(web.url + f"api/jobs/{running}/stop")
    assert status == 409 and f"job {running} already ended (failed)" in body["error"]


def _failed_run_waiting_with_its_view(tmp_path: Path) -> subprocess.Popen[str]:
    """``hop run --web-wait`` of a job whose map fails, in ``tmp_path`` (its stderr piped, as text)."""
    (tmp_path / "in.txt").write_text("fine\nboom now\n")
    command = [sys.executable, "-m", "hop", "run", job_path("failing_map"), "in.txt", "-o", "out", "--web-wait"]
    return subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)


def _stderr_until(run: subprocess.Popen[str], text: str, deadline: float) -> list[str]:
    """The lines ``run`` writes to stderr, up to the first holding ``text`` (before ``deadline``, while it runs)."""
    assert run.stderr is not None
    lines: list[str] = []
    while not any(text in line for line in lines):
        assert time.monotonic() < deadline and run.poll() is None, lines
        lines.append(run.stderr.readline())
    return lines


def test_web_wait_keeps_the_view_of_a_failed_job_and_ctrl_c_keeps_its_exit_status(tmp_path: Path) -> None:
    """``--web-wait`` waited only after a job that succeeded: a failed one's view was gone at once. Ctrl-C ends the
    wait; the run's exit status stays the job's (1). ``--web-wait`` alone implies ``--web``."""
    import re
    import signal

    run = _failed_run_waiting_with_its_view(tmp_path)
    try:
        deadline = time.monotonic() + 60
        lines = _stderr_until(run, "the view stays at", deadline)
        url = re.search(r"the view stays at (\S+) until Ctrl-C", lines[-1])
        assert url and "job failed (" in lines[-1], lines
        status, listing = get_json(url.group(1) + "api/jobs")
        assert status == 200 and [job["state"] for job in listing] == ["failed"]
        run.send_signal(signal.SIGINT)
        _, rest = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 1, rest
    assert "cannot handle boom" in rest and "hop: error: job failed:" in rest, rest


def test_a_second_signal_while_the_embedded_cluster_stops_is_no_traceback(tmp_path: Path) -> None:
    """The first SIGTERM ends ``--web-wait``; more that landed in the job's cancellation or the embedded cluster's
    stop gave a KeyboardInterrupt traceback, exit code 130 (not the job's 1, nor 143) and the cluster's temporary
    directory left in /tmp. Once ``hop run`` is ending, signals are noted, not raised (the ending is bounded)."""
    import re
    import signal

    run = _failed_run_waiting_with_its_view(tmp_path)
    try:
        deadline = time.monotonic() + 60
        lines = _stderr_until(run, "the view stays at", deadline)
        cluster = re.search(r"coordinator at ipc://(\S+)/coordinator", "".join(lines))
        assert cluster, lines
        run.send_signal(signal.SIGTERM)
        while run.poll() is None and time.monotonic() < deadline:  # more, until it ends: some land in its stop
            time.sleep(0.02)
            run.send_signal(signal.SIGTERM)
        _, rest = run.communicate(timeout=30)
    finally:
        run.kill()
    assert "KeyboardInterrupt" not in rest, rest
    assert run.returncode in (1, 143, -signal.SIGTERM), rest  # (-15: it ends by the signal, as a shell sees 143)
    assert not Path(cluster.group(1)).exists()


@pytest.mark.parametrize(
    ("command", "port", "message"),
    [
        (["run", str(job_path("wordcount")), "in.txt", "-o", "out", "--web"], "99999", "a port is at most 65535"),
        (["web", "--coordinator", "tcp://127.0.0.1:5"], "99999", "a port is at most 65535, got 99999"),
        (["web", "--coordinator", "tcp://127.0.0.1:5"], "-1", "must be at least 0, got -1"),
        (["monitor", "--coordinator", "tcp://127.0.0.1:5"], "70000", "a port is at most 65535"),
        (["run", str(job_path("wordcount")), "in.txt", "-o", "out"], "8080", "add --web (or --web-wait)"),
    ],
    ids=["run", "web", "web-negative", "monitor", "run-without-web"],
)
def test_a_port_out_of_range_or_for_no_web_view_is_refused(
    tmp_path: Path, command: list[str], port: str, message: str
) -> None:
    """A port past 65535 (or below 0) raised bind()'s OverflowError as a traceback once the cluster was up; --port
    without --web was ignored. Both are refused before anything starts."""
    (tmp_path / "in.txt").write_text("a b\n")
    result = subprocess.run(
        [sys.executable, "-m", "hop", *command, "--port", port],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_hop_web_without_a_coordinator_fails_saying_so(tmp_path: Path) -> None:
    """``hop web --coordinator ADDR`` where no coordinator runs served a page with nothing on it, and said nothing,
    for as long as it ran (README: such a command says so and fails with exit code 3). It now asks the coordinator
    first, as ``hop status`` does: a missing ``ipc://`` socket file fails at once, naming it."""
    socket_file = tmp_path / "coordinator"
    result = subprocess.run(
        [sys.executable, "-m", "hop", "web", "--coordinator", f"ipc://{socket_file}"],
        capture_output=True,
        text=True,
        timeout=15,
    )
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert f"no coordinator at ipc://{socket_file}" in result.stderr and str(socket_file) in result.stderr
    assert "http://" not in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_hop_web_serves_the_view_of_a_running_cluster(cluster: LocalCluster) -> None:
    """The check that the coordinator answers lets ``hop web`` serve a live one's workers."""
    import re

    command = [sys.executable, "-m", "hop", "web", "--coordinator", cluster.address]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # (its first line, printed once it serves; it ends by the kill below)
        url = re.search(r"hop web: (http://\S+) \(Ctrl-C to stop\)", line)
        assert url, (line, server.poll())
        status, workers = get_json(url.group(1) + "api/workers")
        assert status == 200 and len(workers) == cluster.num_workers, workers
    finally:
        server.kill()
        server.communicate(timeout=30)


def start_coordinator(bind: str) -> tuple[subprocess.Popen[str], str]:
    """A standalone ``hop coordinator --bind BIND`` and the address it printed once it listens."""
    import select

    coordinator = subprocess.Popen(
        [sys.executable, "-m", "hop", "coordinator", "--bind", bind], stdout=subprocess.PIPE, text=True
    )
    assert coordinator.stdout is not None
    assert select.select([coordinator.stdout], [], [], 30)[0], "the coordinator printed no address within 30 s"
    return coordinator, coordinator.stdout.readline().strip()


@pytest.mark.parametrize("transport", ["ipc", "tcp"])
def test_hop_web_says_at_once_that_its_coordinator_is_gone_and_follows_it_back(tmp_path: Path, transport: str) -> None:
    """Once the coordinator of a running ``hop web`` stopped, every API call waited 5 s and failed "did not answer",
    and an open page stalled ("reconnecting…" for good, without a word). The API answers at once (503) that the
    coordinator at its address is gone, and an open event stream ends with that error; a coordinator started
    again there is followed again. ``hop web`` says on stderr that it is gone, and back."""
    import re
    import signal

    bind = f"ipc://{tmp_path}/coordinator" if transport == "ipc" else "tcp://127.0.0.1:*"
    coordinator, address = start_coordinator(bind)
    command = [sys.executable, "-m", "hop", "web", "--coordinator", address]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = re.search(r"hop web: (http://\S+) \(Ctrl-C to stop\)", server.stdout.readline())
        assert url, server.poll()
        assert get_json(url.group(1) + "api/workers") == (200, [])
        with urllib.request.urlopen(url.group(1) + "api/events", timeout=20) as stream:
            events = read_events(stream)
            assert next(events) == ("workers", [])
            coordinator.send_signal(signal.SIGTERM)  # (it stops as Ctrl-C stops it)
            coordinator.communicate(timeout=30)
            started = time.monotonic()
            # (the stream's "jobs" may come first: it asks for the workers, then the jobs)
            event = next((event for event in events if event[0] not in ("ping", "jobs")), None)
        gone = f"the coordinator at {address} is gone: its connection broke, and "
        assert event is not None and event[0] == "error" and event[1]["error"].startswith(gone), event
        # At once: the stream looks every EVENT_SECONDS; the 5 s timeout of a request is not waited out.
        assert time.monotonic() - started < 3, "the event stream saw it at once"
        started = time.monotonic()
        status, reply = get_json(url.group(1) + "api/jobs")
        assert time.monotonic() - started < 2, "not after the 5 s timeout"
        assert status == 503 and reply["error"].startswith(gone), reply
        coordinator, _ = start_coordinator(address)
        deadline = time.monotonic() + 30
        while (answer := get_json(url.group(1) + "api/workers"))[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert answer == (200, []), answer
    finally:
        server.kill()
        _, said = server.communicate(timeout=30)
        coordinator.kill()
        coordinator.communicate(timeout=30)
    # hop web says so on stderr too, once, and that it is back.
    assert said.count(f"hop web: {gone}") == 1, said
    assert said.endswith(f"hop web: the coordinator at {address} answers again\n"), said


STOP_BOUND_SECONDS = 0.5
"""A stop with a page's event stream open: well under aiohttp's graceful wait for its handler (1 s, then 1 s more
once cancelled), which a stop took before."""
IN_FLIGHT_SECONDS = 0.3
"""How long the request in flight as the stop begins takes to answer: the stop waits for it."""


@pytest.mark.parametrize("path", ["api/events", "api/monitor/events"])
def test_a_stop_ends_an_open_event_stream_at_once(cluster: LocalCluster, path: str) -> None:
    """A page open on an event stream while the server stops (``hop web`` interrupted, ``hop run --web`` done): the
    stop ended the stream only after aiohttp's graceful waits, 2 s; now at once, the stream ended cleanly (the page's
    reconnection sees it end, as before), while a request in flight gets its whole answer."""
    server = WebServer(cluster.address, monitor=[])
    server.start()
    stopped = False
    try:
        assert server._source is not None
        ask = server._source.jobs

        async def slow(*args: Any) -> Any:  # (the jobs stream asks it too, and waits as long)
            await asyncio.sleep(IN_FLIGHT_SECONDS)
            return await ask(*args)

        opened = threading.Event()
        ended: list[object] = []  # what the stream's reader saw last: b"" (the stream's end) or an exception

        def read_stream() -> None:
            try:
                with urllib.request.urlopen(server.url + path, timeout=20) as stream:
                    while line := stream.readline():
                        if line.startswith(b"event: "):
                            opened.set()
                    ended.append(b"")
            except Exception as error:  # (said in the assertion below)
                ended.append(error)

        reader = threading.Thread(target=read_stream, daemon=True)
        reader.start()
        assert opened.wait(timeout=20), "no event on the stream"
        # A request in flight as the stop begins: its handler still runs when the server stops.
        answer: list[tuple[int, Any]] = []
        requester = threading.Thread(target=lambda: answer.append(get_json(server.url + "api/jobs")), daemon=True)
        server._source.jobs = slow  # type: ignore[method-assign]
        requester.start()
        time.sleep(0.1)
        begun = time.monotonic()
        server.stop()
        stopped = True
        took = time.monotonic() - begun
        reader.join(timeout=10)
        requester.join(timeout=10)
        assert ended == [b""], ended  # the stream ended, cleanly (not broken off)
        assert answer and answer[0][0] == 200 and isinstance(answer[0][1], list), answer
        # (the request's answer, still under way as the stop began, is waited for: under IN_FLIGHT_SECONDS more)
        assert took < STOP_BOUND_SECONDS + IN_FLIGHT_SECONDS, f"the stop took {took:.2f} s with an event stream open"
    finally:
        if not stopped:
            server.stop()
