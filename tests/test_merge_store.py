"""Merging runs (shuffle.merge) and the reduce-side run store (shuffle.store)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shuffle.keys import order_tag, sort_keys, total_order_key
from shuffle.merge import (
    blocks_of,
    group_merged,
    group_sorted,
    merge_blocks,
    merge_runs,
    sort_groups_in_memory,
)
from shuffle.pieces import RunPieces
from shuffle.runs import GROUPED, block_groups, encode_grouped_run, encode_run
from shuffle.store import MAX_FAN_IN, STREAM_BYTES, STREAM_COPIES, RunStore

Pair = tuple[Any, Any]


def sort_runs_in_memory(runs: list[bytes | memoryview], order: Any) -> list[Pair]:
    """The pairs of ``sort_groups_in_memory`` (what the store sorts in-memory runs with), flattened."""
    return [(key, value) for key, values in sort_groups_in_memory(runs, order) for value in values]


def _run(pairs: list[Pair], block_records: int = 65536, grouped: bool = False) -> tuple[bytes, int, str]:
    """A sorted run's bytes, records and order tag: flat, or ``grouped`` (each stretch of equal keys once)."""
    keys = [key for key, _ in pairs]
    if not grouped:
        return encode_run(keys, [value for _, value in pairs], block_records), len(pairs), order_tag(keys)
    items = [(key, [value for _, value in group]) for key, group in itertools.groupby(pairs, key=itemgetter(0))]
    data = encode_grouped_run([key for key, _ in items], [values for _, values in items], block_records)
    return data, len(pairs), order_tag(keys)


def _stable_sorted(pairs: list[Pair]) -> list[Pair]:
    return sorted(pairs, key=lambda pair: total_order_key(pair[0]))


def _sorted_run(keys: list[Any], label: Any) -> list[Pair]:
    """A sorted run whose values say where each pair came from: (label, position)."""
    ordered = sorted(keys, key=total_order_key)
    return [(key, (label, position)) for position, key in enumerate(ordered)]


_key_strategies = {
    "str": st.text(alphabet="abcé", max_size=3),
    "num": st.integers(-20, 20),
    "tuple": st.tuples(st.sampled_from("ab"), st.integers(0, 3)),
    "mixed": st.one_of(
        st.none(),
        st.integers(-5, 5),
        st.text(alphabet="ab", max_size=2),
        st.tuples(st.integers(0, 2)),
        st.binary(max_size=1),
    ),
}


# -- merge ---------------------------------------------------------------------------------------------------


def test_sort_runs_in_memory_native_and_stable() -> None:
    first = _run([("a", 1), ("b", 1), ("d", 1)])[0]
    second = _run([("a", 2), ("c", 2), ("d", 2)])[0]
    pairs = sort_runs_in_memory([first, memoryview(second), b""], None)
    assert pairs == [("a", 1), ("a", 2), ("b", 1), ("c", 2), ("d", 1), ("d", 2)]
    assert sort_runs_in_memory([second, first], None)[:2] == [("a", 2), ("a", 1)]
    assert sort_runs_in_memory([], None) == []


def test_sort_runs_in_memory_total_order_and_multi_block() -> None:
    first = _run([(None, 0), (1, 0), ("x", 0), ((1,), 0)], block_records=1)[0]
    second = _run([(True, 1), (0.5, 1), (1, 1), (b"z", 1)], block_records=3)[0]
    assert sort_runs_in_memory([first, second], total_order_key) == [
        (None, 0),
        (0.5, 1),
        (1, 0),
        (True, 1),  # True == 1: one key, in run order
        (1, 1),
        ("x", 0),
        (b"z", 1),
        ((1,), 0),
    ]
    with pytest.raises(TypeError):
        sort_runs_in_memory([first, second], None)  # native order cannot compare these keys


def test_merge_runs() -> None:
    assert list(merge_runs([], None)) == []
    single = [("a", 1), ("b", 2)]
    assert list(merge_runs([[single]], None)) == single
    assert list(merge_runs([blocks_of(single, 1)], total_order_key)) == single
    streams = [[[("a", 0), ("c", 0)]], iter([[("a", 1)], [], [("b", 1)]]), [], [[("c", 3)]]]
    assert list(merge_runs(streams, None)) == [("a", 0), ("a", 1), ("b", 1), ("c", 0), ("c", 3)]
    mixed = [[[(None, 0), ("a", 0)]], [[(1, 1), ((0,), 1)]]]
    assert list(merge_runs(mixed, total_order_key)) == [(None, 0), (1, 1), ("a", 0), ((0,), 1)]


def test_grouped_merge_equals_grouping_the_stable_sort() -> None:
    # Runs with repeated keys, merged as (key, [values]) items block by block, give every key's values in the
    # order a stable sort of all pairs gives, whatever the block size.
    runs = [
        [("a", 1), ("a", 2), ("k", 3), ("k", 4), ("k", 5), ("z", 6)],
        [("k", 7), ("k", 8), ("m", 9)],
        [("a", 10), ("k", 11), ("k", 12), ("k", 13), ("k", 14)],
    ]
    expected = [(key, list(values)) for key, values in group_sorted(_stable_sorted([p for run in runs for p in run]))]
    for size in (1, 2, 3, 100):
        items = merge_runs([map(_pair_block_groups, blocks_of(run, size)) for run in runs], None)
        assert [(key, list(values)) for key, values in group_merged(items)] == expected
    assert block_groups((("a", "a", "b"), (1, 2, 3))) == [("a", (1, 2)), ("b", (3,))]
    assert block_groups((("a", "b"), ((1, 2), (3,)), GROUPED)) == [("a", (1, 2)), ("b", (3,))]


def _pair_block_groups(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Sequence[Any]]]:
    """A block of pairs as the ``(key, values)`` items of the flat block it would be stored as."""
    return block_groups((tuple(key for key, _ in pairs), tuple(value for _, value in pairs)))


def test_merge_keeps_source_order_of_a_key_spread_over_many_blocks() -> None:
    # One key across block boundaries in every source: its pairs come out source by source, in order.
    first = [("a", 0)] + [("k", ("first", i)) for i in range(7)] + [("z", 0)]
    second = [("k", ("second", i)) for i in range(5)] + [("m", 1)]
    third = [("b", 3), ("k", ("third", 0))]
    runs = [first, second, third]
    expected = _stable_sorted([pair for run in runs for pair in run])
    for size in (1, 2, 3, 100):
        assert list(merge_runs([blocks_of(run, size) for run in runs], None)) == expected
        batches = list(merge_blocks([blocks_of(run, size) for run in runs], None))
        assert all(batches) and [pair for batch in batches for pair in batch] == expected


@settings(max_examples=80, deadline=None)
@given(
    kind=st.sampled_from(sorted(_key_strategies)),
    data=st.data(),
)
def test_merge_runs_equals_stable_sort_of_the_concatenation(kind: str, data: st.DataObject) -> None:
    key_lists = data.draw(st.lists(st.lists(_key_strategies[kind], max_size=10), max_size=6))
    runs = [_sorted_run(keys, index) for index, keys in enumerate(key_lists)]
    everything = [pair for run in runs for pair in run]
    expected = _stable_sorted(everything)
    order = None if kind != "mixed" and order_tag([k for k, _ in everything]) != "mixed" else total_order_key
    block_size = data.draw(st.integers(1, 4))
    assert list(merge_runs([blocks_of(run, block_size) for run in runs], order)) == expected
    assert list(merge_runs([[run] for run in runs], total_order_key)) == expected
    encoded = [_run(run, block_records=3)[0] for run in runs]
    assert sort_runs_in_memory(encoded, total_order_key) == expected
    if order is None:
        assert sort_runs_in_memory(encoded, None) == expected


def test_group_sorted() -> None:
    assert list(group_sorted([])) == []
    pairs = [("a", 1), ("a", 2), ("b", 3), ("c", 4), ("c", 5), ("c", 6)]
    assert [(key, list(values)) for key, values in group_sorted(pairs)] == [
        ("a", [1, 2]),
        ("b", [3]),
        ("c", [4, 5, 6]),
    ]


def test_group_sorted_is_lazy_and_skips_unread_values() -> None:
    consumed: list[Pair] = []

    def stream() -> Iterator[Pair]:
        for pair in [("a", 1), ("a", 2), ("a", 3), ("b", 4)]:
            consumed.append(pair)
            yield pair

    groups = group_sorted(stream())
    key, values = next(groups)
    assert key == "a" and consumed == [("a", 1)]
    assert next(values) == 1
    key, values = next(groups)  # the rest of "a" is skipped
    assert key == "b" and list(values) == [4]


def test_group_sorted_mixed_keys() -> None:
    pairs = [(None, 0), (None, 1), (1, 2), ("1", 3), ((1,), 4), ((1,), 5)]
    assert [(key, list(values)) for key, values in group_sorted(pairs)] == [
        (None, [0, 1]),
        (1, [2]),
        ("1", [3]),
        ((1,), [4, 5]),
    ]


# -- RunStore ------------------------------------------------------------------------------------------------


@pytest.fixture()
def store_dir(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    path.mkdir()
    return path


def _add(store: RunStore, task: int, attempt: int, seq: int, pairs: list[Pair], grouped: bool = False) -> None:
    data, records, tag = _run(pairs, block_records=3 if grouped else 65536, grouped=grouped)
    store.add(task, attempt, seq, data, records, tag)
    store._check()


def _commit(store: RunStore, task: int, attempt: int, spills: int) -> None:
    store.commit(task, attempt, spills)
    store._check()


def _drop(store: RunStore, task: int, attempt: int) -> None:
    store.drop(task, attempt)
    store._check()


def test_tentative_runs_are_not_merged_until_committed(store_dir: Path) -> None:
    store = RunStore(store_dir)
    _add(store, 0, 0, 0, [("a", "t0"), ("c", "t0")])
    _add(store, 1, 0, 0, [("b", "t1")])
    assert list(store.sorted_pairs()) == []
    assert store.missing(2) == 2
    _commit(store, 1, 0, 1)
    assert list(store.sorted_pairs()) == [("b", "t1")]
    assert store.missing(2) == 1
    _commit(store, 0, 0, 1)
    assert list(store.sorted_pairs()) == [("a", "t0"), ("b", "t1"), ("c", "t0")]
    assert store.missing(2) == 0
    assert (store.received_runs, store.dropped_runs) == (2, 0)
    store.close()
    store._check()


def test_commit_before_runs_arrive_and_missing_counts(store_dir: Path) -> None:
    store = RunStore(store_dir)
    _commit(store, 0, 1, 2)
    _commit(store, 2, 0, 0)  # a map with no output
    assert store.missing(3) == 2  # task 0 has 0 of 2 runs, task 1 not committed
    _add(store, 0, 1, 1, [("b", 1)])
    assert store.missing(3) == 2
    _add(store, 0, 1, 0, [("a", 0)])
    assert store.missing(3) == 1
    _add(store, 1, 0, 0, [("z", 0)])
    assert store.missing(3) == 1  # received but tentative
    _commit(store, 1, 0, 1)
    assert store.missing(3) == 0
    assert store.missing(2) == 0
    assert list(store.sorted_pairs()) == [("a", 0), ("b", 1), ("z", 0)]
    store.close()


def test_losing_attempt_runs_are_dropped(store_dir: Path) -> None:
    store = RunStore(store_dir)
    _add(store, 0, 0, 0, [("a", "attempt0")])
    _add(store, 0, 1, 0, [("a", "attempt1")])
    _add(store, 0, 1, 1, [("b", "attempt1")])
    assert store.memory_bytes > 0
    _commit(store, 0, 1, 2)
    assert store.dropped_runs == 1
    assert (0, 0) not in store.attempts
    _add(store, 0, 0, 1, [("c", "attempt0 late")])  # the loser keeps sending: ignored
    _add(store, 0, 2, 0, [("c", "attempt2")])
    assert store.dropped_runs == 3
    assert store.received_runs == 5
    assert list(store.sorted_pairs()) == [("a", "attempt1"), ("b", "attempt1")]
    assert store.missing(1) == 0
    store.close()


def test_drop_forgets_an_attempt(store_dir: Path) -> None:
    store = RunStore(store_dir)
    _add(store, 0, 0, 0, [("a", 0)])
    _add(store, 0, 0, 1, [("b", 0)])
    _add(store, 1, 0, 0, [("c", 0)])
    before = store.memory_bytes
    _drop(store, 0, 0)
    assert (0, 0) not in store.attempts
    assert store.dropped_runs == 2
    assert 0 < store.memory_bytes < before
    _drop(store, 0, 0)  # twice: no-op
    _drop(store, 5, 3)  # unknown: no-op
    assert store.dropped_runs == 2
    _add(store, 0, 1, 0, [("a", 1)])
    _commit(store, 0, 1, 1)
    _commit(store, 1, 0, 1)
    assert list(store.sorted_pairs()) == [("a", 1), ("c", 0)]
    store.close()


def test_resent_run_is_stored_once(store_dir: Path) -> None:
    store = RunStore(store_dir)
    _add(store, 0, 0, 0, [("a", 1)])
    size = store.memory_bytes
    _add(store, 0, 0, 0, [("a", 1)])
    assert store.memory_bytes == size
    assert store.received_runs == 2
    _commit(store, 0, 0, 1)
    assert list(store.sorted_pairs()) == [("a", 1)]
    store.close()


def test_pairs_are_stable_by_task_then_spill(store_dir: Path) -> None:
    store = RunStore(store_dir)
    _add(store, 1, 0, 1, [("k", "t1s1")])
    _add(store, 0, 2, 1, [("k", "t0s1")])
    _add(store, 1, 0, 0, [("k", "t1s0")])
    _add(store, 0, 2, 0, [("k", "t0s0")])
    _commit(store, 1, 0, 2)
    _commit(store, 0, 2, 2)
    assert [value for _, value in store.sorted_pairs()] == ["t0s0", "t0s1", "t1s0", "t1s1"]
    store.close()


def test_mixed_tags_use_the_total_order(store_dir: Path) -> None:
    store = RunStore(store_dir)
    _add(store, 0, 0, 0, [("a", 0), ("b", 0)])
    _add(store, 1, 0, 0, [(1, 1), (2, 1)])
    _add(store, 2, 0, 0, [])
    _add(store, 3, 0, 0, [(None, 3), ((1,), 3)])
    for task in range(4):
        _commit(store, task, 0, 1)
    assert list(store.sorted_pairs()) == [(None, 3), (1, 1), (2, 1), ("a", 0), ("b", 0), ((1,), 3)]
    store.close()


def _workload(tasks: int, runs_per_task: int, keys_per_run: int) -> list[tuple[int, int, list[Pair]]]:
    """Runs with many equal keys across tasks, so any instability shows."""
    work = []
    for task in range(tasks):
        for seq in range(runs_per_task):
            keys = sorted(f"k{(task * 7 + seq * 3 + i) % 11:02d}" for i in range(keys_per_run))
            work.append((task, seq, [(key, (task, seq, i)) for i, key in enumerate(keys)]))
    return work


def _expected(work: list[tuple[int, int, list[Pair]]]) -> list[Pair]:
    ordered = sorted(work, key=lambda item: (item[0], item[1]))
    return _stable_sorted([pair for _, _, pairs in ordered for pair in pairs])


@pytest.mark.parametrize("arrival", ["forward", "reversed"])
def test_memory_limit_moves_runs_to_disk_and_the_result_is_exact(store_dir: Path, arrival: str) -> None:
    work = _workload(tasks=5, runs_per_task=3, keys_per_run=20)
    run_size = len(_run(work[0][2])[0])
    limit = run_size * 4
    store = RunStore(store_dir, memory_limit=limit, expansion=1)
    for task, seq, pairs in work if arrival == "forward" else reversed(work):
        _add(store, task, 0, seq, pairs)
        assert store.memory_bytes <= limit
    files = sorted(store_dir.iterdir())
    assert files, "runs over the memory limit go to spill_dir"
    on_disk = [run for a in store.attempts.values() for run in a.runs.values() if run.path is not None]
    assert sorted(run.path for run in on_disk) == files
    assert store.disk_bytes == sum(path.stat().st_size for path in files)
    in_memory = [run for a in store.attempts.values() for run in a.runs.values() if run.data is not None]
    assert in_memory, "some runs stay in memory"
    for task in range(5):
        _commit(store, task, 0, 3)
    assert store.missing(5) == 0
    assert list(store.sorted_pairs()) == _expected(work)
    store._check()
    store.close()
    store._check()
    assert list(store_dir.iterdir()) == []
    assert store.memory_bytes == 0


def test_dropping_an_evicted_attempt_deletes_its_files(store_dir: Path) -> None:
    store = RunStore(store_dir, memory_limit=1)
    _add(store, 0, 0, 0, [("a", 1)])
    _add(store, 0, 1, 0, [("a", 2)])
    assert len(list(store_dir.iterdir())) == 2
    assert store.memory_bytes == 0
    _commit(store, 0, 1, 1)
    assert len(list(store_dir.iterdir())) == 1
    assert list(store.sorted_pairs()) == [("a", 2)]
    _drop(store, 0, 1)
    assert list(store_dir.iterdir()) == []
    assert store.disk_bytes == 0
    store.close()


@pytest.mark.parametrize("memory_limit", [64 << 20, 1], ids=["in memory", "on disk"])
def test_input_fraction_rises_to_one_as_the_groups_are_taken(store_dir: Path, memory_limit: int) -> None:
    """A reduce reported 0.5 (its input in) until it committed, however long its reduce took. The store says how
    much of its input the groups taken so far are: of the groups when it knows their number (every run in memory),
    else of the records in the blocks its merge has read."""
    work = _workload(tasks=6, runs_per_task=3, keys_per_run=40)
    store = RunStore(store_dir, memory_limit=memory_limit)
    for task, seq, pairs in work:
        _add(store, task, 0, seq, pairs, grouped=True)  # (blocks of 3 keys: a merge from disk reads many)
    for task in range(6):
        _commit(store, task, 0, 3)
    fractions = []
    for taken, (_, values) in enumerate(store.grouped(), start=1):
        assert list(values)  # (a merged group's values are read as the reduce reads them)
        fractions.append(store.input_fraction(taken))
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert fractions[len(fractions) // 4] < 0.5 < fractions[3 * len(fractions) // 4] < 1.0, fractions
    store.close()


@pytest.mark.parametrize("fan_in", [2, 3, 4])
def test_multi_pass_merge_with_small_fan_in_is_exact(store_dir: Path, fan_in: int) -> None:
    work = _workload(tasks=6, runs_per_task=3, keys_per_run=8)
    store = RunStore(store_dir, memory_limit=1, fan_in=fan_in)  # every run goes to disk
    for task, seq, pairs in work:
        _add(store, task, 0, seq, pairs)
    assert store.memory_bytes == 0
    for task in range(6):
        _commit(store, task, 0, 3)
    runs_bytes = store.disk_bytes
    assert list(store.sorted_pairs()) == _expected(work)
    store._check()
    # Each pass deletes the outputs of the pass before once merged (18 runs: 4 passes at fan-in 2): the disk holds
    # the runs and the last pass's outputs, not one copy of the runs per pass.
    assert sum(1 for path in store_dir.iterdir() if path.name.startswith("merged")) <= fan_in
    assert runs_bytes < store.disk_bytes <= store.disk_bytes_peak
    store.close()
    store._check()
    assert list(store_dir.iterdir()) == [], "close() removes every file the store wrote, merged ones too"


def test_multi_pass_merge_with_runs_in_memory_and_on_disk(store_dir: Path) -> None:
    work = _workload(tasks=6, runs_per_task=2, keys_per_run=10)
    run_size = len(_run(work[0][2])[0])
    store = RunStore(store_dir, memory_limit=run_size * 3, fan_in=2, expansion=1)
    for task, seq, pairs in work:
        _add(store, task, 0, seq, pairs)
    for task in range(6):
        _commit(store, task, 0, 2)
    assert list(store.sorted_pairs()) == _expected(work)
    store.close()
    assert list(store_dir.iterdir()) == []


def test_close_removes_run_files(store_dir: Path) -> None:
    store = RunStore(store_dir, memory_limit=1)
    _add(store, 0, 0, 0, [("a", 1)])
    _add(store, 1, 0, 0, [("b", 1)])
    assert len(list(store_dir.iterdir())) == 2
    store.close()
    store._check()
    assert list(store_dir.iterdir()) == []
    assert store.attempts == {}
    assert (store.memory_bytes, store.disk_bytes) == (0, 0)


# -- property: any delivery order, with losers, resends and a memory limit, gives the committed pairs --------


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kind=st.sampled_from(sorted(_key_strategies)),
    memory_limit=st.integers(1, 600),
    fan_in=st.integers(2, 4),
    data=st.data(),
)
def test_store_model(
    tmp_path_factory: pytest.TempPathFactory, kind: str, memory_limit: int, fan_in: int, data: st.DataObject
) -> None:
    store_dir = tmp_path_factory.mktemp("store")
    num_maps = data.draw(st.integers(1, 4), label="num_maps")
    events: list[tuple[Any, ...]] = []
    winners: dict[int, tuple[int, list[list[Pair]]]] = {}
    for task in range(num_maps):
        attempts = data.draw(st.integers(1, 3), label="attempts")
        winner = data.draw(st.integers(0, attempts - 1), label="winner")
        for attempt in range(attempts):
            run_keys = st.lists(st.lists(_key_strategies[kind], max_size=6), max_size=3)
            spills = data.draw(run_keys, label="runs")
            runs = [
                [(k, (task, attempt, seq, i)) for i, k in enumerate(sort_keys(keys)[0])]
                for seq, keys in enumerate(spills)
            ]
            # A map without a combiner sends grouped runs, one with a combiner flat ones: a store may hold both.
            events += [
                ("add", task, attempt, seq, run, data.draw(st.booleans(), label="grouped"))
                for seq, run in enumerate(runs)
            ]
            if attempt == winner:
                winners[task] = (attempt, runs)
                events.append(("commit", task, attempt, len(runs)))
            elif data.draw(st.booleans(), label="loser fails"):
                events.append(("drop", task, attempt))
    events += data.draw(
        st.lists(st.sampled_from([e for e in events if e[0] == "add"]), max_size=3)
        if any(e[0] == "add" for e in events)
        else st.just([]),
        label="resends",
    )
    events = data.draw(st.permutations(events), label="order")

    store = RunStore(store_dir, memory_limit=memory_limit, fan_in=fan_in, expansion=1)
    for event in events:
        if event[0] == "add":
            _, task, attempt, seq, run, grouped = event
            _add(store, task, attempt, seq, run, grouped)
        elif event[0] == "commit":
            _commit(store, *event[1:])
        else:
            _drop(store, *event[1:])
    assert store.missing(num_maps) == 0
    expected = _stable_sorted([pair for task in sorted(winners) for run in winners[task][1] for pair in run])
    assert list(store.sorted_pairs()) == expected
    # The reduce input: every key once, its values in run order, from memory or merged from disk.
    assert [(key, list(values)) for key, values in store.grouped()] == [
        (key, list(values)) for key, values in group_sorted(expected)
    ]
    store._check()
    store.close()
    store._check()
    assert list(store_dir.iterdir()) == []


def test_fan_in_follows_the_memory_budget(store_dir: Path) -> None:
    # Half the budget is for the streams of the on-disk runs being merged, STREAM_BYTES each.
    assert RunStore(store_dir, memory_limit=64 * STREAM_BYTES).fan_in == 32
    assert RunStore(store_dir, memory_limit=1 << 30).fan_in == MAX_FAN_IN
    assert RunStore(store_dir, memory_limit=1).fan_in == 2
    assert RunStore(store_dir, memory_limit=1, fan_in=5).fan_in == 5


def test_fan_in_shrinks_for_values_larger_than_a_stream(store_dir: Path) -> None:
    """A merge streams fewer files at once when one value (read whole, whatever the block size) makes a stream
    cost more than STREAM_BYTES: the streams keep to half the budget."""
    store = RunStore(store_dir, memory_limit=256 << 20)
    small = [(key, 1) for key in range(1000)]
    _add(store, 0, 0, 0, small)
    _commit(store, 0, 0, 1)
    assert store.merge_fan_in(store.committed_runs()) == store.fan_in == (256 << 20) // (2 * STREAM_BYTES)
    _add(store, 1, 0, 0, [(0, bytes(2 << 20)), (1, bytes(2 << 20))])
    _commit(store, 1, 0, 1)
    large = store.committed_runs()[-1]
    assert large.size // large.records > 2 << 20
    assert store.merge_fan_in(store.committed_runs()) == (256 << 20) // (2 * STREAM_COPIES * (large.size // 2)) == 21


def test_a_run_given_as_a_file_is_held_on_disk(store_dir: Path) -> None:
    """A large run received in pieces comes as a file of the store's: counted on disk, merged from there, and
    deleted with its attempt (or at once, if its attempt lost already)."""
    store = RunStore(store_dir, memory_limit=1 << 20)
    pairs = [(key, bytes(100)) for key in range(50)]
    data, records, tag = _run(pairs)
    path = store.new_run_path()
    path.write_bytes(data)
    store.add(0, 0, 0, path, records, tag)
    store._check()
    assert store.memory_bytes == 0 and store.disk_bytes == len(data)
    _commit(store, 0, 0, 1)
    assert [(key, value) for key, values in store.grouped() for value in values] == pairs
    late = store.new_run_path()
    late.write_bytes(data)
    store.add(0, 1, 0, late, records, tag)  # an attempt that lost to the committed one
    assert not late.exists() and store.dropped_runs == 1
    store.close()
    assert not path.exists()


def test_run_pieces_are_put_back_together_in_memory_or_in_a_file(tmp_path: Path) -> None:
    """A run no larger than the memory limit comes back as bytes, a larger one as the file its pieces were written
    to as they came; a piece that does not continue its run (a resend from the start interleaved with the rest of
    an earlier sending) is skipped, and the run completes from the pieces that do."""
    names = iter(range(100))
    pieces = RunPieces(memory_limit=10, new_path=lambda: tmp_path / f"run-{next(names)}")
    assert pieces.add((0, 0, 0), 0, 4, b"abcd") == b"abcd"
    assert pieces.add((0, 0, 1), 0, 6, b"abc") is None
    assert pieces.add((0, 0, 1), 3, 6, b"def") == b"abcdef"
    assert pieces.add((0, 0, 2), 0, 25, b"y" * 10) is None
    assert pieces.add((0, 0, 2), 0, 25, b"y" * 10) is None  # a resend from the start: skipped
    assert pieces.add((0, 0, 2), 20, 25, b"y" * 5) is None  # past a gap: skipped
    assert pieces.add((0, 0, 2), 10, 25, b"y" * 10) is None
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run-0"]
    path = pieces.add((0, 0, 2), 20, 25, b"y" * 5)
    assert isinstance(path, Path) and path.read_bytes() == b"y" * 25
    assert pieces.add((0, 0, 3), 3, 6, b"def") is None  # the rest of a run whose start is not here
    assert pieces.add((0, 0, 4), 0, 30, b"z") is None
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run-0", "run-1"]
    pieces.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run-0"]  # an unfinished run's file is deleted
    in_memory = RunPieces()  # no limit: every run comes back as bytes
    assert in_memory.add((0, 0, 0), 0, 30, b"x" * 20) is None
    assert in_memory.add((0, 0, 0), 20, 30, b"y" * 10) == b"x" * 20 + b"y" * 10


def test_fan_in_below_two_is_rejected(store_dir: Path) -> None:
    with pytest.raises(ValueError, match="fan_in must be at least 2"):
        RunStore(store_dir, fan_in=1)


def test_checkpointed_runs_are_kept_and_join_the_attempt_that_resumes_after_them(tmp_path: Path) -> None:
    from shuffle.runs import encode_run
    from shuffle.store import RunStore

    store = RunStore(tmp_path)
    store.add(0, 0, 0, encode_run(["a"], [1]), 1, "s")
    store.add(0, 0, 1, encode_run(["b"], [2]), 1, "s")
    store.add(0, 0, 2, encode_run(["c"], [3]), 1, "s")  # after the checkpoint: lost work
    store.drop(0, 0, keep_below=2)  # attempt 0 failed with a checkpoint covering spills 0 and 1
    store._check()
    store.add(0, 1, 2, encode_run(["c"], [30]), 1, "s")  # attempt 1 resumes at spill 2
    store.commit(0, 1, spills=4, segments=[[0, 0, 2]])
    assert store.missing(1) == 1
    store.add(0, 1, 3, encode_run(["d"], [4]), 1, "s")
    store._check()
    assert store.missing(1) == 0
    assert list(store.sorted_pairs()) == [("a", 1), ("b", 2), ("c", 30), ("d", 4)]
    store.close()


def test_a_kept_run_arriving_after_the_commit_is_counted_for_the_committed_attempt(tmp_path: Path) -> None:
    from shuffle.runs import encode_run
    from shuffle.store import RunStore

    store = RunStore(tmp_path)
    store.drop(0, 0, keep_below=1)
    store.add(0, 1, 1, encode_run(["z"], [2]), 1, "s")
    store.commit(0, 1, spills=2, segments=[[0, 0, 1]])
    assert store.missing(1) == 1
    store.add(0, 0, 0, encode_run(["a"], [1]), 1, "s")  # the kept spill, pushed late
    assert store.missing(1) == 0
    assert list(store.sorted_pairs()) == [("a", 1), ("z", 2)]
    store._check()
    store.close()


@pytest.mark.parametrize("memory_limit", [64 << 20, 1])
def test_true_and_one_are_one_key_in_memory_and_from_disk(tmp_path: Path, memory_limit: int) -> None:
    # A reducer groups in-memory runs in a hash map (True == 1 there) and merges on-disk runs in key order; both
    # paths must give one key, or the output would depend on --reduce-memory.
    store = RunStore(tmp_path, memory_limit=memory_limit)
    runs = [[(0.5, "a"), (True, "b")], [(False, "c"), (1, "d")], [(0, "e"), (1.0, "f"), ("x", "g")]]
    for task, pairs in enumerate(runs):
        data, records, tag = _run(pairs)
        store.add(task, 0, 0, data, records, tag)
        store.commit(task, 0, spills=1)
    assert (memory_limit == 1) == all(run.data is None for run in store.committed_runs())
    grouped = [(key, list(values)) for key, values in store.grouped()]
    assert grouped == [(False, ["c", "e"]), (0.5, ["a"]), (True, ["b", "d", "f"]), ("x", ["g"])]
    store.close()


@pytest.mark.parametrize("memory_limit", [64 << 20, 1])
def test_a_rerun_whose_runs_come_before_the_word_its_predecessor_was_lost_is_awaited_not_lost(
    store_dir: Path, memory_limit: int
) -> None:
    """A committed map's output lost with its worker before this reducer had all of it: the map runs again, and the
    rerun's runs come straight from its worker, while the word that the committed attempt was lost comes through this
    reducer's own worker, which may be slower (busy, or paused). Those runs were dropped as a loser's, the rerun then
    committed with none of them here, and the reducer waited for them for ever (the job never finished)."""
    store = RunStore(store_dir, memory_limit=memory_limit)
    _add(store, 0, 0, 0, [("a", "attempt0")])
    _commit(store, 0, 0, 2)  # committed, one of its two runs here; then its worker dies
    _add(store, 0, 1, 0, [("a", "attempt1")])  # the rerun's runs, before the word of the loss
    _add(store, 0, 1, 1, [("b", "attempt1")])
    store.lost(0, 0)
    store._check()
    _commit(store, 0, 1, 2)
    assert store.missing(1) == 0
    assert list(store.sorted_pairs()) == [("a", "attempt1"), ("b", "attempt1")]
    # The last run of a committed attempt still to come may complete it: then any other attempt's runs go.
    _add(store, 1, 0, 0, [("c", "attempt0")])
    _commit(store, 1, 0, 2)
    _add(store, 1, 1, 0, [("c", "attempt1")])
    _add(store, 1, 0, 1, [("d", "attempt0")])
    assert (1, 1) not in store.attempts
    _add(store, 1, 1, 1, [("d", "attempt1")])  # once it is complete, a loser's late run is dropped at once
    assert (1, 1) not in store.attempts
    store.lost(1, 0)  # complete: kept
    assert store.missing(2) == 0
    assert [pair for pair in store.sorted_pairs() if pair[0] in "cd"] == [("c", "attempt0"), ("d", "attempt0")]
    # The rerun's runs may come before the word of the commit too (the reducer's worker stalled since before it).
    _add(store, 2, 0, 0, [("e", "attempt0")])
    _add(store, 2, 1, 0, [("e", "attempt1")])
    _add(store, 2, 1, 1, [("f", "attempt1")])
    _commit(store, 2, 0, 2)
    store.lost(2, 0)
    _commit(store, 2, 1, 2)
    assert store.missing(3) == 0
    assert [pair for pair in store.sorted_pairs() if pair[0] in "ef"] == [("e", "attempt1"), ("f", "attempt1")]
    store.close()


_FULL_DISK_SCRIPT = """
import sys
from pathlib import Path

from shuffle.pieces import RunPieces
from shuffle.runs import encode_run
from shuffle.store import RunStore

store = RunStore(sys.argv[1], memory_limit=32_000, fan_in=2)  # (holds 1,000 bytes of runs in memory)
keys = list(range(5_000))
data = encode_run(keys, [bytes(10)] * len(keys))  # some 70 kB: past the 10 kB a file may hold
for name, write in [
    ("evicted", lambda: store.add(0, 0, 0, data, len(keys), "int")),
    ("pieces", lambda: RunPieces(1_000, store.new_run_path).add((1, 0, 0), 0, len(data) * 2, data)),
]:
    try:
        write()
    except OSError as error:
        print(f"{name}: {type(error).__name__}: {error}")
    else:
        print(f"{name}: written")
"""


def test_a_full_disk_under_the_store_names_the_run_file_and_what_to_do(store_dir: Path) -> None:
    """A run written out when the reducer's memory is short, or a large run received in pieces, on a full disk
    (here a file size limit, EFBIG, in a process of its own) raised a bare ``OSError: [Errno 27] File too large``
    from the engine's frames: it names the run file, the spill directory and what to do, and leaves no half file."""
    import resource
    import signal
    import subprocess
    import sys

    def limited() -> None:  # (in the child: a write past 10 kB fails with EFBIG instead of killing it)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, 10_000))

    command = [sys.executable, "-c", _FULL_DISK_SCRIPT, str(store_dir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, preexec_fn=limited)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["evicted", "pieces"], result.stdout
    remedy = (
        "File too large; free space in the worker's spill directory (hop worker --spill-dir; hop run's own cluster: "
        "TMPDIR) or point it at a larger disk, or give the reducers more memory (--reduce-memory) so that less of "
        "their input goes to disk"
    )
    for line, name in zip(lines, ["run-000001.run", "run-000002.run"], strict=True):
        assert line.endswith(f": SpillWriteError: cannot write the reducer's run file {store_dir / name}: {remedy}")
    assert list(store_dir.iterdir()) == []  # (the half-written files removed)
