"""A long-lived cluster (``hop coordinator`` with ``hop worker``s, up for months) must hold nothing that grows with the
number of jobs it ran. The coordinator keeps its newest ``--keep-jobs`` ended jobs and forgets the rest; it kept, for
every job it ever ran, the strata of its input chunks, and for every pipeline the reader of each of its maps
(``pipe_readers``). A worker forgets a job at its ``job_done``; a notice about the job that came after it (the
coordinator's ``map_failed`` answering a map attempt's late ``map_done``) made the job's tables again, for good."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from hop.client import Client
from hop.coordinator import Coordinator
from hop.protocol import message
from hop.worker import Worker

ROOT = Path(__file__).resolve().parent.parent


def _submit(address: str, cwd: Path, *args: str) -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "hop", "submit", *args, "--quiet", "--coordinator", address],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr


def test_a_coordinator_forgets_everything_about_the_jobs_it_retires(tmp_path: Path) -> None:
    """Real coordinator (served in a thread of the test, so its tables can be read), real worker, real ``hop
    submit``."""
    coordinator = Coordinator(f"ipc://{tmp_path}/coordinator", keep_jobs=1)
    serving = threading.Thread(target=coordinator.serve, daemon=True)
    serving.start()
    worker = subprocess.Popen(
        [sys.executable, "-m", "hop", "worker", "--coordinator", coordinator.address, "--name", "w0"]
        + ["--map-slots", "1", "--reduce-slots", "2", "--spill-dir", str(tmp_path), "--sample-interval", "0"],
        stderr=subprocess.DEVNULL,
    )
    try:
        (tmp_path / "in.txt").write_text("x y x\nz x y\n" * 50)
        wordcount, topk = str(ROOT / "jobs" / "wordcount.py"), str(ROOT / "jobs" / "topk.py")
        for number in range(2):  # pipelines: each maps of its second job reads the first's partition
            _submit(coordinator.address, tmp_path, wordcount, topk, "in.txt", "-o", f"piped{number}")
        _submit(coordinator.address, tmp_path, wordcount, "in.txt", "-o", "online", "--snapshot-every", "0.5")
        client = Client(coordinator.address, timeout=10)
        try:
            client.shutdown()  # the coordinator tells its worker to stop, then stops
        finally:
            client.close()
        serving.join(timeout=30)
        assert not serving.is_alive(), "the coordinator did not stop within 30 s"
    finally:
        coordinator.running = False
        serving.join(timeout=30)
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=5)
    assert len(coordinator.retired) == 4, coordinator.retired  # 5 jobs (a pipeline is 2), 1 kept
    kept = set(coordinator.jobs)
    tables = {
        "chunk_strata": set(coordinator.chunk_strata),
        "pipe_readers": {job_id for job_id, _ in coordinator.pipe_readers},
        "deferred_done": {job_id for job_id, _ in coordinator.deferred_done},
        "pipe_released": {job_id for job_id, *_ in coordinator.pipe_released},
        "_last_preemption": {job_id for job_id, _ in coordinator._last_preemption},
        "downstream": set(coordinator.downstream),
        "submitters": set(coordinator.submitters),
    }
    assert {name: ids - kept for name, ids in tables.items() if ids - kept} == {}


def test_a_worker_forgets_a_job_whose_notices_come_after_its_end(tmp_path: Path) -> None:
    """A map attempt of a stopped (or failed) job that finishes before its worker kills it: the coordinator answers
    its late ``map_done`` with ``map_failed`` for every worker, after their ``job_done``. Seen in a soak of a
    standalone cluster: a few such jobs per hundred, each left in every worker's ``notices`` and pusher for good. Real
    worker (no slots: it runs no task); the test plays the coordinator's side of the wire, in that order."""
    worker = Worker(f"ipc://{tmp_path}/coordinator", 0, 0, name="w", spill_root=str(tmp_path), sample_interval=0)
    try:
        for number in range(3):
            job_id = f"job-20261128-090000-{number:04d}"
            worker.on_coordinator(message("map_committed", job_id=job_id, index=1, attempt=0, segments=[]))
            worker.on_coordinator(message("job_done", job_id=job_id, failed=True, stop_tasks=False))
            worker.on_coordinator(message("map_failed", job_id=job_id, index=0, attempt=0))
            worker.on_coordinator(message("reducer_at", job_id=job_id, index=0, attempt=0, address="tcp://127.0.0.1:9"))
        assert (worker.notices, worker.pusher._jobs) == ({}, {})
        assert len(worker.ended_jobs) == 3
    finally:
        worker.close()
