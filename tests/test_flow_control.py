"""Adaptive flow control with a real, artificially slowed reducer: maps hold and merge spills, output is exact."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hop.client import Client
from hop.gen.text import generate_text
from hop.local_cluster import LocalCluster
from hop.protocol import unsent_spills
from shuffle.flow import FlowController
from shuffle.keys import order_tag
from shuffle.runs import encode_run, iter_run
from shuffle.spill import SpillFile, write_spill
from tests.conftest import run_job


@pytest.fixture()
def slow_reducer_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.setenv("HOP_TEST_SLOW_REDUCE_SECONDS", "0.4")
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        client = Client(cluster.address)
        yield client
        client.close()


class PeakMemory:
    """Samples the summed RSS of this process's children while a block runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            total = 0
            for child in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(0.05)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_slow_reducer_makes_maps_merge_spills(slow_reducer_client: Client, client: Client, tmp_path: Path) -> None:
    # The generic combiner (lists of values per key) spills every spill_records; a folding aggregate would spill
    # less and less often as its reduction shows (test_buffer.py), leaving flow control little to merge.
    source = tmp_path / "in.txt"
    generate_text(source, 1_500_000, seed=21, vocabulary=3000)
    settings = {"num_reduces": 2, "split_size": 750_000, "spill_records": 8_000}
    with PeakMemory() as memory:
        slowed = run_job(slow_reducer_client, "wordcount_generic", [source], tmp_path / "slow", **settings)
    normal = run_job(client, "wordcount_generic", [source], tmp_path / "normal", **settings)
    counters = slowed["counters"]
    assert counters["spills_held_back"] > 0, counters
    assert counters["spills_merged_map_side"] > 0, counters
    assert 0 < counters["max_spills_held"] <= 8, "held spills stay bounded (max_held)"
    assert slowed["ratios"]["map_merge_ratio"] < 1.0
    assert counters["spill_hold_seconds"] > 0
    assert counters["spills_pushed"] < 2 * counters["spill_files"], "fewer, merged spills were sent"
    assert counters["reduce_input_records"] < normal["counters"]["reduce_input_records"], "maps combined more"
    # Same output, byte for byte, as the run whose reducers kept up.
    assert [p.read_bytes() for p in sorted((tmp_path / "slow").glob("part-*"))] == [
        p.read_bytes() for p in sorted((tmp_path / "normal").glob("part-*"))
    ]
    assert normal["counters"]["map_output_records"] == counters["map_output_records"]
    # Bounded memory: the whole cluster (2 workers, their task processes, coordinator) stays small.
    assert memory.peak < 600 << 20, f"cluster peak RSS {memory.peak >> 20} MB"


def test_unsent_spills_counts_those_still_on_their_way_to_the_worker() -> None:
    # The worker had taken in spills 0..4 and 2 of them were unsent; the map has registered 8 (seqs 0..7).
    assert unsent_spills({"unsent": 2, "last_seq": 4}, 8) == 2 + 3
    assert unsent_spills({"unsent": 2, "last_seq": 7}, 8) == 2
    assert unsent_spills({"unsent": 0}, 8) == 0  # a status from before any spill names none on the way


def _spill(path: Path, words: list[str]) -> SpillFile:
    """A one-partition spill of ``(word, 1)`` pairs, sorted, as a map without a combiner writes it."""
    keys = sorted(words)
    return write_spill(path, [(encode_run(keys, [1] * len(keys)), len(keys), order_tag(keys))])


def test_held_spills_are_not_merged_into_an_ever_larger_one_when_merging_does_not_pay(tmp_path: Path) -> None:
    # Reducers that never catch up (the backlog stays above the threshold) and no combiner: the map must not keep
    # one held spill that every max_held-th spill is merged into (each merge decodes it whole: memory growing for
    # as long as the reducers lag). The held spills are registered as they are instead.
    registered: list[SpillFile] = []
    flow = FlowController(registered.append, lambda: 100, None, tmp_path, unsent_threshold=2, max_held=4)
    per_spill = 50
    for number in range(40):
        flow.offer(_spill(tmp_path / f"spill-{number:03d}.spill", [f"w{number}-{i}" for i in range(per_spill)]))
        assert len(flow.held) <= flow.max_held
        assert all(spill.records <= per_spill for spill in [*registered, *flow.held]), "a spill grew by merges"
    flow.finish()
    assert flow.counters.spills_merged_map_side == 0
    assert flow.counters.spills_held_back == 40
    records = [pair for spill in registered for pair in iter_run(spill.read_partition(0))]
    assert len(records) == 40 * per_spill and len(set(records)) == len(records), "every record once"


def test_a_held_merge_result_merged_again_counts_its_spills_once(tmp_path: Path) -> None:
    # A combiner that pays: at max_held the held spills are merged into one held spill, which a later merge takes
    # in again. spills_merged_map_side counts the map's spills that were merged, each once.
    registered: list[SpillFile] = []
    backlog = [100]
    flow = FlowController(
        registered.append, lambda: backlog[0], lambda key, values: [(key, sum(values))], tmp_path, max_held=4
    )
    for number in range(10):  # held 1..4 -> one merged; 5..7 and it again -> one merged; then two more held
        flow.offer(_spill(tmp_path / f"spill-{number:03d}.spill", [f"w{i}" for i in range(20)]))
    backlog[0] = 0
    flow.finish()
    assert len(registered) == 1
    assert flow.counters.spills_merged_map_side == 10
    assert dict(iter_run(registered[0].read_partition(0))) == {f"w{i}": 10 for i in range(20)}
