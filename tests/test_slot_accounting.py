"""The coordinator counts each worker's free slots from what the worker reports: every attempt it gave a worker
must come back as exactly one freed slot, or it gives that worker tasks it has no slot for. A task that waits in
its worker for a slot misses nothing its job was told meanwhile, and one started later is told what still holds (a
stop, sources gone, a reducer's memory pause), which lasts no longer than the reducer attempt that asked for it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from hop.coordinator import Coordinator, WorkerInfo
from hop.loader import load_job_file
from hop.protocol import message, pack, unpack
from hop.runner import build_spec
from hop.stream.options import stream_options
from hop.worker import Worker
from tests.conftest import job_path


def _reports(coordinator_side: zmq.Socket, count: int) -> list[dict[str, Any]]:
    reports = []
    while len(reports) < count:
        assert coordinator_side.poll(10_000), f"the worker sent {len(reports)} of {count} reports"
        _, frame = coordinator_side.recv_multipart()
        report = unpack(frame)
        if report["type"] != "heartbeat":
            reports.append(report)
    return reports


@contextlib.contextmanager
def _worker_with_one_map_slot(tmp_path: Path, kind: str = "map") -> Iterator[tuple[Worker, zmq.Socket]]:
    """A real worker (its task process started) and the socket its coordinator's messages arrive at; its one slot
    is a reduce slot with ``kind`` ``reduce``."""
    context = zmq.Context.instance()
    coordinator_side = context.socket(zmq.ROUTER)
    address = f"ipc://{tmp_path}/coordinator"
    coordinator_side.bind(address)
    slots = (1, 0) if kind == "map" else (0, 1)
    worker = Worker(address, *slots, name="w", spill_root=str(tmp_path), sample_interval=0)
    try:
        worker._wait_for_slots()
        yield worker, coordinator_side
    finally:
        worker.running = False
        for slot in worker.slots.values():
            if slot.process.poll() is None:
                slot.process.kill()
            slot.process.wait(timeout=10)
        worker.pusher.close()
        if worker.link is not None:  # (its watch of the connection, before the socket it watches: Worker.close)
            worker.link.close()
        worker.coordinator.close(linger=0)
        worker.slots_socket.close(linger=0)
        coordinator_side.close(linger=0)


def test_the_last_words_of_an_attempt_the_worker_killed_free_no_second_slot(tmp_path: Path) -> None:
    """A map attempt killed by its worker at the coordinator's request (its job stopped early) may have sent its
    ``map_done`` just before: the worker reported the slot free when it killed it, then relayed that ``map_done``,
    which freed it a second time. The coordinator, counting a slot too many, later gave the worker a map (and a
    reduce) it had no slot for; the task waited in the worker behind a busy slot and the job never ended (a job
    of --stop-when-accurate runs, "still running after 120s"). Real worker, real task process, real coordinator
    state; the test plays the wire between them."""
    coordinator = Coordinator(f"ipc://{tmp_path}/real-coordinator")
    try:
        with _worker_with_one_map_slot(tmp_path) as (worker, coordinator_side):
            slot = worker.slots["w/m0"]
            killed = ("job-1", "map", 3, 0)
            slot.task = killed  # (as dispatching the coordinator's run_task sets it)
            worker._kill_task(killed)  # the coordinator's kill_task: the process is SIGKILLed, the slot reported free
            assert slot.process.poll() is not None
            # What the attempt sent just before the kill, read by the worker afterwards:
            worker.on_slot(b"w/m0", message("map_done", job_id="job-1", index=3, attempt=0, at=time.time()))
            reports = _reports(coordinator_side, 2)
            assert [report["type"] for report in reports] == ["slot_free", "map_done"]

            # The coordinator's record of such a worker with three map slots, two busy: the killed attempt's and
            # another's (with a free count below the cap, a slot freed twice shows).
            coordinator.workers["w"] = WorkerInfo(
                identity=b"w", name="w", host="127.0.0.1", pid=0, map_slots=3, reduce_slots=0,
                free_map=1, free_reduce=0, last_seen=time.time(),
            )  # fmt: skip
            for report in reports:
                getattr(coordinator, f"on_{report['type']}")(b"w", report)
            assert coordinator.workers["w"].free_map == 2, "the killed attempt's slot freed once"
    finally:
        coordinator.events.close()
        coordinator.socket.close(linger=0)


def test_a_task_waiting_for_a_slot_starts_as_soon_as_one_is_free(tmp_path: Path) -> None:
    """A task the coordinator gave a worker whose slot was still busy waited until some slot process restarted
    (its hello), however long the busy slot's attempt then took to finish: it starts when that attempt ends."""
    with _worker_with_one_map_slot(tmp_path) as (worker, _):
        slot = worker.slots["w/m0"]
        slot.task = ("job-1", "map", 0, 0)
        waiting = {"type": "run_task", "job": {"job_id": "job-1"}, "kind": "map", "index": 1, "attempt": 0}
        worker.waiting.append((waiting, message("run_task", **{k: v for k, v in waiting.items() if k != "type"})))
        worker.on_slot(b"w/m0", message("map_done", job_id="job-1", index=0, attempt=0, at=time.time()))
        assert (slot.task, worker.waiting) == (("job-1", "map", 1, 0), [])


def test_a_waiting_task_is_not_handed_to_a_slot_whose_process_died(tmp_path: Path) -> None:
    """A slot process that died right after its task's last report (``map_done``, read as the worker relays its last
    words): that report frees the slot, and a task waiting for one was handed to the dead process, then lost when
    the slot was restarted; the job waited for it for ever. It waits for the restarted slot instead."""
    with _worker_with_one_map_slot(tmp_path) as (worker, _):
        slot = worker.slots["w/m0"]
        slot.task = ("job-1", "map", 0, 0)
        waiting = {"type": "run_task", "job": {"job_id": "job-1"}, "kind": "map", "index": 1, "attempt": 0}
        worker.waiting.append((waiting, message("run_task", **{k: v for k, v in waiting.items() if k != "type"})))
        # The task's last words, on their way as its process dies (sent as the task process sends them).
        last_words = zmq.Context.instance().socket(zmq.DEALER)
        last_words.setsockopt(zmq.IDENTITY, b"w/m0")
        last_words.setsockopt(zmq.LINGER, 1000)
        try:
            last_words.connect(worker.slots_address)
            slot.process.kill()
            slot.process.wait(timeout=10)
            last_words.send(message("map_done", job_id="job-1", index=0, attempt=0, at=time.time()))
            deadline = time.monotonic() + 10
            while not worker.slots_socket.poll(10):
                assert time.monotonic() < deadline, "the last words reached the worker"
            worker._check_slots()
        finally:
            last_words.close(linger=0)
        assert [entry for entry, _ in worker.waiting] == [waiting], "the task still waits, for the restarted slot"
        assert worker.slots["w/m0"] is not slot and worker.slots["w/m0"].task is None


def _continuous_job(tmp_path: Path, with_output: bool = True) -> dict[str, Any]:
    """The wire form of a continuous job of one source that never ends by itself (a replay in a loop) and one
    reducer, as the coordinator sends it with a task (its output made, as the coordinator makes it); without
    ``with_output``, as a client submits it."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(f'{{"ts": {1_700_000_000 + i * 0.01}, "text": "a b"}}\n' for i in range(200)))
    options = stream_options([f"replay:{events}?rate=200&loop=1"], "1s", checkpoint_seconds=0.5)
    job_class = load_job_file(job_path("event_wordcount"), "EventWordCount")
    spec = build_spec(job_class, [], str(tmp_path / "out"), num_reduces=1, options={"stream": options})
    if not with_output:
        return spec.to_wire()
    (tmp_path / "out").mkdir()
    return spec.with_id("job-stream").to_wire()


def _run_after_a_busy_slot(
    worker: Worker,
    coordinator_side: zmq.Socket,
    task: dict[str, Any],
    told: list[bytes],
    spills: list[tuple[float, dict[str, Any]]] | None = None,
) -> dict[str, Any] | None:
    """Hand the worker ``task`` while its one slot is busy with another job's attempt, then the coordinator's
    ``told`` messages, then free the slot: the task starts in its real task process. Returns the task's own end
    report (``map_done``, ``reduce_done`` or ``task_failed``), or None if it sent none within 15 s (``spills``: see
    :func:`_end_report`)."""
    slot = next(iter(worker.slots.values()))
    busy = ("job-other", task["kind"], 0, 0)
    slot.task = busy  # (as dispatching the coordinator's run_task sets it)
    worker.on_coordinator(message("run_task", **task))
    assert [entry["index"] for entry, _ in worker.waiting] == [task["index"]], "the task waits for the slot"
    for frame in told:
        worker.on_coordinator(frame)
    ended = "map_done" if task["kind"] == "map" else "reduce_done"
    worker.on_slot(slot.name.encode(), message(ended, job_id=busy[0], index=0, attempt=0, at=time.time()))
    assert slot.task == ("job-stream", task["kind"], task["index"], task["attempt"]), "started once the slot freed"
    return _end_report(worker, coordinator_side, ended, spills=spills)


def _end_report(
    worker: Worker,
    coordinator_side: zmq.Socket,
    ended: str,
    job_id: str = "job-stream",
    spills: list[tuple[float, dict[str, Any]]] | None = None,
) -> dict[str, Any] | None:
    """Relay what the worker's task processes send until a task of ``job_id`` ends (``ended`` or ``task_failed``,
    returned), or 15 s have passed (None); with ``spills``, note when each spill came in and its ``meta``."""

    def take(identity: bytes, frame: bytes) -> None:
        msg = unpack(frame)
        if spills is not None and msg["type"] == "spill":
            spills.append((time.monotonic(), msg["meta"]))
        worker.on_slot(identity, frame)

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if worker.slots_socket.poll(50):
            worker._drain(worker.slots_socket, take)
        while coordinator_side.poll(0):
            report = unpack(coordinator_side.recv_multipart()[1])
            if report["type"] in (ended, "task_failed") and report.get("job_id") == job_id:
                return report
    return None


def test_a_stream_map_waiting_for_its_slot_hears_its_job_stop(tmp_path: Path) -> None:
    """The coordinator gave a worker a stream map (a retry after a lost worker) just before its job was stopped,
    and the map waited in the worker for its slot (busy, or restarting after a death): the stop was relayed to the
    running maps only, the map started without it once it had its slot, read its endless source for ever, and the
    job never ended. It starts knowing the job stops, drains and ends. Real worker and task process; the test
    plays the coordinator's side of the wire."""
    with _worker_with_one_map_slot(tmp_path) as (worker, coordinator_side):
        job = _continuous_job(tmp_path)
        task = {"job": job, "kind": "map", "index": 0, "attempt": 0, "pool": "map", "chunks": [[]]}
        task |= {"resume_below": None, "stopping": False}
        report = _run_after_a_busy_slot(worker, coordinator_side, task, [message("stream_stop", job_id=job["job_id"])])
    assert report is not None, "the map drained and ended"
    assert report["type"] == "map_done", report


def test_a_stream_reducer_waiting_for_its_slot_hears_of_a_gone_source(tmp_path: Path) -> None:
    """A stream reducer the coordinator started (a retry) just before the job's only source was given up or ended
    unstarted by a stop waited in its worker for a slot: ``stream_source_gone`` was relayed to the running
    reducers only, and the reducer waited for that source for ever. It starts knowing the source is gone and ends.
    Real worker and task process; the test plays the coordinator's side of the wire."""
    with _worker_with_one_map_slot(tmp_path, "reduce") as (worker, coordinator_side):
        job = _continuous_job(tmp_path)
        task = {"job": job, "kind": "reduce", "index": 0, "attempt": 0, "pool": "reduce", "num_maps": 1}
        task |= {"host": "127.0.0.1", "committed": [], "chunk_strata": None, "chunk_sizes": None}
        gone = message("stream_source_gone", job_id=job["job_id"], index=0)
        report = _run_after_a_busy_slot(worker, coordinator_side, task, [gone])
    assert report is not None, "the reducer ended"
    assert report["type"] == "reduce_done", report


@contextlib.contextmanager
def _coordinator_with_workers(
    tmp_path: Path, slots: dict[str, tuple[int, int, int, int]]
) -> Iterator[tuple[Coordinator, dict[str, zmq.Socket]]]:
    """Real coordinator state (not serving: the test calls its handlers) with a worker per name of ``slots`` (its map
    slots, reduce slots, free map slots, free reduce slots), each a DEALER socket connected as that worker, to read
    what the coordinator tells it."""
    coordinator = Coordinator(f"ipc://{tmp_path}/real-coordinator")
    sides: dict[str, zmq.Socket] = {}
    try:
        for name, (maps, reduces, free_maps, free_reduces) in slots.items():
            side = sides[name] = zmq.Context.instance().socket(zmq.DEALER)
            side.setsockopt(zmq.IDENTITY, name.encode())
            side.setsockopt(zmq.LINGER, 0)
            side.connect(coordinator.address)
            # A ROUTER drops what it sends a peer whose connection it has not accepted yet (connecting is
            # asynchronous): a first word from the worker, read here, makes sure the coordinator can reach it.
            side.send(b"connected")
            assert coordinator.socket.poll(10_000), f"worker {name} connects"
            coordinator.socket.recv_multipart()
            coordinator.workers[name] = WorkerInfo(
                identity=name.encode(), name=name, host="127.0.0.1", pid=0, map_slots=maps, reduce_slots=reduces,
                free_map=free_maps, free_reduce=free_reduces, last_seen=time.time(),
            )  # fmt: skip
        yield coordinator, sides
    finally:
        for side in sides.values():
            side.close(linger=0)
        coordinator.events.close()
        coordinator.socket.close(linger=0)


def _told(side: zmq.Socket, wait: float = 1.0) -> list[dict[str, Any]]:
    """The messages the coordinator sent a worker's socket since last asked (until none comes for ``wait`` s)."""
    told = []
    while side.poll(int(wait * 1000)):
        told.append(unpack(side.recv()))
    return told


def test_a_stream_reducer_started_after_a_source_went_is_told_at_its_start(tmp_path: Path) -> None:
    """A continuous job stopped while its only source waited for a slot ends that source unstarted and tells the
    running reducers (``stream_source_gone``). A reduce attempt the coordinator started only afterwards (its
    worker had no free slot then, or it is a retry after a lost worker) never heard of it and waited for the
    source for ever, and the job with it. The coordinator now tells it with the task. Real coordinator state,
    worker and task process; the test plays the wire between them."""
    # (its reduce slot busy with another job's attempt)
    with _coordinator_with_workers(tmp_path, {"w": (0, 1, 0, 0)}) as (coordinator, sides):
        coordinator.on_submit(b"client", {"type": "submit", "job": _continuous_job(tmp_path, with_output=False)})
        (job,) = coordinator.jobs.values()
        coordinator._schedule()
        assert [t["state"] for t in job.task_table()] == ["pending", "pending"], "no slot for either"
        coordinator.on_stop_job(b"client", {"type": "stop_job", "job_id": job.spec.job_id})
        now = time.time()
        for later in (0.0, 10.0):  # (the coordinator's turns, the second past the grace the source has)
            coordinator._execute(job, job.end_sources_without_slot(now + later, 2.0))
        assert [t["state"] for t in job.task_table()] == ["unstarted", "pending"]
        coordinator.workers["w"].free_reduce = 1  # the slot frees
        coordinator._schedule()
        (run_task,) = [msg for msg in _told(sides["w"]) if msg["type"] == "run_task"]
        assert run_task.get("sources_gone") == [0], "the task says the source is gone"
        with _worker_with_one_map_slot(tmp_path, "reduce") as (worker, coordinator_side):
            worker.on_coordinator(pack(run_task))
            report = _end_report(worker, coordinator_side, "reduce_done", job.spec.job_id)
    assert report is not None, "the reducer ended"
    assert report["type"] == "reduce_done", report


FIRST_EVENT = 1_700_000_000
PAUSED_PANE = FIRST_EVENT + 1
"""The pane a reducer over its memory budget still needs (a 1 s window's panes are its seconds): maps may seal it,
and must hold their input once they have."""


def _bounded_job(tmp_path: Path, with_output: bool = True) -> dict[str, Any]:
    """The wire form of a continuous job of one source read as fast as it can, 25 panes of 100 records then its end,
    and one reducer; its pane flow control out of the way (no reducer takes its spills here). As ``_continuous_job``
    makes it."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(f'{{"ts": {FIRST_EVENT + i * 0.01}, "text": "a b"}}\n' for i in range(2500)))
    options = stream_options([f"replay:{events}"], "1s") | {"pause_threshold": 100_000}
    job_class = load_job_file(job_path("event_wordcount"), "EventWordCount")
    spec = build_spec(job_class, [], str(tmp_path / "out"), num_reduces=1, options={"stream": options})
    if not with_output:
        return spec.to_wire()
    (tmp_path / "out").mkdir()
    return spec.with_id("job-stream").to_wire()


def _held_at_the_pause(report: dict[str, Any] | None, spills: list[tuple[float, dict[str, Any]]]) -> None:
    """Assert that a stream map that ran its bounded source (``_bounded_job``) to its end held its input once it had
    sealed ``PAUSED_PANE``: each hold lasts 0.5 s before the map reads one more poll (a slower machine only makes it
    longer), where a map that never heard of the pause reads the rest of its source at once."""
    assert report is not None, "the map ended"
    assert report["type"] == "map_done", report
    assert report["counters"]["stream_memory_pauses"] >= 1, "the map held its input at the paused pane"
    past = [at for at, meta in spills if meta["sealed"] > PAUSED_PANE]
    final = [at for at, meta in spills if meta.get("final")]
    assert past and final, spills
    assert final[0] - past[0] >= 0.45, "the map did not run on past the paused pane"


def test_a_stream_map_started_while_a_pause_holds_is_told_it_at_its_start(tmp_path: Path) -> None:
    """A reducer over its memory budget asked the maps to hold at a pane (``stream_pause``); the coordinator tells
    the maps only when the job's pause changes. A map attempt started after it (a retry after a lost worker or a
    failure, a source started late) never heard of it, ran past the paused pane, and the reducer's memory grew
    beyond its budget. The coordinator now tells it with the task. Real coordinator state, worker and task process;
    the test plays the wire between them."""
    spills: list[tuple[float, dict[str, Any]]] = []
    # (its map slot busy with another job's attempt)
    with _coordinator_with_workers(tmp_path, {"w": (1, 1, 0, 1)}) as (coordinator, sides):
        coordinator.on_submit(b"client", {"type": "submit", "job": _bounded_job(tmp_path, with_output=False)})
        (job,) = coordinator.jobs.values()
        coordinator._schedule()
        assert [t["state"] for t in job.task_table()] == ["pending", "running"], "the reducer runs, the map waits"
        pause = {"type": "stream_pause", "job_id": job.spec.job_id, "index": 0, "attempt": 0, "pane": PAUSED_PANE}
        coordinator.on_stream_pause(b"w", pause)
        coordinator.workers["w"].free_map = 1  # the slot frees
        coordinator._schedule()
        (run_task,) = [msg for msg in _told(sides["w"]) if msg["type"] == "run_task" and msg["kind"] == "map"]
        assert run_task.get("pause_pane") == PAUSED_PANE, "the task says the job is paused there"
        with _worker_with_one_map_slot(tmp_path) as (worker, coordinator_side):
            worker.on_coordinator(pack(run_task))
            report = _end_report(worker, coordinator_side, "map_done", job.spec.job_id, spills)
    _held_at_the_pause(report, spills)


def test_a_stream_map_waiting_for_its_slot_hears_of_a_pause(tmp_path: Path) -> None:
    """A stream map the coordinator started just before a reducer asked the maps to hold at a pane waited in its
    worker for a slot: ``stream_pause`` was relayed to the running maps only, and the map ran past the paused pane
    once it had its slot. It starts paused; a pause lifted while it waits is lifted for it too. Real worker and
    task process; the test plays the coordinator's side of the wire."""
    spills: list[tuple[float, dict[str, Any]]] = []
    with _worker_with_one_map_slot(tmp_path) as (worker, coordinator_side):
        job = _bounded_job(tmp_path)
        task = {"job": job, "kind": "map", "index": 0, "attempt": 0, "pool": "map", "chunks": [[]]}
        task |= {"resume_below": None, "stopping": False, "pause_pane": None}
        # A pause lifted while a task told it waits (the reducer back under its budget) is lifted for it as well.
        paused = task | {"pause_pane": PAUSED_PANE}
        worker.waiting.append((paused, message("run_task", **paused)))
        worker.on_coordinator(message("stream_pause", job_id=job["job_id"], pane=None))
        assert [unpack(frame)["pause_pane"] for _, frame in worker.waiting] == [None], "lifted"
        worker.waiting.clear()
        pause = message("stream_pause", job_id=job["job_id"], pane=PAUSED_PANE)
        report = _run_after_a_busy_slot(worker, coordinator_side, task, [pause], spills)
    _held_at_the_pause(report, spills)


@contextlib.contextmanager
def _paused_reducer_on_a(tmp_path: Path) -> Iterator[tuple[Coordinator, Any, dict[str, zmq.Socket]]]:
    """Real coordinator state of a continuous job whose reducer (attempt 0) runs on worker ``a`` and asked the maps
    to hold at ``PAUSED_PANE``, its map on worker ``b``, which has a free reduce slot for a retry; the workers'
    sockets, to read what the coordinator tells them."""
    with _coordinator_with_workers(tmp_path, {"a": (0, 1, 0, 1), "b": (1, 0, 1, 0)}) as (coordinator, sides):
        coordinator.on_submit(b"client", {"type": "submit", "job": _bounded_job(tmp_path, with_output=False)})
        (job,) = coordinator.jobs.values()
        coordinator._schedule()
        assert [(t["kind"], t["worker"]) for t in job.task_table()] == [("map", "b"), ("reduce", "a")]
        said = {"job_id": job.spec.job_id, "index": 0, "attempt": 0, "worker": "a"}
        coordinator.on_reducer_ready(b"a", {"type": "reducer_ready", **said, "address": "tcp://127.0.0.1:1"})
        coordinator.on_stream_pause(b"a", {"type": "stream_pause", **said, "pane": PAUSED_PANE})
        assert _pauses_told(sides["b"]) == [PAUSED_PANE]
        coordinator.workers["b"].reduce_slots = coordinator.workers["b"].free_reduce = 1
        yield coordinator, job, sides


def _pauses_told(side: zmq.Socket) -> list[int | None]:
    """The panes of the ``stream_pause`` messages the coordinator sent a worker since last asked."""
    return [msg["pane"] for msg in _told(side, wait=0.2) if msg["type"] == "stream_pause"]


def _retry_on_b(coordinator: Coordinator, job: Any) -> None:
    """The reducer's next attempt starts on worker ``b`` and says where it listens (its first word)."""
    coordinator._schedule()
    assert [[a.worker for a in task.attempts] for task in job.reduces] == [["a", "b"]], "the reducer runs again"
    retry = {"type": "reducer_ready", "job_id": job.spec.job_id, "index": 0, "attempt": 1, "worker": "b"}
    coordinator.on_reducer_ready(b"b", retry | {"address": "tcp://127.0.0.1:2"})


def test_the_pause_of_a_reducer_lost_with_its_worker_holds_until_its_retry_starts(tmp_path: Path) -> None:
    """A reducer over its memory budget is lost with its worker: the maps hold at its pane while no attempt of it
    runs (nothing takes their spills anyway), and its retry, which starts under its budget, lifts the pause: the
    maps are not left paused for good."""
    with _paused_reducer_on_a(tmp_path) as (coordinator, job, sides):
        coordinator._worker_lost(coordinator.workers["a"], time.time())
        assert job.windows.pause() == PAUSED_PANE, "held while the reducer does not run"
        _retry_on_b(coordinator, job)
        assert job.windows.pause() is None
        assert _pauses_told(sides["b"]) == [None], "the maps hear the pause is lifted"


def test_the_late_pause_of_a_failed_reducer_attempt_does_not_hold_the_maps_for_good(tmp_path: Path) -> None:
    """A reducer's task process died just after asking the maps to hold: its worker gave up waiting for its last
    words and reported the failure, then relayed the pause. Arriving after the retry had started (and lifted the
    pause), it paused the maps for good: the retry, under its budget, never lifts a pause it did not ask for. A word
    of an attempt that ended is ignored."""
    with _paused_reducer_on_a(tmp_path) as (coordinator, job, sides):
        said = {"job_id": job.spec.job_id, "index": 0, "attempt": 0, "worker": "a"}
        failed = {"type": "task_failed", "kind": "reduce", **said, "pool": "reduce", "at": time.time()}
        coordinator.on_task_failed(b"a", failed | {"error": "its process died", "traceback": None})
        _retry_on_b(coordinator, job)
        assert _pauses_told(sides["b"]) == [None]
        coordinator.on_stream_pause(b"a", {"type": "stream_pause", **said, "pane": PAUSED_PANE})
        assert job.windows.pause() is None, "the failed attempt's late pause is ignored"
        assert _pauses_told(sides["b"]) == []


def _batch_job(tmp_path: Path) -> dict[str, Any]:
    """The wire form of a word count of one small file with one reducer, as a client submits it."""
    text = tmp_path / "in.txt"
    text.write_text("a b a\n" * 100)
    job_class = load_job_file(job_path("wordcount"), "WordCount")
    return build_spec(job_class, [str(text)], str(tmp_path / "out"), num_reduces=1).to_wire()


def _end_reduce_attempt(coordinator: Coordinator, job: Any, how: str, said: dict[str, Any]) -> None:
    """End reduce attempt ``said`` as the coordinator would: its worker reports it ``failed`` (its process died),
    the coordinator ``killed`` it (its slot went to an upstream task), or it is ``lost`` with its worker, replaced by
    a new process under its name (whose predecessor's words still arrive, under that name)."""
    if how == "failed":
        failed = {"type": "task_failed", "kind": "reduce", **said, "pool": "reduce", "at": time.time()}
        coordinator.handle(b"a", failed | {"error": "its process died", "traceback": None})
    elif how == "killed":
        coordinator._execute(job, job.restart("reduce", 0, said["attempt"], "its slot went to an upstream task"))
    else:
        again = {"type": "register", "worker": "a", "host": "127.0.0.1", "pid": 1, "map_slots": 0, "reduce_slots": 0}
        coordinator.handle(b"a", again)
    assert job.reduces[0].attempts[said["attempt"]].status == how


@pytest.mark.parametrize("how", ["failed", "killed", "lost"])
def test_the_late_ready_of_a_reducer_attempt_that_ended_does_not_point_the_maps_at_it(tmp_path: Path, how: str) -> None:
    """A reduce attempt said where it listens (``reducer_ready``), but the word reached the coordinator only after
    the attempt had ended and its retry had said where it listens: every worker's pusher was pointed back at the
    dead attempt's address (``reducer_at``), so the retry got no more runs and waited for the committed maps' runs
    for ever (a worker registering later was told the dead address too). The late word of an attempt that ended
    changes nothing; nor does its late ``reduce_done`` commit its output under the running retry. Real coordinator
    state; the test plays the workers' side of the wire."""
    with _coordinator_with_workers(tmp_path, {"a": (0, 1, 0, 1), "b": (1, 1, 1, 0)}) as (coordinator, sides):
        coordinator.on_submit(b"client", {"type": "submit", "job": _batch_job(tmp_path)})
        (job,) = coordinator.jobs.values()
        coordinator._schedule()
        assert [(t["kind"], t["worker"]) for t in job.task_table()] == [("map", "b"), ("reduce", "a")]
        said = {"job_id": job.spec.job_id, "index": 0, "attempt": 0, "worker": "a"}
        ready = {"type": "reducer_ready", **said, "address": "tcp://127.0.0.1:1"}
        coordinator.handle(b"a", ready)
        _end_reduce_attempt(coordinator, job, how, said)
        coordinator.workers["b"].free_reduce = 1
        coordinator._schedule()
        assert [a.worker for a in job.reduces[0].attempts] == ["a", "b"], "the reducer runs again, on b"
        retry = {"type": "reducer_ready", **said, "attempt": 1, "worker": "b", "address": "tcp://127.0.0.1:2"}
        coordinator.handle(b"b", retry)
        assert [(m["attempt"], m["address"]) for m in _told(sides["b"], 2.0) if m["type"] == "reducer_at"] == [
            (0, "tcp://127.0.0.1:1"),
            (1, "tcp://127.0.0.1:2"),
        ]
        _told(sides["a"], 1.0)

        coordinator.handle(b"a", ready)  # the ended attempt's word, late
        assert job.reducer_addresses == {0: (1, "tcp://127.0.0.1:2")}
        for name in ("a", "b"):
            told = [m["attempt"] for m in _told(sides[name], 0.5) if m["type"] == "reducer_at"]
            assert 0 not in told, f"{name} is not pointed at the ended attempt"

        late_joiner = zmq.Context.instance().socket(zmq.DEALER)
        late_joiner.setsockopt(zmq.IDENTITY, b"c")
        late_joiner.setsockopt(zmq.LINGER, 0)
        try:
            late_joiner.connect(coordinator.address)
            late_joiner.send(message("register", worker="c", host="127.0.0.1", pid=2, map_slots=1, reduce_slots=0))
            assert coordinator.socket.poll(10_000), "the registration arrives"
            identity, frame = coordinator.socket.recv_multipart()
            coordinator.handle(identity, unpack(frame))
            told = [(m["attempt"], m["address"]) for m in _told(late_joiner, 2.0) if m["type"] == "reducer_at"]
            assert told == [(1, "tcp://127.0.0.1:2")], "a worker joining later is told where the retry listens"
        finally:
            late_joiner.close(linger=0)

        temporary = Path(job.spec.output) / "_temporary" / "part-00000.attempt-0"
        temporary.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text('"a"\t200\n')
        done = {"type": "reduce_done", **said, "path": str(temporary), "counters": {}, "user_counters": {}}
        coordinator.handle(b"a", done | {"at": time.time(), "pool": None})
        assert job.reduces[0].committed is None, "the retry's partition"
        assert [a.status for a in job.reduces[0].attempts] == [how, "assigned"]
        assert not temporary.exists() and not (Path(job.spec.output) / "part-00000").exists()


def test_the_late_ready_of_a_failed_stream_reducer_attempt_does_not_lift_its_retrys_pause(tmp_path: Path) -> None:
    """A stream reducer's retry started, said where it listens (which lifted the failed attempt's pause: it starts
    under its budget), then went over its budget and asked the maps to hold. The failed attempt's ``reducer_ready``,
    relayed late by its worker, lifted that pause (a new attempt's word) and pointed the maps at its dead address:
    the maps ran on past the retry's pane while the retry held its pause as sent and never asked again. Ignored."""
    with _paused_reducer_on_a(tmp_path) as (coordinator, job, sides):
        said = {"job_id": job.spec.job_id, "index": 0, "attempt": 0, "worker": "a"}
        failed = {"type": "task_failed", "kind": "reduce", **said, "pool": "reduce", "at": time.time()}
        coordinator.handle(b"a", failed | {"error": "its process died", "traceback": None})
        _retry_on_b(coordinator, job)
        retry = {"job_id": job.spec.job_id, "index": 0, "attempt": 1, "worker": "b"}
        coordinator.handle(b"b", {"type": "stream_pause", **retry, "pane": PAUSED_PANE + 5})
        assert job.windows.pause() == PAUSED_PANE + 5
        _told(sides["b"], 1.0)

        coordinator.handle(b"a", {"type": "reducer_ready", **said, "address": "tcp://127.0.0.1:1"})
        assert job.windows.pause() == PAUSED_PANE + 5, "the retry's pause holds"
        assert job.reducer_addresses == {0: (1, "tcp://127.0.0.1:2")}
        told = [m for m in _told(sides["b"], 0.5) if m["type"] in ("stream_pause", "reducer_at")]
        assert [m for m in told if m["type"] == "stream_pause" and m["pane"] is None] == [], "the maps hold on"
        assert [m for m in told if m["type"] == "reducer_at" and m["attempt"] == 0] == []


def test_the_late_checkpoint_of_a_failed_stream_reducer_attempt_trims_no_spill(tmp_path: Path) -> None:
    """What a stream reducer's checkpoint covers lets the workers delete those spills (``stream_trim``) once every
    partition's checkpoint covers them. One of an attempt that ended, arriving late, may cover more than the state
    its retry restored (an attempt still running as it was declared lost or killed wrote it after the retry read
    the state): its retry would never get spills it needs. Ignored; its retry's own checkpoints trim."""
    with _paused_reducer_on_a(tmp_path) as (coordinator, job, sides):
        said = {"job_id": job.spec.job_id, "index": 0, "attempt": 0, "worker": "a"}
        failed = {"type": "task_failed", "kind": "reduce", **said, "pool": "reduce", "at": time.time()}
        coordinator.handle(b"a", failed | {"error": "its process died", "traceback": None})
        _retry_on_b(coordinator, job)
        coordinator.handle(b"a", {"type": "stream_checkpoint", **said, "processed": [[0, 0, 7]]})
        retry = {"job_id": job.spec.job_id, "index": 0, "attempt": 1, "worker": "b"}
        coordinator.handle(b"b", {"type": "stream_checkpoint", **retry, "processed": [[0, 0, 3]]})
        trims = [(m["index"], m["attempt"], m["seq"]) for m in _told(sides["b"], 2.0) if m["type"] == "stream_trim"]
        assert trims == [(0, 0, 3)], "the retry's checkpoint trims, the ended attempt's nothing"


def test_the_late_snapshot_answer_of_a_failed_reducer_attempt_is_asked_of_its_retry(tmp_path: Path) -> None:
    """A snapshot's answer from a reduce attempt that ended, arriving late, is not its partition's: the retry is
    asked the snapshots its partition has not answered as it starts, and answers them."""
    with _coordinator_with_workers(tmp_path, {"a": (0, 1, 0, 1), "b": (1, 1, 1, 0)}) as (coordinator, sides):
        coordinator.on_submit(b"client", {"type": "submit", "job": _batch_job(tmp_path)})
        (job,) = coordinator.jobs.values()
        coordinator._schedule()
        said = {"job_id": job.spec.job_id, "index": 0, "attempt": 0, "worker": "a"}
        coordinator.handle(b"a", {"type": "reducer_ready", **said, "address": "tcp://127.0.0.1:1"})
        coordinator.on_snapshot(b"client", {"type": "snapshot", "job_id": job.spec.job_id})
        _end_reduce_attempt(coordinator, job, "failed", said)
        answer = {"type": "snapshot_done", **said, "seq": 0, "label": "p", "rows": [], "groups": 0}
        coordinator.handle(b"a", answer)
        assert job.snapshots.unanswered(0) == job.snapshots.snapshots, "not the partition's answer"
        coordinator.workers["b"].free_reduce = 1
        coordinator._schedule()
        retry = {"type": "reducer_ready", **said, "attempt": 1, "worker": "b", "address": "tcp://127.0.0.1:2"}
        coordinator.handle(b"b", retry)
        asked = [(m["seq"], m.get("index")) for m in _told(sides["b"], 2.0) if m["type"] == "snapshot"]
        assert (0, 0) in asked, "the retry is asked"


def test_the_late_word_of_a_restarted_pipeline_map_does_not_point_the_step_before_at_it(tmp_path: Path) -> None:
    """A pipeline's later-step map said where it listens for its partition (``pipe_ready``), but the word reached
    the coordinator only after the attempt had been restarted (its upstream reduce attempt went, or its slot went to
    the step before) and its retry had said where it listens: the upstream reduce was pointed back at the dead
    address (``pipe_at``), so the retry got no more of its stream, and as the retry was no longer the partition's
    reader it was never told to read the committed file either: it waited for ever. Ignored. Real coordinator
    state; the test plays the workers' side of the wire."""
    with _coordinator_with_workers(tmp_path, {"a": (1, 1, 1, 1), "b": (1, 0, 1, 0)}) as (coordinator, sides):
        job_class = load_job_file(job_path("wordcount"), "WordCount")
        (tmp_path / "in.txt").write_text("a b a\n" * 100)
        jobs = []
        for name in ("first", "later"):
            options = {"upstream": jobs[0].spec.job_id} if jobs else {"tail_split": False}
            spec = build_spec(
                job_class, [str(tmp_path / "in.txt")], str(tmp_path / name), num_reduces=1, options=options
            )
            coordinator.on_submit(b"client", {"type": "submit", "job": spec.to_wire()})
            jobs.append(next(job for job in coordinator.jobs.values() if job not in jobs))
        first, later = jobs
        coordinator._schedule()
        reducer = first.reduces[0].attempts[0].worker
        (reader,) = [a.worker for a in later.maps[0].attempts]
        said = {"job_id": later.spec.job_id, "index": 0, "attempt": 0, "worker": reader}
        coordinator.handle(reader.encode(), {"type": "pipe_ready", **said, "address": "tcp://127.0.0.1:1"})
        coordinator._execute(later, later.restart("map", 0, 0, "upstream reduce attempt 0 failed"))
        coordinator.workers[reader].free_map += 1  # (its slot reported free)
        coordinator._schedule()
        assert [a.status for a in later.maps[0].attempts] == ["killed", "assigned"], "the map runs again"
        retry = later.maps[0].attempts[1].worker
        word = {"type": "pipe_ready", **said, "attempt": 1, "worker": retry, "address": "tcp://127.0.0.1:2"}
        coordinator.handle(retry.encode(), word)
        told = [m["address"] for m in _told(sides[reducer], 2.0) if m["type"] == "pipe_at"]
        assert told == ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]

        coordinator.handle(reader.encode(), {"type": "pipe_ready", **said, "address": "tcp://127.0.0.1:1"})  # late
        assert coordinator.pipe_readers[(later.spec.job_id, 0)] == (1, "tcp://127.0.0.1:2")
        told = [m["address"] for m in _told(sides[reducer], 0.5) if m["type"] == "pipe_at"]
        assert "tcp://127.0.0.1:1" not in told, "the upstream reduce is not pointed at the dead attempt"


def test_a_reduce_waiting_for_a_slot_is_told_where_the_next_jobs_map_listens(tmp_path: Path) -> None:
    """A pipeline's reduce retried on the worker where its attempt had just died waits for that slot; the next job's
    map (restarted with the failed attempt) says where it listens meanwhile, and the coordinator's ``pipe_at`` was
    relayed to running tasks only: lost, the retry streamed to no one, and that map read the committed file at the
    end. The waiting task's ``run_task`` now carries the address, as it does when the map spoke first."""
    with _worker_with_one_map_slot(tmp_path, "reduce") as (worker, _):
        slot = worker.slots["w/r0"]
        slot.task = ("job-1", "reduce", 0, 0)  # the failed attempt, its slot not yet free
        waiting = {"type": "run_task", "job": {"job_id": "job-1"}, "kind": "reduce", "index": 0, "attempt": 1}
        worker.waiting.append((waiting, message("run_task", **{k: v for k, v in waiting.items() if k != "type"})))
        address = "tcp://127.0.0.1:5999"
        worker.on_coordinator(message("pipe_at", task=["job-1", "reduce", 0, 1], job_id="job-1", address=address))
        ((told, frame),) = worker.waiting
        assert told["pipe_to"] == address and unpack(frame)["pipe_to"] == address
        worker.on_coordinator(message("pipe_at", task=["job-1", "reduce", 1, 1], job_id="job-1", address="tcp://x"))
        assert worker.waiting[0][0]["pipe_to"] == address, "another task's address"


def test_a_reduce_waiting_for_a_slot_starts_owing_the_derived_snapshots_asked_meanwhile(tmp_path: Path) -> None:
    """A pipeline's later job asks its reducers for a snapshot recomputed from the job before's (``source``) while
    one of them waits here for its slot: relayed to running tasks only, the request was lost on it, and the notices
    replayed as it starts could tell it every map had committed before the coordinator asked it again, so it never
    answered and the partition's final output did. Its ``run_task`` now lists the request (``derived_snapshots``),
    as the coordinator's lists those asked before it was sent; plain requests, and others' (another job's, another
    partition's), are left out."""
    with _worker_with_one_map_slot(tmp_path, "reduce") as (worker, _):
        worker.slots["w/r0"].task = ("job-0", "reduce", 0, 0)  # (another job's reducer holds the slot)
        waiting = {
            "type": "run_task", "job": {"job_id": "job-1"}, "kind": "reduce", "index": 1, "attempt": 0,
            "derived_snapshots": [{"seq": 0, "label": "0.250", "source": "/up/_snapshots/0.250"}],
        }  # fmt: skip
        worker.waiting.append((waiting, message("run_task", **{k: v for k, v in waiting.items() if k != "type"})))
        source = "/up/_snapshots/0.500"
        worker.on_coordinator(message("snapshot", job_id="job-1", seq=1, label="0.500", source=source))
        worker.on_coordinator(message("snapshot", job_id="job-1", seq=1, label="0.500", index=1, source=source))
        worker.on_coordinator(message("snapshot", job_id="job-1", seq=2, label="0.600-now2"))  # (its own: plain)
        worker.on_coordinator(message("snapshot", job_id="job-2", seq=3, label="0.700", source="/other"))
        worker.on_coordinator(message("snapshot", job_id="job-1", seq=4, label="0.750", index=0, source="/up/0"))
        ((told, frame),) = worker.waiting
        owed = [(0, "0.250", "/up/_snapshots/0.250"), (1, "0.500", source)]
        assert [(r["seq"], r["label"], r["source"]) for r in told["derived_snapshots"]] == owed, "once each"
        assert unpack(frame)["derived_snapshots"] == told["derived_snapshots"]


def test_a_registration_sent_again_keeps_the_workers_tasks_and_slots(tmp_path: Path) -> None:
    """A standalone worker sends its registration again over a new connection when no answer came over one that is
    up (``hop.worker.Worker._retry_ignored_registration``); the first may have been taken after all, and tasks
    given to the worker since. Taken afresh, it counted the worker's busy slots as free (and gave it tasks it had no
    slot for). The same registration (same pid and incarnation) is answered again and changes nothing; a new
    incarnation still loses what the worker ran. Real coordinator state; the test plays the worker's side."""
    with _coordinator_with_workers(tmp_path, {"a": (1, 1, 1, 1)}) as (coordinator, sides):
        coordinator.on_submit(b"client", {"type": "submit", "job": _batch_job(tmp_path)})
        (job,) = coordinator.jobs.values()
        coordinator._schedule()
        assert [(t["kind"], t["worker"]) for t in job.task_table()] == [("map", "a"), ("reduce", "a")]
        said = {"job_id": job.spec.job_id, "index": 0, "attempt": 0, "worker": "a"}
        coordinator.handle(b"a", {"type": "reducer_ready", **said, "address": "tcp://127.0.0.1:1"})
        _told(sides["a"], 0.5)
        again = {"type": "register", "worker": "a", "host": "127.0.0.1", "pid": 0, "map_slots": 1, "reduce_slots": 1}
        coordinator.handle(b"a", again | {"incarnation": 0})
        worker = coordinator.workers["a"]
        assert (worker.free_map, worker.free_reduce) == (0, 0), "its slots still run the map and the reduce"
        assert [a.status for a in job.maps[0].attempts] == ["assigned"]
        assert [a.status for a in job.reduces[0].attempts] == ["assigned"]
        told = _told(sides["a"], 1.0)
        # What followed the first answer went to the connection the worker gave up: the attempts it was given and
        # has not said it started are sent again (the worker takes each once).
        sent_again = [(m["type"], m.get("kind"), m.get("attempt")) for m in told]
        runs = [("run_task", "map", 0), ("run_task", "reduce", 0)]
        assert sent_again == [("registered", None, None), ("reducer_at", None, 0), *runs], told
        coordinator.handle(b"a", {"type": "task_started", "kind": "map", "pid": 1, "at": time.time(), **said})
        coordinator.handle(b"a", again | {"incarnation": 0})  # the map said it started: only the reduce is sent
        told = _told(sides["a"], 1.0)
        sent_again = [(m["type"], m.get("kind"), m.get("attempt")) for m in told]
        assert sent_again == [("registered", None, None), ("reducer_at", None, 0), runs[1]], told
        coordinator.handle(b"a", again | {"incarnation": 1})  # a new incarnation: what it ran is lost
        assert [a.status for a in job.maps[0].attempts][0] == "lost"
