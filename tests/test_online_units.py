"""Online aggregation without processes: estimators, chunk planning, per-attempt snapshot state, the tracker."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest

from hop import Job
from hop.aggregates import Count, Max, Mean, Sum
from hop.inputs import make_splits
from hop.jsonline import to_json
from hop.online.estimators import Bytes, estimate_mean, estimate_total, estimate_totals, t_quantile
from hop.online.reducer import ReducerSnapshots, _interval_fields
from hop.online.snapshots import (
    ROWS_ON_THE_WIRE,
    LargestFirst,
    staging_directory,
    top_positions,
    write_final_partition_snapshot,
)
from hop.online.state import SnapshotRow, SnapshotState, SnapshotTable
from hop.online.tracker import HISTORY_ROWS, MIN_CHUNKS_PER_STRATUM, UNBOUNDED_EXAMPLES, SnapshotTracker
from hop.outputs import OutputGuard
from hop.planning import plan_map_inputs
from hop.runner import STOP_EARLY_SEQUENTIAL, online_options
from shuffle.runs import encode_run
from shuffle.store import RunStore
from tests.conftest import guard_replaced_after_its_check


def test_t_quantile_matches_known_values() -> None:
    assert t_quantile(1, 0.95) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(5, 0.95) == pytest.approx(2.571, abs=1e-3)
    assert t_quantile(10_000, 0.95) == pytest.approx(1.960, abs=1e-3)
    with pytest.raises(ValueError):
        t_quantile(0, 0.95)


def test_estimate_total_by_hand() -> None:
    values = [4.0, 6.0, 5.0, 9.0]  # per-chunk contributions seen; 10 chunks in all
    n, big_n = len(values), 10
    mean = sum(values) / n
    s2 = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_quantile(n - 1, 0.95) * (big_n * big_n * (1 - n / big_n) * s2 / n) ** 0.5
    estimate = estimate_total(sum(values), sum(v * v for v in values), n, big_n)
    assert estimate.value == pytest.approx(big_n * mean)
    assert estimate.low == pytest.approx(big_n * mean - half)
    assert estimate.high == pytest.approx(big_n * mean + half)
    assert not estimate.final


def test_estimate_total_exact_and_too_few() -> None:
    exact = estimate_total(42, 1000, 7, 7)
    assert (exact.value, exact.low, exact.high, exact.final) == (42, 42, 42, True)
    assert exact.relative_half_width == 0.0
    one = estimate_total(5, 25, 1, 10)
    assert one.value == 50 and one.low is None and one.relative_half_width is None
    with pytest.raises(ValueError):
        estimate_total(1, 1, 0, 10)


def test_estimate_mean_is_ratio_and_interval_shrinks() -> None:
    rng = random.Random(3)
    chunks = [[rng.gauss(10, 3) for _ in range(rng.randint(5, 15))] for _ in range(200)]

    def estimate(seen: list[list[float]]):  # noqa: ANN202
        xs = [len(c) for c in seen]
        ys = [sum(c) for c in seen]
        return estimate_mean(
            sum(xs),
            sum(ys),
            sum(x * x for x in xs),
            sum(x * y for x, y in zip(xs, ys, strict=True)),
            sum(y * y for y in ys),
            len(seen),
            len(chunks),
        )

    small, large = estimate(chunks[:10]), estimate(chunks[:100])
    assert small.value == pytest.approx(sum(map(sum, chunks[:10])) / sum(map(len, chunks[:10])))
    assert (small.high - small.low) > (large.high - large.low) > 0
    assert estimate(chunks).final


def test_a_group_seen_in_one_chunk_has_no_interval() -> None:
    """A Mean group that occurred in one chunk of the ten seen had the interval [v, v]: every other chunk's residual
    is 0 (nothing there) and so was its own, so the estimate read as exact, and --stop-when-accurate could stop on
    it. Its interval rests on the chunks it occurred in: none from one."""
    mean = estimate_mean(2, 10.0, 4, 20.0, 100.0, seen=10, chunks=100, occurred=1)
    assert mean.value == 5.0 and mean.low is None and mean.relative_half_width is None
    total = estimate_total(7, 49, seen=10, chunks=100, occurred=1)
    assert total.value == 70 and total.low is None
    # Two occurrences: t with 1 degree of freedom (12.7), not with 9 (2.26).
    two = estimate_total(7, 25, seen=10, chunks=100, occurred=2)
    assert two.low is not None and two.high is not None
    assert (two.high - two.low) / 2 == pytest.approx(
        t_quantile(1, 0.95) * (100 * 100 * 0.9 * ((25 - 10 * 0.7**2) / 9) / 10) ** 0.5
    )
    state = SnapshotState(Mean(), [""] * 20)
    state.add_run(0, 0, 0, run({"rare": (2, 10.0), "common": (3, 9.0)}), chunk=0, end=True)
    for chunk in range(1, 10):
        state.add_run(chunk, 0, 0, run({"common": (3, 9.0 + chunk)}), chunk=chunk, end=True)
    rows = {row.key: row for row in state.rows()}
    assert rows["rare"].estimate is not None and rows["rare"].estimate.low is None
    assert rows["common"].estimate is not None and rows["common"].estimate.low is not None


def test_a_group_whose_chunks_seen_show_no_spread_has_no_interval() -> None:
    """A spread of 0 seen gave an interval of width 0, read as exact, and --stop-when-accurate could stop on it: a
    Sum of mostly-zero values seen as 0 in every chunk so far ([0, 0], though a later chunk may hold a large value),
    a Mean of a 0/1 flag seen as 0 in every record ([0, 0]). A total's chunk that added 0 does not count towards the
    chunks it occurred in, so a Sum seen as non-zero in one chunk only has no interval either."""
    total = SnapshotState(Sum(), [""] * 100)
    mean = SnapshotState(Mean(), [""] * 100)
    for chunk in range(10):
        total.add_run(
            chunk, 0, 0, run({"zeros": 0.0, "one": 5.0 if chunk == 3 else 0.0, "some": chunk % 3}), chunk, True
        )
        mean.add_run(chunk, 0, 0, run({"never": (4, 0.0), "sometimes": (4, float(chunk % 2))}), chunk, True)
    rows = {row.key: row.estimate for row in [*total.rows(), *mean.rows()]}
    for key in ("zeros", "one", "never"):
        estimate = rows[key]
        assert estimate is not None and estimate.low is None and estimate.relative_half_width is None, key
    assert rows["zeros"].value == 0 and rows["one"].value == 50 and rows["never"].value == 0
    for key in ("some", "sometimes"):  # a spread seen: an interval
        estimate = rows[key]
        assert estimate is not None and estimate.low is not None and estimate.high is not None
        assert estimate.low < estimate.value < estimate.high, key
    # The one-group forms agree.
    assert estimate_total(0.0, 0.0, seen=10, chunks=100, occurred=10).low is None
    assert estimate_mean(40, 0.0, 160, 0.0, 0.0, seen=10, chunks=100, occurred=10).low is None
    stop = _interval_fields(total.table())
    assert stop["max_relative_half_width"] is None and stop["unbounded"] == 2


def test_sum_intervals_of_mostly_zero_values_hold_their_level() -> None:
    """A Sum of values mostly 0 (one record in 50 non-zero, 4 records a chunk): at 10% of the chunks, groups seen
    only as 0 got [0, 0], and 95% intervals held their group's final sum 0.58 of the time (1,167 of 2,000); now
    those and the groups seen non-zero in one chunk have no interval, and the 417 intervals left all hold (fixed
    seed; the non-zero values normal, so that skewness is not what is tested)."""
    rng = random.Random(7)
    chunks = [
        {g: sum(rng.gauss(100, 20) if rng.random() < 0.02 else 0.0 for _ in range(4)) for g in range(20)}
        for _ in range(100)
    ]
    truth = {g: sum(chunk[g] for chunk in chunks) for g in range(20)}
    hits = intervals = 0
    for trial in range(100):
        state = SnapshotState(Sum(), [""] * len(chunks))
        for position, chunk in enumerate(random.Random(trial).sample(range(len(chunks)), 10)):
            state.add_run(position, 0, 0, run(chunks[chunk]), chunk=chunk, end=True)
        for row in state.rows():
            if row.estimate is not None and row.estimate.low is not None and row.estimate.high is not None:
                intervals += 1
                hits += row.estimate.low <= truth[row.key] <= row.estimate.high
    assert intervals > 300
    assert hits / intervals >= 0.85


def test_mean_interval_coverage_with_rare_groups() -> None:
    """Mean intervals of groups that occur in few chunks (Zipf-like: most groups are rare) held 95% about a third
    of the time when they used the degrees of freedom of every chunk seen; with those of the chunks the group
    occurred in they hold most of the time (wide margin: a simulation of seeded chunks)."""
    rng = random.Random(5)
    chunks = []
    for _ in range(60):
        chunk: dict[int, list[float]] = {}
        for _ in range(40):
            key = min(int(rng.paretovariate(1.0)), 200)
            chunk.setdefault(key, []).append(rng.lognormvariate(2, 1.0))
        chunks.append(chunk)
    truth: dict[int, list[float]] = {}
    for chunk in chunks:
        for key, values in chunk.items():
            truth.setdefault(key, []).extend(values)
    hits = intervals = 0
    for trial in range(30):
        seen = random.Random(trial).sample(chunks, 12)
        moments: dict[int, list[float]] = {}
        for chunk in seen:
            for key, values in chunk.items():
                x, y = len(values), sum(values)
                m = moments.setdefault(key, [0, 0.0, 0, 0.0, 0.0, 0])
                for i, term in enumerate((x, y, x * x, x * y, y * y, 1)):
                    m[i] += term
        for key, (sx, sy, qxx, qxy, qyy, occurred) in moments.items():
            estimate = estimate_mean(sx, sy, qxx, qxy, qyy, len(seen), len(chunks), occurred=int(occurred))
            if estimate.low is None or estimate.high is None:
                continue
            intervals += 1
            hits += estimate.low <= sum(truth[key]) / len(truth[key]) <= estimate.high
    assert intervals > 300
    assert hits / intervals > 0.75


def test_a_mean_seen_in_few_chunks_has_the_t_interval_of_its_values() -> None:
    """A Mean group with one record in each of 3 of the 10 chunks seen: its interval is the t interval of those 3
    values, ``t(2) * s / sqrt(3)`` (finite-population corrected). Its variance was taken over all 10 chunks, the 7
    without the group adding nothing but a larger divisor: ``sqrt(2/3)`` of that width."""
    values = [90.0, 100.0, 125.0]
    mean, s = statistics.mean(values), statistics.stdev(values)
    half = t_quantile(2, 0.95) * s / math.sqrt(3) * math.sqrt(1 - 10 / 100)
    squares = sum(v * v for v in values)
    estimate = estimate_mean(3, sum(values), 3, sum(values), squares, seen=10, chunks=100, occurred=3)
    assert estimate.low is not None and estimate.high is not None
    assert (estimate.value, (estimate.high - estimate.low) / 2) == (pytest.approx(mean), pytest.approx(half))
    state = SnapshotState(Mean(), [""] * 100)  # the reducer's path (numpy, many groups at once)
    for chunk in range(10):
        pairs = {"common": (2, 200.0 + chunk), **({"rare": (1, values[chunk])} if chunk < 3 else {})}
        state.add_run(chunk, 0, 0, run(pairs), chunk=chunk, end=True)
    rare = {row.key: row for row in state.rows()}["rare"].estimate
    assert rare is not None and rare.low is not None and rare.high is not None
    assert (rare.high - rare.low) / 2 == pytest.approx(half)


def test_mean_intervals_of_a_group_seen_in_few_chunks_hold_their_level() -> None:
    """Coverage of the 95% Mean intervals of a group with one record in each of 12 of 200 chunks, 50 chunks seen
    (2 to 5 of its records, mostly): 0.936 with the variance over every chunk seen, 0.955 over those it occurred in
    (fixed seed; normal values, so that only the variance formula is tested, not skewness)."""
    rng = random.Random(3)
    hits = intervals = 0
    for _ in range(4000):
        values = [rng.gauss(100, 20) for _ in range(12)]
        seen = [values[i] for i in rng.sample(range(200), 50) if i < 12]
        if len(seen) < 2:
            continue
        total, squares = sum(seen), sum(v * v for v in seen)
        estimate = estimate_mean(len(seen), total, len(seen), total, squares, 50, 200, occurred=len(seen))
        assert estimate.low is not None and estimate.high is not None
        intervals += 1
        hits += estimate.low <= statistics.mean(values) <= estimate.high
    assert intervals > 3000
    assert hits / intervals >= 0.945


def test_interval_coverage_is_near_nominal_on_random_samples() -> None:
    """The estimator's promise, checked by simulation: 95% intervals contain the truth about 95% of the time."""
    rng = random.Random(11)
    population = [rng.lognormvariate(3, 0.6) for _ in range(400)]
    truth = sum(population)
    hits = 0
    trials = 2000
    for _ in range(trials):
        sample = rng.sample(population, 40)
        estimate = estimate_total(sum(sample), sum(x * x for x in sample), len(sample), len(population))
        assert estimate.low is not None and estimate.high is not None
        hits += estimate.low <= truth <= estimate.high
    assert 0.92 <= hits / trials <= 0.975


def _files(tmp_path: Path, sizes: list[int]) -> list[str]:
    paths = []
    for number, size in enumerate(sizes):
        path = tmp_path / f"f{number}.txt"
        path.write_bytes((b"x" * 99 + b"\n") * (size // 100))
        paths.append(str(path))
    return paths


def test_plain_plan_is_the_splits(tmp_path: Path) -> None:
    files = _files(tmp_path, [50_000, 30_000])
    plan = plan_map_inputs(files, 20_000)
    assert [[chunk.split for chunk in task] for task in plan] == [[s] for s in make_splits(files, 20_000)]


def test_plain_plan_packs_small_files_into_tasks_of_about_the_split_size(tmp_path: Path) -> None:
    """One map per small file made a directory of 3,000 files of 200 bytes take 11 s (0.2 s packed)."""
    files = _files(tmp_path, [50_000, *[3_000] * 20, 40_000, 1_000])
    plan = plan_map_inputs(files, 20_000)
    splits = make_splits(files, 20_000)
    assert [chunk.split for task in plan for chunk in task] == splits  # every split once, in order
    assert [chunk.id for task in plan for chunk in task] == list(range(len(splits)))
    assert len(plan) == round(151_000 / 20_000) < len(splits)
    for task in plan:  # a task is one split, or small ones up to about the split size
        assert len(task) == 1 or sum(chunk.size for chunk in task) <= 20_000 + 3_000
    # Files of uneven sizes in tasks of equal bytes: filling each task up to the split size left a third task of
    # one file (a second wave with one slot busy).
    (tmp_path / "uneven").mkdir()
    uneven = _files(tmp_path / "uneven", [3_300] * 24 + [2_900] * 24)
    plan = plan_map_inputs(uneven, 70_000, slots=2)
    assert [len(task) for task in plan] == [23, 25]  # (up to 74,400 bytes each: 22, 25 and 1)


def test_a_gzip_file_weighs_its_text_in_the_plan(tmp_path: Path) -> None:
    """A .gz weighed its compressed bytes: beside plain files, its map task got it and as many bytes of plain text
    as a task holds (here 100,250 bytes of text, and 48,000 in the other task; with logs, which compress tenfold,
    far worse), and progress and online estimates counted it as a small chunk. It weighs the text its trailer gives."""
    import gzip

    files = _files(tmp_path, [12_000] * 8)
    text = b"".join(b"line %d of some text\n" % (number % 100) for number in range(2_500))  # (compresses 50-fold)
    packed = tmp_path / "z.txt.gz"
    packed.write_bytes(gzip.compress(text))
    plan = plan_map_inputs([*files, str(packed)], 60_000, slots=2)
    texts = [sum(len(text) if c.split.length < 0 else c.split.length for c in task) for task in plan]
    assert len(plan) == 2 and max(texts) <= 1.1 * min(texts), texts
    assert [c.size for task in plan for c in task if c.split.length < 0] == [len(text)]
    packed.write_bytes(gzip.compress(text) + bytes(100))  # zero padding after the data: no trailer at the end
    assert plan_map_inputs([str(packed)], 60_000)[0][0].size == packed.stat().st_size


def test_random_plan_covers_every_chunk_once_and_depends_on_the_seed(tmp_path: Path) -> None:
    files = _files(tmp_path, [50_000, 30_000, 20_000])
    plan = plan_map_inputs(files, 25_000, chunked=True, chunk_size=5_000, order="random", seed=4)
    chunks = [chunk for task in plan for chunk in task]
    assert sorted(chunk.id for chunk in chunks) == list(range(len(chunks))) and len(chunks) == 20
    assert {c.split for c in chunks} == set(make_splits(files, 5_000))
    assert len(plan) == 4
    again = plan_map_inputs(files, 25_000, chunked=True, chunk_size=5_000, order="random", seed=4)
    other = plan_map_inputs(files, 25_000, chunked=True, chunk_size=5_000, order="random", seed=5)
    ids = [[chunk.id for chunk in task] for task in plan]
    assert ids == [[chunk.id for chunk in task] for task in again]
    assert ids != [[chunk.id for chunk in task] for task in other]
    sequential = plan_map_inputs(files, 25_000, chunked=True, chunk_size=5_000)
    assert [chunk.id for task in sequential for chunk in task] == list(range(20))
    with pytest.raises(ValueError):
        plan_map_inputs(files, 25_000, order="shuffled")


def run(pairs: dict[object, object]) -> bytes:
    return encode_run(list(pairs), list(pairs.values()))


@pytest.mark.parametrize("aggregate", [Sum(), Mean()], ids=["sum", "mean"])
def test_a_group_is_exact_once_every_chunk_holding_bytes_was_read(aggregate: Sum | Mean) -> None:
    """A chunk of no bytes (an empty file among the input) holds no record: once every other chunk is read, every
    value is final. Unread, such a chunk kept each group an interval of non-zero width, not final, in a snapshot
    holding all of the input's bytes (its input_fraction 1.0)."""
    state = SnapshotState(aggregate, ["", "", "", ""], chunk_sizes=[100, 120, 0, 0])
    lift = aggregate.lift
    state.add_run(0, 0, 0, run({"a": lift(3), "b": lift(1)}), chunk=0, end=True)
    state.add_run(0, 0, 1, run({"a": lift(9), "b": lift(4)}), chunk=1, end=True)
    state.add_run(0, 0, 2, run({}), chunk=2, end=True)  # one of the two empty chunks read
    rows = {row.key: row for row in state.rows()}
    expected = {"a": 12, "b": 5} if isinstance(aggregate, Sum) else {"a": 6.0, "b": 2.5}
    for key, value in expected.items():
        row = rows[key]
        assert row.final and row.value == value, row
        assert row.estimate is not None and row.estimate.low == row.estimate.high == row.estimate.value == value, row
    # Nor may --stop-when-accurate end the job on it, calling its exact values approximate: the job ends exactly.
    tracker = SnapshotTracker(1, [100, 120, 0, 0], stop_when_accurate=0.1, stratum_chunks={"": 4})
    snapshot = tracker.request_now(1.0)
    tracker.on_done(snapshot.seq, 0, {"chunks_seen": [0, 1, 2], "groups": 2, "max_relative_half_width": 0.0})
    assert tracker.ends_exactly(snapshot) and not tracker.accurate(snapshot)


def test_a_counts_interval_starts_no_lower_than_its_count_so_far() -> None:
    """The records a Count has seen are counted in its final value whatever the rest holds: a group seen with 1 and
    9 records in 2 of the 4 chunks read (of 10) has the t interval's low far below 10 (below 0), which the final
    count can never be; its low is 10 now. A Sum of the same values may yet fall (its values may be negative): its
    low stays as computed."""
    lows = {}
    for aggregate in (Count(), Sum()):
        state = SnapshotState(aggregate, [""] * 10)
        for chunk, records in enumerate([1, 9, 0, 0]):
            values = [1] * records if isinstance(aggregate, Count) else [records]
            state.add_run(chunk, 0, 0, run({"g": _folded(aggregate, values)} if records else {}), chunk, True)
        (row,) = state.rows()
        assert row.value == 10 and row.estimate is not None and row.estimate.high is not None
        assert row.estimate.value == 25.0 and row.estimate.high > 25.0
        lows[aggregate.name] = row.estimate.low
    assert lows["count"] == 10.0
    assert lows["sum"] is not None and lows["sum"] < 0


def test_a_nonnegative_sums_interval_starts_no_lower_than_its_sum_so_far() -> None:
    """``Sum(nonnegative=True)`` declares what ``Sum()`` cannot assume: the unread values cannot take the sum down.
    The group seen as 1 and 9 in 2 of the 4 chunks read (of 10) then has the low 10, its sum so far, where a plain
    Sum's t interval reaches below 0 (above); the estimate and the high are the plain Sum's, skewness correction
    and all."""
    rows = {}
    for aggregate in (Sum(), Sum(nonnegative=True)):
        state = SnapshotState(aggregate, [""] * 10)
        for chunk, total in enumerate([1, 9, 0, 0]):
            state.add_run(chunk, 0, 0, run({"g": total} if total else {}), chunk, True)
        (row,) = state.rows()
        rows[repr(aggregate)] = row
    plain, declared = rows["Sum()"], rows["Sum(nonnegative=True)"]
    assert plain.estimate is not None and declared.estimate is not None
    assert plain.estimate.low is not None and plain.estimate.low < 0
    assert declared.value == 10 and declared.estimate.low == 10.0
    assert (declared.estimate.value, declared.estimate.high) == (plain.estimate.value, plain.estimate.high)
    # Where the interval is above the sum so far already (5 chunks of about 5.6 in 10), nothing changes.
    state = SnapshotState(Sum(nonnegative=True), [""] * 10)
    for chunk, total in enumerate([5.5, 6.0, 5.0, 6.5, 5.0]):
        state.add_run(chunk, 0, 0, run({"g": total}), chunk, True)
    (row,) = state.rows()
    assert row.estimate is not None and row.estimate.low is not None and row.estimate.low > row.value == 28.0


def test_a_nonnegative_sum_that_sees_a_negative_chunk_fails_its_snapshots() -> None:
    """The floor rests on the declaration: a key whose values in a chunk add up below 0 breaks it, and every
    snapshot from then on fails naming the key (as a snapshot whose reduce raised does: docs/online.md) rather than
    give a low that the unread input may yet undercut. A negative value outweighed within its chunk breaks nothing
    the floor rests on."""
    state = SnapshotState(Sum(nonnegative=True), [""] * 10)
    state.add_run(0, 0, 0, run({"a": 3, "b": 2}), 0, True)
    state.add_run(1, 0, 0, run({"a": 4, "b": 0}), 1, True)
    assert {row.key: row.value for row in state.rows()} == {"a": 7, "b": 2}
    state.add_run(2, 0, 0, run({"a": 1, "b": -5}), 2, True)
    with pytest.raises(ValueError, match=r"Sum\(nonnegative=True\).*key 'b' added up to -5"):
        list(state.rows())
    state.add_run(3, 0, 0, run({"a": 2}), 3, True)  # the next snapshot fails too: the premise stays broken
    with pytest.raises(ValueError, match="key 'b'"):
        list(state.rows())


def test_a_nonnegative_means_interval_starts_no_lower_than_0() -> None:
    """``Mean(nonnegative=True)``: the unread values may pull the mean down to 0, no further, so its interval
    starts no lower than 0 where a plain Mean's t interval reaches below it (a group seen as 1 value of 1 and one
    of 300 in 2 chunks of 10); a chunk whose values add up below 0 fails the snapshots, naming the key."""
    lows = {}
    for aggregate in (Mean(), Mean(nonnegative=True)):
        state = SnapshotState(aggregate, [""] * 10)
        state.add_run(0, 0, 0, run({"g": (1, 1.0)}), 0, True)
        state.add_run(1, 0, 0, run({"g": (1, 300.0)}), 1, True)
        (row,) = state.rows()
        assert row.estimate is not None and row.estimate.value == 150.5 and row.estimate.high is not None
        lows[repr(aggregate)] = row.estimate.low
    assert lows["Mean()"] is not None and lows["Mean()"] < 0
    assert lows["Mean(nonnegative=True)"] == 0.0
    state = SnapshotState(Mean(nonnegative=True), [""] * 10)
    state.add_run(0, 0, 0, run({"g": (2, -3.0)}), 0, True)
    with pytest.raises(ValueError, match=r"Mean\(nonnegative=True\), but key 'g' added up to -3.0 .*declare Mean\(\)"):
        list(state.rows())


def test_a_plain_sum_combines_for_a_nonnegative_one() -> None:
    """``nonnegative`` says what snapshots may assume, not how values combine: ``combine = Sum()`` with ``reduce =
    Sum(nonnegative=True)`` is no job definition error (another aggregate's combine still is)."""

    class Declared(Job):
        combine = Sum()
        reduce = Sum(nonnegative=True)

    class Mixed(Job):
        combine = Count()
        reduce = Sum(nonnegative=True)

    class Means(Job):
        combine = Mean()
        reduce = Mean(nonnegative=True)

    (step,) = Declared().resolved_steps()
    assert repr(step.reducer) == "Sum(nonnegative=True)" and repr(step.combiner) == "Sum()"
    (step,) = Means().resolved_steps()
    assert repr(step.reducer) == "Mean(nonnegative=True)"
    with pytest.raises(ValueError, match=r"reduce is the aggregate Sum\(nonnegative=True\)"):
        Mixed().resolved_steps()


def _folded(aggregate: Count | Sum, values: list[int]) -> int:
    """What a map's spill holds for ``values`` of one key: their state folded (a Count's is the number of them)."""
    state = aggregate.lift(values[0])
    for value in values[1:]:
        state = aggregate.merge(state, aggregate.lift(value))
    return state


def test_state_counts_only_completed_chunks_of_live_attempts() -> None:
    state = SnapshotState(Sum(), ["", "", "", ""])
    state.add_run(0, 0, 0, run({"a": 2}), chunk=0, end=False)
    state.add_run(0, 0, 1, run({"a": 3, "b": 1}), chunk=0, end=True)  # chunk 0: a=5, b=1
    state.add_run(1, 0, 0, run({"a": 7}), chunk=1, end=False)  # chunk 1 not ended: not counted yet
    rows = {row.key: row for row in state.rows()}
    assert set(rows) == {"a", "b"} and rows["a"].value == 5
    assert rows["a"].estimate is not None and rows["a"].estimate.value == 20  # 4 chunks * 5 per chunk seen
    state.add_run(1, 0, 1, run({}), chunk=1, end=True)
    state.add_run(2, 0, 0, run({"a": 1}), chunk=2, end=True)
    assert state.seen_chunks() == {0, 1, 2}
    state.drop(1, 0)  # map task 1's attempt failed: gone from every later snapshot
    assert state.seen_chunks() == {0, 2}
    assert {row.key: row.value for row in state.rows()} == {"a": 6, "b": 1}
    state.add_run(3, 0, 0, run({"a": 100}), chunk=3, end=True, partial=True)  # resumed mid-chunk: left out
    assert state.seen_chunks() == {0, 2}


def test_state_prefers_the_committed_attempt_and_marks_final() -> None:
    state = SnapshotState(Count(), ["", ""])
    state.add_run(0, 0, 0, run({"k": 3}), chunk=0, end=True)
    state.add_run(0, 1, 0, run({"k": 3}), chunk=0, end=True)  # a speculative twin: never counted twice
    assert [row.value for row in state.rows()] == [3]
    state.commit(0, 1)
    state.add_run(1, 0, 0, run({"k": 4}), chunk=1, end=True)
    (row,) = state.rows()
    assert row.value == 7 and row.final and row.estimate is not None and row.estimate.final
    # Exact: written as the final output writes it (7, not 7.0).
    assert type(row.estimate.value) is int and type(row.estimate.low) is int


def test_state_uses_the_groups_stratum() -> None:
    strata = ["h0", "h0", "h0", "h1"]  # three chunks of hour 0, one of hour 1
    state = SnapshotState(Sum(), strata, key_stratum=lambda key: key[1])
    state.add_run(0, 0, 0, run({("en", "h0"): 10, ("en", "h1"): 0}), chunk=0, end=True)
    state.add_run(1, 0, 0, run({("en", "h1"): 4}), chunk=3, end=True)
    rows = {row.key: row for row in state.rows()}
    assert rows[("en", "h0")].estimate.value == 30  # type: ignore[union-attr]  # 1 of 3 chunks of h0 seen
    assert rows[("en", "h1")].final and rows[("en", "h1")].value == 4  # its only chunk seen


def test_state_matches_a_key_stratum_given_as_an_int() -> None:
    """``input_stratum`` and ``key_stratum`` both returning the hour as an int: the engine takes the input strata as
    ``str()``, so the int never matched and every group was estimated unstratified (2 of 4 chunks seen: 2 x 10)."""
    state = SnapshotState(Sum(), ["0", "0", "0", "1"], key_stratum=lambda key: key[1])
    state.add_run(0, 0, 0, run({("en", 0): 10}), chunk=0, end=True)
    state.add_run(1, 0, 0, run({("en", 1): 4}), chunk=3, end=True)
    rows = {row.key: row for row in state.rows()}
    assert rows[("en", 0)].estimate.value == 30  # type: ignore[union-attr]  # 1 of the 3 chunks of hour 0
    assert rows[("en", 1)].final and rows[("en", 1)].estimate.value == 4  # type: ignore[union-attr]


def test_state_mean_and_min_max() -> None:
    mean = SnapshotState(Mean(), ["", "", ""])
    mean.add_run(0, 0, 0, run({"k": (2, 10.0)}), chunk=0, end=True)
    mean.add_run(1, 0, 0, run({"k": (3, 12.0)}), chunk=1, end=True)
    (row,) = mean.rows()
    assert row.value == pytest.approx(22 / 5) and row.estimate is not None and row.estimate.low is not None
    largest = SnapshotState(Max(), ["", ""])
    largest.add_run(0, 0, 0, run({"k": 5}), chunk=0, end=True)
    (row,) = largest.rows()
    assert row.value == 5 and row.estimate is None and not row.final


def test_tracker_thresholds_answers_and_accuracy() -> None:
    tracker = SnapshotTracker(2, [100, 100, 200], every=0.25, stop_when_accurate=0.1, started_at=0.0)
    assert tracker.due(0.1) is None
    first = tracker.due(0.3)
    assert first is not None and first.label == "0.250"
    assert tracker.due(0.3) is None
    assert tracker.due(0.8) is None, "0.5 and 0.75 wait for the snapshot being answered"
    assert tracker.on_done(0, 0, {"chunks_seen": [0], "max_relative_half_width": 0.05}) is None
    done = tracker.on_done(0, 1, {"chunks_seen": [0, 2], "max_relative_half_width": 0.2})
    assert done is first and done.complete
    held_back = tracker.due(0.8)  # the one it held (a quarter of the input) is below both: the lower, the other skipped
    assert held_back is not None and held_back.label == "0.500" and held_back.skipped == ["0.750"]
    assert tracker.due(0.99) is None
    assert tracker.coverage(done) == (pytest.approx(1 / 3), pytest.approx(0.25))
    assert not tracker.accurate(done)
    tracker.on_done(1, 0, {"chunks_seen": [0, 1], "max_relative_half_width": 0.05, "groups": 3})
    tracker.on_done(1, 1, {"chunks_seen": [0, 1], "max_relative_half_width": 0.08, "groups": 0})
    assert tracker.accurate(tracker.snapshots[1])
    now = tracker.request_now(0.9)
    assert now.label == "0.900-now2"
    described = tracker.describe(tracker.snapshots[1])
    assert described["complete"] and described["input_fraction"] == pytest.approx(0.5)
    narrow_but_blind = tracker.request_now(0.8)  # narrow intervals, but no chunk of stratum "16" read yet
    tracker.on_done(narrow_but_blind.seq, 0, {"chunks_seen": [0], "max_relative_half_width": 0.01})
    tracker.on_done(
        narrow_but_blind.seq,
        1,
        {"chunks_seen": [0], "max_relative_half_width": 0.01, "strata_seen": {"15": 1, "16": 0}},
    )
    assert narrow_but_blind.complete and not tracker.accurate(narrow_but_blind)
    everything = tracker.request_now(1.0)  # every chunk read, not yet committed: the job ends exactly on its own
    for index in (0, 1):
        tracker.on_done(everything.seq, index, {"chunks_seen": [0, 1, 2], "max_relative_half_width": 0.0, "groups": 3})
    assert everything.complete and not tracker.accurate(everything), "not 'approximate' after all of the input"
    with pytest.raises(ValueError):
        SnapshotTracker(1, [1], every=1.5)


def test_stop_when_accurate_needs_groups_and_enough_chunks_of_every_stratum() -> None:
    # Stratum "a" has 12 chunks, "b" 3: a snapshot may end the job once it read 5 of "a" and all 3 of "b".
    tracker = SnapshotTracker(1, [10] * 15, stop_when_accurate=0.1, stratum_chunks={"a": 12, "b": 3})

    def answer(groups: int, seen: dict[str, int], width: float = 0.0) -> bool:
        snapshot = tracker.request_now(0.5)
        tracker.on_done(snapshot.seq, 0, {"groups": groups, "strata_seen": seen, "max_relative_half_width": width})
        return tracker.accurate(snapshot)

    assert not answer(0, {"a": 12, "b": 3}), "an empty snapshot is no estimate (a rare key not read yet)"
    assert not answer(4, {"a": 2, "b": 3}), "two chunks can agree by chance: a zero-width interval"
    assert not answer(4, {"a": 5, "b": 2})
    assert answer(4, {"a": 5, "b": 3})
    assert not answer(4, {"a": 5, "b": 3}, width=0.2)
    assert MIN_CHUNKS_PER_STRATUM == 5
    final = tracker.request_now(1.0)
    tracker.on_done(final.seq, 0, {"groups": 0, "final": True})
    assert not tracker.accurate(final), "every partition is final: the job ends exactly, not 'approximate'"


def test_random_order_is_stratified_when_the_job_has_strata(tmp_path: Path) -> None:
    files = _files(tmp_path, [10_000] * 8)
    strata = {path: ("a" if n < 2 else "b" if n < 4 else "c") for n, path in enumerate(files)}  # 10, 10, 20 chunks
    plan = plan_map_inputs(files, 10_000, chunked=True, chunk_size=2_000, order="random", seed=1, strata=strata)
    order = [chunk for task in plan for chunk in task]
    assert len(order) == 40
    sizes = {"a": 10, "b": 10, "c": 20}
    for prefix in range(1, 41):
        for stratum, size in sizes.items():
            seen = sum(chunk.stratum == stratum for chunk in order[:prefix])
            assert abs(seen - prefix * size / 40) <= 1, (prefix, stratum)
    # Within a stratum the order is still random: not the files' order.
    assert [c.id for c in order if c.stratum == "c"] != sorted(c.id for c in order if c.stratum == "c")


def _reducer_snapshots(tmp_path: Path, aggregate: bool) -> ReducerSnapshots:
    """A partition's snapshot machinery over a real run store: 6 chunks in one stratum, map task 0 reads 0-3."""
    store = RunStore(tmp_path / "store")
    (tmp_path / "out").mkdir()  # (the job's output, which its coordinator made)
    return ReducerSnapshots(
        str(tmp_path / "out"),
        0,
        store,
        lambda key, values: [(key, sum(values))],
        Sum() if aggregate else None,
        [""] * 6,
        None,
    )


def test_a_derived_snapshot_names_a_bad_line_of_its_source_by_number(tmp_path: Path) -> None:
    """A pipeline's later step recomputes its snapshot from the earlier step's snapshot files; a bad line there was
    named "at byte offset N" with N the line's index. It is named by line number, as Spark names such lines."""
    (tmp_path / "out").mkdir()
    snapshots = ReducerSnapshots(
        str(tmp_path / "out"), 0, RunStore(tmp_path / "store"), lambda key, values: [(key, sum(values))], None, None,
        None, map_task=lambda records, _: ((0, key, value) for key, value in records),
    )  # fmt: skip
    source = tmp_path / "earlier"
    source.mkdir()
    (source / "part-00000").write_text('"a"\t1\n"b"\t2\n"c" 3\n', encoding="utf-8")
    fields = snapshots.take("0.5", str(source))
    assert f"{source / 'part-00000'}: line 3 has no TAB" in fields["error"], fields
    (source / "part-00000").write_text('"a"\t1\n"b"\t2\n', encoding="utf-8")
    assert "error" not in snapshots.take("0.6", str(source))


def test_a_snapshot_taken_once_the_output_was_removed_does_not_make_it_again(tmp_path: Path) -> None:
    """A reducer writes on until its worker ends it, after its job has ended too (stopped early, cancelled): a
    snapshot it took then made the job's output directory again, with its parents, if it had been removed meanwhile
    (a test's folder, reused by the next test, whose job was then refused it as not empty). Its answer is an error
    naming the directory, and nothing is made."""
    snapshots = _reducer_snapshots(tmp_path, aggregate=True)
    try:
        snapshots.receive(_header(0, 0, 0, True), run({"a": 3}))
        (tmp_path / "out").rmdir()
        fields = snapshots.take("0.500")
    finally:
        snapshots.store.close()
    assert f"the job's output directory {tmp_path / 'out'} is gone" in fields.get("error", ""), fields
    assert not (tmp_path / "out").exists()


def test_a_snapshots_files_never_land_in_an_output_replaced_right_after_its_check(tmp_path: Path) -> None:
    """A reduce attempt made a snapshot's staging folder (``OUT/_temporary/snapshots/<label>``) by name, then wrote
    its files there (and copied them under the other labels asked together) by name: ``OUT`` replaced between the
    two (here at once after the attempt's check of it) by a folder of the user's got them all. They are now written
    in the directory the attempt holds open since its start, wherever it went (the job fails for the replacement),
    and the next check of it fails the copy, answered as an error, not the task."""
    output, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    output.mkdir()

    def replace(folder: Path) -> None:
        folder.rename(elsewhere)
        folder.mkdir()
        (folder / "mine.txt").write_text("the user's\n")

    held = guard_replaced_after_its_check(elsewhere, replace)(output)
    snapshots = ReducerSnapshots(
        str(output), 0, RunStore(tmp_path / "store"), lambda key, values: [(key, sum(values))], Sum(), [""] * 6, None,
        held=held,
    )  # fmt: skip
    try:
        snapshots.receive(_header(0, 0, 0, True), run({"a": 3}))
        answers = snapshots.answer([{"label": "0.400"}, {"label": "0.500"}])
    finally:
        snapshots.store.close()
        held.close()
    assert sorted(path.name for path in output.rglob("*")) == ["mine.txt"]
    assert [str(path.relative_to(elsewhere)) for path in elsewhere.rglob("part-*")] == [
        "_temporary/snapshots/0.500/part-00000"
    ]
    assert "error" not in answers[1], answers  # taken once, then copied under the other label, checked again:
    assert f"output directory {output} was removed or moved while the job ran" in answers[0].get("error", ""), answers


def _header(attempt: int, seq: int, chunk: int, end: bool, **more: object) -> dict[str, object]:
    return {"map": 0, "attempt": attempt, "seq": seq, "records": 1, "tag": "s", "chunk": chunk, "end": end, **more}


def _snapshot_values(snapshots: ReducerSnapshots, label: str) -> tuple[list[int] | None, dict[object, object]]:
    """The chunks a snapshot says it covers and its values so far, read back from its files."""
    fields = snapshots.take(label)
    assert "error" not in fields
    rows = staging_directory(snapshots.output, label) / "estimates-00000.jsonl"  # (published once all answered)
    values = {row["key"]: row["value"] for row in map(json.loads, rows.read_text(encoding="utf-8").splitlines())}
    return fields.get("chunks_seen"), values


@pytest.mark.parametrize("aggregate", [True, False])
@pytest.mark.parametrize("order", ["notice first", "retry first, kept run late", "no failure notice"])
def test_a_map_retried_from_a_checkpoint_keeps_its_kept_chunks_in_snapshots(
    tmp_path: Path, aggregate: bool, order: str
) -> None:
    """Attempt 0 of map 0 sends chunks 0 and 1 whole, the first part of chunk 2, checkpoints (spills 0-2), then
    the rest of chunk 2 and chunk 3 and dies. Attempt 1 resumes at spill 3: the rest of chunk 2 (partial), chunk 3.
    Snapshots count chunks 0-2 exactly once: the kept part of chunk 2 with attempt 1's rest of it."""
    snapshots = _reducer_snapshots(tmp_path, aggregate)
    kept = [
        (_header(0, 0, 0, True), run({"a": 1})),
        (_header(0, 1, 1, True), run({"a": 10})),
        (_header(0, 2, 2, False), run({"a": 100})),
    ]
    lost = [(_header(0, 3, 2, True), run({"a": 1000})), (_header(0, 4, 3, True), run({"a": 10000}))]
    resumes = [[0, 0, 3]]
    retry = [
        (_header(1, 3, 2, True, partial=True, resumes=resumes), run({"a": 1000})),
        (_header(1, 4, 3, False, resumes=resumes), run({"b": 5})),
    ]
    failed = {"type": "map_failed", "index": 0, "attempt": 0, "keep_below": 3}
    # A hand-written reduce counts the chunks it holds wholly too (its values may hold more: parts of others).
    try:
        if order == "notice first":
            for header, data in kept + lost:
                snapshots.receive(header, data)
            assert _snapshot_values(snapshots, "before") == ([0, 1, 2, 3], {"a": 11111})
            snapshots.notice(failed)
            assert _snapshot_values(snapshots, "failed") == ([0, 1], {"a": 11 if aggregate else 111})
            for header, data in retry:
                snapshots.receive(header, data)
        elif order == "retry first, kept run late":  # the retry's runs overtake the failure notice and a kept run
            for header, data in kept[:2] + lost + retry:
                snapshots.receive(header, data)
            if aggregate:  # chunk 2's kept part is not here yet: chunks 0 and 1 only, each once
                assert _snapshot_values(snapshots, "early") == ([0, 1], {"a": 11})
            snapshots.receive(*kept[2])
            snapshots.notice(failed)
        else:  # a reducer that started after the failure: the kept runs, then the commit, then the retry's runs
            for header, data in kept:
                snapshots.receive(header, data)
            snapshots.notice({"type": "map_committed", "index": 0, "attempt": 1, "spills": 6, "segments": resumes})
            assert _snapshot_values(snapshots, "kept")[1] == {"a": 11 if aggregate else 111}
            for header, data in retry:
                snapshots.receive(header, data)
        resumed = {"a": 1111} if aggregate else {"a": 1111, "b": 5}  # (chunk 3 has not ended yet)
        assert _snapshot_values(snapshots, "resumed") == ([0, 1, 2], resumed)
        snapshots.receive(_header(1, 5, 3, True, resumes=resumes), run({"b": 1}))
        if order != "no failure notice":
            snapshots.notice({"type": "map_committed", "index": 0, "attempt": 1, "spills": 6, "segments": resumes})
        assert _snapshot_values(snapshots, "committed") == ([0, 1, 2, 3], {"a": 1111, "b": 6})
        assert snapshots.store.missing(1) == 0
        final: dict[object, int] = {}
        for key, value in snapshots.store.sorted_pairs():  # the final reduce's input agrees
            final[key] = final.get(key, 0) + value
        assert final == {"a": 1111, "b": 6}
    finally:
        snapshots.store.close()


def test_a_failed_attempts_runs_past_its_checkpoint_arriving_late_are_dropped(tmp_path: Path) -> None:
    """A run of attempt 0 still in flight when its failure (at the checkpoint before spill 2) was noticed was stored
    under it, and a snapshot of a hand-written reduce counted it."""
    snapshots = _reducer_snapshots(tmp_path, aggregate=False)
    try:
        for seq, value in enumerate((1, 10)):
            snapshots.receive(_header(0, seq, seq, True), run({"a": value}))
        snapshots.notice({"type": "map_failed", "index": 0, "attempt": 0, "keep_below": 2})
        snapshots.receive(_header(0, 2, 2, True), run({"a": 100}))
        assert [stored.seq for stored in snapshots.store.snapshot_runs()] == [0, 1]
        assert _snapshot_values(snapshots, "late")[1] == {"a": 11}
    finally:
        snapshots.store.close()


@pytest.mark.parametrize("aggregate", [True, False])
@pytest.mark.parametrize("order", ["before the loss notice", "before the commit notice", "predecessor completed"])
def test_a_reruns_runs_that_come_before_the_word_its_predecessor_was_lost_count_in_snapshots(
    tmp_path: Path, aggregate: bool, order: str
) -> None:
    """Attempt 0 of map 0 commits with two runs, one of them here, and is lost with its worker; its rerun's runs
    come straight from the rerun's worker, before the word of the loss (and of the commit: ``before the commit
    notice``), which comes through this reducer's own. The store keeps them, tentative, and they are the rerun's
    (test_a_rerun_whose_runs_come_before_the_word_its_predecessor_was_lost_is_awaited_not_lost); the snapshot state
    dropped them at the commit, so every later snapshot missed the rerun's records and chunks (the final output was
    exact). ``predecessor completed``: attempt 0's last run comes before the loss, so the store keeps attempt 0 and
    ignores the rerun's commit; snapshots count attempt 0 too. (A rerun's values equal its predecessor's; they
    differ here to tell whose are counted.)"""
    snapshots = _reducer_snapshots(tmp_path, aggregate)
    committed = {"type": "map_committed", "index": 0, "attempt": 0, "spills": 2}
    rerun = [(_header(1, 0, 0, True), run({"a": 2})), (_header(1, 1, 1, True), run({"b": 20}))]
    expected = {"a": 1, "b": 10} if order == "predecessor completed" else {"a": 2, "b": 20}
    tracker = SnapshotTracker(1, [100] * 6)
    try:
        snapshots.receive(_header(0, 0, 0, True), run({"a": 1}))
        if order != "before the commit notice":
            snapshots.notice(committed)
        for header, data in rerun:
            snapshots.receive(header, data)
        if order == "before the commit notice":
            snapshots.notice(committed)
        assert _snapshot_values(snapshots, "committed") == ([0], {"a": 1})  # attempt 0's, not lost yet
        if order == "predecessor completed":
            snapshots.receive(_header(0, 1, 1, True), run({"b": 10}))
        snapshots.notice({"type": "map_lost", "index": 0, "attempt": 0})
        assert _snapshot_values(snapshots, "lost") == ([0, 1], expected)
        snapshots.notice({"type": "map_committed", "index": 0, "attempt": 1, "spills": 2})
        assert _snapshot_values(snapshots, "rerun") == ([0, 1], expected)
        winner = 0 if order == "predecessor completed" else 1
        if winner == 1:  # attempt 0's last run, pushed before its worker died, comes late: a loser's, dropped
            snapshots.receive(_header(0, 1, 1, True), run({"b": 10}))
        assert set(snapshots.store.attempts) == set(snapshots.coverage.attempts) == {(0, winner)}
        snapshot = tracker.request_now(0.5)
        tracker.on_done(snapshot.seq, 0, snapshots.take("fraction"))
        assert tracker.describe(snapshot)["input_fraction"] == pytest.approx(2 / 6)  # what the reducer has seen
        assert snapshots.store.missing(1) == 0
        final: dict[object, int] = {}
        for key, value in snapshots.store.sorted_pairs():  # the final reduce's input agrees
            final[key] = final.get(key, 0) + value
        assert final == expected
    finally:
        snapshots.store.close()


def test_a_snapshot_sends_its_largest_estimates_not_its_first_keys(tmp_path: Path) -> None:
    """2,500 groups, the largest last in key order: the rows sent (and shown by the web view) are the 2,000 largest
    estimates, largest first, for a running partition and for one answering with its final output."""
    snapshots = _reducer_snapshots(tmp_path, aggregate=True)
    groups = {f"k{i:04d}": i for i in range(2500)}
    try:
        snapshots.receive(_header(0, 0, 0, True), run(groups))
        rows = snapshots.take("live")["rows"]
    finally:
        snapshots.store.close()
    assert len(rows) == ROWS_ON_THE_WIRE
    assert [row["key"] for row in rows] == [f"k{i:04d}" for i in range(2499, 499, -1)]
    assert rows[0]["estimate"] == 6 * 2499  # one chunk of six seen
    part = tmp_path / "part-00000"
    part.write_text("".join(f'"{key}"\t{value}\n' for key, value in groups.items()), encoding="utf-8")
    count, final_rows = write_final_partition_snapshot(_held(tmp_path, "final"), tmp_path / "final", 0, part)
    assert count == 2500 and [row["key"] for row in final_rows] == [row["key"] for row in rows]
    assert top_positions([3, "x", 7.5, None, 7.5, True], 4) == [2, 4, 0, 1]  # numbers first, then the rest in order


def test_ranking_a_batch_at_once_keeps_what_ranking_row_by_row_keeps() -> None:
    """``LargestFirst.add_many`` skips the rows of a plain-number batch below the least held: it must rank the same
    items, in the same order, as ``add`` row by row, whatever the batches hold (ties, NaN, bools, texts, None)."""
    rng = random.Random(7)

    def value(plain: bool) -> object:
        numbers = [rng.randint(-5, 20), rng.random() * 20, math.nan, rng.randint(0, 3)]
        return rng.choice(numbers if plain else [*numbers, True, "x", None])

    for _ in range(2000):
        limit = rng.choice([0, 1, 2, 5, 50])
        plain = rng.random() < 0.6
        batches = [[value(plain) for _ in range(rng.randint(0, 40))] for _ in range(rng.randint(1, 4))]
        one_by_one, batched = LargestFirst[tuple[int, object]](limit), LargestFirst[tuple[int, object]](limit)
        position = 0
        for batch in batches:
            made: list[int] = []

            def item(
                i: int, batch: list[object] = batch, start: int = position, made: list[int] = made
            ) -> tuple[int, object]:
                made.append(i)
                return (start + i, batch[i])

            for i, v in enumerate(batch):
                one_by_one.add(v, (position + i, v))
            batched.add_many(batch, item)
            assert made == sorted(made) and len(made) == len(set(made))
            position += len(batch)
        assert repr(batched.items()) == repr(one_by_one.items())
    ranked = LargestFirst[int](2)
    made_for: list[int] = []

    def index(i: int) -> int:
        made_for.append(i)
        return i

    ranked.add_many([5, 9, 1, 2, 8, 3], index)
    assert ranked.items() == [1, 4] and made_for == [0, 1, 4]  # the rows below the least held were never made


def _held(output: Path, folder: str) -> OutputGuard:
    """A hold on ``output``, with ``folder`` made in it: a final partition's snapshot is written through one."""
    held = OutputGuard(output)
    held.folder(output / folder)
    return held


@pytest.mark.parametrize("count", [10, 2_500, 5_000])
def test_a_final_partitions_snapshot_picks_the_rows_top_positions_picks(tmp_path: Path, count: int) -> None:
    """It kept every group's value in memory (in the coordinator) and read the part file twice; one pass with a
    bounded heap must pick the same rows: ties in file order, NaN and non-numbers after the numbers."""
    rng = random.Random(count)
    values = [rng.choice([rng.randint(0, 50), rng.random(), "text", [1, 2], float("nan"), None]) for _ in range(count)]
    part = tmp_path / "part-00000"
    part.write_text("".join(f'"k{i:05d}"\t{to_json(v)}\n' for i, v in enumerate(values)), encoding="utf-8")
    groups, rows = write_final_partition_snapshot(_held(tmp_path, "final"), tmp_path / "final", 0, part)
    expected = [f"k{i:05d}" for i in top_positions(values, ROWS_ON_THE_WIRE)]
    assert groups == count and [row["key"] for row in rows] == expected
    assert all(row["final"] for row in rows)
    written = (tmp_path / "final" / "estimates-00000.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(written) == count


def _answer(tracker: SnapshotTracker, seq: int, index: int, values: range) -> None:
    rows = [
        {"key": f"p{index}-{v}", "value": v, "estimate": v, "low": None, "high": None, "final": False} for v in values
    ]
    tracker.on_done(seq, index, {"groups": len(rows), "rows": rows, "truncated": True})


def test_the_tracker_keeps_full_rows_of_the_latest_snapshot_only() -> None:
    tracker = SnapshotTracker(2, [1] * 10, every=0.05)
    for progress in range(1, 13):  # twelve snapshots of 2 x 2,000 rows each
        snapshot = tracker.due(progress / 20)
        assert snapshot is not None
        for index in (0, 1):
            _answer(tracker, snapshot.seq, index, range(3000 + 10 * progress, 1000 + 10 * progress, -1))
    stale = tracker.request_now(0.7)  # never completed: one partition's answer only
    _answer(tracker, stale.seq, 0, range(2000, 0, -1))
    latest = tracker.due(0.75)
    assert latest is not None
    for index in (0, 1):
        _answer(tracker, latest.seq, index, range(5000, 3000, -1))
    described = [tracker.describe(snapshot) for snapshot in tracker.snapshots]
    assert [len(d["rows"]) for d in described] == [2 * HISTORY_ROWS] * 12 + [HISTORY_ROWS, 2 * ROWS_ON_THE_WIRE]
    assert described[-1]["rows_limit"] == ROWS_ON_THE_WIRE and not any(
        d["rows_limit"] > HISTORY_ROWS for d in described[:-1]
    )
    # The history kept is each partition's largest estimates, and the rows of all partitions come largest first.
    assert [row["value"] for row in described[0]["rows"][:4]] == [3010, 3010, 3009, 3009]
    assert min(row["value"] for row in described[0]["rows"]) == 3010 - HISTORY_ROWS + 1
    values = [row["value"] for row in described[-1]["rows"]]
    assert values == sorted(values, reverse=True)
    late = tracker.snapshots[stale.seq]  # a late answer to a superseded snapshot keeps history rows only
    _answer(tracker, late.seq, 1, range(2000, 0, -1))
    assert len(tracker.describe(late)["rows"]) == 2 * HISTORY_ROWS
    tracker.release()  # the job ended: the latest keeps history rows too
    assert len(tracker.describe(latest)["rows"]) == 2 * HISTORY_ROWS and tracker.describe(latest)["truncated"]


def test_a_small_snapshot_is_not_called_truncated_after_the_job_ends() -> None:
    tracker = SnapshotTracker(1, [1] * 10, every=0.5)
    snapshot = tracker.due(0.5)
    assert snapshot is not None
    tracker.on_done(snapshot.seq, 0, {"groups": 2, "rows": [{"key": k, "value": 1} for k in "ab"]})
    tracker.release()
    described = tracker.describe(snapshot)
    assert described["rows_limit"] == HISTORY_ROWS and len(described["rows"]) == 2 and not described["truncated"]


def test_one_threshold_snapshot_is_asked_at_a_time_and_labelled_by_what_it_holds() -> None:
    """A reducer behind the maps answered the threshold requests queued while it took a snapshot with one snapshot:
    0.200 to 0.800 held the same 37% of the input, and 0.900 alone 51%. Now the reducers wait to hold a threshold's
    fraction before answering it, thresholds passed meanwhile wait for it, and a snapshot answered late is labelled
    with the highest threshold it holds."""
    tracker = SnapshotTracker(1, [10] * 10, every=0.1)
    jumped = tracker.due(0.25)  # passed at once: one request, the highest, which the reducers wait to hold
    assert jumped is not None and jumped.label == "0.200" and jumped.awaits == pytest.approx(0.2)
    assert jumped.skipped == ["0.100"]
    assert tracker.due(0.8) is None, "asked for once the one being answered is complete"
    tracker.on_done(jumped.seq, 0, {"chunks_seen": list(range(4)), "groups": 1})  # it held 40%: 0.300 and 0.400 too
    assert (jumped.label, jumped.staged_as, jumped.skipped) == ("0.400", "0.200", ["0.100", "0.200", "0.300"])
    held = tracker.due(0.8)  # 0.5 to 0.8 passed meanwhile: the soonest asked for, the others skipped
    assert held is not None and held.label == "0.500" and held.skipped == ["0.600", "0.700", "0.800"]
    assert tracker.describe(jumped)["label"] == "0.400" and tracker.describe(jumped)["input_fraction"] == 0.4
    assert tracker.due(0.85) is None
    tracker.on_done(held.seq, 0, {"chunks_seen": list(range(6)), "groups": 1})  # answered holding 60%: so labelled
    described = tracker.describe(held)
    assert (described["label"], described["progress"], described["input_fraction"]) == ("0.600", 0.6, 0.6)
    assert described["skipped"] == ["0.500", "0.700", "0.800"] and held.staged_as == "0.500"
    assert tracker.passed_without_snapshot(0.85) == []  # (each threshold a label or listed as skipped)
    last = tracker.due(0.95)  # (0.9, passed since)
    assert last is not None and last.label == "0.900" and last.skipped == []
    now = tracker.request_now(0.95)  # hop snapshot: answered at once, with what the reducers hold
    assert now.awaits is None and "skipped" not in tracker.describe(now)
    assert len({s.label for s in tracker.snapshots}) == len(tracker.snapshots)


def test_thresholds_the_maps_passed_after_the_last_snapshot_was_asked_are_listed_as_without_one() -> None:
    """A job ending while a threshold's snapshot was answered has none for the thresholds passed meanwhile, and no
    snapshot lists them as skipped: its report lists them (``thresholds_without_snapshot``), up to where the maps
    got."""
    tracker = SnapshotTracker(1, [10] * 10, every=0.25)
    first = tracker.due(0.3)
    assert first is not None and first.label == "0.250"
    assert tracker.due(1.0) is None  # 0.5 and 0.75 passed while it is answered; then the maps ended
    tracker.on_done(first.seq, 0, {"chunks_seen": [0, 1, 2], "groups": 1})  # (the final output: the job ends)
    assert tracker.passed_without_snapshot(1.0) == ["0.500", "0.750"]
    assert tracker.passed_without_snapshot(0.6) == ["0.500"], "only thresholds the maps passed"
    assert SnapshotTracker(1, [10], every=0.25).passed_without_snapshot(1.0) == ["0.250", "0.500", "0.750"]
    assert SnapshotTracker(1, [10]).passed_without_snapshot(1.0) == [], "no --snapshot-every: no thresholds"


def test_a_snapshots_input_fraction_is_the_least_any_partition_holds() -> None:
    """The coverage was the least (chunks, bytes) pair, compared chunks first: a partition holding fewer chunks but
    more bytes gave the snapshot its bytes, an input_fraction above what another partition held (40% where one held
    30%), and a threshold's snapshot the label of a threshold one of its partitions did not hold."""
    tracker = SnapshotTracker(2, [40, 10, 10, 10, 30], every=0.1)
    snapshot = tracker.due(0.25)
    assert snapshot is not None and snapshot.label == "0.200"
    assert tracker.due(0.45) is None  # (0.3 and 0.4, passed while it is answered)
    tracker.on_done(snapshot.seq, 0, {"chunks_seen": [0], "groups": 1})  # 1 chunk, 40% of the bytes
    tracker.on_done(snapshot.seq, 1, {"chunks_seen": [1, 2, 3], "groups": 1})  # 3 chunks, 30% of the bytes
    described = tracker.describe(snapshot)
    assert (described["chunks_fraction"], described["input_fraction"]) == (0.2, 0.3)
    assert described["label"] == "0.300", "partition 1 holds 30% of the input, not 40%"
    following = tracker.due(0.45)
    assert following is not None and following.label == "0.400"


def test_an_input_of_no_bytes_has_no_threshold_snapshots() -> None:
    """A zero-byte input's map progress goes from nothing to all at once: it had a snapshot labelled 0.900, of
    nothing, whose _snapshot.json said it held 0.0 of the input and 1.0 of its chunks."""
    tracker = SnapshotTracker(2, [0], every=0.3)
    assert tracker.due(1.0) is None and not tracker.snapshots
    now = tracker.request_now(1.0)  # hop snapshot still answers: with every chunk, all of the input
    for index in (0, 1):
        tracker.on_done(now.seq, index, {"chunks_seen": [0], "groups": 0})
    described = tracker.describe(now)
    assert described["input_fraction"] == described["chunks_fraction"] == 1.0
    assert [p["input_fraction"] for p in described["partitions"]] == [1.0, 1.0]


@pytest.mark.parametrize(("every", "first"), [(0.1, "0.100"), (0.001, "0.001"), (0.0004, "0.0004"), (1e-5, "0.00001")])
def test_snapshot_labels_stay_unique_below_a_thousandth(every: float, first: str) -> None:
    tracker = SnapshotTracker(1, [1], every=every)
    labels = []
    for step in range(1, min(200, round(1 / every))):
        snapshot = tracker.due(step * every)
        assert snapshot is not None
        labels.append(snapshot.label)
        tracker.on_done(snapshot.seq, 0, {"groups": 0})  # (answered before the next threshold is asked for)
    assert labels[0] == first and len(set(labels)) == len(labels)
    assert tracker.request_now(0.5).label.endswith(f"-now{len(labels)}")


def test_an_on_demand_label_is_never_one_a_snapshot_flowing_down_took() -> None:
    """A pipeline's later job holds the snapshots of the job before it under their labels: one asked of it once that
    job ended (hop snapshot), labelled by its own count, could take one of theirs, and publishing it failed."""
    tracker = SnapshotTracker(1, [])
    tracker.request_derived("0.500-now1", 0.5, {"job_id": "job-1"}, "/up/_snapshots/0.500-now1")
    tracker.request_derived("0.500-now2", 0.5, {"job_id": "job-1"}, "/up/_snapshots/0.500-now2")
    assert tracker.request_now(0.5).label == "0.500-now3"
    assert tracker.request_now(0.25).label == "0.250-now3"
    assert [s.seq for s in tracker.snapshots] == [0, 1, 2, 3]


def test_snapshot_requests_queued_together_are_answered_by_one_snapshot(tmp_path: Path) -> None:
    """A reducer that fell behind took every queued request in turn, each over the same data it held, and fell
    further behind; now the newest label is taken once and the others get a copy (a derived snapshot, with its own
    source, is still taken on its own)."""
    snapshots = _reducer_snapshots(tmp_path, aggregate=True)
    try:
        snapshots.receive(_header(0, 0, 0, True), run({"a": 3, "b": 4}))
        requests = [{"label": label} for label in ("0.100", "0.200", "0.300")]
        answers = snapshots.answer(requests)
        assert [answer["label"] for answer in answers] == ["0.100", "0.200", "0.300"]
        assert all(answer["seconds"] == answers[-1]["seconds"] for answer in answers), "one snapshot, taken once"
        folders = [staging_directory(tmp_path / "out", label) for label in ("0.100", "0.200", "0.300")]
        files = [(folder / "estimates-00000.jsonl").read_text() for folder in folders]
        assert files[0] == files[1] == files[2] and '"key":"a"' in files[0]
        assert (folders[0] / "part-00000").read_text() == (folders[2] / "part-00000").read_text()
        assert snapshots.taken == 3
    finally:
        snapshots.store.close()


def test_stop_when_accurate_needs_random_order(tmp_path: Path) -> None:
    """The intervals an early stop trusts assume chunks read in random order: in sequential order (the default) the
    job stopped on a biased sample's intervals; the options are refused, naming the fix."""
    (tmp_path / "in.txt").write_text("a b\n")
    for order in ("sequential", None):
        chosen = {} if order is None else {"order": order}
        with pytest.raises(ValueError, match="add --order random") as refused:
            online_options(Job, [str(tmp_path)], stop_when_accurate=0.1, **chosen)
        assert str(refused.value) == STOP_EARLY_SEQUENTIAL
    options = online_options(Job, [str(tmp_path)], stop_when_accurate=0.1, order="random")
    assert options["stop_when_accurate"] == 0.1 and options["order"] == "random"


def test_totals_scale_by_the_bytes_seen_when_chunks_differ_in_size() -> None:
    # Two 1,000-byte chunks and two 10-byte ones (a file's last chunk, a small file); "a" occurs once per 10 bytes.
    # The small chunks are read first: scaling by chunks seen (4 * 2 / 2 = 4, a zero-width interval) missed the total
    # of 202; scaled by bytes (2,020 bytes * 2 / 20 seen) it is exact.
    state = SnapshotState(Sum(), ["", "", "", ""], chunk_sizes=[1000, 10, 1000, 10])
    state.add_run(0, 0, 0, run({"a": 1}), chunk=1, end=True)
    state.add_run(1, 0, 0, run({"a": 1}), chunk=3, end=True)
    (row,) = state.rows()
    assert row.estimate is not None and row.estimate.value == pytest.approx(202)
    assert row.estimate.low is not None and row.estimate.high is not None
    assert row.estimate.low <= 202 <= row.estimate.high


def test_byte_scaled_totals_are_accurate_on_chunks_of_very_different_sizes() -> None:
    # 200 chunks of 1 KB .. 10 MB; a group's per-chunk count follows its chunk's size (with noise). Over 400 random
    # samples of 20 chunks, scaling by bytes seen has a third of the median error of scaling by chunks seen (10%
    # against 29%), and its 95% intervals hold the total as often (87% at 20 chunks: both fall short of 95% on
    # sizes this skewed, docs/online.md).
    rng = random.Random(5)
    sizes = [int(1024 * 10 ** rng.uniform(0, 4)) for _ in range(200)]
    counts = [size // 100 + rng.randint(0, size // 20 + 1) for size in sizes]
    truth, total_bytes = sum(counts), sum(sizes)
    by_bytes, by_chunks, held = [], [], 0
    for _ in range(400):
        seen = rng.sample(range(200), 20)
        x = [counts[c] for c in seen]
        sizes_seen = Bytes(
            sum(counts[c] * sizes[c] for c in seen),
            sum(sizes[c] for c in seen),
            sum(sizes[c] ** 2 for c in seen),
            total_bytes,
        )
        estimate = estimate_total(sum(x), sum(v * v for v in x), 20, 200, sizes=sizes_seen)
        assert estimate.low is not None and estimate.high is not None
        held += estimate.low <= truth <= estimate.high
        by_bytes.append(abs(estimate.value - truth) / truth)
        by_chunks.append(abs(estimate_total(sum(x), sum(v * v for v in x), 20, 200).value - truth) / truth)
    assert statistics.median(by_bytes) < statistics.median(by_chunks) / 2
    assert held / 400 >= 0.85


def test_byte_scaling_with_equal_chunks_is_the_expansion_estimator() -> None:
    values = [4.0, 6.0, 0.0, 9.0]
    by_chunks = estimate_total(sum(values), sum(v * v for v in values), 4, 10, occurred=3)
    sizes = Bytes(sum(v * 512 for v in values), 4 * 512, 4 * 512 * 512, 10 * 512)
    by_bytes = estimate_total(sum(values), sum(v * v for v in values), 4, 10, occurred=3, sizes=sizes)
    assert by_bytes.value == pytest.approx(by_chunks.value)
    assert by_bytes.low == pytest.approx(by_chunks.low) and by_bytes.high == pytest.approx(by_chunks.high)
    many = estimate_totals([sum(values)], [sum(v * v for v in values)], [4], [10], 0.95, [3], [sizes])
    assert many[0][0] == pytest.approx(by_chunks.value) and many[1][0] == pytest.approx(by_chunks.low)


def test_a_snapshot_that_cannot_stop_the_job_says_which_groups_hold_it_back_and_why() -> None:
    # A NaN among "bad"'s values and "rare" seen in one chunk leave them without an interval: the job never stopped
    # early and said only that no snapshot met the bound. Now the reducer names a few such groups, with why.
    state = SnapshotState(Sum(), [""] * 10)
    for chunk in range(6):
        state.add_run(chunk, 0, 0, run({"common": 10 + chunk, "bad": math.nan if chunk == 2 else 1.0}), chunk, True)
    state.add_run(6, 0, 0, run({"rare": 3}), chunk=6, end=True)
    table = state.table()
    fields = _interval_fields(table)
    assert fields["max_relative_half_width"] is None and fields["unbounded"] == 2
    why = {example["key"]: example["why"] for example in fields["unbounded_examples"]}
    assert "NaN" in why["bad"] and "fewer than 2 of the chunks" in why["rare"]
    tracker = SnapshotTracker(1, [10] * 10, stop_when_accurate=0.5, stratum_chunks={"": 10})
    snapshot = tracker.request_now(0.7)
    tracker.on_done(snapshot.seq, 0, {"groups": 3, "strata_seen": {"": 7}, "chunks_seen": list(range(7)), **fields})
    reason = tracker.held_back(snapshot)
    assert reason is not None and '"bad": its estimate is nan' in reason and '"rare": no interval yet' in reason
    assert reason.startswith("2 groups without an interval")
    assert tracker.describe(snapshot)["stop_held_back"] == reason
    # Many such groups: named a few at a time, counted in full.
    many = SnapshotState(Sum(), [""] * 10)
    many.add_run(0, 0, 0, run({f"k{i}": 1 for i in range(500)}), chunk=0, end=True)
    many.add_run(1, 0, 0, run({"k0": 2}), chunk=1, end=True)
    crowd = _interval_fields(many.table())
    assert crowd["unbounded"] == 499 and len(crowd["unbounded_examples"]) == UNBOUNDED_EXAMPLES
    # Intervals everywhere, one too wide: the widest group is named.
    wide = _interval_fields(SnapshotTable(["a", "b"], [1, 1], [10.0, 10.0], [9.0, 2.0], [11.0, 18.0], [False, False]))
    assert wide == {"max_relative_half_width": 0.8, "widest": "b"}
    tracker.on_done(tracker.request_now(0.8).seq, 0, {"groups": 2, "strata_seen": {"": 7}, **wide})
    assert tracker.held_back(tracker.snapshots[-1]) == 'the widest interval is 80.0% of its estimate, over 50.0% ("b")'


def test_a_lopsided_interval_is_as_wide_as_its_farther_end_from_the_estimate() -> None:
    """``--stop-when-accurate`` and the "accurate to" of an early stop measured an interval by its half-width. A
    Count's (or a ``Sum(nonnegative=True)``'s) low raised to the value so far makes its interval lopsided: [95, 120]
    around 100 is 12.5% by half-width, though the final value may lie 20% above the estimate, and a job asked for
    15% stopped on it. The width is now the farther end's distance from the estimate (a symmetric interval's
    half-width, as before)."""
    table = SnapshotTable(["a", "b"], [95, 50], [100.0, 50.0], [95.0, 45.0], [120.0, 55.0], [False, False])
    fields = _interval_fields(table)
    assert fields == {"max_relative_half_width": pytest.approx(0.2), "widest": "a"}
    tracker = SnapshotTracker(1, [10] * 10, stop_when_accurate=0.15, stratum_chunks={"": 10})
    snapshot = tracker.request_now(0.7)
    tracker.on_done(snapshot.seq, 0, {"groups": 2, "strata_seen": {"": 7}, "chunks_seen": list(range(7)), **fields})
    assert not tracker.accurate(snapshot)
    assert tracker.held_back(snapshot) == 'the widest interval is 20.0% of its estimate, over 15.0% ("a")'
    # Through a real state: a Count's floor at its count so far (10 of an estimate of 25) leaves the upper arm.
    state = SnapshotState(Count(), [""] * 10)
    for chunk, records in enumerate([1, 9, 0, 0]):
        state.add_run(chunk, 0, 0, run({"g": records} if records else {}), chunk, True)
    (row,) = state.rows()
    assert row.estimate is not None and row.estimate.low == 10.0 and row.estimate.high is not None
    reach = _interval_fields(state.table())["max_relative_half_width"]
    assert reach == pytest.approx((row.estimate.high - 25.0) / 25.0)


def test_an_infinite_value_leaves_its_group_without_an_interval_and_prints_no_numpy_warning() -> None:
    # inf - inf in the residuals made numpy print "RuntimeWarning: invalid value encountered in subtract" (with a
    # line of hop's source) on the run's terminal for every snapshot of a job with an infinite value.
    import warnings

    for aggregate, value in ((Sum(), math.inf), (Mean(), (1, math.inf))):
        state = SnapshotState(aggregate, [""] * 10)
        for chunk in range(4):
            big = value if chunk == 1 else (1, 2.0) if isinstance(aggregate, Mean) else 2.0
            state.add_run(
                chunk,
                0,
                0,
                run({"big": big, "fine": (1, 3.0 + chunk) if isinstance(aggregate, Mean) else 3.0 + chunk}),
                chunk,
                True,
            )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            rows = {row.key: row for row in state.rows()}
        assert rows["big"].estimate is not None and rows["big"].estimate.value == math.inf
        assert rows["big"].estimate.low is None and rows["big"].estimate.high is None
        assert rows["fine"].estimate is not None and rows["fine"].estimate.low is not None


def test_sums_and_means_of_ints_past_a_floats_squares_are_estimated() -> None:
    # A Sum of ints past 10**154 failed every snapshot ("OverflowError: int too large to convert to float": their
    # squares, in the estimators' moments); ints are exact at any size, and the final output was right.
    values = [3, 5, 4, 6]  # per chunk, in units of 10**200 (or 10**400, past a float's range: Sum only)
    sums: dict[object, SnapshotRow] = {}
    for aggregate in (Sum(), Mean()):
        state = SnapshotState(aggregate, [""] * 10)
        small = SnapshotState(aggregate, [""] * 10)
        for chunk, value in enumerate(values):
            pairs: dict[object, object] = {"big": value * 10**200, "small": value}
            if isinstance(aggregate, Mean):  # one value a chunk: (count, sum)
                pairs = {key: (1, number) for key, number in pairs.items()}
            else:
                pairs["huge"] = value * 10**400
            state.add_run(chunk, 0, 0, run(pairs), chunk, True)
            small.add_run(chunk, 0, 0, run({"big": pairs["small"]}), chunk, True)
        rows = {row.key: row for row in state.rows()}
        sums = sums or rows
        expected = next(small.rows()).estimate
        assert expected is not None and expected.low is not None and expected.high is not None
        big = rows["big"].estimate
        assert big is not None and big.low is not None and big.high is not None
        assert big.value == pytest.approx(expected.value * 1e200)
        assert (big.low, big.high) == pytest.approx((expected.low * 1e200, expected.high * 1e200))
        assert rows["small"].estimate == expected
    # No float holds the estimate of "huge": it has none (the part file shows its exact value so far).
    assert sums["huge"].estimate is None and sums["huge"].value == sum(values) * 10**400
    # Every chunk read: the exact int, as the output has it.
    exact = SnapshotState(Sum(), ["", ""])
    for chunk in range(2):
        exact.add_run(chunk, 0, 0, run({"huge": 10**400 + chunk}), chunk, True)
    row = next(exact.rows())
    assert row.final and row.estimate is not None and row.estimate.value == 2 * 10**400 + 1


def test_a_snapshot_before_any_chunk_of_an_input_without_strata_says_so_plainly() -> None:
    tracker = SnapshotTracker(1, [10, 10], stop_when_accurate=0.1, stratum_chunks={"": 2})
    snapshot = tracker.request_now(0.95)
    tracker.on_done(
        snapshot.seq, 0, {"groups": 1, "chunks_seen": [], "strata_seen": {"": 0}, "max_relative_half_width": 0.0}
    )
    reason = tracker.held_back(snapshot)
    assert reason is not None and reason.startswith("no chunk of the input was read yet"), reason
    strata = SnapshotTracker(1, [10, 10], stop_when_accurate=0.1, stratum_chunks={"15": 1, "16": 1})
    blind = strata.request_now(0.5)
    strata.on_done(blind.seq, 0, {"groups": 1, "chunks_seen": [0], "strata_seen": {"15": 1, "16": 0}})
    assert (strata.held_back(blind) or "").startswith("no chunk of stratum '16' was read yet")


def test_a_later_steps_partition_answered_with_its_final_output_has_seen_all_of_it() -> None:
    """A pipeline's later step reads no chunks of its own (its maps read the step before's partitions), so a
    partition of it that answered a snapshot with its final output (it committed first) said it had seen none of
    its chunks: ``chunks_fraction`` 0.0 beside ``final``, where every final partition has seen everything (1.0)."""
    tracker = SnapshotTracker(2, [])  # (the coordinator's tracker of a later step: no chunks)
    upstream = {"job_id": "job-1", "label": "0.500", "input_fraction": 0.5, "chunks_fraction": 0.5}
    snapshot = tracker.request_derived("0.500", 0.5, upstream, "/nowhere")
    # As the coordinator answers for a committed partition (hop.coordinator.snapshots), a later step's chunk strata
    # being none: every one of its chunks seen.
    final = {"label": "0.500", "groups": 1, "final": True, "rows": [], "chunks_seen": [], "strata_seen": {}}
    tracker.on_done(snapshot.seq, 0, final)
    tracker.on_done(snapshot.seq, 1, {"label": "0.500", "groups": 2, "rows": []})
    partitions = tracker.describe(snapshot)["partitions"]
    assert partitions[0]["chunks_fraction"] == partitions[0]["input_fraction"] == 1.0, partitions[0]
    assert "chunks_fraction" not in partitions[1], "a recomputed partition reads no chunks"
    # A first step's partition answered so has seen every chunk, which says the same.
    first = SnapshotTracker(1, [10, 30])
    taken = first.request_now(0.5)
    first.on_done(taken.seq, 0, {**final, "chunks_seen": [0, 1], "strata_seen": {"": 2}})
    (partition,) = first.describe(taken)["partitions"]
    assert partition["chunks_fraction"] == partition["input_fraction"] == 1.0
    assert partition["strata_seen"] == {"": 2}


def test_a_later_steps_snapshot_covers_its_upstreams_chunks_as_its_bytes() -> None:
    """A pipeline's later step's ``_snapshot.json`` took its ``input_fraction`` from the upstream snapshot but left
    ``chunks_fraction`` null (its reducers read no chunks), so a third step's ``upstream`` said null too."""
    second = SnapshotTracker(1, [])  # (the coordinator's tracker of a later step: no chunks)
    upstream = {"job_id": "job-1", "label": "0.500", "input_fraction": 0.48, "chunks_fraction": 0.5}
    snapshot = second.request_derived("0.500", 0.5, upstream, "/nowhere")
    second.on_done(snapshot.seq, 0, {"label": "0.500", "groups": 2, "rows": []})
    described = second.describe(snapshot)
    assert (described["input_fraction"], described["chunks_fraction"]) == (0.48, 0.5), described
    # The step after it is given that description as its upstream (hop.coordinator.snapshots), and says the same.
    third = SnapshotTracker(1, [])
    derived = third.request_derived("0.500", 0.5, {"job_id": "job-2", **described}, "/nowhere")
    third.on_done(derived.seq, 0, {"label": "0.500", "groups": 1, "rows": []})
    assert third.describe(derived)["upstream"]["chunks_fraction"] == 0.5


def test_a_small_bound_is_said_as_given_not_rounded_to_a_tenth_of_a_percent() -> None:
    """``--stop-when-accurate 0.0005`` held a snapshot back with "the widest interval is 0.1% of its estimate, over
    0.1%": both rounded to one decimal, the reason read as a contradiction."""
    tracker = SnapshotTracker(1, [10] * 10, stop_when_accurate=0.0005, stratum_chunks={"": 10})
    fields = {"max_relative_half_width": 0.0006, "widest": "b"}
    tracker.on_done(tracker.request_now(0.8).seq, 0, {"groups": 2, "strata_seen": {"": 7}, **fields})
    assert tracker.held_back(tracker.snapshots[-1]) == 'the widest interval is 0.06% of its estimate, over 0.05% ("b")'


def test_a_width_just_over_its_bound_is_said_with_the_decimals_that_tell_them_apart() -> None:
    """A half-width of 1.04% against ``--stop-when-accurate 0.01`` held a snapshot back with "the widest interval
    is 1.0% of its estimate, over 1.0%" (found by the web view's walkthrough): rounded to the bound's decimals, the
    two read equal. The width gets the decimals that tell it from the bound (a figure far from it, none more)."""
    from hop.wording import percent_like

    tracker = SnapshotTracker(1, [10] * 10, stop_when_accurate=0.01, stratum_chunks={"": 10})
    fields = {"max_relative_half_width": 0.0104, "widest": "b"}
    tracker.on_done(tracker.request_now(0.8).seq, 0, {"groups": 2, "strata_seen": {"": 7}, **fields})
    assert tracker.held_back(tracker.snapshots[-1]) == 'the widest interval is 1.04% of its estimate, over 1.0% ("b")'
    assert percent_like(0.25, 0.01) == "25.0%" and percent_like(0.010000001, 0.01) == "1.0000%"
