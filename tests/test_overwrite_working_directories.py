"""``--overwrite`` never clears an output directory holding the user's current directory. A standalone coordinator
(``hop coordinator``) checked its own working directory instead, and named it "the current directory": a job whose
output held the directory the coordinator was started in was refused for holding the current directory, which the
user's was not in, and one whose output held the submitting client's current directory was accepted, and that
directory cleared. The client sends its current directory with the job. A real coordinator process, started in a
directory of its own; the test's process is the client."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hop.client import Client, JobRejected
from hop.forking import wait_or_kill
from hop.loader import load_job_file
from hop.runner import build_spec
from tests.conftest import job_path


@pytest.fixture()
def coordinator(tmp_path: Path) -> Iterator[Client]:
    """A client of a standalone coordinator (no worker: the tests' jobs are refused, or wait) started in
    ``tmp_path/data/cluster``."""
    home = tmp_path / "data" / "cluster"
    home.mkdir(parents=True)
    address = f"ipc://{tmp_path}/coordinator"
    process = subprocess.Popen([sys.executable, "-m", "hop", "coordinator", "--bind", address], cwd=home)
    client = Client(address, timeout=30)
    try:
        yield client
    finally:
        client.close()
        process.terminate()
        wait_or_kill([process], time.monotonic() + 15)


def _submit(client: Client, source: Path, output: Path) -> str:
    spec = build_spec(load_job_file(job_path("wordcount")), [str(source)], str(output), overwrite=True)
    return client.submit(spec)


def test_an_output_holding_the_coordinators_directory_is_refused_naming_it(
    coordinator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, user = tmp_path / "in.txt", tmp_path / "user"
    source.write_text("a b a\n")
    user.mkdir()
    monkeypatch.chdir(user)
    home = tmp_path / "data" / "cluster"
    with pytest.raises(JobRejected) as refused:
        _submit(coordinator, source, tmp_path / "data")
    assert f"holds the coordinator's working directory {home} (where hop coordinator was started)" in str(refused.value)
    assert home.is_dir()


def test_an_output_holding_the_clients_current_directory_is_refused(
    coordinator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, user = tmp_path / "in.txt", tmp_path / "results" / "work"
    source.write_text("a b a\n")
    user.mkdir(parents=True)
    (user / "notes.txt").write_text("mine")
    monkeypatch.chdir(user)
    with pytest.raises(JobRejected, match="holds the current directory: --overwrite would delete it"):
        _submit(coordinator, source, tmp_path / "results")
    assert (user / "notes.txt").read_text() == "mine"
