"""The embedded cluster's launcher started before the ``hop`` command's imports (``hop.prelaunch``): handed over to
the cluster when a run wants one, ended whenever it does not, never left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from hop import prelaunch
from hop.client import Client
from hop.cluster_launch import _wait_for_options
from hop.local_cluster import LocalCluster
from tests.conftest import job_path, read_output, run_job


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "job.py", "in", "-o", "out"], True),
        (["run", "--mrjob", "job.py", "in", "-o", "out", "--", "--coordinator", "x"], True),  # the job's options
        (["run", "job.py", "in", "-o", "out", "--coordinator", "tcp://h:1"], False),
        (["run", "job.py", "in", "-o", "out", "--coord=tcp://h:1"], False),  # argparse takes prefixes
        (["run", "job.py", "-o", "out", "--engine", "spark"], False),
        (["run", "job.py", "--source", "replay:x", "-o", "out"], False),
        (["run", "-h"], False),
        (["run", "--he"], False),
        (["submit", "job.py", "in", "-o", "out", "--coordinator", "tcp://h:1"], False),
        (["gen", "text", "x.txt"], False),
        ([], False),
    ],
)
def test_which_commands_start_a_launcher_early(argv: list[str], expected: bool) -> None:
    assert prelaunch.wants_embedded_cluster(argv) is expected


def _pipe_with(data: bytes | None) -> int:
    read, write = os.pipe()
    if data:
        os.write(write, data)
    os.close(write)
    return read


def test_the_launcher_reads_its_options_as_a_json_list() -> None:
    assert _wait_for_options(_pipe_with(b'["--workers", "2"]')) == ["--workers", "2"]
    assert _wait_for_options(_pipe_with(None)) is None  # the command needed no cluster
    with pytest.raises(ValueError, match="expected a JSON list of strings on --config-fd"):
        _wait_for_options(_pipe_with(b'{"workers": 2}'))


def test_a_prelaunched_launcher_becomes_the_cluster_and_runs_a_job(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("a b a\nc a\n")
    launcher = prelaunch.Prelaunch()
    launcher_process = psutil.Process(launcher.process.pid)
    with LocalCluster(workers=2, prelaunched=launcher) as cluster:
        assert cluster.coordinator is launcher.process
        assert "--config-fd" in launcher_process.cmdline()
        workers = [psutil.Process(worker.pid) for worker in cluster.workers]
        assert [w.ppid() for w in workers] == [launcher_process.pid] * 2
        client = Client(cluster.address, timeout=30)
        try:
            report = run_job(client, "wordcount", [tmp_path / "in.txt"], tmp_path / "out", num_reduces=2)
        finally:
            client.close()
        assert report["status"] == "succeeded"
        assert sorted(read_output(tmp_path / "out")) == [("a", 3), ("b", 1), ("c", 1)]
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in [launcher_process, *workers])


def test_a_cluster_that_never_starts_ends_its_prelaunched_launcher() -> None:
    launcher = prelaunch.Prelaunch()
    LocalCluster(workers=1, prelaunched=launcher).stop()
    assert launcher.process.returncode is not None


def test_a_run_that_fails_before_its_cluster_starts_ends_the_launcher(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[prelaunch.Prelaunch] = []

    class Recorded(prelaunch.Prelaunch):
        def __init__(self) -> None:
            super().__init__()
            started.append(self)

    monkeypatch.setattr(prelaunch, "Prelaunch", Recorded)
    argv = ["hop", "run", job_path("wordcount"), str(tmp_path / "missing.txt"), "-o", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", argv)
    assert prelaunch.main() == 2  # no such input: found before any cluster is started
    assert len(started) == 1
    assert started[0].process.returncode is not None  # killed and reaped, not left to finish its imports
    assert prelaunch.take() is None


def test_the_launcher_ends_by_itself_when_the_command_dies_without_ending_it() -> None:
    # A command killed between starting the launcher and configuring it: here a process that starts one, prints
    # its pid and exits at once, skipping every clean-up.
    script = "import os; from hop.prelaunch import Prelaunch; print(Prelaunch().process.pid, flush=True); os._exit(0)"
    command = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert command.returncode == 0, command.stderr
    launcher = psutil.Process(int(command.stdout))  # still there: it was forked moments ago
    # The pipe it waits on reached end-of-file; it exits without starting a cluster. (The test session is a
    # subreaper, so it is this process's child now and is reaped here.)
    assert launcher.wait(timeout=30) == 0
