"""Differential: a job's output on the engine equals its own functions run serially in this process, over inputs
made to trip line reading (byte order marks, CRLF and lone CR, Unicode line separators Python's ``splitlines``
splits on, NUL bytes, a line longer than a split, no final newline, empty and compressed files) and key grouping
(``1``, ``1.0`` and ``True`` are one key, ``-0.0`` and ``0.0`` too), cut into many splits and spills."""

from __future__ import annotations

import gzip
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from tests.conftest import run_job
from tests.jobs.lines_and_keys import word_keys

PIECES = ["a", "é", "日本", "😀", "e\u0301", " ", "\t", "\r", "\x00", "\ufeff"]
LINE_BREAKS_OF_SPLITLINES = ["\u2028", "\u2029", "\x85", "\x0b", "\x1c"]
"""Characters ``str.splitlines`` ends lines at, which are no line ends in a text input: only ``\\n`` is."""


def tricky_text(rng: random.Random, lines: int) -> str:
    """``lines`` lines of random pieces, with random line ends; one of them longer than a split."""
    out = ["\ufeff"]
    for number in range(lines):
        line = (
            "L" * 100_000
            if number == lines // 2
            else "".join(rng.choice(PIECES + LINE_BREAKS_OF_SPLITLINES) for _ in range(rng.randint(0, 30)))
        )
        out.append(line + rng.choice(["\n", "\r\n", "\n", "\r\r\n"]))
    out.append("last, without a newline\r")
    return "".join(out)


def serial_lines(path: Path) -> list[tuple[int, str]]:
    """``(byte offset, line)`` of a file as the engine reads text: lines end at ``\\n`` only, without a final
    ``\\r``; a byte order mark at the start is no part of the first line."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    position = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    lines = []
    while position < len(data):
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end
        line = data[position:end].decode("utf-8")
        lines.append((position, line[:-1] if line.endswith("\r") else line))
        position = end + 1
    return lines


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tricky")
    rng = random.Random(20)
    (folder / "big.txt").write_bytes(tricky_text(rng, 12_000).encode("utf-8"))
    (folder / "small.txt").write_bytes(tricky_text(rng, 40).replace("L" * 100_000, "short").encode("utf-8"))
    (folder / "empty.txt").write_bytes(b"")
    (folder / "crlf.txt.gz").write_bytes(gzip.compress(b"one two\r\nthree\r\n\r\n"))
    return folder


@pytest.mark.parametrize(
    "settings",
    [
        {"mode": "pipelined", "num_reduces": 3, "split_size": 64_000, "spill_records": 500},
        {"mode": "blocking", "num_reduces": 1, "spill_records": 7_000},
    ],
    ids=["pipelined-many-splits", "blocking-one-reducer"],
)
def test_output_equals_the_jobs_functions_run_serially(
    client: Client, inputs: Path, tmp_path: Path, settings: dict[str, Any]
) -> None:
    report = run_job(client, "lines_and_keys", [inputs], tmp_path / "out", **settings)
    lines: dict[tuple[str, int], str] = {}
    counts: dict[Any, int] = {}
    for path in sorted(inputs.iterdir()):
        for offset, line in serial_lines(path):
            lines[(path.name, offset)] = line
            for word in line.split():
                for key in word_keys(word):
                    counts[key] = counts.get(key, 0) + 1
    written = [
        (json.loads(key), json.loads(value))
        for part in sorted((tmp_path / "out").glob("part-*"))
        # (split at "\n" only: a value holds U+2028 and its kin as they are, where str.splitlines would split)
        for key, value in (line.split("\t") for line in part.read_text(encoding="utf-8").split("\n")[:-1])
    ]
    is_line = [isinstance(key, list) and key[:1] == ["line"] for key, _ in written]
    got_lines = Counter((key[1], key[2], value) for (key, value), line in zip(written, is_line, strict=True) if line)
    assert got_lines == Counter((name, offset, line) for (name, offset), line in lines.items())
    got_counts = [
        (tuple(key) if isinstance(key, list) else key, value)
        for (key, value), line in zip(written, is_line, strict=True)
        if not line
    ]
    assert len(got_counts) == len(counts), "keys equal in Python are one key, each written once"
    assert {key: value for key, value in got_counts} == counts
    assert report["num_maps"] > (5 if settings.get("split_size") else 0)
