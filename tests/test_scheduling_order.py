"""Which waiting task a free slot goes to when several jobs run on a cluster."""

from __future__ import annotations

import time
from pathlib import Path

from hop.coordinator import Coordinator, WorkerInfo
from hop.loader import load_job_file
from hop.runner import build_spec
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
