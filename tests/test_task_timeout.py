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

import psutil
import pytest

from hop.client import Client
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import JobFailed, build_spec, run_steps
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


def test_the_task_timeout_is_read_as_a_duration_and_refused_for_a_continuous_job(tmp_path: Path) -> None:
    """``--task-timeout 2m`` is 120 s in the job's options; with ``--source`` it is refused: a continuous job's
    quiet source is no fault, and its attempts are never timed (nor said to be stalled)."""
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
