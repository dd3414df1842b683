"""mrjob's ``set_status`` on hop: each message travels through the engine (``hop.task_status``) to the ``hop`` that
follows the job, which prints it above its progress bars, and to ``hop status``.

A task process printed it on the standard error it shared with an embedded cluster's ``hop run``: on a terminal the
line landed between the two progress bars, which were then redrawn a row off (a copy of the map bar left behind per
message), and a standalone worker's standard error is not the submitter's at all (``hop submit`` never showed it).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from hop.client import Client

TIMEOUT = 120

GATED_JOB = """
import os
import time

from mrjob.job import MRJob


class MRGated(MRJob):
    def configure_args(self):
        super().configure_args()
        self.add_passthru_arg("--gate")

    def mapper_init(self):
        self.records = 0

    def mapper(self, _, line):
        self.records += 1
        if self.records == 1:
            self.set_status("started")
            time.sleep(1.1)  # (past the once-a-second limit)
            self.set_status("waiting for the gate")
            waited = time.monotonic()
            while not os.path.exists(self.options.gate):
                if time.monotonic() - waited > 60:
                    raise RuntimeError("the test never opened the gate")
                time.sleep(0.02)
        if self.records > 1:
            self.set_status("through the gate")  # (on every record: said once)
        yield line, 1

    def reducer(self, key, counts):
        self.set_status("reducing")
        yield key, sum(counts)
"""


def test_set_status_reaches_hop_submit_once_per_change_and_hop_status_while_running(
    client: Client, tmp_path: Path
) -> None:
    """On a standalone cluster (the tests' own: its workers' standard error is not ``hop submit``'s), each message a
    task sets is printed by ``hop submit`` exactly once per change, the last one of a task as it ends included, and
    ``hop status JOB_ID`` shows a running task's latest."""
    job = tmp_path / "mr_gated.py"
    job.write_text(GATED_JOB)
    (tmp_path / "in.txt").write_text("".join(f"word{n % 7}\n" for n in range(300)))
    gate = tmp_path / "gate"
    command = [sys.executable, "-m", "hop", "submit", "--mrjob", str(job), "in.txt", "-o", "out"]
    command += ["--coordinator", client.address, "--reducers", "1", "--", "--gate", str(gate)]
    submit = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        statuses: list[dict[str, object]] = []
        while not any(entry["message"] == "waiting for the gate" for entry in statuses):
            assert time.monotonic() < deadline and submit.poll() is None, f"hop status showed {statuses}"
            running = [j for j in client.jobs() if j["state"] == "running" and j["output"] == str(tmp_path / "out")]
            if running:
                shown = subprocess.run(
                    [sys.executable, "-m", "hop", "status", running[0]["job_id"], "--coordinator", client.address],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert shown.returncode == 0, shown.stderr
                statuses = json.loads(shown.stdout).get("task_status", [])
            time.sleep(0.1)
        (entry,) = statuses
        assert (entry["kind"], entry["index"], entry["attempt"]) == ("map", 0, 0)
        gate.touch()
        _, stderr = submit.communicate(timeout=TIMEOUT)
    finally:
        submit.kill()
        submit.communicate()
    assert submit.returncode == 0, stderr
    said = Counter(line for line in stderr.splitlines() if " status (" in line)
    assert said == {
        "hop: MRGated status (task map 0): started": 1,
        "hop: MRGated status (task map 0): waiting for the gate": 1,
        "hop: MRGated status (task map 0): through the gate": 1,
        "hop: MRGated status (task reduce 0): reducing": 1,
    }, stderr


STATUS_JOB = """
import time

from mrjob.job import MRJob


class MRStatus(MRJob):
    def mapper_init(self):
        self.records = 0

    def mapper(self, _, line):
        self.records += 1
        if self.records % 10 == 0:
            time.sleep(0.3)
            self.set_status(f"mapped {self.records}")
        yield line, 1

    def reducer(self, key, counts):
        yield key, sum(counts)
"""


def screen(output: bytes) -> list[str]:
    """The rows a terminal shows (its scrollback included) after ``output``: printable text, carriage return, line
    feed and cursor up (what tqdm writes); other escape sequences are dropped."""
    rows: list[list[str]] = [[]]
    row = column = 0
    for match in re.finditer(r"\x1b\[(\d*)([A-Za-z])|[\r\n]|[^\x1b\r\n]", output.decode("utf-8", "replace")):
        text = match.group(0)
        if text == "\r":
            column = 0
        elif text == "\n":  # (the terminal's line discipline sent each as CR LF)
            row, column = row + 1, 0
            if row == len(rows):
                rows.append([])
        elif match.group(2) == "A":
            row = max(0, row - int(match.group(1) or 1))
        elif match.group(2) == "K":
            del rows[row][column:]
        elif match.group(2) is None and text.isprintable():
            line = rows[row]
            line.extend(" " * (column + 1 - len(line)))
            line[column] = text
            column += 1
    return ["".join(line).rstrip() for line in rows]


def run_on_terminal(command: list[str], cwd: Path) -> tuple[int, bytes]:
    """Run ``command`` with a pseudo-terminal (100 rows of 160 columns) as its standard input, output and error;
    its exit code and all it wrote there."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 100, 160, 0, 0))
    process = subprocess.Popen(
        command, cwd=cwd, stdin=follower, stdout=follower, stderr=follower, start_new_session=True
    )
    os.close(follower)
    output = bytearray()
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if select.select([leader], [], [], 0.5)[0]:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # (EIO: every process holding the terminal has ended)
                    break
                if not chunk:
                    break
                output += chunk
        else:
            pytest.fail(f"still running after {TIMEOUT}s: {bytes(output)!r}")
        return process.wait(timeout=60), bytes(output)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
        os.close(leader)


def test_status_messages_print_above_hop_runs_progress_bars_on_a_terminal(tmp_path: Path) -> None:
    """On a terminal the messages are printed above the two bars, which stay one of each on screen: a message the
    task printed itself left a copy of the map bar behind."""
    job = tmp_path / "mr_status.py"
    job.write_text(textwrap.dedent(STATUS_JOB))
    (tmp_path / "in.txt").write_text("".join(f"word{n}\n" for n in range(60)))
    command = [sys.executable, "-m", "hop", "run", "--mrjob", str(job), "in.txt", "-o", "out", "--workers", "1"]
    code, output = run_on_terminal(command, tmp_path)
    rows = screen(output)
    assert code == 0, "\n".join(rows)
    bars = [row for row in rows if row.startswith(("map", "reduce"))]
    assert [bar.split()[0] for bar in bars] == ["map", "reduce"], "\n".join(rows)
    statuses = [row for row in rows if " status (" in row]
    # Which of the messages are said depends on the machine's speed (at most one a second, and the last one).
    said = [int(row.removeprefix("hop: MRStatus status (task map 0): mapped ")) for row in statuses]
    assert said[0] == 10 and said[-1] == 60 and said == sorted(set(said)), "\n".join(rows)
    assert rows.index(statuses[-1]) < rows.index(bars[0]), "\n".join(rows)


def test_report_sends_a_new_message_at_most_once_a_second_and_flush_sends_the_last() -> None:
    """A job setting its status on every record sends one message, then the last one when its attempt ends (the
    task process flushes before it reports the end); each attempt's first message goes at once; a long one is cut."""
    from hop import task_status

    sent: list[str] = []
    with task_status.reporting(sent.append):
        for number in range(10_000):
            task_status.report("MRJob", f"record {number}")
        assert sent == ["record 0"]
        task_status.flush()
        task_status.flush()
        assert sent == ["record 0", "record 9999"]
    with task_status.reporting(sent.append):  # (the next attempt in this process)
        task_status.report("MRJob", "x" * 5000)
    assert len(sent) == 3 and len(sent[-1]) == task_status.STATUS_CHARS and sent[-1].endswith("x…")


def test_a_status_line_is_one_line_of_plain_text() -> None:
    """A message's line breaks and control characters are written as escapes: a terminal would otherwise take an
    escape sequence in it for a command (recolour, clear the screen) and a carriage return would overwrite it."""
    from hop.task_status import status_line

    entry = {"kind": "map", "index": 2, "attempt": 1, "message": "one\ntwo\r\x1b[2J\tthree \x9b é"}
    assert status_line("MRJob", entry) == r"hop: MRJob status (task map 2 attempt 1): one\ntwo\r\x1b[2J three \x9b é"


PIPELINED_JOB = """
import os
import time

from mrjob.job import MRJob
from mrjob.step import MRStep


class MRSteps(MRJob):
    def configure_args(self):
        super().configure_args()
        self.add_passthru_arg("--gate")

    def steps(self):
        return [
            MRStep(mapper=self.first_map, reducer=self.first_reduce),
            MRStep(mapper_init=self.second_init, mapper=self.second_map),
        ]

    def first_map(self, _, line):
        yield line.strip(), 1

    def first_reduce(self, key, counts):
        self.set_status("waiting for step 2")
        waited = time.monotonic()
        while not os.path.exists(self.options.gate):  # (step 2's map runs meanwhile)
            if time.monotonic() - waited > 60:
                raise RuntimeError("step 2 never opened the gate")
            time.sleep(0.02)
        yield key, sum(counts)

    def second_init(self):
        self.set_status("second step starts")
        time.sleep(1.1)  # (past the once-a-second limit)
        self.set_status("second step started")
        time.sleep(0.3)  # (that message on its way before step 1 may end)
        open(self.options.gate, "w").close()

    def second_map(self, key, count):
        yield key, count
"""


def test_a_pipelines_later_step_says_its_messages_while_hop_run_follows_an_earlier_one(tmp_path: Path) -> None:
    """A multi-step job's steps run side by side and ``hop run`` follows them one at a time: a later step's messages
    are said as they come, named by their step, while the step before it still runs. Only the latest of each of
    its tasks was said, once the steps before it had ended. Each step's job id is said as it is submitted, before
    any message."""
    job = tmp_path / "mr_steps.py"
    job.write_text(PIPELINED_JOB)
    (tmp_path / "in.txt").write_text("a\nb\n")
    command = [sys.executable, "-m", "hop", "run", "--mrjob", str(job), "in.txt", "-o", "out", "--reducers", "1"]
    command += ["--", "--gate", str(tmp_path / "gate")]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    said = [line for line in lines if " status (" in line]
    assert Counter(said) == {
        "hop: step 1/2 MRSteps status (task reduce 0): waiting for step 2": 1,
        "hop: step 2/2 MRSteps status (task map 0): second step starts": 1,
        "hop: step 2/2 MRSteps status (task map 0): second step started": 1,
    }, run.stderr
    # Said while step 1 ran (before its last progress line), and after the line giving step 2's job id (said as
    # the step is submitted: it came once the run followed step 2, after its messages).
    (step_2_named,) = [n for n, line in enumerate(lines) if line.startswith("hop: step 2/2 job-")]
    step_1_ended = max(n for n, line in enumerate(lines) if line.startswith("step 1/2 map"))
    assert all(step_2_named < lines.index(line) < step_1_ended for line in said), run.stderr


FAILING_JOB = """
from mrjob.job import MRJob


class MRFailing(MRJob):
    def mapper(self, _, line):
        self.increment_counter("lines", "read")
        self.set_status(f"mapping {line.strip()}")  # (on every record: the last one within the second unsent)
        if line.strip() == "w7":
            raise ValueError("a bad record")
        yield line.strip(), 1
"""


def test_a_failed_attempts_last_status_is_said_and_reported(client: Client, tmp_path: Path) -> None:
    """The last status a failing attempt set (held back by the once-a-second limit) is sent before its failure, so
    ``hop submit`` says it, and ``_job.json`` and ``hop status JOB_ID`` give it with the attempt. It was dropped: a
    failed attempt's tasks were not torn down, and the coordinator kept only running tasks' messages."""
    job = tmp_path / "mr_failing.py"
    job.write_text(FAILING_JOB)
    (tmp_path / "in.txt").write_text("".join(f"w{n}\n" for n in range(20)))
    command = [sys.executable, "-m", "hop", "submit", "--mrjob", str(job), "in.txt", "-o", "out"]
    command += ["--coordinator", client.address, "--reducers", "1"]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 1 and "a bad record" in run.stderr, run.stderr
    said = [line for line in run.stderr.splitlines() if " status (" in line]
    # (the 20 records take far less than the second between two messages, but a machine may stall a task longer)
    records = [int(line.removeprefix("hop: MRFailing status (task map 0): mapping w")) for line in said]
    assert records[0] == 0 and records[-1] == 7 and records == sorted(set(records)), run.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    (failed,) = [attempt for attempt in report["attempts"] if attempt["status"] == "failed"]
    assert failed["status_message"] == "mapping w7", failed
    shown = client.status(report["job_id"])
    (attempt,) = [a for a in shown["report"]["attempts"] if a["status"] == "failed"]
    assert attempt["status_message"] == "mapping w7"


EDGE_JOB = """
import time

from mrjob.job import MRJob


class MREdges(MRJob):
    def mapper_init(self):
        self.set_status(msg="mapper_init")  # (mrjob's parameter name, by keyword)
        time.sleep(1.1)

    def mapper(self, _, line):
        self.increment_counter("lines", "read")
        self.set_status(("a tuple", 1))  # (any object, said as mrjob's %s says it)
        yield line.strip(), 1

    def mapper_final(self):
        time.sleep(1.1)
        self.set_status("two\\nlines and \\x1b[31m colour")

    def reducer(self, key, counts):
        yield key, sum(counts)

    def reducer_final(self):
        self.set_status("reducer_final")
"""


def test_set_status_from_init_and_final_methods_by_keyword_and_of_any_object(tmp_path: Path) -> None:
    """``set_status(msg=...)`` (mrjob's parameter) raised TypeError; a message that is not a string is said as
    mrjob says it; ``mapper_init``'s and ``reducer_final``'s are said; a message of several lines or with an escape
    sequence is one line of text; counters are counted alongside."""
    job = tmp_path / "mr_edges.py"
    job.write_text(EDGE_JOB)
    (tmp_path / "in.txt").write_text("a\nb\n")
    command = [sys.executable, "-m", "hop", "run", "--mrjob", str(job), "in.txt", "-o", "out", "--reducers", "1"]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    said = [line for line in run.stderr.splitlines() if " status (" in line]
    assert said == [
        "hop: MREdges status (task map 0): mapper_init",
        "hop: MREdges status (task map 0): ('a tuple', 1)",
        r"hop: MREdges status (task map 0): two\nlines and \x1b[31m colour",
        "hop: MREdges status (task reduce 0): reducer_final",
    ], run.stderr
    report = json.loads((tmp_path / "out" / "_job.json").read_text())
    assert report["counters"]["user"] == {"lines": {"read": 2}}
