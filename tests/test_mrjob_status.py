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
        self.set_status("started")  # (on every record: said once)
        if self.records == 1:
            time.sleep(1.1)  # (past the once-a-second limit)
            self.set_status("waiting for the gate")
            waited = time.monotonic()
            while not os.path.exists(self.options.gate):
                if time.monotonic() - waited > 60:
                    raise RuntimeError("the test never opened the gate")
                time.sleep(0.02)
        if self.records > 1:
            self.set_status("through the gate")
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
