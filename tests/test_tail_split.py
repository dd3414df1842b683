"""Tail splitting over real processes: a map slot idle at the end of the maps takes the rest of a straggling map's
input (``hop.scheduler``, ``hop.inputs.ReadLimit``); every line is counted once, whatever fails."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hop.client import Client
from hop.gen.text import generate_text
from hop.local_cluster import LocalCluster
from tests.conftest import output_dict, run_job


def _inputs(folder: Path) -> tuple[list[str], Counter[str], int]:
    """A fast file and a slow one (``tests/jobs/slow_file_map.py``: 3 ms a line, about 3 s), each a map of its own."""
    folder.mkdir()
    generate_text(folder / "fast.txt", 60_000, seed=1, vocabulary=300)
    generate_text(folder / "slow-b.txt", 60_000, seed=2, vocabulary=300)
    words: Counter[str] = Counter()
    lines = 0
    for path in folder.iterdir():
        text = path.read_text(encoding="utf-8")
        words.update(text.split())
        lines += len(text.splitlines())
    return [str(folder / "*.txt")], words, lines


def _run(client: Client, inputs: list[str], output: Path, **options: Any) -> dict[str, Any]:
    # split_size: a map per file (smaller files would share one)
    return run_job(client, "slow_file_map", inputs, output, num_reduces=2, split_size=50_000, options=options)


def _map_attempts(report: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(a["task_id"], a["attempt"], a["status"]) for a in report["attempts"] if a["kind"] == "map"]


def test_an_idle_slot_takes_the_rest_of_a_straggling_map_and_every_line_counts_once(
    client: Client, tmp_path: Path
) -> None:
    inputs, words, lines = _inputs(tmp_path / "in")
    report = _run(client, inputs, tmp_path / "out")
    assert report["tail_splits"] >= 1 and report["num_maps"] == 2 + report["tail_splits"]
    assert all(status == "succeeded" for _, _, status in _map_attempts(report))
    assert output_dict(tmp_path / "out") == dict(words)
    assert report["counters"]["map_input_records"] == lines
    # The rest went to the slot the fast map had: the slow map's split was cut, and both parts read lines.
    attempts = {a["task_id"]: a for a in report["attempts"] if a["kind"] == "map"}
    assert attempts["map-00002"]["start"] < attempts["map-00001"]["end"]


def test_no_tail_split_keeps_one_map_per_split(client: Client, tmp_path: Path) -> None:
    inputs, words, _ = _inputs(tmp_path / "in")
    report = _run(client, inputs, tmp_path / "out", tail_split=False)
    assert (report["num_maps"], report["tail_splits"]) == (2, 0)
    assert output_dict(tmp_path / "out") == dict(words)


def test_a_map_with_init_or_final_hooks_is_not_split(client: Client, tmp_path: Path) -> None:
    """A map whose step has ``mapper_init``/``mapper_final`` was split like any other: its rest became a map of its
    own, whose hooks ran again, so a ``mapper_final`` reporting its map (how many maps ran, what each counted) gave
    another output from one run to the next, as the straggler was split or not, and than ``--engine spark``, which
    runs the maps planned. Such a map declines, for good: its hooks run once per map planned."""
    inputs, words, lines = _inputs(tmp_path / "in")
    report = run_job(client, "slow_file_hooked_map", inputs, tmp_path / "out", num_reduces=2, split_size=50_000)
    assert (report["num_maps"], report["tail_splits"]) == (2, 0)
    assert output_dict(tmp_path / "out") == {**words, "~maps": 2, "~lines": lines}


@pytest.mark.parametrize("index", [1, 2], ids=["the map that split", "the map of its rest"])
def test_a_map_failing_after_a_split_is_retried_on_its_part_only(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slow map's first attempt, or the first attempt of the map made of its rest, is killed once it has read
    its input: the retry reads that part only (the split's end was moved when it split), so no line counts twice or
    is lost."""
    inputs, words, lines = _inputs(tmp_path / "in")
    monkeypatch.setenv("HOP_FAULT", f"map:done:{index}")
    with LocalCluster(workers=2, map_slots=1, reduce_slots=2) as cluster:
        client = Client(cluster.address, timeout=30)
        try:
            report = _run(client, inputs, tmp_path / "out")
        finally:
            client.close()
    assert report["tail_splits"] >= 1
    assert (f"map-{index:05d}", 0, "failed") in _map_attempts(report), "the fault should have fired"
    assert (f"map-{index:05d}", 1, "succeeded") in _map_attempts(report)
    assert output_dict(tmp_path / "out") == dict(words)
    assert report["counters"]["map_input_records"] == lines
