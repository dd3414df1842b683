"""A reducer's snapshots keep to its memory budget: the per-attempt summaries write their keys to disk past the
budget and a snapshot streams its rows in key order (``hop.online.state``, ``hop.online.snapshots``), with the same
files and answer as when everything is held in memory."""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path
from typing import Any

from hop.aggregates import Count, CountDistinct, Mean, Sum
from hop.online.reducer import ReducerSnapshots
from hop.online.snapshots import staging_directory
from hop.online.state import summary_keys
from shuffle.buffer import state_bytes
from shuffle.fold import FoldingRunStore
from shuffle.keys import order_tag, sort_keys
from shuffle.runs import encode_run
from shuffle.store import RunStore


def _snapshots(tmp_path: Path, name: str, aggregate: Any, memory_limit: int, chunks: int) -> ReducerSnapshots:
    """A partition's snapshot machinery as a reduce task builds it for an online job of ``aggregate``."""
    store = FoldingRunStore(tmp_path / name / "store", aggregate, memory_limit=memory_limit)
    (tmp_path / name / "store").mkdir(parents=True)
    (tmp_path / name / "out").mkdir()  # (the job's output, which its coordinator made)
    strata = [str(chunk % 3) for chunk in range(chunks)]
    return ReducerSnapshots(
        str(tmp_path / name / "out"),
        0,
        store,
        lambda key, values: [(key, sum(values))],
        aggregate,
        strata,
        lambda key: str(len(str(key)) % 4),  # stratum "3" is no file's: estimated as one stratum
        0.9,
        chunk_sizes=[1000 + 37 * chunk for chunk in range(chunks)],
    )


def _send(snapshots: ReducerSnapshots, task: int, attempt: int, seq: int, chunk: int, pairs: dict[Any, Any]) -> None:
    keys, _ = sort_keys(list(pairs))
    header = {"map": task, "attempt": attempt, "seq": seq, "records": len(keys), "tag": order_tag(keys)}
    header.update(chunk=chunk, end=True)
    snapshots.receive(header, encode_run(keys, [pairs[key] for key in keys]))


def test_a_snapshot_of_many_distinct_keys_keeps_to_the_reducers_budget(tmp_path: Path) -> None:
    """60,000 distinct keys in 20 chunks of 2 map attempts under a 1 MB budget. The summaries held every key (about
    300 bytes each) and a snapshot built a table of every group besides (keys, values, estimates, its sorted copy,
    their JSON texts): 51 MB of allocations here. Now the summaries write keys past the budget to disk and the
    snapshot streams them: 6 MB."""
    warm = _snapshots(tmp_path, "warm", Sum(), 1 << 20, chunks=20)  # imports (numpy) are no snapshot's memory
    _send(warm, 0, 0, 0, 0, {"abc": 1})
    warm.answer([{"label": "0.100"}])
    snapshots = _snapshots(tmp_path, "bounded", Sum(), 1 << 20, chunks=20)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for chunk in range(20):
            task = chunk % 2
            _send(snapshots, task, 0, chunk // 2, chunk, {f"w{chunk:02d}-{i:05d}": i % 7 + 1 for i in range(3000)})
        fields = snapshots.answer([{"label": "0.500"}])[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        snapshots.close()
        snapshots.store.close()
    assert "error" not in fields and fields["groups"] == 60_000
    assert peak - base < 10 << 20, f"{(peak - base) / 1e6:.1f} MB"
    lines = (staging_directory(tmp_path / "bounded" / "out", "0.500") / "part-00000").read_text().splitlines()
    assert len(lines) == 60_000 and lines[0].startswith('"w00-00000"\t') and lines[-1].startswith('"w19-02999"\t')


def test_summaries_of_large_states_keep_to_the_reducers_budget(tmp_path: Path) -> None:
    """A summary's key was counted at 320 bytes whatever its state: under an 8 MiB budget the summaries held up to
    13,107 keys before writing any to disk, where a ``CountDistinct`` state of 10 words costs about 940 bytes with its
    key (12 MB for those keys, three times the summaries' half of the budget; the words following each word of a
    30 MB text took a snapshotting reducer 118 MB above its start under 16 MB). The summaries measure their states
    as chunks are folded and keep to about half the budget: here 12,000 keys (11 MB) in 24 chunks, which all stayed
    in memory before."""
    budget = 8 << 20
    snapshots = _snapshots(tmp_path, "large", CountDistinct(), budget, chunks=24)
    try:
        for chunk in range(24):
            states = {
                f"w{chunk:02d}-{i:03d}": tuple(f"{chunk:02d}-{i:03d}-next-{j:02d}" for j in range(10))
                for i in range(500)
            }
            _send(snapshots, chunk % 2, 0, chunk // 2, chunk, states)
        state = snapshots.state
        assert state is not None and state.dumped_keys > 0, "the summaries were not written out"
        held = sum(
            state_bytes(key, value) for summary in state.attempts.values() for key, value in summary.state.items()
        )
        assert held < budget * 0.75, f"{held / 1e6:.1f} MB held"
        fields = snapshots.answer([{"label": "0.500"}])[0]
    finally:
        snapshots.close()
        snapshots.store.close()
    assert "error" not in fields and fields["groups"] == 12_000
    lines = (staging_directory(tmp_path / "large" / "out", "0.500") / "part-00000").read_text().splitlines()
    assert len(lines) == 12_000 and lines[0] == '"w00-000"\t10'


def test_summaries_of_numbers_hold_the_keys_their_floor_allows(tmp_path: Path) -> None:
    """Measuring a summary's keys must not cost totals and means keys: their states and moments are a few numbers,
    within the 320 bytes a key the summaries' budget was set with (448 with a Sum's or a Mean's third powers).
    Counting the moments and the dict's slot on top held 14% fewer keys of a ``Sum`` in memory, 36% fewer of a
    ``Mean``, and wrote the rest to disk sooner."""
    budget = 8 << 20
    cases = (("count", Count(), 7, 320), ("sum", Sum(), 7, 448), ("mean", Mean(), (2, 5.0), 448))
    for name, aggregate, value, floor in cases:  # (a mean's state: count, total)
        snapshots = _snapshots(tmp_path, name, aggregate, budget, chunks=2)
        try:
            _send(snapshots, 0, 0, 0, 0, {f"word-{i:05d}": value for i in range(2_000)})
            state = snapshots.state
            assert state is not None and state.max_keys == summary_keys(budget, floor), (name, state.max_keys)
        finally:
            snapshots.close()
            snapshots.store.close()


def _random_runs(seed: int, chunks: int) -> list[tuple[int, int, int, int, dict[Any, Any]]]:
    """(task, attempt, seq, chunk, pairs) of 3 map tasks over ``chunks`` chunks, keys of mixed types."""
    rng = random.Random(seed)
    keys: list[Any] = [f"k{i}" for i in range(900)] + list(range(300)) + [f"long-key-{i}" for i in range(300)]
    runs = []
    for chunk in range(chunks):
        pairs = {key: rng.randint(1, 50) for key in rng.sample(keys, rng.randint(50, 700))}
        runs.append((chunk % 3, 0, chunk // 3, chunk, pairs))
    return runs


def _files(snapshots: ReducerSnapshots, label: str) -> tuple[str, str]:
    folder = staging_directory(snapshots.output, label)  # (where a reducer writes: published once all answered)
    return (folder / "part-00000").read_text(), (folder / "estimates-00000.jsonl").read_text()


def test_a_snapshot_written_from_disk_is_the_one_held_in_memory(tmp_path: Path) -> None:
    """The same runs under a budget that holds every key and one (1,024 keys) that writes the summaries out many
    times (merging each summary's runs, and the runs of all of them in passes): byte-identical files and the same
    answer (rows sent, groups, intervals), for Sum and Mean, with strata and mixed key types, as more chunks
    arrive."""
    for aggregate in (Sum(), Mean()):
        name = type(aggregate).__name__
        large = _snapshots(tmp_path, f"{name}-large", aggregate, 1 << 30, chunks=30)
        small = _snapshots(tmp_path, f"{name}-small", aggregate, 1, chunks=30)
        assert small.state is not None
        small.state.max_dumps = 2  # (its runs merged every third time it is written out)
        try:
            for position, (task, attempt, seq, chunk, pairs) in enumerate(_random_runs(3, 24)):
                if aggregate.name == "mean":
                    pairs = {key: (1 + value % 3, value) for key, value in pairs.items()}
                for snapshots in (large, small):
                    _send(snapshots, task, attempt, seq, chunk, pairs)
                if position % 8 == 7:
                    label = f"{position}"
                    expected, got = large.take(label), small.take(label)
                    expected.pop("seconds"), got.pop("seconds")
                    assert got == expected, (name, label)
                    assert _files(small, label) == _files(large, label), (name, label)
            assert small.state is not None and small.state.dumped_keys > 3000, "the summaries were not written out"
            assert small.state.compactions > 0, "no summary's runs were merged"
            assert large.state is not None and large.state.dumped_keys == 0
        finally:
            for snapshots in (large, small):
                snapshots.close()
                snapshots.store.close()


def _summed(key: Any, values: list[float]) -> list[tuple[Any, float]]:
    total = 0.0
    for value in values:  # in order: a float sum shows the order the values came in
        total += value
    return [(key, total)]


def test_a_hand_written_reduce_snapshot_streams_the_runs_it_holds(tmp_path: Path) -> None:
    """A hand-written reduce's snapshot grouped every value received in a dict of lists before calling the reduce:
    300,000 float values of 300 keys in 30 runs under a 1 MB budget took 11 MB of allocations. Now the runs are
    merged by key as the final reduce merges them (files in passes, deleted after): a few MB, the same sums (values
    in run order) and no file left behind."""
    store = RunStore(tmp_path / "store", memory_limit=1 << 20)
    for folder in ("store", "out", "warm"):
        (tmp_path / folder).mkdir()
    snapshots = ReducerSnapshots(str(tmp_path / "out"), 0, store, _summed, None, None, None)
    warm = ReducerSnapshots(str(tmp_path / "warm"), 0, RunStore(tmp_path / "store"), _summed, None, None, None)
    warm.answer([{"label": "0.100"}])
    rng = random.Random(5)
    runs = [
        (seq % 3, seq // 3, sorted((f"k{rng.randrange(300):03d}", rng.random()) for _ in range(10_000)))
        for seq in range(30)
    ]
    expected: dict[str, float] = {}
    for _, _, pairs in sorted(runs, key=lambda run: run[:2]):  # a snapshot's run order: map task, then spill
        for key, value in pairs:
            expected[key] = expected.get(key, 0.0) + value
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for task, seq, pairs in runs:
            store.add(task, 0, seq, encode_run([k for k, _ in pairs], [v for _, v in pairs]), len(pairs), "s")
        del runs, pairs
        fields = snapshots.answer([{"label": "0.500"}])[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    try:
        assert "error" not in fields and fields["groups"] == 300
        assert peak - base < 5 << 20, f"{(peak - base) / 1e6:.1f} MB"
        part = staging_directory(tmp_path / "out", "0.500") / "part-00000"
        assert part.read_text() == "".join(f'"{key}"\t{expected[key]!r}\n' for key in sorted(expected))
        assert sorted(path.name for path in (tmp_path / "store").iterdir() if "merged" in path.name) == []
        assert store.disk_bytes == sum(path.stat().st_size for path in (tmp_path / "store").iterdir())
    finally:
        store.close()


def test_a_reduce_failing_mid_snapshot_leaves_no_file_behind(tmp_path: Path) -> None:
    """A hand-written reduce that fails on a key half-way through the merged runs: the answer is the error, and
    neither the store's merge files nor the snapshot's half-written files stay."""

    def failing(key: Any, values: list[float]) -> list[tuple[Any, float]]:
        if key == "k150":
            raise ValueError("no k150 yet")
        return [(key, sum(values))]

    store = RunStore(tmp_path / "store", memory_limit=1 << 20)
    (tmp_path / "store").mkdir()
    (tmp_path / "out").mkdir()
    snapshots = ReducerSnapshots(str(tmp_path / "out"), 0, store, failing, None, None, None)
    try:
        for seq in range(12):
            keys = [f"k{i:03d}" for i in range(300)]
            store.add(seq % 3, 0, seq // 3, encode_run(keys, [float(seq)] * 300), 300, "s")
        runs = sorted(path.name for path in (tmp_path / "store").iterdir())
        fields = snapshots.take("0.500")
        assert fields["error"] == "ValueError: no k150 yet"
        assert sorted(path.name for path in (tmp_path / "store").iterdir()) == runs
        assert [path.name for path in (tmp_path / "out").rglob("*") if path.is_file()] == []
    finally:
        store.close()
