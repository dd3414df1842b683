"""The cluster monitor's query over recorded samples equals a batch computation per window. The live cluster tests
(an induced CPU hog raises an alert for its worker only; a killed worker is a fault and missing from the scoreboard)
run with the dashboard in ``tests/test_monitor_dashboard.py``, which uses the helpers here."""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, run_pipeline
from hop.stream.options import stream_options
from hop.stream.runner import run_stream
from monitoring.cli import MONITOR_JOB
from tests.conftest import hop, job_path, run_job
from tests.test_stream_engine import assert_interrupted_report, interrupt_twice_as_it_drains, read_windows

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


def wait_for(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


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


def test_a_finished_jobs_elapsed_time_in_the_coordinators_samples_ends_with_it(client: Client, tmp_path: Path) -> None:
    """The coordinator's samples keep a finished job for 10 s; its ``elapsed`` (the dashboard's job time) went on
    counting from its submission meanwhile, so a job of half a second showed as taking up to 10 s."""
    import msgpack
    import zmq

    (tmp_path / "in.txt").write_text("a b a\n")
    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.LINGER, 0)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(client.cluster()["events"])
    try:
        report = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out", num_reduces=1)
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, "no sample listed the finished job"
            assert subscriber.poll(timeout=5000), "no sample from the coordinator"
            sample = msgpack.unpackb(subscriber.recv(), raw=False)
            ended = [job for job in sample["jobs"] if job["job_id"] == report["job_id"] and job["finished_at"]]
            if ended and sample["ts"] > ended[0]["finished_at"] + 0.5:
                break
    finally:
        subscriber.close()
    job = ended[0]
    assert job["elapsed"] == job["finished_at"] - job["submitted_at"], job


def _task_stalls(client: Client, run: Any) -> tuple[Any, dict[tuple[str, str], float]]:
    """``run()``'s result (a job run in another thread) and the longest ``stalled_s`` the coordinator's samples gave
    meanwhile per (job name, task kind)."""
    import threading

    import msgpack
    import zmq

    subscriber = zmq.Context.instance().socket(zmq.SUB)
    subscriber.setsockopt(zmq.LINGER, 0)
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    subscriber.connect(client.cluster()["events"])
    result: list[Any] = []
    runner = threading.Thread(target=lambda: result.append(run()), name="stalled-job")
    stalled: dict[tuple[str, str], float] = {}
    try:
        time.sleep(0.2)  # (subscribed before the job starts)
        runner.start()
        deadline = time.monotonic() + 60
        while runner.is_alive():
            assert time.monotonic() < deadline, "the job should have ended"
            if not subscriber.poll(timeout=500):
                continue
            sample = msgpack.unpackb(subscriber.recv(), raw=False)
            for task in sample["tasks"]:
                assert task["worker"] and task["host"], task
                key = (task["name"], task["task"].split("-")[0])
                stalled[key] = max(stalled.get(key, 0.0), task["stalled_s"])
    finally:
        runner.join(timeout=60)
        subscriber.close()
    assert result, "the job should have given its report"
    return result[0], stalled


def test_the_coordinators_samples_say_how_long_each_running_task_has_not_advanced(
    client: Client, tmp_path: Path
) -> None:
    """The stuck-task alert's input: a map blocked on one record has not advanced for as long as it blocks, while a
    reduce working through its keys advances (it reported nothing from its merge's start to its end, so it looked
    stuck for as long as it reduced)."""
    (tmp_path / "blocked.txt").write_text("block\n")
    (tmp_path / "words.txt").write_text("".join(f"word{n}\n" for n in range(350)))  # a 3.5 s reduce
    inputs = [tmp_path / "blocked.txt", tmp_path / "words.txt"]
    output = tmp_path / "out"
    report, stalled = _task_stalls(
        client, lambda: run_job(client, "blocked_map", inputs, output, "BrieflyBlockedSlowReduce", num_reduces=1)
    )
    assert report["status"] == "succeeded"
    job = "BrieflyBlockedSlowReduce"
    assert stalled.get((job, "map"), 0.0) >= 1.5, stalled  # blocked 3 s on its one record
    assert (job, "reduce") in stalled and stalled[(job, "reduce")] < 2.0, stalled  # 3.5 s of reducing, reported


def test_a_pipelines_next_step_waiting_for_the_one_before_is_not_stalled(client: Client, tmp_path: Path) -> None:
    """The second step's maps read the first's reduce output as it comes (a pipe), from a free map slot: waiting
    for it is no stall, while the first step's blocked map is."""
    (tmp_path / "in.txt").write_text("block\na\n")
    jobs = [
        build_spec(load_job_file(job_path("blocked_map"), job), [str(tmp_path / "in.txt")], str(tmp_path / "out"))
        for job in ("BrieflyBlockedMap", "PassedOn")
    ]
    report, stalled = _task_stalls(client, lambda: run_pipeline(client, jobs, progress=False, timeout=60))
    assert report["status"] == "succeeded" and report["pipelined"]
    assert stalled.get(("BrieflyBlockedMap", "map"), 0.0) >= 1.5, stalled  # blocked 3 s
    assert stalled.get(("PassedOn", "map"), 0.0) < 1.5, stalled  # listed once the step before has ended


def test_a_worker_that_registers_after_the_monitor_started_is_said_to_be_unwatched(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The query's sources are the workers there were when it started: one that registered later was in the
    dashboard's worker list and nowhere else (no host, no alert, not missing), without a word. The feed says so once
    and lists it, a new state for the dashboard (here the monitor was started with the first of two workers only, as
    if the second came later)."""
    from monitoring.cli import wait_for_workers
    from monitoring.feed import MonitorFeed

    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as local:
        client = Client(local.address, timeout=30)
        try:
            first, later = wait_for_workers(client, 2)
        finally:
            client.close()
        feed = MonitorFeed(local.address, "job-none", str(tmp_path), [first["name"], "coordinator"], [first["samples"]])
        feed.start()
        try:
            deadline = time.monotonic() + 30
            while not feed.snapshot()["unwatched_workers"] and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1)  # a few more polls: said once
        finally:
            feed.stop()
    assert feed.snapshot()["unwatched_workers"] == [later["name"]]
    assert feed.snapshot()["version"] == 1, "a new state (pushed to the dashboard), though no window came"
    said = [line for line in capfd.readouterr().err.splitlines() if "registered after the monitor started" in line]
    assert said == [
        f"hop: warning: worker {later['name']} registered after the monitor started; the monitoring query watches "
        f"the workers it started with ({first['name']}), not {later['name']}: start the monitor again to watch it"
    ]


def test_the_monitors_default_output_is_removed_when_it_stops(tmp_path: Path) -> None:
    """``hop monitor`` without ``-o`` writes into a temporary directory, which every run left in /tmp (some 10 KB
    a second of monitoring); it is removed when the monitor stops, and said so (``-o DIR`` is kept)."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    temp = tmp_path / "temp"
    temp.mkdir()
    command = [sys.executable, "-m", "hop", "monitor", "--workers", "1", "--duration", "3s"]
    environment = {**os.environ, "TMPDIR": str(temp)}
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert re.search(r"ended: [\d,]+ windows? in ", result.stderr), "it ran a while"
    assert "removed the temporary monitoring output" in result.stderr, result.stderr
    assert not list(temp.iterdir()), list(temp.iterdir())
    refused = subprocess.run(  # an error before any window: the directory is empty, nothing points into it
        [*command, "--window", "0s"], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )
    assert refused.returncode == 2 and "window extent '0s'" in refused.stderr, refused.stderr
    assert not list(temp.iterdir()), list(temp.iterdir())


def test_a_quiet_monitor_prints_only_its_addresses(tmp_path: Path) -> None:
    """``hop monitor --quiet`` ("print only the addresses") still printed where its output went, as ``hop run
    --quiet`` prints no progress lines: it prints the embedded cluster's coordinator and the dashboard, no more."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    temp = tmp_path / "temp"
    temp.mkdir()
    command = [sys.executable, "-m", "hop", "monitor", "--workers", "1", "--duration", "3s", "--quiet"]
    environment = {**os.environ, "TMPDIR": str(temp)}
    result = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("hop: embedded cluster's coordinator at ipc://"), result.stderr
    assert re.fullmatch(r"hop: cluster monitor dashboard at http://127\.0\.0\.1:\d+/monitor", lines[1]), lines
    assert result.stdout == "" and not list(temp.iterdir()), (result.stdout, list(temp.iterdir()))


def test_hop_view_of_a_monitors_output_does_not_name_an_option_the_monitor_has_not(tmp_path: Path) -> None:
    """``hop view OUT`` of ``hop monitor -o OUT`` said "its job ran with --no-view", which ``hop monitor`` has not:
    its query always runs without a view, and the message says so."""
    out = tmp_path / "out"
    result = hop("monitor", "--workers", "1", "--duration", "2s", "-o", str(out), "--quiet", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    view = hop("view", str(out), cwd=tmp_path)
    assert view.returncode == 1, view.stderr
    assert "ran without one (--no-view, as hop monitor's query always runs)" in view.stderr, view.stderr


def test_the_monitor_keeps_the_newest_windows_it_is_told_to(tmp_path: Path) -> None:
    """The monitoring query writes a window folder every slide for as long as it runs (860 MB a day at the default
    slide, in /tmp without -o): ``--keep-windows N`` keeps the newest N, removing older ones as it goes."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "monitor", "--workers", "1", "--duration", "6s", "--window", "1s"]
    command += ["--slide", "500ms", "-o", str(out), "--keep-windows", "2"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    written = json.loads((out / "_job.json").read_text())["continuous"]["windows_written"]
    printed = re.findall(r"^hop: window (\S+):", result.stderr, re.MULTILINE)  # as they were written, oldest first
    kept = sorted(folder.name for folder in (out / "windows").iterdir())
    # The newest two: with a 500 ms slide, a whole second's label sorts after the half second before it by name.
    assert written > 2 and kept == sorted(printed[-2:]), (written, kept, printed)
    assert all((out / "windows" / label / "_window.json").exists() for label in kept)
    # (it said "N windows in OUT/windows" of a folder holding 2)
    assert f"ended: {written} windows, the newest 2 kept in {out / 'windows'}" in result.stderr, result.stderr


def test_a_second_ctrl_c_ends_the_monitor_at_once_with_a_report_saying_so(tmp_path: Path) -> None:
    """As for ``hop run --source``: a second Ctrl-C while the monitoring query drains ends it now, and ``-o OUT``
    keeps a ``_job.json`` saying it was interrupted (the monitor exited 130 leaving none)."""
    import sys

    out = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "monitor", "--workers", "1", "--window", "2s", "-o", str(out)]
    # Two sources (the worker's samples, the coordinator's), a pane each per 2 s, a reducer taking 0.5 s a pane.
    code, stderr, took = interrupt_twice_as_it_drains(command, out, slow_reduce=0.5)
    assert_interrupted_report(out, code, stderr, took)
    # (its last line was a Python tuple: "hop: error: ('interrupted while stopping: ...', True)")
    assert stderr.splitlines()[-1].startswith("hop: error: interrupted while stopping: "), stderr


def test_a_monitor_whose_reducers_worker_dies_in_its_first_seconds_goes_on(tmp_path: Path) -> None:
    """The worker running the monitoring query's reducer killed before its first checkpoint (the query's first
    seconds): its retry, with no checkpoint, got the lost panes of the killed worker's samples from -2**1100 on and
    walked window by window from there at full CPU. The monitor printed no window again, and at the end of its
    --duration the query did not drain: "did not drain within 120s", exit 3, two minutes late. Now the windows go on
    (the dead host's stream missing from them) and it ends at its duration, exit 0."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    out = tmp_path / "out"
    stderr_path = tmp_path / "stderr.txt"
    command = [sys.executable, "-m", "hop", "monitor", "--workers", "2", "--duration", "12s", "-o", str(out)]
    started = time.monotonic()
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stderr=stderr, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob("windows/*/_window.json")):
            assert time.monotonic() < deadline and process.poll() is None, stderr_path.read_text()
            time.sleep(0.05)
        address = re.search(r"coordinator at (\S+)", stderr_path.read_text()).group(1)  # type: ignore[union-attr]
        client = Client(address, timeout=10)
        try:
            job_id = client.jobs()[-1]["job_id"]
            reducer = next(task for task in client.job(job_id)["tasks"] if task["kind"] == "reduce")
            pid = next(w["pid"] for w in client.workers() if w["name"] == reducer["worker"])
        finally:
            client.close()
        os.kill(pid, signal.SIGKILL)
        code = process.wait(timeout=90)
        took = time.monotonic() - started
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    said = stderr_path.read_text()
    assert code == 0, said
    assert took < 25, (took, said)  # (12 s, start-up and drain; exit 3 after 140 s before)
    after = said.split("the cluster lost 1 worker", 1)[1]
    assert re.search(r"^hop: window \S+: ", after, re.MULTILINE), said  # (none came after the kill)
    assert re.search(r"ended: [\d,]+ windows in ", after), said


def test_a_monitor_whose_embedded_coordinator_hangs_kills_its_cluster_at_once(tmp_path: Path) -> None:
    """The embedded coordinator hung (SIGSTOP) as the query runs: the monitor's request waits the client's 30 s, and
    the monitor then asked the hung coordinator to shut the cluster down and waited for its processes, 15 s more
    for nothing (a ``--duration 6s`` monitor ended after 49 s). It now kills the cluster at once, exit 3, saying
    where the windows written stay; no process of the cluster is left."""
    import os
    import signal
    import subprocess
    import sys

    import psutil

    from tests.conftest import ROOT

    out = tmp_path / "out"
    stderr_path = tmp_path / "stderr.txt"
    command = [sys.executable, "-m", "hop", "monitor", "--workers", "1", "--duration", "6s", "-o", str(out)]
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, stderr=stderr, start_new_session=True)
    descendants: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob("windows/*/_window.json")):
            assert time.monotonic() < deadline and process.poll() is None, stderr_path.read_text()
            time.sleep(0.05)
        descendants = psutil.Process(process.pid).children(recursive=True)
        launcher = next(p for p in descendants if p.ppid() == process.pid and "hop.cluster_launch" in p.cmdline())
        launcher.suspend()
        hung = time.monotonic()
        code = process.wait(timeout=90)
        took = time.monotonic() - hung
        _, alive = psutil.wait_procs(descendants, timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        for leftover in descendants:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.resume()
                leftover.kill()
    said = stderr_path.read_text()
    assert code == 3, said
    assert f"the embedded cluster was killed, and the windows written so far stay in {out / 'windows'}" in said
    assert took < 40, (took, said)  # (the client's 30 s, then at once; 45 s and more before)
    assert not alive, f"left running: {alive}"


@pytest.mark.parametrize("hangs", ["as-it-drains", "before-the-first"])
def test_a_second_ctrl_c_ends_a_monitor_whose_coordinator_hangs_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hangs: str
) -> None:
    """A second Ctrl-C while the embedded coordinator hangs (SIGSTOPped as the query drains, or before the first
    Ctrl-C, whose stop then waits on it): the monitor waited 5 s for the coordinator to end the query, 5 s for it to
    shut the cluster down and 10 s more before it killed it (25 s in all), then said the query "may still run there"
    and left no report. Now, as ``hop run --source``: exit 130 once those 5 s are out, every process of the cluster
    killed, its socket and directory gone, and ``OUT/_job.json`` of its own saying the query was interrupted."""
    import sys

    temp = tmp_path / "temp"  # (the embedded cluster's directory, with the coordinator's socket, goes here)
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "monitor", "--workers", "1", "--window", "2s", "-o", str(out)]
    first = hangs == "before-the-first"
    code, stderr, took = interrupt_twice_as_it_drains(
        command, out, slow_reduce=0.5, hang_coordinator=not first, hang_coordinator_first=first
    )
    assert code == 130, stderr
    assert took < 10, f"the second Ctrl-C took {took:.1f}s"
    assert "did not end it within 5s, so the embedded cluster was killed" in stderr, stderr
    assert "may still run there" not in stderr and "Traceback" not in stderr, stderr
    report = json.loads((out / "_job.json").read_text())
    assert report["status"] == "interrupted" and report["written_by"] == "hop monitor", report
    assert "a second Ctrl-C or SIGTERM on hop monitor" in report["error"], report["error"]
    on_disk = sorted(path.parent.name for path in out.glob("windows/*/_window.json"))
    assert report["continuous"]["windows_written"] == len(on_disk) > 0, (report["continuous"], on_disk)
    assert not list(temp.iterdir()), list(temp.iterdir())


@pytest.mark.parametrize(
    ("window", "slide", "says"),
    [
        ("10s", "20s", "a slide longer than the window would skip records"),
        ("1h", "1ms", "put every record in 3,600,000 windows"),
    ],
)
def test_the_monitor_refuses_bad_windows_before_it_starts_a_cluster(
    tmp_path: Path, window: str, slide: str, says: str
) -> None:
    """``hop monitor --window 10s --slide 20s`` started its embedded cluster and printed its coordinator's address
    before the query was refused: it is refused first, naming the options."""
    result = hop("monitor", "--window", window, "--slide", slide, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert f"hop: error: --window {window} --slide {slide}: " in result.stderr and says in result.stderr
    assert "coordinator at" not in result.stderr and not (tmp_path / "out").exists(), result.stderr


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--duration", "0"], "argument --duration: expected a duration above zero"),
        (["--max-latency", "0s"], "argument --max-latency: expected a duration above zero"),
        (["--coordinator", "tcp://127.0.0.1:9", "--workers", "3"], "--workers sizes the embedded cluster"),
        (["--coordinator", "tcp://127.0.0.1:9", "--racks", "2"], "--racks sizes the embedded cluster"),
    ],
    ids=["duration-0", "max-latency-0", "workers-with-coordinator", "racks-with-coordinator"],
)
def test_the_monitor_refuses_options_that_would_do_nothing_before_it_starts(
    tmp_path: Path, options: list[str], says: str
) -> None:
    """``--duration 0`` started a cluster and stopped it at once (``hop run`` refuses it), ``--max-latency 0`` was
    refused only once the embedded cluster had started, and ``--workers``/``--racks`` with ``--coordinator`` were
    ignored: each is refused first (exit 2), before a cluster starts or a coordinator is asked."""
    result = hop("monitor", *options, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert "coordinator at" not in result.stderr and not (tmp_path / "out").exists(), result.stderr


def test_the_monitor_refuses_overwrite_without_an_output_before_it_starts(tmp_path: Path) -> None:
    """``hop monitor --overwrite`` without ``-o`` started its cluster and ran, the option ignored: the default
    output is a new temporary directory, with nothing to replace. It is refused first, as options that would do
    nothing are."""
    result = hop("monitor", "--overwrite", "--duration", "1s", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "hop: error: --overwrite replaces a non-empty -o directory" in result.stderr, result.stderr
    assert "coordinator at" not in result.stderr, result.stderr


def test_the_monitor_warns_of_costly_windows_as_hop_run_does(tmp_path: Path) -> None:
    """``hop run --source`` warns of windows of many panes or a record in many windows; ``hop monitor`` ran the same
    query without a word. It warns before anything else (here an ``-o`` it refuses, so no cluster starts)."""
    taken = tmp_path / "out"
    taken.mkdir()
    (taken / "kept.txt").write_text("a previous run's\n")
    result = hop("monitor", "--window", "20m", "--slide", "1s", "-o", str(taken), cwd=tmp_path)
    assert result.returncode == 2 and "--overwrite" in result.stderr, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("hop: warning: ")]
    assert len(warnings) == 2 and all(line.startswith("hop: warning: --window 20m --slide 1s: ") for line in warnings)
    assert "1,200 panes" in warnings[0] and "falls in 1,200 windows" in warnings[1], warnings
    assert "coordinator at" not in result.stderr


def test_the_monitor_refuses_an_alert_rule_that_cannot_hold_before_it_starts_a_cluster(tmp_path: Path) -> None:
    """``--alert-average`` longer than ``--alert-baseline`` is refused, naming both, before anything starts."""
    result = hop("monitor", "--alert-average", "5m", "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert (
        "hop: error: the alert rule's host average (300 s, --alert-average) must be positive and no longer than "
        "the others' baseline (120 s, --alert-baseline)" in result.stderr
    ), result.stderr
    assert "coordinator at" not in result.stderr and not (tmp_path / "out").exists(), result.stderr
