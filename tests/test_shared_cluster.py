"""Several jobs sharing one cluster at once, checked against each job run alone on it.

A word count, a two-step job, a pipeline of two job files, a job whose map raises and a job cancelled with ``hop stop``
are submitted together by their own ``hop submit`` processes: every successful one must write what it writes alone,
byte for byte (none holds another's records), the failing and the cancelled ones must leave no part and not disturb
the others, and the cluster's slots must all come back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from hop.client import Client
from hop.gen.text import generate_text
from hop.local_cluster import LocalCluster
from tests.conftest import ROOT, hop, job_path

TIMEOUT = 120

SUCCEEDING = {
    "counts": (["wordcount"], ["--reducers", "2"]),
    "steps": (["two_steps"], ["--reducers", "2"]),
    "top": (["wordcount", "topk"], ["--reducers", "1"]),
}


def parts(output: Path) -> dict[str, bytes]:
    return {part.name: part.read_bytes() for part in sorted(output.glob("part-*"))}


def submit(address: str, jobs: list[str], inputs: list[Path], output: Path, flags: list[str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "hop", "submit", *map(job_path, jobs), *map(str, inputs), "-o", str(output)]
    return subprocess.Popen(
        [*command, "--coordinator", address, "--quiet", *flags],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_jobs_sharing_a_cluster_write_what_each_writes_alone(cluster: LocalCluster, tmp_path: Path) -> None:
    text, boom = tmp_path / "words.txt", tmp_path / "boom.txt"
    generate_text(text, 1 << 20, seed=5, vocabulary=5000)
    boom.write_text("a b\n" * 1000 + "boom\n" + "c d\n" * 1000)
    alone, together = tmp_path / "alone", tmp_path / "together"
    for name, (jobs, flags) in SUCCEEDING.items():
        command = ["submit", *map(job_path, jobs), str(text), "-o", str(alone / name), "--quiet", *flags]
        run = hop(*command, "--coordinator", cluster.address, timeout=TIMEOUT)
        assert run.returncode == 0, run.stderr

    client = Client(cluster.address, timeout=30)
    running: dict[str, subprocess.Popen[str]] = {}
    try:
        running["cancelled"] = submit(
            cluster.address, ["slow_map"], [text], together / "cancelled", ["--reducers", "2"]
        )
        for name, (jobs, flags) in SUCCEEDING.items():
            running[name] = submit(cluster.address, jobs, [text], together / name, flags)
        running["failing"] = submit(cluster.address, ["failing_map"], [boom], together / "failing", [])
        cancelled = None
        deadline = time.monotonic() + TIMEOUT
        while cancelled is None and time.monotonic() < deadline:
            time.sleep(0.05)
            # (once its maps read, well before any ends: a slow_map reads for seconds)
            found = [job for job in client.jobs() if job["output"] == str(together / "cancelled")]
            if found and found[0]["state"] == "running" and found[0]["input_records"] > 0:
                assert found[0]["maps_done"] == 0, "the job to cancel ended its maps before it was stopped"
                cancelled = found[0]["job_id"]
        assert cancelled is not None, "the job to cancel never ran"
        stop = hop("stop", cancelled, "--coordinator", cluster.address, timeout=30)
        assert stop.returncode == 0, stop.stderr
        errors = {name: process.communicate(timeout=TIMEOUT)[1] for name, process in running.items()}
    finally:
        for process in running.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)

        codes = {name: process.returncode for name, process in running.items()}
        try:
            # The cluster's slots come back: a later job gets them all.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                workers = client.workers()
                if all(w["free_map"] == w["map_slots"] and w["free_reduce"] == w["reduce_slots"] for w in workers):
                    break
                time.sleep(0.05)
            assert all(w["free_map"] == w["map_slots"] for w in workers), workers
            assert all(w["free_reduce"] == w["reduce_slots"] for w in workers), workers
        finally:
            client.close()

    for name in SUCCEEDING:
        assert codes[name] == 0, errors[name]
        assert parts(together / name) == parts(alone / name), f"{name} differs from the job run alone"
        report, alone_report = (json.loads((folder / name / "_job.json").read_text()) for folder in (together, alone))
        for counter in ("map_input_records", "map_output_records", "reduce_output_records", "user"):
            assert report["counters"][counter] == alone_report["counters"][counter], (name, counter)
        kept = sorted([*parts(alone / name), "_SUCCESS", "_job.json"])
        assert sorted(p.name for p in (together / name).iterdir()) == kept, name
    for name, said in (("failing", "cannot handle boom"), ("cancelled", "cancelled by hop stop")):
        assert codes[name] == 1, errors[name]
        assert said in errors[name], errors[name]
        assert sorted(p.name for p in (together / name).iterdir()) == ["_job.json"], name
        assert json.loads((together / name / "_job.json").read_text())["status"] == "failed"
    assert not [p.name for p in together.iterdir() if p.name.startswith(".")], "a pipeline's scratch folder stayed"
