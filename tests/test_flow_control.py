"""Adaptive flow control with a real, artificially slowed reducer: maps hold and merge spills, output is exact."""

from __future__ import annotations

import contextlib
import functools
import itertools
import random
import threading
import time
import tracemalloc
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

import psutil
import pytest

from hop.aggregates import CountDistinct, Sum, TopK
from hop.client import Client
from hop.gen.text import generate_text
from hop.local_cluster import LocalCluster
from hop.protocol import unsent_spills
from shuffle.buffer import MapOutputBuffer
from shuffle.flow import FlowController, merge_spills
from shuffle.keys import MIXED, UNSORTED, combined_order, order_tag, total_order_key
from shuffle.runs import block_groups, encode_run, is_grouped, iter_run, iter_stored_blocks
from shuffle.spill import SpillFile, write_spill
from tests.conftest import run_job


@pytest.fixture()
def slow_reducer_cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalCluster]:
    monkeypatch.setenv("HOP_TEST_SLOW_REDUCE_SECONDS", "0.4")
    with LocalCluster(workers=2, map_slots=1, reduce_slots=1) as cluster:
        yield cluster


class PeakMemory:
    """Samples the summed RSS of ``cluster``'s processes (its launcher, which forked the coordinator and the
    workers, and all their descendants) while a block runs. Only those: other processes of the test session (a
    session-wide cluster, the JVM of a Spark session an earlier test started in this pytest process) are no part
    of what is measured, and would add hundreds of megabytes or not according to which tests ran before."""

    def __init__(self, cluster: LocalCluster) -> None:
        assert cluster.coordinator is not None, "the cluster is started"
        self._root = psutil.Process(cluster.coordinator.pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            total = 0
            with contextlib.suppress(psutil.Error):
                for process in [self._root, *self._root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        total += process.memory_info().rss
            self.peak = max(self.peak, total)
            time.sleep(0.05)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def test_slow_reducer_makes_maps_merge_spills(
    slow_reducer_cluster: LocalCluster, client: Client, tmp_path: Path
) -> None:
    # The generic combiner (lists of values per key) spills every spill_records; a folding aggregate would spill
    # less and less often as its reduction shows (test_buffer.py), leaving flow control little to merge.
    source = tmp_path / "in.txt"
    generate_text(source, 1_500_000, seed=21, vocabulary=3000)
    settings = {"num_reduces": 2, "split_size": 750_000, "spill_records": 8_000}
    slow_client = Client(slow_reducer_cluster.address)
    try:
        with PeakMemory(slow_reducer_cluster) as memory:
            slowed = run_job(slow_client, "wordcount_generic", [source], tmp_path / "slow", **settings)
    finally:
        slow_client.close()
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


# -- the map-side merge of held spills -------------------------------------------------------------------------


def _min_and_max(key: Any, values: list[Any]) -> list[tuple[Any, Any]]:
    """A generic combiner that may yield a key twice."""
    low, high = min(values), max(values)
    return [(key, low)] if low == high else [(key, low), (key, high)]


COMBINERS: dict[str, Any] = {"none": None, "sum": Sum(), "distinct": CountDistinct(), "generic": _min_and_max}


def _random_key(rng: random.Random, kind: str) -> Any:
    number = rng.randrange(60)
    return {
        "str": f"k{number}",
        "int": number,
        "tuple": (f"t{number % 7}", number),
        "mixed": rng.choice([None, number, f"k{number}", 0.5 * number, (number, None)]),
    }[kind]


def _random_spills(tmp_path: Path, rng: random.Random, combiner: Any, *, sort_runs: bool = True) -> list[SpillFile]:
    """Spills as a real map buffer writes them: 2 to 8 of them, over 4 partitions (some empty), with keys coming
    again across spills, each spill of one key kind (str, int, tuple or mixed, with None), so that partitions'
    order tags agree or differ."""
    buffer = MapOutputBuffer(tmp_path, 4, None, combiner, sort_runs=sort_runs, name=f"s{rng.random():.6f}")
    spills = []
    for _ in range(rng.randint(2, 8)):
        kind = rng.choice(["str", "int", "tuple", "mixed"])
        keys = [_random_key(rng, kind) for _ in range(rng.choice([0, 1, 5, 40, 300]))]
        buffer.collect([(key, rng.randrange(5)) for key in keys])
        spill = buffer.spill(force=True)
        assert spill is not None
        spills.append(spill)
    return spills


def _reference_merge(spills: list[SpillFile], combiner: Any) -> list[tuple[list[tuple[Any, Any]], str]]:
    """Per partition, the merged pairs and order tag, straightforwardly: every pair decoded, sorted stably in the
    total order (or folded in a dict, for unsorted runs), grouped, combined."""
    merged = []
    for partition in range(len(spills[0].partitions)):
        tags = [spill.partitions[partition].order_tag for spill in spills]
        pairs = [pair for spill in spills for pair in iter_run(spill.read_partition(partition))]
        if UNSORTED in tags:
            state: dict[Any, Any] = {}
            for key, value in pairs:
                state[key] = combiner.merge(state[key], value) if key in state else value
            merged.append((list(state.items()), UNSORTED))
            continue
        pairs.sort(key=lambda pair: total_order_key(pair[0]))
        groups = [(key, [value for _, value in group]) for key, group in itertools.groupby(pairs, key=itemgetter(0))]
        if combiner is None:
            out = [(key, value) for key, values in groups for value in values]
        elif hasattr(combiner, "merge"):
            out = [(key, functools.reduce(combiner.merge, values)) for key, values in groups]
        else:
            out = [pair for key, values in groups for pair in combiner(key, values)]
        known = [tag for tag in tags if tag != "empty"]
        tag = MIXED if combined_order(tags) is not None else (known[0] if known else "empty")
        merged.append((out, tag))
    return merged


@pytest.mark.parametrize("name", sorted(COMBINERS))
def test_a_map_side_merge_gives_what_merging_its_spills_in_memory_gives(tmp_path: Path, name: str) -> None:
    combiner = COMBINERS[name]
    rng = random.Random(f"merge-{name}")
    for trial in range(25):
        spills = _random_spills(tmp_path, rng, combiner)
        expected = _reference_merge(spills, combiner)
        merged = merge_spills(spills, tmp_path / f"merged-{trial}.spill", combiner)
        assert not any(spill.path.exists() for spill in spills), "the inputs are deleted"
        for partition, (pairs, tag) in enumerate(expected):
            entry = merged.partitions[partition]
            data = merged.read_partition(partition)
            assert list(iter_run(data)) == pairs, (trial, partition)
            assert (entry.records, entry.order_tag) == (len(pairs), tag), (trial, partition)
            if combiner is None:  # a grouped run, each key once (no key here has a block's worth of values)
                blocks = list(iter_stored_blocks(data))
                assert all(map(is_grouped, blocks))
                keys = [key for block in blocks for key, _ in block_groups(block)]
                assert len(keys) == len({total_order_key(key) for key in keys})
        assert SpillFile.open(merged.path) == merged


def test_a_map_side_merge_of_unsorted_runs_folds_them_in_the_order_they_come(tmp_path: Path) -> None:
    # A job whose aggregate's reducer folds runs unordered: the spills' runs are not sorted, the merge keeps the
    # order in which a dict folding the spills one after another first meets each key.
    rng = random.Random("unsorted")
    for trial in range(25):
        spills = _random_spills(tmp_path, rng, Sum(), sort_runs=False)
        expected = _reference_merge(spills, Sum())
        merged = merge_spills(spills, tmp_path / f"merged-{trial}.spill", Sum())
        for partition, (pairs, tag) in enumerate(expected):
            assert list(iter_run(merged.read_partition(partition))) == pairs, (trial, partition)
            assert (merged.partitions[partition].records, merged.partitions[partition].order_tag) == (len(pairs), tag)


def test_a_map_side_merge_of_unsorted_runs_holds_at_most_fold_keys_states(tmp_path: Path) -> None:
    # Past fold_keys states the dict is written out and started again: a key may come twice in the run, which its
    # folding reducer merges again; nothing is lost.
    runs = [
        (encode_run([f"k{i}" for i in range(start, start + 300)], [1] * 300), 300, UNSORTED) for start in (0, 200, 400)
    ]
    spills = [write_spill(tmp_path / f"{i}.spill", [run]) for i, run in enumerate(runs)]
    merged = merge_spills(spills, tmp_path / "merged.spill", Sum(), fold_keys=400)
    pairs = list(iter_run(merged.read_partition(0)))
    assert merged.partitions[0].records == len(pairs) == 300 + 400 + 100  # written out after the second spill
    totals: dict[str, int] = {}
    for key, value in pairs:
        totals[key] = totals.get(key, 0) + value
    assert totals == {f"k{i}": 1 + (200 <= i < 300) + (400 <= i < 500) for i in range(700)}


def test_a_map_side_merge_of_unsorted_runs_keeps_large_states_to_its_byte_budget(tmp_path: Path) -> None:
    """The merge's dict was bounded by keys only (200,000, as a folding map buffer was): four held spills of 2,000
    ``TopK`` states of 20 strings of 100 characters each, the same keys in each, folded into 2,000 states of 80
    strings (about 11 KB each) held at once: 29 MB at the merge's peak. It now writes its dict out at about
    ``fold_bytes`` of keys and states (1 MiB here: about a hundred keys; 7 MB at the peak, with the blocks read and
    written), and the written-out parts fold to the same states."""
    keys = [f"k{i:04d}" for i in range(2000)]
    spills = []
    for number in range(4):
        states = [tuple(f"{number}-{key}-{j:02d}".ljust(100, "v") for j in range(20)) for key in keys]
        spills.append(write_spill(tmp_path / f"{number}.spill", [(encode_run(keys, states), len(keys), UNSORTED)]))
    tracemalloc.start()
    try:
        merged = merge_spills(spills, tmp_path / "merged.spill", TopK(1000), fold_bytes=1 << 20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    pairs = list(iter_run(merged.read_partition(0)))
    assert len(pairs) > 4000, "the dict was not written out past its byte budget"
    assert peak < 12 << 20, f"{peak / 1e6:.1f} MB"
    folded: dict[str, Any] = {}
    for key, state in pairs:
        folded[key] = TopK(1000).merge(folded[key], state) if key in folded else state
    assert folded == {
        key: tuple(sorted((f"{n}-{key}-{j:02d}".ljust(100, "v") for n in range(4) for j in range(20)), reverse=True))
        for key in keys
    }


@pytest.mark.parametrize("name", ["none", "generic", "distinct"])
def test_a_map_side_merge_holds_a_block_per_spill_not_the_spills(tmp_path: Path, name: str) -> None:
    # Eight held spills of 12 MB of values each (large values: a buffer keeping lists spills at 256 MB of them):
    # the merge streams them, holding about a block (1 MiB) per spill and an output block, where decoding them
    # whole held them all, decoded, beside their bytes (370 MB at the peak).
    combiner = COMBINERS[name]
    spills = []
    for number in range(8):
        keys = [f"k{i:05d}" for i in range(number, 12000, 4)]  # keys shared across spills
        values = [f"{number}{key}".ljust(4000, "v") for key in keys]
        if name == "distinct":
            values = [(value,) for value in values]
        run = encode_run(keys, values)
        spills.append(write_spill(tmp_path / f"{number}.spill", [(run, len(keys), "s")]))
    total = sum(spill.size for spill in spills)
    assert total > 90 << 20
    tracemalloc.start()
    try:
        merged = merge_spills(spills, tmp_path / "merged.spill", combiner)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 24 << 20, f"peak {peak >> 20} MB merging {total >> 20} MB of spills"
    records_in = sum(spill.records for spill in spills)
    assert merged.records == {"none": records_in, "distinct": 12000, "generic": 2 * 12000 - 4}[name]
