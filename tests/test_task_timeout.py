"""``--task-timeout``: an attempt that has not advanced for that long is killed, fails, and runs again.

Real clusters and task processes; a map that hangs on one record (``time.sleep``) stands for code looping or blocked
on I/O. Without the option such a map held its job for ever (``hop run`` only says so after 120 s): each wait here
has a timeout of its own, short, so that a run without the feature fails rather than hangs.
"""

from __future__ import annotations

import collections
import json
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from hop.client import Client
from hop.inputs import Split
from hop.jobspec import JobSpec
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import JobFailed, build_spec, run_steps
from hop.scheduler import Attempt, Broadcast, FinishJob, JobState, KillAttempt, task_timeout
from tests.conftest import hop, output_dict

HANGING_JOB = """\
import os
import time

from hop import Job
from hop.aggregates import Sum


class Hanging(Job):
    def map(self, offset, line):
        if line == "hang" and {once} and not os.path.exists({marker!r}):
            open({marker!r}, "w").close()
            time.sleep(600)  # (until killed: its attempt never advances again)
        elif line == "hang" and not {once}:
            time.sleep(600)
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()
"""


def hanging_job(folder: Path, once: bool) -> Path:
    """A word count whose map hangs on the line ``hang``: in the first attempt to read it only (``once``: it leaves
    a marker file, so a retry goes through), or in every attempt."""
    path = folder / ("hangs_once.py" if once else "hangs_always.py")
    path.write_text(HANGING_JOB.format(once=once, marker=str(folder / "hung-once")), encoding="utf-8")
    return path


def test_a_map_that_hangs_once_is_killed_after_the_task_timeout_and_its_retry_succeeds(tmp_path: Path) -> None:
    """``hop run --task-timeout 1.5``: the map's first attempt stops advancing on one record; 1.5 s later it is
    failed and killed, its retry (the marker file left by the first) reads the record, and the output is exact.
    ``_job.json`` lists the first attempt as failed, with why."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n" * 300 + "hang\n" + "c d a\n" * 300, encoding="utf-8")
    job = hanging_job(tmp_path, once=True)
    started = time.monotonic()
    result = hop(
        "run", str(job), "in.txt", "-o", "out", "--workers", "1", "--reducers", "1", "--quiet",
        "--task-timeout", "1.5", "--timeout", "30",
        cwd=tmp_path, timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "hung-once").exists()  # (the first attempt did hang)
    expected = collections.Counter(source.read_text(encoding="utf-8").split())
    assert output_dict(tmp_path / "out") == expected
    report = json.loads((tmp_path / "out" / "_job.json").read_text(encoding="utf-8"))
    maps = [a for a in report["attempts"] if a["kind"] == "map"]
    assert [a["status"] for a in maps] == ["failed", "succeeded"], maps
    assert maps[0]["error"].startswith("map-00000 did not advance for 1.5s (--task-timeout 1.5), at "), maps[0]
    assert maps[0]["error"].endswith(": killed"), maps[0]
    assert maps[0]["end"] - maps[0]["start"] >= 1.5, maps[0]
    assert elapsed < 25, elapsed


def test_a_map_that_always_hangs_fails_the_job_after_max_attempts_and_leaves_no_process(tmp_path: Path) -> None:
    """A map hanging on every attempt, ``--max-attempts 2``: each attempt is killed 1.5 s into its hang, and the
    job fails at once after the second, naming the timeout and the map's input, with no task process of theirs
    left running (the slots run new ones)."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n" * 100 + "hang\n" + "c d\n" * 100, encoding="utf-8")
    options = {"max_attempts": 2, "task_timeout": 1.5}
    job_class = load_job_file(str(hanging_job(tmp_path, once=False)))
    spec = build_spec(job_class, [str(source)], str(tmp_path / "out"), num_reduces=1, options=options)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            started = time.monotonic()
            with pytest.raises(JobFailed) as failure:
                run_steps(client, spec, progress=False, timeout=20)
            elapsed = time.monotonic() - started
            report = json.loads((tmp_path / "out" / "_job.json").read_text(encoding="utf-8"))
            pids = [a["pid"] for a in report["attempts"] if a["kind"] == "map"]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(_running(pid) for pid in pids):
                time.sleep(0.05)
            left = [pid for pid in pids if _running(pid)]
        finally:
            client.close()
    error = failure.value.status["error"]
    assert error.startswith("map-00000 did not advance for 1.5s (--task-timeout 1.5), at "), error
    assert ": killed (gave up after 2 failed attempts)" in error, error
    assert error.endswith(f"; map-00000 read {source}[0:{source.stat().st_size}]"), error
    maps = [a for a in report["attempts"] if a["kind"] == "map"]
    assert [a["status"] for a in maps] == ["failed", "failed"], maps
    assert all("(--task-timeout 1.5)" in a["error"] for a in maps), maps
    assert len(set(pids)) == 2 and None not in pids, pids  # (the first one's kill restarted the slot)
    assert not left, f"task processes still running: {left}"
    assert elapsed < 15, elapsed  # (two attempts of 1.5 s, each checked within a second, and their starts)


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, ended and not yet reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--task-timeout", "0"], "expected a duration above zero such as 30s or 5m, got '0'"),
        (["--task-timeout", "-5s"], "expected a duration above zero such as 30s or 5m, got '-5s'"),
        (["--task-timeout", "soon"], "cannot read 'soon' as a duration"),
    ],
    ids=["zero", "negative", "not-a-duration"],
)
def test_a_task_timeout_that_is_no_positive_duration_is_refused(
    tmp_path: Path, option: list[str], message: str
) -> None:
    (tmp_path / "in.txt").write_text("a b\n")
    result = hop("run", str(hanging_job(tmp_path, once=True)), "in.txt", "-o", "out", *option, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_the_task_timeout_is_read_as_a_duration_and_refused_for_a_continuous_job_or_spark(tmp_path: Path) -> None:
    """``--task-timeout 2m`` is 120 s in the job's options; with ``--source`` it is refused: a continuous job's
    quiet source is no fault, and its attempts are never timed (nor said to be stalled). Spark would ignore it."""
    from hop.cli import build_parser

    args = build_parser(False).parse_args(["run", "job.py", "in.txt", "-o", "out", "--task-timeout", "2m"])
    assert args.task_timeout == 120.0
    (tmp_path / "in.txt").write_text("a b\n")
    stream = ["--source", "replay:in.txt", "--window", "1r", "--task-timeout", "30s"]
    result = hop("run", str(Path(__file__).parents[1] / "jobs" / "stream_wordcount.py"), *stream, "-o", "out",
                 cwd=tmp_path)  # fmt: skip
    message = "--task-timeout applies to a batch job over input files, not to a continuous job (--source): drop it"
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()
    spark = hop("run", str(hanging_job(tmp_path, once=True)), "in.txt", "-o", "out", "--engine", "spark",
                "--task-timeout", "30s", cwd=tmp_path)  # fmt: skip
    message = "--task-timeout applies to hop's own engine, not to --engine spark, which would ignore it: drop it"
    assert spark.returncode == 2 and message in spark.stderr, spark.stderr


def test_a_submitted_task_timeout_that_is_no_positive_number_is_refused(tmp_path: Path) -> None:
    """Through the API (or another client), the coordinator refuses what the command line would."""
    from hop.client import JobRejected

    source = tmp_path / "in.txt"
    source.write_text("a b\n")
    job_class = load_job_file(str(hanging_job(tmp_path, once=True)))
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            for bad in (0, -1.0, "30s", True):
                spec = build_spec(job_class, [str(source)], str(tmp_path / "out"), options={"task_timeout": bad})
                with pytest.raises(JobRejected, match="task_timeout must be a number of seconds above zero"):
                    client.submit(spec)
        finally:
            client.close()


def test_hop_runs_note_of_a_stalled_attempt_says_when_the_task_timeout_kills_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the option, ``hop run``'s note of an attempt that has not advanced says the job waits for it; with
    a ``--task-timeout`` longer than the note's wait, that the timeout will kill it, and the job goes on."""
    import hop.runner

    monkeypatch.setattr(hop.runner, "STALLED_NOTE_SECONDS", 5.0)  # (120 s by default; statuses list 5 s and more)
    source = tmp_path / "in.txt"
    source.write_text("a b\n" * 100 + "hang\n" + "c d\n" * 100, encoding="utf-8")
    job_class = load_job_file(str(hanging_job(tmp_path, once=True)))
    options = {"task_timeout": 7.0}
    spec = build_spec(job_class, [str(source)], str(tmp_path / "out"), num_reduces=1, options=options)
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            run_steps(client, spec, progress=True, timeout=30)
        finally:
            client.close()
    said = capsys.readouterr().err
    assert "map-00000 (attempt 0, on worker local-0) has not advanced for " in said, said
    killed = "; at 7 s (--task-timeout 7) it fails, killed, and runs again while --max-attempts allows (hop stop "
    assert killed in said, said
    assert "the job waits for it" not in said, said
    assert (tmp_path / "out" / "_SUCCESS").exists()


# The state machine's side (hop.scheduler.JobState), driven directly: what is timed out, and what is not. ----------


def _job(task_timeout: float | None, maps: int = 1, max_attempts: int = 2, **options: Any) -> JobState:
    options = {**options, **({"task_timeout": task_timeout} if task_timeout is not None else {})}
    spec = JobSpec(b"", "test", ("/data/in",), "/data/out", num_reduces=1, job_id="job-1", options=options)
    return JobState(spec, [Split(f"/data/in/f{i}", 0, 100) for i in range(maps)], max_attempts=max_attempts)


def _started(job: JobState, kind: str, index: int) -> Attempt:
    attempt = job.assign(kind, index, "w1")
    job.on_started(kind, index, attempt.attempt, pid=100 + attempt.attempt, at=time.time())
    return attempt


def test_a_stalled_attempt_is_failed_and_killed_until_max_attempts_fail_the_job() -> None:
    job = _job(1.5)
    first = _started(job, "map", 0)
    assert first.progress_at is not None
    assert job.time_out_stalled(first.progress_at + 1.4) == []  # (not yet)
    actions = job.time_out_stalled(first.progress_at + 1.6)
    assert actions[0] == KillAttempt("w1", "map", 0, 0), actions
    assert Broadcast("map_failed", {"job_id": "job-1", "index": 0, "attempt": 0}) in actions
    assert first.status == "failed"
    assert first.error == "map-00000 did not advance for 1.5s (--task-timeout 1.5), at 0%: killed"
    assert job.maps[0].pending and job.state == "running"
    # Its own report of its end, crossing the kill, changes nothing: it failed once, as the coordinator said.
    assert job.on_task_failed("map", 0, 0, "task process ended", None, True, time.time()) == []
    assert first.error is not None and first.error.startswith("map-00000 did not advance"), first.error
    second = _started(job, "map", 0)
    job.on_progress("map", 0, 1, 0.25, 10)  # (it advanced: its stall counts from here)
    assert second.progress_at is not None
    actions = job.time_out_stalled(second.progress_at + 1.6)
    assert FinishJob("failed", job.error) in actions and job.state == "failed", actions
    assert job.error is not None
    assert job.error.startswith("map-00000 did not advance for 1.5s (--task-timeout 1.5), at 25%: killed (gave up")
    assert job.error.endswith("; map-00000 read /data/in/f0[0:100]"), job.error


def test_no_attempt_is_timed_out_without_the_option_nor_before_the_coordinators_pause_ended() -> None:
    untimed = _job(None)
    attempt = _started(untimed, "map", 0)
    assert untimed.time_out_stalled(time.time() + 3600) == [] and attempt.status == "running"
    job = _job(1.5)
    attempt = _started(job, "map", 0)
    woke = time.time() + 600  # (the coordinator ran again then: the attempts could not be heard before)
    assert job.time_out_stalled(woke + 1.0, counted_from=woke) == [] and attempt.status == "running"
    assert job.time_out_stalled(woke + 1.6, counted_from=woke) != [] and attempt.status == "failed"


def test_an_attempt_on_a_silent_worker_is_left_to_the_heartbeat_timeout() -> None:
    """A worker not heard from (stopped, cut off) cannot relay its attempts' progress: they are not timed out while
    it is silent (``heard_since`` is then now), and stall again from when it is heard again; lost with it, they
    run again without counting against --max-attempts."""
    job = _job(1.5)
    attempt = _started(job, "map", 0)
    later = time.time() + 60
    assert job.time_out_stalled(later, heard_since={"w1": later}) == [] and attempt.status == "running"
    assert job.time_out_stalled(later + 1.0, heard_since={"w1": later}) == []
    assert job.time_out_stalled(later + 1.0, heard_since={"w2": later}) != [] and attempt.status == "failed"


def test_a_pipelined_reduce_whose_output_is_whole_is_not_timed_out_while_the_next_step_takes_it() -> None:
    """It waits (at most a minute: ``hop.pipe.PipeSender.finish``) for the next step's map to read its output,
    which is that map's doing: timed out, it and the map reading it ran again, and again."""
    job = _job(1.5)
    map_attempt = _started(job, "map", 0)
    job.on_map_done(0, map_attempt.attempt, 1, {"map_input_records": 1}, {}, time.time())
    reduce = _started(job, "reduce", 0)
    job.on_progress("reduce", 0, 0, 1.0, 0, written=123)
    assert job.running_attempts(time.time() + 30) == []
    assert job.time_out_stalled(time.time() + 30) == [] and reduce.status == "running"
    job.on_progress("reduce", 0, 0, 0.9, 5)  # (a reduce still reducing is timed)
    assert [a["task"] for a in job.running_attempts(time.time() + 30)] == ["reduce-00000"]
    assert job.time_out_stalled(time.time() + 30) != [] and reduce.status == "failed"


def test_a_continuous_job_or_a_bad_value_is_refused() -> None:
    for bad in (0, -2, float("inf"), float("nan"), "30s", True):
        with pytest.raises(ValueError, match="task_timeout must be a number of seconds above zero"):
            task_timeout({"task_timeout": bad})
    with pytest.raises(ValueError, match="not to a continuous job"):
        task_timeout({"task_timeout": 30, "stream": {"sources": ["replay:x"]}})
    assert task_timeout({}) is None and task_timeout({"task_timeout": 2}) == 2.0
