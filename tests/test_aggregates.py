"""Built-in aggregates' states and merges (``hop.aggregates``), apart from the engine's loops."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hop.aggregates import Aggregate, Count, CountDistinct, DistinctValues, Max, Mean, Min, Sum, TopK
from shuffle import codec


def test_count_distinct_hands_its_set_on_from_merge_to_merge() -> None:
    """Folding a key's values one by one built the set of the whole state again in every merge (n²/2 insertions for
    n distinct values: 10 keys of 400 KB of values took 3.4 s, twice that 18.8 s). A merge's state now carries its
    set to the next merge, which takes it over instead of building one."""
    aggregate = CountDistinct()
    state = aggregate.merge(aggregate.lift("a"), aggregate.lift("b"))
    carried = state.seen  # type: ignore[attr-defined]
    for value in "cdbe":
        state = aggregate.merge(state, aggregate.lift(value))
        assert state.seen is carried  # type: ignore[attr-defined]
    assert state == ("a", "b", "c", "d", "e") and carried == set("abcde")


def test_an_older_count_distinct_state_merged_again_keeps_its_own_values() -> None:
    """The set goes on with the newer state; the older one, still a tuple of its own values, builds its own set when
    merged again (a snapshot's or a retried map's state can be): it never takes the newer state's values for its."""
    aggregate = CountDistinct()
    older = aggregate.merge(aggregate.lift(1), aggregate.lift(2))
    newer = aggregate.merge(older, aggregate.lift(3))
    again = aggregate.merge(older, aggregate.lift(3))
    assert older == (1, 2) and newer == again == (1, 2, 3)
    assert aggregate.finish(aggregate.merge(older, (4,))) == 3 and aggregate.finish(newer) == 3


def test_a_count_distinct_state_travels_as_the_tuple_it_is() -> None:
    """The shuffle packs a state as an array and unpacks a tuple; Spark pickles it."""
    aggregate = CountDistinct()
    state = aggregate.merge(aggregate.lift((1, "x")), aggregate.lift(2.5))
    assert type(state) is DistinctValues
    assert codec.unpackb(codec.packb(state)) == ((1, "x"), 2.5) == pickle.loads(pickle.dumps(state))


def test_count_distinct_counts_nan_once_however_the_shuffle_carried_it() -> None:
    """NaN equals nothing, so sets told NaNs apart by identity, and a state unpacked from the shuffle holds new
    objects: ``math.nan`` yielded 3,000 times counted 1, 41 or 3,000 by ``--spill-records``. Now one value, from
    accumulators, lifts, unpacked states and checkpoints alike."""
    aggregate = CountDistinct()
    accumulator = aggregate.start(float("nan"))
    aggregate.add(accumulator, float("nan"))
    aggregate.add(accumulator, 1.0)
    spilled = [codec.unpackb(codec.packb(aggregate.state_of(accumulator))) for _ in range(3)]
    assert [aggregate.finish(state) for state in spilled] == [2, 2, 2]
    total = aggregate.lift(float("nan"))
    for state in spilled:
        total = aggregate.merge(total, state)
    assert aggregate.finish(total) == 2
    resumed = aggregate.accumulator_of(spilled[0] + spilled[1])  # (a state as a checkpoint might hold it)
    aggregate.add(resumed, float("nan"))
    assert aggregate.finish(aggregate.state_of(resumed)) == 2


@given(st.lists(st.lists(st.integers(-5, 5), max_size=6), max_size=8), st.randoms(use_true_random=False))
def test_count_distinct_folds_any_way_to_the_distinct_values(groups: list[list[int]], random: object) -> None:
    """However states are merged, in whatever order and with older states merged again, the count is exact."""
    aggregate = CountDistinct()
    states = [aggregate.lift(value) for group in groups for value in group]
    expected = len({value for group in groups for value in group})
    if not states:
        return
    kept = list(states)
    random.shuffle(states)  # type: ignore[attr-defined]
    total = states[0]
    for state in states[1:]:
        total = aggregate.merge(total, state)
    assert aggregate.finish(total) == expected
    for state in kept:  # every state made on the way is still its own values
        assert len(set(state)) == len(state)
    partial = kept[0]
    for state in kept[1:]:
        partial = aggregate.merge(state, partial)
    assert aggregate.finish(aggregate.merge(partial, total)) == expected


@pytest.mark.parametrize("aggregate", [Sum(), Count(), Min(), Max(), Mean(), TopK(3), CountDistinct()], ids=repr)
@given(values=st.lists(st.integers(-5, 5), min_size=1, max_size=30))
def test_an_accumulator_gives_the_state_merges_of_lifts_give(aggregate: Aggregate, values: list[int]) -> None:
    """``start``/``add``/``state_of`` (the map loop's in-place fold, ``Aggregate.accumulates``) end in the state that
    merging the values' lifts one by one gives: the base class's for every aggregate, CountDistinct's own."""
    accumulator = aggregate.start(values[0])
    for value in values[1:]:
        aggregate.add(accumulator, value)
    merged = aggregate.lift(values[0])
    for value in values[1:]:
        merged = aggregate.merge(merged, aggregate.lift(value))
    assert aggregate.state_of(accumulator) == merged
