"""The coordinator's per-job state machine (hop.scheduler.JobState), driven directly without processes."""

from __future__ import annotations

from typing import Any

import pytest

from hop.inputs import Split
from hop.jobspec import JobSpec
from hop.planning import Chunk
from hop.scheduler import (
    BUILTIN_COUNTERS,
    Broadcast,
    CommitOutput,
    DiscardOutput,
    FinishJob,
    JobState,
    KillAttempt,
    describe_chunks,
    tail_splits_to_ask,
)

JOB = "job-0001"
OUT = "/data/out"


def _spec(num_reduces: int = 2, **fields: Any) -> JobSpec:
    return JobSpec(
        job_code=b"", name="test", inputs=("/data/in",), output=OUT, num_reduces=num_reduces, job_id=JOB, **fields
    )


def _state(maps: int = 2, reduces: int = 2, max_attempts: int = 4) -> JobState:
    splits = [Split(f"/data/in/f{i}", 0, 100) for i in range(maps)]
    return JobState(_spec(reduces), splits, max_attempts=max_attempts)


def _start(job: JobState, kind: str, index: int, worker: str = "w1", at: float = 10.0) -> int:
    attempt = job.assign(kind, index, worker)
    job.on_started(kind, index, attempt.attempt, pid=1000 + attempt.attempt, at=at)
    return attempt.attempt


def _map_done(
    job: JobState,
    index: int,
    attempt: int,
    spills: int = 1,
    at: float = 20.0,
    counters: dict[str, int] | None = None,
    user: dict[str, dict[str, int]] | None = None,
) -> list[Any]:
    counters = counters if counters is not None else {"map_input_records": 10, "map_output_records": 30}
    return job.on_map_done(index, attempt, spills, counters, user or {}, at)


def _reduce_done(
    job: JobState,
    index: int,
    attempt: int,
    at: float = 30.0,
    first_run_at: float | None = None,
    counters: dict[str, int] | None = None,
    user: dict[str, dict[str, int]] | None = None,
) -> list[Any]:
    counters = counters if counters is not None else {"reduce_input_records": 5, "reduce_output_records": 2}
    return job.on_reduce_done(index, attempt, _tmp(index, attempt), counters, user or {}, first_run_at, at)


def _tmp(index: int, attempt: int) -> str:
    return f"{OUT}/_temporary/part-{index:05d}.attempt-{attempt}"


def _committed(index: int, attempt: int, spills: int = 1) -> Broadcast:
    return Broadcast(
        "map_committed", {"job_id": JOB, "index": index, "attempt": attempt, "spills": spills, "segments": []}
    )


def _map_failed(index: int, attempt: int) -> Broadcast:
    return Broadcast("map_failed", {"job_id": JOB, "index": index, "attempt": attempt})


def _run_all_maps(job: JobState) -> None:
    for index in range(len(job.maps)):
        _map_done(job, index, _start(job, "map", index))


# -- spec and construction -----------------------------------------------------------------------------------


def test_job_spec_accepts_empty_job_code_and_validates_the_rest() -> None:
    assert _spec().job_code == b""
    with pytest.raises(ValueError, match="at least one reducer"):
        _spec(num_reduces=0)
    with pytest.raises(ValueError, match="mode must be one of"):
        _spec(mode="eager")
    with pytest.raises(ValueError, match="input format"):
        _spec(input_format="xml")
    with pytest.raises(ValueError, match="must be positive"):
        _spec(spill_records=0)


def test_new_job_has_every_task_pending() -> None:
    job = _state(maps=3, reduces=2)
    assert [t.index for t in job.pending("map")] == [0, 1, 2]
    assert [t.index for t in job.pending("reduce")] == [0, 1]
    assert job.state == "running"
    assert job.counters == dict.fromkeys(BUILTIN_COUNTERS, 0)


def test_assigned_and_running_attempts_are_not_pending() -> None:
    job = _state(maps=2)
    attempt = job.assign("map", 0, "w1")
    assert (attempt.kind, attempt.index, attempt.attempt, attempt.status) == ("map", 0, 0, "assigned")
    assert [t.index for t in job.pending("map")] == [1]
    job.on_started("map", 0, 0, pid=42, at=5.0)
    record = job.attempt("map", 0, 0)
    assert (record.pid, record.start, record.status) == (42, 5.0, "running")
    assert [t.index for t in job.pending("map")] == [1]


# -- maps ----------------------------------------------------------------------------------------------------


def test_map_done_commits_and_broadcasts() -> None:
    job = _state()
    attempt = _start(job, "map", 0)
    actions = _map_done(job, 0, attempt, spills=3, at=21.0)
    assert actions == [_committed(0, 0, spills=3)]
    task = job.maps[0]
    assert (task.committed, task.fraction, task.records) == (0, 1.0, 10)
    assert job.attempt("map", 0, 0).status == "succeeded"
    assert job.attempt("map", 0, 0).end == 21.0
    assert job.map_spills == {0: (0, 3, [])}
    assert job.last_map_commit_at == 21.0
    assert job.counters["map_output_records"] == 30
    assert job.state == "running"  # maps alone never finish the job
    assert [t.index for t in job.pending("map")] == [1]


def test_second_attempt_of_a_committed_map_is_superseded() -> None:
    job = _state()
    first = _start(job, "map", 0, worker="w1")
    second = _start(job, "map", 0, worker="w2")
    from hop.scheduler import KillAttempt

    assert _map_done(job, 0, second, spills=2, at=20.0) == [
        _committed(0, 1, spills=2),
        KillAttempt("w1", "map", 0, 0),
        _map_failed(0, 0),
    ]
    assert _map_done(job, 0, first, spills=5, at=25.0) == [_map_failed(0, 0)]  # a late report changes nothing
    assert job.attempt("map", 0, 0).status == "killed"
    assert job.attempt("map", 0, 0).end == 20.0
    assert job.maps[0].committed == 1
    assert job.map_spills == {0: (1, 2, [])}
    assert job.counters["map_output_records"] == 30  # counted once
    assert job.last_map_commit_at == 20.0


def test_map_progress_only_until_committed() -> None:
    job = _state()
    attempt = _start(job, "map", 0)
    job.on_progress("map", 0, attempt, 0.5, 4)
    assert (job.maps[0].fraction, job.maps[0].records) == (0.5, 4)
    _map_done(job, 0, attempt)
    job.on_progress("map", 0, attempt, 0.7, 7)
    assert (job.maps[0].fraction, job.maps[0].records) == (1.0, 10)
    progress = job.progress()
    assert (progress["maps_done"], progress["maps_total"], progress["map_fraction"]) == (1, 2, 0.5)


def test_task_status_keeps_each_tasks_latest_from_live_attempts() -> None:
    """``hop status`` shows the running tasks' latest message; a client that has them up to a number gets those sent
    since, an ended task's last words included; an attempt no longer live is not heard."""
    job = _state()
    first = _start(job, "map", 0)
    job.on_task_status("map", 0, first, "one")
    job.on_task_status("map", 0, first, "two")
    other = _start(job, "map", 1)
    job.on_task_status("map", 1, other, "reading")
    assert [(e["index"], e["message"], e["seq"]) for e in job.task_statuses()] == [(0, "two", 2), (1, "reading", 3)]
    _map_done(job, 0, first)
    job.on_task_status("map", 0, first, "late")  # (no longer live)
    assert [e["message"] for e in job.task_statuses()] == ["reading"]
    assert [e["message"] for e in job.task_statuses(after=1)] == ["two", "reading"]
    assert job.task_statuses(after=3) == []


def test_task_status_log_gives_a_client_every_message_since_its_last_even_two_of_one_task() -> None:
    """A client that has the messages up to a number gets every one sent since, not each task's latest alone: an
    attempt's last word (flushed as it ends) came often within a poll of the one before it, which was then never
    said. Numbers are drawn from the ``status_numbers`` given (the coordinator's, shared by a pipeline's steps)."""
    numbers = iter(range(100, 200))
    job = JobState(_spec(2), [Split("/data/in/f0", 0, 100)], status_numbers=numbers)
    attempt = _start(job, "map", 0)
    job.on_task_status("map", 0, attempt, "read 1000 lines")
    job.on_task_status("map", 0, attempt, "mapper_final: done")
    said = [(e["job_id"], e["message"], e["seq"]) for e in job.task_statuses(after=0)]
    assert said == [(JOB, "read 1000 lines", 100), (JOB, "mapper_final: done", 101)]
    assert [e["message"] for e in job.task_statuses(after=100)] == ["mapper_final: done"]


def test_a_failed_attempts_last_status_is_kept_in_hop_status_and_its_report() -> None:
    """What a failed attempt last said is what a user debugging it wants: ``hop status`` of the running job lists it
    (``failed``) beside its retry's, and the job's report gives each attempt's last message."""
    job = _state(maps=1, max_attempts=4)
    first = _start(job, "map", 0)
    job.on_task_status("map", 0, first, "parsing record 17")
    job.on_task_failed("map", 0, first, "its process died", None, True, 11.0)
    retry = _start(job, "map", 0)
    job.on_task_status("map", 0, retry, "parsing record 3")
    listed = [(e["attempt"], e["message"], e.get("failed", False)) for e in job.task_statuses()]
    assert listed == [(first, "parsing record 17", True), (retry, "parsing record 3", False)]
    reported = {a["attempt"]: a.get("status_message") for a in job.report()["attempts"] if a["kind"] == "map"}
    assert reported == {first: "parsing record 17", retry: "parsing record 3"}
    _map_done(job, 0, retry)
    assert job.task_statuses() == [], "a done task's messages are not a running one's"


# -- reduces -------------------------------------------------------------------------------------------------


def test_reduce_done_commits_output_and_the_last_one_finishes_the_job() -> None:
    job = _state(maps=2, reduces=2)
    _run_all_maps(job)
    r0 = _start(job, "reduce", 0)
    r1 = _start(job, "reduce", 1)
    assert _reduce_done(job, 1, r1) == [CommitOutput(_tmp(1, 0), f"{OUT}/part-00001")]
    assert job.state == "running" and job.finished_at is None
    assert _reduce_done(job, 0, r0) == [CommitOutput(_tmp(0, 0), f"{OUT}/part-00000"), FinishJob("succeeded")]
    assert job.state == "succeeded"
    assert job.finished_at is not None
    assert job.error is None
    assert job.pending("map") == [] and job.pending("reduce") == []


def test_second_reduce_attempt_output_is_discarded() -> None:
    job = _state(maps=1, reduces=1)
    _run_all_maps(job)
    first = _start(job, "reduce", 0)
    second = _start(job, "reduce", 0)
    assert _reduce_done(job, 0, second)[0] == CommitOutput(_tmp(0, 1), f"{OUT}/part-00000")
    assert _reduce_done(job, 0, first) == [DiscardOutput(_tmp(0, 0))]
    assert job.attempt("reduce", 0, 0).status == "superseded"
    assert job.counters["reduce_output_records"] == 2


def test_first_shuffle_is_the_earliest_report() -> None:
    job = _state(maps=1, reduces=2)
    _run_all_maps(job)
    job.on_first_run(50.0)
    job.on_first_run(60.0)
    assert job.first_shuffle_at == 50.0
    _reduce_done(job, 0, _start(job, "reduce", 0), first_run_at=40.0)
    assert job.first_shuffle_at == 40.0
    _reduce_done(job, 1, _start(job, "reduce", 1), first_run_at=None)
    assert job.first_shuffle_at == 40.0


def test_last_reduce_input_is_the_latest_committed_attempts() -> None:
    job = _state(maps=1, reduces=2)
    _run_all_maps(job)
    for index, complete in ((0, 35.0), (1, 32.0)):
        attempt = _start(job, "reduce", index)
        job.on_reduce_done(index, attempt, _tmp(index, attempt), {}, {}, None, 40.0, input_complete_at=complete)
    assert job.last_reduce_input_at == 35.0
    assert job.attempt("reduce", 0, 0).report()["input_complete"] == 35.0
    assert job.report()["last_reduce_input_at"] == 35.0


def test_reducer_ready_is_broadcast() -> None:
    job = _state()
    attempt = _start(job, "reduce", 1)
    actions = job.on_reducer_ready(1, attempt, "tcp://127.0.0.1:5000")
    assert actions == [
        Broadcast("reducer_at", {"job_id": JOB, "index": 1, "attempt": 0, "address": "tcp://127.0.0.1:5000"})
    ]
    assert job.reducer_addresses == {1: (0, "tcp://127.0.0.1:5000")}


@pytest.mark.parametrize("ended", ["failed", "killed"])
def test_the_late_words_of_a_reduce_attempt_that_ended_change_nothing(ended: str) -> None:
    """A reduce attempt's ``reducer_ready`` or ``reduce_done`` that arrives after the attempt failed (its worker
    relayed its last words late) or was killed (the kill crossed the report), and after its retry announced itself:
    the partition stays the retry's. Its address was broadcast over the retry's, and its output committed while the
    retry ran on."""
    job = _state()
    first = _start(job, "reduce", 1)
    if ended == "failed":
        job.on_task_failed("reduce", 1, first, "its process died", None, True, 11.0)
    else:
        assert KillAttempt("w1", "reduce", 1, first) in job.restart("reduce", 1, first, "its slot went upstream")
    retry = _start(job, "reduce", 1, worker="w2")
    job.on_reducer_ready(1, retry, "tcp://127.0.0.1:5001")
    assert job.on_reducer_ready(1, first, "tcp://127.0.0.1:5000") == []
    assert job.reducer_addresses == {1: (retry, "tcp://127.0.0.1:5001")}
    assert job.on_reduce_done(1, first, _tmp(1, first), {}, {}, None, 12.0) == [DiscardOutput(_tmp(1, first))]
    assert job.reduces[1].committed is None
    assert [a.status for a in job.reduces[1].attempts] == [ended, "running"]


# -- failures ------------------------------------------------------------------------------------------------


def test_user_code_failure_fails_the_job_at_once() -> None:
    job = _state()
    attempt = _start(job, "map", 1)
    error = "map at f1 byte offset 7 raised KeyError: 'x'"
    actions = job.on_task_failed("map", 1, attempt, error, "Traceback...", retryable=False, at=12.0)
    assert actions == [_map_failed(1, 0), FinishJob("failed", error)]
    assert job.state == "failed"
    assert job.error == "map at f1 byte offset 7 raised KeyError: 'x'"
    assert job.error_traceback == "Traceback..."
    record = job.attempt("map", 1, 0)
    assert (record.status, record.end, record.error) == ("failed", 12.0, job.error)
    assert job.pending("map") == [] and job.pending("reduce") == []
    assert job.fail("again") == []  # failing twice does nothing


def test_reduce_user_failure_has_no_broadcast() -> None:
    job = _state(maps=1, reduces=1)
    _run_all_maps(job)
    attempt = _start(job, "reduce", 0)
    actions = job.on_task_failed("reduce", 0, attempt, "reduce raised", None, retryable=False, at=1.0)
    assert actions == [FinishJob("failed", "reduce raised")]


def test_events_after_the_job_failed_are_superseded() -> None:
    job = _state(maps=2, reduces=1)
    m0 = _start(job, "map", 0)
    m1 = _start(job, "map", 1)
    job.on_task_failed("map", 1, m1, "boom", None, retryable=False, at=1.0)
    assert _map_done(job, 0, m0) == [_map_failed(0, 0)]
    assert job.maps[0].committed is None
    assert job.counters["map_output_records"] == 0
    r0 = _start(job, "reduce", 0)
    assert job.on_task_failed("reduce", 0, r0, "late", None, retryable=True, at=2.0) == []
    assert job.error == "boom"


def test_retryable_failure_makes_the_task_pending_until_max_attempts() -> None:
    job = _state(maps=1, max_attempts=3)
    for attempt_number in range(2):
        attempt = _start(job, "map", 0, worker=f"w{attempt_number}")
        assert attempt == attempt_number
        actions = job.on_task_failed(
            "map", 0, attempt, "task process exited with code -9", None, retryable=True, at=1.0
        )
        assert actions == [_map_failed(0, attempt)]
        assert [t.index for t in job.pending("map")] == [0]
        assert job.state == "running"
    last = _start(job, "map", 0)
    actions = job.on_task_failed("map", 0, last, "task process exited with code -9", None, retryable=True, at=2.0)
    # (a dead task process names no record: the map's input says where to look)
    reason = "task process exited with code -9 (gave up after 3 failed attempts); map-00000 read /data/in/f0[0:100]"
    assert actions == [_map_failed(0, 2), FinishJob("failed", reason)]
    assert job.state == "failed" and job.error == reason
    assert [a.status for a in job.maps[0].attempts] == ["failed", "failed", "failed"]


def test_retry_then_success() -> None:
    job = _state(maps=1, reduces=1, max_attempts=2)
    first = _start(job, "map", 0)
    job.on_task_failed("map", 0, first, "crash", None, retryable=True, at=1.0)
    second = _start(job, "map", 0, worker="w2")
    assert _map_done(job, 0, second) == [_committed(0, 1)]
    assert job.pending("map") == []
    attempt = _start(job, "reduce", 0)
    job.on_task_failed("reduce", 0, attempt, "crash", None, retryable=True, at=1.0)
    assert [t.index for t in job.pending("reduce")] == [0]
    actions = _reduce_done(job, 0, _start(job, "reduce", 0))
    assert actions == [CommitOutput(_tmp(0, 1), f"{OUT}/part-00000"), FinishJob("succeeded")]


def test_failure_of_a_spare_attempt_after_commit_does_not_fail_the_job() -> None:
    job = _state(maps=1)
    first = _start(job, "map", 0)
    second = _start(job, "map", 0)
    assert _map_failed(0, 1) in _map_done(job, 0, first)  # the spare is killed when the first commits
    actions = job.on_task_failed("map", 0, second, "boom", None, retryable=False, at=3.0)
    assert actions == []  # its late failure report changes nothing
    assert job.state == "running"
    assert job.maps[0].committed == 0


def test_worker_lost_retries_its_running_attempts() -> None:
    job = _state(maps=2, reduces=1)
    on_lost = _start(job, "map", 0, worker="w1")
    _start(job, "map", 1, worker="w2")
    reduce_attempt = _start(job, "reduce", 0, worker="w1")
    actions = job.on_worker_lost("w1", at=9.0)
    assert actions == [_map_failed(0, on_lost)]
    assert job.attempt("map", 0, 0).error == "worker w1 was lost"
    assert job.attempt("reduce", 0, reduce_attempt).status == "lost"
    assert [t.index for t in job.pending("map")] == [0]
    assert [t.index for t in job.pending("reduce")] == [0]
    assert job.state == "running"


def _stream_state(sources: int = 1, max_attempts: int = 2) -> JobState:
    """A continuous job's state (``options["stream"]``) with one map per source and one reducer."""
    stream = {"sources": [f"replay:/data/s{i}" for i in range(sources)]}
    return JobState(_spec(1, options={"stream": stream}), [[] for _ in range(sources)], max_attempts=max_attempts)


@pytest.mark.parametrize("continuous", [False, True], ids=["batch", "continuous"])
def test_attempts_lost_with_their_worker_never_give_a_task_up_and_crashes_still_do(continuous: bool) -> None:
    """Hadoop counts an attempt killed with its node apart from failed ones: a worker that stops (``hop worker``
    ended by Ctrl-C) or is lost is not the task's fault. Every such attempt counted against ``max_attempts``, so a
    worker stopped twice (here) gave a continuous job's source up for good, or failed a batch job. Now only
    attempts whose task process died count, and those still give the task up."""
    job = _stream_state(max_attempts=2) if continuous else _state(maps=1, reduces=1, max_attempts=2)
    for number in range(5):
        _start(job, "map", 0, worker="w1")
        job.on_worker_lost("w1", at=9.0, left=number % 2 == 0)
        assert job.state == "running" and not job.sources_gone
        (row, _) = job.task_table()
        assert row["state"] == "pending" and row["last_attempt"] == "lost", row
    assert [a.error for a in job.maps[0].attempts[:2]] == ["worker w1 stopped", "worker w1 was lost"]
    crash = "task process exited with code -9"
    job.on_task_failed("map", 0, _start(job, "map", 0, worker="w2"), crash, None, retryable=True, at=10.0)
    (row, _) = job.task_table()
    assert job.state == "running" and (row["state"], row["last_attempt"], row["error"]) == ("pending", "failed", crash)
    job.on_task_failed("map", 0, _start(job, "map", 0, worker="w2"), crash, None, retryable=True, at=11.0)
    (row, _) = job.task_table()
    if continuous:
        assert job.state == "running" and row["state"] == "given_up"
        (gone,) = job.gone_sources()
        assert (gone["attempts"], gone["error"]) == (2, crash), "its failed attempts, not the lost ones"
    else:
        given_up = f"{crash} (gave up after 2 failed attempts); map-00000 read /data/in/f0[0:100]"
        assert job.state == "failed" and job.error == given_up
        assert row["state"] == "failed"


@pytest.mark.parametrize("kind", ["map", "reduce"])
def test_a_batch_task_running_on_its_worker_each_time_one_died_fails_its_job_after_twice_max_attempts(
    kind: str,
) -> None:
    """A task whose code ends its worker was lost with each worker it ran on, which counted for nothing: on a cluster
    that restarts its workers it ran for ever. Deaths under a task (not workers that said they stop, nor a map's
    kept spills lost with another worker) now count apart from failures, up to twice ``max_attempts``."""
    job = _state(maps=1, reduces=1, max_attempts=2)
    for worker in ("w1", "w2", "w1"):
        _start(job, kind, 0, worker=worker)
        job.on_worker_lost(worker, at=9.0)
        _start(job, kind, 0, worker="w3")
        job.on_worker_lost("w3", at=9.5, left=True)  # stopped: not counted
    assert job.state == "running" and job.tasks(kind)[0].deaths == 3
    _start(job, kind, 0, worker="w2")
    assert job.on_worker_lost("w2", at=10.0)[-1] == FinishJob("failed", job.error)
    reads = "/data/in/f0[0:100]" if kind == "map" else "partition 0"
    assert job.error == (
        f"{kind}-00000 ({reads}) was running each of the 4 times its worker died (w1 2 times, w2 2 times): check "
        "whether its code ends the process it runs under (a signal to its parent, memory the system kills for); "
        "gave up after 4 attempts lost with their worker (2 x --max-attempts 2)"
    )


def test_a_job_without_live_workers_says_what_it_lost_and_blames_no_task_sent_to_a_worker_already_silent() -> None:
    """Two workers killed from outside: the first found lost had its map sent to the second, dead already (silent,
    not yet found lost), where it never started. The job's error named that map as having run on each worker as it
    was lost and asked to check whether its code ends its process. It says which workers were lost and how, how many
    times, and what was running on each, and blames nothing."""
    job = _state(maps=2, reduces=1)
    _start(job, "map", 0, worker="w1")
    _start(job, "reduce", 0, worker="w1")
    _start(job, "map", 1, worker="w2")
    job.on_worker_lost("w1", at=9.0)
    job.assign("map", 0, "w2", silent=True)  # (w2 silent for seconds: killed too)
    job.on_worker_lost("w2", at=10.0)
    assert job.no_live_workers("w2") == (
        "no live workers: the last one (w2) was lost; the job lost workers 2 times as it ran: w1, w2 went silent "
        "(killed or crashed: the coordinator cannot tell by whom); running on them as they were lost: map-00000 (on "
        "w1), map-00001 (on w2), reduce-00000 (on w1)"
    )
    assert job.maps[0].deaths == 1, "the attempt sent to a silent worker did not die with it"


def test_a_job_without_live_workers_names_the_one_task_that_ran_on_each_as_it_was_lost() -> None:
    """A task that started on each worker as it went silent is named, with what to check if nothing outside the
    job ended them; a worker that said it stops is counted apart, and not as one a task could have ended."""
    job = _state(maps=2, reduces=1)
    _start(job, "map", 0, worker="w1")
    _start(job, "map", 1, worker="w3")
    job.on_worker_lost("w3", at=8.0, left=True)
    job.on_worker_lost("w1", at=9.0)
    _start(job, "map", 0, worker="w2")
    job.on_worker_lost("w2", at=10.0)
    assert job.no_live_workers("w2") == (
        "no live workers: the last one (w2) was lost; the job lost workers 3 times as it ran: w1, w2 went silent "
        "(killed or crashed: the coordinator cannot tell by whom); w3 stopped; running on them as they were lost: "
        "map-00000 (on w1, w2); map-00000 ran on each of those workers as it was lost: if nothing outside the job "
        "ended them, check whether its code ends the process it runs under (a signal to its parent, memory the "
        "system kills for)"
    )


def test_a_continuous_jobs_source_outlives_any_number_of_worker_deaths() -> None:
    """A source runs until its query stops, on whatever workers come and go: deaths under it never give it up."""
    job = _stream_state(max_attempts=1)
    for _ in range(5):
        _start(job, "map", 0, worker="w1")
        job.on_worker_lost("w1", at=9.0)
    assert job.state == "running" and not job.sources_gone and job.maps[0].deaths == 5


def test_a_maps_input_is_named_as_byte_ranges_adjacent_chunks_joined() -> None:
    chunks = [Chunk(i, Split("/d/a.txt", 10 * i, 10), 10) for i in range(3)] + [Chunk(3, Split("/d/b.gz", 0, -1), 5)]
    assert describe_chunks(chunks) == "/d/a.txt[0:30], /d/b.gz"
    chunks += [Chunk(4 + i, Split(f"/d/{i}.txt", 0, 4), 4) for i in range(3)]
    assert describe_chunks(chunks) == "/d/a.txt[0:30], /d/b.gz, /d/0.txt[0:4] and 2 more"
    assert describe_chunks(Split("/d/a.txt", 5, 7)) == "/d/a.txt[5:12]"


def test_attempts_the_coordinator_killed_do_not_count_against_max_attempts() -> None:
    """``restart`` ends an attempt "without counting it as a failure" (its pipeline input went away, its slot was
    needed upstream), but every attempt counted: a map restarted twice with ``max_attempts`` 2 then failed the job
    on its first crash."""
    job = _state(maps=1, reduces=1, max_attempts=2)
    for _ in range(2):
        job.restart("map", 0, _start(job, "map", 0), "its upstream reduce attempt was lost")
    job.on_task_failed("map", 0, _start(job, "map", 0), "crash", None, retryable=True, at=1.0)
    assert job.state == "running" and [t.index for t in job.pending("map")] == [0]
    assert [a.status for a in job.maps[0].attempts] == ["killed", "killed", "failed"]


def test_the_task_table_of_an_ended_job_says_failed_only_for_a_task_whose_attempt_failed() -> None:
    job = _state(maps=2, reduces=1)
    _start(job, "map", 1)
    job.on_task_failed("map", 0, _start(job, "map", 0), "boom", None, retryable=False, at=1.0)
    job.end_live_attempts("the job failed")
    states = [(row["kind"], row["index"], row["state"]) for row in job.task_table()]
    assert states == [("map", 0, "failed"), ("map", 1, "killed"), ("reduce", 0, "pending")]


def test_a_start_report_arriving_after_the_attempt_was_settled_does_not_revive_it() -> None:
    """The worker's ``task_started`` can be on its way while the attempt is settled (here: lost with its worker);
    the attempt must stay settled and its task pending, or the task would wait forever for a report."""
    job = _state(maps=1, reduces=1)
    attempt = job.assign("map", 0, "w1").attempt
    job.on_worker_lost("w1", at=9.0)
    job.on_started("map", 0, attempt, pid=77, at=9.5)
    job.on_progress("map", 0, attempt, fraction=0.5, records=10)
    assert job.attempt("map", 0, attempt).status == "lost"
    assert [t.index for t in job.pending("map")] == [0]
    assert job.maps[0].fraction == 0.0, "progress of a settled attempt does not count"


def test_a_failed_commit_of_the_last_output_fails_the_job_it_had_completed() -> None:
    job = _state(maps=1, reduces=1)
    _run_all_maps(job)
    actions = _reduce_done(job, 0, _start(job, "reduce", 0))
    assert actions == [CommitOutput(_tmp(0, 0), f"{OUT}/part-00000"), FinishJob("succeeded")]
    assert job.state == "succeeded"  # as far as the reports go; the coordinator commits, then finishes
    assert job.fail("cannot move it", over_success=True) == [FinishJob("failed", "cannot move it")]
    assert (job.state, job.error) == ("failed", "cannot move it")
    assert job.fail("again", over_success=True) == [], "a failed job fails once"


def test_worker_lost_with_committed_map_output_reruns_the_map() -> None:
    job = _state(maps=2, reduces=1)
    _map_done(job, 0, _start(job, "map", 0, worker="w1"))
    _start(job, "map", 1, worker="w2")
    before = job.counters["map_output_records"]
    actions = job.on_worker_lost("w1", at=9.0)
    assert [(a.kind, a.fields["index"], a.fields["attempt"]) for a in actions] == [("map_lost", 0, 0)]
    assert job.state == "running"
    assert job.maps[0].committed is None and job.attempt("map", 0, 0).status == "lost"
    assert [t.index for t in job.pending("map")] == [0]
    assert job.failed_workers("map", 0) == {"w1"}
    assert job.counters["map_output_records"] < before, "a lost attempt's counters no longer count"
    rerun = _start(job, "map", 0, worker="w2")
    assert rerun == 1
    assert _committed(0, rerun) in _map_done(job, 0, rerun)
    assert job.counters["map_output_records"] == before, "counted once, from the rerun"


def test_late_done_of_a_failed_map_attempt_does_not_commit() -> None:
    """A map attempt reported failed (e.g. its worker was declared lost) was announced as ``map_failed``:
    workers forgot its spills and reducers dropped its runs. If its ``map_done`` still arrives, committing it
    would make every reducer wait for runs that will never be sent again."""
    job = _state(maps=1, reduces=1)
    attempt = _start(job, "map", 0, worker="w1")
    assert job.on_worker_lost("w1", at=9.0) == [_map_failed(0, attempt)]
    actions = _map_done(job, 0, attempt, at=10.0)
    assert _committed(0, attempt) not in actions
    assert job.maps[0].committed is None
    assert job.attempt("map", 0, attempt).status == "lost"
    assert [t.index for t in job.pending("map")] == [0]
    assert job.counters["map_output_records"] == 0


# -- counters ------------------------------------------------------------------------------------------------


def test_counters_are_summed_over_committed_attempts_only() -> None:
    job = _state(maps=2, reduces=1)
    a = _start(job, "map", 0)
    b = _start(job, "map", 0)
    _map_done(
        job, 0, a, counters={"map_input_records": 3, "map_output_records": 7, "custom": 1}, user={"words": {"long": 2}}
    )
    _map_done(
        job,
        0,
        b,
        counters={"map_input_records": 100, "map_output_records": 100, "custom": 100},
        user={"words": {"long": 100}},
    )
    failed = _start(job, "map", 1)
    job.on_task_failed("map", 1, failed, "crash", None, retryable=True, at=1.0)
    _map_done(
        job,
        1,
        _start(job, "map", 1),
        counters={"map_input_records": 4, "map_output_records": 5},
        user={"words": {"long": 1, "short": 9}, "other": {"x": 1}},
    )
    r = _start(job, "reduce", 0)
    _reduce_done(
        job, 0, r, counters={"reduce_input_records": 12, "reduce_output_records": 2}, user={"words": {"long": 10}}
    )
    assert job.counters["map_input_records"] == 7
    assert job.counters["map_output_records"] == 12
    assert job.counters["custom"] == 1
    assert job.counters["reduce_input_records"] == 12
    assert job.user_counters == {"words": {"long": 13, "short": 9}, "other": {"x": 1}}
    assert job.progress()["input_records"] == 7
    assert job.report()["counters"] == {**job.counters, "user": job.user_counters}


# -- report --------------------------------------------------------------------------------------------------


def test_report_fields() -> None:
    job = _state(maps=1, reduces=1)
    m = _start(job, "map", 0, worker="w1", at=11.0)
    _map_done(job, 0, m, at=12.0)
    bad = _start(job, "reduce", 0, worker="w2", at=13.0)
    job.on_task_failed("reduce", 0, bad, "task process exited with code 1", None, retryable=True, at=14.0)
    good = _start(job, "reduce", 0, worker="w1", at=15.0)
    _reduce_done(job, 0, good, at=16.0, first_run_at=12.5)
    report = job.report()
    for field in ("job_id", "status", "mode", "start", "end", "attempts", "counters", "first_shuffle_at"):
        assert field in report, field
    assert report["job_id"] == JOB
    assert report["status"] == "succeeded"
    assert report["mode"] == "pipelined"
    assert report["start"] == job.submitted_at
    assert job.finished_at is not None and report["end"] == job.finished_at
    assert report["first_shuffle_at"] == 12.5
    assert report["num_maps"] == 1 and report["num_reduces"] == 1
    assert report["counters"]["user"] == {}
    attempts = report["attempts"]
    fields = {"task_id", "attempt", "kind", "worker", "pid", "start", "end", "status"}
    assert all(fields <= set(a) for a in attempts)
    assert [
        (a["task_id"], a["attempt"], a["kind"], a["worker"], a["start"], a["end"], a["status"]) for a in attempts
    ] == [
        ("map-00000", 0, "map", "w1", 11.0, 12.0, "succeeded"),
        ("reduce-00000", 0, "reduce", "w2", 13.0, 14.0, "failed"),
        ("reduce-00000", 1, "reduce", "w1", 15.0, 16.0, "succeeded"),
    ]
    assert [a["pid"] for a in attempts] == [1000, 1000, 1001]
    assert attempts[1]["error"] == "task process exited with code 1"
    assert "error" not in attempts[0]


def test_report_of_a_failed_job() -> None:
    job = _state(maps=1, reduces=1)
    attempt = _start(job, "map", 0)
    job.on_task_failed("map", 0, attempt, "map raised ValueError", "tb", retryable=False, at=1.0)
    report = job.report()
    assert (report["status"], report["error"]) == ("failed", "map raised ValueError")
    assert report["end"] is not None
    assert report["first_shuffle_at"] is None


def test_speculation_picks_stragglers_and_the_first_finisher_kills_the_other() -> None:
    from hop.scheduler import KillAttempt

    job = _state(maps=3, reduces=1)
    _map_done(job, 0, _start(job, "map", 0, worker="w1", at=0.0), at=2.0)
    _map_done(job, 1, _start(job, "map", 1, worker="w2", at=0.0), at=2.0)
    _start(job, "map", 2, worker="w3", at=0.0)
    job.on_progress("map", 2, 0, fraction=0.1, records=5)
    assert job.speculation_candidates(now=3.0) == [], "not yet past twice the median duration"
    assert [t.index for t in job.speculation_candidates(now=4.5)] == [2]
    backup = _start(job, "map", 2, worker="w1", at=4.5)
    assert job.speculation_candidates(now=9.0) == [], "one backup per task"
    actions = _map_done(job, 2, backup, at=5.0)
    assert KillAttempt("w3", "map", 2, 0) in actions
    assert _map_failed(2, 0) in actions
    assert job.attempt("map", 2, 0).status == "killed"
    assert _map_done(job, 2, 0, at=6.0) == [_map_failed(2, 0)]


def test_elapsed_stops_when_the_job_ends() -> None:
    """``hop status`` of a finished job showed its elapsed time growing on every call."""
    import time

    job = _state(1, 1)
    job.fail("cancelled")
    first = job.progress()["elapsed"]
    time.sleep(0.05)
    assert job.progress()["elapsed"] == first


def test_map_seconds_end_at_the_last_map_commit() -> None:
    """The maps' records/s of the progress line divides by ``map_seconds``: up to now while maps run, then fixed at
    the last map commit (a job done before the first report's interval ended on "0 records/s")."""
    job = _state(maps=2, reduces=1)
    job.submitted_at = 100.0
    _map_done(job, 0, _start(job, "map", 0), at=101.0)
    assert job.progress()["map_seconds"] > 1.0, "a map still runs: up to now"
    _map_done(job, 1, _start(job, "map", 1), at=102.5)
    assert job.progress()["map_seconds"] == 2.5


def test_progress_line_rate_is_the_maps_rate_once_they_are_done(capsys: pytest.CaptureFixture[str]) -> None:
    from hop.runner import ProgressDisplay

    display = ProgressDisplay(enabled=True, address="tcp://h:5555")
    base = {"map_fraction": 0.0, "reduce_fraction": 0.0, "maps_total": 2, "reduces_total": 1, "reduces_done": 0}
    display.update({**base, "state": "running", "maps_done": 0, "input_records": 0, "map_seconds": 0.1, "elapsed": 0.1})
    done = {**base, "map_fraction": 1.0, "reduce_fraction": 1.0, "maps_done": 2, "reduces_done": 1}
    display.update({**done, "state": "succeeded", "input_records": 5000, "map_seconds": 2.5, "elapsed": 3.0})
    last = capsys.readouterr().err.splitlines()[-1]
    assert "(2/2 maps, 2,000 records/s)" in last, last


def test_interrupting_a_running_job_finishes_it_as_interrupted_once() -> None:
    """A second Ctrl-C ends a continuous job without draining: the job is ``interrupted`` at once (its report is
    written by the ``FinishJob``), its live attempts are ended by it; a job that has ended already is left as it is."""
    job = _state(1, 1)
    _start(job, "map", 0)
    assert job.interrupt("interrupted by Ctrl-C") == [FinishJob("interrupted", "interrupted by Ctrl-C")]
    assert (job.state, job.error) == ("interrupted", "interrupted by Ctrl-C") and job.finished_at is not None
    assert job.report()["status"] == "interrupted"
    assert job.interrupt("again") == [] and job.error == "interrupted by Ctrl-C"
    ended = _state(1, 1)
    ended.fail("cancelled")
    assert ended.interrupt("late") == [] and ended.state == "failed"


def test_a_map_reading_a_pipe_shows_how_much_of_its_partition_it_took() -> None:
    """A pipe-fed map's input has no size while the upstream reduce writes it: its progress (job status, web view's
    job and task lists) stayed 0% until it committed. It is its share of what it got, weighed by the upstream
    reduce's progress; then the bytes it took of the size the upstream reports once its output is whole; then, read
    from the committed file, the fraction it reports of that file."""
    upstream = _state(maps=1, reduces=2)
    job = JobState(_spec(2), [[], []])
    job.upstream = upstream
    feeding = _start(upstream, "reduce", 0)
    reader = _start(job, "map", 0)
    upstream.on_progress("reduce", 0, feeding, fraction=0.5, records=0)
    job.on_progress("map", 0, reader, fraction=0.8, records=100, taken=800)  # 800 of the 1000 bytes it got
    assert job.map_task_fraction(job.maps[0]) == pytest.approx(0.4)
    upstream.on_progress("reduce", 0, feeding, fraction=0.5, records=0, written=4000)
    assert job.progress()["map_fraction"] == pytest.approx(0.2 / 2), "800 of 4000 bytes; map 1 not started"
    assert job.task_table()[0]["fraction"] == pytest.approx(0.2)
    assert job.input_fraction() == pytest.approx(0.1)
    job.on_progress("map", 0, reader, fraction=0.6, records=300, taken=2400, from_file=True)
    assert job.map_task_fraction(job.maps[0]) == pytest.approx(0.6)
    other = _start(job, "map", 1)
    job.on_progress("map", 1, other, fraction=0.5, records=5, taken=50)
    assert job.map_task_fraction(job.maps[1]) == 0.0, "its upstream reduce reported no progress yet"


def _chunked_state(files: int = 3, speculative: bool = False) -> JobState:
    """Two maps: map 0 reads one file, map 1 the other ``files - 1`` (chunks, as ``hop.planning`` makes them)."""
    chunks = [Chunk(i, Split(f"/data/in/f{i}", 0, 1000), 1000) for i in range(files)]
    options = {"speculative": True} if speculative else {}
    return JobState(_spec(2, options=options), [[chunks[0]], chunks[1:]])


def test_tail_splitting_asks_the_map_furthest_from_its_end_and_makes_a_map_of_the_rest() -> None:
    job = _chunked_state()
    for index in (0, 1):
        _start(job, "map", index, worker=f"w{index}", at=10.0)
    job.on_progress("map", 0, 0, 0.5, 100)
    job.on_progress("map", 1, 0, 0.2, 100)
    # At 12 s: map 0 has 2 s to go, map 1 8 s. Only as many as there are idle slots are asked, the longest first.
    assert [a.index for a in job.tail_split_candidates(12.0, 1)] == [1]
    assert [a.index for a in job.tail_split_candidates(12.0, 5)] == [1, 0]
    assert job.tail_split_candidates(12.0, 0) == []
    assert [a.index for a in job.tail_split_candidates(10.9, 5)] == [1]  # map 0 is 0.9 s from its end: not worth it
    job.on_split_asked(1, 0)
    assert [a.index for a in job.tail_split_candidates(12.0, 5)] == [0]  # (being asked: not again)
    # Map 1 read its first chunk to byte 400 when asked: it keeps up to 700 and hands over 700-1000 and file 2.
    actions = job.on_map_split(1, 0, chunk=0, cut=700, at=12.1)
    assert actions == [Broadcast("maps_added", {"job_id": JOB, "num_maps": 3})]
    assert [(c.id, c.split.start, c.split.length) for c in job.splits[1]] == [(1, 0, 700)]  # type: ignore[union-attr]
    assert [(c.split.path, c.split.start, c.split.length) for c in job.splits[2]] == [  # type: ignore[union-attr]
        ("/data/in/f1", 700, 300),
        ("/data/in/f2", 0, 1000),
    ]
    assert job.splits[2][0].id == 3 and job.tail_splits == 1  # type: ignore[index]
    assert [t.index for t in job.pending("map")] == [2]
    assert job.tail_split_candidates(12.2, 5) == []  # a map waits for a slot: no splitting meanwhile
    assert job.report()["num_maps"] == 3 and job.report()["tail_splits"] == 1


def test_a_declined_or_stale_split_request_and_one_answered_by_a_dead_attempt() -> None:
    job = _chunked_state()
    for index in (0, 1):
        _start(job, "map", index, at=10.0)
        job.on_progress("map", index, 0, 0.2, 100)
    job.on_split_asked(1, 0)
    assert job.on_map_split(1, 0, chunk=None, cut=None, at=12.0) == []  # between chunks, or nothing left
    assert [a.index for a in job.tail_split_candidates(12.5, 5)] == [0]  # asked again only a while later
    assert {a.index for a in job.tail_split_candidates(13.5, 5)} == {0, 1}
    # Asked, then the attempt failed before answering: the request is dropped, and the late answer with it (the
    # retry reads the map's whole input, so the rest must not become a map too).
    job.on_split_asked(1, 0)
    job.on_task_failed("map", 1, 0, "killed", None, retryable=True, at=13.9)
    assert 1 not in {a.index for a in job.tail_split_candidates(14.0, 5)} and job.split_asked == {}
    assert job.on_map_split(1, 0, chunk=0, cut=500, at=14.0) == []
    assert len(job.maps) == 2 and [c.split.length for c in job.splits[1]] == [1000, 1000]  # type: ignore[union-attr]


def test_a_map_declining_for_good_is_not_asked_again() -> None:
    """A map with ``mapper_init``/``mapper_final`` declines every split (``never``): asked again a second later, as
    one between chunks is, it would be asked and decline once a second for as long as it runs."""
    job = _chunked_state()
    for index in (0, 1):
        _start(job, "map", index, at=10.0)
        job.on_progress("map", index, 0, 0.2, 100)
    job.on_split_asked(1, 0)
    assert job.on_map_split(1, 0, chunk=None, cut=None, at=12.0, never=True) == []
    assert [a.index for a in job.tail_split_candidates(60.0, 5)] == [0]


def test_no_speculative_backup_of_a_map_asked_to_split_and_no_splitting_of_online_or_stream_jobs() -> None:
    job = _chunked_state(speculative=True)
    for index in (0, 1):
        _start(job, "map", index, at=10.0)
    _map_done(job, 0, 0, at=11.0)
    job.on_progress("map", 1, 0, 0.1, 100)
    assert [t.index for t in job.speculation_candidates(40.0)] == [1]
    job.on_split_asked(1, 0)
    assert job.speculation_candidates(40.0) == []
    for options in ({"online": True}, {"tail_split": False}):
        other = JobState(_spec(2, options=options), [[Chunk(0, Split("/data/in/f", 0, 1000), 1000)]])
        _start(other, "map", 0, at=10.0)
        other.on_progress("map", 0, 0, 0.1, 100)
        assert not other.splits_tails and other.tail_split_candidates(20.0, 1) == []


def test_a_map_run_again_because_its_committed_output_was_lost_is_never_split() -> None:
    """Reducers that hold every run of a lost committed attempt keep it and ignore the re-run: a rest split off the
    re-run would be counted twice by them (seen with workers killed at random while maps split)."""
    job = _chunked_state()
    _start(job, "map", 0, worker="w0", at=10.0)
    _start(job, "map", 1, worker="w1", at=10.0)
    _map_done(job, 0, 0, at=11.0)
    job.on_worker_lost("w0", at=12.0)
    retry = _start(job, "map", 0, worker="w2", at=12.0)
    job.on_progress("map", 0, retry, 0.1, 100)
    job.on_progress("map", 1, 0, 0.1, 100)
    assert [a.index for a in job.tail_split_candidates(20.0, 5)] == [1]


def _pipeline(maps: int = 1, **upstream_options: Any) -> tuple[JobState, JobState]:
    """A pipeline whose step 1 has ``maps`` maps, each reading a file's chunk, its map 0 started at 10 s (no progress
    yet), and whose step 2 (two maps, one per partition of step 1) has not started."""
    chunks = [[Chunk(i, Split(f"/data/in/f{i}", 0, 1000), 1000)] for i in range(maps)]
    upstream = JobState(_spec(2, options=upstream_options), chunks)
    downstream = JobState(_spec(2, options={"upstream": JOB}).with_id("job-0002"), [[], []])
    downstream.upstream = upstream
    _start(upstream, "map", 0, worker="w0", at=10.0)
    return upstream, downstream


def test_a_free_map_slot_goes_to_a_split_of_the_step_before_not_to_a_later_steps_map_that_would_wait_in_it() -> None:
    """A later step's map gets nothing before every map of the step before committed (a reduce writes once it has all
    its input). It took the slot free beside step 1's one map, to listen in it, and waited there: that map was never
    split (no slot idled), and 1 MB through a slow count then top-k took 10-11 s pipelined against 6 s with
    --blocking, which split it. Step 2's maps now wait while a map of step 1 may still be split, and step 2's maps
    waiting so do not hold back the split; they start once step 1's maps are all near their end."""
    upstream, downstream = _pipeline()
    assert not downstream.map_may_start(0, now=10.1), "step 1's map reported no progress yet: it may be split"
    upstream.on_progress("map", 0, 0, 0.1, 100)  # a tenth in its first half second: 4.5 s to go
    assert not downstream.map_may_start(0, now=10.5)
    asked = tail_splits_to_ask([upstream, downstream], free_map_slots=1, now=10.5)
    assert [(job.spec.job_id, attempt.index) for job, attempt in asked] == [(JOB, 0)]
    upstream.on_split_asked(0, 0)
    assert not downstream.map_may_start(0, now=10.6), "its answer may make a map for the slot"
    upstream.on_map_split(0, 0, chunk=0, cut=550, at=10.6)
    assert not downstream.map_may_start(0, now=10.6), "the rest waits for a slot"
    _start(upstream, "map", 1, worker="w1", at=10.6)
    upstream.on_progress("map", 1, 0, 0.2, 20)
    assert not downstream.map_may_start(0, now=10.6)
    # Both maps of step 1 are under a second from their end (not worth splitting): step 2's maps may take a slot
    # that frees, to listen before step 1's reduces write.
    upstream.on_progress("map", 0, 0, 0.9, 500)
    upstream.on_progress("map", 1, 0, 0.9, 400)
    assert downstream.map_may_start(0, now=11.0) and downstream.map_may_start(1, now=11.0)


def test_a_later_steps_map_takes_a_free_slot_at_once_when_the_step_before_splits_no_map() -> None:
    """Without tail splitting in the step before, a later step's map listens on a spare slot as soon as no map of
    that step waits for one, as before; with a map of the step before waiting, it waits."""
    for options in ({"tail_split": False}, {"online": True}):
        upstream, downstream = _pipeline(**options)
        assert downstream.map_may_start(0, now=10.1) and downstream.map_may_start(1, now=10.1)
    upstream, downstream = _pipeline(maps=2, tail_split=False)
    assert not downstream.map_may_start(0, now=10.1), "step 1's map 1 waits for a slot: it comes first"
    _start(upstream, "map", 1, worker="w1", at=10.1)
    assert downstream.map_may_start(0, now=10.1)
    upstream, downstream = _pipeline(maps=2)
    _start(upstream, "map", 1, worker="w1", at=10.1)
    for index in (0, 1):
        _map_done(upstream, index, 0, at=11.0)
    assert downstream.map_may_start(0, now=11.0), "step 1's maps are done"


def test_the_input_processed_is_never_below_what_the_latest_snapshot_held() -> None:
    """A map reports its progress every half second while each chunk's runs go to the reducers as it ends, so a
    snapshot may hold input the maps' last reports do not count yet: the web view said "62% of the input processed"
    beside "snapshot 0.600: 63% of the input seen". The job's description (``processed_fraction``) now says at
    least what the latest snapshot held; the thresholds still follow the maps' reports (``input_fraction``), and a
    pipeline's later step's snapshot, whose fraction is of its upstream's input, counts for nothing here."""
    from hop.online.tracker import SnapshotTracker

    job = _state(maps=2, reduces=1)
    job.snapshots = SnapshotTracker(1, [50, 50, 50, 50], every=0.25, started_at=0.0)
    for index in (0, 1):
        attempt = _start(job, "map", index)
        job.on_progress("map", index, attempt, 0.3, 100)
    assert job.processed_fraction() == job.input_fraction() == pytest.approx(0.3)
    snapshot = job.snapshots.due(job.input_fraction())
    assert snapshot is not None and snapshot.label == "0.250"
    job.snapshots.on_done(snapshot.seq, 0, {"chunks_seen": [0, 2], "groups": 3})  # half the input's bytes
    assert job.input_fraction() == pytest.approx(0.3)
    assert job.processed_fraction() == pytest.approx(0.5)
    job.on_progress("map", 0, 0, 0.9, 300)  # the maps' reports pass it: they are said again
    assert job.processed_fraction() == job.input_fraction() == pytest.approx(0.6)
    derived = job.snapshots.request_derived("0.900", 0.9, {"job_id": "job-0000", "input_fraction": 0.9}, "/up")
    job.snapshots.on_done(derived.seq, 0, {"chunks_seen": [0, 1, 2], "groups": 3})
    assert job.processed_fraction() == pytest.approx(0.6)
