"""What a ``hop run`` imports on its way. Every run waits for the imports of its command and of its embedded
cluster's launcher (``hop.cluster_launch``), so modules that only some runs use (continuous jobs, online aggregation,
a standalone worker's watch on its link) are imported by those runs alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, job_path


def _modules_after(script: str, cwd: Path) -> tuple[str, set[str]]:
    """Run ``script`` (Python, which prints ``sys.modules`` last as one line) in a fresh interpreter; return what it
    printed before that line, and the modules."""
    done = subprocess.run(
        [sys.executable, "-P", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120, check=True
    )
    *before, modules = done.stdout.splitlines()
    return "\n".join(before), set(modules.split())


def test_a_batch_run_imports_no_online_aggregation_code(tmp_path: Path) -> None:
    """The runner imported ``hop.online`` (~4 ms) for every step it submitted, between the cluster's start and the
    job's, to check an option a plain run does not give."""
    (tmp_path / "in.txt").write_text("a b a\n")
    argv = ["hop", "run", job_path("wordcount"), "in.txt", "-o", "out", "--workers", "1"]
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = {argv!r}\n"
        "from hop.prelaunch import main\n"
        "print(main()); print(' '.join(sorted(sys.modules)))\n"
    )
    code, modules = _modules_after(script, tmp_path)
    assert code == "0" and (tmp_path / "out" / "_SUCCESS").exists()
    assert "hop.runner" in modules
    assert not {name for name in modules if name.split(".")[:2] == ["hop", "online"]}


def test_the_launcher_imports_only_what_batch_jobs_on_its_cluster_use(tmp_path: Path) -> None:
    """The launcher imports the coordinator's and the worker's code before any run can start its job: the modules of
    continuous jobs (their options, windows and sources, ~7 ms), asyncio (~13 ms, for the link watch of a worker
    of a standalone cluster) and OpenSSL's hashes (``secrets``, for a random file name) came along."""
    script = (
        f"import os, sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from hop import cluster_launch\n"
        "read, write = os.pipe(); os.close(write)  # (no options come: it imports, then ends)\n"
        "print(cluster_launch.main(['--config-fd', str(read), '--report-fd', '1']))\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    code, modules = _modules_after(script, tmp_path)
    assert code == "0"
    assert {"hop.coordinator.server", "hop.worker", "hop.taskproc"} <= modules  # (what it is there to import)
    unneeded = {"asyncio", "hop.coordinator_link", "hop.stream.options", "hop.stream.sources", "secrets", "hmac"}
    assert not unneeded & modules
