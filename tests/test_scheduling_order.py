"""Which waiting task a free slot goes to when several jobs run on a cluster."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

from hop.coordinator import Coordinator, WorkerInfo
from hop.loader import load_job_file
from hop.runner import build_spec
from hop.scheduler import JobState
from tests.conftest import job_path


def test_a_free_map_slot_goes_to_a_job_reading_its_input_before_a_later_step_reading_a_pipe(tmp_path: Path) -> None:
    """A pipeline's later step (its maps listen for the step before's partitions, holding their slots idle until
    then) submitted before another job took the last free map slot from that job's map, in submission order; after
    a worker was lost, pipelines whose later steps held every slot advanced one preemption (2 s) at a time. A real
    coordinator's state and scheduling, a worker of two map slots as the coordinator records it."""
    (tmp_path / "in.txt").write_text("a b\nc d\n", encoding="utf-8")
    coordinator = Coordinator(f"ipc://{tmp_path}/coordinator")
    try:
        coordinator.workers["w"] = WorkerInfo(
            identity=b"w", name="w", host="127.0.0.1", pid=0, map_slots=2, reduce_slots=0,
            free_map=2, free_reduce=0, last_seen=time.time(),
        )  # fmt: skip
        job_class = load_job_file(job_path("wordcount"))

        def submit(name: str, **options: object) -> str:
            spec = build_spec(
                job_class, [str(tmp_path / "in.txt")], str(tmp_path / name), num_reduces=1, options=options
            )
            before = set(coordinator.jobs)
            coordinator.on_submit(b"client", {"type": "submit", "job": spec.to_wire()})
            (job_id,) = set(coordinator.jobs) - before
            return job_id

        first_step = submit("first", tail_split=False)  # (a map that may be split keeps a later step waiting)
        coordinator._schedule()  # its one map takes a slot; its reduce waits (no reduce slot)
        assert coordinator.workers["w"].free_map == 1
        later_step = submit("later", upstream=first_step)  # ready to listen: its upstream has no map waiting
        other = submit("other")
        coordinator._schedule()
        assert [task.pending for task in coordinator.jobs[other].maps] == [False], "the other job's map got the slot"
        assert [task.pending for task in coordinator.jobs[later_step].maps] == [True]
    finally:
        coordinator.events.close()
        coordinator.socket.close(linger=0)


@contextlib.contextmanager
def _pipeline_on_a_full_worker(tmp_path: Path) -> Iterator[tuple[Coordinator, JobState, JobState]]:
    """A real coordinator's state: a pipeline of two word counts (one map and one reduce each) on a worker of one map
    and one reduce slot, both taken: the later step's tasks hold them (a worker was lost, say, and the step before
    runs again), and the step before's map and reduce wait for a slot."""
    (tmp_path / "in.txt").write_text("a b\nc d\n", encoding="utf-8")
    coordinator = Coordinator(f"ipc://{tmp_path}/coordinator")
    try:
        coordinator.workers["w"] = WorkerInfo(
            identity=b"w", name="w", host="127.0.0.1", pid=0, map_slots=1, reduce_slots=1,
            free_map=0, free_reduce=0, last_seen=time.time(),
        )  # fmt: skip
        job_class = load_job_file(job_path("wordcount"))
        jobs = []
        for name, options in (("first", {"tail_split": False}), ("later", {})):
            if jobs:
                options = {"upstream": jobs[0].spec.job_id}
            spec = build_spec(
                job_class, [str(tmp_path / "in.txt")], str(tmp_path / name), num_reduces=1, options=options
            )
            before = set(coordinator.jobs)
            coordinator.on_submit(b"client", {"type": "submit", "job": spec.to_wire()})
            (job_id,) = set(coordinator.jobs) - before
            jobs.append(coordinator.jobs[job_id])
        yield coordinator, jobs[0], jobs[1]
    finally:
        coordinator.events.close()
        coordinator.socket.close(linger=0)


def _running(job: JobState, kind: str) -> None:
    attempt = job.assign(kind, 0, "w")
    job.on_started(kind, 0, attempt.attempt, pid=1, at=time.time())


def test_a_later_step_gives_a_map_and_a_reduce_slot_back_at_once(tmp_path: Path) -> None:
    """The step before a pipeline's later step waits for a map and a reduce slot, which the later step's tasks hold:
    each kind of slot is given back at once. A map slot given back waited 2 s behind a reduce slot given back (one
    preemption per job every 2 s, whatever its kind): after a worker was lost, the step before's maps ran again on
    fewer slots for those 2 s."""
    with _pipeline_on_a_full_worker(tmp_path) as (coordinator, first, later):
        _running(later, "map")
        _running(later, "reduce")
        coordinator._schedule()
        assert [a.status for task in (*later.maps, *later.reduces) for a in task.attempts] == ["killed", "killed"]


def test_a_turn_that_took_no_slot_back_does_not_hold_the_next_back(tmp_path: Path) -> None:
    """While the step before has more maps than slots, every turn of the coordinator finds one waiting for a slot
    and the later step holding none to give back. Such a turn held the next preemption back for 2 s all the same,
    as if it had taken one: a later-step map that started then kept its slot from a map of the step before run again
    meanwhile."""
    with _pipeline_on_a_full_worker(tmp_path) as (coordinator, first, later):
        coordinator._schedule()  # nothing to give back
        assert [task.attempts for task in later.maps] == [[]]
        _running(later, "map")
        coordinator._schedule()
        assert [a.status for a in later.maps[0].attempts] == ["killed"], "its slot goes to the step before's map"
