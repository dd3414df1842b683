"""The folding reduce store and the built-in aggregates, without processes."""

from __future__ import annotations

import collections
import random
import tracemalloc
from pathlib import Path

import pytest

from hop.aggregates import Count, Max, Mean, Min, Sum, TopK
from shuffle.fold import FoldingRunStore
from shuffle.merge import group_sorted
from shuffle.runs import BLOCK_RECORDS, RunWriter, encode_run


def run_of(pairs: dict[str, object]) -> bytes:
    keys = sorted(pairs)
    return encode_run(keys, [pairs[k] for k in keys])


def finished(store: FoldingRunStore, aggregate: object) -> dict[object, object]:
    reducer = aggregate.as_reducer()  # type: ignore[attr-defined]
    return {k: v for key, values in group_sorted(store.sorted_pairs()) for k, v in reducer(key, values)}


def test_tentative_runs_fold_only_on_commit(tmp_path: Path) -> None:
    store = FoldingRunStore(tmp_path, Sum())
    store.add(0, 0, 0, run_of({"a": 1, "b": 2}), 2, "s")
    assert store.state == {}
    store.add(0, 1, 0, run_of({"a": 100}), 1, "s")  # a competing attempt
    store.commit(0, 0, spills=2)
    assert store.state == {}, "a committed attempt is folded only once all its runs are here"
    store.add(0, 0, 1, run_of({"b": 5, "c": 1}), 2, "s")  # the last run arrives after the commit
    assert store.state == {"a": 1, "b": 7, "c": 1}
    assert store.missing(1) == 0
    assert store.dropped_runs == 1 and store.memory_bytes == 0
    store._check()
    store.add(0, 1, 1, run_of({"a": 100}), 1, "s")  # the loser's late run is dropped
    assert store.state["a"] == 1
    store._check()
    store.close()


def test_lost_attempt_is_kept_when_complete_and_dropped_when_not(tmp_path: Path) -> None:
    store = FoldingRunStore(tmp_path, Sum())
    store.add(0, 0, 0, run_of({"a": 1}), 1, "s")
    store.commit(0, 0, spills=1)
    store.add(1, 0, 0, run_of({"a": 10}), 1, "s")
    store.commit(1, 0, spills=2)  # one of two runs here
    store.lost(0, 0)  # complete: kept, and the rerun's commit and runs are ignored
    store.lost(1, 0)  # incomplete: dropped, the rerun's output is awaited
    assert store.missing(2) == 1
    store.commit(0, 1, spills=1)
    store.add(0, 1, 0, run_of({"a": 1}), 1, "s")
    store.add(1, 1, 0, run_of({"a": 10}), 1, "s")
    store.add(1, 1, 1, run_of({"a": 100}), 1, "s")
    store.commit(1, 1, spills=2)
    store._check()
    assert store.missing(2) == 0
    assert finished(store, Sum()) == {"a": 111}
    store.close()


def test_state_dumps_to_disk_past_the_key_budget_and_stays_exact(tmp_path: Path) -> None:
    rng = random.Random(4)
    store = FoldingRunStore(tmp_path, Sum(), max_keys=50)
    expected: collections.Counter[str] = collections.Counter()
    for task in range(20):
        pairs = {f"k{rng.randrange(300):03d}": rng.randrange(10) for _ in range(40)}
        expected.update(pairs)
        store.add(task, 0, 0, run_of(pairs), len(pairs), "s")
        store.commit(task, 0, spills=1)
        store._check()
    assert list(tmp_path.glob("folded-*")), "the state should have been dumped to disk"
    assert finished(store, Sum()) == {k: v for k, v in expected.items()}
    store.close()
    assert not list(tmp_path.iterdir())


def test_a_folding_stores_input_fraction_counts_its_dumped_keys(tmp_path: Path) -> None:
    """With its state dumped to disk, the groups it hands out are at most the keys in memory plus those dumped (a
    key dumped twice is one group): the fraction rises with the groups taken and ends at 1 or just under it."""
    store = FoldingRunStore(tmp_path, Sum(), max_keys=50)
    for task in range(10):
        pairs = {f"k{(task * 37 + n) % 400:03d}": 1 for n in range(40)}
        store.add(task, 0, 0, run_of(pairs), len(pairs), "s")
        store.commit(task, 0, spills=1)
    assert store._dumps, "the state should have been dumped to disk"
    fractions = [store.input_fraction(taken) for taken, _ in enumerate(store.grouped(), start=1)]
    assert len(fractions) == 373 and fractions == sorted(fractions) and 0.9 < fractions[-1] <= 1.0, fractions[-1]
    assert 0.4 < fractions[len(fractions) // 2] < 0.6
    store.close()


def test_folding_keeps_to_its_budget_with_a_large_run_of_distinct_keys(tmp_path: Path) -> None:
    """A map attempt's runs may hold many more distinct keys than the store's ``max_keys``, in a run file larger than
    its whole budget: the store folds the file as it streams it, dumps its map as soon as it passes ``max_keys``
    (not once all the attempt's runs are folded) and merges its dumps ``fan_in`` at a time before the reduce reads
    them. Before, this store read the run whole and took all 40,000 keys into its map (5.4 MB), then merged its
    dumps all at once (6.4 MB)."""
    run = tmp_path / "run-000001.run"
    writer = RunWriter(run)
    for number in range(40_000):
        writer.add(f"w{number:08d}", 1 + number % 3)
    writer.close()
    budget = 128 << 10
    store = FoldingRunStore(tmp_path, Sum(), memory_limit=budget)
    tracemalloc.start()
    try:
        store.add(0, 0, 0, run, 40_000, "s")
        store.commit(0, 0, spills=1)
        folding_peak = tracemalloc.get_traced_memory()[1]
        assert len(store.state) <= store.max_keys + BLOCK_RECORDS
        groups = store.grouped()  # (dumps merged into fewer files here, a pair of streams at a time)
        tracemalloc.reset_peak()
        total = count = 0
        for _key, values in groups:
            total += sum(values)
            count += 1
        reading_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (count, total) == (40_000, sum(1 + number % 3 for number in range(40_000)))
    # The budget plus a decoded block per stream (8,192 small pairs: about 1 MB).
    assert folding_peak < budget + (2 << 20), folding_peak
    assert reading_peak < budget + (3 << 20), reading_peak
    store.close()


def test_folding_keeps_to_its_budget_when_each_state_is_large(tmp_path: Path) -> None:
    """A key's state may be far larger than a counter: ``TopK(20)`` holds 20 values. The store sizes its key budget
    by the states it holds, not by a count's 128 bytes a key. Before, this store took 1 MiB / 128 = 8,192 keys of
    20 numbers each into its map (about 7 MB, seven times its budget); a job's reducer with ``--reduce-memory 16MB``
    peaked 154 MB above its start on 120,000 keys."""
    budget = 1 << 20
    aggregate = TopK(20)
    store = FoldingRunStore(tmp_path, aggregate, memory_limit=budget)
    keys = [f"w{number:06d}" for number in range(6_000)]
    runs = [
        encode_run(keys, [tuple(range(100_000 * task + n + 40, 100_000 * task + n, -2)) for n in range(len(keys))], 500)
        for task in range(2)
    ]
    tracemalloc.start()
    try:
        for task, run in enumerate(runs):
            store.add(task, 0, 0, run, len(keys), "s")
            store.commit(task, 0, spills=1)
        folding_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The budget plus a block's decoded states (500 of them: the bound is checked per block folded).
    assert folding_peak < budget + (1 << 20), folding_peak
    assert store._dumps, "the state should have been dumped to disk"
    top = finished(store, aggregate)
    assert len(top) == 6_000 and top["w000007"] == list(range(100_047, 100_007, -2))
    store.close()


@pytest.mark.parametrize(
    ("aggregate", "expected"),
    [(Sum(), 10), (Count(), 4), (Min(), 1), (Max(), 4), (Mean(), 2.5)],
)
def test_aggregates_lift_merge_finish(aggregate: object, expected: object, tmp_path: Path) -> None:
    lift = aggregate.lift  # type: ignore[attr-defined]
    states = [lift(v) for v in (1, 2, 3, 4)]
    store = FoldingRunStore(tmp_path, aggregate)
    for task, state in enumerate(states):
        store.add(task, 0, 0, encode_run(["x"], [state]), 1, "s")
        store.commit(task, 0, spills=1)
    assert finished(store, aggregate) == {"x": expected}
    # The reduce's bulk path: finish is skipped only where it is the identity (Mean's is not).
    assert aggregate.finish_is_identity is (type(aggregate) is not Mean)  # type: ignore[attr-defined]
    assert store.finished_columns() == (["x"], [expected])
    as_combiner = list(aggregate("x", states))  # type: ignore[operator]
    assert as_combiner == [("x", aggregate.fold_values(states))]  # type: ignore[attr-defined]
    store.close()


def test_reduce_aggregate_with_foreign_combiner_is_rejected() -> None:
    from hop import Job

    class Bad(Job):
        def combine(self, key, values):
            yield key, sum(values)

        reduce = Count()

    with pytest.raises(ValueError, match="same aggregate"):
        Bad().resolved_steps()


def test_kept_runs_arriving_after_a_resumed_commit_are_folded(tmp_path: Path) -> None:
    store = FoldingRunStore(tmp_path, Sum())
    store.drop(0, 0, keep_below=2)  # attempt 0 failed after a checkpoint covering its spills 0 and 1
    store.commit(0, 1, spills=2, segments=[[0, 0, 2]])  # attempt 1 resumed with nothing left to map
    store.add(0, 0, 0, run_of({"a": 1}), 1, "s")  # blocking mode: the kept spills arrive after the commit
    store.add(0, 0, 1, run_of({"a": 2, "b": 1}), 2, "s")
    assert store.missing(1) == 0
    assert finished(store, Sum()) == {"a": 3, "b": 1}
    store._check()
    store.close()
