"""The web view's HTTP side against a real cluster: JSON API, errors as JSON, the page, server-sent events."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.gen.text import generate_text
from hop.local_cluster import LocalCluster
from hop.web.server import WebServer
from tests.conftest import output_dict, run_job


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


def test_bad_requests_get_json_errors(web: WebServer) -> None:
    status, body = get_json(web.url + "api/jobs/job-nope")
    assert status == 404 and "no job job-nope" in body["error"]
    status, body = get_json(web.url + "api/jobs/job-nope/snapshots?after=x")
    assert status == 400 and "after must be an integer" in body["error"]
    status, body = get_json(web.url + "api/nothing-here")
    assert status == 404 and body["error"]
    status, body = get_json(web.url + "api/events?job=job-nope")
    assert status == 404


def test_page_assets_are_served_locally(web: WebServer) -> None:
    status, kind, page = get(web.url)
    assert status == 200 and kind.startswith("text/html") and b"/static/vendor/chart.umd.min.js" in page
    assert b"http://" not in page and b"https://" not in page, "no CDN: every asset is served by hop"
    status, _, script = get(web.url + "static/vendor/chart.umd.min.js")
    assert status == 200 and len(script) > 100_000
    status, _, app = get(web.url + "static/app.js")
    assert status == 200 and b"EventSource" in app


def test_events_stream_pushes_job_state(client: Client, web: WebServer, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 100_000, seed=42, vocabulary=100)
    report = run_job(client, "wordcount", [source], tmp_path / "out")
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
