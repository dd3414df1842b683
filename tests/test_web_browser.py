"""The web view in a real browser (headless Chromium driven by Playwright) against a running job."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hop.client import Client
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, online_options
from hop.web.server import WebServer
from tests.conftest import job_path, output_dict

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason="needs Chromium (Debian package 'chromium'; .ci/run installs it)",
)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def test_page_follows_a_running_job_to_its_final_result(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=43, vocabulary=150)
    job_class = load_job_file(job_path("slow_sum_wordcount"))
    options = online_options(job_class, [str(source)], snapshot_every=0.1, order="random", chunk_size=64 << 10)
    spec = build_spec(job_class, [str(source)], str(tmp_path / "out"), num_reduces=2, options=options)
    with WebServer(cluster.address) as web, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            job_id = client.submit(spec)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{web.url}?job={job_id}", timeout=30_000)
            page.wait_for_selector("#jobs li", timeout=30_000)
            page.wait_for_selector("#results tbody tr", timeout=60_000)  # the first snapshot's table
            first_info = page.inner_text("#snapshot-info")
            assert "snapshot" in first_info and "early" in page.inner_text("#result-state")
            # Numbers change as snapshots arrive, without reloading the page.
            page.wait_for_function(
                "text => document.querySelector('#snapshot-info').textContent !== text", arg=first_info, timeout=60_000
            )
            page.wait_for_selector("#result-state.final", timeout=120_000)
            assert client.status(job_id)["state"] == "succeeded"
            shown = {
                row.get_attribute("data-key"): json.loads(row.get_attribute("data-value") or "null")
                for row in page.query_selector_all("#results tbody tr")
            }
            assert shown == output_dict(tmp_path / "out"), "the final table is the job's output"
            assert page.query_selector_all(".task.committed"), "task progress is drawn"
            page.click("#results tbody tr")  # follow one group's estimate over time
            page.wait_for_function("document.querySelector('#history-label').textContent.includes(':')")
            page.screenshot(path=str(tmp_path / "web-view.png"), full_page=True)
            assert (tmp_path / "web-view.png").stat().st_size > 10_000
        finally:
            browser.close()
