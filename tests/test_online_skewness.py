"""Sum and Mean intervals corrected for skewness: the third-power moments a reducer's summaries carry per key
(``hop.online.state``) and the interval built from them (``hop.online.estimators``)."""

from __future__ import annotations

import math
import random
import statistics
from itertools import count
from pathlib import Path

import pytest

from hop.aggregates import Aggregate, Count, Mean, Sum
from hop.online.estimators import MIN_SKEW_SAMPLES, SKEW_SHRINK, Bytes, Estimate, estimate_total, t_quantile
from hop.online.state import SnapshotState
from shuffle.runs import encode_run

CHUNKS = 60
SEEN = 12
TRIALS = 400


def run(pairs: dict[object, object]) -> bytes:
    return encode_run(list(pairs), list(pairs.values()))


def _pair(aggregate: Aggregate, values: list[float]) -> object:
    """A chunk's state of ``values`` for ``aggregate`` (a Mean's: count, sum)."""
    return (len(values), sum(values)) if isinstance(aggregate, Mean) else sum(values)


def _estimate(aggregate: Aggregate, per_chunk: list[list[float]], seen: list[int]) -> Estimate:
    """The snapshot estimate of one group whose values in chunk ``c`` are ``per_chunk[c]``, ``seen`` chunks read."""
    state = SnapshotState(type(aggregate)(), [""] * len(per_chunk))
    for chunk in seen:
        state.add_run(chunk, 0, 0, run({"g": _pair(aggregate, per_chunk[chunk])}), chunk=chunk, end=True)
    estimate = next(state.rows()).estimate
    assert estimate is not None and estimate.low is not None and estimate.high is not None
    return estimate


def _truth(aggregate: Aggregate, per_chunk: list[list[float]]) -> float:
    values = [value for chunk in per_chunk for value in chunk]
    return sum(values) / len(values) if isinstance(aggregate, Mean) else sum(values)


def _t_half(contributions: list[float], chunks: int) -> float:
    """The t interval's half-width of a total from per-chunk ``contributions`` (chunks of one size)."""
    n = len(contributions)
    return t_quantile(n - 1, 0.95) * chunks * math.sqrt((1 - n / chunks) * statistics.variance(contributions) / n)


@pytest.mark.parametrize("aggregate", [Sum(), Mean()], ids=["sum", "mean"])
def test_skewed_values_get_a_longer_upper_arm_and_intervals_that_hold_more_often(aggregate: Aggregate) -> None:
    """Lognormal values (sigma 1.5), 3 a chunk, 12 of 60 chunks read, 400 random samples (fixed seeds): the t
    interval, symmetric, held 0.825 of the time; a sample that missed the rare large values has an estimate and a
    spread both too low, so its interval falls short above. Corrected, the upper arm is the longer in nearly every
    sample and 0.89 hold."""
    rng = random.Random(7)
    per_chunk = [[rng.lognormvariate(2, 1.5) for _ in range(3)] for _ in range(CHUNKS)]
    truth = _truth(aggregate, per_chunk)
    held = longer_above = 0
    for trial in range(TRIALS):
        estimate = _estimate(aggregate, per_chunk, random.Random(trial).sample(range(CHUNKS), SEEN))
        assert estimate.low is not None and estimate.high is not None
        held += estimate.low <= truth <= estimate.high
        longer_above += estimate.high - estimate.value > (estimate.value - estimate.low) * 1.0001
    assert longer_above / TRIALS >= 0.95
    assert held / TRIALS >= 0.87


def test_symmetric_values_keep_about_the_t_interval_and_never_a_narrower_one() -> None:
    """Normal values: the sample skewness of 12 chunks is noise, shrunk away mostly; where some is left the interval
    shifts, but its width never falls below the t interval's (median 1.00 of it), and 95% hold as before."""
    rng = random.Random(3)
    per_chunk = [[rng.gauss(100, 20)] for _ in range(CHUNKS)]
    truth = _truth(Sum(), per_chunk)
    held, ratios = 0, []
    for trial in range(TRIALS):
        seen = random.Random(trial).sample(range(CHUNKS), SEEN)
        estimate = _estimate(Sum(), per_chunk, seen)
        assert estimate.low is not None and estimate.high is not None
        held += estimate.low <= truth <= estimate.high
        ratios.append((estimate.high - estimate.low) / (2 * _t_half([per_chunk[c][0] for c in seen], CHUNKS)))
    assert min(ratios) >= 1 - 1e-9
    assert statistics.median(ratios) <= 1.01
    assert held / TRIALS >= 0.93


def test_the_corrected_interval_is_halls_transformation_of_the_t_interval() -> None:
    """Worked by hand from the contributions (chunks of one size, so the residuals are ``x - mean``): the skewness
    of the estimate, shrunk, and the arms ``3 ((1 + a (±q - a/6))^(1/3) - 1) / a`` standard errors."""
    contributions = [3.0, 4.0, 2.5, 3.5, 30.0, 4.5, 2.0, 5.0]
    n, chunks = len(contributions), 40
    mean = statistics.mean(contributions)
    residuals = [x - mean for x in contributions]
    m2 = sum(d * d for d in residuals) / n
    gamma = sum(d**3 for d in residuals) / n / m2**1.5
    a = (gamma - SKEW_SHRINK * math.sqrt(6 / n)) / math.sqrt(n)
    q = t_quantile(n - 1, 0.95)
    a = min(a, 3 * (math.sqrt(q * q + 2 / 3) - q))
    se = _t_half(contributions, chunks) / q
    down = 3 * ((1 + a * (q - a / 6)) ** (1 / 3) - 1) / a
    up = -3 * (math.copysign(abs(1 + a * (-q - a / 6)) ** (1 / 3), 1 + a * (-q - a / 6)) - 1) / a
    state = _estimate(Sum(), [[x] for x in contributions] + [[0.0]] * (chunks - n), list(range(n)))
    assert state.value == pytest.approx(chunks * mean)
    assert (state.low, state.high) == pytest.approx((chunks * mean - down * se, chunks * mean + up * se))
    assert up > q > down > 0
    # The scalar estimator, given the same power sums, agrees.
    cubes = sum(x**3 for x in contributions)
    thirds = (cubes, sum(x * x for x in contributions), sum(contributions))
    sizes = Bytes(sum(contributions), n, n, chunks, n)
    scalar = estimate_total(
        sum(contributions), sum(x * x for x in contributions), n, chunks, sizes=sizes, thirds=thirds
    )
    assert (scalar.low, scalar.high) == pytest.approx((state.low, state.high))


def test_few_chunks_counts_and_cubes_past_a_float_keep_the_t_interval() -> None:
    """Below ``MIN_SKEW_SAMPLES`` chunks the sample skewness says next to nothing; a Count's intervals hold their
    level uncorrected; a value whose cube overflows a float has no skewness to go by: the symmetric t interval."""
    few = [[1.0], [2.0], [1.5], [40.0]][: MIN_SKEW_SAMPLES - 1]
    cases: list[tuple[Aggregate, list[list[float]]]] = [
        (Sum(), few + [[0.0]] * 20),
        (Mean(), few + [[0.0]] * 20),
        (Sum(), [[1e120], [2e120], [1.5e120], [1e120], [9e120], [1.2e120]] + [[0.0]] * 20),
    ]
    for aggregate, per_chunk in cases:
        occurred = sum(1 for values in per_chunk if values[0])
        estimate = _estimate(aggregate, per_chunk, list(range(occurred)))
        assert estimate.low is not None and estimate.high is not None
        assert estimate.high - estimate.value == pytest.approx(estimate.value - estimate.low)
    state = SnapshotState(Count(), [""] * 20)
    for chunk, records in enumerate([1, 2, 1, 1, 30, 1, 2, 1]):
        state.add_run(chunk, 0, 0, run({"g": records}), chunk=chunk, end=True)
    estimate = next(state.rows()).estimate
    assert estimate is not None and estimate.low is not None and estimate.high is not None
    # The t interval, symmetric, but for its low raised to the count so far (39), which the final count cannot be
    # below (test_online_units.py::test_a_counts_interval_starts_no_lower_than_its_count_so_far).
    symmetric_low = estimate.value - (estimate.high - estimate.value)
    assert symmetric_low < 39 and estimate.low == 39.0


@pytest.mark.parametrize("aggregate", [Sum(), Mean()], ids=["sum", "mean"])
def test_the_moments_merge_across_map_tasks_and_summaries_written_to_disk(aggregate: Aggregate, tmp_path: Path) -> None:
    """The same chunks read by one map task, by three, and with the summaries written out to disk (a budget of
    1,024 keys, 1,500 keys): the same corrected intervals, since the third powers are sums that merge as the
    squares do."""
    rng = random.Random(11)
    chunks = 12
    keys = [f"k{i:04d}" for i in range(1500)]
    data = [{key: _pair(aggregate, [rng.lognormvariate(1, 1.2)]) for key in keys} for _ in range(chunks)]
    names = count()
    states = {
        "one task": SnapshotState(type(aggregate)(), [""] * 40),
        "three tasks": SnapshotState(type(aggregate)(), [""] * 40),
        "on disk": SnapshotState(
            type(aggregate)(),
            [""] * 40,
            spill_path=lambda: tmp_path / f"summary-{next(names)}",
            memory_limit=1,
        ),
    }
    for chunk, pairs in enumerate(data):
        states["one task"].add_run(0, 0, chunk, run(pairs), chunk=chunk, end=True)
        states["three tasks"].add_run(chunk % 3, 0, chunk // 3, run(pairs), chunk=chunk, end=True)
        states["on disk"].add_run(chunk % 3, 0, chunk // 3, run(pairs), chunk=chunk, end=True)
    assert states["on disk"].dumped_keys > 0
    tables = {name: state.table() for name, state in states.items()}
    one = tables["one task"]
    arms = [(v - lo, h - v) for v, lo, h in zip(one.estimates, one.lows, one.highs, strict=True) if v and lo and h]
    assert sum(up > down * 1.0001 for down, up in arms) > 1000  # (lognormal values: longer above, mostly)
    for name in ("three tasks", "on disk"):
        assert tables[name].keys == one.keys
        assert tables[name].lows == pytest.approx(one.lows, rel=1e-9), name
        assert tables[name].highs == pytest.approx(one.highs, rel=1e-9), name
    for state in states.values():
        state.close()
