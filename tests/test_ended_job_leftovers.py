"""A job's end removes ``OUT/_temporary``, but an attempt still running then may write there afterwards (its output,
a snapshot's files) until its worker ends it. The coordinator removes such leftovers once it hears the attempt has
ended, however it ended: killed on its request (``slot_free``), or done or failed on its own (``map_done``,
``reduce_done``, ``task_failed``: an attempt that finished before its worker heard of the job's end, or whose worker
did not hear of it in time). A coordinator that keeps running (``hop coordinator`` with ``hop worker``s) left them
for good when the attempt ended on its own. Real coordinator state and real files; the test plays the worker's side
of the wire, as the worker relays an attempt's last report (``tests/test_slot_accounting.py``)."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.coordinator import Coordinator
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, online_options
from tests.conftest import job_path, relay, submit_to_handlers, write_as_a_late_reduce


def _late_report(kind: str, job_id: str, output: Path) -> dict[str, Any]:
    """What worker ``w`` relays as an attempt of ``job_id`` ends on its own: ``kind`` is the message."""
    common = {"type": kind, "job_id": job_id, "worker": "w", "attempt": 0, "index": 0, "at": time.time()}
    if kind == "map_done":
        return {**common, "pool": "map", "spills": 1, "counters": {}, "user_counters": {}}
    if kind == "reduce_done":
        path = str(output / "_temporary" / "part-00000.attempt-0")
        return {**common, "pool": "reduce", "path": path, "counters": {}, "user_counters": {}}
    return {**common, "pool": "reduce", "kind": "reduce", "error": "ValueError: refusing it", "traceback": None}


@pytest.mark.parametrize("kind", ["reduce_done", "task_failed", "map_done"])
def test_a_late_attempt_that_ends_on_its_own_leaves_nothing_under_temporary(
    coordinator: Coordinator, tmp_path: Path, kind: str
) -> None:
    source, output = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output)
    coordinator.on_stop_job(b"client", {"job_id": job_id})  # hop stop: the job is cancelled, its attempts live on
    assert coordinator.jobs[job_id].state == "failed" and not (output / "_temporary").exists()
    write_as_a_late_reduce(output)
    relay(coordinator, _late_report(kind, job_id, output))
    assert not (output / "_temporary").exists(), sorted(map(str, output.rglob("*")))
    assert (output / "_job.json").exists(), "the job's report stays"


def test_a_late_attempt_leaves_temporary_to_a_job_running_now_on_the_same_output(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    source, output = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b a\n")
    ended = submit_to_handlers(coordinator, source, output)
    coordinator.on_stop_job(b"client", {"job_id": ended})
    running = submit_to_handlers(coordinator, source, output)  # submitted again with --overwrite
    files = write_as_a_late_reduce(output)  # (as the running job's reduce writes them, for all the test knows)
    relay(coordinator, _late_report("task_failed", ended, output))
    assert coordinator.jobs[running].state == "running"
    assert all(path.exists() for path in files), "the running job's files stay"


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("ends", ["done", "failed"])
def test_a_reduce_that_writes_after_its_job_was_cancelled_leaves_nothing_on_a_cluster_that_keeps_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ends: str
) -> None:
    """The same on real processes: the job is cancelled while its worker cannot hear of it (stopped: SIGSTOP) and
    its reducer is held in ``reducer_init``; let go, the reducer writes its output under ``OUT/_temporary`` and
    ends (done, or failed by ``reducer_final``). Resumed, the worker relays that report before it reads the job's
    end, so it kills nothing: the coordinator hears of the attempt only by its report. (It may read the job's end
    first, then it kills the attempt's idle slot and says so: ``slot_free``, the case handled before.) The cluster
    keeps running; before, it kept ``OUT/_temporary`` (and, for the failed reducer, its part file) for good."""
    gate = tmp_path / "gate"
    gate.mkdir()
    if ends == "failed":
        (gate / "fail").touch()
    monkeypatch.setenv("HOP_TEST_GATE", str(gate))
    source, output = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b a\n")
    spec = build_spec(load_job_file(job_path("gated_reduce")), [str(source)], str(output), num_reduces=1)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1, heartbeat_timeout=30) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            job_id = client.submit(spec)
            _wait_for((gate / "entered").exists, "the reducer reached reducer_init")
            worker = cluster.workers[0].pid
            os.kill(worker, signal.SIGSTOP)
            try:
                client.stop(job_id)
                assert client.wait(job_id, timeout=30)["state"] == "failed"
                assert not (output / "_temporary").exists(), "the job's end removed it"
                (gate / "go").touch()
                _wait_for((gate / "ended").exists, "the reducer wrote its output")
                assert list(output.glob("_temporary/part-00000.attempt-*")), "written after the job's end"
                time.sleep(0.2)  # (its report on its way to the worker)
            finally:
                os.kill(worker, signal.SIGCONT)
            deadline = time.monotonic() + 10
            while (output / "_temporary").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            left = sorted(str(path.relative_to(output)) for path in output.rglob("*"))
            assert left == ["_job.json"], left
        finally:
            client.close()


def test_a_snapshot_answered_after_its_job_ended_is_not_published(coordinator: Coordinator, tmp_path: Path) -> None:
    """A reducer's answer to a snapshot request that reaches the coordinator after the job ended (stopped early,
    cancelled: the reducer answered before it heard of the end) completed the snapshot, which the coordinator then
    published into ``OUT/_snapshots``: after the client was told the job had ended, remaking ``OUT`` if it had been
    removed, and into the output of a job submitted there since (one without ``--overwrite`` was refused, the
    directory "not empty"). The answer's files are left where the job's end removes them: nothing is published."""
    source, output = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output, snapshot_every=0.5)
    coordinator.on_snapshot(b"client", {"job_id": job_id})  # hop snapshot: asked of the reducer
    snapshot = coordinator.jobs[job_id].snapshots.snapshots[-1]  # type: ignore[union-attr]
    coordinator.on_stop_job(b"client", {"job_id": job_id})
    assert coordinator.jobs[job_id].state == "failed"
    for removed in (False, True):
        if removed:  # the ended job's output removed, and the folder made again (by the next job's run)
            shutil.rmtree(output)
            output.mkdir()
        staging = output / "_temporary" / "snapshots" / snapshot.label
        staging.mkdir(parents=True)
        (staging / "part-00000").write_text('"a"\t2\n')
        (staging / "estimates-00000.jsonl").write_text("")
        answer = {"type": "snapshot_done", "job_id": job_id, "worker": "w", "index": 0, "attempt": 0}
        relay(coordinator, {**answer, "seq": snapshot.seq, "label": snapshot.label, "rows": [], "groups": 1})
        left = sorted(str(path.relative_to(output)) for path in output.rglob("*"))
        assert left == ([] if removed else ["_job.json"]), left


def test_a_retired_job_leaves_nothing_in_the_coordinators_memory(coordinator: Coordinator, tmp_path: Path) -> None:
    """A coordinator that runs for days retires its oldest ended jobs (``--keep-jobs``), but kept every job's input
    strata (a list of a stratum per input chunk for an online job) and pipeline links for as long as it ran."""
    coordinator.keep_jobs = 1
    source = tmp_path / "in.txt"
    source.write_text("a b\nc d\n", encoding="utf-8")
    job_class = load_job_file(job_path("wordcount"))
    ran: list[str] = []
    for number in range(4):
        options = online_options(job_class, [str(source)], snapshot_every=0.5) if number % 2 == 0 else {}
        spec = build_spec(job_class, [str(source)], str(tmp_path / f"out{number}"), num_reduces=1, options=options)
        coordinator.on_submit(b"client", {"type": "submit", "job": spec.to_wire()})
        (job_id,) = set(coordinator.jobs) - set(ran)
        assert len(coordinator.chunk_strata[job_id] or ()) == (0 if number % 2 else 1)  # online: one per chunk
        coordinator.pipe_readers[(job_id, 0)] = (0, "tcp://127.0.0.1:1")  # as a later step's map listening
        coordinator._last_preemption[(job_id, "map")] = time.monotonic()
        coordinator.on_stop_job(b"client", {"type": "stop_job", "job_id": job_id})  # cancelled: it ends
        ran.append(job_id)
    assert list(coordinator.jobs) == ran[-1:]
    assert set(coordinator.chunk_strata) == {ran[-1]}
    assert {key[0] for key in coordinator.pipe_readers} == {ran[-1]}
    assert {key[0] for key in coordinator._last_preemption} == {ran[-1]}
