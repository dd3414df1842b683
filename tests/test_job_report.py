"""``OUT/_job.json`` is written whole (``hop.outputs.write_job_report``): a reader sees the old report or the new one,
never half of one, whoever writes it (the coordinator, ``hop run`` after its steps or a hung coordinator)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from hop.client import Client
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.outputs import JOB_REPORT, write_job_report
from tests.conftest import job_path, maps_running


def _leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir() if path.name.startswith(f".{JOB_REPORT}"))


def test_a_report_replaces_the_old_one_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    """The report was written in place (truncated, then filled): a reader that opened it meanwhile read half a
    report, or none. It is renamed over the old one: the old file stays whole for who holds it."""
    write_job_report(tmp_path, {"status": "running", "n": 1})
    with open(tmp_path / JOB_REPORT, encoding="utf-8") as held:  # a reader that opened the old report
        assert write_job_report(tmp_path, {"status": "succeeded", "rows": list(range(10_000))})
        assert json.loads(held.read()) == {"status": "running", "n": 1}, "the old report was overwritten in place"
    assert json.loads((tmp_path / JOB_REPORT).read_text(encoding="utf-8"))["status"] == "succeeded"
    assert _leftovers(tmp_path) == []
    mode = stat.S_IMODE((tmp_path / JOB_REPORT).stat().st_mode)
    assert mode == 0o666 & ~_umask(), f"readable as any file the user writes, not {oct(mode)}"


def test_a_report_that_must_not_replace_keeps_the_one_there(tmp_path: Path) -> None:
    """``replace=False`` (``hop run``'s report for a job its hung coordinator did not end): the coordinator's own
    report, already there, wins; with none there it is written whole."""
    assert write_job_report(tmp_path, {"written_by": "hop run"}, replace=False)
    assert not write_job_report(tmp_path, {"written_by": "someone else"}, replace=False)
    assert json.loads((tmp_path / JOB_REPORT).read_text(encoding="utf-8")) == {"written_by": "hop run"}
    assert _leftovers(tmp_path) == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_coordinator_renames_its_report_into_place(client: Client, tmp_path: Path) -> None:
    """The coordinator wrote ``_job.json`` in place: ``hop status`` or the web view reading it meanwhile could read
    half a report. A file planted as ``_job.json`` while the job runs (and linked elsewhere) keeps its content:
    the report is a new file renamed over it."""
    from hop.runner import build_spec

    source = tmp_path / "in.txt"
    generate_text(source, 200_000, seed=46, vocabulary=100)
    output = tmp_path / "out"
    spec = build_spec(load_job_file(job_path("slow_map")), [str(source)], str(output))
    job_id = client.submit(spec)
    deadline = time.monotonic() + 30
    while not maps_running(client):
        assert time.monotonic() < deadline, "the job's maps never ran"
        time.sleep(0.05)
    (output / JOB_REPORT).write_text("planted\n", encoding="utf-8")
    os.link(output / JOB_REPORT, tmp_path / "planted")
    client.stop(job_id, "cancelled by the test")
    assert client.wait(job_id, timeout=30)["state"] == "failed"
    assert (tmp_path / "planted").read_text(encoding="utf-8") == "planted\n", "the report was written in place"
    report = json.loads((output / JOB_REPORT).read_text(encoding="utf-8"))
    assert report["job_id"] == job_id and report["error"] == "cancelled by the test"
    assert _leftovers(output) == []


def test_a_report_no_disk_can_hold_fails_the_run_saying_so(tmp_path: Path) -> None:
    """A job whose parts were written but whose ``_job.json`` could not be (a full disk: here a file size limit,
    EFBIG, that the parts and spills of a small input pass and a report does not) left its parts, no report and no
    ``_SUCCESS``; the coordinator said why on its own stderr only, and ``hop run`` ended on the traceback of its own
    try at the report. The job fails, as any whose output cannot be marked whole: its parts go (which may make room
    for the report, not here), and the run's error says that and that ``OUT`` has no report, exit code 1."""
    import resource
    import signal
    import subprocess
    import sys

    def limited() -> None:  # (in hop run and its embedded cluster: a write past 1,000 bytes fails with EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000, 1_000))

    (tmp_path / "in.txt").write_text("a b\nb c\n", encoding="utf-8")
    out = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "run", job_path("wordcount"), "in.txt", "-o", str(out), "--quiet"]
    environment = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    result = subprocess.run(
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120, preexec_fn=limited
    )
    assert result.returncode == 1, result.stderr
    report = out / JOB_REPORT
    unwritten = (
        f"cannot write output file {report}: File too large; free space (or quota) on the output directory's file "
        "system, or write the output elsewhere (-o)"
    )
    error = result.stderr.splitlines()[-1]
    assert error == (
        f"hop: error: job failed: the job ran to its end, but {unwritten}; without it the output is incomplete: the "
        f"job failed and its part files were removed; {out} has no _job.json"
    ), result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not out.exists(), list(out.iterdir())  # (no part taken for a whole result: OUT, left empty, is removed)
