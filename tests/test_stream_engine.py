"""Continuous queries on real processes: replayed streams through tumbling and sliding windows give, per window,
exactly what a batch computation over that window's records gives (computed with Spark SQL), with and without
``uncombine``; record windows over a ZeroMQ source; late records land in ``OUT/_late``; a worker killed
mid-stream is recovered from checkpoints and every window is still exact; ``hop stop`` drains a stream that never
ends.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq

from hop import protocol
from hop.cli import SAME_SIGNAL_SECONDS
from hop.client import Client
from hop.coordinator import SOURCE_SLOT_GRACE_SECONDS
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import ProgressDisplay, build_spec
from hop.stream.options import stream_options
from hop.stream.runner import run_stream
from hop.stream.tasks import run_stream_map
from hop.stream.windows import WindowSpec
from shuffle import codec
from tests.conftest import ROOT, PairChannel, hop, job_path, output_dict, run_job

pytestmark = pytest.mark.slow

T0 = 1_700_000_000.0
WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]


def write_events(path: Path, count: int, rate: float, seed: int, disorder: float = 0.0) -> list[dict[str, Any]]:
    """JSON-line events ``{"ts", "text"}``, ``rate`` per second of event time. Times keep clear of whole
    milliseconds so no event sits exactly on a pane boundary, where float rounding could differ between engines.
    ``disorder`` moves that share of events back in time by up to 3 s (out-of-order arrivals)."""
    rng = random.Random(seed)
    events, now = [], T0
    for _ in range(count):
        now += rng.expovariate(rate)
        stamp = round(now, 3) + 0.0004
        if disorder and rng.random() < disorder:
            stamp -= rng.uniform(0.5, 3.0)
        events.append({"ts": stamp, "text": " ".join(rng.choices(WORDS, k=rng.randint(1, 4)))})
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return events


def read_windows(output: Path) -> dict[float, tuple[dict[str, Any], dict[Any, Any]]]:
    """window start -> (its _window.json, its rows from every part file)."""
    windows = {}
    for folder in sorted((output / "windows").iterdir()):
        meta = json.loads((folder / "_window.json").read_text())
        rows: dict[Any, Any] = {}
        for part in sorted(folder.glob("part-*")):
            for line in part.read_text(encoding="utf-8").splitlines():
                key, value = line.split("\t")
                decoded = json.loads(key)
                rows[tuple(decoded) if isinstance(decoded, list) else decoded] = json.loads(value)
        windows[meta["start"]] = (meta, rows)
    return windows


def python_windows(events: list[dict[str, Any]], size: float, slide: float) -> dict[float, dict[str, int]]:
    """Word counts per sliding window by event time, straight from the events (windows aligned to the epoch)."""
    import math

    result: dict[float, Counter[str]] = {}
    for event in events:
        last = math.floor(event["ts"] / slide)
        first = math.floor((event["ts"] - size) / slide) + 1
        for number in range(first, last + 1):
            result.setdefault(number * slide, Counter()).update(event["text"].split())
    return {start: dict(counts) for start, counts in result.items()}


TEST_ONLY_JOBS = {"EventAmounts", "EventTagCounts", "EventWordLists", "SlowEventWordCount"}
"""In ``tests/jobs/stream_events.py``; the other classes are ``jobs/event_wordcount.py``'s."""


def run_stream_job(
    client: Client, job_class: str, sources: list[str], output: Path, window: str, slide: str | None = None, **more: Any
) -> dict[str, Any]:
    reducers = more.pop("num_reduces", 2)
    options = stream_options(sources, window, slide, **more)
    spec = build_spec(
        load_job_file(job_path("stream_events" if job_class in TEST_ONLY_JOBS else "event_wordcount"), job_class),
        [],
        str(output),
        num_reduces=reducers,
        options={"stream": options, "max_attempts": 4},
    )
    status = run_stream(client, spec, progress=False, timeout=120, view_interval=None)
    return dict(status["report"])


@pytest.fixture(scope="module")
def stream_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=2, map_slots=2, reduce_slots=2) as local:
        yield local


@pytest.fixture()
def stream_client(stream_cluster: LocalCluster) -> Iterator[Client]:
    connection = Client(stream_cluster.address, timeout=30)
    yield connection
    connection.close()


def spark_windows(spark: Any, events_path: Path, size: int, slide: int) -> dict[float, dict[str, int]]:
    """The batch answer: Spark SQL's own sliding windows over the same events."""
    from pyspark.sql import functions as F

    frame = spark.read.json(str(events_path))
    words = frame.select(
        F.col("ts").cast("timestamp").alias("at"), F.explode(F.split(F.col("text"), " ")).alias("word")
    )
    grouped = words.groupBy(F.window("at", f"{size} seconds", f"{slide} seconds"), "word").count()
    result: dict[float, dict[str, int]] = {}
    for row in grouped.select(F.col("window.start").cast("double").alias("start"), "word", "count").collect():
        result.setdefault(float(row["start"]), {})[row["word"]] = int(row["count"])
    return result


@pytest.mark.parametrize(
    ("job_class", "window", "slide"),
    [
        ("EventWordCount", 5, 5),  # tumbling
        ("EventWordCount", 10, 2),  # sliding, panes merged
        ("EventWordCountDifferential", 10, 2),  # sliding, built differentially with uncombine
    ],
)
def test_replayed_stream_windows_equal_spark_batch(
    stream_client: Client, spark: Any, tmp_path: Path, job_class: str, window: int, slide: int
) -> None:
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 4000, rate=80.0, seed=window * 10 + slide)
    report = run_stream_job(
        stream_client, job_class, [f"replay:{events_path}"], tmp_path / "out", f"{window}s", f"{slide}s"
    )
    got = read_windows(tmp_path / "out")
    expected = spark_windows(spark, events_path, window, slide)
    assert expected == python_windows(events, window, slide)  # the two batch answers agree
    assert sorted(got) == sorted(expected)
    for start, (meta, rows) in got.items():
        assert rows == expected[start], f"window {meta['label']}"
        assert meta["reason"] == "complete"
        assert meta["end"] - meta["start"] == window
        assert set("".join(meta["scoreboard"]["grid"])) <= {"D", "E"}  # every cell present
        assert meta["records"] == sum(1 for e in events if start <= e["ts"] < start + window)
    assert report["continuous"]["windows_written"] == len(expected)
    assert report["counters"]["map_input_records"] == len(events)


def test_generic_reduce_gets_every_value_of_the_window(stream_client: Client, tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 1500, rate=100.0, seed=3)
    run_stream_job(stream_client, "EventWordLists", [f"replay:{events_path}"], tmp_path / "out", "4s", "2s")
    for start, (_, rows) in read_windows(tmp_path / "out").items():
        expected: dict[str, list[int]] = {}
        for event in events:
            if start <= event["ts"] < start + 4:
                for word in event["text"].split():
                    expected.setdefault(word, []).append(int(event["ts"]))
        assert rows == {word: sorted(stamps) for word, stamps in expected.items()}


def test_keep_windows_keeps_the_newest_window_folders_as_the_job_runs(tmp_path: Path) -> None:
    """A job runs for days: without --keep-windows its window folders (a few a second with a short slide) pile up
    in OUT/windows for good. With it, the newest N stay, each whole; the report counts every window written."""
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"w{i % 7} x\n" for i in range(400)))
    out = tmp_path / "out"
    command = ["run", str(job_path("event_wordcount")), "--job-class", "ArrivalWordCount", "--source"]
    command += [f"replay:{lines}?rate=400", "--window", "10r", "--keep-windows", "4", "--no-view", "--quiet"]
    result = hop(*command, "--workers", "1", "--timeout", "120", "-o", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "_job.json").read_text())
    assert report["continuous"]["windows_written"] == 40
    folders = sorted(folder.name for folder in (out / "windows").iterdir())
    assert folders == [f"{position:015d}" for position in range(360, 400, 10)]
    for folder in folders:
        meta = json.loads((out / "windows" / folder / "_window.json").read_text())
        assert meta["records"] == 10
        parts = (out / "windows" / folder).glob("part-*")
        assert sum(int(line.split("\t")[1]) for part in parts for line in part.read_text().splitlines()) == 20


def test_late_records_go_to_late_output_never_into_a_window(stream_client: Client, tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 3000, rate=100.0, seed=5, disorder=0.05)
    report = run_stream_job(stream_client, "EventWordCount", [f"replay:{events_path}"], tmp_path / "out", "2s")
    late_lines = (tmp_path / "out" / "_late" / "map-00000.jsonl").read_text().splitlines()
    late = [json.loads(line) for line in late_lines]
    assert late, "5% of events arrive up to 3 s late with no lateness allowed: some must be late"
    assert report["counters"]["late_records"] == len(late)
    late_keys = Counter((round(r["event_time"], 4), r["value"]["text"]) for r in late)
    on_time = [e for e in events if late_keys[(round(e["ts"], 4), e["text"])] == 0]
    for start, (_, rows) in read_windows(tmp_path / "out").items():
        expected = Counter()
        for event in on_time:
            if start <= event["ts"] < start + 2:
                expected.update(event["text"].split())
        assert rows == dict(expected)
    windowed = sum(meta["records"] for meta, _ in read_windows(tmp_path / "out").values())
    assert windowed + len(late) == len(events), "every record is in a window or in _late, none lost"


@pytest.mark.timeout(240)
def test_a_record_stamped_far_in_the_future_does_not_hang_the_reducers(stream_client: Client, tmp_path: Path) -> None:
    # The last record's stamp is in milliseconds where seconds are meant: ~5e4 years of empty one-second windows
    # lie between it and the rest, which the reducers once closed one by one (a hang).
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 300, rate=100.0, seed=8)
    far = {"ts": events[-1]["ts"] * 1000, "text": "alpha"}
    with events_path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(far) + "\n")
    report = run_stream_job(stream_client, "EventWordCount", [f"replay:{events_path}"], tmp_path / "out", "1s")
    got = read_windows(tmp_path / "out")
    far_start = float(int(far["ts"]))
    assert got.pop(far_start)[1] == {"alpha": 1}
    assert {start: rows for start, (_, rows) in got.items()} == python_windows(events, 1, 1)
    assert report["continuous"]["windows_written"] == len(got) + 1


def test_records_stamped_before_1970_are_in_their_windows(stream_client: Client, tmp_path: Path) -> None:
    """A negative pane was taken for the mark of a spill holding no pane (-1): the records of event times before
    the epoch were counted as read, and were in no window, not late, not bad."""
    events = [{"ts": ts, "text": text} for ts, text in [(-12.0, "a"), (-5.5, "b a"), (-0.25, "c"), (0.0, "d")]]
    events_path = tmp_path / "events.jsonl"
    events_path.write_text("".join(json.dumps(event) + "\n" for event in events))
    report = run_stream_job(stream_client, "EventWordCountDifferential", [f"replay:{events_path}"], tmp_path / "out",
                            "10s", "5s", lateness=60.0)  # fmt: skip
    assert {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()} == python_windows(events, 10, 5)
    assert report["counters"]["map_input_records"] == 4 and report["counters"]["late_records"] == 0


def test_a_stamp_too_large_to_name_a_window_is_a_bad_record(stream_client: Client, tmp_path: Path) -> None:
    # 1e300 s: its window's folder name (E and the start in microseconds) was 302 characters, which no file system
    # takes; every reduce attempt failed on it ("File name too long") and so did the job.
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 50, rate=100.0, seed=9)
    with events_path.open("a", encoding="utf-8") as file:
        file.write(json.dumps({"ts": 1e300, "text": "alpha"}) + "\n")
    report = run_stream_job(stream_client, "EventWordCount", [f"replay:{events_path}"], tmp_path / "out", "1s")
    assert {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()} == python_windows(events, 1, 1)
    assert report["counters"]["bad_records_skipped"] == 1
    assert report["continuous"]["bad_records"] == {f"replay:{events_path}": 1}


def test_a_retried_map_lists_each_late_record_once(
    stream_cluster: LocalCluster, stream_client: Client, tmp_path: Path
) -> None:
    """A map killed mid-stream is retried from its checkpoint and reads its replayed source again from there: the late
    records it had appended to ``OUT/_late/map-00000.jsonl`` since that checkpoint were appended again (648 lines for
    641 late records), as ``late_records`` did not count them."""
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 3000, rate=100.0, seed=13, disorder=0.2)
    output = tmp_path / "out"
    killed: list[int] = []

    def kill_the_map() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(output.glob("windows/*/_window.json"))) < 5:
            time.sleep(0.05)
        watcher = Client(stream_cluster.address, timeout=30)
        try:
            job = next(j for j in watcher.jobs() if j["output"] == str(output))
            task = next(t for t in watcher.job(job["job_id"])["tasks"] if t["kind"] == "map")
        finally:
            watcher.close()
        os.kill(task["pid"], signal.SIGKILL)
        killed.append(task["pid"])

    killer = threading.Thread(target=kill_the_map)
    killer.start()
    try:
        report = run_stream_job(
            stream_client, "EventWordCount", [f"replay:{events_path}?rate=600"], output, "1s", checkpoint_seconds=0.5
        )
    finally:
        killer.join(timeout=70)
    assert killed and len([a for a in report["attempts"] if a["kind"] == "map"]) == 2, report["attempts"]
    listed = (output / "_late" / "map-00000.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(listed) == report["counters"]["late_records"] > 0
    assert len(set(listed)) == len(listed), "a late record listed twice"


def test_a_retried_reducer_lists_each_late_cell_once(
    stream_cluster: LocalCluster, stream_client: Client, tmp_path: Path
) -> None:
    """A reducer killed mid-stream restores its checkpoint and is sent every spill since again: the late cells it had
    appended to ``OUT/_late/reduce-00000.jsonl`` since that checkpoint were appended again (45 lines for 29
    ``late_cells``). Late cells come from a slow second source under ``--max-latency``."""
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 1500, rate=100.0, seed=14)
    output = tmp_path / "out"
    killed: list[int] = []

    def kill_the_reducer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(output.glob("_late/reduce-00000.jsonl"))) < 1:
            time.sleep(0.05)
        time.sleep(1.5)  # some late cells past a checkpoint
        watcher = Client(stream_cluster.address, timeout=30)
        try:
            job = next(j for j in watcher.jobs() if j["output"] == str(output))
            task = next(t for t in watcher.job(job["job_id"])["tasks"] if t["kind"] == "reduce")
        finally:
            watcher.close()
        os.kill(task["pid"], signal.SIGKILL)
        killed.append(task["pid"])

    killer = threading.Thread(target=kill_the_reducer)
    killer.start()
    try:
        sources = [f"replay:{events_path}?rate=1000", f"replay:{events_path}?rate=250"]
        report = run_stream_job(
            stream_client, "EventWordCount", sources, output, "1s", num_reduces=1, max_latency=0.5,
            checkpoint_windows=1000, checkpoint_seconds=5,  # late cells pass after the reducer's checkpoint, if any
        )  # fmt: skip
    finally:
        killer.join(timeout=70)
    assert killed and len([a for a in report["attempts"] if a["kind"] == "reduce"]) == 2, report["attempts"]
    listed = (output / "_late" / "reduce-00000.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(listed) == report["counters"]["late_cells"] > 0
    assert len(set(listed)) == len(listed), "a late cell listed twice"


def test_allowed_lateness_takes_out_of_order_records(stream_client: Client, tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 2000, rate=100.0, seed=6, disorder=0.05)
    report = run_stream_job(
        stream_client, "EventWordCount", [f"replay:{events_path}"], tmp_path / "out", "2s", lateness=4.0
    )
    assert report["counters"]["late_records"] == 0
    assert {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()} == python_windows(events, 2, 2)


def _late_by_order(offsets: list[float], pane: float, lateness: float) -> list[int]:
    """The late records (their indexes) by the rule: a record is late when its pane lies below the pane of the
    greatest event time read before it, less the lateness."""
    late, highest = [], float("-inf")
    for number, offset in enumerate(offsets):
        if highest > float("-inf") and offset // pane < (highest - lateness) // pane:
            late.append(number)
        else:
            highest = max(highest, offset)
    return late


@pytest.mark.parametrize(
    "offsets, window, slide, lateness",
    [
        ([0, 1, 2, 30, 3, 4, 35, 5, 41, 6, 42, 33], "10s", None, 0.0),
        ([round(i * 0.05 - random.Random(i).random() * 3 * (i % 7 == 0), 3) for i in range(400)], "4s", "2s", 1.5),
    ],
    ids=["tumbling", "sliding-with-lateness"],
)
def test_which_records_are_late_depends_on_their_order_not_on_how_they_were_polled(
    stream_client: Client, tmp_path: Path, offsets: list[float], window: str, slide: str | None, lateness: float
) -> None:
    """The watermark moves record by record: the same file read in one poll or paced a few records at a time gives
    the same late records and windows (it moved once per poll, so a fast replay let records in that a slow one
    called late)."""
    events = [{"ts": T0 + offset, "text": f"w{number}"} for number, offset in enumerate(offsets)]
    events_path = tmp_path / "events.jsonl"
    events_path.write_text("".join(json.dumps(event) + "\n" for event in events))
    pane = math.gcd(int(window[:-1]), int((slide or window)[:-1]))
    late = _late_by_order(offsets, pane, lateness)
    assert late, "the input has late records"
    kept = [event for number, event in enumerate(events) if number not in set(late)]
    size, step = int(window[:-1]), int((slide or window)[:-1])
    expected: dict[float, dict[str, int]] = {}
    for event in kept:
        first = math.floor((event["ts"] - T0 - size) / step) + 1
        for start in range(first * step, int(event["ts"] - T0) + 1, step):
            if start <= event["ts"] - T0 < start + size:
                expected.setdefault(T0 + start, {})[event["text"]] = 1
    rate = 25 if len(events) < 50 else 800
    for name, source in (("fast", f"replay:{events_path}"), ("paced", f"replay:{events_path}?rate={rate}")):
        report = run_stream_job(
            stream_client, "EventWordCount", [source], tmp_path / name, window, slide, lateness=lateness
        )
        assert report["counters"]["late_records"] == len(late), name
        assert {start: rows for start, (_, rows) in read_windows(tmp_path / name).items()} == expected, name


def test_the_coordinator_ends_a_job_at_its_duration_without_a_client(stream_client: Client, tmp_path: Path) -> None:
    """``--duration`` used to be kept by the submitting client: a client that went away left the job running for
    ever. The coordinator stops it now; here no client waits while it runs."""
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "app.log").write_text("a b\nb\n")
    duration = 3.0
    options = stream_options([f"tail:{tmp_path / 'logs'}"], "1s", duration=duration)
    spec = build_spec(
        load_job_file(job_path("stream_wordcount")),
        [],
        str(tmp_path / "out"),
        num_reduces=1,
        options={"stream": options},
    )
    began = time.monotonic()
    job_id = stream_client.submit(spec)
    # Asked at once, answered within its duration but on a machine stalled for as long (a 0.5 s sleep, then a check
    # with 1 s to spare, failed under load); that it was not stopped early is checked on the coordinator's clock.
    assert stream_client.status(job_id)["state"] == "running"
    status = stream_client.wait(job_id, timeout=30)
    report = status["report"]
    assert status["state"] == "succeeded" and report["continuous"]["stopped"] is True
    assert report["end"] - report["start"] >= duration, "stopped at its duration, not before (coordinator's clock)"
    assert duration <= time.monotonic() - began < 20
    assert sum(rows.get("b", 0) for _, rows in read_windows(tmp_path / "out").values()) == 2


def test_a_stopped_job_that_cannot_drain_in_time_is_ended_with_its_report(
    stream_client: Client, tmp_path: Path
) -> None:
    """A stopped job still draining after the stop timeout (here: windows of an hour sliding by a second, 3,600 of
    which hold the open pane and are written as it stops, far from done in 1 s) is ended at once, as a second
    Ctrl-C ends it: ``hop run`` used to give up waiting and leave it, and the embedded cluster, stopped with it, left
    no ``_job.json`` at all."""
    (tmp_path / "events.jsonl").write_text("".join(json.dumps({"ts": T0, "text": "a b"}) + "\n" for _ in range(2)))
    options = stream_options([f"replay:{tmp_path / 'events.jsonl'}"], "1h", "1s")
    output = tmp_path / "out"
    spec = build_spec(
        load_job_file(job_path("event_wordcount"), "EventWordCount"),
        [],
        str(output),
        num_reduces=1,
        options={"stream": options},
    )
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not drain within 1s, so it was ended: .* ended without draining"):
        run_stream(stream_client, spec, progress=False, timeout=1, view_interval=None, stop_timeout=1)
    assert time.monotonic() - began < 30
    report = json.loads((output / "_job.json").read_text())
    assert report["status"] == "interrupted"
    assert stream_client.status(report["job_id"])["state"] == "interrupted"


def test_the_run_counts_one_record_and_one_row_in_the_singular(
    stream_client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A window of one record and one row was shown as '1 records, 1 rows'."""
    (tmp_path / "events.jsonl").write_text(json.dumps({"ts": T0, "text": "a"}) + "\n")
    spec = build_spec(
        load_job_file(job_path("event_wordcount"), "EventWordCount"),
        [],
        str(tmp_path / "out"),
        num_reduces=1,
        options={"stream": stream_options([f"replay:{tmp_path / 'events.jsonl'}"], "1s")},
    )
    run_stream(stream_client, spec, progress=True, timeout=60, view_interval=None)
    assert re.search(r"^hop: window \S+: 1 record, 1 row, complete", capsys.readouterr().err, re.MULTILINE)


def test_a_continuous_task_takes_a_slot_of_the_other_kind_when_its_own_are_taken(tmp_path: Path) -> None:
    """A cluster with no stream slot free (none here; after a lost worker, in practice), one map slot and two
    reduce slots: the second of two stream maps waited for ever for a map slot while a reduce slot idled (the
    cluster monitor lost a source's rows that way once a worker died). It takes the reduce slot now."""
    sources = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "app.log").write_text(f"{name}\n{name}\n")  # a whole 2r window
        sources.append(f"tail:{tmp_path / name}")
    spec = build_spec(
        load_job_file(job_path("stream_wordcount")),
        [],
        str(tmp_path / "out"),
        num_reduces=1,
        options={"stream": stream_options(sources, "2r")},
    )
    with LocalCluster(workers=1, map_slots=1, reduce_slots=2, stream_slots=0) as local:
        client = Client(local.address, timeout=30)
        try:
            job_id = client.submit(spec)
            deadline = time.monotonic() + 20
            states: list[str] = []
            while time.monotonic() < deadline and states != ["running"] * 3:
                states = [task["state"] for task in client.job(job_id)["tasks"]]
                time.sleep(0.1)
            while time.monotonic() < deadline and not client.windows(job_id):
                time.sleep(0.1)
            client.stop(job_id)
            status = client.wait(job_id, timeout=30)
        finally:
            client.close()
    assert states == ["running"] * 3, states
    assert status["state"] == "succeeded"
    assert [(meta["reason"], rows) for meta, rows in read_windows(tmp_path / "out").values()] == [
        ("complete", {"a": 2, "b": 2})
    ]


def test_record_windows_over_zeromq(stream_client: Client, tmp_path: Path) -> None:
    """``--window 500r`` over a ZeroMQ PULL source fed msgpack records; stopped with ``hop stop``'s message."""
    context = zmq.Context.instance()
    with socket_port() as port:
        endpoint = f"tcp://127.0.0.1:{port}"
    events = [{"ts": T0 + i, "text": " ".join(random.Random(i).choices(WORDS, k=2))} for i in range(2600)]
    result: dict[str, Any] = {}

    def run() -> None:
        result["report"] = run_stream_job(
            stream_client_for_thread, "EventWordCount", [f"zmq:{endpoint}"], tmp_path / "out", "500r", num_reduces=1
        )

    stream_client_for_thread = Client(stream_client.address, timeout=30)
    runner = threading.Thread(target=run)
    runner.start()
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(endpoint)
    try:
        for event in events:
            push.send(msgpack.packb(event))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done = list((tmp_path / "out" / "windows").glob("*/_window.json"))
            if len(done) >= 5:
                break
            time.sleep(0.1)
        jobs = [j for j in stream_client.jobs() if j["output"] == str(tmp_path / "out") and j["state"] == "running"]
        assert jobs, "the continuous job should still be running"
        address = ["--coordinator", stream_client.address]
        listed = hop("windows", jobs[0]["job_id"], *address, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert [json.loads(line)["start"] for line in listed.stdout.splitlines()][:5] == [0, 500, 1000, 1500, 2000]
        newest = hop("windows", jobs[0]["job_id"], *address, "--limit", "2", timeout=60)
        assert newest.returncode == 0 and len(newest.stdout.splitlines()) == 2, newest.stderr
        assert "older windows not listed (past --limit 2): use --after SEQ" in newest.stderr, newest.stderr
        every = hop("windows", jobs[0]["job_id"], *address, "--after", "1", "--limit", "0", timeout=60)  # 0: all kept
        starts = [json.loads(line)["start"] for line in every.stdout.splitlines()]
        assert every.returncode == 0 and starts[:4] == [500, 1000, 1500, 2000], every.stderr
        assert len(starts) >= len(listed.stdout.splitlines()) - 1 and not every.stderr, every.stderr
        stopped = hop("stop", jobs[0]["job_id"], *address, timeout=60)
        assert stopped.returncode == 0 and "is stopping" in stopped.stdout, stopped.stderr
        runner.join(timeout=60)
        again = hop("stop", jobs[0]["job_id"], *address, timeout=60)
        assert again.returncode == 0 and "had already ended (succeeded): nothing to stop" in again.stdout, again.stdout
    finally:
        push.close()
        stream_client_for_thread.close()
    assert not runner.is_alive()
    windows = read_windows(tmp_path / "out")
    starts = sorted(windows)
    assert starts[:5] == [0, 500, 1000, 1500, 2000]
    for start in starts[:5]:
        meta, rows = windows[start]
        expected: Counter[str] = Counter()
        for event in events[start : start + 500]:
            expected.update(event["text"].split())
        assert rows == dict(expected) and meta["records"] == 500 and meta["reason"] == "complete"
        assert meta["scoreboard"]["grid"] == ["D"] and meta["fidelity"] == 1.0
    last_meta, _ = windows[2500]
    assert last_meta["records"] == 100 and last_meta["reason"] == "stopped"  # flushed by the stop, not complete
    assert last_meta["scoreboard"]["grid"] == ["C"] and last_meta["fidelity"] == 0.0, "its one pane was cut short"
    assert result["report"]["continuous"]["stopped"] is True


def test_windows_cut_by_the_stop_show_the_cut_panes_and_their_fidelity(stream_client: Client, tmp_path: Path) -> None:
    """A word count over a paced replay, windows of 2 s sliding by 0.5 s (4 panes), stopped while it runs: the
    windows holding the panes from where the map had sealed when stopped (its open pane, flushed, and the panes it
    never reached) are ``stopped``, those panes ``C`` in their scoreboards, and their fidelity the share of the rest
    (they read "stopped (fidelity 100%)", the flushed pane ``D``, the others ``E``). The windows before are whole."""
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 8000, rate=80.0, seed=11)  # 100 s of event time, read in 20 s: stopped long before
    options = stream_options([f"replay:{events_path}?rate=400"], "2s", "500ms")
    output = tmp_path / "out"
    spec = build_spec(
        load_job_file(job_path("event_wordcount"), "EventWordCount"),
        [],
        str(output),
        num_reduces=2,
        options={"stream": options},
    )
    job_id = stream_client.submit(spec)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(stream_client.windows(job_id)) < 4:
            time.sleep(0.1)
    finally:
        stream_client.stop(job_id)
        status = stream_client.wait(job_id, timeout=60)
    assert status["state"] == "succeeded" and status["report"]["continuous"]["stopped"] is True
    metas = [meta for meta, _ in read_windows(output).values()]
    whole = [meta for meta in metas if meta["reason"] != "stopped"]
    cut = [meta for meta in metas if meta["reason"] == "stopped"]
    assert len(whole) >= 4 and len(cut) == 4, [(meta["reason"], meta["scoreboard"]["grid"]) for meta in metas]
    assert all(meta["reason"] == "complete" and meta["fidelity"] == 1.0 for meta in whole)
    assert all(set(meta["scoreboard"]["grid"][0]) <= {"D", "E"} for meta in whole)
    # One source, one pane cut in the first of them (its open pane, flushed), all four in the last.
    assert [meta["scoreboard"]["grid"] for meta in cut] == [["DDDC"], ["DDCC"], ["DCCC"], ["CCCC"]]
    assert [meta["fidelity"] for meta in cut] == [0.75, 0.5, 0.25, 0.0]
    assert len({meta["scoreboard"]["first_pane"] + 3 - number for number, meta in enumerate(cut)}) == 1
    assert cut[-1]["records"] > 0, "the open pane flushed by the stop is in the windows all the same"


@pytest.mark.parametrize(("option", "says"), [("--after=-1", "--after: must be at least 0, got -1"),
                                                ("--limit=-5", "--limit: must be at least 0, got -5")])  # fmt: skip
def test_hop_windows_refuses_a_negative_after_or_limit_as_the_web_api_does(option: str, says: str) -> None:
    """``hop windows --after -1`` was taken (and answered as ``--after 0``) where ``/api/jobs/ID/windows?after=-1``
    is refused: a usage error before any coordinator is asked."""
    started = time.monotonic()
    result = hop("windows", "job-0001", "--coordinator", "tcp://127.0.0.1:9", option, timeout=60)
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert time.monotonic() - started < 8, "refused before waiting for a coordinator"


class socket_port:
    """A free TCP port on 127.0.0.1 (the socket is closed on exit, so a source can bind it)."""

    def __enter__(self) -> int:
        import socket

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        return int(self.socket.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.socket.close()


def send_lines_when_listening(port: int, lines: list[bytes], deadline: float) -> None:
    """Connect to a ``tcp:`` source once its map listens (bounded by ``deadline``) and send ``lines``."""
    import socket

    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
                client.sendall(b"".join(lines))
                return
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _run_then_interrupt(command: list[str], meanwhile: Callable[[], None]) -> tuple[int, str]:
    """Run ``command`` (a continuous ``hop run``) in a process group of its own, call ``meanwhile``, then interrupt
    the whole group, as Ctrl-C in a terminal does (cluster processes included); its exit code and stderr."""
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        meanwhile()
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return process.returncode, stderr


def test_bad_records_on_a_socket_source_are_dropped_counted_and_logged(tmp_path: Path) -> None:
    """``hop run --source tcp:`` with a line that is not UTF-8, one that is not JSON and four whose time_field is
    missing or not a finite number: the stream goes on (one map attempt), every good record is in its window, the
    six are counted per source in ``_job.json`` and logged on stderr naming the source and what was wrong."""
    with socket_port() as port:
        url = f"tcp:127.0.0.1:{port}"
    good = [json.dumps({"ts": T0 + i, "text": f"g{i}"}).encode() + b"\n" for i in range(6)]
    bad = [b"\xff\xfe\n", b"{not json\n", b'{"text": "no ts"}\n', b'{"ts": "soon", "text": "x"}\n']
    bad += [b'{"ts": NaN, "text": "x"}\n', b"[1, 2]\n"]
    lines = [line for pair in zip(good, bad, strict=True) for line in pair]
    output = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("event_wordcount"), "--job-class", "EventWordCount"]
    command += ["--source", url, "--window", "2r", "-o", str(output), "--workers", "1", "--no-view"]

    def feed() -> None:
        deadline = time.monotonic() + 90
        send_lines_when_listening(port, lines, deadline)
        while time.monotonic() < deadline and len(list(output.glob("windows/*/_window.json"))) < 3:
            time.sleep(0.1)

    code, stderr = _run_then_interrupt(command, feed)
    assert code == 0, stderr
    windows = read_windows(output)
    assert {start: rows for start, (_, rows) in windows.items()} == {
        0: {"g0": 1, "g1": 1},
        2: {"g2": 1, "g3": 1},
        4: {"g4": 1, "g5": 1},
    }
    assert all(meta["reason"] == "complete" and meta["fidelity"] == 1.0 for meta, _ in windows.values())
    report = json.loads((output / "_job.json").read_text())
    assert report["counters"]["bad_records_skipped"] == 6 and report["continuous"]["bad_records"] == {url: 6}
    assert [a["status"] for a in report["attempts"] if a["kind"] == "map"] == ["succeeded"]
    logged = [line for line in stderr.splitlines() if "dropped bad record" in line]
    assert len(logged) == 6 and all(f"tcp source {url}" in line or f"{url}: record" in line for line in logged)
    for problem in ("is not valid UTF-8", "is not valid JSON", "has no field 'ts'", "'soon', not seconds", "nan"):
        assert any(problem in line for line in logged), (problem, logged)


def test_a_quiet_run_still_says_the_records_its_windows_left_out(tmp_path: Path) -> None:
    """``hop run --quiet`` of a batch job prints no summary but still says the records it skipped (a script running
    quietly would never learn its output misses them); a continuous one said nothing of its late records. It says
    them in one line, and nothing else (no window, no summary)."""
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 400, rate=50.0, seed=5, disorder=0.3)
    output = tmp_path / "out"
    result = hop(
        "run", job_path("event_wordcount"), "--job-class", "EventWordCount", "--source", f"replay:{events_path}",
        "--window", "1s", "-o", str(output), "--workers", "1", "--no-view", "--quiet", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads((output / "_job.json").read_text())
    late = report["counters"]["late_records"]
    assert late > 0, "the events out of order by up to 3 s come late"
    job_id = report["job_id"]
    said = f"hop: {job_id} ended; {late:,} records late (past --lateness 0s), listed in {output / '_late'}"
    assert result.stderr.splitlines() == [said], result.stderr


def test_a_source_given_its_port_is_not_said_to_listen_where_its_url_says(tmp_path: Path) -> None:
    """A ``tcp:`` or ``zmq:`` source given its port printed "hop: source tcp:127.0.0.1:5600 listens at
    tcp:127.0.0.1:5600", its URL again: where it listens is said only when the URL left something to the system."""
    import socket

    with socket.socket() as probe:  # (a port free a moment ago)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sources = [f"tcp:127.0.0.1:{port}", "zmq:tcp://127.0.0.1:*?format=text"]
    result = hop(
        "run", job_path("stream_wordcount"), *(arg for url in sources for arg in ("--source", url)), "--window", "2r",
        "-o", str(tmp_path / "out"), "--workers", "1", "--no-view", "--duration", "3s", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = dict(re.findall(r"^hop: source (\S+) listens at (\S+)$", result.stderr, re.MULTILINE))
    assert list(said) == [sources[1]], result.stderr  # (the other's port, picked as it bound, is said)


def test_a_source_given_port_0_says_where_it_listens(tmp_path: Path) -> None:
    """``hop run --source tcp:127.0.0.1:0 --source zmq:tcp://127.0.0.1:*``: each source binds a port the system
    picks, and the run says which on stderr (it did not: nothing could send to such a source); lines sent to the
    addresses it printed reach the windows."""
    output, log = tmp_path / "out", tmp_path / "stderr.txt"
    sources = ["tcp:127.0.0.1:0", "zmq:tcp://127.0.0.1:*?format=text"]
    command = [sys.executable, "-m", "hop", "run", job_path("stream_wordcount"), "--window", "2r", "-o", str(output)]
    command += [*(arg for url in sources for arg in ("--source", url)), "--workers", "1", "--no-view"]
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stderr=stderr, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        said: dict[str, str] = {}
        while len(said) < 2:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            said = dict(re.findall(r"^hop: source (\S+) listens at (\S+)$", log.read_text(), re.MULTILINE))
            time.sleep(0.1)
        tcp_host, tcp_port = said[sources[0]].removeprefix("tcp:").rsplit(":", 1)
        assert tcp_host == "127.0.0.1" and int(tcp_port) > 0
        endpoint = said[sources[1]].removeprefix("zmq:")
        assert re.fullmatch(r"tcp://127\.0\.0\.1:[1-9][0-9]*", endpoint), said
        send_lines_when_listening(int(tcp_port), [b"a b\n", b"a\n"], deadline)
        push = zmq.Context.instance().socket(zmq.PUSH)
        try:
            push.connect(endpoint)
            for frame in (b"c", b"c d"):
                push.send(frame)
            while time.monotonic() < deadline and not list(output.glob("windows/*/_window.json")):
                time.sleep(0.1)
        finally:
            push.close(linger=1000)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=60) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    ((meta, rows),) = read_windows(output).values()
    assert meta["records"] == 4 and rows == {"a": 2, "b": 1, "c": 2, "d": 1}, (meta, rows)


def test_blank_lines_of_a_jsonl_stream_are_no_records(stream_client: Client, tmp_path: Path) -> None:
    """As in a batch job's jsonl input, a blank line is no record: not a bad record (it was one, logged, counted),
    and it takes no record position (a 2r window holds two events)."""
    events = [{"ts": T0 + i, "text": f"w{i}"} for i in range(6)]
    lines = [json.dumps(e) + "\n" for e in events]
    lines[2:2] = ["\n", "  \r\n"]
    (tmp_path / "events.jsonl").write_text("".join(lines) + "\n", encoding="utf-8")
    report = run_stream_job(
        stream_client, "EventWordCount", [f"replay:{tmp_path / 'events.jsonl'}"], tmp_path / "out", "2r"
    )
    assert report["counters"]["bad_records_skipped"] == 0
    assert report["counters"]["map_input_records"] == 6
    windows = {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()}
    assert windows == {0: {"w0": 1, "w1": 1}, 2: {"w2": 1, "w3": 1}, 4: {"w4": 1, "w5": 1}}


def test_arrays_inside_a_jsonl_streams_records_arrive_as_tuples(stream_client: Client, tmp_path: Path) -> None:
    """As in a batch job's jsonl input, a JSON array inside a record's object arrives as a tuple, not only one at
    the top: the map can use it as a key as it comes (a list is unhashable: every record was a failure)."""
    tags = [["a", "b"], ["a"], ["a", "b"], ["c"]]
    lines = [json.dumps({"ts": T0 + i, "tags": tag}) + "\n" for i, tag in enumerate(tags)]
    (tmp_path / "events.jsonl").write_text("".join(lines), encoding="utf-8")
    report = run_stream_job(
        stream_client, "EventTagCounts", [f"replay:{tmp_path / 'events.jsonl'}"], tmp_path / "out", "4r", num_reduces=1
    )
    assert report["counters"]["map_input_records"] == 4
    [(_, rows)] = read_windows(tmp_path / "out").values()
    assert rows == {("a", "b"): 2, ("a",): 1, ("c",): 1}


def test_bad_records_of_a_tailed_directory_are_logged_naming_file_and_byte_offset(tmp_path: Path) -> None:
    """A ``jsonl`` job over ``tail:DIR``: a line that is not JSON and one whose time_field is not a number, in the
    second file, are logged naming that file and the byte offset of the line in it (not a number counted across
    every file), and the good lines around them are counted."""
    folder = tmp_path / "logs"
    folder.mkdir()
    good = [json.dumps({"ts": T0 + i, "text": f"g{i}"}) + "\n" for i in range(4)]
    (folder / "a.jsonl").write_text(good[0] + good[1])
    os.utime(folder / "a.jsonl", (T0, T0))  # read first
    not_json, bad_ts = "{not json\n", '{"ts": "soon", "text": "x"}\n'
    (folder / "b.jsonl").write_text(good[2] + not_json + good[3] + bad_ts)
    output = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("event_wordcount"), "--job-class", "EventWordCount"]
    command += ["--source", f"tail:{folder}", "--window", "2r", "-o", str(output), "--workers", "1", "--no-view"]

    def wait_for_windows() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(list(output.glob("windows/*/_window.json"))) < 2:
            time.sleep(0.1)

    code, stderr = _run_then_interrupt(command, wait_for_windows)
    assert code == 0, stderr
    assert {start: rows for start, (_, rows) in read_windows(output).items()} == {
        0: {"g0": 1, "g1": 1},
        2: {"g2": 1, "g3": 1},
    }
    logged = [line for line in stderr.splitlines() if "dropped bad record" in line]
    place = f"tail source tail:{folder}: the line at byte offset"
    assert len(logged) == 2, stderr
    assert f"{place} {len(good[2])} of b.jsonl is not valid JSON" in logged[0], logged
    offset = len(good[2] + not_json + good[3])
    assert f"{place} {offset} of b.jsonl has field 'ts' = 'soon', not seconds since the epoch" in logged[1], logged


def test_an_exception_in_map_names_the_file_and_byte_offset_of_its_record(tmp_path: Path) -> None:
    first = json.dumps({"ts": T0, "text": "fine"}) + "\n"
    (tmp_path / "events.jsonl").write_text(first + json.dumps({"ts": T0 + 1}) + "\n")  # no "text": the map raises
    result = hop(
        "run", job_path("event_wordcount"), "--job-class", "EventWordCount", "--source", "replay:events.jsonl",
        "--window", "2r", "-o", "out", "--no-view", "--quiet", "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    place = f"replay source replay:events.jsonl: the line at byte offset {len(first)} of events.jsonl"
    assert f"map at {place}: {{'ts': {T0 + 1}}} raised KeyError: 'text'" in result.stderr, result.stderr


def test_an_exception_in_map_on_a_long_record_names_its_start_and_its_length(tmp_path: Path) -> None:
    """A failing map's record was cut to 200 characters as if whole; it is named by its start and its length, as a
    batch map's is (hop.usercode.shown)."""
    record = {"ts": T0, "pad": "x" * 1000}  # no "text": the map raises
    (tmp_path / "events.jsonl").write_text(json.dumps(record) + "\n")
    result = hop(
        "run", job_path("event_wordcount"), "--job-class", "EventWordCount", "--source", "replay:events.jsonl",
        "--window", "2r", "-o", "out", "--no-view", "--quiet", "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    shown = repr(record)
    assert f": {shown[:500]}... ({len(shown):,} characters) raised KeyError: 'text'" in result.stderr, result.stderr


def test_a_failed_continuous_jobs_report_gives_the_records_read_and_dropped(tmp_path: Path) -> None:
    """A job whose map failed within its first second reported ``records_read 0`` and ``bad_records {}`` in
    ``_job.json`` (only progress reports, once a second, and committed attempts counted): the failing attempt now
    reports what it read and dropped as it fails."""
    lines = [json.dumps({"ts": T0, "text": "fine"}), "not json", json.dumps({"ts": T0 + 1})]  # the last: no "text"
    (tmp_path / "events.jsonl").write_text("".join(line + "\n" for line in lines))
    result = hop(
        "run", job_path("event_wordcount"), "--job-class", "EventWordCount", "--source", "replay:events.jsonl",
        "--window", "2r", "-o", "out", "--no-view", "--quiet", "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["status"] == "failed", report
    # Read: the good record and the one whose map call raised; dropped: the line that is not JSON.
    assert report["continuous"]["records_read"] == 2, report["continuous"]
    assert report["continuous"]["bad_records"] == {"replay:events.jsonl": 1}, report["continuous"]


SETS_JOB = """from hop import Job


class Sets(Job):
    def map(self, offset, line):
        yield line, MAPPED if line.startswith("c") else 1
COMBINE
    def reduce(self, key, values):
        yield key, len(list(values))
"""


def _write_sets_job(folder: Path, combine: bool, set_at: int) -> list[str]:
    """Write ``sets.py`` (its map yields a set for the line ``c d``, or with ``combine`` its combine yields a set
    for every key) and ``lines.txt`` (3,000 lines, ``c d`` the one at index ``set_at``); return those lines."""
    lines = [f"w{number} x\n" for number in range(3000)]
    lines[set_at] = "c d\n"
    (folder / "lines.txt").write_text("".join(lines))
    combiner = "\n    def combine(self, key, values):\n        yield key, set(values)\n" if combine else ""
    job = SETS_JOB.replace("MAPPED", "1" if combine else "{1}").replace("COMBINE", combiner)
    (folder / "sets.py").write_text(job)
    return lines


def _unencodable(call: str, key: str, source: str) -> str:
    """The start of the error a set yielded by ``source`` ("map" or "combine") at ``call`` gives."""
    return f"{call} raised UnencodableRecordError: {source} output value {{1}} (type set) of key {key!r} cannot be "


@pytest.mark.parametrize(
    ("source", "window", "combine"),
    [("replay:lines.txt?rate=4000", "100000r", False), ("replay:lines.txt", "2r", True)],
    ids=["found-by-reading-again", "combine"],
)  # fmt: skip
def test_an_output_the_shuffle_cannot_encode_names_the_map_call_and_its_record(
    tmp_path: Path, source: str, window: str, combine: bool
) -> None:
    """A stream map yielding a set failed with "map/combine output value {1} ... cannot be encoded", naming neither
    the record nor whether the map or the combine yielded it; now, as in batch, the map call and its record (mapped
    again after the failure: a replayable source read again from its start, here where the pane sealed polls after
    the record; the last poll's records in the next test), or the combine call and its key."""
    lines = _write_sets_job(tmp_path, combine, 10)
    result = hop(
        "run", "sets.py", "--source", source, "--window", window, "-o", "out", "--no-view", "--quiet",
        "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    if combine:  # (every key's: the first pane's first)
        expected = _unencodable("combine at key 'w0 x'", "w0 x", "combine")
    else:
        call = f"map at replay source {source}: the line at byte offset {len(''.join(lines[:10]))} of lines.txt: 'c d'"
        expected = _unencodable(call, "c d", "map")
    assert f"{expected}encoded by the shuffle: yield a list" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def _run_bad_key_job(
    tmp_path: Path, key: str, imports: str = "", reduce: str = ""
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run a continuous job over the sets job's lines whose map yields ``key`` (an expression) for the line ``c d``
    and the line itself for the others (``Sum`` in scope; ``reduce``: its combine/reduce definitions); it must fail.
    Returns the run and how its error names that map call."""
    lines = _write_sets_job(tmp_path, False, 10)
    (tmp_path / "keys.py").write_text(
        f"{imports}from hop import Job\nfrom hop.aggregates import Sum\n\n\nclass Keys(Job):\n"
        f"    def map(self, offset, line):\n        yield ({key} if line.startswith('c') else line), 1\n\n"
        f"    {reduce}\n"
    )
    result = hop(
        "run", "keys.py", "--source", "replay:lines.txt", "--window", "2r", "-o", "out", "--no-view", "--quiet",
        "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    call = f"map at replay source replay:lines.txt: the line at byte offset {len(''.join(lines[:10]))} of lines.txt"
    return result, call


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("datetime.date(2020, 1, 2)", "(type date) cannot be encoded by the shuffle: keys and values must be"),
        ("(line, frozenset({1}))", "holding frozenset({1}) (type frozenset), cannot be encoded by the shuffle: yield"),
    ],
    ids=["date", "frozenset-in-a-tuple"],
)  # fmt: skip
def test_a_key_the_shuffle_cannot_sort_names_the_map_call_and_its_record(tmp_path: Path, key: str, reason: str) -> None:
    """A stream map yielding a key with no place in the keys' order failed with "map task 0: key ... is not a
    msgpack-able key" as its pane was sealed, naming neither the record nor what to yield instead; it now fails as
    a batch map does (test_engine.py), naming the map call and its record."""
    result, call = _run_bad_key_job(tmp_path, key, "import datetime\n")
    assert f"{call}: 'c d' raised UnencodableRecordError: map output key " in result.stderr, result.stderr
    assert reason in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_a_nan_key_fails_a_continuous_job_naming_the_map_call_and_its_record(tmp_path: Path) -> None:
    """A stream map yielding a float NaN key wrote one ``NaN 1`` line per record into every window holding them,
    the job succeeding, where a batch job fails; it now fails as a batch map does, naming the map call and its
    record."""
    result, call = _run_bad_key_job(tmp_path, "float('nan')", reduce="combine = reduce = Sum()")
    assert f"{call}: 'c d' raised NanKeyError: map output key nan is or holds a float NaN" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("reduce", ["combine = reduce = Sum()", "def reduce(self, key, values):\n        yield key, 1"])
def test_a_list_key_fails_a_continuous_job_naming_the_key_as_batch_does(tmp_path: Path, reduce: str) -> None:
    """A stream map yielding a list as its key failed with "Sum() could not fold a value of key ['c d'] ... the map
    must yield values Sum() can combine", blaming the value, or without a combiner with the dict's bare "TypeError:
    unhashable type: 'list'" under the engine's frames; it now fails as a batch map does, naming the key."""
    result, call = _run_bad_key_job(tmp_path, "[line]", reduce=reduce)
    reason = "map output key ['c d'] is a list, which cannot be a key (keys are grouped as dict keys): yield a tuple"
    assert f"{call}: 'c d' raised UnhashableKeyError: {reason}" in result.stderr, result.stderr
    assert "could not fold" not in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_continuous_run_prints_its_user_counters_under_its_summary_as_a_batch_run_does(tmp_path: Path) -> None:
    """The README says user counters are printed under the run's summary line; a continuous run printed none (they
    were only in ``_job.json``)."""
    (tmp_path / "in.txt").write_text("a b\nc\n")
    (tmp_path / "counting.py").write_text(
        "from hop import Job\nfrom hop.aggregates import Sum\n\n\nclass Counting(Job):\n"
        "    def map(self, offset, line):\n        self.increment_counter('app', 'lines')\n        yield line, 1\n\n"
        "    combine = reduce = Sum()\n"
    )
    result = hop(
        "run", "counting.py", "--source", "replay:in.txt", "--window", "2r", "-o", "out", "--no-view", "--workers",
        "1", "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = result.stderr[result.stderr.index(" ended: 1 window in ") :]
    assert summary.splitlines()[1:] == ["hop: counters: 1", "  app", "    lines=2"], result.stderr


def test_a_partition_out_of_range_fails_a_continuous_job_as_it_fails_a_batch_job(tmp_path: Path) -> None:
    """A job's ``partition`` returning 7 of 2 reducers raised an IndexError as the pane was sealed, taken for the
    engine's failure: the map was retried until its source was given up, and the job ended 'succeeded' (exit 0)
    with no window. It now fails the job at once, naming the key and the value, as in batch."""
    _write_sets_job(tmp_path, False, 10)
    (tmp_path / "bad_partition.py").write_text(
        "from hop import Job\nfrom hop.aggregates import Sum\n\n\nclass BadPartition(Job):\n"
        "    def map(self, offset, line):\n        yield line, 1\n\n"
        "    def partition(self, key, num_partitions):\n        return 7\n\n"
        "    combine = reduce = Sum()\n"
    )
    result = hop(
        "run", "bad_partition.py", "--source", "replay:lines.txt", "--window", "2r", "-o", "out", "--no-view",
        "--quiet", "--reducers", "2", "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "hop: error: job failed: map task 0: partition('w0 x') returned 7; expected an int in range(2)" in (
        result.stderr
    ), result.stderr
    assert "given up" not in result.stderr


def test_an_unencodable_map_output_is_found_in_the_last_poll_of_a_source_that_cannot_read_again(
    tmp_path: Path,
) -> None:
    """The map call that yielded an output the shuffle cannot encode is found among the last poll's records: a
    ``tcp:`` source cannot be read again, so nothing else can name it. ``c d`` ends its 2-record pane, so the poll
    that sealed the pane holds it, however the lines were split into polls."""
    lines = _write_sets_job(tmp_path, False, 11)[:20]
    with socket_port() as port:
        url = f"tcp:127.0.0.1:{port}"
    command = [sys.executable, "-m", "hop", "run", "sets.py", "--source", url, "--window", "2r", "-o", "out"]
    command += ["--no-view", "--quiet", "--duration", "60s"]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        send_lines_when_listening(port, [line.encode() for line in lines], time.monotonic() + 90)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 1, stderr
    offset = len("".join(lines[:11]))
    client, call = f"map at tcp source {url}: the line at byte offset {offset} from client 127.0.0.1:", ": 'c d'"
    expected = re.escape(client) + "[0-9]+" + re.escape(_unencodable(call, "c d", "map") + "encoded by the shuffle")
    assert re.search(expected, stderr), stderr
    assert "Traceback" not in stderr


def test_a_failing_reduce_leaves_no_temporary_file_in_its_window(tmp_path: Path) -> None:
    (tmp_path / "lines.txt").write_text("fine bad1\n")
    result = hop(
        "run", job_path("failing_reduce"), "--source", "replay:lines.txt", "--window", "1r", "-o", "out",
        "--no-view", "--quiet", "--duration", "60s", "--max-attempts", "1", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and "refusing bad1" in result.stderr, result.stderr
    assert not [path for path in (tmp_path / "out" / "windows").rglob("*") if ".tmp" in path.name]


def test_a_replayed_line_over_max_line_bytes_is_a_bad_record(tmp_path: Path) -> None:
    good = [json.dumps({"ts": T0 + i, "text": f"g{i}"}) + "\n" for i in range(2)]
    (tmp_path / "events.jsonl").write_text(good[0] + "x" * 5000 + "\n" + good[1])
    result = hop(
        "run", job_path("event_wordcount"), "--job-class", "EventWordCount", "--source", "replay:events.jsonl",
        "--window", "2r", "--max-line-bytes", "1000", "-o", "out", "--no-view", "--quiet", "--duration", "60s",
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()} == {0: {"g0": 1, "g1": 1}}
    place = f"replay source replay:events.jsonl: line 2 (byte offset {len(good[0])}) of events.jsonl"
    assert f"{place} is longer than 1,000 bytes; it is dropped up to its newline" in result.stderr, result.stderr


@pytest.mark.parametrize(
    ("amounts", "message"),
    [
        ((1, None), "raised AggregateValueError: Sum() got None as the first value of key 'v'"),
        ((1, None, 2), "raised AggregateValueError: Sum() could not fold a value of key 'u' (the latest, None): "
                       "TypeError: unsupported operand"),
    ],
    ids=["first value", "later value"],
)  # fmt: skip
def test_a_value_a_built_in_aggregate_cannot_fold_fails_the_job_as_in_batch(
    tmp_path: Path, amounts: tuple[Any, ...], message: str
) -> None:
    """A stream map folding into ``Sum`` gave ``0 + None``'s TypeError with the engine's pane code as the
    traceback; it now fails the job at once with batch's message, naming the aggregate, the key and the record."""
    users = ["u", "v"] if len(amounts) == 2 else ["u", "u", "u"]
    lines = [json.dumps({"ts": T0 + i, "user": user, "amount": amount}) + "\n" for i, (user, amount) in
             enumerate(zip(users, amounts, strict=True))]  # fmt: skip
    (tmp_path / "events.jsonl").write_text("".join(lines))
    job = str(ROOT / "tests" / "jobs" / "stream_events.py")
    result = hop(
        "run", job, "--job-class", "EventAmounts", "--source", "replay:events.jsonl", "--window", "10r", "-o", "out",
        "--no-view", "--quiet", "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    place = f"replay source replay:events.jsonl: the line at byte offset {len(lines[0])} of events.jsonl"
    assert f"map at {place}: {json.loads(lines[1])!r} {message}" in result.stderr, result.stderr
    assert "panes.py" not in result.stderr and "gave up after" not in result.stderr, result.stderr


def test_a_map_yielding_a_str_that_would_unpack_as_a_pair_fails_as_in_batch(tmp_path: Path) -> None:
    """A stream map yielding a two-letter user name alone ran and counted key "a" with value "b"; it fails now as
    in batch (``shuffle.pairs``), naming the record and shown at the user's ``yield``."""
    line = json.dumps({"ts": T0, "user": "ab", "amount": 1}) + "\n"
    (tmp_path / "events.jsonl").write_text(line)
    job = str(ROOT / "tests" / "jobs" / "stream_events.py")
    result = hop(
        "run", job, "--job-class", "EventUsers", "--source", "replay:events.jsonl", "--window", "10r", "-o", "out",
        "--no-view", "--quiet", "--duration", "60s", "--max-attempts", "1", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    place = "replay source replay:events.jsonl: the line at byte offset 0 of events.jsonl"
    problem = "the map gave something other than (key, value) pairs (TypeError: a str is not a (key, value) pair: 'ab')"
    assert f"map at {place}: {json.loads(line)!r} raised NotPairsError: {problem}" in result.stderr, result.stderr
    assert 'yield event["user"]  # should be' in result.stderr, result.stderr


def test_csv_and_jsonl_records_reach_map_as_in_batch(tmp_path: Path) -> None:
    """A csv job's map gets each row's fields in a stream as in batch (it got the raw line: 'alice,3'[1] is 'l');
    an empty line is no record and a malformed row a bad record; a jsonl record holding an int past 4,300 digits
    (Python's default limit on converting ints from text) is read as in batch, since task processes lift that limit
    (its ValueError failed the map on every attempt, then it was a bad record)."""
    rows = ["alice,3", "bob,4", "", '"carol",5', 'dave,"6', "alice,1"]
    (tmp_path / "p.csv").write_text("".join(row + "\n" for row in rows), encoding="utf-8")
    job = job_path("json_fields")
    common = ("--input-format", "csv", "--overwrite", "--quiet")
    batch = hop("run", job, "p.csv", "-o", "batch", "--skip-bad-records", "10", *common, cwd=tmp_path)
    assert batch.returncode == 0, batch.stderr
    stream = hop("run", job, "--source", "replay:p.csv", "--window", "100r", "-o", "out", "--no-view", *common,
                 cwd=tmp_path, timeout=120)  # fmt: skip
    assert stream.returncode == 0, stream.stderr
    assert "the line at byte offset 25 of p.csv is not a CSV row" in stream.stderr, stream.stderr
    assert read_windows(tmp_path / "out")[0][1] == {"alice": 4, "bob": 4, "carol": 5} == output_dict(tmp_path / "batch")
    lines = [json.dumps({"user": "u", "amount": 1}), '{"user": "u", "amount": ' + "9" * 5000 + "}"]
    (tmp_path / "p.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    stream = hop("run", job, "--source", "replay:p.jsonl", "--window", "100r", "-o", "out2", "--no-view", "--quiet",
                 "--max-attempts", "1", cwd=tmp_path, timeout=120)  # fmt: skip
    assert stream.returncode == 0 and not stream.stderr, stream.stderr
    (window,) = (tmp_path / "out2" / "windows").iterdir()
    rows = "".join(part.read_text(encoding="utf-8") for part in sorted(window.glob("part-*")))
    assert rows == '"u"\t1' + "0" * 5000 + "\n"  # 1 + 99...9 (as text: this process keeps the limit)


def test_sum_in_a_stream_adds_what_it_adds_in_batch(stream_client: Client, tmp_path: Path) -> None:
    """A pane's ``Sum`` starts from a key's first value, not from 0 (which refused strings)."""
    lines = [json.dumps({"ts": T0 + i, "user": "u", "amount": text}) + "\n" for i, text in enumerate("ab")]
    (tmp_path / "events.jsonl").write_text("".join(lines))
    run_stream_job(stream_client, "EventAmounts", [f"replay:{tmp_path / 'events.jsonl'}"], tmp_path / "out", "2r")
    assert {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()} == {0: {"u": "ab"}}


def test_a_pane_larger_than_a_shuffle_piece_arrives_whole(stream_client: Client, tmp_path: Path) -> None:
    """A pane's run larger than ``shuffle.pusher.PIECE_BYTES`` comes to its reducer in pieces, which it puts back
    together before taking the pane (taken piece by piece, the first was a truncated run and the rest were
    duplicates: the window lost its value)."""
    texts = [chr(ord("a") + i) * 400_000 for i in range(4)]  # summed in one pane: 1.6 MB, two pieces or more
    lines = [json.dumps({"ts": T0, "user": "u", "amount": text}) + "\n" for text in texts]
    (tmp_path / "events.jsonl").write_text("".join(lines))
    run_stream_job(stream_client, "EventAmounts", [f"replay:{tmp_path / 'events.jsonl'}"], tmp_path / "out", "4r")
    assert {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()} == {0: {"u": "".join(texts)}}


def test_a_partition_given_none_of_a_windows_keys_writes_no_part(stream_client: Client, tmp_path: Path) -> None:
    """One word, two reducers: the partition that gets no key of a window writes no (empty) part file, as
    docs/stream.md says (a pane's cell reaches every partition with the pane's record count, which once made it
    write one)."""
    events = [{"ts": T0 + i * 0.1 + 0.0004, "text": "alpha"} for i in range(30)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    report = run_stream_job(
        stream_client, "EventWordCount", [f"replay:{tmp_path / 'events.jsonl'}"], tmp_path / "out", "1s"
    )
    folders = sorted((tmp_path / "out" / "windows").iterdir())
    assert len(folders) == 3 and [len(list(f.glob("part-*"))) for f in folders] == [1, 1, 1]
    assert report["counters"]["window_parts_written"] == 3
    assert [rows for _, rows in read_windows(tmp_path / "out").values()] == [{"alpha": 10}] * 3


def test_sums_past_64_bits_cross_panes_and_checkpoints(stream_client: Client, tmp_path: Path) -> None:
    """Pane states past msgpack's 64 bits go through the shuffle and the map's and reducers' checkpoints."""
    lines = [json.dumps({"ts": T0 + i, "user": "u", "amount": 2**70 + i}) + "\n" for i in range(8)]
    (tmp_path / "events.jsonl").write_text("".join(lines))
    source = f"replay:{tmp_path / 'events.jsonl'}"
    # Sliding: the reducers hold the panes of the next window when they checkpoint after each one.
    run_stream_job(stream_client, "EventAmounts", [source], tmp_path / "out", "4r", "2r", checkpoint_windows=1)
    windows = {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()}
    expected = {start: {"u": 4 * 2**70 + 4 * start + 6} for start in (0, 2, 4)}
    assert windows == {**expected, 6: {"u": 2 * 2**70 + 13}}  # (the last, partial window: flushed at the end)


def word_counts(output: Path) -> Counter[str]:
    """How many windows hold each word, of the windows written so far: while the job runs, a window's folder holds
    its parts before the coordinator writes its ``_window.json`` (reading it then failed the poll)."""
    counts: Counter[str] = Counter()
    for folder in sorted((output / "windows").glob("*/")) if (output / "windows").exists() else ():
        if (folder / "_window.json").exists():
            for part in folder.glob("part-*"):
                counts.update(json.loads(line.split("\t")[0]) for line in part.read_text(encoding="utf-8").splitlines())
    return counts


def push_events(endpoint: str, events: list[dict[str, Any]]) -> None:
    """Send ``events`` to a ``zmq:`` source bound at ``endpoint``, on a new socket each time: a PUSH socket drops what
    it queued for a peer that died."""
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.SNDTIMEO, 30_000)  # queued until the map is bound; bounded all the same
    push.setsockopt(zmq.LINGER, 30_000)  # closed once everything went out
    push.connect(endpoint)
    try:
        for event in events:
            push.send(msgpack.packb(event))
    finally:
        push.close()


def test_a_retried_socket_map_numbers_on_past_what_reducers_hold(stream_client: Client, tmp_path: Path) -> None:
    """Sliding record windows over a ZeroMQ source (no checkpoint yet): the map is killed with 200 records in its
    open pane. The retry cannot re-read them: it declares the panes up to and including that one lost (C2 shows
    ``L``, those windows say ``source failure``) and numbers new records after them, so every record sent after the
    failure lands in its windows (none is taken for a resend of a pane the reducer already holds)."""
    with socket_port() as port:
        endpoint = f"tcp://127.0.0.1:{port}"
    output = tmp_path / "out"
    result: dict[str, Any] = {}
    runner_client = Client(stream_client.address, timeout=30)

    def run() -> None:
        result["report"] = run_stream_job(
            runner_client, "EventWordCount", [f"zmq:{endpoint}"], output, "1000r", "500r", num_reduces=1,
            checkpoint_seconds=3600.0,
        )  # fmt: skip

    runner = threading.Thread(target=run)
    runner.start()
    try:
        push_events(endpoint, [{"ts": T0 + i, "text": f"b{i}"} for i in range(1200)])
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not word_counts(output)["b999"]:  # the window of panes 0 and 1
            time.sleep(0.1)
        job_id = next(j["job_id"] for j in stream_client.jobs() if j["output"] == str(output))
        (map_task,) = [t for t in stream_client.job(job_id)["tasks"] if t["kind"] == "map"]
        os.kill(map_task["pid"], signal.SIGKILL)
        while time.monotonic() < deadline:
            (map_task,) = [t for t in stream_client.job(job_id)["tasks"] if t["kind"] == "map"]
            if map_task["attempts"] == 2 and map_task["state"] == "running":
                break
            time.sleep(0.1)
        push_events(endpoint, [{"ts": T0 + 2000 + i, "text": f"a{i}"} for i in range(1000)])
        while time.monotonic() < deadline and not word_counts(output)["a999"]:  # its second window needs the stop
            time.sleep(0.1)
        stream_client.stop(job_id)
    finally:
        runner.join(timeout=200)  # run_stream's own bounds: 120 s, then 120 s to stop
        runner_client.close()
    assert not runner.is_alive() and result["report"]["status"] == "succeeded"
    counts = word_counts(output)
    assert [i for i in range(1000) if counts[f"a{i}"] != 2] == [], "records sent after the failure were dropped"
    # Record windows start at 0: pane 0 is in one window. Pane 2 (b1000-b1199) died with the first attempt.
    assert [counts[f"b{i}"] for i in range(0, 1200, 100)] == [1] * 5 + [2] * 5 + [0] * 2
    failed = [meta for meta, _ in read_windows(output).values() if meta["reason"] == "source failure"]
    assert failed and all("L" in meta["scoreboard"]["grid"][0] for meta in failed)
    assert all(meta["fidelity"] < 1 for meta in failed)
    # The records read into windows: panes 0 and 1 of the first attempt and the retry's 1,000 (the retry counted
    # from 0, its first attempt's sealed panes missing from the count: 1,000).
    assert result["report"]["continuous"]["records_read"] == 2000
    assert result["report"]["counters"]["map_input_records"] == 2000


def test_a_retried_socket_map_with_event_time_reports_the_panes_it_did_not_hear_as_lost(
    stream_client: Client, tmp_path: Path
) -> None:
    """Event-time windows over two ZeroMQ sources; the first one's map is killed, and what was sent to it while it
    was down is gone. Its retry cannot know the event times it missed, so every pane between where the first attempt
    stopped and the watermark of the first records it hears is lost (``L``: those windows, emitted for the other
    source's records, say ``source failure``). The retry sealed them as empty (``E``: windows ``complete`` at full
    fidelity, as if the source had been heard all along; the cluster monitor took such a row for a quiet host)."""
    endpoints = []
    for _ in range(2):
        with socket_port() as port:
            endpoints.append(f"tcp://127.0.0.1:{port}")
    output = tmp_path / "out"
    result: dict[str, Any] = {}
    runner_client = Client(stream_client.address, timeout=30)

    def run() -> None:
        result["report"] = run_stream_job(
            runner_client, "EventWordCount", [f"zmq:{e}" for e in endpoints], output, "1s", num_reduces=1,
            checkpoint_seconds=3600.0,
        )  # fmt: skip

    runner = threading.Thread(target=run)
    runner.start()
    try:
        push_events(endpoints[1], [{"ts": T0 + i * 0.1, "text": f"c{i}"} for i in range(160)])  # panes T0 .. T0+15
        # Panes T0 .. T0+4, and a record late for pane T0 (listed in _late by the first attempt):
        push_events(
            endpoints[0], [{"ts": T0 + i * 0.1, "text": f"b{i}"} for i in range(50)] + [{"ts": T0, "text": "z"}]
        )
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not word_counts(output)["b39"]:  # the window of T0+3, sealed by b40
            time.sleep(0.1)
        job_id = next(j["job_id"] for j in stream_client.jobs() if j["output"] == str(output))
        (first,) = [t for t in stream_client.job(job_id)["tasks"] if t["kind"] == "map" and t["index"] == 0]
        os.kill(first["pid"], signal.SIGKILL)
        while time.monotonic() < deadline:
            (first,) = [t for t in stream_client.job(job_id)["tasks"] if t["kind"] == "map" and t["index"] == 0]
            if first["attempts"] == 2 and first["state"] == "running":
                break
            time.sleep(0.1)
        # Panes T0+10 .. T0+14:
        push_events(endpoints[0], [{"ts": T0 + 10 + i * 0.1, "text": f"a{i}"} for i in range(50)])
        while time.monotonic() < deadline and not word_counts(output)["a39"]:
            time.sleep(0.1)
        stream_client.stop(job_id)
    finally:
        runner.join(timeout=200)
        runner_client.close()
    assert not runner.is_alive() and result["report"]["status"] == "succeeded"
    windows = {round(start - T0): meta for start, (meta, _) in read_windows(output).items()}
    rows = {start: meta["scoreboard"]["grid"][0] for start, meta in windows.items()}
    assert [rows[start] for start in (0, 1, 2, 3, 10, 11, 12, 13)] == ["D"] * 8, rows
    assert [rows[start] for start in range(4, 10)] == ["L"] * 6, rows
    assert all(windows[start]["reason"] == "source failure" for start in range(4, 10)), windows
    # 160 c's, b0-b39 in the panes the first attempt sealed (b40-b49 died in its open pane), the retry's 50 a's.
    assert result["report"]["continuous"]["records_read"] == 160 + 40 + 50
    assert (
        result["report"]["counters"]["late_records"]
        == 1
        == len((output / "_late" / "map-00000.jsonl").read_text().splitlines())
    )


def test_a_source_given_up_is_reported_by_the_run(
    stream_client: Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A source whose map keeps failing is given up after --max-attempts and the query goes on: the run says so,
    naming the source and the last error (it once ended "succeeded" with nothing on stderr about it)."""
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 60, rate=10.0, seed=4)
    doomed = f"replay:{events_path}?rate=5&loop=1"
    options = stream_options([f"replay:{events_path}?rate=10", doomed], "1s")
    job_class = load_job_file(job_path("event_wordcount"), "EventWordCount")
    spec = build_spec(
        job_class, [], str(tmp_path / "out"), num_reduces=1, options={"stream": options, "max_attempts": 2}
    )
    result: dict[str, Any] = {}
    runner_client = Client(stream_client.address, timeout=30)
    runner = threading.Thread(
        target=lambda: result.update(run_stream(runner_client, spec, progress=True, timeout=60, view_interval=None))
    )
    runner.start()
    try:
        deadline = time.monotonic() + 30
        for attempts in (1, 2):  # SIGKILL every attempt of map 1
            while True:
                assert time.monotonic() < deadline, f"attempt {attempts} of map 1 started"
                jobs = [j for j in stream_client.jobs() if j["output"] == str(tmp_path / "out")]
                tasks = [t for t in stream_client.job(jobs[0]["job_id"])["tasks"] if t["kind"] == "map"] if jobs else []
                task = next((t for t in tasks if t["index"] == 1), None)
                if task and task["attempts"] == attempts and task["state"] == "running" and task["pid"]:
                    break
                time.sleep(0.05)
            os.kill(task["pid"], signal.SIGKILL)
    finally:
        runner.join(timeout=90)
        runner_client.close()
    assert not runner.is_alive() and result["state"] == "succeeded"
    (gone,) = result["report"]["continuous"]["sources_gone"]  # as the status reply gives it
    assert gone["index"] == 1 and gone["url"] == doomed and gone["attempts"] == 2 and gone["error"]
    err = capsys.readouterr().err
    assert f"hop: warning: source 1 ({doomed}) was given up after 2 failed attempts" in err
    assert err.count("was given up") == 1


@pytest.mark.parametrize(
    "heartbeat_timeout",
    [1.5, SOURCE_SLOT_GRACE_SECONDS + 1.0],
    ids=["loss-found-within-the-grace", "loss-found-after-the-grace"],
)
def test_a_map_retried_after_the_stop_drains_and_the_job_ends(tmp_path: Path, heartbeat_timeout: float) -> None:
    """The map's worker (which runs the reducer too) dies and the job is stopped before the loss is noticed: the
    retry starts after the stop was broadcast, never heard it, and the job ran for ever (``hop monitor --duration``
    after a lost worker hung). Found lost only after the grace a stopping job's sources get to find a slot (a
    longer heartbeat timeout here; a coordinator stalled on a loaded machine did it too), the source was ended
    unstarted in that same turn, before the reducer's retry started: the retry never heard of it and waited for
    it for ever (the job "still running" 45 s later). The source is retried and drains instead."""
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 500, rate=100.0, seed=12)
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=heartbeat_timeout) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            options = stream_options([f"replay:{events_path}?rate=200&loop=1"], "1s", checkpoint_seconds=0.5)
            job_class = load_job_file(job_path("event_wordcount"), "EventWordCount")
            spec = build_spec(job_class, [], str(tmp_path / "out"), num_reduces=1, options={"stream": options})
            job_id = client.submit(spec)
            deadline = time.monotonic() + 30
            while not (maps := [t for t in client.job(job_id)["tasks"] if t["kind"] == "map" and t["worker"]]):
                assert time.monotonic() < deadline, "the map started"
                time.sleep(0.05)
            cluster.workers[int(maps[0]["worker"].rsplit("-", 1)[1])].send_signal(signal.SIGKILL)
            client.stop(job_id)
            status = client.wait(job_id, timeout=45)
        finally:
            client.close()
    assert status["state"] == "succeeded" and status["report"]["continuous"]["stopped"] is True
    assert len([a for a in status["report"]["attempts"] if a["kind"] == "map"]) >= 2, "the map was retried"


def test_worker_killed_mid_stream_recovers_exactly(tmp_path: Path) -> None:
    """SIGKILL the worker running the stream map (and maybe a reducer) halfway: retries resume from checkpoints
    that every reducer's checkpoint covers, reducers ignore what they already hold, and every window is exact."""
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 5000, rate=100.0, seed=11)
    output = tmp_path / "out"
    with LocalCluster(workers=3, map_slots=1, reduce_slots=1, heartbeat_timeout=1.5) as cluster:
        client = Client(cluster.address, timeout=30)
        killed: list[str] = []

        def kill_map_worker() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(list(output.glob("windows/*/_window.json"))) < 8:
                time.sleep(0.05)
            watcher = Client(cluster.address, timeout=30)
            try:
                job = next(j for j in watcher.jobs() if j["state"] == "running")
                tasks = watcher.job(job["job_id"])["tasks"]
            finally:
                watcher.close()
            worker = next(t["worker"] for t in tasks if t["kind"] == "map")
            victim = cluster.workers[int(worker.rsplit("-", 1)[1])]
            victim.send_signal(signal.SIGKILL)
            killed.append(worker)

        killer = threading.Thread(target=kill_map_worker)
        killer.start()
        try:
            options = stream_options(
                [f"replay:{events_path}?rate=500"], "2s", "1s", checkpoint_windows=2, checkpoint_seconds=0.5
            )
            spec = build_spec(
                load_job_file(job_path("event_wordcount"), "EventWordCountDifferential"),
                [],
                str(output),
                num_reduces=2,
                options={"stream": options, "max_attempts": 4},
            )
            report = run_stream(client, spec, progress=False, timeout=120, view_interval=None)["report"]
        finally:
            killer.join(timeout=70)
            client.close()
    assert killed, "the map's worker should have been killed"
    attempts = [a for a in report["attempts"] if a["kind"] == "map"]
    assert [a["status"] for a in attempts][-1] == "succeeded" and len(attempts) >= 2
    expected = python_windows(events, 2, 1)
    windows = read_windows(output)
    assert sorted(windows) == sorted(expected)
    for start, (meta, rows) in windows.items():
        assert rows == expected[start], f"window {meta['label']} ({meta['reason']})"
        assert meta["reason"] == "complete"


def test_a_reducer_retry_leaves_the_windows_already_written_as_they_were(tmp_path: Path) -> None:
    """The worker running the reducer and a map that had ended dies: the reducer's retry (no checkpoint yet) redoes
    every window without that map's spills, which went with the worker, and rewrote the part files of windows whose
    ``_window.json`` already said "complete" with a third of their rows gone (found by differential testing), and
    published every window to the sink again. A window once written stays as written, and goes to the sink once."""
    ended = tmp_path / "ended.jsonl"
    events = write_events(ended, 400, rate=20.0, seed=31)
    logs = tmp_path / "logs"
    logs.mkdir()
    live = write_events(logs / "live.jsonl", 400, rate=20.0, seed=32)
    with (logs / "live.jsonl").open("a", encoding="utf-8") as file:  # seals the live source past the rest
        file.write(json.dumps({"ts": T0 + 60.0004, "text": "last"}) + "\n")
    output = tmp_path / "out"
    # map-00000 and the reducer share a worker (reducers are placed first, then maps, each on the first free slot);
    # the live tail: map runs on the other one and keeps the job going.
    with (
        LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=1.5) as cluster,
        _sink_listener() as (port, published),
    ):
        client = Client(cluster.address, timeout=30)
        try:
            options = stream_options([f"replay:{ended}", f"tail:{logs}?glob=live.jsonl"], "2s",
                                     checkpoint_windows=1000, checkpoint_seconds=60,
                                     sink=f"tcp://127.0.0.1:{port}")  # fmt: skip
            spec = build_spec(load_job_file(job_path("event_wordcount"), "EventWordCount"), [], str(output),
                              num_reduces=1, options={"stream": options, "max_attempts": 4})  # fmt: skip
            job_id = client.submit(spec)
            deadline = time.monotonic() + 60
            while True:
                tasks = {f"{t['kind']}-{t['index']:05d}": t for t in client.job(job_id)["tasks"]}
                if tasks["map-00000"]["state"] == "committed" and len(list(output.glob("windows/*/_window.json"))) >= 8:
                    break
                assert time.monotonic() < deadline, "the ended map committed and windows were written"
                time.sleep(0.1)
            worker = tasks["map-00000"]["worker"]
            assert tasks["reduce-00000"]["worker"] == worker, tasks
            written = {path.parent.name for path in output.glob("windows/*/_window.json")}
            cluster.workers[int(worker.rsplit("-", 1)[1])].send_signal(signal.SIGKILL)
            while len([t for t in client.job(job_id)["tasks"] if t["kind"] == "reduce" and t["attempts"] >= 2]) < 1:
                assert time.monotonic() < deadline + 30, "the reducer was retried"
                time.sleep(0.1)
            time.sleep(2.0)  # the retry redoes the windows (the live map sends its spills again at once)
            client.stop(job_id)
            status = client.wait(job_id, timeout=60)
        finally:
            client.close()
    assert status["state"] == "succeeded", status.get("error")
    assert [a["status"] for a in status["report"]["attempts"] if a["kind"] == "reduce"] == ["lost", "succeeded"]
    expected = python_windows(events + live, 2, 2)
    windows = read_windows(output)
    assert written <= {meta["label"] for meta, _ in windows.values()}
    complete = {start: rows for start, (meta, rows) in windows.items() if meta["label"] in written}
    assert complete and all(windows[start][0]["reason"] == "complete" for start in complete)
    assert complete == {start: expected[start] for start in complete}
    # The sink had each window once, as written (the retry published them again, reasons and rows changed).
    labels = [message["label"] for message in published]
    assert sorted(set(labels)) == labels == sorted(labels), labels
    by_label = {meta["label"]: rows for meta, rows in windows.values()}
    assert all({json.loads(k): json.loads(v) for k, v in m["rows"]} == by_label[m["label"]] for m in published)


def test_windows_reported_through_a_worker_that_died_are_reported_again_by_the_retry(tmp_path: Path) -> None:
    """A reducer's window reports go through its worker; its checkpoints go to disk. The worker stops relaying
    (stopped, then killed) while the reducer writes windows and checkpoints: the retry restored a checkpoint past
    windows the coordinator never heard of, which had part files and no ``_window.json`` for ever, and the job's
    report counted fewer windows than it wrote (found by differential testing). The retry reports them again."""
    first = tmp_path / "first.jsonl"
    first.write_text(json.dumps({"ts": T0 + 0.0004, "text": "first"}) + "\n")  # ends at once, on the reducer's worker
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 2000, rate=100.0, seed=33)
    output = tmp_path / "out"
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=3.0) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            options = stream_options([f"replay:{first}", f"replay:{events_path}?rate=500"], "1s",
                                     checkpoint_windows=2, checkpoint_seconds=0.5)  # fmt: skip
            spec = build_spec(load_job_file(job_path("event_wordcount"), "EventWordCount"), [], str(output),
                              num_reduces=1, options={"stream": options, "max_attempts": 4})  # fmt: skip
            job_id = client.submit(spec)
            deadline = time.monotonic() + 60
            while True:
                tasks = {f"{t['kind']}-{t['index']:05d}": t for t in client.job(job_id)["tasks"]}
                if tasks["map-00000"]["state"] == "committed" and len(list(output.glob("windows/*/_window.json"))) >= 3:
                    break
                assert time.monotonic() < deadline, "the first source ended and windows were written"
                time.sleep(0.05)
            worker = tasks["reduce-00000"]["worker"]
            assert tasks["map-00001"]["worker"] != worker, tasks
            victim = cluster.workers[int(worker.rsplit("-", 1)[1])]
            victim.send_signal(signal.SIGSTOP)  # relays nothing: the reducer's reports wait in its socket
            time.sleep(1.5)  # (the reducer writes windows and checkpoints meanwhile)
            victim.send_signal(signal.SIGKILL)
            status = client.wait(job_id, timeout=90)
        finally:
            client.close()
    assert status["state"] == "succeeded", status.get("error")
    assert [a["status"] for a in status["report"]["attempts"] if a["kind"] == "reduce"] == ["lost", "succeeded"]
    folders = sorted(path.name for path in (output / "windows").iterdir())
    unreported = [name for name in folders if not (output / "windows" / name / "_window.json").exists()]
    assert not unreported, f"{len(unreported)} of {len(folders)} windows have no _window.json"
    assert status["report"]["continuous"]["windows_written"] == len(folders)


def test_cli_runs_until_stopped_and_drains(spark: Any, tmp_path: Path) -> None:
    """``hop run --source tail:DIR`` never ends by itself; Ctrl-C stops it: the open windows are written,
    state is checkpointed, Spark compacts the checkpoint deltas into the Parquet view (``hop view`` says where;
    Spark SQL reads it) and the run exits 0."""
    run = _ContinuousRun(tmp_path, ("--window", "1s", "--view-interval", "600"))
    output = run.output
    try:
        deadline = time.monotonic() + 60
        while not list(output.glob("windows/*/_window.json")):
            assert time.monotonic() < deadline and run.process.poll() is None, run.stderr()
            time.sleep(0.1)
        run.write("d e\n" * 10)
        run.wait_for_records(60)  # (a fixed wait could stop the map before it read them, on a loaded machine)
        os.killpg(run.process.pid, signal.SIGINT)  # Ctrl-C in a terminal: the cluster's processes get it too
        code = run.process.wait(timeout=60)
    finally:
        run.close()
    stderr = run.stderr()
    assert code == 0, stderr
    assert "stopping" in stderr
    totals: Counter[str] = Counter()
    for _, rows in read_windows(output).values():
        totals.update(rows)
    assert totals == Counter({"a": 50, "b": 50, "c": 50, "d": 10, "e": 10})
    report = json.loads((output / "_job.json").read_text())
    assert report["status"] == "succeeded" and report["continuous"]["stopped"] is True
    assert list((output / "_checkpoints" / "state").glob("reduce-*.msgpack"))
    view = hop("view", str(output), timeout=60)
    assert view.returncode == 0, view.stderr
    table = spark.read.parquet(view.stdout.strip())
    from_view = {
        row["key"]: int(row["total"])
        for row in table.groupBy("key").sum("value_num").withColumnRenamed("sum(value_num)", "total").collect()
    }
    assert from_view == {json.dumps(word): count for word, count in totals.items()}


class _ContinuousRun:
    """``hop run --source tail:DIR --window 1h`` (or ``options``) in a process group of its own, with its output under
    ``tmp_path``, over a log of 150 words: with the default options, once its map has read every line written so far
    (:meth:`wait_for_records`), they are all in an open window."""

    def __init__(self, tmp_path: Path, options: tuple[str, ...] = ("--window", "1h", "--no-view")) -> None:
        self.logs = tmp_path / "logs"
        self.logs.mkdir()
        self.output = tmp_path / "out"
        self.stderr_path = tmp_path / "stderr.txt"
        command = [sys.executable, "-m", "hop", "run", job_path("stream_wordcount"), "--source", f"tail:{self.logs}"]
        command += [*options, "-o", str(self.output), "--workers", "1"]
        self.write("a b c\n" * 50)
        self.temp = tmp_path / "temp"  # where the embedded cluster makes its directory
        self.temp.mkdir()
        environment = {**os.environ, "TMPDIR": str(self.temp)}
        with open(self.stderr_path, "w") as stderr:  # a file, not a pipe: read while it runs, without blocking
            self.process = subprocess.Popen(command, cwd=ROOT, stderr=stderr, env=environment, start_new_session=True)
        self.client: Client | None = None

    def write(self, lines: str) -> None:
        with open(self.logs / "app.log", "a") as log:
            log.write(lines)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def wait_for_records(self, count: int) -> None:
        """Until the job's map has read ``count`` records (its coordinator says so)."""
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline and self.process.poll() is None, f"{count} records read: {self.stderr()}"
            if self.client is None and "coordinator at " in self.stderr():
                self.client = Client(self.stderr().split("coordinator at ", 1)[1].split()[0], timeout=30)
            jobs = self.client.jobs() if self.client is not None else []
            if jobs and jobs[0]["input_records"] >= count:
                return
            time.sleep(0.1)

    def descendants(self) -> list[Any]:
        import psutil

        return list(psutil.Process(self.process.pid).children(recursive=True))

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def test_a_continuous_run_says_when_the_cluster_loses_a_worker(tmp_path: Path) -> None:
    """A worker lost during ``hop run --source`` was not mentioned on its stderr, though its tasks restarted
    elsewhere (batch runs said it): the run now says so, as batch's progress display does."""
    (tmp_path / "events.jsonl").write_text(json.dumps({"ts": T0, "text": "a b"}) + "\n")
    stderr_path = tmp_path / "stderr.txt"
    # A heartbeat timeout of 3 s, not 1 s: on a loaded machine the other worker's heartbeats were once late by a
    # second too, and it was lost as well (the job failed with no live workers).
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=3.0) as cluster:
        command = [sys.executable, "-m", "hop", "run", job_path("event_wordcount"), "--job-class", "EventWordCount"]
        command += ["--source", f"replay:{tmp_path}/events.jsonl?rate=50&loop=1", "--window", "1s", "--no-view"]
        command += ["-o", str(tmp_path / "out")]
        command += ["--coordinator", cluster.address, "--duration", "30s"]
        with open(stderr_path, "w") as stderr:
            run = subprocess.Popen(command, cwd=tmp_path, stderr=stderr)
        watcher = Client(cluster.address, timeout=30)
        try:
            deadline = time.monotonic() + 60
            while not any(job["input_records"] for job in watcher.jobs()):  # its map reads
                assert time.monotonic() < deadline and run.poll() is None, stderr_path.read_text()
                time.sleep(0.05)
            cluster.workers[1].send_signal(signal.SIGKILL)
            lost = "the cluster lost 1 worker, 1 left: the job's tasks that ran there run again (hop status"
            while lost not in stderr_path.read_text():  # (lost once its heartbeats stop: 3 s)
                assert time.monotonic() < deadline and run.poll() is None, stderr_path.read_text()
                time.sleep(0.05)
        finally:
            watcher.close()
            run.send_signal(signal.SIGINT)  # drains and ends
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait(timeout=10)
    said = stderr_path.read_text()
    assert said.count("the cluster lost") == 1, said
    assert "hop: continuous job job-" in said.split("the cluster lost")[0].splitlines()[-1], said


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_sent_to_the_run_then_to_its_group_is_one_ctrl_c(tmp_path: Path, number: int) -> None:
    """``timeout -s INT 60 hop run ...`` (coreutils) sends its signal to ``hop run`` and then to its process group,
    ``hop run`` included: it got two, which it took for a second Ctrl-C, and the job ended without draining (exit
    130, 'interrupted while stopping'). The second comes here 0.1 s after the first, handled by then (timeout's came
    0.4 ms apart, handled in between or not); the run drains as for one."""
    run = _ContinuousRun(tmp_path)
    try:
        run.wait_for_records(50)
        os.kill(run.process.pid, number)
        time.sleep(0.1)
        os.killpg(run.process.pid, number)
        assert run.process.wait(timeout=120) == 0, run.stderr()
    finally:
        run.close()
    assert "stopping" in run.stderr() and "interrupted" not in run.stderr(), run.stderr()
    windows = read_windows(run.output)
    assert [meta["reason"] for meta, _ in windows.values()] == ["stopped"], "the open window, written as it stopped"
    assert [rows for _, rows in windows.values()] == [{"a": 50, "b": 50, "c": 50}]
    report = json.loads((run.output / "_job.json").read_text())
    assert report["status"] == "succeeded" and report["continuous"]["stopped"] is True


def test_sigterm_to_the_whole_process_group_drains_a_continuous_run(tmp_path: Path) -> None:
    """``kill -TERM -PGID`` (systemd, a container's stop) reaches the embedded cluster's processes too; they leave
    it to ``hop run``, which drains as for a SIGTERM of its own: the open window is written, state checkpointed,
    the job ends stopped, and no process is left (they used to die at once: no last window, no report, exit 3)."""
    import psutil

    run = _ContinuousRun(tmp_path)
    try:
        run.wait_for_records(50)
        run.write("d e\n" * 10)
        run.wait_for_records(60)
        cluster = run.descendants()
        assert len(cluster) >= 4, "a coordinator, a worker and its task processes"
        os.killpg(run.process.pid, signal.SIGTERM)
        assert run.process.wait(timeout=120) == 0, run.stderr()
        _, alive = psutil.wait_procs(cluster, timeout=30)
    finally:
        run.close()
    assert not alive, [process.name() for process in alive]
    assert not list(run.temp.iterdir()), "the cluster's directory is removed as it stops"
    assert "stopping" in run.stderr()
    windows = read_windows(run.output)
    assert any(meta["reason"] == "stopped" for meta, _ in windows.values()), "the open window, written as it stopped"
    totals: Counter[str] = Counter()
    for _, rows in windows.values():
        totals.update(rows)
    assert totals == Counter({"a": 50, "b": 50, "c": 50, "d": 10, "e": 10})
    report = json.loads((run.output / "_job.json").read_text())
    assert report["status"] == "succeeded" and report["continuous"]["stopped"] is True
    assert list((run.output / "_checkpoints" / "state").glob("reduce-*.msgpack"))


def test_the_stop_command_a_continuous_run_prints_stops_it_as_printed(tmp_path: Path) -> None:
    """The ``hop stop`` command ``hop run`` prints for a continuous job works pasted as it is: it names the
    coordinator (it did not, and ``hop stop`` without ``--coordinator`` is refused as bad usage)."""
    import shlex

    run = _ContinuousRun(tmp_path)
    try:
        run.wait_for_records(50)
        hint = next(line for line in run.stderr().splitlines() if "stop it with" in line)
        command = shlex.split(hint.split("`")[1])
        assert command[:2] == ["hop", "stop"], hint
        stopped = hop(*command[1:], timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert run.process.wait(timeout=120) == 0, run.stderr()
    finally:
        run.close()
    report = json.loads((run.output / "_job.json").read_text())
    assert report["status"] == "succeeded" and report["continuous"]["stopped"] is True


def test_relative_source_paths_are_the_submitting_directorys_on_a_cluster(
    stream_cluster: LocalCluster, tmp_path: Path
) -> None:
    """With --coordinator, replay:in.txt and tail:logs were looked for in the worker's working directory (where it
    was started), not where hop run was, and the map failed ('logs does not exist'), while -o out and batch inputs
    name the run's directory. The URL stays as given in messages and the report."""
    (tmp_path / "in.txt").write_text("a b\n")
    assert not (Path.cwd() / "in.txt").exists()  # (the cluster's worker runs here)
    run = hop("run", job_path("stream_wordcount"), "--source", "replay:in.txt", "--window", "1r", "-o", "out",
              "--no-view", "--quiet", "--coordinator", stream_cluster.address, cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert sorted(p.read_text() for p in (tmp_path / "out" / "windows").glob("*/part-*")) == ['"a"\t1\n"b"\t1\n']
    options = json.loads((tmp_path / "out" / "_job.json").read_text())["continuous"]["options"]
    assert options["sources"] == ["replay:in.txt"] and options["directory"] == str(tmp_path)


def test_the_end_of_a_continuous_run_counts_its_windows_in_words(tmp_path: Path) -> None:
    """It said "ended: 1 windows in OUT/windows", and "0 windows in OUT/windows" of a folder that was not made."""
    (tmp_path / "one.txt").write_text("a b\n")
    (tmp_path / "none.txt").write_text("")
    for source, says in (("one.txt", f"ended: 1 window in {tmp_path / 'o-one.txt' / 'windows'}\n"),
                         ("none.txt", "ended: no window written\n")):  # fmt: skip
        run = hop("run", job_path("stream_wordcount"), "--source", f"replay:{source}", "--window", "1s", "-o",
                  f"o-{source}", "--workers", "1", "--no-view", cwd=tmp_path)  # fmt: skip
        assert run.returncode == 0 and says in run.stderr, run.stderr


def test_the_end_of_a_continuous_run_names_the_records_its_windows_left_out(tmp_path: Path) -> None:
    """Late records went to OUT/_late/ and bad ones were dropped without a word at the end: the run's last line
    counts them and says where they are."""
    events = [{"ts": T0, "text": "a"}, {"ts": T0 + 5, "text": "b"}, {"ts": T0 + 1, "text": "late"}]
    lines = [json.dumps(event) for event in events] + ["not json", json.dumps({"text": "no time"})]
    (tmp_path / "events.jsonl").write_text("".join(line + "\n" for line in lines))
    run = hop("run", job_path("event_wordcount"), "--job-class", "EventWordCount", "--source", "replay:events.jsonl",
              "--window", "2s", "-o", "out", "--workers", "1", "--no-view", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    late = f"1 record late (past --lateness 0s), listed in {tmp_path / 'out' / '_late'}"
    assert f"windows in {tmp_path / 'out' / 'windows'}; {late}; 2 records dropped as bad (per source" in run.stderr
    assert "late" in (tmp_path / "out" / "_late" / "map-00000.jsonl").read_text()


def test_the_end_of_a_continuous_run_names_the_records_it_shed(tmp_path: Path) -> None:
    """Records shed under --max-latency are in no window and no file: the run's last line counts them, as it counts
    late and bad ones (it said nothing of them, even when every record was shed)."""
    start = time.time() - 60  # a minute behind a 0.5 s latency bound: every record is shed
    events = [{"ts": start + i / 100, "text": "w"} for i in range(300)]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(event) + "\n" for event in events))
    run = hop("run", job_path("event_wordcount"), "--job-class", "EventWordCount", "--source", "replay:events.jsonl",
              "--window", "1s", "--max-latency", "0.5s", "-o", "out", "--workers", "1", "--no-view", "--quiet",
              cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["counters"]["shed_records"] == 300
    said = "300 records shed to keep up (--max-latency 0.5s), counted in no window (their panes show S)"
    assert run.stderr.splitlines() == [f"hop: {report['job_id']} ended; {said}"], run.stderr


def test_a_continuous_run_killed_as_it_drains_leaves_no_process(tmp_path: Path) -> None:
    """The cluster's processes ignore the group's SIGTERM only while ``hop run`` lives: killed as it drains, they
    end by themselves (``hop.lifetime.orphaned``) instead of waiting for it."""
    import psutil

    run = _ContinuousRun(tmp_path)
    try:
        run.wait_for_records(50)
        cluster = run.descendants()
        os.killpg(run.process.pid, signal.SIGTERM)
        run.process.kill()
        assert run.process.wait(timeout=30) == -signal.SIGKILL
        _, alive = psutil.wait_procs(cluster, timeout=30)
    finally:
        run.close()
    for process in alive:
        process.kill()
    assert not alive, [process.name() for process in alive]
    assert not list(run.temp.iterdir()), "the cluster's directory is removed by its orphaned coordinator"


def interrupt_twice_as_it_drains(
    command: list[str],
    output: Path,
    slow_reduce: float,
    hang_coordinator: bool = False,
    before_second: Callable[[], None] | None = None,
    hang_coordinator_first: bool = False,
) -> tuple[int, str, float]:
    """Run ``command`` (a continuous run into ``output``) in a process group of its own with reducers slowed by
    ``slow_reduce`` seconds a run; once a window is written, Ctrl-C the group, and again once the run says it is
    stopping (draining, which the slow reducers make last). ``hang_coordinator``: SIGSTOP the embedded coordinator
    just before the second (``hang_coordinator_first``: before the first, so that the stop itself waits on it);
    ``before_second`` is called just before it too. Its exit code, stderr and seconds after the second; every
    process of the run is gone (else the assertion says which were left)."""
    import psutil

    stderr_path = output.parent / f"{output.name}-stderr.txt"
    environment = {**os.environ, "HOP_TEST_SLOW_REDUCE_SECONDS": str(slow_reduce)}
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stderr=stderr, env=environment, start_new_session=True)
    descendants: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not list(output.glob("windows/*/_window.json")):
            assert time.monotonic() < deadline and process.poll() is None, stderr_path.read_text()
            time.sleep(0.05)
        if hang_coordinator_first:
            descendants = psutil.Process(process.pid).children(recursive=True)
            _embedded_launcher(process.pid, descendants).suspend()
        os.killpg(process.pid, signal.SIGINT)
        first = time.monotonic()
        while "stopping" not in stderr_path.read_text() or time.monotonic() < first + SAME_SIGNAL_SECONDS + 0.2:
            assert time.monotonic() < deadline and process.poll() is None, stderr_path.read_text()
            time.sleep(0.05)  # (sooner, the second would be taken for the first delivered again)
        descendants = list({p.pid: p for p in [*descendants, *psutil.Process(process.pid).children(True)]}.values())
        if hang_coordinator:
            _embedded_launcher(process.pid, descendants).suspend()
        if before_second is not None:
            before_second()
        os.killpg(process.pid, signal.SIGINT)
        second = time.monotonic()
        code = process.wait(timeout=60)
        took = time.monotonic() - second
        _, alive = psutil.wait_procs(descendants, timeout=10)
        assert not alive, f"left running: {[p.name() for p in alive]}"
        return code, stderr_path.read_text(), took
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        for leftover in descendants:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.resume()
                leftover.kill()


def _embedded_launcher(pid: int, descendants: list[Any]) -> Any:
    """The embedded cluster's launcher among the descendants of the run ``pid``: the coordinator, which forked the
    workers."""
    return next(p for p in descendants if p.ppid() == pid and "hop.cluster_launch" in p.cmdline())


def assert_interrupted_report(output: Path, code: int, stderr: str, took: float) -> None:
    """What a second Ctrl-C leaves: exit 130 within seconds, saying where the report is, and ``OUT/_job.json``
    with status interrupted, the windows written so far and the records read (no ``_SUCCESS``)."""
    assert code == 130, stderr
    assert "ended without draining" in stderr and str(output / "_job.json") in stderr, stderr
    assert took < 15, f"the second Ctrl-C took {took:.1f}s"
    report = json.loads((output / "_job.json").read_text())
    assert report["status"] == "interrupted" and "interrupted" in report["error"], report["error"]
    on_disk = len(list(output.glob("windows/*/_window.json")))
    assert 0 < report["continuous"]["windows_written"] <= on_disk, (report["continuous"], on_disk)
    assert report["continuous"]["records_read"] > 0
    assert not (output / "_SUCCESS").exists()


def _draining_run(tmp_path: Path) -> tuple[list[str], Path]:
    """``hop run``'s command line for a continuous word count, and its output: panes of 2 s at 1 s of event time a
    second, so that a reducer taking 1 s a pane keeps up, and drains for seconds when stopped."""
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 6000, rate=100.0, seed=9)
    output = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("event_wordcount"), "--job-class", "EventWordCount"]
    command += ["--source", f"replay:{events_path}?rate=100", "--window", "2s", "-o", str(output)]
    return [*command, "--workers", "1", "--no-view"], output


def test_a_second_ctrl_c_ends_the_run_at_once_with_a_report_saying_so(tmp_path: Path) -> None:
    """The first Ctrl-C drains; a second one while it drains (reducers slowed down, so it takes seconds) means
    "stop now": the run ends within seconds, exit 130, and ``OUT/_job.json`` says the job was interrupted, with the
    windows written so far and the records read (stopping the cluster alone left windows and no report at all)."""
    command, output = _draining_run(tmp_path)
    assert_interrupted_report(output, *interrupt_twice_as_it_drains(command, output, slow_reduce=1.0))


def test_a_second_ctrl_c_with_the_coordinator_hung_ends_the_run_at_once_with_its_own_report(tmp_path: Path) -> None:
    """A second Ctrl-C while the embedded coordinator is hung (SIGSTOP): the coordinator cannot end the job or write
    ``OUT/_job.json``. The run waited 5 s for it, another 15 s to stop the cluster, then ended with a TimeoutExpired
    traceback and exit 1 (a killed worker of the stopped coordinator is a zombie, which it took for running), the
    coordinator and a worker left behind, and no report. Now: exit 130 after those 5 s, every process killed, and
    a ``_job.json`` of its own saying the job was interrupted, with the windows on disk."""
    command, output = _draining_run(tmp_path)
    code, stderr, took = interrupt_twice_as_it_drains(command, output, slow_reduce=1.0, hang_coordinator=True)
    assert code == 130, stderr
    assert "did not end it within 5s, so the embedded cluster was killed" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    assert took < 10, f"the second Ctrl-C took {took:.1f}s"
    report = json.loads((output / "_job.json").read_text())
    assert report["status"] == "interrupted" and report["written_by"] == "hop run", report
    on_disk = sorted(path.parent.name for path in output.glob("windows/*/_window.json"))
    assert report["continuous"]["windows_written"] == len(on_disk) > 0, (report["continuous"], on_disk)
    assert report["continuous"]["last_window"] == on_disk[-1]
    assert not (output / "_SUCCESS").exists()


def test_a_second_ctrl_c_after_the_output_was_moved_away_says_no_report_was_written(tmp_path: Path) -> None:
    """``OUT`` moved away as the job drains, then a second Ctrl-C: the coordinator ends the job and writes no report
    (nor into a folder made under the name), but ``hop run``, finding no ``OUT/_job.json``, took it for a hung
    coordinator's: it killed the cluster and said the coordinator "did not end it within 5s". Now it goes by the
    coordinator's answer, which says ``OUT`` went. (The coordinator, which looks at ``OUT`` every turn of its loop,
    may have failed the job for it before the second Ctrl-C came: that one then ends nothing, and the run says the
    job failed, and why, as it exits 1.)"""
    command, output = _draining_run(tmp_path)
    code, stderr, _ = interrupt_twice_as_it_drains(
        command, output, slow_reduce=1.0, before_second=lambda: output.rename(tmp_path / "elsewhere")
    )
    if code == 1:
        assert f"hop: error: job failed: output directory {output} was removed or moved while the job ran" in stderr
    else:
        assert code == 130, stderr
        assert f"no {output / '_job.json'} was written: output directory {output} was removed or moved" in stderr
    assert "did not end it" not in stderr and "says so" not in stderr and "Traceback" not in stderr, stderr
    assert not output.exists() and not (tmp_path / "elsewhere" / "_job.json").exists()


def test_a_second_ctrl_c_says_a_job_its_hung_coordinator_did_not_end_may_still_run(tmp_path: Path) -> None:
    """``hop run --source ... --coordinator ADDRESS`` ending a job whose coordinator is hung (SIGSTOP) cannot write
    its report nor kill that cluster: it said ``_job.json`` "may not say how" the job ended, though the job was not
    ended, and a coordinator that comes back may go on running it. The line now says so, and how to look."""
    from hop.stream.runner import end_now

    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 6000, rate=100.0, seed=9)
    output = tmp_path / "out"
    options = stream_options([f"replay:{events_path}?rate=100"], "2s", None)
    spec = build_spec(load_job_file(job_path("event_wordcount"), "EventWordCount"), [], str(output),
                      num_reduces=1, options={"stream": options})  # fmt: skip
    # (Stopped past the heartbeat timeout, 5 s: woken, the coordinator does not count that silence against its one
    # worker, which it once took for lost, failing the job for want of workers: hop.coordinator.PAUSE_SECONDS.)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            job_id = client.submit(spec)
            assert cluster.coordinator is not None
            cluster.coordinator.send_signal(signal.SIGSTOP)
            try:
                line, answered = end_now(cluster.address, job_id, output)
            finally:
                cluster.coordinator.send_signal(signal.SIGCONT)
            assert f"{job_id} was not ended (coordinator {cluster.address} did not answer" in line, line
            assert not answered
            assert f"`hop status {job_id} --coordinator {cluster.address}`" in line, line
            # Come back, the coordinator may act on the request it left unanswered, or not (then the job goes on).
            state = client.status(job_id)["state"]
            assert state in ("running", "interrupted"), state
        finally:
            client.close()


@pytest.mark.parametrize("second_ctrl_c", [False, True], ids=["held-up", "held-up-then-ctrl-c"])
def test_the_last_windows_are_all_printed_and_a_ctrl_c_once_the_job_ended_cuts_none(
    tmp_path: Path, second_ctrl_c: bool
) -> None:
    """A stop of a 20m window sliding by 1s writes 1,200 windows at once, here while ``hop run``'s lines go to a
    pipe nobody reads for a while (as a slow terminal or a paused ``| less`` holds them), until the job has ended.
    ``hop run`` asked for the windows once per status, 100 at a time: the last status printed 100 of those left.
    ``second_ctrl_c``: then a second Ctrl-C, once the drained job had ended, exited 130 "interrupted while stopping;
    ... had ended (succeeded)", a window line cut off mid-way and the rest never printed. Every window has its line
    now, or is counted in one saying the coordinator no longer keeps it (it keeps the newest 500), and the summary
    follows: exit 0."""
    import fcntl

    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 6000, rate=100.0, seed=9)
    output = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("event_wordcount"), "--job-class", "EventWordCount"]
    command += ["--source", f"replay:{events_path}?rate=100", "--window", "20m", "--slide", "1s", "-o", str(output)]
    command += ["--workers", "1", "--no-view"]
    process = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert process.stderr is not None
    if hasattr(fcntl, "F_SETPIPE_SZ"):  # (a page: the run blocks on its window lines soon after they stop being read)
        fcntl.fcntl(process.stderr.fileno(), fcntl.F_SETPIPE_SZ, 4096)
    lines: list[str] = []
    reading, done = threading.Event(), threading.Event()
    reading.set()

    def read() -> None:
        for line in process.stderr:  # type: ignore[union-attr]
            lines.append(line)
            while not reading.is_set() and not done.is_set():
                reading.wait(0.05)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not any(line.startswith("hop: window ") for line in lines):
            assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)  # the first: drain
        first = time.monotonic()
        while not any("stopping" in line for line in lines) or time.monotonic() < first + SAME_SIGNAL_SECONDS + 0.2:
            assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
            time.sleep(0.05)
        reading.clear()  # the run's lines pile up in the pipe as the stop writes the last 1,200 windows
        while not (output / "_job.json").exists():  # the coordinator's report: the job has ended
            assert time.monotonic() < deadline and process.poll() is None, "".join(lines)
            time.sleep(0.05)
        time.sleep(0.5)
        assert process.poll() is None, "the run had printed everything: nothing was held up"
        if second_ctrl_c:
            os.killpg(process.pid, signal.SIGINT)  # the second, once the job had ended
        reading.set()
        code = process.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        done.set()
        reading.set()
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        reader.join(timeout=10)
        process.stderr.close()
    stderr = "".join(lines)
    report = json.loads((output / "_job.json").read_text())
    assert code == 0 and "interrupted" not in stderr, stderr[-2000:]
    assert report["status"] == "succeeded" and report["continuous"]["stopped"], report["status"]
    written = report["continuous"]["windows_written"]
    printed = re.findall(r"^hop: window (\S+): ", stderr, re.MULTILINE)
    # Those the coordinator no longer kept when the run, held up by its pipe, asked for them are counted instead.
    unlisted = re.findall(r"^hop: ([\d,]+) windows? written before these no longer listed .*: each has its "
                          rf"_window\.json in {re.escape(str(output / 'windows'))}$", stderr, re.MULTILINE)  # fmt: skip
    counted = sum(int(number.replace(",", "")) for number in unlisted)
    assert len(printed) == len(set(printed)) and len(printed) + counted == written > 1200, (len(printed), unlisted)
    assert set(printed) <= {path.parent.name for path in output.glob("windows/*/_window.json")}
    assert f"ended: {written:,} windows in {output / 'windows'}" in stderr.splitlines()[-1], stderr[-2000:]


def test_load_shedding_keeps_a_slow_map_within_its_latency_bound(stream_client: Client, tmp_path: Path) -> None:
    """A map that takes 4 ms per event over a stream of 1,000 events/s of live event time falls behind; with
    --max-latency it skips the records of panes whose deadline passed, counts them, and C2 marks those panes."""
    events_path = tmp_path / "events.jsonl"
    start = time.time()
    events = [{"ts": start + i / 1000 + 0.0004, "text": "w"} for i in range(3000)]
    events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    report = run_stream_job(
        stream_client, "SlowEventWordCount", [f"replay:{events_path}"], tmp_path / "out", "1s", max_latency=0.5
    )
    shed = report["counters"]["shed_records"]
    assert shed >= 500, "at 250 events/s against 1,000/s much of the stream must be shed"
    windows = read_windows(tmp_path / "out")
    assert sum(meta["records"] for meta, _ in windows.values()) + shed == len(events)
    marked = [meta for meta, _ in windows.values() if "S" in "".join(meta["scoreboard"]["grid"])]
    assert marked and all(meta["reason"] == "latency" for meta in marked)
    for meta, rows in windows.values():  # a window whose records were all shed is reported, with no rows
        assert rows == ({"w": meta["records"]} if meta["records"] else {})
    # One figure for the job: each shed pane once (3 s of events: at most 4 one-second panes), not once per
    # partition and per message that named it.
    assert 1 <= report["counters"]["shed_panes"] <= 4


def test_windows_whose_every_record_was_shed_are_written_saying_so(stream_client: Client, tmp_path: Path) -> None:
    """Events of a minute ago under ``--max-latency 0.5s``: the map sheds every one of them. No window held data, so
    none was written at all: the loss showed only in the counters (found by differential testing). Each window of
    the shed panes is written, with 0 records, ``latency`` and ``S`` in C2, as a window of lost panes is."""
    start = time.time() - 60
    events = [{"ts": start + i / 100, "text": "w"} for i in range(300)]
    events_path = tmp_path / "events.jsonl"
    events_path.write_text("".join(json.dumps(event) + "\n" for event in events))
    report = run_stream_job(
        stream_client, "EventWordCount", [f"replay:{events_path}"], tmp_path / "out", "1s", max_latency=0.5
    )
    assert report["counters"]["shed_records"] == 300 and report["counters"]["map_input_records"] == 0
    windows = read_windows(tmp_path / "out") if (tmp_path / "out" / "windows").exists() else {}
    assert sorted(windows) == sorted(python_windows(events, 1, 1)), "every window of the shed events is written"
    for meta, rows in windows.values():
        assert (meta["reason"], meta["records"], rows) == ("latency", 0, {})
        assert set("".join(meta["scoreboard"]["grid"])) == {"S"}


def test_a_map_tells_of_shed_panes_before_it_seals_past_them(tmp_path: Path) -> None:
    """A reducer may close a window as soon as the seal past it arrives; were the map to say which of its panes it
    shed only after that seal (it did), the window went out as complete, with no S in C2 and the shed records
    missing without a word. The map (run here with this test as its worker) announces shed panes first."""
    events_path = tmp_path / "events.jsonl"
    start = time.time()
    events_path.write_text("".join(json.dumps({"ts": start + i / 1000, "text": "w"}) + "\n" for i in range(2000)))
    job = load_job_file(job_path("stream_events"), "SlowEventWordCount")
    options = stream_options([f"replay:{events_path}"], "1s", max_latency=0.2)
    spec = build_spec(job, [], str(tmp_path / "out"), num_reduces=1, options={"stream": options})
    (tmp_path / "out").mkdir()  # (as the coordinator makes it, accepting the job: a task never does)
    context = zmq.Context.instance()
    worker_side = context.socket(zmq.PAIR)
    worker_side.setsockopt(zmq.LINGER, 0)
    channel = PairChannel(context, f"tcp://127.0.0.1:{worker_side.bind_to_random_port('tcp://127.0.0.1')}")
    results: list[dict[str, Any]] = []
    task = threading.Thread(
        target=lambda: results.append(run_stream_map(spec, 0, 0, tmp_path / "work", channel)), daemon=True
    )
    spills: list[dict[str, Any]] = []
    try:
        task.start()
        deadline = time.monotonic() + 60
        while task.is_alive() or worker_side.poll(0):
            assert time.monotonic() < deadline, "the map did not end within 60 s"
            if not worker_side.poll(100):
                continue
            sent = protocol.unpack(worker_side.recv())
            if sent["type"] == "spill":  # every spill reaches every reducer at once: nothing holds the map back
                spills.append(sent["meta"])
                worker_side.send(protocol.message("spill_status", index=0, attempt=0, unsent=0, last_seq=sent["seq"]))
        task.join(timeout=10)
    finally:
        channel.close()
        worker_side.close()
    assert results and results[0]["counters"]["shed_records"] > 0, (results, spills)
    shed_notices = 0
    for number, meta in enumerate(spills):
        if meta.get("shed"):
            shed_notices += 1
            sealed_before = max((m["sealed"] for m in spills[:number]), default=-1)
            assert min(meta["shed"]) >= sealed_before, f"panes {meta['shed']} shed after the seal to {sealed_before}"
    assert shed_notices > 0


def test_pane_flow_control_pauses_the_source_for_a_slow_reducer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reducers slowed to 30 ms per pane: the map stops reading while more than 16 of its panes are unsent
    (instead of buffering the stream), and every window is still exact."""
    monkeypatch.setenv("HOP_TEST_SLOW_REDUCE_SECONDS", "0.03")
    events_path = tmp_path / "events.jsonl"
    events = write_events(events_path, 2000, rate=100.0, seed=8)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            report = run_stream_job(
                client, "EventWordCount", [f"replay:{events_path}?rate=1000"], tmp_path / "out", "100ms", num_reduces=1
            )
        finally:
            client.close()
    assert report["counters"]["stream_pauses"] > 0
    # Bounded: the map reads nothing while over the threshold (16), so at most one poll's panes go past it.
    assert 16 < report["counters"]["max_unsent_panes"] <= 16 + 3, report["counters"]["max_unsent_panes"]
    windows = {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()}
    expected = python_windows(events, 0.1, 0.1)
    assert len(windows) == len(expected)
    for start, rows in windows.items():
        match = [s for s in expected if abs(s - start) < 1e-6]
        assert match and rows == expected[match[0]]


@contextlib.contextmanager
def _sink_listener() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """A SUB socket on a free port, read by a thread while the block runs (ZeroMQ drops what a disconnected
    publisher's pipe still held): yields the port and the list the messages go to."""
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    published: list[dict[str, Any]] = []
    done = threading.Event()

    def listen() -> None:
        while not done.is_set():
            if sub.poll(100):
                published.append(codec.unpackb(sub.recv(), use_list=True))  # (ints past 64 bits: docs/stream.md)

    listener = threading.Thread(target=listen)
    listener.start()
    try:
        yield port, published
    finally:
        done.set()
        listener.join(timeout=10)
        sub.close()


def test_windows_are_published_to_a_zeromq_sink(stream_client: Client, tmp_path: Path) -> None:
    events_path = tmp_path / "events.jsonl"
    write_events(events_path, 1000, rate=100.0, seed=9)
    with _sink_listener() as (port, published):
        run_stream_job(
            stream_client,
            "EventWordCount",
            [f"replay:{events_path}?rate=400"],  # a few seconds: the sink's connection is up for most windows
            tmp_path / "out",
            "2s",
            sink=f"tcp://127.0.0.1:{port}",
        )
    windows = read_windows(tmp_path / "out")
    by_label = {meta["label"]: rows for meta, rows in windows.values()}
    got: dict[str, dict[str, Any]] = {}
    for message in published:
        got.setdefault(message["label"], {}).update({json.loads(k): json.loads(v) for k, v in message["rows"]})
    # The first windows can be published before the sink's connection is up (PUB drops them): most must arrive.
    assert len(got) >= len(by_label) - 2
    for label, rows in got.items():
        assert rows == by_label[label]


def test_no_window_rows_are_capped_for_the_sink_or_on_request(stream_client: Client, tmp_path: Path) -> None:
    # 2,400 distinct words in one partition's windows: more rows than a reducer reports to the coordinator (1,000).
    events_path = tmp_path / "events.jsonl"
    events = [{"ts": T0 + i * 0.01 + 0.0004, "text": " ".join(f"u{i}x{j}" for j in range(12))} for i in range(200)]
    events_path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    with _sink_listener() as (port, published):
        report = run_stream_job(
            stream_client,
            "EventWordCount",
            [f"replay:{events_path}?rate=50"],  # 4 s: the sink's connection is up before the windows close
            tmp_path / "out",
            "1s",
            sink=f"tcp://127.0.0.1:{port}",
            num_reduces=1,
        )
    by_label = {meta["label"]: rows for meta, rows in read_windows(tmp_path / "out").values()}
    assert len(by_label) >= 2 and max(len(rows) for rows in by_label.values()) > 1000
    for message in published:
        assert {json.loads(k): json.loads(v) for k, v in message["rows"]} == by_label[message["label"]]
    assert {m["label"] for m in published} >= set(sorted(by_label)[1:])  # the first may precede the connection
    job_id = report["job_id"]
    first_rows = stream_client.windows(job_id)
    assert any(len(w["rows"]) < w["output_records"] for w in first_rows)  # the kept rows: a prefix, and it shows
    for window in stream_client.windows(job_id, all_rows=True):
        assert {json.loads(k): json.loads(v) for k, v in window["rows"]} == by_label[window["label"]]
    listing = stream_client.window_listing(job_id, limit=1)
    assert len(listing["windows"]) == 1 and listing["omitted"] == len(by_label) - 1
    # Without rows (hop run prints a line per window): the same windows, none of their rows on the socket.
    bare = stream_client.window_listing(job_id, rows=False)["windows"]
    assert [w["label"] for w in bare] == [w["label"] for w in first_rows] and all("rows" not in w for w in bare)
    assert [w["output_records"] for w in bare] == [w["output_records"] for w in first_rows]


def test_window_numbers_past_64_bits_cross_the_engine_and_the_sink(stream_client: Client, tmp_path: Path) -> None:
    """A stamp in nanoseconds read as seconds, windowed by 10 ms, is in window ~1.7e20 (past msgpack's 64 bits):
    its panes go through the shuffle, the control channel, the client and the sink like any other (the map once
    failed on every attempt with OverflowError and the source was given up silently)."""
    events = [{"ts": T0 + i * 0.1 + 0.0004, "text": "alpha"} for i in range(20)]
    nanos = {"ts": int(T0 * 1e9), "text": "nanos"}
    after = {"ts": T0 + 5.0004, "text": "beta"}  # below the watermark the nanoseconds moved: late
    events_path = tmp_path / "events.jsonl"
    events_path.write_text("".join(json.dumps(e) + "\n" for e in [*events, nanos, after]), encoding="utf-8")
    with _sink_listener() as (port, published):
        report = run_stream_job(
            stream_client,
            "EventWordCount",
            [f"replay:{events_path}?rate=10"],  # 2 s: the sink's connection is up before the last window
            tmp_path / "out",
            "10ms",
            sink=f"tcp://127.0.0.1:{port}",
        )
    assert [a["status"] for a in report["attempts"] if a["kind"] == "map"] == ["succeeded"]
    spec = WindowSpec.parse("10ms")
    huge = spec.pane_of(float(nanos["ts"]))  # (tumbling: a pane is a window)
    assert huge >= 2**64

    assert any(m["window"] == huge and m["rows"] == [['"nanos"', "1"]] for m in published)
    windows = {meta["label"]: (meta, rows) for meta, rows in read_windows(tmp_path / "out").values()}
    assert windows[spec.label(huge)][1] == {"nanos": 1}
    assert sum(rows.get("alpha", 0) for _, rows in windows.values()) == 20
    assert report["counters"]["late_records"] == 1
    assert max(w["window"] for w in stream_client.windows(report["job_id"])) == huge


def test_reducer_memory_pressure_pauses_the_sources(stream_client: Client, tmp_path: Path) -> None:
    """With a reducer memory budget smaller than a sliding window's panes, the reducer raises C2's pause indicator:
    the map waits ahead of the next window instead of flooding the reducer, and every window is still exact."""
    events_path = tmp_path / "events.jsonl"
    rng = random.Random(12)
    events = [
        {"ts": T0 + i / 200 + 0.0004, "text": " ".join(f"w{rng.randrange(5000)}" for _ in range(4))}
        for i in range(4000)
    ]
    events_path.write_text("".join(json.dumps(e) + "\n" for e in events))
    options = stream_options([f"replay:{events_path}?rate=2000"], "4s", "1s")  # paced: 2 s of input
    spec = build_spec(
        load_job_file(job_path("event_wordcount"), "EventWordCount"),
        [],
        str(tmp_path / "out"),
        num_reduces=1,
        reduce_memory=120_000,  # 10 KB of encoded cells: a window of 4 panes of ~800 distinct words is more
        options={"stream": options},
    )
    report = run_stream(stream_client, spec, progress=False, timeout=120, view_interval=None)["report"]
    assert report["counters"]["memory_pauses"] > 0
    assert report["counters"]["stream_memory_pauses"] > 0
    assert 10_000 < report["counters"]["max_held_bytes"] < 10 * 120_000  # one reducer's peak, past its budget
    got = {start: rows for start, (_, rows) in read_windows(tmp_path / "out").items()}
    assert got == python_windows(events, 4, 1)


def test_continuous_jobs_run_in_stream_slots_beside_batch_jobs(tmp_path: Path) -> None:
    """On a worker with one map and one reduce slot plus stream slots, a running continuous job takes only stream
    slots: a batch job submitted meanwhile gets the map and reduce slot and finishes, exact, while the stream runs
    (without stream slots it would wait for slots the never-ending tasks hold)."""
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"{' '.join(random.Random(i).choices(WORDS, k=3))}\n" for i in range(400)))
    text = tmp_path / "batch.txt"
    text.write_text("alpha beta\nbeta gamma gamma\n" * 500)
    with (
        LocalCluster(workers=1, map_slots=1, reduce_slots=1, stream_slots=2) as local,
        _looping_stream(local.address, tmp_path / "stream", lines) as (client, submitted),
    ):
        deadline = time.monotonic() + 60
        while len(list((tmp_path / "stream" / "windows").glob("*/_window.json"))) < 2:
            assert time.monotonic() < deadline, "the continuous job wrote no windows"
            time.sleep(0.1)
        (worker,) = client.workers()
        assert (worker["free_stream"], worker["free_map"], worker["free_reduce"]) == (0, 1, 1)
        run_job(client, "wordcount", [text], tmp_path / "batch", num_reduces=1)  # raises unless it succeeded
        assert output_dict(tmp_path / "batch") == {"alpha": 500, "beta": 1000, "gamma": 1000}
        assert client.status(submitted[0])["state"] == "running"


@contextlib.contextmanager
def _looping_stream(address: str, output: Path, lines: Path, sources: int = 1) -> Iterator[tuple[Client, list[str]]]:
    """A continuous word count of ``lines`` looping without end (``sources`` replay sources, 1 s windows into
    ``output``), run in a thread on the cluster at ``address``. Yields a client for the test and a list that holds
    the job's id once submitted; on exit the job is stopped and its thread joined."""
    client = Client(address, timeout=30)
    stream_client = Client(address, timeout=30)
    submitted: list[str] = []
    spec = build_spec(
        load_job_file(job_path("stream_wordcount")),
        [],
        str(output),
        num_reduces=1,
        options={"stream": stream_options([f"replay:{lines}?rate=400&loop=1"] * sources, "1s", None)},
    )
    runner = threading.Thread(
        target=run_stream,
        args=(stream_client, spec),
        kwargs={"progress": False, "timeout": 120, "view_interval": None, "on_submitted": submitted.append},
    )
    runner.start()
    try:
        yield client, submitted
    finally:
        if submitted:
            client.stop(submitted[0])
        runner.join(timeout=60)
        stream_client.close()
        client.close()
    assert not runner.is_alive()


def test_a_continuous_job_larger_than_the_stream_slots_overflows_into_map_and_reduce_slots(tmp_path: Path) -> None:
    """Two sources and a reducer on one stream slot: the tasks that find no stream slot take map and reduce slots,
    and the job runs (all its tasks must run at once) and gives every record."""
    lines = tmp_path / "lines.txt"
    lines.write_text("a b\nb c\n" * 300)
    with LocalCluster(workers=1, map_slots=2, reduce_slots=1, stream_slots=1) as local:
        client = Client(local.address, timeout=30)
        try:
            spec = build_spec(
                load_job_file(job_path("stream_wordcount")),
                [],
                str(tmp_path / "out"),
                num_reduces=1,
                options={"stream": stream_options([f"replay:{lines}", f"replay:{lines}"], "100r", None)},
            )
            report = run_stream(client, spec, progress=False, timeout=60, view_interval=None)["report"]
        finally:
            client.close()
    assert report["counters"]["map_input_records"] == 1200
    totals: Counter[str] = Counter()
    for _, rows in read_windows(tmp_path / "out").values():
        totals.update(rows)
    assert totals == Counter({"a": 600, "b": 1200, "c": 600})


def test_a_batch_job_waiting_for_slots_a_continuous_job_holds_says_so_and_runs_once_it_stops(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A continuous job whose sources found no free stream slot holds every map slot (as after a worker was lost):
    a batch job submitted then would wait for ever, silently. Its status says why (``waiting``), naming the
    continuous job and what to do, and the progress display prints that once; stopped, the continuous job gives
    the slots back and the batch job finishes, exact."""
    lines = tmp_path / "lines.txt"
    lines.write_text("a b\nb c\n" * 300)
    text = tmp_path / "batch.txt"
    text.write_text("alpha beta\nbeta gamma gamma\n" * 500)
    with (
        LocalCluster(workers=1, map_slots=2, reduce_slots=1, stream_slots=1) as local,
        _looping_stream(local.address, tmp_path / "stream", lines, sources=2) as (client, submitted),
    ):
        deadline = time.monotonic() + 60
        while not submitted or client.workers()[0]["free_map"] > 0:
            assert time.monotonic() < deadline, "the continuous job's sources took no map slot"
            time.sleep(0.1)
        batch = build_spec(load_job_file(job_path("wordcount")), [str(text)], str(tmp_path / "batch"), num_reduces=1)
        job_id = client.submit(batch)
        deadline = time.monotonic() + 10
        while "waiting" not in (status := client.status(job_id)):
            assert time.monotonic() < deadline, f"the batch job's status never said why it waits: {status}"
            time.sleep(0.1)
        assert status["waiting"] == {"kind": "map", "tasks": 1, "slots": 2, "held_by": [submitted[0]]}, status
        display = ProgressDisplay(False, address=local.address)
        display.update(status)
        display.update(status)
        assert capsys.readouterr().err == (
            f"hop: {job_id}: 1 map task wait: all 2 map slots of the live workers are held until stopped by "
            f"continuous job {submitted[0]}, whose tasks found no free stream slot. Start another worker (hop "
            f"worker --coordinator {local.address}), or stop that job (hop stop {submitted[0]} --coordinator "
            f"{local.address})\n"
        )
        client.stop(submitted[0])
        final = client.wait(job_id, timeout=60)
        assert final["state"] == "succeeded", final
        assert output_dict(tmp_path / "batch") == {"alpha": 500, "beta": 1000, "gamma": 1000}


def test_an_exception_in_uncombine_fails_the_job_naming_the_key_with_the_users_traceback(tmp_path: Path) -> None:
    (tmp_path / "lines.txt").write_text("".join(f"word{i % 3} boom\n" for i in range(20)))
    job = str(ROOT / "tests" / "jobs" / "stream_events.py")
    result = hop(
        "run", job, "--job-class", "FailingUncombine", "--source", "replay:lines.txt", "--window", "4r", "--slide",
        "1r", "-o", "out", "--no-view", "--quiet", "--duration", "60s", cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "uncombine at key 'boom' raised RuntimeError: cannot take boom out" in result.stderr, result.stderr
    assert 'stream_events.py", line' in result.stderr and "gave up after" not in result.stderr, result.stderr


def test_overwriting_the_folder_a_continuous_job_tails_is_refused(tmp_path: Path) -> None:
    """A batch job's ``-o logs/ --overwrite`` while a continuous job follows ``tail:logs/`` cleared the files the job
    follows (and the lines written to them since): refused while it runs, naming the folder and the job, the files
    left as they were."""
    from hop.client import JobRejected

    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    logs.mkdir()
    elsewhere.mkdir()
    (logs / "app.log").write_text("a b\n")
    (elsewhere / "c.txt").write_text("c\n")
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            options = stream_options([f"tail:{logs}"], "1s")
            spec = build_spec(load_job_file(job_path("stream_wordcount")), [], str(tmp_path / "windows"),
                              num_reduces=1, options={"stream": options})  # fmt: skip
            job_id = client.submit(spec)
            batch = build_spec(load_job_file(job_path("wordcount")), [str(elsewhere)], str(logs), overwrite=True)
            with pytest.raises(JobRejected, match=f"output directory {logs} holds {logs}, an input of job {job_id}"):
                client.submit(batch)
            assert (logs / "app.log").read_text() == "a b\n", "the refused job cleared the folder the job follows"
            client.stop(job_id)
            assert client.wait(job_id, timeout=60)["state"] == "succeeded"
        finally:
            client.close()
