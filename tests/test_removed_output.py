"""A job's output directory removed (or moved away) by its user while the job runs, after some of its part files were
committed: the job must fail, saying so, and never mark an incomplete output done. A reducer that started later made
``OUT/_temporary`` with all its parents, which brought ``OUT`` back; the job then committed the other parts there and
wrote ``_SUCCESS`` over an output without the parts committed before: a silent loss of data. Real ``hop run``
processes on an embedded cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT, job_path


def _wait_for(condition: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["removed", "moved"])
def test_an_output_removed_while_its_job_runs_fails_the_job(tmp_path: Path, how: str) -> None:
    gate, source, output = tmp_path / "gate", tmp_path / "in.txt", tmp_path / "out"
    gate.mkdir()
    source.write_text(" ".join(f"w{n}" for n in range(60)) + "\n")
    command = [sys.executable, "-m", "hop", "run", job_path("reduces_in_turn"), str(source), "-o", str(output)]
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
        _wait_for(lambda: any(output.glob("part-*")), "a reducer committed its part")
        _wait_for(lambda: (gate / "entered-2").exists(), "the other reducers started")
        if how == "removed":
            shutil.rmtree(output)
        else:
            output.rename(tmp_path / "elsewhere")
        (gate / "go-1").touch()
        (gate / "go-2").touch()
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == 1, stderr
    assert f"output directory {output} was removed or moved while the job ran" in stderr, stderr
    assert "run the job again" in stderr, stderr
    assert not output.exists(), sorted(str(path.relative_to(output)) for path in output.rglob("*"))
    if how == "moved":  # what had been committed, not marked done
        assert not (tmp_path / "elsewhere" / "_SUCCESS").exists()
