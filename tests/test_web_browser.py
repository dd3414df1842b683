"""The web view in a real browser (headless Chromium driven by Playwright) against a running job: an online job
followed to its final result, and a continuous job's windows as they close."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, online_options
from hop.stream.options import stream_options
from hop.web.server import WebServer
from tests.browser import (
    assert_backs_off,
    assert_follows_a_restart_at_its_next_attempt,
    browser_page,
    needs_chromium,
    pause_clock,
)
from tests.conftest import job_path, output_dict, run_job
from tests.test_web import (
    continuous_job,
    far_future_window,
    start_coordinator,
    stream_spec,
    window_files,
    write_events,
)

pytestmark = needs_chromium


def test_page_follows_a_running_job_to_its_final_result(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=43, vocabulary=150)
    job_class = load_job_file(job_path("slow_sum_wordcount"))
    options = online_options(
        job_class, [str(source)], snapshot_every=0.1, order="random", chunk_size=64 << 10, confidence=0.9
    )
    spec = build_spec(job_class, [str(source)], str(tmp_path / "out"), num_reduces=2, options=options)
    with WebServer(cluster.address) as web, browser_page() as (page, _):
        job_id = client.submit(spec)
        page.goto(f"{web.url}?job={job_id}", timeout=30_000)
        page.wait_for_selector("#jobs li", timeout=30_000)
        # The cluster's workers, as hop status lists them (the page attached to a cluster showed none).
        page.wait_for_selector("#workers li", timeout=30_000)
        names = [item.get_attribute("data-worker") for item in page.query_selector_all("#workers li")]
        assert names == sorted(worker["name"] for worker in client.workers())
        assert page.inner_text("#worker-count") == str(cluster.num_workers)
        page.wait_for_selector("#results tbody tr", timeout=60_000)  # the first snapshot's table
        first_info = page.inner_text("#snapshot-info")
        assert "snapshot" in first_info and "early" in page.inner_text("#result-state")
        assert page.inner_text("#interval-heading") == "90% interval", "the job's --confidence, not 95%"
        assert page.inner_text("#results th[data-sort=value]") == "value so far"
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
        assert page.inner_text("#results th[data-sort=value]") == "final value"
        assert page.query_selector_all(".task.committed"), "task progress is drawn"
        page.click("#results tbody tr")  # follow one group's estimate over time
        page.wait_for_function("document.querySelector('#history-label').textContent.includes(':')")
        page.screenshot(path=str(tmp_path / "web-view.png"), full_page=True)
        assert (tmp_path / "web-view.png").stat().st_size > 10_000


def test_page_says_which_partitions_could_not_take_a_snapshot(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """A partition that could not take its part of a snapshot (here a ``Sum(nonnegative=True)`` whose key ``neg``
    sums below 0) leaves its groups out: the page showed the other partitions' groups alone and said nothing of
    it, as if the snapshot were whole. It says how many failed and why."""
    rng = random.Random(5)
    lines = [f"k{rng.randrange(20)} {rng.randrange(100)}" for _ in range(300_000)]
    lines[1::5000] = ["neg -1"] * len(lines[1::5000])
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    job_class = load_job_file(job_path("nonnegative_sum"))
    source = [str(tmp_path / "in.txt")]
    options = online_options(job_class, source, snapshot_every=0.1, order="random", chunk_size=64 << 10)
    spec = build_spec(job_class, source, str(tmp_path / "out"), num_reduces=2, options=options)
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        job_id = client.submit(spec)
        page.goto(f"{web.url}?job={job_id}", timeout=30_000)
        page.wait_for_function(
            "document.querySelector('#snapshot-info').textContent.includes('could not')", timeout=60_000
        )
        said = page.inner_text("#snapshot-info")
        assert errors == []
    client.wait(job_id, timeout=120)
    assert "1 of 2 partitions could not take their part, whose groups are missing (partition " in said, said
    assert "Sum(nonnegative=True), but key 'neg' added up to -" in said, said


@pytest.mark.parametrize("answer", ["at once", "after the end"])
def test_page_stops_a_running_batch_job_and_keeps_its_last_estimates(
    cluster: LocalCluster, client: Client, tmp_path: Path, answer: str
) -> None:
    """The Stop button was shown for continuous jobs only: a user watching a batch job's estimates converge had to
    leave the page (hop stop) to stop it. It is shown for a running batch job too, says what stopping it means
    (cancelled: no output; the snapshots stay), and once the job failed the page says why and keeps its estimates,
    marked as the failed job's last ones.

    "after the end": the answer to the page's stop request reaches it after the job's end did (a loaded machine):
    the page put "cancelled: the job is failing" over "the job failed: ...", and kept it."""
    source = tmp_path / "in.txt"
    # (About 30 s of maps: it runs long past the click, which a loaded machine can bring 10 s after the start; it is
    # cancelled then. With 6 MB, once in a full run on a loaded machine the job had ended before the stop came.)
    generate_text(source, 18_000_000, seed=47, vocabulary=100)
    job_class = load_job_file(job_path("slow_sum_wordcount"))
    options = online_options(job_class, [str(source)], snapshot_every=0.03, order="random", chunk_size=64 << 10)
    output = tmp_path / "out"
    spec = build_spec(job_class, [str(source)], str(output), num_reduces=2, options=options)
    ended = "document.querySelector('#stop-state').textContent.includes('failed')"
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        held: list[Any] = []
        if answer == "after the end":
            # The stop is made (route.fetch) and its answer held back until the page has shown the end.
            page.route("**/api/jobs/*/stop", lambda route: held.append((route, route.fetch())))
        job_id = client.submit(spec)
        try:
            page.goto(f"{web.url}?job={job_id}", timeout=30_000)
            page.wait_for_selector("#results tbody tr", timeout=60_000)  # the first snapshot's estimates
            # ... and the page knows a snapshot is complete (in OUT/_snapshots/: what the question says stays). The
            # rows can come first, from partitions of a snapshot not whole yet, which a cancel would not keep.
            page.wait_for_function("() => state.job && state.job.snapshots > 0", timeout=60_000)
            assert page.is_visible("#stop-job"), "a running batch job can be stopped from the page"
            assert "Cancel the job" in (page.get_attribute("#stop-job", "title") or "")
            asked: list[str] = []

            def accept(dialog: Any) -> None:
                asked.append(dialog.message)
                dialog.accept()

            page.once("dialog", accept)
            page.click("#stop-job")
            if held:
                page.wait_for_function(ended, timeout=30_000)
                route, response = held[0]
                with page.expect_event("requestfinished", lambda request: request.url.endswith("/stop")):
                    route.fulfill(response=response)
                page.wait_for_timeout(300)  # (the page's handler of the answer runs once its body is read)
            final = client.wait(job_id, timeout=60)
        finally:
            if client.status(job_id)["state"] == "running":
                client.stop(job_id)
                client.wait(job_id, timeout=60)
        assert final["state"] == "failed" and "cancelled from the web view" in final["error"], final["error"]
        [question] = asked
        assert "cancelled" in question and "no output" in question and f"{output}/_snapshots/" in question, question
        page.wait_for_function(ended, timeout=30_000)
        note = page.inner_text("#stop-state")
        assert "cancelled from the web view" in note and "_snapshots/" in note, note
        assert page.is_hidden("#stop-job")
        badge = page.inner_text("#result-state")
        assert badge.startswith("failed: last snapshot "), badge
        assert (output / "_snapshots" / badge.removeprefix("failed: last snapshot ")).is_dir(), "as the page says"
        assert page.query_selector_all("#results tbody tr"), "the last estimates stay on show"
        assert errors == []
    assert not list(output.glob("part-*")) and not (output / "_SUCCESS").exists()


def test_page_follows_a_continuous_job_window_by_window(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    output = tmp_path / "out"
    with WebServer(cluster.address) as web, browser_page() as (page, _):
        events = write_events(tmp_path / "events.jsonl", seconds=30, seed=45)  # stopped long before its end
        with continuous_job(client, stream_spec(events, output)) as job_id:
            page.goto(f"{web.url}?job={job_id}", timeout=30_000)
            page.wait_for_selector("#jobs li .badge.continuous", timeout=30_000)
            page.wait_for_selector("#window-table tbody tr", timeout=30_000)  # the first window's result
            assert page.is_hidden("#batch-view") and page.is_visible("#stop-job")
            listed = len(page.query_selector_all("#window-list tbody tr"))
            # New windows are pushed as they close: the list grows without reloading the page.
            page.wait_for_function(
                "n => document.querySelectorAll('#window-list tbody tr').length >= n + 2",
                arg=listed,
                timeout=30_000,
            )
            assert client.status(job_id)["state"] == "running", "the list should grow while the job runs"
            page.once("dialog", lambda dialog: dialog.accept())  # "Stop EventWordCount (job-...)?"
            page.click("#stop-job")
            page.wait_for_function("/stopping|succeeded/.test(document.querySelector('#stop-state').textContent)")
            final = client.wait(job_id, timeout=60)
        assert final["state"] == "succeeded" and final["report"]["continuous"]["stopped"]
        files = window_files(output)
        last = max(files)  # time labels sort as the windows do
        page.wait_for_function(
            "n => document.querySelectorAll('#window-list tbody tr').length === n", arg=len(files), timeout=30_000
        )
        page.wait_for_function("document.querySelector('#job-summary').textContent.includes('succeeded')")
        assert last in page.inner_text("#window-info")
        assert page.get_attribute("#window-list tbody tr", "data-label") == last, "newest first"
        shown = {
            row.get_attribute("data-key"): json.loads(row.get_attribute("data-value") or "null")
            for row in page.query_selector_all("#window-table tbody tr")
        }
        assert shown == files[last], "the table is the last window's result"
        last_meta = json.loads((output / "windows" / last / "_window.json").read_text())
        assert page.inner_text("#window-reason") == last_meta["reason"]
        assert page.is_hidden("#stop-job")
        assert len(page.query_selector_all("#scoreboard .cell")) == 1  # one source x one pane
        [letter] = last_meta["scoreboard"]["grid"]
        assert page.get_attribute("#scoreboard .cell", "data-state") == letter
        if last_meta["reason"] == "stopped":  # (the stop came inside its one pane, as it almost always does)
            assert letter == "C" and last_meta["fidelity"] == 0, "the pane the stop cut short is not present"
            assert page.inner_text("#scoreboard-legend li[data-state=C]") == "C cut by the stop (1)"
            assert "0/1 present" in page.inner_text("#scoreboard-info")
        earlier = sorted(files)[-2]
        page.click(f"#window-list tbody tr[data-label='{earlier}']")  # show an earlier window
        assert page.inner_text("#window-title") == f"Window {earlier}"
        assert page.inner_text("#window-info").startswith(earlier)
        keys = [row.get_attribute("data-key") for row in page.query_selector_all("#window-table tbody tr")]
        assert sorted(keys) == sorted(files[earlier])
        page.click("#follow-latest")
        assert page.inner_text("#window-title") == "Latest window" and page.is_hidden("#follow-latest")
        page.click("#window-table th[data-sort=key]")  # sort by key
        keys = [row.get_attribute("data-key") for row in page.query_selector_all("#window-table tbody tr")]
        assert keys == sorted(files[last])
        page.click("#window-table tbody tr >> nth=1")  # follow that key's value per window
        page.wait_for_function(
            "key => document.querySelector('#trend-label').textContent.startsWith(key + ':')", arg=keys[1]
        )
        page.screenshot(path=str(tmp_path / "web-continuous.png"), full_page=True)
        assert (tmp_path / "web-continuous.png").stat().st_size > 10_000


def test_page_shows_a_window_of_a_far_future_stamp_whole(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    """A window stamped 2**62 s: the page threw (a Date cannot hold it) and would show pane numbers rounded past
    2**53; it shows the bounds as seconds and the pane numbers in full."""
    job_id, output = far_future_window(client, tmp_path)
    [label] = window_files(output)
    first_pane = json.loads((output / "windows" / label / "_window.json").read_text())["scoreboard"]["first_pane"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        page.goto(f"{web.url}?job={job_id}", timeout=30_000)
        page.wait_for_selector("#window-table tbody tr", timeout=30_000)
        assert label in page.inner_text("#window-info") and "s since 1970" in page.inner_text("#window-info")
        title = page.get_attribute("#scoreboard .cell", "title") or ""
        assert f"pane {first_pane} (" in title, (first_pane, title)
        assert errors == []


def _open_final_results(page: Any, url: str, job_id: str) -> None:
    """Open job ``job_id``'s page of the web view at ``url`` and wait until its table holds the final output."""
    page.goto(f"{url}?job={job_id}", timeout=30_000)
    page.wait_for_selector("#result-state.final", timeout=30_000)


def _json_values_job(client: Client, tmp_path: Path, rows: dict[Any, Any]) -> str:
    """Run ``tests/jobs/json_values.py`` over ``rows`` (each a JSON key and value, as its output writes them) into
    ``tmp_path/out``; its job id."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{json.dumps(key)}\t{json.dumps(value)}\n" for key, value in rows.items()))
    return str(run_job(client, "json_values", [source], tmp_path / "out")["job_id"])


def test_page_shows_ints_past_2_53_as_numbers_and_strings_quoted(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """The API sends an int past 2**53 as its decimal string (JSON.parse would round it): the table showed it in
    quotes, like a string. It shows it as a number in full, at any depth of a key or value, and a string of digits
    still in quotes."""
    big, bigger = 2**60 + 1, 2**70
    rows = {"big": big, "digits": str(big), "nested": [bigger, "x", str(bigger)], "small": 3, bigger: -bigger}
    job_id = _json_values_job(client, tmp_path, rows)
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        lines = page.query_selector_all("#results tbody tr")
        cells = {line.get_attribute("data-key"): line.query_selector_all("td")[1].inner_text() for line in lines}
        shown = {
            line.get_attribute("data-key"): json.loads(line.get_attribute("data-value") or "null") for line in lines
        }
        assert errors == []
    assert shown == {str(key): value for key, value in rows.items()}, "every value exact, ints as ints"
    assert "".join(char for char in cells["big"] if char.isdigit()) == str(big) and '"' not in cells["big"], cells
    assert "".join(char for char in cells[str(bigger)] if char.isdigit()) == str(bigger), cells
    assert cells[str(bigger)].lstrip().startswith("-"), cells
    assert cells["digits"] == json.dumps(str(big)), "a string stays quoted"
    assert cells["nested"] == f'[{bigger},"x","{bigger}"]', cells


def test_page_of_an_unknown_job_says_so_and_lists_the_jobs(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """``?job=`` naming a job the coordinator does not know (mistyped, or from a coordinator since restarted): the
    server refused the event stream (404), the browser gave up on it, and the page said "reconnecting…" forever,
    with no job list. It says the job is unknown, with the coordinator's reason, and lists the cluster's jobs."""
    (tmp_path / "in.txt").write_text("a b a\n")
    job_id = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        page.goto(f"{web.url}?job=job-nope", timeout=30_000)
        page.wait_for_selector(f"#jobs li[data-job-id='{job_id}']", timeout=30_000)
        assert page.inner_text("#job-title") == "No job job-nope"
        assert "no job job-nope" in page.inner_text("#job-summary")
        assert page.inner_text("#connection") == "live" and page.is_hidden("#batch-view")
        page.click(f"#jobs li[data-job-id='{job_id}']")  # and a job picked from the list is shown
        page.wait_for_selector("#result-state.final", timeout=30_000)
        assert page.inner_text("#job-title") == f"WordCount ({job_id})"
        assert errors == []


def test_jobs_are_links_that_the_keyboard_follows_and_the_history_keeps(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """The job list was of clickable items: the keyboard could not reach them, a job could not be opened in a new tab
    or its address copied, Back left the page rather than going to the job looked at before, and the list, drawn anew
    with each change (any running job's progress, a new job), took the focus from whatever item had it. Each job is a
    link to ``?job=ID``, kept in place as the list changes; following one adds it to the tab's history."""
    (tmp_path / "in.txt").write_text("a b a\n")
    first, second = (run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / f"o{n}")["job_id"] for n in (1, 2))
    title = "document.querySelector('#job-title').textContent"
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        page.goto(web.url, timeout=30_000)
        page.wait_for_selector(f"#jobs li[data-job-id='{second}'].selected", timeout=30_000)  # the newest, at /
        link = f"#jobs a[href='?job={first}']"
        page.focus(link)
        focused = f'document.activeElement === document.querySelector("{link}")'
        assert page.evaluate(focused), "the keyboard reaches a job"
        third = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out3")["job_id"]
        page.wait_for_selector(f"#jobs li[data-job-id='{third}']", timeout=30_000)
        assert page.evaluate(focused), "the list's change kept the focus where it was"
        page.keyboard.press("Enter")
        page.wait_for_function(f"{title} === 'WordCount ({first})'", timeout=30_000)
        assert page.url == f"{web.url}?job={first}"
        page.go_back()
        page.wait_for_function(f"{title} === 'WordCount ({third})'", timeout=30_000)  # / shows the newest
        assert page.url == web.url
        page.go_forward()
        page.wait_for_function(f"{title} === 'WordCount ({first})'", timeout=30_000)
        assert page.get_attribute(f"#jobs li[data-job-id='{first}'] a", "aria-current") == "page"
        assert errors == []


def test_many_jobs_newest_first_in_a_list_of_their_own_that_fits_a_narrow_window(tmp_path: Path) -> None:
    """With a hundred jobs the list, oldest first, ran to pages below the job on show: the job just submitted (shown
    at /) was at its foot, the workers further down, and a hundred runs of one job file read alike. The list comes
    newest first, each job with its id, and scrolls on its own, a deep link's job scrolled into its view, and the
    keyboard's first stop skips the list to the job; in a narrow window the page is no wider than the window."""
    import signal

    (tmp_path / "in.txt").write_text("a b a\n")
    coordinator, address = start_coordinator(f"ipc://{tmp_path}/coordinator")
    client = Client(address, timeout=30)
    try:
        # No worker: the jobs wait for a slot, running, as many as the test needs at the cost of a submission each.
        spec = build_spec(load_job_file(job_path("wordcount")), [str(tmp_path / "in.txt")], str(tmp_path / "out"))
        jobs = [client.submit(dataclasses.replace(spec, output=str(tmp_path / f"out{n}"))) for n in range(120)]
        with WebServer(address) as web, browser_page() as (page, errors):
            page.set_viewport_size({"width": 1200, "height": 800})
            page.goto(web.url, timeout=30_000)
            page.wait_for_selector(f"#jobs li[data-job-id='{jobs[0]}']", timeout=30_000)
            listed = [item.get_attribute("data-job-id") for item in page.query_selector_all("#jobs li")]
            assert listed == jobs[::-1], "the newest first"
            assert page.inner_text(f"#jobs li[data-job-id='{jobs[5]}'] .job-id") == jobs[5]
            heading = "document.querySelector('nav h2:nth-of-type(2)').getBoundingClientRect().bottom <= innerHeight"
            assert page.evaluate(heading), "the workers' heading is not pages down"
            assert page.evaluate("document.documentElement.scrollHeight") <= 800 + 400, "the list scrolls on its own"
            page.goto(f"{web.url}?job={jobs[0]}", timeout=30_000)  # the oldest, at the list's foot
            page.wait_for_function(f"document.querySelector('#job-title').textContent.endsWith('({jobs[0]})')")
            within = """id => {
                const item = document.querySelector(`#jobs li[data-job-id='${id}']`).getBoundingClientRect();
                const list = document.querySelector('#jobs').getBoundingClientRect();
                return item.top >= list.top && item.bottom <= list.bottom && item.bottom <= innerHeight;
            }"""
            assert page.evaluate(within, jobs[0]), "the deep link's job is in the list's view"
            # A keyboard user tabbed through every job's link to reach the job on show: the first stop skips them.
            page.keyboard.press("Tab")
            assert page.evaluate("document.activeElement.id") == "skip-to-job"
            page.keyboard.press("Enter")
            assert page.evaluate("document.activeElement.id") == "job-title"
            page.keyboard.press("Tab")
            assert page.evaluate("document.querySelector('#detail').contains(document.activeElement)"), "past the list"
            assert page.url == f"{web.url}?job={jobs[0]}", "the address still names the job alone"
            page.set_viewport_size({"width": 420, "height": 800})
            page.wait_for_function("document.documentElement.scrollWidth <= 420", timeout=5_000)
            assert errors == []
    finally:
        client.close()
        coordinator.send_signal(signal.SIGKILL)
        coordinator.communicate(timeout=30)


def test_results_table_is_sorted_and_its_rows_picked_with_the_keyboard(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """A table's headings sorted it and its rows picked the key the chart follows on a click only: the keyboard could
    not reach them. A heading is a tab stop that Enter sorts by (its order said in aria-sort); the rows are one tab
    stop, the arrow keys move between them and Enter picks one, the focus staying on it as the table is drawn anew."""
    (tmp_path / "in.txt").write_text("b a c a b a\n")
    job_id = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    focused = "document.activeElement.dataset.key ?? document.activeElement.dataset.sort"
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        page.focus("#results th[data-sort=key]")
        assert page.evaluate(focused) == "key", "the keyboard reaches a heading"
        page.keyboard.press("Enter")
        assert page.get_attribute("#results th[data-sort=key]", "aria-sort") == "ascending"
        keys = [row.get_attribute("data-key") for row in page.query_selector_all("#results tbody tr")]
        assert keys == ["a", "b", "c"], keys
        stops = page.evaluate("[...document.querySelectorAll('#results tbody tr')].map((row) => row.tabIndex)")
        assert stops == [0, -1, -1], "the rows are one tab stop"
        for _ in range(4):  # (past the other headings: value, estimate, interval, final)
            page.keyboard.press("Tab")
        assert page.evaluate(focused) == "final"
        page.keyboard.press("Tab")
        assert page.evaluate(focused) == "a", "the table's rows come next"
        page.keyboard.press("ArrowDown")
        assert page.evaluate(focused) == "b"
        page.keyboard.press("Enter")
        page.wait_for_function("document.querySelector('#history-label').textContent.startsWith('b:')")
        assert page.get_attribute("#results tbody tr.selected", "data-key") == "b"
        assert page.evaluate(focused) == "b", "the picked row keeps the focus as the table is drawn anew"
        assert errors == []


def test_job_list_says_why_a_job_failed_on_a_hover(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    """A failed job was listed as "failed", nothing more: a cancelled job read as one whose map raised. Its item's
    title (a hover, a screen reader's description) says why, as hop status does, and where its output is."""
    from hop.runner import JobFailed

    (tmp_path / "bad.txt").write_text("fine\nboom now\n")
    with pytest.raises(JobFailed) as failure:
        run_job(client, "failing_map", [tmp_path / "bad.txt"], tmp_path / "failed")
    job_id = failure.value.status["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        page.goto(f"{web.url}?job={job_id}", timeout=30_000)
        page.wait_for_selector(f"#jobs li[data-job-id='{job_id}']", timeout=30_000)
        title = page.get_attribute(f"#jobs li[data-job-id='{job_id}'] a", "title") or ""
        assert title.startswith("failed: map at ") and "cannot handle boom" in title, title
        assert title.endswith(f"\noutput {tmp_path / 'failed'}"), title
        assert errors == []


def test_page_of_a_multi_step_job_names_the_steps_and_a_deleted_output(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """A two-step job's steps were listed under one name, and the first step, whose output the run deleted, showed
    "final output: 0 rows" marked final. Each is named with its step, and the first says its output is gone."""
    (tmp_path / "in.txt").write_text("a b a\nc a\n")
    report = run_job(client, "two_steps", [tmp_path / "in.txt"], tmp_path / "out")
    first, last = report["steps"][0]["job_id"], report["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        page.goto(f"{web.url}?job={first}", timeout=30_000)
        page.wait_for_function("document.querySelector('#snapshot-info').textContent.includes('no longer exists')")
        assert page.inner_text("#job-title") == f"CountOfCounts (step 1/2) ({first})"
        assert page.inner_text("#result-state") == "output deleted", "not a final output of no rows"
        assert page.inner_text(f"#jobs li[data-job-id='{last}']").startswith("CountOfCounts (step 2/2) — succeeded")
        assert errors == []


def test_page_of_a_pipeline_of_job_files_numbers_its_steps_over_the_run(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """``hop run wordcount.py topk.py``: each job file's job is one step of its own, so the page named both by
    their names alone, where the run's messages, reports and ``hop status`` say "step 1/2" and "step 2/2"."""
    from hop.runner import run_pipeline

    (tmp_path / "in.txt").write_text("a b a\nc a\n")
    jobs = [
        build_spec(load_job_file(job_path(name)), [str(tmp_path / "in.txt")], str(tmp_path / "out"), num_reduces=1)
        for name in ("wordcount", "topk")
    ]
    report = run_pipeline(client, jobs, progress=False, timeout=120)
    first, last = report["steps"][0]["job_id"], report["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        page.goto(f"{web.url}?job={first}", timeout=30_000)
        page.wait_for_selector(f"#jobs li[data-job-id='{last}']", timeout=30_000)
        assert page.inner_text("#job-title") == f"WordCount (step 1/2) ({first})"
        assert page.inner_text(f"#jobs li[data-job-id='{last}']").startswith("TopWords (step 2/2) — succeeded")
        assert errors == []


def test_page_says_its_coordinator_is_gone(tmp_path: Path) -> None:
    """The coordinator of an open page stopped: the page said "reconnecting…" for good, its every request to the
    server waiting 5 s for a coordinator that would not answer. It says plainly that the coordinator at its address
    is gone (and keeps asking, after growing waits, for one started there again)."""
    import re
    import signal

    coordinator, address = start_coordinator(f"ipc://{tmp_path}/coordinator")
    try:
        with WebServer(address) as web, browser_page() as (page, errors):
            page.goto(web.url, timeout=30_000)
            page.wait_for_function("document.querySelector('#connection').textContent === 'live'", timeout=30_000)
            coordinator.send_signal(signal.SIGTERM)
            coordinator.communicate(timeout=30)
            page.wait_for_function(
                "document.querySelector('#connection').textContent.includes('UTC: the coordinator at')",
                timeout=10_000,
            )
            said = page.inner_text("#connection")
            assert re.fullmatch(
                rf"not live since \d\d:\d\d:\d\d UTC: the coordinator at {re.escape(address)} is gone: its "
                r"connection broke.*; trying again( in \d+ s|…)",
                said,
            ), said
            assert page.is_visible("#connection.down"), said
            assert errors == []
    finally:
        coordinator.kill()
        coordinator.communicate(timeout=30)


def test_page_backs_off_once_its_server_is_gone_and_follows_one_started_again(tmp_path: Path) -> None:
    """Once its server had stopped (``hop web``, or ``hop run --web`` whose job ended), the page's event stream was
    asked for every 3 s forever by the browser, each a refused connection in the console, and the page said
    "reconnecting…" without a word of why. It says the server is gone and when it tries again, after waits that double
    (1 s, 2 s, 4 s, ...: common.js, shared with the dashboard); it follows a server started again at its address, at
    once when its window gets the focus, its job's state no longer said to be the last heard, else at its next
    attempt. The waits are run on the page's clock (tests/browser.py: assert_backs_off), not waited out."""
    import re
    import signal

    (tmp_path / "in.txt").write_text("a b a\n")
    coordinator, address = start_coordinator(f"ipc://{tmp_path}/coordinator")
    client = Client(address, timeout=30)
    servers = [WebServer(address)]
    servers[0].start()
    port = servers[0].port
    refused: list[str] = []
    try:
        # No worker: the job waits for a slot, running, for as long as the test needs.
        spec = build_spec(load_job_file(job_path("wordcount")), [str(tmp_path / "in.txt")], str(tmp_path / "out"))
        job_id = client.submit(spec)
        with browser_page() as (page, errors):

            def on_failure(request: Any) -> None:
                if "/api/events" in request.url and "CONNECTION_REFUSED" in (request.failure or ""):
                    refused.append(request.url)

            page.on("requestfailed", on_failure)
            live = "document.querySelector('#connection').textContent === 'live'"
            running = "document.querySelector('#job-summary').textContent.startsWith('running;')"
            page.clock.install()
            page.goto(f"{servers[0].url}?job={job_id}", timeout=30_000)
            page.wait_for_function(running)
            page.wait_for_function(live, timeout=10_000)
            pause_clock(page)
            servers[0].stop()
            assert_backs_off(page, refused, [1, 2, 4])
            said = page.inner_text("#connection")
            assert re.fullmatch(
                rf"not live since \d\d:\d\d:\d\d UTC: no answer from the web view's server at 127.0.0.1:{port}; "
                r"trying again in 8 s",
                said,
            ), said
            summary = page.inner_text("#job-summary")
            assert summary.startswith("as last heard, the web view's server being gone or silent: running;"), summary
            # Started again: the page is live at once when its window gets the focus (its next attempt is 8 s away,
            # and its clock is not run).
            servers.append(WebServer(address, port))
            servers[-1].start()
            page.evaluate("window.dispatchEvent(new Event('focus'))")
            page.wait_for_function(live, timeout=10_000)
            page.wait_for_function(running, timeout=10_000)
            assert page.is_visible("#stop-job") and len(refused) == 3, refused

            # Gone and back again: the waits start over from 1 s, and the page follows it by itself at its next
            # attempt, not before.
            def start_again() -> None:
                servers.append(WebServer(address, port))
                servers[-1].start()

            assert_follows_a_restart_at_its_next_attempt(page, refused, servers[-1].stop, start_again, live)
            page.wait_for_function(running, timeout=10_000)
            assert page.is_visible("#stop-job") and len(refused) == 4, refused
            assert errors == [], errors
    finally:
        for server in servers:
            server.stop()
        client.close()
        coordinator.send_signal(signal.SIGKILL)
        coordinator.communicate(timeout=30)


@pytest.mark.parametrize("opened", ["?job=ID", "/"])
def test_page_left_open_across_a_coordinators_restart_says_its_job_is_unknown_there(
    tmp_path: Path, opened: str
) -> None:
    """A job's page left open while its coordinator was restarted: once the new coordinator answered, the page was
    live again and showed the job, which the new coordinator does not know, as running, with a Stop button. It says
    there is no such job, with the coordinator's reason, and follows the new coordinator's jobs. Opened at / (the
    newest job, whichever it is), it shows the newest of the new coordinator's jobs once there is one."""
    import signal

    (tmp_path / "in.txt").write_text("a b a\n")
    bind = f"ipc://{tmp_path}/coordinator"
    coordinators = [start_coordinator(bind)[0]]
    clients = [Client(bind, timeout=30)]
    try:
        # No worker: the job waits for a slot, running, for as long as the test needs.
        spec = build_spec(load_job_file(job_path("wordcount")), [str(tmp_path / "in.txt")], str(tmp_path / "out"))
        job_id = clients[0].submit(spec)
        title = "document.querySelector('#job-title').textContent"
        with WebServer(bind) as web, browser_page() as (page, errors):
            page.goto(web.url + ("" if opened == "/" else f"?job={job_id}"), timeout=30_000)
            page.wait_for_function("document.querySelector('#job-summary').textContent.startsWith('running;')")
            coordinators[0].send_signal(signal.SIGKILL)
            coordinators[0].communicate(timeout=30)
            page.wait_for_function(
                "document.querySelector('#connection').textContent.startsWith('not live since')", timeout=10_000
            )
            coordinators.append(start_coordinator(bind)[0])
            page.evaluate("window.dispatchEvent(new Event('focus'))")  # (at once, not at the next attempt)
            page.wait_for_function(f"{title} === 'No job {job_id}'")
            page.wait_for_function("document.querySelector('#connection').textContent === 'live'", timeout=10_000)
            page.wait_for_timeout(1_000)  # (what a late event would bring)
            assert page.inner_text("#job-title") == f"No job {job_id}"
            assert f"no job {job_id}" in page.inner_text("#job-summary")
            assert page.is_hidden("#stop-job") and not page.query_selector_all(".task")
            assert not page.query_selector_all("#jobs li"), "the new coordinator's jobs: none"
            clients.append(Client(bind, timeout=30))
            new_job = clients[-1].submit(dataclasses.replace(spec, output=str(tmp_path / "out2")))
            page.wait_for_selector(f"#jobs li[data-job-id='{new_job}']", timeout=30_000)
            if opened == "/":
                page.wait_for_function(f"{title} === 'WordCount ({new_job})'", timeout=10_000)
            else:
                page.wait_for_timeout(1_000)
                assert page.inner_text("#job-title") == f"No job {job_id}", "the job the address names"
            assert errors == []
    finally:
        for client in clients:
            client.close()
        for coordinator in coordinators:
            coordinator.kill()
            coordinator.communicate(timeout=30)


def test_page_opening_its_stream_again_goes_on_after_the_last_snapshot_it_has(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """The page opens its event stream again itself, after its own waits (the browser's reconnection, which named the
    last event it got, asked every 3 s forever): it names the last snapshot it has (?after=), so that the server goes
    on from there rather than sending every snapshot again (or, of a continuous job, only the newest windows)."""
    source = tmp_path / "in.txt"
    generate_text(source, 1_500_000, seed=7, vocabulary=100)
    job_class = load_job_file(job_path("slow_sum_wordcount"))  # slow enough for several snapshots
    options = online_options(job_class, [str(source)], snapshot_every=0.2, order="random", chunk_size=32 << 10)
    job_id = run_job(client, "slow_sum_wordcount", [source], tmp_path / "out", num_reduces=2, options=options)["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        last = page.evaluate("state.lastSeq")
        assert last >= 1, last
        with page.expect_request(lambda request: "/api/events" in request.url) as asked:
            page.evaluate("connect(state.jobId)")  # (as after a wait: the stream dropped)
        assert asked.value.url == f"{web.url}api/events?job={job_id}&after={last}"
        page.wait_for_selector("#result-state.final", timeout=30_000)
        assert page.evaluate("state.lastSeq") == last and errors == []


def test_page_of_an_ended_job_whose_server_is_gone_keeps_its_end_as_it_is(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """The page of a job that had succeeded, once its server was gone (hop run --web ends with its job), said the job
    had succeeded "as last heard", as if that could change. The header says the page is not live; the job's end is
    said as it is."""
    (tmp_path / "in.txt").write_text("a b a\n")
    job_id = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    with browser_page() as (page, errors):
        with WebServer(cluster.address) as web:
            _open_final_results(page, web.url, job_id)
        page.wait_for_function(
            "document.querySelector('#connection').textContent.startsWith('not live since')", timeout=10_000
        )
        summary = page.inner_text("#job-summary")
        assert summary.startswith("succeeded; maps "), summary
        assert page.inner_text("#result-state") == "final" and errors == []


def test_bar_chart_spans_every_interval_it_draws(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    """The bar chart's value axis was scaled to the bars alone: an early snapshot's wide interval (a group whose
    few large values lie in a few chunks) reaching past the largest bar, or below 0, was drawn off the plot, its
    end cut off at the canvas's edge or across the axis labels. The axis spans every interval drawn."""
    rng = random.Random(53)
    lines = ["b 10\n"] * 600_000
    for position in rng.sample(range(len(lines)), 4):
        lines[position] = "a 300000\n"  # a: 1.2M in 4 lines, so its interval from a few chunks is wide
    source = tmp_path / "in.txt"
    source.write_text("".join(lines))
    job_class = load_job_file(job_path("keyed_values"), "SumValues")
    options = online_options(job_class, [str(source)], snapshot_every=0.05, order="random", chunk_size=64 << 10)
    spec = build_spec(job_class, [str(source)], str(tmp_path / "out"), num_reduces=1, options=options)
    # Every drawing of the bars is checked: the axis against the intervals drawn on it.
    watch = """() => {
      window.drawn = 0; window.wide = 0; window.off = [];
      const draw = renderBars;
      renderBars = (rows) => {
        draw(rows);
        const chart = Chart.getChart(document.getElementById("bars"));
        const { min, max } = chart.scales.y;
        const largest = Math.max(...chart.data.datasets[0].data.filter(Number.isFinite));
        window.drawn += 1;
        for (const { low, high } of chart.data.datasets[0].bounds) {
          if (low === null || low === undefined) continue;
          if (high > 1.25 * largest || low < 0) window.wide += 1;  // (past where the axis of the bars alone ends)
          if (low < min || high > max) window.off.push(`[${low}, ${high}] on an axis of ${min} to ${max}`);
        }
      };
    }"""
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        page.goto(web.url, timeout=30_000)
        page.evaluate(watch)
        job_id = client.submit(spec)
        page.evaluate("jobId => selectJob(jobId)", job_id)
        page.wait_for_selector("#result-state.final", timeout=120_000)
        drawn, wide, off = page.evaluate("() => [window.drawn, window.wide, window.off]")
        assert errors == []
    assert client.status(job_id)["state"] == "succeeded"
    assert off == [], off
    assert wide > 0, f"no interval of the {drawn} drawings reached past the bars' axis: nothing was checked"


def test_page_shows_nan_and_infinite_values_as_the_output_has_them(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """The API sent a NaN or infinite value as null (JSON has none), and the page showed an empty cell where the
    output has ``NaN`` or ``Infinity``: as if the group had no value. It shows them as the output writes them."""
    (tmp_path / "in.txt").write_text("nan\ninf\n-inf\n1.5\n")
    job_id = run_job(client, "float_values", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    parts = "".join(part.read_text() for part in sorted((tmp_path / "out").glob("part-*")))
    written = dict(line.split("\t") for line in parts.split("\n") if line)
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        lines = page.query_selector_all("#results tbody tr")
        cells = {line.get_attribute("data-key"): line.query_selector_all("td")[1].inner_text() for line in lines}
        values = {line.get_attribute("data-key"): line.get_attribute("data-value") for line in lines}
        page.click("#results th[data-sort=value]")  # sorting by value puts NaN below every number
        order = [line.get_attribute("data-key") for line in page.query_selector_all("#results tbody tr")]
        assert errors == []
    assert cells == {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity", "1.5": "1.5"}, cells
    assert values == {json.loads(key): text for key, text in written.items()}, "as OUT/part-* has them"
    assert order in (["inf", "1.5", "-inf", "nan"], ["nan", "-inf", "1.5", "inf"]), order


def test_page_shows_a_small_number_by_its_significant_digits(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """The page wrote every number with at most 3 decimals: a value of 0.00012345 (a Mean of rare events, a small
    rate) read "0", -0.0004567 "-0", and an interval of such estimates "0 – 0.001", as if exact. Below 1 a number
    keeps 4 significant digits, below 1e-6 in exponent form; from 1 on, 3 decimals as before."""
    (tmp_path / "in.txt").write_text("0.00012345\n-0.0004567\n1.5e-09\n0.5\n1234.5678\n0.0\n")
    job_id = run_job(client, "float_values", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        lines = page.query_selector_all("#results tbody tr")
        cells = {line.get_attribute("data-key"): line.query_selector_all("td")[1].inner_text() for line in lines}
        # The bar chart's tooltip of the bar of 0.00012345, as Chart.js builds it on a hover.
        tooltip = page.evaluate(
            """() => {
              const chart = Chart.getChart("bars");
              const index = chart.data.labels.indexOf("0.00012345");
              chart.tooltip.setActiveElements([{ datasetIndex: 0, index }], { x: 0, y: 0 });
              return chart.tooltip.body.flatMap((part) => part.lines);
            }"""
        )
        assert errors == []
    assert tooltip == ["final value: 0.0001235"], tooltip
    assert cells == {
        "0.00012345": "0.0001235",
        "-0.0004567": "-0.0004567",
        "1.5e-09": "1.5e-9",
        "0.5": "0.5",
        "1234.5678": "1,234.568",
        "0.0": "0",
    }, cells


def test_page_logs_no_error_in_the_console(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    """The page asked /api/monitor/state whether to link a cluster monitor: without one (``hop web``, ``--web``)
    the 404 was logged as an error in the browser's console on every load. The server says it in the page."""
    (tmp_path / "in.txt").write_text("a b a\n")
    job_id = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        logged: list[str] = []
        page.on("console", lambda message: logged.append(message.text) if message.type == "error" else None)
        _open_final_results(page, web.url, job_id)
        page.wait_for_load_state("networkidle", timeout=30_000)
        assert page.is_hidden("#monitor-link")
        assert errors == []
    assert logged == [], logged


def test_page_says_how_many_of_the_rows_its_table_draws(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    """The table draws 500 rows, but the page said nothing of it: "final output: 700 rows" (or a snapshot's "the
    4,000 largest shown") over a table of 500, whose other rows a user could not find. It says which it draws."""
    (tmp_path / "in.txt").write_text("".join(f"w{index} " * (1 + index % 3) + "\n" for index in range(700)))
    job_id = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        info = page.inner_text("#snapshot-info")
        drawn = len(page.query_selector_all("#results tbody tr"))
        note = page.evaluate("document.querySelector('#table-note')?.textContent ?? null")
        assert errors == []
    assert info == "final output: 700 rows" and drawn == 500, (info, drawn)
    assert note is not None and "the first 500 of these 700 rows" in note, note


def test_page_of_a_job_of_an_empty_input_says_it_held_no_records(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """An empty input is one map of no bytes (its hooks run once), and the job's fraction of its input processed
    stays 0: its page read "succeeded; ... 0% of the input processed", as if the finished job had missed all of
    something. It says what hop run's summary says of such an input."""
    (tmp_path / "in.txt").write_text("")
    job_id = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")["job_id"]
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        summary = page.inner_text("#job-summary")
        assert errors == []
    assert summary.startswith("succeeded; maps 1/1") and "the input held no records;" in summary, summary
    assert "% of the input" not in summary, summary


@pytest.mark.parametrize("stopped_early", [False, True], ids=["exact", "stopped-early"])
def test_results_heading_says_final_values_once_the_output_is_in(
    cluster: LocalCluster, client: Client, tmp_path: Path, stopped_early: bool
) -> None:
    """The results table's value column was headed "value so far" over a job's final output, exact, as over a
    snapshot's values of the input read so far. It says what the column holds; the bar chart's legend too: a job
    stopped early (its output its last snapshot's estimates, drawn with their intervals) had its bars called "final
    value". And an exact output, ranked by value, was marked as sorted by its estimate column, empty: the order is
    marked on the value's heading, a click there turning it."""
    if stopped_early:
        source = tmp_path / "in.txt"
        generate_text(source, 3_000_000, seed=9, vocabulary=50)
        options = online_options(
            load_job_file(job_path("slow_sum_wordcount")), [str(source)], snapshot_every=0.1, order="random",
            chunk_size=64 << 10, stop_when_accurate=0.5,
        )  # fmt: skip
        report = run_job(client, "slow_sum_wordcount", [source], tmp_path / "out", num_reduces=2, options=options)
        assert report["approximate"]
    else:
        (tmp_path / "in.txt").write_text("a b a\n")
        report = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out")
    marked = """() => Object.fromEntries([...document.querySelectorAll('#results th[data-sort]')]
        .filter((heading) => heading.getAttribute('aria-sort') !== 'none')
        .map((heading) => [heading.dataset.sort, heading.getAttribute('aria-sort')]))"""
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, report["job_id"])
        heading = page.inner_text("#results th[data-sort=value]")
        legend = page.evaluate("Chart.getChart(document.getElementById('bars')).data.datasets[0].label")
        order = page.evaluate(marked)
        rows = {
            row.get_attribute("data-key"): row.get_attribute("data-value")
            for row in page.query_selector_all("#results tbody tr")
        }
        page.click("#results th[data-sort=value]")
        turned = page.evaluate(marked)
        first = page.get_attribute("#results tbody tr", "data-key")
        assert errors == []
    if stopped_early:
        assert (heading, legend) == ("value so far", "final estimate (95% interval)"), (heading, legend)
        assert order == {"estimate": "descending"} and turned == {"value": "descending"}, (order, turned)
        return
    assert rows == {"a": "2", "b": "1"}, rows
    assert (heading, legend) == ("final value", "final value"), (heading, legend)
    assert order == {"value": "descending"}, order
    assert turned == {"value": "ascending"} and first == "b", (turned, first)


def test_page_keeps_a_very_long_key_within_the_page(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    """A key of 5,000 characters (a URL, a stack trace as a key): its table cell, unbroken, stretched the page to
    43,000 pixels wide, the key's numbers out of sight, and the bar chart's label took the plot's height. The key is
    cut short in its cell and on the chart's axis (whole in the cell's title and in the output). Picked to follow
    over time, it was written whole under that chart (and under a continuous job's trend chart), a column of text
    thousands of pixels high above the table: it is cut short there too, whole in the caption's title."""
    long_key = "x" * 2_500 + "y" * 2_500
    rows = {long_key: 7, "short": 5, "<b>tag</b> & é中文": 3}
    job_id = _json_values_job(client, tmp_path, rows)
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        _open_final_results(page, web.url, job_id)
        width = page.evaluate("document.documentElement.scrollWidth")
        line = page.query_selector(f"#results tbody tr[data-key={json.dumps(long_key)}]")
        assert line is not None
        cell = line.query_selector("td")
        assert cell is not None
        cell_width, title = cell.bounding_box()["width"], cell.get_attribute("title")  # type: ignore[index]
        value = line.query_selector_all("td")[1]
        value_box = value.bounding_box()
        plot = page.evaluate(
            "(() => { const area = Chart.getChart(document.getElementById('bars')).chartArea;"
            " return area.bottom - area.top; })()"
        )
        keys = [row.get_attribute("data-key") for row in page.query_selector_all("#results tbody tr")]
        shown = [row.query_selector("td").inner_text() for row in page.query_selector_all("#results tbody tr")]
        line.click()  # follow it over time
        page.wait_for_function("document.querySelector('#history-label').textContent.includes(':')")
        caption = page.query_selector("#history-label")
        assert caption is not None
        caption_box, caption_title = caption.bounding_box(), caption.get_attribute("title")
        # A continuous job's trend chart names the key it follows alike.
        trend = page.evaluate(
            "(key) => { stream.selectedKey = key; renderTrend(null);"
            " const label = document.getElementById('trend-label'); return [label.textContent, label.title]; }",
            long_key,
        )
        page.screenshot(path=str(tmp_path / "long-key.png"))
        assert errors == []
    assert caption_box is not None and caption_box["height"] <= 60, f"the caption is {caption_box} high"
    assert caption_title == long_key
    assert len(trend[0]) < 120 and trend[0].endswith("…: value per window") and trend[1] == long_key, trend[0][:200]
    assert width <= 1400, f"the page is {width} px wide in a 1400 px window"
    assert cell_width <= 700 and title == long_key, (cell_width, (title or "")[:40])
    assert value_box is not None and value_box["x"] + value_box["width"] <= 1400, "the key's value is in sight"
    assert plot >= 100, f"the bar chart's plot is {plot} px high"
    assert sorted(keys) == sorted(rows), "each key whole in data-key"
    assert "<b>tag</b> & é中文" in shown, shown


def test_window_trend_follows_a_key_it_can_plot(cluster: LocalCluster, client: Client, tmp_path: Path) -> None:
    """A window's infinite value shows as such (not as an empty cell), and the trend chart starts on the largest
    value it can draw: an infinity, compared as a number, came out on top, and the chart followed a key with nothing
    to draw."""
    # (from the start of the current second: the first window, on whole seconds, holds all four users, where one
    # begun near a second's end held a user or two)
    start = float(int(time.time()))
    users = [("a", "5"), ("b", "3"), ("inf", "Infinity"), ("-inf", "-Infinity")]
    lines = [
        f'{{"ts": {start + index / 200 + 0.0004!r}, "user": "{user}", "amount": {amount}}}\n'
        for index, (user, amount) in zip(range(600), itertools.cycle(users), strict=False)
    ]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(lines))
    options = stream_options([f"replay:{events}?rate=200"], "1s")
    job_class = load_job_file(job_path("stream_events"), "EventAmounts")
    spec = build_spec(job_class, [], str(tmp_path / "out"), num_reduces=2, options={"stream": options})
    with WebServer(cluster.address) as web, browser_page() as (page, errors):
        with continuous_job(client, spec) as job_id:
            page.goto(f"{web.url}?job={job_id}", timeout=30_000)
            page.wait_for_selector('#window-table tbody tr[data-key="-inf"]', timeout=30_000)
            cells = {
                row.get_attribute("data-key"): row.query_selector_all("td")[1].inner_text()
                for row in page.query_selector_all("#window-table tbody tr")
            }
            followed = page.evaluate("stream.selectedKey")
            label = page.inner_text("#trend-label")
        assert errors == []
    assert cells["inf"] == "Infinity" and cells["-inf"] == "-Infinity", cells
    assert followed == "a" and label.startswith("a: value per window"), (followed, label)


def test_page_of_a_running_job_says_its_state_is_the_last_heard_once_the_coordinator_is_gone(
    tmp_path: Path,
) -> None:
    """The coordinator of an open job's page was killed: the header said it was gone, but the job still read
    "running", with a Stop button that could not reach anyone (the jobs of a coordinator that stopped fail). The job's
    state is said to be the last heard, and the button goes."""
    import signal

    (tmp_path / "in.txt").write_text("a b a\n")
    coordinator, address = start_coordinator(f"ipc://{tmp_path}/coordinator")
    client = Client(address, timeout=30)
    try:
        # No worker: the job waits for a slot, running, for as long as the test needs.
        spec = build_spec(load_job_file(job_path("wordcount")), [str(tmp_path / "in.txt")], str(tmp_path / "out"))
        job_id = client.submit(spec)
        with WebServer(address) as web, browser_page() as (page, errors):
            page.goto(f"{web.url}?job={job_id}", timeout=30_000)
            page.wait_for_function("document.querySelector('#job-summary').textContent.startsWith('running;')")
            assert page.is_visible("#stop-job")
            coordinator.send_signal(signal.SIGKILL)
            coordinator.communicate(timeout=30)
            page.wait_for_function(
                "document.querySelector('#connection').textContent.startsWith('not live since')", timeout=10_000
            )
            summary = page.inner_text("#job-summary")
            assert summary.startswith("as last heard, the coordinator being gone or silent: running;"), summary
            assert page.is_hidden("#stop-job")
            assert errors == []
    finally:
        client.close()
        coordinator.kill()
        coordinator.communicate(timeout=30)


def test_a_windows_fidelity_reads_100_percent_only_when_whole_on_both_pages(cluster: LocalCluster) -> None:
    """A window's fidelity (the share of its cells present) read "100%" from 0.9995 up on the job page and from
    0.995 up on the monitor's, taken for a complete window. Each reads 100% only when whole, as ``hop run``'s lines
    do (``hop.wording.share``), with the decimals that keep it short of it."""
    with WebServer(cluster.address, monitor=[]) as web, browser_page() as (page, errors):
        page.goto(web.url, timeout=30_000)
        shown = page.evaluate("[1, 0.9995, 0.99999, 0.5, 0].map((fraction) => percent(fraction))")
        assert shown == ["100%", "99.95%", "99.999%", "50.0%", "0%"], shown
        page.goto(f"{web.url}monitor", timeout=30_000)  # (monitor.js says its latest window's fidelity so)
        shown = page.evaluate("[1, 0.996, 0.9999999, 0.5, 0.0004].map((fraction) => share(fraction))")
        assert shown == ["100%", "99.6%", "99.9999%", "50%", "0.04%"], shown
        assert errors == []


def test_shares_of_the_input_read_100_percent_only_when_whole_on_both_pages(cluster: LocalCluster) -> None:
    """A map on its last records (99.6% of its input: a slow or blocked last record, a large input's last batch)
    read "100% maps" and "100% of the input processed" on the job page, a snapshot of 99.96% of the input "100% of
    the input seen", and the dashboard's stuck task at 99.8% "100%": rounded to whole percents, each read as done.
    Each now reads 100% only when whole (common.js: share), as ``hop run``'s progress line holds 99.9%."""
    job = {"job_id": "job-x", "name": "WordCount", "state": "running", "step": 0, "num_steps": 1, "maps_done": 0,
           "maps_total": 1, "input_records": 40_000, "input_fraction": 0.996, "map_fraction": 0.996}  # fmt: skip
    with WebServer(cluster.address, monitor=[]) as web, browser_page() as (page, errors):
        page.goto(web.url, timeout=30_000)
        shown = page.evaluate("(job) => [jobLine(job), inputDone(job), seenText(0.9996), seenText(0.42)]", job)
        assert shown == [
            "WordCount — running — 99.6% maps",
            "99.6% of the input processed",
            "99.96% of the input seen",
            "42% of the input seen",
        ], shown
        # The running job's page says so too (and of its one snapshot, "1 snapshot": it said "1 snapshots").
        summary = page.evaluate(
            "(job) => { renderJob(job); return document.getElementById('job-summary').textContent; }",
            {**job, "reduces_done": 0, "reduces_total": 1, "snapshots": 1, "output": "/out", "tasks": []},
        )
        assert summary == "running; maps 0/1, reduces 0/1; 99.6% of the input processed; 1 snapshot; output /out"
        info = page.evaluate(
            "(snapshot) => { selectJob(null); addSnapshot(snapshot); "
            "return document.getElementById('snapshot-info').textContent; }",
            {"seq": 0, "label": "0.100", "input_fraction": 0.1, "groups": 1, "rows": [], "truncated": False},
        )
        assert info == "snapshot 0.100: 10% of the input seen, 1 group", info  # (it read "1 groups")
        # With --stop-when-accurate, why the snapshot did not stop the job (sent, never shown).
        held = 'the widest interval is 7.0% of its estimate, over 5.0% ("b")'
        info = page.evaluate(
            "(snapshot) => { addSnapshot(snapshot); return document.getElementById('snapshot-info').textContent; }",
            {"seq": 1, "label": "0.200", "input_fraction": 0.2, "groups": 2, "rows": [], "stop_held_back": held},
        )
        assert info == f"snapshot 0.200: 20% of the input seen, 2 groups; not accurate enough to stop: {held}", info
        done = {**job, "state": "succeeded", "maps_done": 1, "input_fraction": 1, "map_fraction": 1}
        assert page.evaluate("(job) => [jobLine(job), inputDone(job)]", done) == [
            "WordCount — succeeded — 100% maps",
            "100% of the input processed",
        ]
        # A group's estimate over time, on the input seen at each snapshot: its axis too.
        labels = page.evaluate(
            """() => {
                const point = (progress) => ({ progress, estimate: 1, low: null, high: null });
                state.history.set("k", [0.1, 0.5, 0.997, 1].map(point));
                state.selectedKey = "k";
                renderHistory();
                return historyChart.data.labels;
            }"""
        )
        assert labels == ["10%", "50%", "99.7%", "100%"], labels
        page.goto(f"{web.url}monitor", timeout=30_000)
        stuck = {"job_id": "job-x", "name": "WordCount", "task": "map 0", "attempt": 0, "worker": "w1", "host": "h1",
                 "stalled_s": 130, "stuck_after_s": 120, "records": 39_990, "fraction": 0.998}  # fmt: skip
        text = page.evaluate(
            "(task) => { view.snapshot = { ...(view.snapshot ?? {}), stuck_tasks: [task] }; renderStuckTasks(); "
            "return document.getElementById('stuck-tasks').textContent; }",
            stuck,
        )
        assert "at 39,990 records, 99.8% · job-x on w1" in text, text  # (its records grouped, as every count there)
        # A continuous job's one window, in the jobs table: "1 window" (it read "1 windows").
        continuous = {**job, "continuous": True, "windows": 1, "reduces_done": 0, "reduces_total": 1, "elapsed": 3}
        row = page.evaluate(
            "(job) => { view.snapshot = { ...(view.snapshot ?? {}), jobs: [job] }; renderJobs(); "
            "return [...document.querySelectorAll('#jobs tbody tr td')].map((cell) => cell.textContent); }",
            {**continuous, "records_per_s": 146.02},
        )
        assert "1 window" in "".join(row) and "1 windows" not in "".join(row), row
        assert "146" in row and "146.02" not in row, row  # (a rate of records, as counts are: no hundredths)
        assert errors == []
