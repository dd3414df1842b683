"""The coordinator counts each worker's free slots from what the worker reports: every attempt it gave a worker
must come back as exactly one freed slot, or it gives that worker tasks it has no slot for."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq

from hop.coordinator import Coordinator, WorkerInfo
from hop.protocol import message, unpack
from hop.worker import Worker


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
def _worker_with_one_map_slot(tmp_path: Path) -> Iterator[tuple[Worker, zmq.Socket]]:
    """A real worker (its task process started) and the socket its coordinator's messages arrive at."""
    context = zmq.Context.instance()
    coordinator_side = context.socket(zmq.ROUTER)
    address = f"ipc://{tmp_path}/coordinator"
    coordinator_side.bind(address)
    worker = Worker(address, map_slots=1, reduce_slots=0, name="w", spill_root=str(tmp_path), sample_interval=0)
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
