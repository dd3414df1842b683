"""Kill a task or a whole worker at each injection point: the output is byte-identical and nothing counts twice.

Each case starts its own local cluster (3 workers, heartbeat timeout 1.5 s) with ``HOP_FAULT`` set in its environment
(see ``hop.faults``), runs word count, and compares part files and record counters with a run without faults.
"""

from __future__ import annotations

import collections
import json
import random
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq

from hop.client import Client
from hop.gen.text import generate_text
from hop.jobspec import JobSpec
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.protocol import message, unpack
from hop.runner import build_spec, run_pipeline, run_steps
from hop.stream.assembler import FOREVER
from hop.stream.options import stream_options
from hop.stream.tasks import run_stream_reduce
from hop.tasks import run_reduce
from shuffle import codec
from shuffle.keys import order_tag
from shuffle.pusher import run_message
from shuffle.runs import encode_grouped_run, encode_run
from tests.conftest import PairChannel, job_path, maps_running, output_dict, run_job

POINTS = [
    ("map", "running"),
    ("map", "pushed"),
    ("map", "checkpointed"),
    ("map", "done"),
    ("reduce", "received"),
    ("reduce", "merging"),
    ("reduce", "commit"),
]
RECORD_COUNTERS = (
    "map_input_records",
    "map_output_records",
    "combine_input_records",
    "combine_output_records",
    "reduce_output_records",
)
SPLIT_DEPENDENT_COUNTERS = ("combine_output_records", "spill_files", "spill_bytes")
"""Counters that depend on where the maps' inputs end: a map whose tail was split off for an idle slot (as a retried
map may be, on a loaded machine) combines and spills its two parts apart, so more keys leave its combiners."""
SETTINGS = {"num_reduces": 2, "split_size": 300_000, "spill_records": 20_000}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "in.txt"
    generate_text(path, 900_000, seed=9, vocabulary=5000, words_per_line=4)
    return path


@pytest.fixture(scope="module")
def reference(source: Path, cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Fault-free outputs and counters, per mode."""
    client = Client(cluster.address)
    results: dict[str, object] = {}
    for mode in ("pipelined", "blocking"):
        output = tmp_path_factory.mktemp("reference") / mode
        report = run_job(client, "wordcount", [source], output, mode=mode, **SETTINGS)
        assert report["num_maps"] == 3
        results[mode] = ([p.read_bytes() for p in sorted(output.glob("part-*"))], report)
    client.close()
    return results


def assert_counted_once(report: dict, expected: dict, names: tuple[str, ...] = RECORD_COUNTERS) -> None:
    """``report``'s counters ``names`` are those of the fault-free run ``expected``: nothing counted twice or lost.
    One of ``SPLIT_DEPENDENT_COUNTERS`` is compared only when neither run split a map's tail (``tail_splits``)."""
    split = {"run": report["tail_splits"], "expected": expected["tail_splits"]}
    for name in names:
        if name in SPLIT_DEPENDENT_COUNTERS and any(split.values()):
            continue
        assert report["counters"][name] == expected["counters"][name], (name, split)


def assert_same_as_reference(output: Path, report: dict, reference: tuple) -> None:
    parts, expected = reference
    assert [p.read_bytes() for p in sorted(output.glob("part-*"))] == parts
    assert_counted_once(report, expected)
    assert (output / "_SUCCESS").exists()


@pytest.mark.parametrize("mode", ["pipelined", "blocking"])
@pytest.mark.parametrize("target", ["task", "worker"])
@pytest.mark.parametrize(("kind", "point"), POINTS)
def test_fault_at_each_point(
    kind: str,
    point: str,
    target: str,
    mode: str,
    source: Path,
    reference: dict,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOP_FAULT", f"{kind}:{point}:1:0:{target}")
    # A short heartbeat timeout makes a killed worker count as lost quickly; when only a task dies, a longer one
    # keeps a loaded machine's late heartbeat from turning the task failure into a worker loss.
    heartbeat_timeout = 1.5 if target == "worker" else 5.0
    with LocalCluster(workers=3, map_slots=1, reduce_slots=1, heartbeat_timeout=heartbeat_timeout) as cluster:
        client = Client(cluster.address)
        try:
            report = run_job(client, "wordcount", [source], tmp_path / "out", mode=mode, **SETTINGS)
        finally:
            client.close()
    assert_same_as_reference(tmp_path / "out", report, reference[mode])
    hit = [a for a in report["attempts"] if a["kind"] == kind and a["task_id"].endswith("00001") and a["attempt"] == 0]
    assert hit and hit[0]["status"] in ("failed", "lost"), "the fault should have fired"
    if target == "worker":
        assert "was lost" in (hit[0].get("error") or "") or hit[0]["status"] == "lost"
    if (kind, point, target) == ("map", "checkpointed", "task"):
        retry = [a for a in report["attempts"] if a["task_id"] == "map-00001" and a["attempt"] == 1]
        assert retry and retry[0].get("resumed_after_records", 0) > 0, "the retry should resume at the checkpoint"
        assert report["counters"]["map_resumed_records"] == retry[0]["resumed_after_records"]
        # The kept spills are part of the committed output: counted as the run without the fault counts them.
        assert_counted_once(report, reference[mode][1], ("spill_files", "spill_bytes"))


@pytest.mark.parametrize("mode", ["pipelined", "blocking"])
def test_chaos_kills_random_workers_from_outside(mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 600_000, seed=13, vocabulary=2000)
    settings = {"num_reduces": 2, "split_size": 100_000, "spill_records": 5_000}
    output = tmp_path / "out"
    rng = random.Random(mode)
    with LocalCluster(workers=5, map_slots=1, reduce_slots=1, heartbeat_timeout=1.5) as cluster:
        client = Client(cluster.address)
        victims = rng.sample(cluster.workers, 2)

        def kill_later() -> None:
            # Counted from a victim's first map (from the job's submission, a loaded machine could kill both
            # before either ran anything, costing no attempt).
            names = [f"local-{cluster.workers.index(victim)}" for victim in victims]
            watcher = Client(cluster.address, timeout=30)
            try:
                deadline = time.monotonic() + 30
                while not any(maps_running(watcher, name) for name in names) and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                watcher.close()
            for victim in victims:
                time.sleep(rng.uniform(0.3, 1.2))
                victim.kill()
                # Ended, not only signalled: a SIGKILL takes effect once the victim is next scheduled, and a kill
                # that came after the job ended (a loaded machine) was checked for at once below, the victim
                # still running.
                victim.wait(timeout=10)

        killer = threading.Thread(target=kill_later)
        killer.start()
        try:
            report = run_job(client, "slow_map", [source], output, mode=mode, **settings)
        finally:
            killer.join(timeout=50)
            client.close()
        assert not killer.is_alive()
        assert all(victim.poll() is not None for victim in victims)
        clean = Client(cluster.address)
        try:
            expected = run_job(clean, "slow_map", [source], tmp_path / "clean", mode=mode, **settings)
        finally:
            clean.close()
    assert [p.read_bytes() for p in sorted(output.glob("part-*"))] == [
        p.read_bytes() for p in sorted((tmp_path / "clean").glob("part-*"))
    ]
    assert_counted_once(report, expected)
    assert any(a["status"] in ("failed", "lost") for a in report["attempts"]), "the kills should have cost attempts"


def test_a_killed_worker_of_an_embedded_cluster_is_lost_at_once_not_after_the_heartbeat_timeout(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 300_000, seed=21, vocabulary=2000)
    settings = {"num_reduces": 2, "split_size": 100_000}
    # Heartbeats alone would take a minute to give the killed worker up: the job would wait that long.
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=60.0) as cluster:
        client = Client(cluster.address)
        victim = cluster.workers[1]
        killed_at: list[float] = []

        def kill_once_its_map_runs() -> None:
            watcher = Client(cluster.address, timeout=30)
            try:
                deadline = time.monotonic() + 30
                while not maps_running(watcher, "local-1") and time.monotonic() < deadline:
                    time.sleep(0.02)
            finally:
                watcher.close()
            victim.kill()
            killed_at.append(time.monotonic())

        killer = threading.Thread(target=kill_once_its_map_runs)
        killer.start()
        try:
            report = run_job(client, "slow_map", [source], tmp_path / "out", **settings)
            ended_at = time.monotonic()
            expected = run_job(client, "slow_map", [source], tmp_path / "clean", **settings)
        finally:
            killer.join(timeout=40)
            client.close()
    assert killed_at, "the victim never ran a map"
    assert ended_at - killed_at[0] < 30, "the job waited for the heartbeat timeout"
    lost = [a for a in report["attempts"] if a["worker"] == "local-1" and a["status"] == "lost"]
    assert lost, "the killed worker's running attempts should be lost"
    assert output_dict(tmp_path / "out") == output_dict(tmp_path / "clean")
    assert_counted_once(report, expected)


def test_speculative_backup_beats_a_straggler(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.txt", "b.txt", "slow-c.txt"):
        generate_text(folder / name, 60_000, seed=len(name), vocabulary=500)
    # A cluster of its own: the backup needs a second live worker when the job starts, and the session's cluster may
    # have one declared lost after missed heartbeats on a loaded machine (it rejoins once heard from again).
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as cluster:
        client = Client(cluster.address)
        try:
            started = time.monotonic()
            report = run_job(
                client,
                "straggler",
                [str(folder / "*.txt")],
                tmp_path / "out",
                num_reduces=2,
                split_size=50_000,  # a map per file (smaller files would share one)
                options={"speculative": True},
            )
            took = time.monotonic() - started
        finally:
            client.close()
    assert took < 30, "the backup attempt should finish long before the straggler's 60 s sleep"
    slow = [a for a in report["attempts"] if a["kind"] == "map" and a["task_id"] == "map-00002"]
    assert [a["status"] for a in slow] == ["killed", "succeeded"]
    assert slow[0]["worker"] != slow[1]["worker"]
    expected: dict[str, int] = {}
    for path in folder.glob("*.txt"):
        for word in path.read_text(encoding="utf-8").split():
            expected[word] = expected.get(word, 0) + 1
    from tests.conftest import output_dict

    assert output_dict(tmp_path / "out") == expected


def test_losing_every_worker_fails_the_job_instead_of_hanging(tmp_path: Path) -> None:
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    generate_text(source, 300_000, seed=2, vocabulary=300)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1, heartbeat_timeout=1.0) as cluster:
        client = Client(cluster.address)
        killer = threading.Timer(0.5, cluster.workers[0].kill)
        killer.start()
        try:
            with pytest.raises(JobFailed, match="no live workers") as failure:
                run_job(client, "slow_map", [source], tmp_path / "out", split_size=50_000)
        finally:
            killer.join(timeout=5)
            client.close()
    assert not (tmp_path / "out" / "_SUCCESS").exists()
    assert "ran on each" not in str(failure.value), "one worker lost: no task is to blame"


def test_a_job_that_lost_every_worker_names_the_task_that_ran_on_each(tmp_path: Path) -> None:
    """A map whose code kills its worker is retried on the next worker, which it kills too: the job fails once none
    is left, and its error names that map and the workers it ran on, not only the last worker lost."""
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    source.write_text("a b\nboom\nc d\n", encoding="utf-8")
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=1.0) as cluster:
        client = Client(cluster.address)
        try:
            with pytest.raises(JobFailed, match="no live workers") as failure:
                run_job(client, "worker_killing_map", [source], tmp_path / "out")
        finally:
            client.close()
    assert "map-00000 (on local-" in str(failure.value)
    assert "ran on each of those workers as it was lost" in str(failure.value)


def test_a_job_whose_workers_were_all_killed_from_outside_blames_none_of_its_tasks(tmp_path: Path) -> None:
    """Both workers of a 2-worker cluster killed from outside at once: the tasks of the one found lost first
    were sent to the other, dead already but not yet found lost, and the job failed saying that a map (or reduces)
    "ran on each of those workers as it was lost: check whether its code ends the process it runs under". It says
    what happened: the workers went silent (by whom the coordinator cannot tell), how many times, and what ran on
    each as it was lost; the tasks sent to a worker already silent never started there, and no task is blamed."""
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=11, vocabulary=300)
    spec = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), num_reduces=1)
    # Free slots on each worker, so that the first one's tasks are sent to the second as soon as it is found lost.
    with LocalCluster(workers=2, map_slots=3, reduce_slots=2, heartbeat_timeout=4.0) as cluster:
        client = Client(cluster.address)
        try:
            job_id = client.submit(spec)
            deadline = time.monotonic() + 60
            while not (on := {t["worker"] for t in client.job(job_id)["tasks"] if t["state"] == "running"}):
                assert time.monotonic() < deadline, "no task running within 60 s"
                time.sleep(0.05)
            first = sorted(on)[0]  # a worker running a task of the job
            processes = {f"local-{i}": process for i, process in enumerate(cluster.workers)}
            # A tenth of a second apart, as two kills "at once" from a loaded machine may land: an embedded cluster's
            # worker found ended is lost a moment later (ENDED_GRACE_SECONDS), taking no task meanwhile. Lost at
            # once, its tasks went to the second, killed an instant later, and the error said they "ran on each" (it
            # failed so in CI with no sleep between the kills). A second apart they would start on the second.
            (second,) = set(processes) - {first}
            processes[first].kill()
            time.sleep(0.1)
            processes[second].kill()
            with pytest.raises(JobFailed, match="no live workers") as failure:
                status = client.wait(job_id, timeout=60)
                if status["state"] != "succeeded":
                    raise JobFailed(status)
        finally:
            client.close()
    error = str(failure.value.status["error"])
    assert "check whether its code" not in error and "ran on each" not in error, error
    silent = "went silent (killed or crashed: the coordinator cannot tell by whom)"
    # (Ended together, either may be found lost first.)
    order = re.search(rf"; the job lost workers 2 times as it ran: (\S+), (\S+) {re.escape(silent)}; running on", error)
    assert order is not None and set(order.groups()) == {first, second}, error
    first, second = order.groups()
    attempts = failure.value.status["report"]["attempts"]
    sent = [a for a in attempts if a["worker"] == second and a["start"] is None]  # sent as the first was found lost
    for task in {a["task_id"] for a in sent}:  # (not named as running on the second: it never started there)
        assert f"{task} (on {first}, {second})" not in error, error


def test_a_task_whose_worker_was_killed_once_is_retried_even_with_one_attempt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed from outside under a running map is not the map's fault: the map runs again and the job
    succeeds, even with --max-attempts 1 (attempts lost with a dying worker have a limit of their own, twice it)."""
    source = tmp_path / "in.txt"
    generate_text(source, 300_000, seed=5, vocabulary=300, words_per_line=4)
    monkeypatch.setenv("HOP_FAULT", "map:running:0:0:worker")
    # (3 s: a live worker silent that long under load would count as a second death, past the limit of two)
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=3.0) as cluster:
        client = Client(cluster.address)
        try:
            report = run_job(client, "wordcount", [source], tmp_path / "out", options={"max_attempts": 1})
        finally:
            client.close()
    assert [a["status"] for a in report["attempts"] if a["kind"] == "map"] == ["lost", "succeeded"]
    assert output_dict(tmp_path / "out") == collections.Counter(source.read_text(encoding="utf-8").split())


def test_a_map_whose_process_dies_on_every_attempt_names_its_input(tmp_path: Path) -> None:
    """A map whose code ends its task process on one line (os._exit, a crash in a C extension, memory the kernel
    kills for) fails the job after --max-attempts, saying how the process ended but not where: no record is known,
    and _job.json's attempts do not give a task's input. The error names the map's input, as that of a map whose
    worker died under it does."""
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    source.write_text("c d\n" * 500 + "exit here\n" + "c d\n" * 500, encoding="utf-8")
    job = tmp_path / "exiting.py"
    job.write_text(
        "import os\n\nfrom hop import Job\n\n\nclass Exiting(Job):\n    def map(self, offset, line):\n"
        "        if line == 'exit here':\n            os._exit(3)\n        yield line, 1\n"
    )
    options = {"max_attempts": 2}
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"), num_reduces=1, options=options)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            with pytest.raises(JobFailed) as failure:
                run_steps(client, spec, progress=False, timeout=60)
        finally:
            client.close()
    error = failure.value.status["error"]
    assert "exited with code 3 (os._exit() in the job's code?) (gave up after 2 failed attempts)" in error, error
    assert error.endswith(f"; map-00000 read {source}[0:{source.stat().st_size}]"), error


def test_hop_run_says_which_attempt_has_not_advanced_for_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A map blocked on one record (its code waiting on I/O, a lock, or its task process stopped with SIGSTOP) held
    its job for ever while ``hop run`` showed the same progress line without a word: only the cluster monitor
    alerted on it. The run now says which attempt, where, for how long, and how to cancel the job, once."""
    import hop.runner

    monkeypatch.setattr(hop.runner, "STALLED_NOTE_SECONDS", 5.0)  # (120 s by default)
    source = tmp_path / "in.txt"
    source.write_text("a b\n" * 100 + "block\n" + "c d\n" * 100, encoding="utf-8")
    job = tmp_path / "blocking.py"
    job.write_text(
        "import time\n\nfrom hop import Job\n\n\nclass Blocking(Job):\n    def map(self, offset, line):\n"
        "        if line == 'block':\n            time.sleep(12)\n        yield line, 1\n"
    )
    spec = build_spec(load_job_file(str(job)), [str(source)], str(tmp_path / "out"), num_reduces=1)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            run_steps(client, spec, progress=True, timeout=60)
        finally:
            client.close()
    said = capsys.readouterr().err
    stalled = r"hop: (job-\S+): map-00000 \(attempt 0, on worker local-0\) has not advanced for (\d+) s, at"
    note = re.findall(stalled, said)
    assert len(note) == 1, said
    job_id, seconds = note[0]
    assert 5 <= int(seconds) < 12, said
    assert f"the job waits for it (hop stop {job_id} --coordinator {cluster.address} cancels it)" in said, said
    assert (tmp_path / "out" / "_SUCCESS").exists()  # (it went on once the record was mapped)


def test_a_full_spill_disk_fails_the_job_cleanly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=4, vocabulary=20_000)
    monkeypatch.setenv("HOP_TEST_FILE_SIZE_LIMIT", "20000")  # spill files cannot grow past 20 kB
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            with pytest.raises(JobFailed) as failure:
                run_job(client, "wordcount", [source], tmp_path / "out", options={"max_attempts": 2})
        finally:
            client.close()
        # Workers delete a job's spill files when the coordinator announces its end, just after the client sees
        # the failure: wait for that (bounded).
        deadline = time.monotonic() + 15
        while (spill_dirs := list(Path(cluster._socket_dir or "").glob("hop-worker-*/job-*"))) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
    error = failure.value.status["error"]
    assert (
        "cannot write spill file" in error and "File too large" in error and "gave up after 2 failed attempts" in error
    )
    assert not (tmp_path / "out" / "_SUCCESS").exists() and not list((tmp_path / "out").glob("part-*"))
    assert not spill_dirs, f"the failed job's spill files should be gone: {spill_dirs}"


@pytest.mark.parametrize("skip", [0, 1000])
def test_a_full_output_disk_names_the_output_file_not_a_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skip: int
) -> None:
    """A reduce whose part file cannot be written (a full disk: here a file size limit, EFBIG) fails as the disk's
    fault, naming the file: it was blamed on the user's reduce at the key being written, with --skip-bad-records
    suggested, which skipped key after key as bad records."""
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=5, vocabulary=20_000)
    monkeypatch.setenv("HOP_TEST_FILE_SIZE_LIMIT", "60000")  # the part (some 250 kB) cannot be written whole
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            with pytest.raises(JobFailed) as failure:
                run_job(
                    client,
                    "wordcount_generic",  # (a hand-written reduce: written key by key, in its own calls)
                    [source],
                    tmp_path / "out",
                    spill_records=1000,  # (spill files well under the limit)
                    options={"max_attempts": 2, "skip_bad_records": skip},
                )
        finally:
            client.close()
    status = failure.value.status
    error = status["error"]
    assert re.match(r"reduce task 0 attempt \d: cannot write output file ", error), error
    assert "/_temporary/part-00000" in error, error
    assert "File too large" in error and "free space" in error, error
    assert "at key" not in error and "--skip-bad-records" not in error, error
    assert not status.get("traceback"), status.get("traceback")  # (the engine's frames say nothing more)
    assert not (tmp_path / "out" / "_SUCCESS").exists() and not list((tmp_path / "out").glob("part-*"))
    assert not list((tmp_path / "out").glob("_bad_records/*")), "no key was the reduce's fault"


@pytest.mark.parametrize(("job", "written"), [("wordcount", "folded"), ("wordcount_generic", "merged")])
def test_a_full_spill_disk_under_a_reducer_names_its_run_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str, written: str
) -> None:
    """A reducer short of memory writes runs to its worker's spill directory: an aggregate's folded state dumped
    (``shuffle.fold``), a merge pass's output (``shuffle.store``). On a full disk (here a file size limit, EFBIG)
    that failed the job with ``OSError: [Errno 27] File too large`` and the engine's traceback: it names the run
    file, the spill directory and what to do, as a map's spill file does, and is retried."""
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    generate_text(source, 400_000, seed=5, vocabulary=20_000)
    monkeypatch.setenv("HOP_TEST_FILE_SIZE_LIMIT", "60000")  # (spills of 1,000 records are well under it)
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        try:
            with pytest.raises(JobFailed) as failure:
                run_job(
                    client,
                    job,
                    [source],
                    tmp_path / "out",
                    spill_records=1000,
                    reduce_memory=1_000_000,  # (a fan-in of 2, and 7,812 keys folded at most: runs go to disk)
                    options={"max_attempts": 2},
                )
        finally:
            client.close()
    status = failure.value.status
    error = status["error"]
    run_file = rf"/reduce-00000-\d-[^/ ]+/{written}-\d+\.run"
    assert re.match(rf"reduce task 0 attempt \d: cannot write the reducer's run file /\S+{run_file}: ", error), error
    assert (
        ": File too large; free space in the worker's spill directory (hop worker --spill-dir; hop run's own "
        "cluster: TMPDIR) or point it at a larger disk, or give the reducers more memory (--reduce-memory) so that "
        "less of their input goes to disk (gave up after 2 failed attempts)"
    ) in error, error
    assert not status.get("traceback"), status.get("traceback")  # (the engine's frames say nothing more)
    assert not (tmp_path / "out" / "_SUCCESS").exists() and not list((tmp_path / "out").glob("part-*"))


def test_a_window_part_a_full_disk_cannot_hold_fails_the_continuous_job_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream reducer whose window part cannot be written (a full disk: here a file size limit, EFBIG, past which
    the second window's part grows and no pane's spill does) failed with ``OSError: [Errno 27] File too large`` and
    the engine's traceback. It names the part and what to do; the attempt is retried from its checkpoint (which
    redoes the window), and the job fails once retries are spent: no window is reported that was not written."""
    from hop.runner import JobFailed
    from hop.stream.runner import run_stream

    rng = random.Random(3)
    stamp, lines = 1_700_000_000.0, []
    words_of = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    for _ in range(1500):  # (100 events a second: some 400 to a 4 s window, some 1,000 stamps in its part)
        stamp += rng.expovariate(100.0)
        words = " ".join(rng.choices(words_of, k=rng.randint(1, 4)))
        lines.append(json.dumps({"ts": round(stamp, 3) + 0.0004, "text": words}) + "\n")
    events = tmp_path / "events.jsonl"
    events.write_text("".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    monkeypatch.setenv("HOP_TEST_FILE_SIZE_LIMIT", "6000")
    options = stream_options([f"replay:{events}"], "4s", "2s", deltas=False)  # (no delta: the parts fill first)
    job = load_job_file(job_path("stream_events"), "EventWordLists")
    spec = build_spec(job, [], str(out), num_reduces=2, options={"stream": options, "max_attempts": 2})
    with LocalCluster(workers=2, map_slots=2, reduce_slots=2) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            with pytest.raises(JobFailed) as failure:
                run_stream(client, spec, progress=False, timeout=120, view_interval=None)
        finally:
            client.close()
    status = failure.value.status
    error = status["error"]
    part = rf"{re.escape(str(out))}/windows/(\w+)/part-0000\d"
    named = re.match(rf"reduce task \d attempt 1: cannot write output file {part}: File too large; ", error)
    assert named, error
    assert error.endswith(
        "free space (or quota) on the output directory's file system, or write the output elsewhere (-o) (gave up "
        "after 2 failed attempts)"
    ), error
    assert not status.get("traceback"), status.get("traceback")  # (the engine's frames say nothing more)
    window = out / "windows" / named.group(1)
    assert not (window / "_window.json").exists(), "a window whose part was not written is not reported written"
    assert not [path.name for path in window.iterdir() if path.name.startswith(".")], "no half-written part is left"


def test_killing_a_worker_mid_pipeline_keeps_the_result_exact(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    generate_text(source, 2_000_000, seed=34, vocabulary=20000)  # 4 maps of 2-4 s
    jobs = pipeline_specs_for(source, tmp_path / "out", "slow_map", "topk")
    with LocalCluster(workers=3, map_slots=1, reduce_slots=2, heartbeat_timeout=2.0) as cluster:
        client = Client(cluster.address)
        killer = threading.Timer(2.0, cluster.workers[1].kill)
        killer.start()
        try:
            report = run_pipeline(client, jobs, progress=False, timeout=180)
        finally:
            killer.join(timeout=30)
            client.close()
    assert output_dict(tmp_path / "out") == {"top": expected_top(source)}
    attempts = [a for step in [*report["steps"], report] for a in step["attempts"]]
    assert any(a["status"] in ("failed", "lost", "killed") for a in attempts), "the kill cost some attempts"


def pipeline_specs_for(source: Path, output: Path, *jobs: str) -> list[JobSpec]:
    return [
        build_spec(load_job_file(job_path(job)), [str(source)], str(output), num_reduces=2, split_size=1 << 19)
        for job in jobs
    ]


def expected_top(source: Path, k: int = 20) -> list[list[Any]]:
    counts = collections.Counter(source.read_text(encoding="utf-8").split())
    return [[count, word] for count, word in sorted(((c, w) for w, c in counts.items()), reverse=True)[:k]]


def test_a_coordinator_woken_from_a_pause_does_not_take_its_workers_for_lost(tmp_path: Path) -> None:
    """A coordinator stopped (SIGSTOP, a suspended machine) for longer than the heartbeat timeout took every worker
    for lost on waking, before reading the heartbeats queued meanwhile: a job on one worker failed "no live
    workers". Silence while the coordinator itself did not run no longer counts; silence after it still does."""
    from hop.coordinator import Coordinator, WorkerInfo

    coordinator = Coordinator(f"ipc://{tmp_path}/coordinator", heartbeat_timeout=2.0)
    try:
        now = time.time()
        for name in ("quiet", "gone"):
            coordinator.workers[name] = WorkerInfo(
                identity=name.encode(), name=name, host="127.0.0.1", pid=0, map_slots=1, reduce_slots=1,
                free_map=1, free_reduce=1, last_seen=now - 3.0,
            )  # fmt: skip
        coordinator._last_turn = time.monotonic() - 3.0  # the loop did not turn for 3 s: a pause
        coordinator._check_heartbeats()
        assert coordinator.workers["quiet"].alive and coordinator.workers["gone"].alive
        # Heard from after the pause, one worker stays; the other stays silent past the timeout and is lost.
        coordinator._last_turn = time.monotonic()
        coordinator.workers["quiet"].last_seen = time.time()
        coordinator.workers["gone"].last_seen = time.time() - 2.5
        coordinator._check_heartbeats()
        assert coordinator.workers["quiet"].alive and not coordinator.workers["gone"].alive
    finally:
        coordinator.events.close()
        coordinator.socket.close(linger=0)


def test_a_paused_worker_is_declared_lost_then_rejoins_empty(tmp_path: Path) -> None:
    """SIGSTOP a worker mid-job for longer than the heartbeat timeout: the job finishes exactly without it; once
    resumed, the worker is told to reinit, kills what it ran, registers again and takes tasks of the next job."""
    source = tmp_path / "in.txt"
    generate_text(source, 1_200_000, seed=21, vocabulary=2000)
    expected = collections.Counter(source.read_text(encoding="utf-8").split())
    # A heartbeat timeout of 2 s, not 1 s: on a loaded machine the worker left running can miss a second of
    # heartbeats too, and be lost with the paused one.
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1, heartbeat_timeout=2.0) as cluster:
        client = Client(cluster.address, timeout=30)
        paused = cluster.workers[1]

        def pause() -> None:
            # Once local-1 runs a map (a fixed delay could pause it before it had any on a loaded machine, and the
            # pause would then cost no attempt).
            watcher = Client(cluster.address, timeout=30)
            try:
                deadline = time.monotonic() + 30
                while not maps_running(watcher, "local-1") and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                watcher.close()
            paused.send_signal(signal.SIGSTOP)
            time.sleep(5.0)  # 2.5 heartbeat timeouts
            paused.send_signal(signal.SIGCONT)

        pauser = threading.Thread(target=pause, name="pauser")
        pauser.start()
        try:
            first = run_job(client, "slow_map", [source], tmp_path / "first", num_reduces=2, split_size=100_000)
            pauser.join(timeout=30)
            assert output_dict(tmp_path / "first") == expected
            assert any(a["worker"] == "local-1" and a["status"] != "succeeded" for a in first["attempts"])
            deadline = time.monotonic() + 20
            while not all(w["alive"] for w in client.workers()):
                assert time.monotonic() < deadline, f"local-1 did not rejoin: {client.workers()}"
                time.sleep(0.1)
            faults = [f["kind"] for f in client.cluster()["faults"] if f.get("worker") == "local-1"]
            assert "worker_lost" in faults and "worker_rejoined" in faults[faults.index("worker_lost") :], faults
            second = run_job(client, "wordcount", [source], tmp_path / "second", num_reduces=2, split_size=100_000)
        finally:
            pauser.join(timeout=30)
            client.close()
        assert paused.poll() is None, "the paused worker must still run"
    assert output_dict(tmp_path / "second") == expected
    assert {a["worker"] for a in second["attempts"]} == {"local-0", "local-1"}


def _pause_once_a_map_runs(cluster: LocalCluster, worker: Any, then: Callable[[], None]) -> threading.Thread:
    """A thread that stops ``worker`` (SIGSTOP) once it runs a map of the cluster's job, then calls ``then``."""

    def pause() -> None:
        watcher = Client(cluster.address, timeout=30)
        try:
            deadline = time.monotonic() + 30
            while not maps_running(watcher, "local-0") and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            watcher.close()
        worker.send_signal(signal.SIGSTOP)
        then()

    return threading.Thread(target=pause, name="pauser")


def test_the_only_worker_paused_past_the_heartbeat_timeout_rejoins_and_the_job_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An embedded cluster's one worker stopped (SIGSTOP) or starved for longer than the heartbeat timeout, then
    running again: the job failed at once with "no live workers", though the worker rejoined a moment later. Its
    process still runs under the coordinator, so the job waits for it, and succeeds exactly; the run says it
    waits (it said the lost worker's tasks "run again", with none left to run them)."""
    source = tmp_path / "in.txt"
    generate_text(source, 600_000, seed=23, vocabulary=2000)
    expected = collections.Counter(source.read_text(encoding="utf-8").split())
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1, heartbeat_timeout=1.0) as cluster:
        client = Client(cluster.address, timeout=30)
        worker = cluster.workers[0]

        def resume() -> None:
            time.sleep(3.0)  # 3 heartbeat timeouts
            worker.send_signal(signal.SIGCONT)

        pauser = _pause_once_a_map_runs(cluster, worker, resume)
        spec = build_spec(
            load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), num_reduces=1, split_size=100_000
        )
        pauser.start()
        try:
            report = run_steps(client, spec, progress=True, timeout=120)
        finally:
            pauser.join(timeout=40)
            worker.send_signal(signal.SIGCONT)  # (whatever happened: the cluster's stop must reach it)
            client.close()
    assert output_dict(tmp_path / "out") == expected
    assert any(a["status"] == "lost" for a in report["attempts"]), "the pause cost no attempt: it came too late"
    said = capsys.readouterr().err
    assert ": the cluster lost 1 worker, 0 left: the job waits for a worker to rejoin (hop status" in said, said


def test_a_job_waiting_for_its_paused_worker_fails_once_that_worker_is_killed(tmp_path: Path) -> None:
    """The job that waits for its only worker, lost but still running (stopped), fails once that worker is killed
    rather than waiting for ever, naming it as the usual "no live workers" error does."""
    from hop.runner import JobFailed

    source = tmp_path / "in.txt"
    generate_text(source, 600_000, seed=24, vocabulary=2000)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1, heartbeat_timeout=1.0) as cluster:
        client = Client(cluster.address, timeout=30)
        worker = cluster.workers[0]

        def kill_once_lost() -> None:
            watcher = Client(cluster.address, timeout=30)
            try:
                deadline = time.monotonic() + 30
                while any(w["alive"] for w in watcher.workers()) and time.monotonic() < deadline:
                    time.sleep(0.05)
            finally:
                watcher.close()
            time.sleep(1.0)  # (the job waits for it meanwhile)
            worker.kill()

        pauser = _pause_once_a_map_runs(cluster, worker, kill_once_lost)
        pauser.start()
        started = time.monotonic()
        try:
            with pytest.raises(JobFailed, match=r"no live workers: the last one \(local-0\) was lost"):
                run_job(client, "slow_map", [source], tmp_path / "out", num_reduces=1, split_size=100_000)
        finally:
            pauser.join(timeout=40)
            client.close()
        assert time.monotonic() - started < 60
    assert not (tmp_path / "out" / "_SUCCESS").exists()


def test_a_resumed_map_counts_bad_lines_and_setup_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry resuming at a checkpoint reads again the lines its kept spills cover: the undecodable ones among them
    were listed by the failed attempt and must not be listed again, and its setup's counter increments are in the
    checkpoint's counters already."""
    source = tmp_path / "in.txt"
    good = tmp_path / "good.txt"
    generate_text(good, 600_000, seed=5, vocabulary=3000, words_per_line=4)
    source.write_bytes(b"bad \xff one\nbad \xfe two\nbad \xff three\n" + good.read_bytes())
    settings = {"num_reduces": 2, "spill_records": 500, "options": {"skip_bad_records": 5}}

    def run(name: str) -> dict[str, Any]:
        with LocalCluster(workers=1, map_slots=1, reduce_slots=2) as cluster:
            client = Client(cluster.address)
            try:
                return run_job(client, "counting_wordcount", [source], tmp_path / name, **settings)
            finally:
                client.close()

    clean = run("clean")
    monkeypatch.setenv("HOP_FAULT", "map:checkpointed:0")
    resumed = run("resumed")
    retry = [a for a in resumed["attempts"] if a["task_id"] == "map-00000" and a["attempt"] == 1]
    assert retry and retry[0].get("resumed_after_records", 0) > 0, "the retry should resume at the checkpoint"
    assert output_dict(tmp_path / "resumed") == output_dict(tmp_path / "clean")
    listed = [
        json.loads(line)["offset"]
        for listing in sorted((tmp_path / "resumed" / "_bad_records").iterdir())
        for line in listing.read_text(encoding="utf-8").splitlines()
    ]
    assert listed == [0, 10, 20]
    assert resumed["counters"]["bad_records_skipped"] == clean["counters"]["bad_records_skipped"] == 3
    assert resumed["counters"]["user"] == clean["counters"]["user"]
    assert resumed["counters"]["user"]["tasks"]["setup"] == 3  # one map and two reduces


def test_a_worker_removes_the_spill_directories_of_workers_that_died(tmp_path: Path) -> None:
    """A worker killed with -9 could not remove its spill directory (gigabytes of map output, never read again): the
    next worker on the host removes it. A live worker's directory, another host's and one without an owner stay."""
    import signal
    import subprocess
    import sys

    from hop.spilldirs import make_spill_dir, remove_abandoned

    root = tmp_path / "spills"
    root.mkdir()
    command = [sys.executable, "-c", "import sys, time; from hop.spilldirs import make_spill_dir; "
               f"print(make_spill_dir({str(root)!r}), flush=True); time.sleep(60)"]  # fmt: skip
    dead = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert dead.stdout is not None
    abandoned = Path(dead.stdout.readline().strip())
    (abandoned / "job-1").mkdir()
    dead.send_signal(signal.SIGKILL)
    dead.communicate(timeout=10)
    mine = make_spill_dir(str(root))
    elsewhere = root / "hop-worker-other"
    elsewhere.mkdir()
    (elsewhere / "owner").write_text("some-other-host 1 1.0\n")
    unowned = root / "hop-worker-unowned"
    unowned.mkdir()
    assert remove_abandoned(str(root)) == [abandoned]
    assert sorted(path.name for path in root.iterdir()) == sorted([mine.name, "hop-worker-other", "hop-worker-unowned"])


def _reducer_fed_runs(
    run: Callable[[PairChannel], dict[str, Any]], runs: list[tuple[dict[str, Any], bytes]], then: list[bytes]
) -> dict[str, Any]:
    """Run a reduce attempt (``run(channel)``) in a thread with this test as its worker: push it ``runs`` (header and
    run bytes) from one connection, check that each is acknowledged, send it ``then`` as its worker's messages, and
    return its result once it ends (30 s at most)."""
    context = zmq.Context.instance()
    worker_side = context.socket(zmq.PAIR)
    port = worker_side.bind_to_random_port("tcp://127.0.0.1")
    channel = PairChannel(context, f"tcp://127.0.0.1:{port}")
    pusher = context.socket(zmq.DEALER)
    results: list[dict[str, Any]] = []
    reducer = threading.Thread(target=lambda: results.append(run(channel)), daemon=True)
    try:
        reducer.start()
        assert worker_side.poll(10_000), "the reducer should say where it listens"
        ready = unpack(worker_side.recv())
        assert ready["type"] == "reducer_ready"
        pusher.connect(ready["address"])
        for header, data in runs:
            pusher.send_multipart([codec.packb(header), data])
        for _ in runs:  # every run is acknowledged, foreign ones too: the sender's credit comes back
            assert pusher.poll(10_000), "each run should be acknowledged"
            pusher.recv()
        for control in then:
            worker_side.send(control)
        reducer.join(timeout=30)
        assert not reducer.is_alive()
    finally:
        pusher.close(linger=0)
        worker_side.close(linger=0)
        channel.control_socket.close(linger=0)
    return results[0]


def test_a_reducer_ignores_runs_addressed_to_another_partition_or_job(tmp_path: Path) -> None:
    # A worker's connection to a reduce attempt that died stays open until the next attempt registers, and ZeroMQ
    # reconnects it to whatever binds that port next: another partition's reducer, or another job's. The runs it
    # then delivers say where they were going; a reducer must not take them for its own (a foreign run took the
    # seq of the map's real run, which was then dropped as a resend).
    source = tmp_path / "in.txt"
    source.write_text("a\n", encoding="utf-8")
    spec = build_spec(
        load_job_file(job_path("wordcount_nocombine")), [str(source)], str(tmp_path / "out"), num_reduces=2
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "out").mkdir()  # (the job's output, which its coordinator made: a reducer never makes it)

    def run(job_id: str, partition: int, keys: list[str], lists: list[list[int]]) -> tuple[dict[str, Any], bytes]:
        header = {"job_id": job_id, "map": 0, "attempt": 0, "seq": 0, "partition": partition}
        return header | {"records": sum(map(len, lists)), "tag": order_tag(keys)}, encode_grouped_run(keys, lists)

    result = _reducer_fed_runs(
        lambda channel: run_reduce(spec, 0, 0, 1, tmp_path / "work", channel),
        [run(spec.job_id, 1, ["other-partition"], [[1]]), run("job-another", 0, ["other-job"], [[1]])]
        + [run(spec.job_id, 0, ["a"], [[1, 1]])],
        [message("map_committed", job_id=spec.job_id, index=0, attempt=0, spills=1)],
    )
    assert Path(result["path"]).read_text(encoding="utf-8") == '"a"\t2\n'
    assert result["counters"]["reduce_input_records"] == 2


def test_a_reducer_asked_twice_for_a_snapshot_takes_it_once(tmp_path: Path) -> None:
    """A snapshot requested as a reduce attempt starts reaches it twice: broadcast to the job's reducers, and asked
    again by the coordinator as the attempt's ``reducer_ready`` shows it unanswered. The reducer took it twice, the
    second time while (or after) the coordinator published the first answer's folder: the published snapshot got
    the second writer's temporary files, renamed out from under it (seen in a ``--blocking`` run's snapshot), or
    the staging folder was made again. The second request is ignored; a newer snapshot is still answered."""
    source, output, work = tmp_path / "in.txt", tmp_path / "out", tmp_path / "work"
    source.write_text("a\n", encoding="utf-8")
    output.mkdir()  # (the job's output, which its coordinator made: a reducer never makes it)
    work.mkdir()
    spec = build_spec(load_job_file(job_path("wordcount")), [str(source)], str(output), num_reduces=1)
    context = zmq.Context.instance()
    worker_side = context.socket(zmq.PAIR)
    port = worker_side.bind_to_random_port("tcp://127.0.0.1")
    channel = PairChannel(context, f"tcp://127.0.0.1:{port}")
    results: list[dict[str, Any]] = []
    reducer = threading.Thread(target=lambda: results.append(run_reduce(spec, 0, 0, 1, work, channel)), daemon=True)

    def answer() -> dict[str, Any]:
        while worker_side.poll(10_000):
            received = unpack(worker_side.recv())
            if received["type"] == "snapshot_done":
                return received
        raise AssertionError("the reducer should have answered the snapshot")

    def ask(seq: int, label: str) -> None:
        worker_side.send(message("snapshot", job_id=spec.job_id, seq=seq, label=label))

    try:
        reducer.start()
        assert worker_side.poll(10_000) and unpack(worker_side.recv())["type"] == "reducer_ready"
        ask(0, "0.500")
        assert answer()["seq"] == 0
        # The coordinator publishes it (every partition answered), and its request reaches the reducer again.
        published = output / "_snapshots" / "0.500"
        published.parent.mkdir()
        (output / "_temporary" / "snapshots" / "0.500").rename(published)
        ask(0, "0.500")
        ask(1, "0.900")
        assert answer()["seq"] == 1, "the snapshot answered already was taken again"
    finally:
        if reducer.is_alive():  # (its map committed, with nothing for it: it ends)
            worker_side.send(message("map_committed", job_id=spec.job_id, index=0, attempt=0, spills=0))
            reducer.join(timeout=30)
        worker_side.close(linger=0)
        channel.close()
    assert not reducer.is_alive()
    assert sorted(path.name for path in published.iterdir()) == ["estimates-00000.jsonl", "part-00000"]
    assert not (output / "_temporary" / "snapshots" / "0.500").exists()
    assert results and Path(results[0]["path"]).read_text(encoding="utf-8") == ""


def test_a_stream_reducer_ignores_runs_addressed_to_another_partition_or_job(tmp_path: Path) -> None:
    # The same reconnection reaches a continuous job's reducer. A foreign run that said its source had ended used to
    # close the window with the other partition's keys in it, and the map's real run was then dropped as a resend.
    spec = build_spec(
        load_job_file(job_path("wordcount_nocombine")),
        [],
        str(tmp_path / "out"),
        num_reduces=2,
        options={"stream": stream_options(["tcp:127.0.0.1:0"], "10s")},
    )
    (tmp_path / "out").mkdir()  # (as the coordinator makes it, accepting the job: a task never does)

    def run(job_id: str, partition: int, key: str) -> tuple[dict[str, Any], bytes]:
        header = {"job_id": job_id, "map": 0, "attempt": 0, "seq": 0, "partition": partition, "records": 1}
        header |= {"tag": order_tag([key]), "pane": 0, "pane_records": 1, "sealed": FOREVER, "final": True}
        return header, encode_run([key], [1])

    _reducer_fed_runs(
        lambda channel: run_stream_reduce(spec, 0, 0, 1, channel),
        [run(spec.job_id, 1, "other-partition"), run("job-another", 0, "other-job"), run(spec.job_id, 0, "a")],
        [],
    )
    parts = sorted((tmp_path / "out" / "windows").glob("*/part-00000"))
    assert [part.read_text(encoding="utf-8") for part in parts] == ['"a"\t1\n']


def test_a_reducer_drops_what_is_not_a_run_piece_and_the_job_is_exact(
    cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    """Anything can connect to a reduce attempt's port (it binds on every interface): a message that was not a run
    piece (one frame, a header that is not msgpack, or not a run's) failed the attempt with a decoding error, and
    enough of them the job. The reducer drops such a message and takes the runs around it."""
    source = tmp_path / "in.txt"
    generate_text(source, 300_000, seed=8, vocabulary=300)
    spec = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(tmp_path / "out"), num_reduces=2)
    before = _listening_ports(cluster)
    job_id = client.submit(spec)
    deadline = time.monotonic() + 30
    while len(ports := _listening_ports(cluster) - before) < 2:  # the two reduce attempts' ports
        assert time.monotonic() < deadline, f"the reduce attempts not listening within 30 s: {ports}"
        time.sleep(0.05)
    context = zmq.Context.instance()
    for port in ports:
        stranger = context.socket(zmq.DEALER)
        stranger.setsockopt(zmq.LINGER, 0)
        try:
            stranger.connect(f"tcp://127.0.0.1:{port}")
            for frames in ([b"GET / HTTP/1.0\r\n"], [b"\xc1", b""], [b"\x92\x01", b""], [codec.packb({"a": 1}), b""]):
                stranger.send_multipart(frames)
            assert not stranger.poll(500), "a reducer answered what was not a run piece"
        finally:
            stranger.close()
    report = client.wait(job_id, timeout=60)
    assert report["state"] == "succeeded", report
    attempts = client.status(job_id)["report"]["attempts"]
    assert [a["status"] for a in attempts if a["kind"] == "reduce"] == ["succeeded", "succeeded"], attempts
    assert output_dict(tmp_path / "out") == dict(collections.Counter(source.read_text().split()))


def _listening_ports(cluster: LocalCluster) -> set[int]:
    """The TCP ports ``cluster``'s processes listen on (its launcher, which forked the coordinator and the workers,
    and all their descendants: a reduce attempt's is one that appeared with its job). Only those: another process
    of the test session (the JVM of a Spark session an earlier test started in this pytest process) may open or
    close a port meanwhile, which was then taken for a reduce attempt's."""
    assert cluster.coordinator is not None, "the cluster is started"
    root = psutil.Process(cluster.coordinator.pid)
    ports = set()
    for process in [root, *root.children(recursive=True)]:
        try:
            ports.update(c.laddr.port for c in process.net_connections("tcp") if c.status == psutil.CONN_LISTEN)
        except psutil.Error:  # (ended meanwhile)
            continue
    return ports


def test_only_a_run_piece_as_pushers_send_it_is_taken() -> None:
    """What a batch or stream reduce attempt takes from its port (``shuffle.pusher.run_message``)."""
    header = {"job_id": "job-1", "map": 0, "attempt": 0, "seq": 3, "partition": 1, "offset": 0, "size": 2}
    assert run_message([b"peer", codec.packb(header), b"ab"]) == (b"peer", header, b"ab")
    assert run_message([b"peer", zmq.Frame(codec.packb(header)), b"ab"]) == (b"peer", header, b"ab")
    for frames in (
        [b"peer", b"GET / HTTP/1.0"],
        [b"peer", b"\xc1", b""],
        [b"peer", codec.packb([1, 2]), b""],
        [b"peer", codec.packb({**header, "seq": "3"}), b""],
        [b"peer", codec.packb({k: v for k, v in header.items() if k != "job_id"}), b""],
        [b"peer", b"\x81\x91\x01\x02", b""],  # a map whose key is a list: unhashable
        [b"peer", codec.packb(header), b"ab", b"more"],
    ):
        assert run_message(frames) is None, frames
