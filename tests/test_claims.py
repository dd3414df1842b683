"""A run's output read or written by another run on the same machine while the first still runs (``hop.claims``):
refused, naming the run (its pid and command) or the job writing it, whether that run has an embedded cluster of its
own or a coordinator runs the job; never by what a run killed outright left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hop.claims import input_claimed
from hop.client import Client, JobRejected
from hop.local_cluster import LocalCluster
from hop.outputs import OutputExistsError, claim_output
from tests.conftest import hop, job_path

GATED_PARTITION_JOB = """
import time
from pathlib import Path

from hop import Job


class GatedPartition(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def partition(self, key, num_partitions):
        return 1 if key == "slow" else 0

    def reduce(self, key, values):
        deadline = time.monotonic() + 60
        while key == "slow" and not Path({gate!r}).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        yield key, sum(values)
"""
"""A word count whose partition 1 holds only the key "slow", whose reduce waits until the file ``gate`` exists:
partition 0 commits, and the job goes on until the test lets it end."""


def _gated_job(tmp_path: Path) -> tuple[str, Path]:
    """The job file (made in ``tmp_path``) and its gate."""
    gate = tmp_path / "go"
    (tmp_path / "gated.py").write_text(GATED_PARTITION_JOB.format(gate=str(gate)))
    return str(tmp_path / "gated.py"), gate


def _wait_for_part(output: Path, run: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 60
    while not (output / "part-00000").exists():
        assert time.monotonic() < deadline, "partition 0 committed"
        assert run is None or run.poll() is None, run.communicate()[1] if run is not None else ""
        time.sleep(0.02)


def _open_gate_and_wait(gate: Path, client: Client, job_id: str) -> None:
    """Let the gated job ``job_id`` finish, and see it succeed (the client closed either way)."""
    gate.touch()
    try:
        status = client.wait(job_id, timeout=60)
    finally:
        client.close()
    assert status["state"] == "succeeded", status.get("error")


@pytest.fixture()
def held_run(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """``hop run`` (an embedded cluster of its own) writing ``tmp_path/runs/out`` (``runs`` made for it) from
    ``data/in.txt``, one of its parts committed, the other held until ``tmp_path/go`` exists."""
    job, gate = _gated_job(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.txt").write_text("a b slow\nc d\n")
    command = [sys.executable, "-m", "hop", "run", job, "data/in.txt", "-o", "runs/out", "--reducers", "2", "--quiet"]
    run = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_part(tmp_path / "runs" / "out", run)
        yield run
    finally:
        gate.touch()
        try:
            run.wait(timeout=60)
        finally:
            run.kill()
            run.communicate()


def test_reading_a_running_runs_output_is_refused_naming_the_run(
    held_run: subprocess.Popen[str], cluster: LocalCluster, tmp_path: Path
) -> None:
    """A job reading the output of a ``hop run`` still running (its embedded cluster of its own: no coordinator
    knows of it), given as the folder, one of its parts, a glob of them or a folder holding it, read the part
    committed so far and succeeded on it without a word. It is refused before it starts, naming the run and what to
    do; so is ``hop submit`` reading it, and ``--engine spark``; a run writing the same output, and one whose
    ``--overwrite`` would clear a folder holding it (which deleted it under the run, which failed), name it too.
    Once the run has ended its output is read whole."""
    wordcount = job_path("wordcount")
    for number, given in enumerate(["runs/out", "runs/out/part-00000", "runs/out/part-*", "runs"]):
        reading = hop("run", wordcount, given, "-o", f"read-{number}", "--quiet", cwd=tmp_path)
        assert reading.returncode == 2, reading.stderr
        assert f"the output of another hop run on this machine (pid {held_run.pid}: " in reading.stderr, reading.stderr
        assert "still running: its part files are not all written yet" in reading.stderr, reading.stderr
        assert not (tmp_path / f"read-{number}").exists()
    submitted = hop("submit", wordcount, "runs/out", "-o", "read", "--coordinator", cluster.address, cwd=tmp_path)
    assert submitted.returncode == 2, submitted.stderr
    assert f"is the output of another hop run on this machine (pid {held_run.pid}: " in submitted.stderr
    on_spark = hop("run", wordcount, "runs/out", "-o", "read", "--engine", "spark", "--quiet", cwd=tmp_path)
    assert on_spark.returncode == 2, on_spark.stderr  # (refused before its JVM starts)
    assert f"is the output of another hop run on this machine (pid {held_run.pid}: " in on_spark.stderr
    writing = hop("run", wordcount, "data/in.txt", "-o", "runs/out", "--overwrite", "--quiet", cwd=tmp_path)
    assert writing.returncode == 2, writing.stderr
    assert f"out is being written by another hop run on this machine (pid {held_run.pid}: " in writing.stderr
    clearing = hop("run", wordcount, "data/in.txt", "-o", "runs", "--overwrite", "--quiet", cwd=tmp_path)
    assert clearing.returncode == 2, clearing.stderr
    assert f"runs holds {tmp_path / 'runs' / 'out'}, the output of another hop run on this machine (pid " in (
        clearing.stderr
    )
    assert (tmp_path / "runs" / "out" / "part-00000").exists(), "the running run's committed part was cleared"
    assert held_run.poll() is None, "the run goes on"
    (tmp_path / "go").touch()
    assert held_run.wait(timeout=60) == 0, held_run.communicate()[1]
    reading = hop("run", wordcount, "runs/out", "-o", "read", "--quiet", cwd=tmp_path)
    assert reading.returncode == 0, reading.stderr
    assert '"\\"slow\\""\t1' in (tmp_path / "read" / "part-00000").read_text(), "the part committed last was read"


def test_a_job_submitted_through_the_api_reading_a_running_runs_output_is_refused_by_its_coordinator(
    held_run: subprocess.Popen[str], client: Client, tmp_path: Path
) -> None:
    """A job given to a coordinator through the API (or from a client that checks nothing: another host's, an older
    one's) reading the output of a ``hop run`` still running on the coordinator's machine read the part committed so
    far as if it were all, the coordinator knowing nothing of that run. The coordinator tests its machine's holds as
    it accepts the job: refused, naming the run, as ``hop run`` is; a folder holding that output too."""
    from hop.loader import load_job_file
    from hop.runner import build_spec

    wordcount = load_job_file(job_path("wordcount"))
    for number, given in enumerate([tmp_path / "runs" / "out", tmp_path / "runs" / "out" / "part-*", tmp_path]):
        spec = build_spec(wordcount, [str(given)], str(tmp_path / f"read-{number}"), num_reduces=1)
        with pytest.raises(JobRejected) as refused:
            client.submit(spec)
        assert f"the output of another hop run on this machine (pid {held_run.pid}: " in str(refused.value)
        assert "still running: its part files are not all written yet" in str(refused.value)
        assert not (tmp_path / f"read-{number}").exists()
    spec = build_spec(wordcount, [str(tmp_path / "data")], str(tmp_path / "read"), num_reduces=1)
    assert client.wait(client.submit(spec), timeout=60)["state"] == "succeeded", "an input no run writes is read"


def test_a_killed_runs_output_blocks_no_one(tmp_path: Path) -> None:
    """A run killed outright (SIGKILL, no chance to clean up) leaves its output as it was, with ``_temporary``, but
    holds nothing: reading it, or writing it again, is not refused as being written, once its cluster (which finds
    itself orphaned) has ended. Reading it warns that its parts may be part of its result (it was read as whole);
    a whole output read, none."""
    job, gate = _gated_job(tmp_path)
    (tmp_path / "in.txt").write_text("a b slow\nc d\n")
    command = [sys.executable, "-m", "hop", "run", job, "in.txt", "-o", "out", "--reducers", "2", "--quiet"]
    run = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_part(tmp_path / "out", run)
        process = psutil.Process(run.pid)
        everything = [process, *process.children(recursive=True)]
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        _, alive = psutil.wait_procs(everything, timeout=30)
        assert not alive, [process.pid for process in alive]
    finally:
        gate.touch()
        run.kill()
        run.communicate()
    assert (tmp_path / "out" / "_temporary").is_dir(), "left as it was"
    wordcount = job_path("wordcount")
    reading = hop("run", wordcount, "out", "-o", "read", "--quiet", cwd=tmp_path)
    assert reading.returncode == 0, reading.stderr
    # Not refused, but not read as a whole result without a word either.
    warning = f"hop: warning: input {tmp_path / 'out'}: {tmp_path / 'out'} holds _temporary, which no run on this "
    assert f"{warning}machine is writing: the run that wrote it was killed" in reading.stderr, reading.stderr
    writing = hop("run", wordcount, "in.txt", "-o", "out", "--overwrite", "--quiet", cwd=tmp_path)
    assert writing.returncode == 0, writing.stderr
    reading = hop("run", wordcount, "out", "-o", "read", "--overwrite", cwd=tmp_path)
    assert reading.returncode == 0 and "warning" not in reading.stderr, reading.stderr


def test_a_coordinators_running_job_is_named_to_a_run_writing_or_reading_its_output(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """A batch job running on a coordinator whose own run holds nothing on this machine (submitted from another
    host, through the API, or its ``hop submit`` killed). ``hop submit`` writing its output without
    ``--overwrite`` was told ``output directory ... is not empty``, where the coordinator names the job: it now
    names it too. ``hop run`` (a cluster of its own) was told the same, and with ``--overwrite`` cleared the job's
    committed part under it; reading it, it read that part alone. Each is refused, naming the coordinator."""
    from hop.client import Client
    from hop.loader import load_job_file
    from hop.runner import build_spec

    job, gate = _gated_job(tmp_path)
    (tmp_path / "in.txt").write_text("a b slow\nc d\n")
    out = tmp_path / "out"
    client = Client(cluster.address, timeout=30)
    spec = build_spec(load_job_file(job), [str(tmp_path / "in.txt")], str(out), num_reduces=2)
    running = client.submit(spec)
    try:
        _wait_for_part(out)
        wordcount = job_path("wordcount")
        writing = hop("submit", wordcount, "in.txt", "-o", "out", "--coordinator", cluster.address, cwd=tmp_path)
        assert writing.returncode == 2, writing.stderr
        assert f"output directory {out} is being written by job {running}, still running" in writing.stderr, (
            writing.stderr
        )
        coordinator = "a job of a hop coordinator on this machine (pid "
        for overwrite in ([], ["--overwrite"]):
            writing = hop("run", wordcount, "in.txt", "-o", "out", *overwrite, "--quiet", cwd=tmp_path)
            assert writing.returncode == 2, writing.stderr
            assert f"output directory {out} is being written by {coordinator}" in writing.stderr, writing.stderr
        assert (out / "part-00000").exists(), "the running job's committed part was cleared"
        reading = hop("run", wordcount, "out", "-o", "read", "--quiet", cwd=tmp_path)
        assert reading.returncode == 2, reading.stderr
        assert f"input {out} is the output of {coordinator}" in reading.stderr, reading.stderr
    finally:
        _open_gate_and_wait(gate, client, running)


def test_an_output_inside_a_running_runs_or_jobs_output_is_refused(
    held_run: subprocess.Popen[str], cluster: LocalCluster, tmp_path: Path
) -> None:
    """A run writing a folder inside the output of a run or job still running was accepted: its files went among
    that output's parts, and a job reading that output later read them too. It is refused before it starts, naming
    the output and its writer, by the run (a hold on a folder above its output) and by a coordinator (its running
    job's output above), and the folders it made are removed; beside that output, a run is accepted."""
    from hop.loader import load_job_file
    from hop.runner import build_spec

    wordcount = job_path("wordcount")
    run_named = f"is inside {tmp_path / 'runs' / 'out'}, the output of another hop run on this machine (pid "
    for output in ("runs/out/sub", "runs/out/a/b"):
        nested = hop("run", wordcount, "data/in.txt", "-o", output, "--quiet", cwd=tmp_path)
        assert nested.returncode == 2 and run_named in nested.stderr, nested.stderr
        assert f"the output of another hop run on this machine (pid {held_run.pid}: " in nested.stderr
    assert sorted(path.name for path in (tmp_path / "runs" / "out").iterdir() if path.is_dir()) == ["_temporary"]
    beside = hop("run", wordcount, "data/in.txt", "-o", "runs/beside", "--quiet", cwd=tmp_path)
    assert beside.returncode == 0, beside.stderr
    # A job of the coordinator: submitted through its client, its output's folder held by no run of this machine.
    (tmp_path / "second").mkdir()
    job, gate = _gated_job(tmp_path / "second")
    client = Client(cluster.address, timeout=30)
    out, inputs = tmp_path / "job-out", [str(tmp_path / "data" / "in.txt")]
    running = client.submit(build_spec(load_job_file(job), inputs, str(out), num_reduces=2))
    try:
        _wait_for_part(out)
        with pytest.raises(JobRejected, match=f"is inside {out}, the output of job {running}, still running: its"):
            client.submit(build_spec(load_job_file(wordcount), inputs, str(out / "sub")))
        submitted = hop(
            "submit", wordcount, "data/in.txt", "-o", "job-out/sub", "--coordinator", cluster.address, cwd=tmp_path
        )
        assert submitted.returncode == 2, submitted.stderr
        assert f"is inside {out}, the output of job {running}, still running" in submitted.stderr, submitted.stderr
        assert f"(hop stop {running} --coordinator {cluster.address})" in submitted.stderr, submitted.stderr
        local = hop("run", wordcount, "data/in.txt", "-o", "job-out/sub", "--quiet", cwd=tmp_path)
        assert local.returncode == 2, local.stderr
        assert f"is inside {out}, the output of a job of a hop coordinator on this machine (pid " in local.stderr
        assert not (out / "sub").exists()
    finally:
        _open_gate_and_wait(gate, client, running)


def test_a_continuous_runs_output_is_read_as_written_but_not_written_twice(tmp_path: Path) -> None:
    """A batch run's hold refuses readers; a continuous run's (its windows are each complete once written, as a
    coordinator lets its own continuous jobs' outputs be read) refuses only other writers. Neither is left once
    released."""
    batch, windows = tmp_path / "batch", tmp_path / "windows"
    release = claim_output(str(batch))
    try:
        assert input_claimed([str(batch)]) is not None
        assert input_claimed([str(tmp_path)]) is not None, "a folder holding it"
        with pytest.raises(
            OutputExistsError, match=f"being written by another hop run on this machine \\(pid {os.getpid()}"
        ):
            claim_output(str(batch))
    finally:
        release()
    assert input_claimed([str(tmp_path)]) is None
    batch.mkdir()
    release = claim_output(str(windows), read_as_written=True)
    try:
        assert input_claimed([str(windows), str(tmp_path)]) is None
        with pytest.raises(OutputExistsError, match="being written by another hop run on this machine"):
            claim_output(str(windows))
    finally:
        release()


def test_a_running_continuous_runs_windows_are_read_but_its_output_not_written(tmp_path: Path) -> None:
    """A continuous run's windows are each complete once written, so a batch job reads its output while it runs
    (as a coordinator allows for its own continuous jobs); a run writing that output is refused, naming it."""
    (tmp_path / "feed").mkdir()
    (tmp_path / "feed" / "f.txt").write_text("a b\n")
    (tmp_path / "in.txt").write_text("c d\n")
    command = [sys.executable, "-m", "hop", "run", job_path("stream_wordcount"), "--source", "tail:feed"]
    command += ["--window", "1s", "-o", "windows", "--no-view", "--workers", "1", "--quiet"]
    run = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "windows").glob("windows/*/part-*")):
            assert time.monotonic() < deadline and run.poll() is None, "a window was written"
            with (tmp_path / "feed" / "f.txt").open("a") as feed:
                feed.write("a b\n")
            time.sleep(0.2)
        wordcount = job_path("wordcount")
        reading = hop("run", wordcount, "windows", "-o", "read", "--quiet", cwd=tmp_path)
        assert reading.returncode == 0, reading.stderr
        writing = hop("run", wordcount, "in.txt", "-o", "windows", "--overwrite", "--quiet", cwd=tmp_path)
        assert writing.returncode == 2, writing.stderr
        assert f"windows is being written by another hop run on this machine (pid {run.pid}: " in writing.stderr
        assert run.poll() is None, "the continuous run goes on"
    finally:
        run.send_signal(signal.SIGINT)
        try:
            run.wait(timeout=60)
        finally:
            run.kill()
            run.communicate()
