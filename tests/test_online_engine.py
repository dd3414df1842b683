"""Online aggregation on the real local cluster: snapshots, estimates, on-demand snapshots, early stop."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client, JobRejected
from hop.gen.pageviews import generate_pageviews
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.online.tracker import HISTORY_ROWS
from hop.runner import build_spec, online_options, run_steps
from tests.conftest import ROOT, job_path, output_dict, read_output, run_job

TIMEOUT = 120


@pytest.fixture(scope="module")
def pageviews_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("pageviews")
    generate_pageviews(folder, days=4, size_bytes=6 << 20, seed=5)
    return folder


def snapshot_rows(folder: Path) -> dict[Any, dict[str, Any]]:
    rows = {}
    for part in sorted(folder.glob("estimates-*.jsonl")):
        for line in part.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            key = row["key"]
            rows[tuple(key) if isinstance(key, list) else key] = row
    return rows


def online_run(client: Client, job: str, inputs: list[Path], output: Path, **online: Any) -> dict[str, Any]:
    job_class = load_job_file(job_path(job))
    options = online_options(job_class, [str(i) for i in inputs], **online)
    return run_job(client, job, inputs, output, num_reduces=2, split_size=1 << 20, options=options)


def test_snapshots_with_estimates_and_an_exact_final_result(
    client: Client, pageviews_dir: Path, tmp_path: Path
) -> None:
    plain = run_job(client, "pageviews", [pageviews_dir], tmp_path / "plain", num_reduces=2)
    report = online_run(
        client, "pageviews", [pageviews_dir], tmp_path / "online", snapshot_every=0.25, order="random", seed=3
    )
    assert output_dict(tmp_path / "online") == output_dict(tmp_path / "plain")
    assert report["counters"]["map_input_records"] == plain["counters"]["map_input_records"]
    final = output_dict(tmp_path / "plain")
    folders = sorted((tmp_path / "online" / "_snapshots").iterdir())
    labels = [f.name for f in folders]  # (a threshold passed while the one before waited for its data: skipped)
    assert labels == [s["label"] for s in report["snapshots"]] and labels
    skipped = [label for s in report["snapshots"] for label in s["skipped"]]
    # (one passed after the last was asked, the job ending before it could ask again, has none: listed as such)
    missing = report.get("thresholds_without_snapshot", [])
    assert sorted([*labels, *skipped, *missing], key=float) == ["0.250", "0.500", "0.750"], report
    assert all(float(label) > float(labels[-1]) for label in missing), report["snapshots"]
    fractions = []
    intervals = 0
    for folder in folders:
        info = json.loads((folder / "_snapshot.json").read_text())
        assert info["complete"] and len(info["partitions"]) == 2
        fractions.append(info["chunks_fraction"])
        rows = snapshot_rows(folder)
        assert rows and set(rows) <= set(final)
        for key, row in rows.items():
            assert row["value"] <= final[key], "a snapshot's value so far never exceeds the final sum"
            if row["final"]:
                assert row["value"] == final[key]
        assert all(row["estimate"] is not None for row in rows.values()), "Sum carries estimates"
        intervals += sum(row["low"] is not None and not row["final"] for row in rows.values())
        # The part file shows the estimate, in the output's line format.
        part_lines = (folder / "part-00000").read_text().splitlines()
        assert all(len(line.split("\t")) == 2 for line in part_lines)
    assert intervals, "estimates carry intervals once two chunks of a stratum were seen"
    assert fractions == sorted(fractions) and 0 < fractions[0] < 1
    first = json.loads((folders[0] / "_snapshot.json").read_text())
    assert not any(p.get("final") for p in first["partitions"]), "the 25% snapshot comes from running reducers"
    snapshots = client.snapshots(report["job_id"])
    assert [s["label"] for s in snapshots] == labels and snapshots[-1]["rows"]
    for snapshot in snapshots:  # the job ended: the coordinator keeps each snapshot's largest estimates only
        assert snapshot["rows_limit"] == HISTORY_ROWS and len(snapshot["rows"]) <= 2 * HISTORY_ROWS
        folder = tmp_path / "online" / "_snapshots" / snapshot["label"]
        largest = []  # each partition's largest estimates, all of them largest first
        for part in sorted(folder.glob("estimates-*.jsonl")):
            estimates = [json.loads(line)["estimate"] for line in part.read_text(encoding="utf-8").splitlines()]
            largest += sorted(estimates, reverse=True)[:HISTORY_ROWS]
        assert [row["estimate"] for row in snapshot["rows"]] == sorted(largest, reverse=True)
    assert client.snapshots(report["job_id"], after=0)[0]["seq"] == 1


def _signed_sum_input(path: Path, negative: bool) -> dict[str, int]:
    """About 590 KB of ``KEY VALUE`` lines (9 chunks of 64 KB): keys from common to rare (a rare one's early interval
    is wide: a plain Sum's reached below its sum so far, below 0), and, if ``negative``, a key ``neg`` of -1 every
    2,000 lines; the final sums."""
    rng = random.Random(11)
    keys = [f"k{i}" for i in range(30)]
    weights = [1 / (i + 1) ** 2 for i in range(30)]
    sums: dict[str, int] = {}
    with path.open("w", encoding="utf-8") as file:
        for line in range(100_000):
            key, value = rng.choices(keys, weights)[0], int(rng.lognormvariate(3, 1.5))
            if negative and line % 2000 == 0:
                key, value = "neg", -1
            file.write(f"{key} {value}\n")
            sums[key] = sums.get(key, 0) + value
    return sums


def test_a_nonnegative_sums_snapshots_never_go_below_the_sum_so_far(client: Client, tmp_path: Path) -> None:
    """``Sum(nonnegative=True)`` through a real run: in every snapshot, every group's ``low`` is at least its
    ``value`` so far (some exactly: the floor acted, where the t interval reached lower) and at most its final sum
    (the floor never leaves the final value out); the output is the exact sum."""
    final = _signed_sum_input(tmp_path / "in.txt", negative=False)
    options = online_options(
        load_job_file(job_path("nonnegative_sum")),
        [str(tmp_path / "in.txt")],
        snapshot_every=0.2,
        order="random",
        seed=2,
        chunk_size=64 << 10,
    )
    run_job(client, "nonnegative_sum", [tmp_path / "in.txt"], tmp_path / "out", num_reduces=2, options=options)
    assert output_dict(tmp_path / "out") == final
    folders = sorted((tmp_path / "out" / "_snapshots").iterdir())
    assert folders
    floored = bounded = 0
    for folder in folders:
        info = json.loads((folder / "_snapshot.json").read_text())
        assert all("error" not in part for part in info["partitions"]), info
        for key, row in snapshot_rows(folder).items():
            if row["low"] is None:
                continue
            bounded += 1
            assert row["value"] <= row["low"] <= row["estimate"] <= row["high"], (folder.name, key, row)
            floored += row["low"] == row["value"] and not row["final"]
    assert bounded and floored, (bounded, floored)


def test_a_nonnegative_sum_with_a_negative_value_fails_its_snapshots_not_the_job(
    client: Client, tmp_path: Path
) -> None:
    """A negative value breaks the declaration the floors rest on: the snapshots fail, naming the key and the
    declaration, and the job's result is the exact sum all the same."""
    final = _signed_sum_input(tmp_path / "in.txt", negative=True)
    options = online_options(
        load_job_file(job_path("nonnegative_sum")),
        [str(tmp_path / "in.txt")],
        snapshot_every=0.25,
        order="random",
        seed=2,
        chunk_size=64 << 10,
    )
    run_job(client, "nonnegative_sum", [tmp_path / "in.txt"], tmp_path / "out", num_reduces=1, options=options)
    assert output_dict(tmp_path / "out") == final and final["neg"] == -50
    folders = sorted((tmp_path / "out" / "_snapshots").iterdir())
    assert folders
    for folder in folders:
        info = json.loads((folder / "_snapshot.json").read_text())
        errors = [part.get("error", "") for part in info["partitions"]]
        assert all("Sum(nonnegative=True)" in e and "key 'neg' added up to -" in e for e in errors), info


def test_a_reducer_restarted_during_a_snapshot_answers_it(
    pageviews_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot request reached reducer 0, which died before answering. Its retry was once never asked, so the
    snapshot waited for the job's end and got that partition's final output as its answer; the coordinator asks each
    new attempt for the snapshots still unanswered, so every snapshot completes, the first from what was read so far."""
    report = _pageviews_with_reduce_fault("snapshot", pageviews_dir, tmp_path, monkeypatch)
    attempts = [a for a in report["attempts"] if a["task_id"] == "reduce-00000"]
    assert [a["status"] for a in attempts][-1] == "succeeded" and len(attempts) >= 2, attempts
    # (Each under the highest threshold it holds: the first, asked at 0.250, may be answered by the retry once it
    # holds half of the input, and be published as 0.500. The maps may pass the later thresholds while the retry
    # starts: those are skipped, listed by a snapshot, or, passed after the last was asked and the job ending
    # before it could ask again, have none.)
    labels = [snapshot["label"] for snapshot in report["snapshots"]]
    covered = {*labels, *(s for info in report["snapshots"] for s in info["skipped"])}
    thresholds = {"0.250", "0.500", "0.750"}
    assert labels and covered <= thresholds, report["snapshots"]
    assert thresholds - covered == set(report.get("thresholds_without_snapshot", [])), report
    assert all(float(missing) > float(labels[-1]) for missing in thresholds - covered), report["snapshots"]
    for label in labels:
        info = json.loads((tmp_path / "out" / "_snapshots" / label / "_snapshot.json").read_text())
        assert info["complete"] and info["input_fraction"] >= float(label)
    first = json.loads((tmp_path / "out" / "_snapshots" / labels[0] / "_snapshot.json").read_text())
    assert not any(p.get("final") for p in first["partitions"]), first["partitions"]


def test_hop_snapshot_on_demand_for_a_generic_reduce(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 1_200_000, seed=8, vocabulary=500)
    spec = build_spec(
        load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), num_reduces=2, spill_records=2000
    )
    job_id = client.submit(spec)
    deadline = time.monotonic() + TIMEOUT
    while client.status(job_id)["map_fraction"] < 0.2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    requested = client.snapshot_now(job_id)
    # hop snapshot names the folder (it printed "OUT/_snapshots/...", leaving the user to find OUT).
    said = subprocess.run(
        [sys.executable, "-m", "hop", "snapshot", job_id, "--coordinator", client.address],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert said.returncode == 0 and f"under {tmp_path / 'out' / '_snapshots'}/0." in said.stdout, said
    status = client.wait(job_id, timeout=TIMEOUT)
    assert status["state"] == "succeeded"
    folder = tmp_path / "out" / "_snapshots" / requested["label"]
    assert requested["label"].endswith("-now0")
    assert (folder / "_snapshot.json").exists(), "every reducer answered"
    rows = snapshot_rows(folder)
    final = output_dict(tmp_path / "out")
    assert rows and all(0 < row["value"] <= final[key] for key, row in rows.items())
    assert sum(row["value"] for row in rows.values()) < sum(final.values()), "taken before the end"
    assert all(row["estimate"] is None for row in rows.values()), "a hand-written reduce has no estimates"
    # A job run without online options reads no chunks: how much input its reducers hold is unknown (it said the
    # maps' progress, 22% of the input seen, of reducers that held nothing yet when the maps had not spilled).
    described = json.loads((folder / "_snapshot.json").read_text())
    assert described["input_fraction"] is None and described["chunks_fraction"] is None, described
    job = client.job(job_id)
    assert {task["state"] for task in job["tasks"]} == {"committed"} and job["output"] == str(tmp_path / "out")
    assert any(entry["job_id"] == job_id for entry in client.jobs())


def test_a_generic_reduces_snapshot_says_how_much_input_it_holds(client: Client, tmp_path: Path) -> None:
    """A hand-written reduce's snapshot said ``input_fraction`` = the map progress that triggered it (0.75 holding
    half the input); it now counts the input chunks its runs cover wholly, as a built-in aggregate's does: a lower
    bound (the runs of chunks still being read are in too). Checked against the words each snapshot counted."""
    source = tmp_path / "in.txt"
    generate_text(source, 4_000_000, seed=12, vocabulary=200, distribution="uniform")
    total = len(source.read_text(encoding="utf-8").split())
    online_run(client, "wordcount_nocombine", [source], tmp_path / "out", snapshot_every=0.25, order="random")
    folders = sorted((tmp_path / "out" / "_snapshots").iterdir())
    assert folders
    for folder in folders:
        described = json.loads((folder / "_snapshot.json").read_text())
        counted = sum(output_dict(folder).values()) if described["groups"] else 0
        assert described["chunks_fraction"] is not None, described
        assert described["input_fraction"] <= counted / total + 0.01, (folder.name, described, counted / total)


def test_hop_snapshot_after_a_partition_committed_completes(client: Client, tmp_path: Path) -> None:
    # Partition 0 commits seconds before partition 1: a snapshot asked for in between got no answer from the
    # committed partition (its reducer is gone), so it never completed and _job.json listed it incomplete.
    source = tmp_path / "in.txt"
    source.write_text("fast slow other\n" * 1000)
    spec = build_spec(load_job_file(job_path("slow_partition")), [str(source)], str(tmp_path / "out"), num_reduces=2)
    job_id = client.submit(spec)
    deadline = time.monotonic() + TIMEOUT
    while [task["state"] for task in client.job(job_id)["tasks"] if task["kind"] == "reduce"][:1] != ["committed"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    requested = client.snapshot_now(job_id)
    assert client.wait(job_id, timeout=TIMEOUT)["state"] == "succeeded"
    folder = tmp_path / "out" / "_snapshots" / requested["label"]
    assert (folder / "part-00000").read_bytes() == (tmp_path / "out" / "part-00000").read_bytes(), "its final output"
    described = json.loads((folder / "_snapshot.json").read_text())
    assert described["complete"]
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert [s["complete"] for s in report["snapshots"] if s["label"] == requested["label"]] == [True]


def test_stop_when_accurate_ends_early_with_the_snapshot(client: Client, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 3_000_000, seed=9, vocabulary=50)
    report = online_run(
        client,
        "slow_sum_wordcount",
        [source],
        tmp_path / "out",
        snapshot_every=0.1,
        order="random",
        chunk_size=64 << 10,
        stop_when_accurate=0.5,
    )
    approximate = report["approximate"]
    assert approximate["stop_when_accurate"] == 0.5 and approximate["max_relative_half_width"] <= 0.5
    assert approximate["input_fraction"] < 1
    folder = tmp_path / "out" / "_snapshots" / approximate["snapshot"]
    for part in sorted((tmp_path / "out").glob("part-*")):
        assert part.read_bytes() == (folder / part.name).read_bytes()
    assert (tmp_path / "out" / "_SUCCESS").exists()
    saved = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert saved["approximate"]["snapshot"] == approximate["snapshot"]
    # What the estimates' intervals are and where: the part files hold the estimates only.
    assert approximate["confidence"] == 0.95
    assert sorted((tmp_path / "out").glob(approximate["intervals"])) == sorted(folder.glob("estimates-*.jsonl")) != []
    # The estimates are close to the truth for a job this regular.
    truth: dict[str, int] = {}
    for line in source.read_text().splitlines():
        for word in line.split():
            truth[word] = truth.get(word, 0) + 1
    estimates = output_dict(tmp_path / "out")
    assert set(estimates) == set(truth)
    assert all(abs(estimates[w] - truth[w]) <= 0.5 * truth[w] for w in truth)
    # The reduce attempts the early end killed wrote under _temporary; once they are dead it is gone (bounded wait:
    # the coordinator hears of their end just after it answered the client).
    deadline = time.monotonic() + 10
    while (tmp_path / "out" / "_temporary").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (tmp_path / "out" / "_temporary").exists()


@pytest.mark.parametrize("mode", ["blocking", "pipelined"])
def test_stop_when_accurate_does_not_stop_once_every_map_committed(client: Client, tmp_path: Path, mode: str) -> None:
    """Once every map committed, the exact result waits only for the shuffle: a step with --blocking stopped early on
    a snapshot holding 11.5% of the map output (the reducers get a map's output only after it commits), calling its
    result approximate a fraction of a second before it was exact. Snapshots taken in that window, however accurate
    (here all of them: 50 words, a loose bound), no longer end the job. An early stop before the map committed is
    still right (pipelined, the reducers hold most of the input by then; blocking, with one map, they hold none)."""
    source = tmp_path / "in.txt"
    generate_text(source, 4_000_000, seed=9, vocabulary=50)
    job_class = load_job_file(job_path("wordcount"))
    options = online_options(job_class, [str(source)], order="random", chunk_size=32 << 10, stop_when_accurate=0.5)
    output = tmp_path / "out"
    spec = build_spec(
        job_class, [str(source)], str(output), num_reduces=2, split_size=8 << 20, mode=mode, options=options
    )
    job_id = client.submit(spec)
    deadline = time.monotonic() + TIMEOUT
    status = client.status(job_id)
    while status["state"] == "running" and status["maps_done"] < status["maps_total"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
        status = client.status(job_id)
    while status["state"] == "running":  # a snapshot each turn while the map output reaches the reducers
        assert time.monotonic() < deadline
        with contextlib.suppress(JobRejected):  # (it ended meanwhile)
            client.snapshot_now(job_id)
        status = client.status(job_id)
    assert status["state"] == "succeeded"
    lines = len(source.read_text().splitlines())
    report = status["report"]
    if "approximate" in report:
        assert report["counters"]["map_input_records"] < lines, f"stopped early after the map: {report['approximate']}"
        return
    truth: dict[str, int] = {}
    for word in source.read_text().split():
        truth[word] = truth.get(word, 0) + 1
    assert output_dict(output) == truth


def test_stop_when_accurate_waits_until_every_stratum_was_sampled(client: Client, tmp_path: Path) -> None:
    """Page views per (language, hour) of one day drawn in random order: each hour is one file, so an hour read is
    exact and the snapshot's intervals are all narrow while some hour has no chunk read yet; stopping there would
    drop that hour's groups."""
    one_day = tmp_path / "day"
    generate_pageviews(one_day, days=1, size_bytes=20 << 20, seed=5)
    exact = run_job(client, "pageviews", [one_day], tmp_path / "exact", num_reduces=2)
    assert exact["counters"]["reduce_output_records"] > 0
    hours = {key[1] for key in output_dict(tmp_path / "exact")}
    report = online_run(
        client,
        "pageviews",
        [one_day],
        tmp_path / "out",
        snapshot_every=0.05,
        order="random",
        seed=7,
        stop_when_accurate=0.02,
    )
    # Before the fix this job stopped early with 3 of the 24 hours; now it may stop only once every hour was read
    # (here it runs to the end: each hour is one file, read whole in its own chunk).
    approximate = report.get("approximate")
    assert approximate is None or not approximate.get("strata_unseen"), approximate
    assert {key[1] for key in output_dict(tmp_path / "out")} == hours, "every hour is in the result"


def _early_stop_report(stop_when_accurate: float, half_width: float, confidence: float) -> dict[str, Any]:
    """A job report as ``hop run`` gets it for a job ``--stop-when-accurate`` ended at snapshot 0.400, 42% in."""
    return {
        "job_id": "job-1",
        "start": 0.0,
        "end": 1.5,
        "counters": {"map_input_records": 10, "reduce_output_records": 0},
        "approximate": {
            "snapshot": "0.400",
            "input_fraction": 0.42,
            "stop_when_accurate": stop_when_accurate,
            "max_relative_half_width": half_width,
            "rows": 3,
            "confidence": confidence,
            "intervals": "_snapshots/0.400/estimates-*.jsonl",
        },
    }


def test_the_summary_of_an_early_stop_says_so(tmp_path: Path) -> None:
    from hop.cli import _summary

    report = _early_stop_report(stop_when_accurate=0.05, half_width=0.031, confidence=0.9)
    line = _summary(report, str(tmp_path))
    assert (
        "stopped early, accurate to 3.1% (asked 5.0%, each group's 90% interval) after 42.0% of the input: "
        "3 estimated rows (snapshot 0.400)"
    ) in line
    # The part files hold estimates only: the summary says where their intervals are, and what is not in them.
    assert f"intervals in {tmp_path}/_snapshots/0.400/estimates-*.jsonl" in line
    assert "groups none of whose records were read are not in it" in line
    assert "0 output records" not in line
    del report["approximate"]
    assert "10 input records, 0 output records" in _summary(report, str(tmp_path))


def test_the_summary_of_an_early_stop_says_the_confidence_and_bound_as_given(tmp_path: Path) -> None:
    """``--confidence 0.9995`` (the README's for 100 groups at once) was said as "each group's 100% interval", and
    ``--stop-when-accurate 0.0005`` as "accurate to 0.0% (asked 0.1%)": rounded to whole and tenth percents."""
    from hop.cli import _summary

    report = _early_stop_report(stop_when_accurate=0.0005, half_width=0.00042, confidence=0.9995)
    assert "accurate to 0.04% (asked 0.05%, each group's 99.95% interval)" in _summary(report, str(tmp_path))
    report["approximate"]["input_fraction"] = 0.9996  # (read "after 100.0% of the input": all of it, not early)
    assert ") after 99.96% of the input: " in _summary(report, str(tmp_path))
    del report["approximate"]
    assert "no snapshot met --stop-when-accurate 0.05% (" in _summary(report, str(tmp_path), stop_when_accurate=0.0005)


def test_cli_snapshot_options(pageviews_dir: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hop",
            "run",
            str(ROOT / "jobs" / "pageviews.py"),
            str(pageviews_dir),
            "-o",
            str(tmp_path / "out"),
            "--workers",
            "2",
            "--snapshot-every",
            "0.5",
            "--order",
            "random",
            "--seed",
            "2",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    info = json.loads((tmp_path / "out" / "_snapshots" / "0.500" / "_snapshot.json").read_text())
    strata = info["partitions"][0]["strata_seen"]
    assert set(strata) == {str(hour) for hour in range(24)}, "pageviews strata are the hours"
    assert info["order"] == "random" and "warning" not in result.stderr
    # In file order the intervals look the same, and the sample need not be random: the run and the snapshot say so.
    in_order = subprocess.run(
        [sys.executable, "-m", "hop", "run", str(ROOT / "jobs" / "pageviews.py"), str(pageviews_dir)]
        + ["-o", str(tmp_path / "in_order"), "--workers", "2", "--snapshot-every", "0.5", "--quiet"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert in_order.returncode == 0, in_order.stderr
    assert "hop: warning: snapshots of a job read in file order" in in_order.stderr
    assert "add --order random" in in_order.stderr
    described = json.loads((tmp_path / "in_order" / "_snapshots" / "0.500" / "_snapshot.json").read_text())
    assert described["order"] == "sequential"
    bad = subprocess.run(
        [sys.executable, "-m", "hop", "run", str(ROOT / "jobs" / "pageviews.py"), str(pageviews_dir), "-o", "x"]
        + ["--snapshot-every", "1.5"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
    )
    assert bad.returncode == 2 and "between 0 and 1" in bad.stderr


def test_workers_survive_spills_that_arrive_after_an_early_stop(tmp_path: Path) -> None:
    """A job ended by --stop-when-accurate while its maps still spilled: the worker deleted the job's spill files
    on ``job_done``, then registered a spill a map had sent just before and died on the missing file
    (FileNotFoundError in the pusher), so the next job of a --blocking pipeline failed with 'no live workers'."""
    from hop.local_cluster import LocalCluster

    source = tmp_path / "in.txt"
    # (30 MB: with 12 MB, one run in 5 or so had read everything by the time the first snapshot, at 5%, was answered:
    # no early stop, and the test failed on the run rather than on what it checks)
    generate_text(source, 30_000_000, seed=4, vocabulary=50)
    job_class = load_job_file(job_path("wordcount"))
    with LocalCluster(workers=2, map_slots=2, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            for attempt in range(3):  # a race: each early stop with maps spilling is a chance to lose a worker
                options = online_options(
                    job_class,
                    [str(source)],
                    snapshot_every=0.05,
                    order="random",
                    seed=attempt,
                    chunk_size=64 << 10,
                    stop_when_accurate=0.5,
                )
                spec = build_spec(
                    job_class,
                    [str(source)],
                    str(tmp_path / f"out{attempt}"),
                    split_size=1 << 20,
                    num_reduces=2,
                    options=options,
                )
                report = run_steps(client, spec, progress=False, timeout=TIMEOUT)
                assert "approximate" in report, report.get("stop_held_back")  # (why it did not stop early)
                assert report["approximate"]["input_fraction"] < 1
            time.sleep(1.0)  # spills sent before the early stop reach the workers' loops by now
            assert [process.poll() for process in cluster.workers] == [None, None], "a worker process died"
            assert [worker["alive"] for worker in client.workers()] == [True, True]
            plain = run_steps(
                client, build_spec(job_class, [str(source)], str(tmp_path / "plain")), progress=False, timeout=TIMEOUT
            )
            assert plain["status"] == "succeeded"
        finally:
            client.close()


def _lagging_wordcount(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snapshot_every: float) -> dict[str, Any]:
    """The report of a word count on 2 workers whose reducers are slower than its maps (its runs queue up),
    snapshotted every ``snapshot_every`` of its input, in ``tmp_path / "out"``."""
    from hop.local_cluster import LocalCluster

    source = tmp_path / "in.txt"
    generate_text(source, 2_000_000, seed=4, vocabulary=2000)
    monkeypatch.setenv("HOP_TEST_SLOW_REDUCE_SECONDS", "0.05")  # per run: about 1.6 s for a partition's 32 runs
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            job_class = load_job_file(job_path("wordcount"))
            options = online_options(
                job_class, [str(source)], snapshot_every=snapshot_every, order="random", seed=1, chunk_size=64_000
            )
            return run_job(client, "wordcount", [source], tmp_path / "out", num_reduces=2, options=options)
        finally:
            client.close()


def test_a_snapshot_of_a_reducer_that_lags_behind_the_maps_comes_early(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reducer slower than the maps (its runs queue up) took every run it could get before it looked at a snapshot
    request, and then every run the maps sent while it drained: each snapshot of the job held the whole input (a
    30 MB word count snapshotted every 10% gave one at 40% and the rest at 100%)."""
    report = _lagging_wordcount(tmp_path, monkeypatch, snapshot_every=0.25)
    first = report["snapshots"][0]
    info = json.loads((tmp_path / "out" / "_snapshots" / first["label"] / "_snapshot.json").read_text())
    assert info["chunks_fraction"] < 0.75, info["partitions"]


def test_a_lagging_reducers_snapshots_hold_what_their_labels_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reducer behind the maps answered each threshold's request with what it held as it got to it, and the
    requests queued while it took a snapshot with one snapshot: a word count snapshotted every 0.1 had 0.400 to
    0.900 holding the same 37% of the input (copied under each label), and 0.900 alone 51%. Now every snapshot holds
    at least its label's fraction of the input, and no two the same."""
    report = _lagging_wordcount(tmp_path, monkeypatch, snapshot_every=0.1)
    folders = sorted((tmp_path / "out" / "_snapshots").iterdir())
    infos = [json.loads((folder / "_snapshot.json").read_text()) for folder in folders]
    assert infos and [info["label"] for info in infos] == [folder.name for folder in folders]
    held = [(info["label"], info["input_fraction"]) for info in infos]
    assert all(fraction >= float(label) - 1e-9 for label, fraction in held), held
    fractions = [fraction for _, fraction in held]
    assert fractions == sorted(set(fractions)), f"no two snapshots hold the same: {held}"
    labels = {info["label"] for info in infos}
    skipped = {label for info in infos for label in info["skipped"]}
    assert not labels & skipped and labels | skipped <= {f"0.{tenth}00" for tenth in range(1, 10)}, infos
    assert [s["label"] for s in report["snapshots"]] == [info["label"] for info in infos]
    unsaid = set(report.get("thresholds_without_snapshot", []))
    assert labels | skipped | unsaid == {f"0.{tenth}00" for tenth in range(1, 10)} and not unsaid & (labels | skipped)


def test_an_empty_input_has_no_snapshots(client: Client, tmp_path: Path) -> None:
    """A zero-byte input has no fraction to reach before the end: it had a snapshot labelled 0.900, of nothing,
    whose _snapshot.json said it held 0.0 of the input (and 1.0 of its chunks)."""
    source = tmp_path / "empty.txt"
    source.write_bytes(b"")
    report = online_run(client, "wordcount", [source], tmp_path / "out", snapshot_every=0.3, order="random")
    assert report["status"] == "succeeded" and not report.get("snapshots")
    assert not (tmp_path / "out" / "_snapshots").exists()
    assert read_output(tmp_path / "out") == []


def test_a_blocking_online_job_has_a_map_per_snapshot_interval(client: Client, tmp_path: Path) -> None:
    """With --blocking a reducer gets a map's output when the map commits, and a small job's maps were one wave (a map
    per slot) that committed together at the end: every snapshot held nothing, and --stop-when-accurate (which a
    pipeline needs --blocking for) could never stop early. Now such a job has a map per snapshot interval."""
    source = tmp_path / "in.txt"
    generate_text(source, 2_000_000, seed=4, vocabulary=200)
    job_class = load_job_file(job_path("wordcount"))
    options = online_options(job_class, [str(source)], snapshot_every=0.25, order="random", seed=1, chunk_size=64_000)
    report = run_job(client, "wordcount", [source], tmp_path / "out", num_reduces=2, mode="blocking", options=options)
    assert report["num_maps"] == 4, "a map per snapshot interval (0.25), not one per slot"
    plain = run_job(client, "wordcount", [source], tmp_path / "plain", num_reduces=2, mode="blocking")
    assert plain["num_maps"] == 2 and output_dict(tmp_path / "plain") == output_dict(tmp_path / "out")


def test_snapshots_of_a_hand_written_reduce_leave_the_attempts_job_alone(client: Client, tmp_path: Path) -> None:
    """A snapshot's reduce ran on the final reduce's job instance before its setup() (one reading what setup() made
    failed every snapshot), and what it counted was the job's: in its user counters (800 groups counted for 200
    words) and in ``self`` (a reducer_final yielding a count the reduce kept). Snapshots now have an instance of
    their own, set up before the first."""
    source = tmp_path / "in.txt"
    generate_text(source, 2_000_000, seed=4, vocabulary=200)
    words = len(set(source.read_text(encoding="utf-8").split()))
    job_class = load_job_file(job_path("setup_reduce"))
    options = online_options(job_class, [str(source)], snapshot_every=0.25, order="random", seed=1, chunk_size=64_000)
    report = run_job(
        client, "setup_reduce", [source], tmp_path / "out", num_reduces=2, mode="blocking", options=options
    )
    taken = [json.loads(folder.read_text()) for folder in (tmp_path / "out" / "_snapshots").glob("*/_snapshot.json")]
    assert taken and all(p.get("error") is None for info in taken for p in info["partitions"]), taken
    assert any(not p.get("final") and p["groups"] for info in taken for p in info["partitions"]), "taken early"
    assert report["counters"]["user"] == {"reduce": {"groups": words}}
    output = read_output(tmp_path / "out")
    assert sum(value for key, value in output if key == "~groups") == words
    assert len(output) == words + 2


def test_a_reducer_killed_while_writing_a_snapshot_leaves_no_files_behind(
    pageviews_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reduce attempt killed half-way through writing a snapshot (its job cancelled or stopped early, its worker
    lost) left its hidden temporaries (``.part-00000.PID.tmp``, ``.estimates-00000.jsonl.PID.tmp``: 8 MB for a
    cancelled word count) in ``OUT/_snapshots/<label>/`` of the job's output for good."""
    report = _pageviews_with_reduce_fault("snapshotting", pageviews_dir, tmp_path, monkeypatch)
    attempts = [a["status"] for a in report["attempts"] if a["task_id"] == "reduce-00000"]
    assert len(attempts) >= 2 and attempts[-1] == "succeeded", attempts
    snapshots = tmp_path / "out" / "_snapshots"
    assert [p.name for p in snapshots.iterdir()], "the retry answered the snapshots"
    assert [str(p.relative_to(snapshots)) for p in snapshots.rglob(".*")] == []


def test_a_cancelled_jobs_snapshot_count_is_of_those_it_wrote(client: Client, tmp_path: Path) -> None:
    """A job's summary (``hop status``'s listing, the web view's ``/api/jobs``) counted the snapshots asked for, not
    those every partition answered: the page of a cancelled job said "its 4 snapshots so far stay in
    OUT/_snapshots/" where one had been written."""
    source = tmp_path / "in.txt"
    generate_text(source, 1_200_000, seed=8, vocabulary=500)
    # Five reducers for four reduce slots: the fifth cannot answer while the maps run.
    spec = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), num_reduces=5)
    job_id = client.submit(spec)
    deadline = time.monotonic() + TIMEOUT
    while client.status(job_id)["map_fraction"] < 0.1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    requested = client.snapshot_now(job_id)
    client.stop(job_id)
    assert client.wait(job_id, timeout=TIMEOUT)["state"] == "failed"
    assert not (tmp_path / "out" / "_snapshots" / requested["label"] / "_snapshot.json").exists()
    assert client.job(job_id)["snapshots"] == 0
    assert [job["snapshots"] for job in client.jobs() if job["job_id"] == job_id] == [0]


def _pageviews_with_reduce_fault(
    point: str, pageviews_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The page views job with snapshots every 25% on 2 workers, reduce 0's first attempt killed at ``point``
    (``hop.faults``); its report."""
    from hop.local_cluster import LocalCluster

    monkeypatch.setenv("HOP_FAULT", f"reduce:{point}:0")
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as cluster:
        client = Client(cluster.address)
        try:
            return online_run(client, "pageviews", [pageviews_dir], tmp_path / "out", snapshot_every=0.25, seed=3)
        finally:
            client.close()


def _partial_snapshots(output: Path) -> list[str]:
    """What in ``OUT/_snapshots/`` a reader could take for a snapshot that is not one: a folder without its
    ``_snapshot.json``, or a file being written (a hidden temporary)."""
    folders = sorted(output.glob("_snapshots/*"))
    partial = [f"{f.name}/ ({len(list(f.iterdir()))} files)" for f in folders if not (f / "_snapshot.json").exists()]
    return partial + [str(path.relative_to(output)) for path in output.glob("_snapshots/**/.*")]


def test_a_job_cancelled_while_a_snapshot_is_assembled_keeps_only_its_complete_snapshots(
    pageviews_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's partitions went straight into ``OUT/_snapshots/<label>/`` as each answered, its
    ``_snapshot.json`` once the last had: a job cancelled in between (``hop stop``) left that folder, some partitions'
    files and no ``_snapshot.json``, for good, and while the job ran it was there for a reader to take as a
    snapshot. Here partition 0 commits (its final output answers ``hop snapshot``) while reducer 1 is held before its
    merge, so a snapshot asked for then has one partition of two when the job is cancelled."""
    from hop.local_cluster import LocalCluster

    monkeypatch.setenv("HOP_FAULT", "reduce:received:1:0:pause")
    output = tmp_path / "out"
    job_class = load_job_file(job_path("pageviews"))
    options = online_options(job_class, [str(pageviews_dir)], snapshot_every=0.25, seed=3)
    spec = build_spec(job_class, [str(pageviews_dir)], str(output), num_reduces=2, split_size=1 << 20, options=options)
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            job_id = client.submit(spec)
            deadline = time.monotonic() + TIMEOUT
            # Reducer 1 reports half its work done (its input in) right before the fault holds it: from then on it
            # answers no snapshot, and its answers from before have reached the coordinator (they came the same way,
            # earlier). Its state "running" alone came sooner: on a loaded machine it still answered the snapshot
            # asked for below, or one asked for while the maps ran completed after the list below was taken.
            while [
                (t["state"], t["fraction"] >= 0.5) for t in client.job(job_id)["tasks"] if t["kind"] == "reduce"
            ] != [
                ("committed", True),
                ("running", True),
            ]:
                assert time.monotonic() < deadline, "partition 0 committed, reducer 1 held before its merge"
                time.sleep(0.05)
            requested = client.snapshot_now(job_id)
            while not [s for s in client.snapshots(job_id) if s["label"] == requested["label"] and s["partitions"]]:
                assert time.monotonic() < deadline, "partition 0 answered the snapshot"
                time.sleep(0.05)
            described = {s["label"]: s for s in client.snapshots(job_id)}
            assert not described[requested["label"]]["complete"]
            assert _partial_snapshots(output) == [], "a reader of OUT/_snapshots/ sees whole snapshots only"
            client.stop(job_id)
            assert client.wait(job_id, timeout=TIMEOUT)["state"] == "failed"
        finally:
            client.close()
    complete = sorted(label for label, snapshot in described.items() if snapshot["complete"])
    assert complete, "snapshots completed while the maps ran"
    assert sorted(folder.name for folder in output.glob("_snapshots/*")) == complete, "the complete ones stay"
    assert _partial_snapshots(output) == []
    assert not list(output.rglob(".*")) and not (output / "_temporary").exists()


def test_ctrl_c_on_hop_run_while_a_snapshot_is_written_leaves_no_partial_snapshot(
    pageviews_dir: Path, tmp_path: Path
) -> None:
    """Ctrl-C on ``hop run`` while reducer 1 is half-way through writing a snapshot's files (held there) and
    reducer 0 has written its own: the job is cancelled, and neither partition's files are left in
    ``OUT/_snapshots/`` (they were, in each of 3 runs), nor in ``OUT/_temporary``: reducer 0 may write a later
    snapshot after the job ended, which the coordinator removes once it hears the reducer was killed, and the
    embedded cluster was stopped before that (1 run in 3 left it)."""
    output = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("pageviews"), str(pageviews_dir), "-o", str(output)]
    options = ["--workers", "2", "--reducers", "2", "--split-size", str(1 << 20), "--quiet"]
    online = ["--snapshot-every", "0.25", "--order", "random", "--seed", "3"]
    environment = {**os.environ, "HOP_FAULT": "reduce:snapshotting:1:0:pause"}
    run = subprocess.Popen([*command, *options, *online], env=environment, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (list(output.rglob("estimates-00000.jsonl")) and list(output.rglob(".part-00001.*.tmp"))):
            assert time.monotonic() < deadline and run.poll() is None, "both reducers writing the first snapshot"
            time.sleep(0.02)
        assert _partial_snapshots(output) == [], "a reader of OUT/_snapshots/ sees whole snapshots only"
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate(timeout=10)
    assert run.returncode == 130, stderr
    assert _partial_snapshots(output) == [], stderr
    left = sorted(str(path.relative_to(output)) for path in output.rglob("*"))
    assert not list(output.rglob(".*")) and not (output / "_temporary").exists(), left
