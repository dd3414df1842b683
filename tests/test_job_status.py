"""``Job.set_status``: a hop job's task status messages, as mrjob's ``set_status`` sends them
(``tests/test_mrjob_status.py``): through the engine to the ``hop run`` that follows the job, labelled by step in a
pipeline, kept per attempt in ``_job.json``; from every method of a job, in batch, online and continuous jobs; and
printed on standard error when the job's methods are called by hand.

``Job`` had no ``set_status``: a job calling it failed with an ``AttributeError``.

Each attempt's messages here are such that every one is said whatever the machine's speed: an attempt's first
message goes at once, its last is sent as it ends, and any other comes more than a second after the one before
(a stalled task sends a message sooner, never later).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hop import Job, task_status

TIMEOUT = 120

FIRST_STEP = """
import os
import time

from hop import Job


class First(Job):
    def map(self, offset, line):
        self.set_status("first map")  # (on every record: said once)
        yield line.strip(), 1

    def reduce(self, key, counts):
        self.set_status("waiting for step 2")
        waited = time.monotonic()
        while not os.path.exists(os.environ["GATE"]):  # (step 2 runs meanwhile)
            if time.monotonic() - waited > 60:
                raise RuntimeError("step 2 never opened the gate")
            time.sleep(0.02)
        yield key, sum(counts)
"""

SECOND_STEP = """
import os
import time

from hop import Job


class Second(Job):
    def setup(self):
        self.set_status("second setup")
        time.sleep(0.3)  # (that message on its way before step 1 may end)
        open(os.environ["GATE"], "w").close()

    def map(self, key, count):
        self.set_status("second map")
        yield "total", count

    def reduce(self, key, counts):
        total = sum(counts)
        self.set_status(("second reduce", total))  # (any object, said as str says it)
        yield key, total
"""


def test_a_pipeline_of_hop_jobs_says_each_steps_messages_labelled_after_the_line_naming_its_job(
    tmp_path: Path,
) -> None:
    """``hop run a.py b.py``: each step's messages are said once, named by their step and job class; the later
    step's while the run follows the first (its reduce waits for the later step's setup), and after the line that
    gives the later step's job id, which was said only once the run followed that step."""
    (tmp_path / "first.py").write_text(FIRST_STEP)
    (tmp_path / "second.py").write_text(SECOND_STEP)
    (tmp_path / "in.txt").write_text("a\nb\na\n")
    command = [sys.executable, "-m", "hop", "run", "first.py", "second.py", "in.txt", "-o", "out"]
    command += ["--reducers", "1", "--workers", "2"]
    env = {**os.environ, "GATE": str(tmp_path / "gate")}
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "part-00000").read_text() == '"total"\t3\n'
    lines = run.stderr.splitlines()
    said = [line for line in lines if " status (" in line]
    assert Counter(said) == {
        "hop: step 1/2 First status (task map 0): first map": 1,
        "hop: step 1/2 First status (task reduce 0): waiting for step 2": 1,
        "hop: step 2/2 Second status (task map 0): second setup": 1,
        "hop: step 2/2 Second status (task map 0): second map": 1,
        "hop: step 2/2 Second status (task reduce 0): second setup": 1,
        "hop: step 2/2 Second status (task reduce 0): ('second reduce', 3)": 1,
    }, run.stderr
    (step_1_named,) = [n for n, line in enumerate(lines) if line.startswith("hop: step 1/2 job-")]
    (step_2_named,) = [n for n, line in enumerate(lines) if line.startswith("hop: step 2/2 job-")]
    step_1_ended = max(n for n, line in enumerate(lines) if line.startswith("step 1/2 map"))  # (its last progress)
    step_2_said = [n for n, line in enumerate(lines) if line.startswith("hop: step 2/2 Second status")]
    assert step_1_named < step_2_named < min(step_2_said) < step_1_ended, run.stderr
    assert all(step_1_named < n for n, line in enumerate(lines) if line.startswith("hop: step 1/2 First status"))


HOOKS_JOB = """
import time

from hop import Job


class Hooks(Job):
    def setup(self):
        self.combined = False
        if self.input_file is not None:  # (a map's)
            self.set_status("setup")

    def map(self, offset, line):
        yield line.strip(), 1

    def combine(self, key, counts):  # (at the map's spills: its last after its teardown; an online one's before)
        if not self.combined:
            self.combined = True
            time.sleep(1.1)
        self.set_status("combine")
        yield key, sum(counts)

    def reduce(self, key, counts):
        self.set_status("reduce")
        yield key, sum(counts)

    def teardown(self):
        time.sleep(1.1)  # (past the once-a-second limit)
        self.set_status("teardown")
"""


@pytest.mark.parametrize("online", [False, True], ids=["batch", "online"])
def test_set_status_from_setup_combine_reduce_and_teardown_is_said_and_kept_per_attempt(
    tmp_path: Path, online: bool
) -> None:
    """A batch job's and an online job's messages from ``setup``, ``combine``, ``reduce`` and ``teardown`` are said
    in order, and each attempt's last is its ``status_message`` in ``_job.json``."""
    (tmp_path / "hooks.py").write_text(HOOKS_JOB)
    (tmp_path / "in.txt").write_text("a\nb\na\n")
    command = [sys.executable, "-m", "hop", "run", "hooks.py", "in.txt", "-o", "out", "--reducers", "1"]
    command += ["--workers", "1", *(["--snapshot-every", "0.5"] if online else [])]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    said = [line.removeprefix("hop: Hooks status ") for line in run.stderr.splitlines() if " status (" in line]
    # (an online map spills as each chunk of its input ends: its one chunk's, before its teardown)
    mapped = ["combine", "teardown"] if online else ["teardown", "combine"]
    assert said == [
        "(task map 0): setup",
        *(f"(task map 0): {message}" for message in mapped),
        "(task reduce 0): reduce",
        "(task reduce 0): teardown",
    ], run.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert {a["kind"]: a["status_message"] for a in report["attempts"]} == {"map": mapped[-1], "reduce": "teardown"}


STREAM_JOB = """
from hop import Job
from hop.aggregates import Sum


class StreamStatus(Job):
    def setup(self):
        self.records = 0

    def map(self, at, line):
        self.records += 1
        self.set_status(f"mapped {self.records}")  # (on every record: about one a second said)
        yield line.split()[0], 1

    combine = reduce = Sum()
"""


def test_a_continuous_jobs_messages_are_said_as_they_come_and_its_last_kept(tmp_path: Path) -> None:
    """A continuous job's map runs until its source ends: ``hop run --source`` says its messages as they come,
    among the windows' lines, the last as the map ends, and ``_job.json`` keeps it."""
    (tmp_path / "stream.py").write_text(STREAM_JOB)
    (tmp_path / "lines.txt").write_text("".join(f"w{n % 3} x\n" for n in range(120)))
    command = [sys.executable, "-m", "hop", "run", "stream.py", "--source", "replay:lines.txt?rate=80"]
    command += ["--window", "40r", "-o", "out", "--no-view"]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    said = [line for line in lines if " status (" in line]
    mapped = [int(line.removeprefix("hop: StreamStatus status (task map 0): mapped ")) for line in said]
    # (120 records at 80 a second: 1.5 s, so two or three messages, the last as the source ends)
    assert mapped[0] == 1 and mapped[-1] == 120 and len(mapped) >= 2 and mapped == sorted(set(mapped)), run.stderr
    windows = [n for n, line in enumerate(lines) if line.startswith("hop: window ")]
    assert lines.index(said[0]) < windows[0], run.stderr  # (said as it came, not once the job ended)
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert [a["status_message"] for a in report["attempts"] if a["kind"] == "map"] == ["mapped 120"]


def test_job_set_status_per_record_sends_the_first_message_and_the_last_as_the_attempt_ends() -> None:
    """Called on every record, ``Job.set_status`` sends a message at most once a second: the attempt's first at
    once, the last when it ends (the task process flushes before it reports the end)."""

    class PerRecord(Job):
        pass

    job = PerRecord()
    sent: list[str] = []
    with task_status.reporting(sent.append):
        for number in range(10_000):
            job.set_status(f"record {number}")
        job.set_status("record 9999")  # (the same again: nothing new to send)
        assert sent == ["record 0"]
        task_status.flush()
    assert sent == ["record 0", "record 9999"]


BY_HAND = """
from hop import Job


class ByHand(Job):
    def map(self, offset, line):
        self.set_status(f"mapping {offset}")
        yield line, 1


job = ByHand()
job.setup()
pairs = [pair for offset in range(1000) for pair in job.map(offset, "a")]
job.teardown()
print(len(pairs))
"""


def test_set_status_called_by_hand_outside_the_engine_prints_the_first_and_last_message() -> None:
    """A job's methods called by hand (a unit test of the job) print its messages on standard error, at most one a
    second, and the last one held back as the process exits: none of them fails."""
    run = subprocess.run([sys.executable, "-c", BY_HAND], capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0 and run.stdout == "1000\n", run.stderr
    pid = r"\(task pid \d+\)"
    said = run.stderr.splitlines()
    assert len(said) == 2, run.stderr
    assert re.fullmatch(rf"hop: ByHand status {pid}: mapping 0", said[0]), run.stderr
    assert re.fullmatch(rf"hop: ByHand status {pid}: mapping 999", said[1]), run.stderr
