"""The map-side output buffer (shuffle.buffer): spills, partitions, combining, thresholds and errors."""

from __future__ import annotations

import random
import re
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hop.aggregates import CountDistinct, Max, Mean, Sum, TopK
from shuffle.buffer import (
    MAX_SPILL_GROWTH,
    AggregateValueError,
    CombinerKeyError,
    MapOutputBuffer,
    PartitionError,
    UnhashableKeyError,
    state_bytes,
)
from shuffle.keys import MIXED, NanKeyError, total_order_key
from shuffle.runs import UnencodableRecordError, is_grouped, iter_run, iter_stored_blocks
from shuffle.spill import SpillFile, SpillWriteError

Pair = tuple[Any, Any]


def _sum_combiner(key: Any, values: list[Any]) -> Iterator[Pair]:
    yield key, sum(values)


def _by_length(partitions: int) -> Any:
    return lambda key: len(repr(key)) % partitions


def _spill_pairs(spill: SpillFile) -> list[list[Pair]]:
    """Every partition's pairs of a spill, read back from the file."""
    reopened = SpillFile.open(spill.path)
    assert reopened == spill
    return [list(iter_run(reopened.read_partition(p))) for p in range(len(reopened.partitions))]


def _is_sorted(keys: list[Any]) -> bool:
    ordered = [total_order_key(key) for key in keys]
    return all(a <= b for a, b in zip(ordered, ordered[1:], strict=False))


def _drain(buffer: MapOutputBuffer, records: Iterable[Pair], mapper: Any) -> list[int]:
    """Run the map loop to the end (it is a generator) and cut the final spill, as a map task does."""
    progress = list(buffer.run_map(records, mapper))
    buffer.spill()
    return progress


def _emit(buffer: MapOutputBuffer, pairs: Iterable[Pair]) -> None:
    """Feed pairs through the map loop as the output of one input record (exhausting the generator)."""
    output = list(pairs)
    for _ in buffer.run_map([(0, output)], lambda _key, value: value):
        pass


def _records(lines: list[str]) -> list[Pair]:
    return list(enumerate(lines))


def _words(_key: Any, line: str) -> Iterator[Pair]:
    for word in line.split():
        yield word, 1


def test_spill_without_combiner_is_sorted_per_partition(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 3, _by_length(3))
    pairs = [("pear", 1), ("fig", 2), ("apple", 3), ("fig", 4), ("kiwi", 5), ("banana", 6), ("pear", 7)]
    _emit(buffer, pairs)
    spill = buffer.spill()
    assert spill is not None
    assert spill.path.parent == tmp_path and spill.path.name == "spill-00000.spill"
    partitions = _spill_pairs(spill)
    # len(repr(key)) % 3: 'pear' 6 -> 0, 'kiwi' 6 -> 0, 'apple' 7 -> 1, 'fig' 5 -> 2, 'banana' 8 -> 2
    assert partitions == [
        [("kiwi", 5), ("pear", 1), ("pear", 7)],
        [("apple", 3)],
        [("banana", 6), ("fig", 2), ("fig", 4)],
    ]
    for index, pairs in enumerate(partitions):
        keys = [key for key, _ in pairs]
        assert keys == sorted(keys)
        assert all(len(repr(key)) % 3 == index for key in keys)
    merged = {key: [v for p in partitions for k, v in p if k == key] for p in partitions for key, _ in p}
    assert merged == {"pear": [1, 7], "fig": [2, 4], "apple": [3], "kiwi": [5], "banana": [6]}
    assert [entry.records for entry in spill.partitions] == [len(p) for p in partitions]
    assert {entry.order_tag for entry in spill.partitions} == {"s"}
    counters = buffer.counters
    assert (counters.map_output_records, counters.spill_files, counters.spills) == (7, 1, [spill])
    assert counters.combine_input_records == counters.combine_output_records == 0
    assert counters.spill_bytes == spill.size > 0
    assert buffer.pending_records == 0


def test_explicit_partitions(tmp_path: Path) -> None:
    table = {"a": 2, "b": 0, "c": 2, "d": 1}
    buffer = MapOutputBuffer(tmp_path, 4, table.__getitem__)
    _emit(buffer, [("c", 1), ("a", 2), ("d", 3), ("b", 4), ("a", 5)])
    spill = buffer.spill()
    assert spill is not None
    assert _spill_pairs(spill) == [[("b", 4)], [("d", 3)], [("a", 2), ("a", 5), ("c", 1)], []]
    assert [e.records for e in spill.partitions] == [1, 1, 3, 0]


def test_values_keep_map_order(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1))
    values = [5, 3, 9, 1, 3, 0, -2]
    _emit(buffer, (("k", v) for v in values))
    _emit(buffer, [("j", "x"), ("k", 100)])
    spill = buffer.spill()
    assert spill is not None
    assert _spill_pairs(spill) == [[("j", "x")] + [("k", v) for v in [*values, 100]]]


def test_single_partition_never_calls_the_partitioner(tmp_path: Path) -> None:
    def partitioner(key: Any) -> int:
        raise AssertionError("not called with one partition")

    buffer = MapOutputBuffer(tmp_path, 1, partitioner)
    _emit(buffer, [("a", 1)])
    assert buffer.spill() is not None


def test_combiner_applied_per_key_with_counters(tmp_path: Path) -> None:
    seen: list[tuple[Any, list[Any]]] = []

    def combiner(key: Any, values: list[Any]) -> Iterator[Pair]:
        seen.append((key, list(values)))
        yield key, sum(values)

    buffer = MapOutputBuffer(tmp_path, 2, _by_length(2), combiner)
    _emit(buffer, [("a", 1), ("bb", 2), ("a", 3), ("a", 4), ("ccc", 5), ("bb", 6)])
    spill = buffer.spill()
    assert spill is not None
    assert sorted(seen) == [("a", [1, 3, 4]), ("bb", [2, 6]), ("ccc", [5])]
    assert [key for key, _ in seen] == ["a", "bb", "ccc"]  # called once per key, in key order
    assert sorted(pair for p in _spill_pairs(spill) for pair in p) == [("a", 8), ("bb", 8), ("ccc", 5)]
    counters = buffer.counters
    assert counters.map_output_records == 6
    assert counters.combine_input_records == 6
    assert counters.combine_output_records == 3
    assert counters.spill_files == 1


def test_combiner_may_yield_zero_or_several_pairs(tmp_path: Path) -> None:
    def combiner(key: Any, values: list[Any]) -> Iterator[Pair]:
        if key == "drop":
            return
        for value in sorted(set(values)):
            yield key, value

    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), combiner)
    _emit(buffer, [("drop", 1), ("keep", 3), ("keep", 1), ("keep", 3), ("keep", 2)])
    spill = buffer.spill()
    assert spill is not None
    assert _spill_pairs(spill) == [[("keep", 1), ("keep", 2), ("keep", 3)]]
    assert spill.records == 3
    counters = buffer.counters
    assert (counters.combine_input_records, counters.combine_output_records) == (5, 3)


def test_combiner_is_also_applied_in_later_spills_and_counters_accumulate(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), _sum_combiner, spill_records=4)
    lines = ["a a b", "a", "b b b c", "a"]
    progress = _drain(buffer, _records(lines), _words)
    assert progress[-1] == len(lines)
    spills = buffer.counters.spills
    # after "a a b" + "a" (4 records) spill; after "b b b c" (4) spill; "a" spilled at the end
    assert [_spill_pairs(s)[0] for s in spills] == [[("a", 3), ("b", 1)], [("b", 3), ("c", 1)], [("a", 1)]]
    counters = buffer.counters
    assert counters.map_output_records == counters.combine_input_records == 9
    assert counters.combine_output_records == 5
    assert counters.spill_files == 3
    assert counters.spill_bytes == sum(s.size for s in spills)
    assert [s.path.name for s in spills] == ["spill-00000.spill", "spill-00001.spill", "spill-00002.spill"]


def test_first_spill_is_smaller_when_asked(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), spill_records=10, spill_keys=10**9, first_spill_records=3)
    records = [(i, f"w{i}") for i in range(26)]
    list(buffer.run_map(records, lambda _key, word: [(word, 1)]))
    buffer.spill()
    assert [spill.records for spill in buffer.counters.spills] == [3, 10, 10, 3]


def test_folding_spills_grow_with_the_combiners_reduction(tmp_path: Path) -> None:
    # 40 records per key in the first spill: it folds k = 40 records into one state, so the next spill waits for (at
    # most MAX_SPILL_GROWTH) times more records. A generic combiner keeps lists, which grow with records: no growth.
    records = [(i, f"w{i % 5}") for i in range(3000)]
    for name in "fgs":
        (tmp_path / name).mkdir()
    folding = MapOutputBuffer(tmp_path / "f", 1, None, Sum(), spill_records=200, spill_keys=10**9)
    list(folding.run_map(records, lambda _key, word: [(word, 1)]))
    folding.spill()
    spills = folding.counters.spills
    assert [spill.records for spill in spills] == [5, 5]  # 200 records, then all the remaining 2800 (< 16 * 200)
    assert folding.next_spill_records == 200 * MAX_SPILL_GROWTH
    assert folding.counters.map_output_records == 3000
    state = Counter[str]()
    for spill in spills:
        for key, value in _spill_pairs(spill)[0]:
            state[key] += value
    assert state == Counter(word for _, word in records)

    generic = MapOutputBuffer(tmp_path / "g", 1, None, _sum_combiner, spill_records=200, spill_keys=10**9)
    list(generic.run_map(records, lambda _key, word: [(word, 1)]))
    assert generic.counters.spill_files == 15 and generic.next_spill_records == 200

    # Less reduction (100 keys: k = 2 in 200 records, then 4 in 400): the interval grows only by that much.
    sparse = MapOutputBuffer(tmp_path / "s", 1, None, Sum(), spill_records=200, spill_keys=10**9)
    list(sparse.run_map([(i, f"w{i % 100}") for i in range(1000)], lambda _key, word: [(word, 1)]))
    assert [spill.records for spill in sparse.counters.spills] == [100, 100]
    assert sparse.pending_records == 400 and sparse.next_spill_records == 800


def test_spill_records_threshold_through_run_map(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 2, _by_length(2), spill_records=10, spill_keys=10**9)
    records = [(i, f"w{i % 3}") for i in range(25)]
    spills: list[SpillFile] = []
    buffer.on_spill = spills.append
    loop = buffer.run_map(records, lambda key, value: [(value, key)])
    assert spills == []  # nothing runs before the generator is iterated
    assert list(loop)[-1] == 25
    assert len(spills) == 2 and buffer.pending_records == 5
    assert buffer.spill() is not None
    assert len(spills) == 3 and buffer.pending_records == 0
    assert spills == buffer.counters.spills
    assert [s.records for s in spills] == [10, 10, 5]
    assert buffer.counters.map_output_records == 25
    assert buffer.spill() is None  # nothing left
    assert buffer.counters.spill_files == 3


@pytest.mark.parametrize("combine", [False, True])
def test_large_values_spill_by_bytes_before_spill_records(tmp_path: Path, combine: bool) -> None:
    # 100 KB values, a 1 MB budget: about 10 a spill, whatever spill_records says (a map yielding megabyte values
    # held millions of them before its first spill). Nothing is lost, in order; progress does not come per record.
    value = "v" * 100_000
    buffer = MapOutputBuffer(
        tmp_path,
        1,
        None,
        (lambda key, values: [(key, len(values))]) if combine else None,
        spill_records=10**9,
        spill_bytes=1_000_000,
    )
    progress = _drain(buffer, ((i, i) for i in range(5000)), lambda key, number: [(number % 7, value)])
    assert progress[-1] == 5000 and progress == sorted(set(progress)) and len(progress) <= 5000 // 16 + 1
    spills = buffer.counters.spills
    assert len(spills) >= 5000 // 12
    assert max(spill.records if not combine else sum(v for _, v in _spill_pairs(spill)[0]) for spill in spills) <= 11
    if combine:
        assert sum(v for spill in spills for _, v in _spill_pairs(spill)[0]) == 5000
    else:
        assert sum(len(_spill_pairs(spill)[0]) for spill in spills) == 5000
    assert buffer.counters.map_output_records == 5000


@pytest.mark.parametrize("combine", [False, True])
def test_a_spill_of_large_values_is_packed_as_it_is_written(tmp_path: Path, combine: bool) -> None:
    """A spill of megabyte values holds one packed block at a time beside them, not their whole encoding. Before,
    the 16 values of 1 MiB here were packed as one block (16 MiB), cut and packed again (16 MiB more, then joined:
    16 more) before the spill was written: the map held its values about four times over."""
    values = [bytes([number]) * (1 << 20) for number in range(16)]  # (made before the measure: the map's own)
    passing = (lambda key, group: ((key, value) for value in group)) if combine else None
    buffer = MapOutputBuffer(tmp_path, 1, None, passing, spill_bytes=64 << 20)
    tracemalloc.start()
    try:
        buffer.collect((number % 2, value) for number, value in enumerate(values))
        (spill,) = [buffer.spill()]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 << 20, peak  # a block or two, the packer's buffer
    assert spill is not None
    assert Counter(_spill_pairs(spill)[0]) == Counter((number % 2, value) for number, value in enumerate(values))


def test_a_spill_of_a_few_large_states_among_small_ones_is_packed_in_bounded_memory(tmp_path: Path) -> None:
    """A block whose first state is small is packed whole, found too large and cut again at its mean size, and
    again while the large states stay in its first part: here 20 ``TopK(1000)`` states of 100 KB among 2,000 of
    one value. Each level of that cutting made a packer of its own, whose buffer grew to the block it packed and
    stayed so while the levels below it ran: 19.8 MB at the spill's peak for 2 MB of large states. The levels now
    share the run's packer: 4.5 MB."""
    buffer = MapOutputBuffer(tmp_path, 1, None, TopK(1000), sort_runs=False)
    pairs = [("a-small", "x")]
    pairs += [(f"hot{number % 20:02d}", f"{number:0100d}") for number in range(20_000)]
    pairs += [(f"cold{number:04d}", "x") for number in range(2000)]
    buffer.collect(pairs)
    del pairs
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        spill = buffer.spill()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert spill is not None and spill.records == 2021
    assert peak < 10 << 20, f"{peak / 1e6:.1f} MB"


def test_a_spill_that_cannot_be_encoded_leaves_no_file(tmp_path: Path) -> None:
    """Runs are packed as the spill file is written: a value msgpack refuses stops the spill and its temporary
    file is removed."""
    buffer = MapOutputBuffer(tmp_path, 1, None)
    buffer.collect([("a", 1), ("b", {2})])
    with pytest.raises(UnencodableRecordError, match="map output value"):
        buffer.spill()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("shape", ["holds_itself", "nests_too_deep"])
def test_a_value_holding_itself_or_nesting_too_deep_is_named(tmp_path: Path, shape: str) -> None:
    """A list holding itself (``v.append(v)``) made the search for the part that cannot be encoded recurse without
    end, and one nested 100,000 deep made ``repr`` raise ``RecursionError``: the engine's own failure, retried four
    times without naming the record. Both are an ``UnencodableRecordError`` saying what is wrong."""
    value: list[Any] = []
    if shape == "holds_itself":
        value.append(value)
    else:
        for _ in range(100_000):
            value = [value]
    buffer = MapOutputBuffer(tmp_path, 1, None)
    buffer.collect([("a", 1), ("b", value)])
    with pytest.raises(UnencodableRecordError) as raised:
        buffer.spill()
    message = str(raised.value)
    assert "output value [" in message and "of key 'b'" in message, message
    assert "holds itself, or nests deeper than msgpack's limit (1,024 levels)" in message, message
    assert not list(tmp_path.iterdir())


def test_a_tuple_key_holding_a_list_names_the_list(tmp_path: Path) -> None:
    """A key ``('a', [1])`` was named as "a tuple, which cannot be a key", though tuples are keys: the list in it
    is what cannot be."""
    buffer = MapOutputBuffer(tmp_path, 1, None)
    with pytest.raises(UnhashableKeyError) as raised:
        _drain(buffer, [(0, "a")], lambda offset, line: [((line, (2, [1])), 1)])
    assert str(raised.value).startswith(
        "map output key ('a', (2, [1])) is a tuple holding [1], a list, which cannot be a key (keys are grouped"
    ), raised.value


def test_small_values_keep_the_record_threshold(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, None, spill_records=1000, spill_bytes=1 << 20)
    _drain(buffer, ((i, i) for i in range(2500)), lambda key, number: [(number % 7, 1)])
    assert [spill.records for spill in buffer.counters.spills] == [1000, 1000, 500]


@pytest.mark.parametrize("aggregate", [TopK(1000), CountDistinct()], ids=["top_k", "count_distinct"])
def test_a_folding_buffer_spills_once_its_states_take_its_byte_budget(tmp_path: Path, aggregate: Any) -> None:
    """A folding buffer spilled at ``spill_keys`` keys (200,000) whatever a key's state held: 200,000 ``TopK(1000)``
    heaps of 20 strings of 100 characters took 730 MB above a map's start against its 256 MiB budget. It measures
    its states and spills at about ``spill_bytes`` of them: a key and its 20 values take about 3.5 KB here (4.2 KB
    as ``CountDistinct``'s dict), so about 250-300 keys fit in 1 MiB. Before, all 3,000 keys went in one spill."""
    buffer = MapOutputBuffer(tmp_path, 2, None, aggregate, spill_bytes=1 << 20, sort_runs=False)
    records = ((f"k{number // 20:05d}", number) for number in range(3000 * 20))  # a key's values one after another
    _drain(buffer, records, lambda key, number: [(key, f"{number:0100d}")])
    held = [spill.records for spill in buffer.counters.spills]  # keys: one state each
    assert len(held) >= 8 and max(held) <= 450 and min(held[:-1]) >= 150, held
    values = Counter[str]()
    for spill in buffer.counters.spills:
        for partition in _spill_pairs(spill):
            for key, state in partition:
                values[key] += len(state)
    assert len(values) == 3000 and set(values.values()) == {20}


def test_a_folding_buffer_counts_a_skewed_inputs_hot_keys_at_their_size(tmp_path: Path) -> None:
    """The keys a buffer sees first (a skewed input's hot ones) are sampled apart from the many keys it sees later:
    here 40 hot keys fill ``TopK(400)`` heaps of 100-character strings (about 64 KB each, 2.6 MB together) among
    4,000 keys of one value each (0.4 KB each, 1.6 MB together), against a 1 MiB budget. Counting every key at the
    latest pair's key (a hot one here) spilled every 0.25 MiB of states; counting every key at the newest one (a
    cold one) let a spill take 2.96 MiB; before states were measured, one spill took all 4.2 MB."""
    budget = 1 << 20

    def pairs(_key: Any, number: int) -> list[Pair]:
        cold = [(f"cold{number:05d}", f"{number:0100d}")] if number % 4 == 0 else []
        return [*cold, (f"hot{number % 40:02d}", f"{number:0100d}")]

    buffer = MapOutputBuffer(tmp_path, 1, None, TopK(400), spill_bytes=budget, sort_runs=False)
    _drain(buffer, ((number, number) for number in range(16_000)), pairs)
    held = [sum(state_bytes(key, list(state)) for key, state in _spill_pairs(s)[0]) for s in buffer.counters.spills]
    assert len(held) >= 3 and max(held) < 1.5 * budget and min(held[:-1]) > budget / 2, held


def test_a_spills_callback_runs_once_the_states_it_wrote_are_let_go(tmp_path: Path) -> None:
    """The callback (a map task's flow control) may merge held spills, with a dict of states of its own: the
    buffer's states must be gone by then. Before, the spill and the map loop both still held the full map while
    the callback ran: about 2 MB of ``TopK`` states here, beside whatever the merge held."""
    held: list[int] = []
    buffer = MapOutputBuffer(tmp_path, 1, None, TopK(100), spill_bytes=2 << 20, sort_runs=False)
    buffer.on_spill = lambda _spill: held.append(tracemalloc.get_traced_memory()[0] - base)
    records = ((f"k{number // 20:05d}", number) for number in range(1000 * 20))
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        _drain(buffer, records, lambda key, number: [(key, f"{number:0100d}")])
    finally:
        tracemalloc.stop()
    assert len(held) >= 2 and max(held) < 512 << 10, held


def test_spill_keys_threshold_through_run_map(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), spill_records=10**9, spill_keys=3)
    records = _records(["a b", "a", "c", "a b", "d e f", "g"])
    _drain(buffer, records, _words)
    # distinct keys reach 3 after "c" and after "d e f" (a, b, d, e, f); "g" is spilled at the end
    assert [[k for k, _ in _spill_pairs(s)[0]] for s in buffer.counters.spills] == [
        ["a", "a", "b", "c"],
        ["a", "b", "d", "e", "f"],
        ["g"],
    ]
    assert buffer.counters.map_output_records == 10


def test_threshold_is_checked_per_input_record(tmp_path: Path) -> None:
    """One map call that emits past the threshold spills once, after the call."""
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), spill_records=5)
    _drain(buffer, [(0, 0)], lambda key, value: ((i, i) for i in range(12)))
    assert [s.records for s in buffer.counters.spills] == [12]


def test_collect_spills_on_threshold(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), spill_records=3)
    buffer.collect([("a", 1), ("b", 2)])
    assert buffer.counters.spill_files == 0 and buffer.pending_records == 2
    buffer.collect([("c", 3)])
    assert buffer.counters.spill_files == 1 and buffer.pending_records == 0


def test_run_map_progress_and_mapper_returning_none(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1))
    records = [(i, i) for i in range(10000)]
    progress = _drain(buffer, records, lambda key, value: None if value % 2 else [(value % 7, 1)])
    assert progress[:4] == [16, 32, 64, 128] and progress[-1] == 10000 and progress == sorted(set(progress))
    assert buffer.counters.map_output_records == 5000
    assert buffer.counters.spill_files == 1


@pytest.mark.parametrize("records", [0, 1, 15, 16, 17, 32])
def test_run_map_says_each_count_once(tmp_path: Path, records: int) -> None:
    """The last record landing on a yield of the stride (16, 32... records, or wherever a slow map's stride put it)
    was said twice, by that yield and by the one at the end of the input: a count of progress that did not move
    (and, under load, a test of large values failing on it)."""
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1))
    progress = _drain(buffer, [(i, i) for i in range(records)], lambda key, value: [(value, 1)])
    assert progress == sorted(set(progress)) and progress[-1] == records


def test_run_map_yields_within_a_few_records_when_records_are_slow(tmp_path: Path) -> None:
    """Progress reports and control messages (flow control, split requests) are read at ``run_map``'s yields: a map
    whose records take milliseconds yields every 16 records (its stride is cut to about 20 ms, at least 16), not
    every 4,096 (seconds)."""

    def slow(key: int, value: int) -> list[tuple[int, int]]:
        time.sleep(0.003)
        return [(key % 3, 1)]

    buffer = MapOutputBuffer(tmp_path, 1, None, Sum())
    assert _drain(buffer, [(i, i) for i in range(60)], slow) == [16, 32, 48, 60]


def test_run_map_on_no_records(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 2, _by_length(2))
    assert _drain(buffer, [], _words) == [0]
    assert buffer.counters.spill_files == 0 and buffer.counters.spills == []
    assert list(tmp_path.iterdir()) == []


def test_mapper_error_names_the_offending_record(tmp_path: Path) -> None:
    """run_map's contract: if ``mapper`` raises, the offending record is in ``current_record``."""

    def mapper(key: Any, value: str) -> list[Pair]:
        if value == "bad":
            raise ValueError("boom")
        return [(value, 1)]

    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1))
    with pytest.raises(ValueError, match="boom"):
        _drain(buffer, [(0, "ok"), (3, "fine"), (9, "bad"), (12, "never")], mapper)
    assert buffer.current_record == (9, "bad")


@pytest.mark.parametrize("aggregate", [Sum(), Max()])
def test_a_none_first_value_to_an_aggregate_is_an_error_not_lost(tmp_path: Path, aggregate: Any) -> None:
    """A key's first ``None`` used to be taken for "no state yet" and replaced by the next value: ``Sum`` of
    ``None, 3`` came out 3. A state is never None: the map loop refuses it, naming the aggregate and the key."""
    buffer = MapOutputBuffer(tmp_path, 1, None, aggregate)
    with pytest.raises(AggregateValueError, match=re.escape(f"{aggregate!r} got None as the first value of key 'x'")):
        _drain(buffer, [(0, [("x", None), ("x", 3)])], lambda _key, value: value)
    assert buffer.current_record == (0, [("x", None), ("x", 3)])


def test_a_sums_key_with_one_value_keeps_that_value_as_yielded(tmp_path: Path) -> None:
    """The map loop adds a key's first value to no state at all, not to 0: a lone ``True`` stays ``True`` and a
    lone ``-0.0`` stays ``-0.0`` (``0 + True`` is 1 and ``0 + -0.0`` is 0.0), as every other fold keeps them."""
    spills: list[SpillFile] = []
    buffer = MapOutputBuffer(tmp_path, 1, None, Sum(), on_spill=spills.append)
    pairs = [("yes", True), ("neg", -0.0), ("half", 0.5), ("half", 2), ("n", 7)]
    _drain(buffer, [(0, pairs)], lambda _key, value: value)
    [folded] = _spill_pairs(spills[0])
    assert {key: (type(value), repr(value)) for key, value in folded} == {
        "half": (float, "2.5"),
        "n": (int, "7"),
        "neg": (float, "-0.0"),
        "yes": (bool, "True"),
    }


@pytest.mark.parametrize("aggregate", [Sum(), Max(), Mean()])
def test_a_value_the_aggregate_refuses_leaves_the_pair_that_failed(tmp_path: Path, aggregate: Any) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, None, aggregate)
    with pytest.raises(TypeError):
        _drain(buffer, [(0, [("x", 3)]), (1, [("y", 1), ("x", "three")])], lambda _key, value: value)
    assert buffer.failed_pair == ("x", "three") and buffer.current_record == (1, [("y", 1), ("x", "three")])
    assert buffer.folding


class _CountDistinctByMerge(CountDistinct):
    """CountDistinct folded by ``merge(state, lift(value))``, counting its merges: the fold before accumulators."""

    accumulates = False
    merges = 0

    def merge(self, a: Any, b: Any) -> Any:  # type: ignore[override]
        type(self).merges += 1
        return CountDistinct.merge(a, b)


class _CountedCountDistinct(CountDistinct):
    merges = 0

    def merge(self, a: Any, b: Any) -> Any:  # type: ignore[override]
        type(self).merges += 1
        return CountDistinct.merge(a, b)


def test_count_distinct_folds_a_keys_values_into_one_accumulator(tmp_path: Path) -> None:
    """Folding CountDistinct value by value (``merge(state, lift(value))``) built a new tuple of the state's n values
    for every new one: O(n²) per key, 17 s for one key of 100,000 distinct values. The map loop adds each value to
    the key's accumulator in place (no merge at all) and the spill holds the same states, byte for byte."""
    records = [(n, [("hot", n % 5000), (f"k{n % 7}", n % 3), ("hot", -1)]) for n in range(20_000)]
    spills = []
    for name, aggregate in (("merged", _CountDistinctByMerge()), ("accumulated", _CountedCountDistinct())):
        buffer = MapOutputBuffer(tmp_path, 2, None, aggregate, name=name)
        _drain(buffer, records, lambda _key, value: value)
        assert len(buffer.counters.spills) == 1
        spills.append(buffer.counters.spills[0])
    assert _CountDistinctByMerge.merges == 60_000 - 1 - 7 and _CountedCountDistinct.merges == 0
    assert spills[0].path.read_bytes() == spills[1].path.read_bytes()
    states = dict(pair for partition in _spill_pairs(spills[1]) for pair in partition)
    assert len(states["hot"]) == 5001 and states["hot"][:3] == (0, -1, 1) and states["k3"] == (0, 1, 2)


class _TopKByMerge(TopK):
    accumulates = False


def test_top_k_folds_into_a_heap_and_spills_what_merges_give(tmp_path: Path) -> None:
    """TopK merged k + 1 values, sorted, for every value; its accumulator is a heap of k (O(log k) a value). The
    spills are the same bytes."""
    rng = random.Random(7)
    records = [(n, [(f"k{n % 5}", rng.randrange(1000)), ("hot", rng.random())]) for n in range(20_000)]
    spills = []
    for name, aggregate in (("merged", _TopKByMerge(50)), ("heap", TopK(50))):
        buffer = MapOutputBuffer(tmp_path, 2, None, aggregate, name=name)
        _drain(buffer, records, lambda _key, value: value)
        assert len(buffer.counters.spills) == 1
        spills.append(buffer.counters.spills[0])
    assert spills[0].path.read_bytes() == spills[1].path.read_bytes()
    states = dict(pair for partition in _spill_pairs(spills[1]) for pair in partition)
    assert states["hot"] == tuple(
        sorted((value for _, pairs in records for key, value in pairs if key == "hot"), reverse=True)[:50]
    )


def test_a_value_count_distinct_cannot_hold_leaves_the_pair_that_failed(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, None, CountDistinct())
    with pytest.raises(TypeError, match="unhashable"):
        _drain(buffer, [(0, [("x", 3)]), (1, [("y", 1), ("x", [3])])], lambda _key, value: value)
    assert buffer.failed_pair == ("x", [3]) and buffer.current_record == (1, [("y", 1), ("x", [3])])


def test_spill_tag_covers_all_keys_of_the_spill(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 2, lambda key: 0 if isinstance(key, str) else 1)
    _emit(buffer, [("b", 1), (2, 2), ("a", 3), (None, 4), ((1, "x"), 5), (1.5, 6)])
    spill = buffer.spill()
    assert spill is not None
    assert [e.order_tag for e in spill.partitions] == [MIXED, MIXED]
    assert _spill_pairs(spill) == [[("a", 3), ("b", 1)], [(None, 4), (1.5, 6), (2, 2), ((1, "x"), 5)]]


def test_tuple_keys_come_back_as_tuples(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1))
    _emit(buffer, [(("b", 1), [1, 2]), (("a", 2), {"x": [3]})])
    spill = buffer.spill()
    assert spill is not None
    assert spill.partitions[0].order_tag == "(sn)"
    assert _spill_pairs(spill) == [[(("a", 2), {"x": (3,)}), (("b", 1), (1, 2))]]


@pytest.mark.parametrize("bad", [3, -1, "1", 1.0, None, True, 10**20])
def test_bad_partition_raises_partition_error(tmp_path: Path, bad: Any) -> None:
    buffer = MapOutputBuffer(tmp_path, 3, lambda key: bad if key == "odd" else 0)
    _emit(buffer, [("even", 1), ("odd", 2)])
    with pytest.raises(PartitionError) as info:
        buffer.spill()
    message = str(info.value)
    assert f"partition('odd') returned {bad!r}" in message
    assert "range(3)" in message
    assert not list(tmp_path.glob("*.spill"))


def test_combiner_changing_the_key_raises(tmp_path: Path) -> None:
    def combiner(key: Any, values: list[Any]) -> Iterator[Pair]:
        yield key.upper(), sum(values)

    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), combiner)
    _emit(buffer, [("A", 1), ("b", 2)])
    with pytest.raises(CombinerKeyError) as info:
        buffer.spill()
    assert "combine('b', ...) yielded key 'B'" in str(info.value)
    assert not list(tmp_path.glob("*.spill"))


@pytest.mark.parametrize("output", [[3], [("b", 1, 2)], ["b"]], ids=["int", "triple", "str"])
def test_combiner_yielding_other_than_pairs_names_the_key(tmp_path: Path, output: list[Any]) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), lambda key, values: output)
    _emit(buffer, [("b", 1), ("b", 2)])
    with pytest.raises(CombinerKeyError) as info:
        buffer.spill()
    assert "combine('b', ...) must yield (key, value) pairs" in str(info.value)
    assert not list(tmp_path.glob("*.spill"))


def test_combiner_may_yield_an_equal_key_of_another_type(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), lambda key, values: [(float(key), sum(values))])
    _emit(buffer, [(1, 1), (1, 2), (2, 5)])
    spill = buffer.spill()
    assert spill is not None
    pairs = _spill_pairs(spill)[0]
    assert pairs == [(1, 3), (2, 5)]
    assert all(type(key) is int for key, _ in pairs)  # the buffer writes the key it gave the combiner


def test_a_nan_key_is_refused_as_its_spill_is_sorted(tmp_path: Path) -> None:
    """A NaN key went through (its combiner was not told it changed the key, NaN being unequal to itself), but one
    NaN never groups with another once decoded on a reducer and unsorts its run: the spill refuses it."""
    nan = float("nan")
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), lambda key, values: [(key, sum(values))])
    _emit(buffer, [(2.5, 1), (nan, 1), (0.5, 2)])
    with pytest.raises(NanKeyError, match="map output key nan is or holds a float NaN"):
        buffer.spill()


@pytest.mark.parametrize("aggregate", [Sum(), Mean(), None], ids=["in-place sum", "lift and merge", "lists"])
def test_a_map_yielding_a_str_is_refused_on_the_records_checked(tmp_path: Path, aggregate: Any) -> None:
    """A map's output is read through ``shuffle.pairs.checked_pairs`` on its first record and at least every 4,096th
    after (a str, dict or set would unpack as a pair without an error): a map that starts yielding two-letter codes
    at record 4,097 is refused there, naming the object, whichever loop folds its pairs."""

    def mapper(key: int, value: str) -> Iterator[Any]:
        yield value if key >= 4096 else (value, 1)

    buffer = MapOutputBuffer(tmp_path, 1, None, aggregate)
    with pytest.raises(TypeError, match=re.escape("a str is not a (key, value) pair: 'en'")):
        for _ in buffer.run_map(((number, "en") for number in range(5000)), mapper):
            pass
    assert buffer.current_record == (4096, "en")
    clean = MapOutputBuffer(tmp_path, 1, None, aggregate)
    assert list(clean.run_map(((number, "en") for number in range(4096)), mapper))[-1] == 4096


def test_spill_name(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 1, _by_length(1), name="map-00003-1")
    _emit(buffer, [("a", 1)])
    spill = buffer.spill()
    assert spill is not None and spill.path == tmp_path / "map-00003-1-00000.spill"


# -- property: spilled runs, regrouped, equal a plain dict computation ---------------------------------------

_tokens = st.one_of(
    st.text(alphabet="abcxyzé", max_size=3),
    st.integers(-50, 50),
    st.tuples(st.sampled_from("ab"), st.integers(0, 3)),
    st.binary(max_size=2),
)


def _partitioner(partitions: int) -> Any:
    return lambda key: sum(map(ord, repr(key))) % partitions


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.lists(_tokens, max_size=6), max_size=25),
    partitions=st.integers(1, 4),
    spill_records=st.integers(1, 30),
    spill_keys=st.integers(1, 20),
    combine=st.booleans(),
    data=st.data(),
)
def test_spills_regrouped_equal_a_dict_computation(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[list[Any]],
    partitions: int,
    spill_records: int,
    spill_keys: int,
    combine: bool,
    data: st.DataObject,
) -> None:
    spill_dir = tmp_path_factory.mktemp("spills")
    partitioner = _partitioner(partitions)

    def mapper(index: int, tokens: list[Any]) -> Iterator[Pair]:
        for position, token in enumerate(tokens):
            yield token, (index, position)

    def combiner(key: Any, values: list[Any]) -> Iterator[Pair]:
        yield key, [len(values), values]  # keeps everything, so the regrouped result stays checkable

    buffer = MapOutputBuffer(
        spill_dir,
        partitions,
        partitioner,
        combiner if combine else None,
        spill_records=spill_records,
        spill_keys=spill_keys,
    )
    _drain(buffer, list(enumerate(lines)), mapper)

    expected: dict[Any, list[Any]] = {}
    for index, tokens in enumerate(lines):
        for position, token in enumerate(tokens):
            expected.setdefault(token, []).append((index, position))

    counters = buffer.counters
    emitted = sum(map(len, lines))
    assert counters.map_output_records == emitted
    assert counters.spill_files == len(counters.spills) == len(list(spill_dir.glob("*.spill")))
    assert counters.spill_bytes == sum(s.size for s in counters.spills)

    regrouped: dict[Any, list[Any]] = {}
    written = 0
    for spill in counters.spills:
        spill_keys_seen: Counter[Any] = Counter()
        for partition, pairs in enumerate(_spill_pairs(spill)):
            keys = [key for key, _ in pairs]
            assert _is_sorted(keys)
            assert all(partitioner(key) == partition for key in keys)
            written += len(pairs)
            for key, value in pairs:
                if combine:
                    count, values = value
                    assert count == len(values)
                    spill_keys_seen[key] += 1
                    regrouped.setdefault(key, []).extend(values)
                else:
                    regrouped.setdefault(key, []).append(value)
        if combine:  # one combine call per key and spill, each yielding one pair
            assert all(count == 1 for count in spill_keys_seen.values())
    assert regrouped == expected
    if combine:
        assert counters.combine_input_records == emitted
        assert counters.combine_output_records == written
    else:
        assert counters.combine_input_records == counters.combine_output_records == 0
        assert written == emitted


def test_spill_into_a_missing_directory_names_it(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path / "gone", 1, None, _sum_combiner, spill_records=10**9)
    buffer.collect([("k", 1)])
    with pytest.raises(SpillWriteError, match=r"gone/spill-00000\.spill: .*exists and is writable"):
        buffer.spill()


def test_without_a_combiner_a_spill_sends_each_key_once_with_its_values(tmp_path: Path) -> None:
    buffer = MapOutputBuffer(tmp_path, 2, _by_length(2), spill_records=10**6)
    lines = ["a bb a", "bb a ccc", "a"]
    _drain(buffer, _records(lines), lambda offset, line: ((word, offset) for word in line.split()))
    (spill,) = buffer.counters.spills
    for partition in range(2):
        blocks = list(iter_stored_blocks(spill.read_partition(partition)))
        assert all(is_grouped(block) for block in blocks)
        keys = [key for block in blocks for key in block[0]]
        assert len(keys) == len(set(keys)), "a key once per block"
    assert sorted(pair for run in _spill_pairs(spill) for pair in run) == sorted(
        [("a", 0), ("a", 0), ("bb", 0), ("bb", 1), ("a", 1), ("ccc", 1), ("a", 2)]
    )
    assert [value for key, value in _spill_pairs(spill)[1] if key == "a"] == [0, 0, 1, 2], "values in map order"
    assert spill.records == 7
