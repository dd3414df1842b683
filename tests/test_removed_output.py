"""A job's output directory removed (or moved away) by its user while the job runs, after some of its part files were
committed: the job must fail, saying so, and never mark an incomplete output done. A reducer that started later made
``OUT/_temporary`` with all its parents, which brought ``OUT`` back; the job then committed the other parts there and
wrote ``_SUCCESS`` over an output without the parts committed before: a silent loss of data. A continuous job's
likewise: its reducers made ``OUT/windows/<label>`` with all its parents and wrote its next windows (checkpoints,
``_late`` files, the coordinator ``_window.json``) into a new ``OUT``, or into another folder given the name, and ran
on. Real ``hop run`` processes on an embedded cluster; where an order of events a real run cannot force is the
point (``OUT`` replaced right after a check), a real task or coordinator in this process."""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hop.coordinator import Coordinator
from hop.outputs import OutputGuard
from tests.conftest import (
    ROOT,
    guard_replaced_after_its_check,
    job_path,
    relay,
    submit_to_handlers,
    write_as_a_late_reduce,
)


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def _run_removing(tmp_path: Path, jobs: list[str], written: Callable[[], Path], remove: Callable[[Path], None]) -> str:
    """Run ``jobs`` (a pipeline if several) into ``tmp_path/out``, its first job ``reduces_in_turn`` with 3 reducers;
    once the first one committed its part into the folder ``written()`` names, and the others started, ``remove``
    that folder and let them go. The run's standard error, once it failed."""
    gate, source = tmp_path / "gate", tmp_path / "in.txt"
    gate.mkdir()
    source.write_text(" ".join(f"w{n}" for n in range(60)) + "\n")
    command = [sys.executable, "-m", "hop", "run", *jobs, str(source), "-o", str(tmp_path / "out")]
    environment = {**os.environ, "HOP_TEST_GATE": str(gate), "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [*command, "--workers", "1", "--reducers", "3", "--quiet"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        (gate / "go-0").touch()
        _wait_for(lambda: any(written().glob("part-*")), "a reducer committed its part")
        _wait_for(lambda: (gate / "entered-2").exists(), "the other reducers started")
        remove(written())
        (gate / "go-1").touch()
        (gate / "go-2").touch()
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 1, stderr
    return stderr


@pytest.mark.parametrize("how", ["removed", "moved", "replaced"])
def test_an_output_removed_while_its_job_runs_fails_the_job(tmp_path: Path, how: str) -> None:
    """``replaced``: moved away, and a folder of the user's made under its name, which the failed run wrote its report
    into. That folder holds a ``_temporary`` of its own (another run's): the reducers started before the replacement
    wrote their output into it, and the job's end removed it by name; both now act on the job's ``OUT`` only."""
    output, elsewhere = tmp_path / "out", tmp_path / "elsewhere"

    def replace(folder: Path) -> None:
        folder.rename(elsewhere)
        (folder / "_temporary").mkdir(parents=True)
        (folder / "_temporary" / "part-00001.attempt-0").write_text("another run's\n")
        (folder / "mine.txt").write_text("the user's\n")

    remove = {
        "removed": _remove_while_written,
        "moved": lambda folder: folder.rename(elsewhere),
        "replaced": replace,
    }[how]
    stderr = _run_removing(tmp_path, [job_path("reduces_in_turn")], lambda: output, remove)
    assert f"output directory {output} was removed or moved while the job ran" in stderr, stderr
    assert "run the job again" in stderr, stderr
    if how == "replaced":
        found = sorted(str(path.relative_to(output)) for path in output.rglob("*"))
        assert found == ["_temporary", "_temporary/part-00001.attempt-0", "mine.txt"], found
        assert (output / "_temporary" / "part-00001.attempt-0").read_text() == "another run's\n"
    else:
        assert not output.exists(), sorted(str(path.relative_to(output)) for path in output.rglob("*"))
    if how != "removed":  # what had been committed, not marked done
        assert not (elsewhere / "_SUCCESS").exists()


def test_a_pipelines_scratch_folder_removed_while_it_runs_fails_it_naming_it(tmp_path: Path) -> None:
    """The first step's output, in the run's hidden scratch folder beside ``OUT``: its removal failed the next step's
    map, on a ``FileNotFoundError`` it offered to skip with ``--skip-bad-records``."""
    output = tmp_path / "out"

    def step_one() -> Path:
        return next(tmp_path.glob(".out.steps-*/step-1"), tmp_path / "not yet")

    stderr = _run_removing(
        tmp_path,
        [job_path("reduces_in_turn"), str(ROOT / "jobs" / "topk.py")],
        step_one,
        lambda f: _remove_while_written(f.parent),
    )
    assert f"(step 1's output, in the scratch folder of the run writing {output}) was removed or moved" in stderr
    assert "--skip-bad-records" not in stderr and "--keep-intermediate keeps it" not in stderr, stderr
    assert not (output / "_SUCCESS").exists()


def _remove_while_written(folder: Path) -> None:
    """Remove ``folder`` while the running job may still write into it (``rm -rf`` racing its writes fails with
    "Directory not empty" when a file lands in a folder it has just emptied; run again, as a user would)."""
    for _ in range(50):
        try:
            shutil.rmtree(folder)
            return
        except OSError as error:
            if error.errno != errno.ENOTEMPTY:
                raise
        time.sleep(0.05)
    shutil.rmtree(folder)


def _replace_with_users(elsewhere: Path, *names: str) -> Callable[[Path], None]:
    """Move a folder to ``elsewhere`` and make one of the user's under its name, holding files ``names``."""

    def replace(folder: Path) -> None:
        folder.rename(elsewhere)
        folder.mkdir()
        for name in names:
            (folder / name).write_text("the user's\n")

    return replace


def _run_stream_removing(
    tmp_path: Path,
    source: str,
    window: str,
    checkpoint: str,
    started: Callable[[], bool],
    remove: Callable[[Path], None],
    *more: str,
) -> str:
    """``hop run`` a continuous word count of ``source`` into ``tmp_path/out`` (which never ends by itself), with
    ``--checkpoint-seconds checkpoint`` and options ``more``; once ``started()``, ``remove`` the output. Its standard
    error, once it failed; every process it started has ended."""
    import psutil

    output = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("stream_wordcount"), "--source", source, "--window",
               window, "-o", str(output), "--workers", "1", "--checkpoint-seconds", checkpoint, *more]  # fmt: skip
    run = subprocess.Popen(
        command, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait_for(started, "the job wrote into its output")
        processes = psutil.Process(run.pid).children(recursive=True)
        remove(output)
        _, stderr = run.communicate(timeout=20)  # (without the fix it ran on, writing a new output)
        _, alive = psutil.wait_procs(processes, timeout=20)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert not alive, [process.cmdline() for process in alive]
    assert run.returncode == 1, stderr
    assert f"output directory {output} was removed or moved while the job ran" in stderr, stderr
    assert "run the job again" in stderr, stderr
    return stderr


@pytest.mark.parametrize("how", ["removed", "moved", "replaced", "replaced by an empty folder"])
def test_a_continuous_jobs_output_removed_while_it_runs_fails_the_job(tmp_path: Path, how: str) -> None:
    """Its windows, checkpoints and ``_late`` files are not written on into a new ``OUT`` or another folder given the
    name, nor its ``_job.json``: the job fails, and every process of the run ends. The run neither removes the
    user's empty folder (as one it made and left empty) nor offers to update the materialized view of an ``OUT``
    that is not the job's."""
    output, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (tmp_path / "lines.txt").write_text("".join(f"w{n % 7} w{n % 3}\n" for n in range(100)))
    remove = {
        "removed": _remove_while_written,
        "moved": lambda folder: folder.rename(elsewhere),
        "replaced": _replace_with_users(elsewhere, "mine.txt"),
        "replaced by an empty folder": _replace_with_users(elsewhere),
    }[how]
    stderr = _run_stream_removing(
        tmp_path,
        "replay:lines.txt?rate=200&loop=1",
        "0.2s",
        "0.2",
        lambda: any(output.glob("windows/*/part-*")) and any(output.glob("_checkpoints/state/*")),
        remove,
        "--view-interval",
        "600",
    )
    assert "materialized view" not in stderr, stderr
    if how.startswith("replaced"):
        assert sorted(path.name for path in output.iterdir()) == (["mine.txt"] if how == "replaced" else [])
    else:
        assert not output.exists(), sorted(str(path.relative_to(output)) for path in output.rglob("*"))
    if how != "removed":  # the windows written before are in the folder moved away
        assert any(elsewhere.glob("windows/*/part-*"))


def test_a_quiet_continuous_jobs_output_removed_fails_it_without_waiting_for_a_write(tmp_path: Path) -> None:
    """A ``tcp:`` source nobody sends to, hour-long windows and a checkpoint a minute: nothing would write into the
    output for a minute, and the job would run on without it (for ever, with a source that stays quiet)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def listening() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    def remove(folder: Path) -> None:
        time.sleep(0.5)  # (past the map's first progress note, its only write for a minute)
        _remove_while_written(folder)

    output = tmp_path / "out"
    stderr = _run_stream_removing(tmp_path, f"tcp:127.0.0.1:{port}", "1h", "60", listening, remove, "--no-view")
    assert not output.exists(), stderr


def test_a_continuous_tasks_write_never_lands_in_an_output_replaced_right_after_its_check(tmp_path: Path) -> None:
    """A stream task checks ``OUT`` (``OutputGuard``), then writes: ``OUT`` replaced between the two (here at once
    after the check) got the task's folders (``_checkpoints/state``) made in the replacement, by path. The task now
    writes relative to the directory it holds open since its start: the replacement gets nothing, and the write
    fails as one into a removed output."""
    from hop.outputs import OutputRemovedError
    from hop.stream.tasks import _write_atomically

    output, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    output.mkdir()

    guard = guard_replaced_after_its_check(elsewhere, _replace_with_users(elsewhere))(output)
    try:
        with pytest.raises(OutputRemovedError, match="was removed or moved while the job ran"):
            _write_atomically(guard, output / "_checkpoints" / "state" / "map-00000.msgpack", b"state")
    finally:
        guard.close()
    assert list(output.iterdir()) == []
    assert [str(path.relative_to(elsewhere)) for path in elsewhere.rglob("*")] == ["_checkpoints", "_checkpoints/state"]


def test_the_report_of_a_continuous_run_its_hung_coordinator_left_goes_only_into_its_own_output(tmp_path: Path) -> None:
    """The run writes ``_job.json`` itself when its coordinator did not end the job (hung) and was killed; into
    ``OUT`` as it is then, which held the user's folder given the name once the job's was moved away."""
    from hop.loader import load_job_file
    from hop.outputs import output_identity
    from hop.runner import build_spec
    from hop.stream.options import stream_options
    from hop.stream.runner import report_unanswered

    output, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    options = stream_options(["tcp:127.0.0.1:0"], "1s")
    spec = build_spec(load_job_file(job_path("stream_wordcount")), [], str(output), options={"stream": options})
    output.mkdir()
    accepted = output_identity(output)
    _replace_with_users(elsewhere, "mine.txt")(output)
    ended = report_unanswered(spec, "job-0001", "tcp://127.0.0.1:9", accepted)
    assert f"output directory {output} was removed or moved while the job ran" in ended, ended
    assert sorted(path.name for path in output.iterdir()) == ["mine.txt"]
    assert not (elsewhere / "_job.json").exists()
    kept = tmp_path / "kept"  # an output still the job's gets it
    kept.mkdir()
    ended = report_unanswered(
        dataclasses.replace(spec, output=str(kept)), "job-0001", "tcp://127.0.0.1:9", output_identity(kept)
    )
    assert "says job-0001 was interrupted" in ended and (kept / "_job.json").exists(), ended


def test_a_second_ctrl_c_after_the_output_went_does_not_point_to_a_report(tmp_path: Path) -> None:
    """``hop run`` of a continuous job interrupted twice (``end_now``) once ``OUT`` was moved away: its coordinator
    ends the job and writes no report (what has OUT's name now is not the job's), but the run's last line said
    ``OUT/_job.json`` "says so" (or "see" it, the job already failed for the removal), and ``hop run`` took the
    missing report for a hung coordinator's and said it "did not end it within 5s"."""
    from hop.client import Client
    from hop.loader import load_job_file
    from hop.local_cluster import LocalCluster
    from hop.runner import build_spec
    from hop.stream.options import stream_options
    from hop.stream.runner import end_now

    output, elsewhere, lines = tmp_path / "out", tmp_path / "elsewhere", tmp_path / "lines.txt"
    lines.write_text("".join(f"w{n % 7}\n" for n in range(100)))
    options = stream_options([f"replay:{lines}?rate=200&loop=1"], "0.2s", checkpoint_seconds=0.2, deltas=False)
    spec = build_spec(load_job_file(job_path("stream_wordcount")), [], str(output), options={"stream": options})
    with LocalCluster(workers=1, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            job_id = client.submit(spec)
            _wait_for(lambda: any(output.glob("windows/*/part-*")), "the job wrote a window")
            output.rename(elsewhere)
            line, answered = end_now(cluster.address, job_id, output)
        finally:
            client.close()
    assert answered, line
    assert f"no {output / '_job.json'} was written: output directory {output} was removed or moved" in line, line
    assert not output.exists() and not (elsewhere / "_job.json").exists()


def test_a_compaction_of_a_removed_output_does_not_make_it_again(tmp_path: Path) -> None:
    """A continuous run's compactor finds new deltas, and the output is removed before the compaction starts: it made
    ``OUT/_view`` with all its parents, bringing ``OUT`` back."""
    from hop.stream.view import compact

    output = tmp_path / "out"
    assert compact(output) is None
    assert not output.exists()


def test_the_compactor_of_a_replaced_output_compacts_nothing_in_the_replacement(tmp_path: Path) -> None:
    """A continuous run's compactor (``--view-interval``), with ``OUT`` moved away and a folder of the user's put under
    its name (here holding a delta file of its own): its periodic and last compactions made ``OUT/_view/_lock`` there,
    then compacted (and deleted) the deltas they found. Now it carries ``OUT``'s identity from its start: it asks for
    nothing, and a compaction asked for all the same (its child) makes and reads nothing there."""
    from hop.outputs import output_identity
    from hop.stream.compactor import Compactor

    output, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    delta = Path("_checkpoints", "deltas", "delta-00000-00000000.jsonl")
    (output / delta).parent.mkdir(parents=True)
    (output / delta).write_text('{"window_start": 0, "window_end": 1, "partition": 0, "key": "a", "value": 1}\n')
    identity = output_identity(output)
    compactor = Compactor(output, interval=60)
    output.rename(elsewhere)
    shutil.copytree(elsewhere, output)  # (the user's, with a delta of its own)
    assert compactor.stop(final=True, timeout=60) is None
    assert compactor.children_started == 0 and compactor.last_error is not None, compactor.last_error
    assert f"output directory {output} was removed or moved" in compactor.last_error, compactor.last_error
    asked = Compactor(output, interval=60, identity=identity)
    try:
        asked.compact_now(timeout=60)
    finally:
        asked.stop(final=False, timeout=60)
    assert asked.failures == 1 and f"output directory {output} was removed or moved" in str(asked.last_error)
    assert sorted(str(path.relative_to(output)) for path in output.rglob("*")) == [
        str(part) for part in reversed(delta.parents) if part != Path(".")
    ] + [str(delta)]


def test_an_output_is_taken_for_removed_only_when_it_is_gone_or_another_directory(tmp_path: Path) -> None:
    """The check of a running job's output directory (every turn of the coordinator's loop for a continuous job):
    an error that says neither that it is gone nor that another directory has its name (here a loop of symbolic
    links, ELOOP; on a network file system a passing EIO or ESTALE) is no removal, or a healthy job failed on it."""
    from hop.outputs import output_changed, output_identity

    output = tmp_path / "out"
    output.mkdir()
    identity = output_identity(output)
    assert not output_changed(output, identity)
    output.rename(tmp_path / "moved")
    assert output_changed(output, identity)  # gone
    output.mkdir()
    assert output_changed(output, identity)  # another directory under its name
    looped = tmp_path / "looped"
    looped.symlink_to(looped)
    with pytest.raises(OSError):
        os.stat(looped)
    assert not output_changed(looped, identity)


def _replace_with_another_runs_temporary(elsewhere: Path, name: str) -> Callable[[Path], None]:
    """Move a folder to ``elsewhere`` and make another under its name, holding another run's ``_temporary/name``."""

    def replace(folder: Path) -> None:
        folder.rename(elsewhere)
        (folder / "_temporary").mkdir(parents=True)
        (folder / "_temporary" / name).write_text("another run's\n")

    return replace


def test_a_batch_reducers_part_never_lands_in_an_output_replaced_right_after_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch reducer checks ``OUT`` as it makes ``OUT/_temporary`` (``OutputGuard.folder``), then wrote its part
    there by path: ``OUT`` replaced between the two (here at once after the check) by a folder holding another run's
    ``_temporary`` of the same attempt's name got this attempt's part over that run's file. It now writes relative to
    the directory it holds open since its start, which keeps the part."""
    import zmq

    import hop.tasks
    from hop.loader import load_job_file
    from hop.runner import build_spec
    from tests.conftest import PairChannel

    output, elsewhere, work = tmp_path / "out", tmp_path / "elsewhere", tmp_path / "work"
    output.mkdir()
    work.mkdir()
    replace = _replace_with_another_runs_temporary(elsewhere, "part-00000.attempt-0")

    monkeypatch.setattr(hop.tasks, "OutputGuard", guard_replaced_after_its_check(elsewhere, replace))
    spec = build_spec(load_job_file(job_path("wordcount")), [], str(output), num_reduces=1)
    context = zmq.Context.instance()
    worker_side = context.socket(zmq.PAIR)
    channel = PairChannel(context, f"tcp://127.0.0.1:{worker_side.bind_to_random_port('tcp://127.0.0.1')}")
    try:
        hop.tasks.run_reduce(spec, 0, 0, 0, work, channel)  # (no maps: the part is written at once, empty)
    finally:
        channel.close()
        worker_side.close(linger=0)
    assert (output / "_temporary" / "part-00000.attempt-0").read_text() == "another run's\n"
    assert sorted(str(path.relative_to(output)) for path in output.rglob("*")) == [
        "_temporary",
        "_temporary/part-00000.attempt-0",
    ]
    assert (elsewhere / "_temporary" / "part-00000.attempt-0").read_text() == ""


def test_a_part_committed_as_its_output_is_replaced_right_after_the_check_stays_in_the_jobs(
    coordinator: Coordinator,
    tmp_path: Path,
) -> None:
    """The coordinator checks ``OUT``, then renamed a reduce attempt's ``OUT/_temporary`` file to its part by name:
    ``OUT`` replaced between the two (here at once after the check) by a folder holding another run's file of that
    name got that file as the job's part. The rename is now made in the directory the coordinator holds open since
    it accepted the job, wherever it went; the job fails for the replacement."""
    source, output, elsewhere = tmp_path / "in.txt", tmp_path / "out", tmp_path / "elsewhere"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output)
    job = coordinator.jobs[job_id]
    attempt_output = output / "_temporary" / "part-00000.attempt-0"
    attempt_output.parent.mkdir(exist_ok=True)  # (made as the job was accepted)
    attempt_output.write_text('"a"\t2\n')
    replace = _replace_with_another_runs_temporary(elsewhere, attempt_output.name)

    assert job.output_held is not None
    job.output_held.close()
    job.output_held = guard_replaced_after_its_check(elsewhere, replace)(output)
    report = {"type": "reduce_done", "job_id": job_id, "worker": "w", "attempt": 0, "index": 0, "at": time.time()}
    relay(coordinator, {**report, "pool": "reduce", "path": str(attempt_output), "counters": {}, "user_counters": {}})
    assert (output / "_temporary" / attempt_output.name).read_text() == "another run's\n"
    assert not (output / "part-00000").exists()
    assert (elsewhere / "part-00000").read_text() == '"a"\t2\n'
    coordinator._fail_jobs_whose_output_went()
    assert job.state == "failed" and f"output directory {output} was removed or moved" in str(job.error), job.error


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_snapshot_answered_as_its_output_went_does_not_make_it_again(
    coordinator: Coordinator,
    tmp_path: Path,
    how: str,
) -> None:
    """``OUT`` removed (or replaced by a folder of the user's) and the reducers' answer to ``hop snapshot`` handled
    in the same turn of the coordinator's loop, before its check of the running jobs' outputs: publishing the
    snapshot made its staging folder with all its parents, which brought ``OUT`` back (or wrote the snapshot into
    the user's folder). It is now published in the directory the job was accepted with only; the job fails."""
    source, output, elsewhere = tmp_path / "in.txt", tmp_path / "out", tmp_path / "elsewhere"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output, snapshot_every=0.5)
    job = coordinator.jobs[job_id]
    coordinator.on_snapshot(b"client", {"job_id": job_id})  # hop snapshot: asked of the reducer
    assert job.snapshots is not None
    snapshot = job.snapshots.snapshots[-1]
    if how == "removed":
        shutil.rmtree(output)
    else:
        _replace_with_users(elsewhere, "mine.txt")(output)
    answer = {"type": "snapshot_done", "job_id": job_id, "worker": "w", "index": 0, "attempt": 0}
    relay(coordinator, {**answer, "seq": snapshot.seq, "label": snapshot.label, "rows": [], "groups": 0})
    if how == "removed":
        assert not output.exists(), sorted(str(path.relative_to(output)) for path in output.rglob("*"))
    else:
        assert sorted(str(path.relative_to(output)) for path in output.rglob("*")) == ["mine.txt"]
    assert job.state == "failed", job.state
    assert f"output directory {output} was removed or moved while the job ran" in str(job.error), job.error


def test_a_jobs_temporary_goes_from_its_output_moved_away(
    coordinator: Coordinator,
    tmp_path: Path,
) -> None:
    """``OUT`` moved away (renamed, not replaced) while the job ran: the job fails, and its half-written scratch
    (``_temporary``: an attempt's output, a snapshot never published) is removed from the moved folder, as the job's
    end removes it from an ``OUT`` in place; the parts committed before stay, the user's now. It stayed there."""
    source, output, elsewhere = tmp_path / "in.txt", tmp_path / "out", tmp_path / "elsewhere"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output)
    write_as_a_late_reduce(output)
    (output / "part-00001").write_text('"b"\t1\n')  # (committed before)
    output.rename(elsewhere)
    coordinator._fail_jobs_whose_output_went()
    job = coordinator.jobs[job_id]
    assert job.state == "failed" and f"output directory {output} was removed or moved" in str(job.error), job.error
    assert sorted(str(path.relative_to(elsewhere)) for path in elsewhere.rglob("*")) == ["part-00001"]
    assert not output.exists()


@pytest.mark.parametrize("ends", ["succeeded", "failed"])
def test_the_files_a_job_ends_with_never_land_in_an_output_replaced_right_after_its_check(
    coordinator: Coordinator,
    tmp_path: Path,
    ends: str,
) -> None:
    """The job's end checks ``OUT``, then wrote ``_job.json`` and ``_SUCCESS`` (``succeeded``), or removed the parts
    of a failed batch job (``failed``: ``hop stop``), by name: ``OUT`` replaced between the two (here at once after
    the check) by a folder of the user's got a report and a ``_SUCCESS`` marking it done, or lost its ``part-*``
    files. They are now written and removed in the directory the coordinator holds open since it accepted the job,
    wherever it went: the job's result, complete when checked, is there with its report and marker."""
    source, output, elsewhere = tmp_path / "in.txt", tmp_path / "out", tmp_path / "elsewhere"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output)
    job = coordinator.jobs[job_id]
    replace = _replace_with_users(elsewhere, "part-00000", "mine.txt")

    class ReplacedAfterItsCheck(OutputGuard):
        # The check of a cancelled job's end is the next one; a succeeding job's the one after its last commit.
        armed = ends == "failed"

        def replace(self, source: Path, target: Path) -> None:
            super().replace(source, target)
            self.armed = True

        def changed(self) -> bool:
            changed = super().changed()
            if self.armed and not elsewhere.exists():
                replace(output)
            return changed

    assert job.output_held is not None
    job.output_held.close()
    job.output_held = ReplacedAfterItsCheck(output)
    if ends == "succeeded":
        done = {"job_id": job_id, "worker": "w", "attempt": 0, "index": 0, "at": time.time()}
        done |= {"counters": {}, "user_counters": {}}
        relay(coordinator, {**done, "type": "map_done", "pool": "map", "spills": 1})
        attempt_output = output / "_temporary" / "part-00000.attempt-0"
        attempt_output.parent.mkdir(exist_ok=True)  # (made as the job was accepted)
        attempt_output.write_text('"a"\t2\n"b"\t1\n')
        relay(coordinator, {**done, "type": "reduce_done", "pool": "reduce", "path": str(attempt_output)})
    else:
        (output / "part-00000").write_text('"a"\t2\n')  # (committed before)
        coordinator.on_stop_job(b"client", {"job_id": job_id})
    # The user's folder: no report, no marker of done, its own part kept.
    assert sorted(path.name for path in output.iterdir()) == ["mine.txt", "part-00000"]
    assert all(path.read_text() == "the user's\n" for path in output.iterdir())
    assert job.state == ends, job.error
    if ends == "succeeded":
        assert sorted(path.name for path in elsewhere.iterdir()) == ["_SUCCESS", "_job.json", "part-00000"]
        assert (elsewhere / "part-00000").read_text() == '"a"\t2\n"b"\t1\n'
    else:  # (a failed batch job's parts removed)
        assert sorted(path.name for path in elsewhere.iterdir()) == ["_job.json"]


def test_a_window_summary_never_lands_in_an_output_replaced_right_after_its_check(
    coordinator: Coordinator,
    tmp_path: Path,
) -> None:
    """The coordinator checks ``OUT``, then wrote a window's ``OUT/windows/<label>/_window.json`` by name: ``OUT``
    replaced between the two (here at once after the check) got the folder and the file. They are now written in
    the directory held since the job was accepted; the next check fails the job."""
    source, output, elsewhere = tmp_path / "in.txt", tmp_path / "out", tmp_path / "elsewhere"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output)  # (a batch job: the write is the same for any job)
    job = coordinator.jobs[job_id]
    replace = _replace_with_users(elsewhere, "mine.txt")

    assert job.output_held is not None
    job.output_held.close()
    job.output_held = guard_replaced_after_its_check(elsewhere, replace)(output)
    coordinator._write_window_json(job, {"label": "w1", "seq": 1, "rows": [], "records": 3})
    assert sorted(str(path.relative_to(output)) for path in output.rglob("*")) == ["mine.txt"]
    assert (elsewhere / "windows" / "w1" / "_window.json").exists()
    coordinator._fail_jobs_whose_output_went()
    assert job.state == "failed" and f"output directory {output} was removed or moved" in str(job.error), job.error


def test_a_jobs_stop_on_a_snapshot_copies_nothing_into_an_output_replaced_after_its_publishing(
    coordinator: Coordinator,
    tmp_path: Path,
) -> None:
    """``--stop-when-accurate``: the snapshot just published (in the directory held, checked) is the result, and its
    parts were copied into ``OUT`` by name: ``OUT`` replaced since the check lost the copy (the snapshot is not in
    the replacement: the coordinator failed on it with a traceback), or, holding one of that name, got someone
    else's files as parts. They are now copied in the directory held, and the job fails for the replacement."""
    from hop.online.tracker import Snapshot

    source, output, elsewhere = tmp_path / "in.txt", tmp_path / "out", tmp_path / "elsewhere"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output, snapshot_every=0.5)
    job = coordinator.jobs[job_id]
    published = output / "_snapshots" / "0.500"
    published.mkdir(parents=True)
    (published / "part-00000").write_text('"a"\t2\n')
    snapshot = Snapshot(9, "0.500", 0.5, time.time(), partitions={0: {"groups": 1, "max_relative_half_width": 0.01}})
    _replace_with_users(elsewhere, "mine.txt")(output)  # (once the snapshot was published)
    coordinator._stop_early(job, snapshot)
    assert sorted(str(path.relative_to(output)) for path in output.rglob("*")) == ["mine.txt"]
    assert (elsewhere / "part-00000").read_text() == '"a"\t2\n'
    assert job.state == "failed" and f"output directory {output} was removed or moved" in str(job.error), job.error
