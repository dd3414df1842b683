"""Unmodified mrjob jobs (mrjob's own shipped examples) on hop, against mrjob's inline runner on the same input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

mrjob = pytest.importorskip("mrjob", reason="mrjob is a dev dependency: pip install -e '.[dev]'")

from hop.gen.text import generate_text  # noqa: E402
from hop.mrjob_adapter import load_mrjob_file  # noqa: E402

EXAMPLES = Path(mrjob.__file__).parent / "examples"
TIMEOUT = 180


def mrjob_inline(job_file: Path, source: Path, *job_args: str) -> list[str]:
    """What mrjob itself outputs: its inline runner, the output as lines of its OUTPUT_PROTOCOL."""
    job_class = load_mrjob_file(str(job_file))
    cwd = os.getcwd()
    os.chdir(job_file.parent)  # FILES are found relative to the job under the inline runner
    try:
        job = job_class(args=["-r", "inline", "--no-conf", *job_args, str(source)])
        with job.make_runner() as runner:
            runner.run()
            lines = [line.decode("utf-8").rstrip("\r\n") for line in runner.cat_output() if line.strip()]
    finally:
        os.chdir(cwd)
    return sorted(lines)


def hop_mrjob(job_file: Path, source: Path, output: Path, *job_args: str, module: bool = False) -> list[str]:
    command = [sys.executable, "-m", "hop.mrjob"] if module else [sys.executable, "-m", "hop", "run", "--mrjob"]
    command += [str(job_file), str(source), "-o", str(output), "--workers", "2", "--quiet", "--split-size", "300KB"]
    if job_args:
        command += ["--", *job_args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    return sorted(line for part in sorted(output.glob("part-*")) for line in part.read_text().splitlines())


@pytest.fixture(scope="module")
def text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("mrjob") / "text.txt"
    generate_text(source, 1_000_000, seed=51, vocabulary=3000)
    return source


@pytest.mark.parametrize(
    "example",
    ["mr_word_freq_count.py", "mr_wc.py", "mr_most_used_word.py", "mr_next_word_stats.py", "mr_count_lines_right.py"],
)
def test_mrjob_examples_match_mrjobs_inline_runner(example: str, text: Path, tmp_path: Path) -> None:
    expected = mrjob_inline(EXAMPLES / example, text)
    assert expected, "mrjob produced output"
    assert hop_mrjob(EXAMPLES / example, text, tmp_path / "out") == expected


def test_command_steps_are_refused_clearly(text: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", "--mrjob", str(EXAMPLES / "mr_grep.py"), str(text), "-o"]
        + [str(tmp_path / "out"), "--", "--expression", "ing"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode != 0 and "mapper_cmd" in result.stderr


def test_passthrough_option_counters_and_module_entry_point(text: Path, tmp_path: Path) -> None:
    job = tmp_path / "mr_counting.py"
    job.write_text(
        "from mrjob.job import MRJob\n"
        "from mrjob.step import MRStep\n\n"
        "class MRCounting(MRJob):\n"
        "    def configure_args(self):\n"
        "        super().configure_args()\n"
        "        self.add_passthru_arg('--min-length', type=int, default=1)\n\n"
        "    def mapper(self, _, line):\n"
        "        for word in line.split():\n"
        "            if len(word) >= self.options.min_length:\n"
        "                self.increment_counter('words', 'long', 1)\n"
        "                yield len(word), 1\n"
        "        self.set_status('mapping')\n\n"
        "    def reducer(self, length, counts):\n"
        "        yield length, sum(counts)\n"
    )
    expected = mrjob_inline(job, text, "--min-length", "6")
    assert hop_mrjob(job, text, tmp_path / "out", "--min-length", "6", module=True) == expected
    report = (tmp_path / "out" / "_job.json").read_text()
    long_words = sum(int(line.split("\t")[1]) for line in expected)
    assert f'"long": {long_words}' in report, "increment_counter reaches hop's user counters"


def test_bad_job_arguments_are_a_clear_error(text: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hop", "run", "--mrjob", str(EXAMPLES / "mr_word_freq_count.py"), str(text), "-o"]
        + [str(tmp_path / "out"), "--", "--no-such-option"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert result.returncode == 2 and "bad job arguments" in result.stderr
