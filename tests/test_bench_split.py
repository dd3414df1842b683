"""The benchmark's ``bare-split`` contender: its ranges cover every line once, its output is ``serial``'s, and the
report sets hop beside it."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from bench.contenders import BareSplit, RunSpec
from bench.runners.common import read_lines, read_range_lines
from bench.runners.split import line_ranges
from bench.stats import Row, Run
from bench.targets import paired_ratios, split_lines

REPO = Path(__file__).resolve().parent.parent


def _lines_read(ranges: list[tuple[str, int, int]]) -> list[str]:
    lines: list[str] = []
    for path, start, end in ranges:
        lines.extend(read_lines(path) if end < 0 else read_range_lines(path, start, end))
    return lines


@pytest.fixture
def inputs(tmp_path: Path) -> list[str]:
    """Files of uneven sizes: long and empty lines, CRLF, one with no final newline, an empty one, a gzip."""
    texts = [
        "".join(f"line {i} {'x' * (i * 7 % 40)}\n" for i in range(50)),
        "",
        "first\r\n\r\nthird é\r\nno newline at the end",
        "a\n" * 3,
    ]
    paths = []
    for number, text in enumerate(texts):
        path = tmp_path / f"in-{number}.txt"
        path.write_bytes(text.encode())
        paths.append(str(path))
    packed = tmp_path / "in-4.txt.gz"
    packed.write_bytes(gzip.compress("".join(f"packed {i}\n" for i in range(30)).encode()))
    paths.append(str(packed))
    return paths


@pytest.mark.parametrize("parts", [1, 2, 3, 5, 8, 40])
def test_the_ranges_hold_every_line_once_in_order(inputs: list[str], parts: int) -> None:
    everything = [line for path in inputs for line in read_lines(path)]
    split = line_ranges(inputs, parts)
    assert len(split) == parts
    assert [line for ranges in split for line in _lines_read(ranges)] == everything


def test_the_ranges_are_about_equal_in_bytes(tmp_path: Path) -> None:
    path = tmp_path / "even.txt"
    path.write_text("".join(f"{i:06d} some words here\n" for i in range(20_000)))
    sizes = [sum(end - start for _, start, end in ranges) for ranges in line_ranges([str(path)], 3)]
    assert max(sizes) - min(sizes) <= 2 * 23  # at most a line's length apart at each cut


def _run(module: str, job: str, out: Path, inputs: list[str], *options: str) -> str:
    command = [sys.executable, "-m", module, "--job", job, "--out", str(out), *options, *inputs]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_split_writes_what_the_one_process_run_writes(tmp_path: Path, inputs: list[str]) -> None:
    job = str(REPO / "jobs" / "wordcount.py")
    _run("bench.runners.serial", job, tmp_path / "serial", inputs)
    stdout = _run("bench.runners.split", job, tmp_path / "split", inputs, "--parallelism", "3")
    expected = (tmp_path / "serial" / "part-00000").read_text()
    assert "packed" in expected and '"a"\t3' in expected
    assert (tmp_path / "split" / "part-00000").read_text() == expected
    assert "BENCH-RESULT" in stdout.splitlines()[-1]


def test_a_job_without_an_aggregate_is_not_split(tmp_path: Path) -> None:
    def spec(job: str) -> RunSpec:
        return RunSpec(job, [], tmp_path / "out", (), None, 2)

    contender = BareSplit("bare-split", "bench.runners.split")
    assert contender.skip_reason(spec(str(REPO / "jobs" / "wordcount.py"))) is None
    reason = contender.skip_reason(spec(str(REPO / "tests" / "jobs" / "wordcount_generic.py")))
    assert reason and "aggregate" in reason


def _row(contender: str, walls: list[float | None]) -> Row:
    runs = [
        Run(
            seq=0,
            workload="w",
            case="c",
            contender=contender,
            repeat=repeat,
            input_bytes=1,
            wall_s=wall or 1.0,
            cpu_s=1.0,
            cpu_sampled_s=1.0,
            peak_rss_mb=1.0,
            returncode=0 if wall else 1,
        )
        for repeat, wall in enumerate(walls)
    ]
    return Row("w", "c", contender, runs)


def test_the_report_pairs_each_repeat_and_sets_hop_beside_the_split() -> None:
    hop = _row("hop-pipelined", [4.0, 6.0, 5.0])
    split = _row("bare-split", [4.0, 5.0, None])  # the third repeat failed: no pair for it
    serial = _row("serial", [8.0, 8.0, 10.0])
    assert paired_ratios(hop, split) == [1.0, 1.2]
    lines = split_lines([hop, split, serial])
    assert lines[0].startswith("c: bare-split / serial = 4.50 s / 8.00 s = 0.562 (the plain split against one process)")
    assert lines[0].endswith("0.500 0.625 (median 0.562)")
    assert lines[1].startswith("c: hop-pipelined / bare-split = 5.00 s / 4.50 s = 1.111 (hop against the plain split)")
    assert split_lines([hop, serial]) == []
