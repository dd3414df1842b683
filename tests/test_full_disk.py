"""A full output disk under the coordinator's own files and under a whole run: each says which file and what to do.

A full disk is simulated as the other full-disk tests do (``tests/test_faults.py``, ``tests/test_gen.py``): with a file
size limit (RLIMIT_FSIZE, SIGXFSZ ignored), past which a write fails with EFBIG as it would with ENOSPC. A run on a
really full file system takes a small tmpfs, mounted in a mount namespace of its own (``unshare``): as root, or as a
user where the kernel lets users make namespaces; elsewhere that test is skipped, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hop.client import Client
from hop.coordinator import Coordinator
from tests.conftest import ROOT, TEST_JOBS, submit_to_handlers


@contextlib.contextmanager
def _file_size_limit(limit: int) -> Iterator[None]:
    """Writes of this process past ``limit`` bytes fail with EFBIG meanwhile (a soft limit: restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


def test_a_window_summary_a_full_disk_cannot_hold_fails_the_job_naming_it(
    coordinator: Coordinator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The coordinator writes a window's ``_window.json`` once every partition wrote its part: a full disk there
    raised ``OSError: [Errno 27] File too large`` out of the handler, which failed the job as an internal error of
    the coordinator, with its traceback. It fails the job naming the file and what to do; its ``_job.json``, which
    the disk cannot hold either, is said to be missing in the same error, the one its client shows."""
    source, output = tmp_path / "in.txt", tmp_path / "out"
    source.write_text("a b a\n")
    job_id = submit_to_handlers(coordinator, source, output)  # (a batch job: the write is the same for any job)
    job = coordinator.jobs[job_id]
    summary = {"label": "w1", "seq": 1, "rows": [], "records": 3, "scoreboard": ["D" * 200]}
    with _file_size_limit(100):  # (the coordinator's stderr is capsys's, in memory: not a file under the limit)
        coordinator._write_window_json(job, summary)
    remedy = "free space (or quota) on the output directory's file system, or write the output elsewhere (-o)"
    assert job.state == "failed", job.error
    assert job.error == (
        f"window w1: cannot write output file {output}/windows/w1/_window.json: File too large; {remedy}; its parts "
        "are written but not its _window.json, so the job failed (the windows before it are complete); and cannot "
        f"write output file {output}/_job.json: File too large; {remedy}, so {output} has no _job.json"
    )
    assert "Traceback" not in capsys.readouterr().err
    assert sorted(path.name for path in output.rglob("*")) == ["w1", "windows"]  # (no half-written file)


def _namespace_command() -> list[str] | None:
    """The command that runs another in a mount namespace of its own, where it may mount a tmpfs; ``None`` where
    none can be made (no ``unshare``, not Linux, a kernel that lets no user make one)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return None
    command = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-Urm"]
    probe = subprocess.run([*command, "true"], capture_output=True, timeout=30)
    return command if probe.returncode == 0 else None


_ON_A_SMALL_TMPFS = """
mkdir -p "$1" && mount -t tmpfs -o size="$2" tmpfs "$1" || exit 99
if [ -n "$FILL" ]; then dd if=/dev/zero of="$1/filler" bs=4096 2>/dev/null; fi
shift 2
"$@"
code=$?
ls -A "$OUT" > "$LISTING" 2>/dev/null
exit $code
"""


def _run_on_a_full_disk(
    tmp_path: Path, size: str, *hop_args: str, filled: bool = False
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``hop ARGS...`` writing its output ``OUT`` (the last argument) on a tmpfs of ``size`` of its own (``filled``
    before it starts), gone with its namespace once it ends: its result, and ``OUT``'s names as the run left them,
    one a line."""
    namespace = _namespace_command()
    if namespace is None:
        pytest.skip("needs a mount namespace of its own for a small tmpfs (unshare as root, or user namespaces)")
    mount = tmp_path / "disk"
    listing = tmp_path / "listing"
    environment = {**os.environ, "OUT": hop_args[-1], "LISTING": str(listing), "PYTHONPATH": str(ROOT)}
    environment["FILL"] = "1" if filled else ""
    hop = [sys.executable, "-m", "hop", *hop_args]
    command = [*namespace, "sh", "-c", _ON_A_SMALL_TMPFS, "sh", str(mount), size, *hop]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    if result.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs in a namespace of its own: {result.stderr.strip()}")
    return result, listing


def test_a_continuous_job_on_a_full_output_disk_fails_naming_the_file(tmp_path: Path) -> None:
    """A continuous job whose output disk fills (a real one: a tmpfs of 48 KiB) fails, naming the file it could not
    write (a window's part or ``_window.json``, a checkpoint, its ``_job.json``: which comes first depends on
    timing) and what to do, exit code 1, no traceback. It was an ``OSError: [Errno 28]`` and a traceback (a part,
    a checkpoint) or an internal error of the coordinator (a ``_window.json``), and ``hop run`` did not say that
    ``OUT`` had no ``_job.json``."""
    events = tmp_path / "events.jsonl"
    stamp = 1_700_000_000.0
    with events.open("w", encoding="utf-8") as file:
        for number in range(3000):  # (a word list of some 400 stamps a window, per word: far past 48 KiB in all)
            stamp += 0.01
            file.write(json.dumps({"ts": round(stamp, 3) + 0.0004, "text": f"w{number % 10} w{number % 7}"}) + "\n")
    out = str(tmp_path / "disk" / "out")
    job = str(TEST_JOBS / "stream_events.py")
    window = ["--window", "4s", "--slide", "2s", "--no-view", "--max-attempts", "2"]
    result, listing = _run_on_a_full_disk(
        tmp_path, "48k", "run", job, "--job-class", "EventWordLists", "--source", f"replay:{events}", *window, "-o", out
    )
    assert result.returncode == 1, result.stderr
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("hop: error: job failed: "), result.stderr
    assert f"cannot write output file {out}/" in error and ": No space left on device; free space" in error, error
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr, result.stderr
    if "_job.json" not in listing.read_text():
        assert f"{out} has no _job.json" in error, error


def test_a_batch_job_whose_report_a_full_disk_cannot_hold_fails_and_leaves_its_report(tmp_path: Path) -> None:
    """A job whose parts fill its output disk (a tmpfs just large enough for them) left them without ``_job.json``
    or ``_SUCCESS``, and ``hop run`` ended on a traceback. It fails saying so; its parts are removed as a failed
    job's are, which makes room for ``_job.json``, written then, saying why."""
    lines = "".join(f"{'w' * 40}{number} x\n" for number in range(3000))  # (parts of 2 x some 72 KiB)
    (tmp_path / "in.txt").write_text(lines, encoding="utf-8")
    out = str(tmp_path / "disk" / "out")
    args = ["run", str(ROOT / "jobs" / "wordcount.py"), str(tmp_path / "in.txt"), "--reducers", "2", "-o", out]
    # The smallest tmpfs (in pages) whose room the parts fit: the report, a page more, does not fit then. (Smaller,
    # a reduce fails as it writes its part: the test of that is tests/test_faults.py's.)
    for size in range(136, 176, 4):
        result, listing = _run_on_a_full_disk(tmp_path, f"{size}k", *args)
        if "_temporary/part-" not in result.stderr:
            break
    assert result.returncode == 1, result.stderr
    assert "the job ran to its end, but" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert f"cannot write output file {out}/_job.json: No space left on device; free space" in result.stderr
    assert listing.read_text().split() == ["_job.json"]


def test_a_run_whose_output_disk_is_full_as_it_starts_says_to_free_space(tmp_path: Path) -> None:
    """A run whose output's file system is full before it starts cannot make its scratch folder beside the output:
    it said to "choose an output directory in a folder this user can write", a permission's remedy. It says to free
    space or write the output elsewhere, exit code 2, before the job starts."""
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    out = str(tmp_path / "disk" / "out")
    args = ["run", str(ROOT / "jobs" / "wordcount.py"), str(tmp_path / "in.txt"), "-o", out]
    result, _ = _run_on_a_full_disk(tmp_path, "64k", *args, filled=True)
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            f"in {tmp_path / 'disk'} (No space left on device): free space (or quota) on its file system, or write the "
            "output elsewhere (-o)"
        )
    ), result.stderr


MRJOB_WORD_COUNT = """
from mrjob.job import MRJob


class MRWords(MRJob):
    def mapper(self, _, line):
        for word in line.split():
            yield word, 1

    def reducer(self, word, counts):
        yield word, sum(counts)
"""


@pytest.mark.parametrize("limit", [20_000, 1_000], ids=["report-fits", "report-too"])
def test_an_mrjob_output_a_full_disk_cannot_rewrite_fails_the_run_naming_the_part(
    client: Client, tmp_path: Path, limit: int
) -> None:
    """The ``hop`` that submits an mrjob job rewrites its parts in the job's OUTPUT_PROTOCOL once it succeeded: a
    full disk there (``hop submit``'s own writes limited; the cluster's are not) ended on a traceback, left a
    half-written hidden copy of the part, and ``_job.json`` said the job succeeded. The run fails naming the part and
    what to do, exit code 1; the parts are removed, and ``_job.json`` says why, or, if it cannot be written either
    (``report-too``), is removed and the error says so."""
    pytest.importorskip("mrjob")
    job = tmp_path / "mr_words.py"
    job.write_text(MRJOB_WORD_COUNT)
    (tmp_path / "in.txt").write_text("".join(f"word{number} x\n" for number in range(3000)))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "hop", "submit", "--mrjob", str(job), "in.txt", "-o", str(out), "--quiet"]
    command += ["--coordinator", client.address, "--reducers", "1"]

    def limited() -> None:  # (in the child, before it runs hop)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120, preexec_fn=limited)
    remedy = "free space (or quota) on the output directory's file system, or write the output elsewhere (-o)"
    reason = (
        f"the job ran to its end, but cannot write output file {out}/part-00000: File too large; {remedy}; without it "
        "the output is incomplete: the job failed and its part files were removed"
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    if limit > 2_000:
        assert result.stderr.strip().splitlines()[-1] == f"hop: error: job failed: {reason}", result.stderr
        assert sorted(path.name for path in out.iterdir()) == ["_job.json"]
        report = json.loads((out / "_job.json").read_text())
        assert (report["status"], report["error"]) == ("failed", reason)
    else:
        unwritten = f"cannot write output file {out}/_job.json: File too large; {remedy}: {out} has no _job.json"
        assert result.stderr.strip().splitlines()[-1] == f"hop: error: job failed: {reason}; and {unwritten}"
        assert list(out.iterdir()) == []
