"""A long-lived coordinator (``hop coordinator`` with ``hop worker``s, up for months) keeps its newest ``--keep-jobs``
ended jobs and forgets the rest: nothing it holds may grow with the number of jobs it ran. It kept, for every job it
ever ran, the strata of its input chunks, and for every pipeline the reader of each of its maps (``pipe_readers``).
Real coordinator (served in a thread of the test, so its tables can be read), real worker, real ``hop submit``."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from hop.client import Client
from hop.coordinator import Coordinator

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
