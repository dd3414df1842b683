"""Continuous queries without processes: window arithmetic, the pane buffer, the reducer's window assembler (reasons,
C2 scoreboard, late cells, differential windows, checkpoints) and the coordinator's window tracker."""

from __future__ import annotations

import enum
import math
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hop.aggregates import Aggregate, CountDistinct, Max, Min, Sum
from hop.stream import tracker as tracker_module
from hop.stream.assembler import FOREVER, Closing, WindowAssembler
from hop.stream.options import StreamOptions, stream_options
from hop.stream.panes import PaneBuffer
from hop.stream.tasks import _map_checkpoints, _usable_map_checkpoint
from hop.stream.tracker import WindowTracker
from hop.stream.windows import WindowSpec, WindowSpecError, label_order, parse_duration, parse_extent
from shuffle import codec
from shuffle.buffer import AggregateValueError, UnhashableKeyError
from shuffle.keys import NanKeyError
from shuffle.runs import iter_run


def test_parse_extents_and_panes() -> None:
    assert parse_extent("60s") == ("time", 60_000_000)
    assert parse_extent("500ms") == ("time", 500_000)
    assert parse_extent("1000r") == ("records", 1000)
    assert parse_extent("64KB") == ("bytes", 65536)
    spec = WindowSpec.parse("60s", "10s")
    assert (spec.pane, spec.panes_per_window, spec.panes_per_slide) == (10_000_000, 6, 1)
    odd = WindowSpec.parse("10s", "4s")
    assert odd.pane == 2_000_000 and odd.panes_of_window(3) == range(6, 11)
    assert WindowSpec.parse("5s").tumbling
    for bad in ("60", "ten s", "5 parsecs", "0s"):
        with pytest.raises(WindowSpecError):
            WindowSpec.parse(bad)
    with pytest.raises(WindowSpecError, match="same kind"):
        WindowSpec.parse("60s", "10r")
    with pytest.raises(WindowSpecError, match="skip records"):
        WindowSpec.parse("10s", "20s")


def test_window_labels_sort_by_start_by_name_and_with_label_order() -> None:
    """A whole second's label had no fraction, and "." sorts before "Z": by name (``ls``), 14:30:00 came after
    14:29:59.5. A job whose slide is not whole seconds gives every label its fraction; whole-second slides keep the
    short names; ``label_order`` sorts the names of older outputs (mixed forms) too."""
    spec = WindowSpec.parse("1s", "500ms")
    labels = [spec.label(window) for window in range(3_500_000_000, 3_500_000_006)]
    assert sorted(labels) == labels and sorted(labels, key=label_order) == labels
    assert labels[0].endswith("40.000000Z") and labels[1].endswith("40.500000Z"), labels
    assert WindowSpec.parse("2s").label(850_000_000) == "20231114T221320Z"  # (window 850,000,000 starts at 1.7e9 s)
    older = ["20250721T044320Z", "20250721T044320.500000Z", "20250721T044321Z"]
    assert sorted(older) != older and sorted(older, key=label_order) == older
    records = WindowSpec.parse("10r")
    assert sorted((records.label(w) for w in (12, 3, 100)), key=label_order) == [records.label(w) for w in (3, 12, 100)]


def test_a_window_of_too_many_panes_is_warned_of() -> None:
    """``--window 10s --slide 1ms`` (10,000 panes a window) ran for minutes on a few seconds of events, and a slide
    that does not divide the window makes tiny panes too (10s by 3001ms: 1 ms panes)."""
    for slide in ("1ms", "3001ms"):
        warning = WindowSpec.parse("10s", slide).many_panes_warning()
        assert warning is not None and warning.startswith("each window holds 10,000 panes of 0.001 seconds"), warning
    assert WindowSpec.parse("1h", "10s").many_panes_warning() is None  # 360 panes
    assert WindowSpec.parse("10s", "10ms").many_panes_warning() is None  # 1,000: the most without a warning
    for window, slide, start in (
        ("5000r", "1r", "5,000 panes of 1 record "),
        ("2000s", "1s", "2,000 panes of 1 second "),
    ):
        warning = WindowSpec.parse(window, slide).many_panes_warning()
        assert warning is not None and warning.startswith(f"each window holds {start}"), warning  # (not "1 records")


def test_windows_that_put_a_record_in_too_many_windows_are_refused() -> None:
    """``--window 1h --slide 1ms`` was only warned of (3,600,000 panes a window): it wrote a window every 1 ms, fell
    behind at once and could not stop, since stopping writes the 3,600,000 windows holding the open panes. Past
    3,600 windows a record a job is refused, saying by how many and what slide to give; 1h by 1s (3,600) runs, and
    past 1,000 it is warned that stopping writes that many windows."""
    with pytest.raises(
        ValueError,
        match=r"^windows of 3600 seconds sliding by 0\.001 seconds put every record in "
        r"3,600,000 windows \(window / slide\).* could neither keep up nor stop\. At most 3,600 windows "
        r"a record are allowed: give a slide of at least 1 second \(window / 3,600\), or no --slide",
    ):
        stream_options(["replay:x"], "1h", "1ms")
    with pytest.raises(ValueError, match=r"5,000 windows .* give a slide of at least 2 records \(window / 3,600\)"):
        stream_options(["replay:x"], "5000r", "1r")
    wire = stream_options(["replay:x"], "1h", "1s")  # the most allowed
    wire["window"]["slide"] = 1_000  # (1 ms: a spec built by hand, not by stream_options, is refused as it arrives)
    with pytest.raises(ValueError, match="3,600,000 windows"):
        StreamOptions.from_wire(wire)
    assert WindowSpec.parse("1h", "1s").many_windows_warning() == (
        "every record falls in 3,600 windows (window / slide), so stopping the job writes the 3,600 windows holding "
        "its open panes at once, which may take a minute or more"
    )
    assert WindowSpec.parse("10s", "10ms").many_windows_warning() is None  # 1,000: the most without a warning
    assert WindowSpec.parse("10s", "3001ms").too_many_windows() is None  # 10,000 panes, but 4 windows a record


def test_durations_may_be_zero_unlike_window_extents() -> None:
    """``--lateness 0s`` (the default, written out) was refused as a window extent that must be positive."""
    assert parse_duration("0s") == 0.0 and parse_duration("0") == 0.0
    assert parse_duration("500ms") == 0.5 and parse_duration("2m") == 120.0 and parse_duration("1.5") == 1.5
    for bad, says in [
        ("-2s", "0 or more"),
        ("-1", "0 or more"),
        ("nan", "0 or more"),
        ("inf", "0 or more"),
        ("2x", "cannot read '2x' as a duration"),
        ("1KB", "cannot read '1KB' as a duration"),
    ]:
        with pytest.raises(WindowSpecError, match=says):
            parse_duration(bad)


@given(st.integers(1, 12), st.integers(1, 12), st.integers(-500, 500))
def test_windows_of_pane_are_exactly_those_containing_it(size: int, slide: int, pane: int) -> None:
    if slide > size:
        size, slide = slide, size
    spec = WindowSpec("time", size, slide)
    expected = [w for w in range(-1000, 1000) if pane in spec.panes_of_window(w)]
    assert list(spec.windows_of_pane(pane)) == expected


def test_window_labels_sort_and_name_time_in_utc() -> None:
    spec = WindowSpec.parse("10s", "5s")
    window = spec.pane_of(1_700_000_000.0)  # panes are slides here
    assert spec.label(window) == "20231114T221320Z"
    assert spec.bounds(window) == (1_700_000_000.0, 1_700_000_010.0)
    records = WindowSpec.parse("1000r")
    assert records.label(3) == "000000000003000" < records.label(10)


def test_stream_options_refuse_what_cannot_work() -> None:
    with pytest.raises(ValueError, match="--source"):
        stream_options([], "10s")
    with pytest.raises(ValueError, match="fidelity"):
        stream_options(["replay:x"], "10s", fidelity=1.5)
    with pytest.raises(ValueError, match="lateness"):
        stream_options(["replay:x"], "100r", lateness=2.0)


def _buffer(partitions: int = 2) -> PaneBuffer:
    return PaneBuffer(partitions, lambda key: len(key) % partitions, Sum(), None)


def test_pane_buffer_combines_each_record_once_into_its_pane() -> None:
    buffer = _buffer()
    for pane, words in [(3, "a bb a"), (3, "a"), (4, "bb"), (5, "c")]:
        buffer.add(pane, [(word, 1) for word in words.split()])
    sealed = buffer.seal_below(5)
    assert [p.pane for p in sealed] == [3, 4] and [p.records for p in sealed] == [2, 1]
    three = {k: v for run, _, _ in sealed[0].runs for k, v in iter_run(run)}
    assert three == {"a": 3, "bb": 1}
    assert dict(iter_run(sealed[0].runs[1][0])) == {"a": 3}  # len("a") % 2 == 1
    assert buffer.open_panes == [5]
    state = msgpack.unpackb(msgpack.packb(buffer.to_state()), use_list=False, strict_map_key=False)
    restored = _buffer()
    restored.restore(state)
    assert restored.panes == buffer.panes and restored.records == buffer.records


@pytest.mark.parametrize("aggregate", [Sum(), Min(), Max()], ids=repr)
def test_pane_buffer_refuses_none_as_a_keys_first_value_as_batch_does(aggregate: Aggregate) -> None:
    """A state is never None: a pane that took it would lose the value (or, for Sum, fail on 0 + None)."""
    buffer = PaneBuffer(1, lambda key: 0, aggregate, None)
    buffer.add(0, [("x", 2)])
    with pytest.raises(AggregateValueError, match=re.escape(f"{aggregate!r} got None as the first value of key 'y'")):
        buffer.add(0, [("x", 3), ("y", None)])
    assert buffer.failed_pair == ("y", None)


@pytest.mark.parametrize("aggregate", [Sum(), None], ids=["Sum", "no-combiner"])
def test_pane_buffer_refuses_a_nan_key_as_batch_does(aggregate: Aggregate | None) -> None:
    """A float NaN key equals nothing: a pane sealed it as one group per record, so a window wrote ``NaN 1`` once
    per record. It is refused as a batch map's spill refuses it."""
    buffer = PaneBuffer(1, lambda key: 0, aggregate, None)
    buffer.add(0, [(1.5, 1), (math.nan, 1), (math.nan, 1)])
    with pytest.raises(NanKeyError, match="map output key nan is or holds a float NaN"):
        buffer.seal_below(1)


@pytest.mark.parametrize("aggregate", [Sum(), None], ids=["Sum", "no-combiner"])
def test_pane_buffer_names_a_list_key_as_batch_does(aggregate: Aggregate | None) -> None:
    """A list key raised the dict's bare ``TypeError: unhashable type: 'list'``, which a Sum's pane then reported
    as a value Sum() could not fold; it is the batch buffer's ``UnhashableKeyError`` now, naming the key."""
    buffer = PaneBuffer(1, lambda key: 0, aggregate, None)
    with pytest.raises(UnhashableKeyError, match=re.escape("map output key ['a'] is a list, which cannot be a key")):
        buffer.add(0, [(["a"], 1)])


def test_pane_buffer_keeps_the_pair_an_aggregate_could_not_fold() -> None:
    """The stream map names it (``hop.usercode.fold_error``, as for a batch map; tests/test_stream_engine.py)."""
    buffer = PaneBuffer(1, lambda key: 0, Sum(), None)
    buffer.add(0, [("x", 2)])
    with pytest.raises(TypeError):
        buffer.add(0, [("y", 1), ("x", None)])  # 2 + None
    assert buffer.failed_pair == ("x", None)


def test_pane_buffer_sums_what_batch_sums() -> None:
    """A pane's Sum starts from the key's first value, not from 0: strings add up as they do in a batch job."""
    buffer = PaneBuffer(1, lambda key: 0, Sum(), None)
    buffer.add(0, [("x", "a"), ("y", 0.5)])
    buffer.add(0, [("x", "b"), ("y", 1)])
    assert buffer.panes[0] == {"x": "ab", "y": 1.5}


class _Color(enum.IntEnum):
    RED = 1
    GREEN = 2


@pytest.mark.parametrize("aggregate", [Sum(), None], ids=["Sum", "combine"])
def test_pane_buffer_seals_intenum_keys_as_their_ints_as_batch_sends_them(aggregate: Aggregate | None) -> None:
    """A continuous job whose map yields IntEnum members failed as its pane was sealed ("map task 0: key
    <Color.RED: 1> of type Color is not a msgpack-able key"), with an aggregate too; they go as their ints, which a
    combine receives, as in a batch job (shuffle.keys.plain_key)."""
    received: list[Any] = []

    def combine(key: Any, values: list[int]) -> Any:
        received.append(key)
        yield key, sum(values)

    buffer = PaneBuffer(1, lambda key: 0, aggregate, None if aggregate else combine)
    buffer.add(0, [(_Color.RED, 1), (("x", _Color.GREEN), 1), (_Color.RED, 2)])
    (sealed,) = buffer.seal_below(1)
    pairs = list(iter_run(sealed.runs[0][0]))
    assert pairs == [(1, 3), (("x", 2), 1)] and [type(key) for key, _ in pairs] == [int, tuple]
    assert aggregate or [repr(key) for key in received] == ["1", "('x', 2)"]


class _CountedCountDistinct(CountDistinct):
    merges = 0

    def merge(self, a: Any, b: Any) -> Any:  # type: ignore[override]
        type(self).merges += 1
        return CountDistinct.merge(a, b)


def test_pane_buffer_folds_count_distinct_into_accumulators_and_checkpoints_states() -> None:
    """A pane folded CountDistinct value by value (a new tuple of all of a key's values per value: O(n²) per key
    and pane). It adds to the key's accumulator in place and seals (and checkpoints) states; a pane restored from a
    checkpoint goes on from them."""
    aggregate = _CountedCountDistinct()
    whole, resumed = PaneBuffer(1, lambda key: 0, aggregate, None), PaneBuffer(1, lambda key: 0, aggregate, None)
    records = [[("hot", n % 3000), ("cold", n % 2)] for n in range(6000)]
    for record in records[:4000]:
        whole.add(7, record)
        resumed.add(7, record)
    state = msgpack.unpackb(msgpack.packb(resumed.to_state()), use_list=False, strict_map_key=False)
    assert [len(values) for _, _, _, values in state["panes"]] == [2] and state["panes"][0][3][1] == (0, 1)
    resumed = PaneBuffer(1, lambda key: 0, aggregate, None)
    resumed.restore(state)
    for record in records[4000:]:
        whole.add(7, record)
        resumed.add(7, record)
    assert aggregate.merges == 0
    runs = [buffer.seal_below(8)[0].runs[0][0] for buffer in (whole, resumed)]
    assert runs[0] == runs[1]
    states = dict(iter_run(runs[0]))
    assert states == {"hot": tuple(range(3000)), "cold": (0, 1)}


def _assembler(sources: int = 2, **options: Any) -> WindowAssembler:
    spec = WindowSpec("records", options.pop("size", 4), options.pop("slide", 2))
    merge = options.pop("merge", lambda key, a, b: a + b)
    return WindowAssembler(spec, sources, lists=False, merge=merge, **options)


def one(window: int, reason: str) -> Closing:
    return Closing(window, reason, window + 1)


def test_window_waits_for_every_source_then_is_complete() -> None:
    assembler = _assembler()
    assert assembler.add_cell(0, 0, 2, [("x", 2)], sealed=1) == "new"
    assembler.add_cell(0, 1, 1, [("x", 1)], sealed=2)
    assert assembler.due(now=0.0) == []  # source 1 has sealed nothing
    assembler.add_cell(1, 1, 1, [("y", 5)], sealed=2)
    assert assembler.due(now=0.0) == [one(0, "complete")]
    result = assembler.emit(0, "complete")
    assert result is not None and result.groups == {"x": 3, "y": 5} and result.records == 4
    assert result.scoreboard["grid"] == ["DD", "ED"]  # source 1 sealed pane 0 without data: empty, present
    assert result.fidelity == 1.0


def test_fidelity_bound_emits_early_and_later_cells_are_late() -> None:
    assembler = _assembler(sources=4, fidelity=0.75, size=2, slide=2)  # one pane per window
    for source in range(3):
        assembler.add_cell(source, 0, 1, [("k", 1)], sealed=1)
    assert assembler.due(now=0.0) == [one(0, "fidelity")]
    result = assembler.emit(0, "fidelity")
    assert result is not None and result.groups == {"k": 3} and result.scoreboard["grid"][3] == "M"
    assert assembler.add_cell(3, 0, 1, [("k", 1)], sealed=1) == "late"
    assert assembler.late_cells == 1


@pytest.mark.timeout(20)  # the bug this guards against was an endless loop
def test_an_ended_source_does_not_make_every_later_window_due_under_fidelity() -> None:
    # Source 0 ended (its panes count as present forever), source 1 still runs and has sealed nothing: with
    # --fidelity 0.5 the ended source alone meets the bound for every window, so due() listed windows without end.
    assembler = _assembler(sources=2, fidelity=0.5, size=2, slide=2)
    assembler.add_cell(0, 0, 10, [("a", 10)], sealed=1)
    assembler.source_ended(0)
    assert assembler.due(now=0.0) == [one(0, "fidelity")]  # the window with data: the bound holds
    assert assembler.emit(0, "fidelity") is not None
    assert assembler.due(now=1.0) == []  # no record beyond: nothing to emit until source 1 seals or sends
    assembler.add_cell(1, 3, 2, [("b", 2)], sealed=4)
    assert assembler.due(now=2.0) == [Closing(1, "complete", 3, True), one(3, "complete")]  # 1-2 hold no data


def test_a_lone_window_without_data_is_skipped_as_a_stretch_of_them_is() -> None:
    # One empty window between two with data was emitted (a _window.json of 0 records), two were skipped.
    for gap in (1, 2, 3):
        assembler = _assembler(sources=1, size=2, slide=2)  # one pane per window
        assembler.add_cell(0, 0, 1, [("k", 1)], sealed=1)
        assembler.add_cell(0, gap + 1, 1, [("k", 1)], sealed=gap + 2)
        due = assembler.due(now=0.0)
        assert due == [one(0, "complete"), Closing(1, "complete", gap + 1, True), one(gap + 1, "complete")], gap


def test_empty_windows_after_a_quiet_stretch_still_close_by_latency() -> None:
    # Source 1 stalls; source 0 seals panes 1-5 without data, then sends data in pane 6: every empty window closes
    # L seconds after source 0 sealed it, so pane 6's window is not held back one latency period per empty window.
    assembler = _assembler(max_latency=2.0, size=2, slide=2)  # one pane per window
    assembler.add_cell(0, 0, 1, [("k", 1)], sealed=6)
    assert assembler.due(now=0.0) == []
    due = assembler.due(now=2.0)
    assert due == [one(0, "latency"), Closing(1, "latency", 6, True)]  # windows 1-5 hold nothing: one stretch
    assembler.emit(0, "latency")
    assembler.skip(1, 6)
    assembler.add_cell(0, 6, 1, [("k", 1)], sealed=7)
    assert assembler.due(now=2.5) == []
    assert assembler.due(now=4.5) == [one(6, "latency")]


def test_a_window_with_no_record_of_this_partition_is_closed_with_its_reason() -> None:
    # Source 0 sealed pane 1 empty; source 1's cell of pane 1 has not reached this partition when the latency bound
    # closes window 1 (it may have reached another partition, which builds the window with its records): this
    # partition closes it, with the reason, for the caller to report, and builds nothing.
    assembler = _assembler(max_latency=1.0, size=2, slide=2)
    assembler.add_cell(0, 0, 1, [("k", 1)], sealed=1)
    assembler.add_cell(1, 0, 1, [("k", 1)], sealed=1)
    assembler.add_seal(0, 2)
    assert assembler.due(now=0.0) == [one(0, "complete")]
    assert assembler.emit(0, "complete").records == 2
    assert assembler.due(now=0.5) == []
    assert assembler.due(now=1.0) == [Closing(1, "latency", 2, True)]
    assembler.skip(1, 2)
    assert assembler.next_window == 2


@pytest.mark.timeout(20)  # the old walk took one step per empty window: hours here
def test_a_record_far_in_the_future_costs_a_stretch_not_a_walk() -> None:
    spec = WindowSpec("time", 1_000_000, 1_000_000)  # one-second tumbling windows
    assembler = WindowAssembler(spec, 2, lists=False, merge=lambda key, a, b: a + b, max_latency=2.0)
    far = 1_700_000_000_000  # a millisecond timestamp read as seconds: ~5e4 years of empty windows
    assembler.add_cell(0, 1_700_000_000, 1, [("k", 1)], sealed=1_700_000_001)
    assembler.add_cell(0, far, 1, [("k", 1)], sealed=far + 1)
    assembler.add_cell(1, 1_700_000_000, 1, [("k", 1)], sealed=1_700_000_001)  # source 1 lags behind
    assert assembler.due(now=0.0) == [one(1_700_000_000, "complete")]
    assembler.emit(1_700_000_000, "complete")
    assert assembler.due(now=1.0) == []  # source 1 has not sealed past: wait for it or the latency bound
    assert assembler.due(now=2.0) == [Closing(1_700_000_001, "latency", far, True), one(far, "latency")]
    assembler.skip(1_700_000_001, far)
    assert assembler.emit(far, "latency").groups == {"k": 1}
    assembler.source_ended(0)
    assembler.source_ended(1)
    assert assembler.due(now=3.0) == [] and assembler.finished


def _naive_due(assembler: WindowAssembler, now: float) -> list[tuple[int, str]]:
    """Window by window, as the reasons define it (the reference the stretches must equal)."""
    walked, window = [], assembler.next_window
    while window is not None and (reason := assembler._reason(window, now)) is not None and len(walked) < 500:
        walked.append((window, reason))
        window += 1
    return walked


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 100_000), st.sampled_from([(2, 2), (4, 2), (3, 1), (6, 3)]), st.sampled_from([1.0, 0.5]))
def test_stretches_close_exactly_the_windows_a_walk_would(seed: int, shape: tuple[int, int], fidelity: float) -> None:
    rng = random.Random(seed)
    size, slide = shape
    assembler = _assembler(sources=2, size=size, slide=slide, fidelity=fidelity, max_latency=rng.choice([None, 1.0]))
    sealed = [0, 0]
    now = 0.0
    for _ in range(40):
        source = rng.randrange(2)
        step = rng.choice([0, 1, 1, 2, 5, 30])
        if step and rng.random() < 0.6:
            pane = sealed[source] + step - 1
            sealed[source] = pane + 1
            records = rng.choice([0, 1, 3])
            assembler.add_cell(source, pane, records, [("k", records)] if records else [], sealed=sealed[source])
        else:
            sealed[source] += step
            assembler.add_seal(source, sealed[source])
        if rng.random() < 0.05:
            assembler.add_lost(source, sealed[source], sealed[source] + 2)
            sealed[source] += 2
        if rng.random() < 0.05:
            assembler.source_ended(source, natural=sealed[source] if rng.random() < 0.5 else None)
            sealed[source] = FOREVER // 2
        now += rng.choice([0.0, 0.3, 1.5])
        due = assembler.due(now)
        expected = _naive_due(assembler, now)
        got = [(w, c.reason) for c in due for w in range(c.window, min(c.end, c.window + 500))]
        assert got[: len(expected)] == expected and len(got) >= len(expected)
        for closing in due:
            if closing.empty:
                assembler.skip(closing.window, closing.end)
            else:
                assembler.emit(closing.window, closing.reason)


def test_latency_bound_counts_from_the_first_source_that_closed_the_window() -> None:
    assembler = _assembler(max_latency=2.0, size=2, slide=2)
    assembler.add_cell(0, 0, 1, [("k", 1)], sealed=2)
    assert assembler.due(now=10.0) == []
    assert assembler.due(now=11.9) == []
    # Window 1 (pane 1, sealed by source 0 at the same time, no record) closes by latency with it.
    assert assembler.due(now=12.0) == [one(0, "latency"), Closing(1, "latency", 2, True)]


def test_lost_panes_and_gone_sources_are_reported_as_source_failure() -> None:
    assembler = _assembler()  # windows of two panes, sliding by one
    assembler.add_cell(0, 0, 1, [("k", 1)], sealed=1)
    assembler.add_lost(1, 0, 2)  # a resumed source could not re-read panes 0-1
    assembler.add_cell(0, 1, 1, [("k", 1)], sealed=2)
    assert assembler.due(now=0.0) == [one(0, "source failure")]
    result = assembler.emit(0, "source failure")
    assert result is not None and result.scoreboard["grid"] == ["DD", "LL"] and result.fidelity == 0.5
    gone = _assembler()
    gone.add_cell(0, 0, 1, [("k", 1)], sealed=2)
    assert gone.due(now=0.0) == []
    gone.source_gone(1)
    assert gone.due(now=0.0) == [one(0, "source failure")]


def test_a_lost_range_open_below_opens_no_window_before_the_data() -> None:
    """A retried map whose source cannot re-read and that has no checkpoint declares every pane up to its restart
    lost, from ``-FOREVER``. A reducer with no window out yet (restarted with no checkpoint, or fresh) took its next
    window from there and walked window by window up from pane -2**1100, each holding a lost pane: at full CPU it
    wrote no window again and never drained at the stop (``hop monitor`` whose reducer's worker died in its first
    seconds ended "did not drain" after 120 s). The windows start with the data's."""
    assembler = _assembler()  # windows of two panes, sliding by one
    assembler.add_cell(0, 100, 1, [("k", 1)], sealed=101)
    assembler.add_lost(1, -FOREVER, 102)
    assert assembler.next_window == 99, assembler.next_window  # (the first window holding pane 100)
    assembler.add_cell(0, 101, 1, [("k", 1)], sealed=103)
    assert assembler.due(now=0.0) == [one(99, "source failure"), one(100, "source failure")]
    assert assembler.emit(99, "source failure").scoreboard["grid"] == ["ED", "LL"]  # type: ignore[union-attr]
    alone = _assembler()  # no data at all: the windows of the range's last pane, not of pane -2**1100
    alone.add_lost(1, -FOREVER, 102)
    assert alone.next_window == 100, alone.next_window


def test_stopped_sources_flush_partial_windows_marked_stopped() -> None:
    assembler = _assembler(sources=1, size=4, slide=4)
    assembler.add_cell(0, 0, 3, [("k", 3)], sealed=1)
    assembler.source_ended(0, natural=0)  # pane 0 was still open when the job was stopped
    assert assembler.due(now=0.0) == [one(0, "stopped")]
    assembler.emit(0, "stopped")
    assert assembler.finished


def _stopped_at_pane_4(natural: int | None) -> WindowAssembler:
    """Windows of 4 panes sliding by 1 over two sources; source 0 sent data in panes 0-3 and had sealed 4 when
    stopped (``natural``; None: it ended on its own there), its open pane 4 flushed with data; source 1 sent data
    in panes 1 and 3, sealed pane 4 empty and ended there, at 5 (stopped there too, with a ``natural``)."""
    assembler = _assembler(sources=2, size=4, slide=1)
    for pane in range(4):
        assembler.add_cell(0, pane, 1, [("a", 1)], sealed=pane + 1)
    for pane in (1, 3):
        assembler.add_cell(1, pane, 1, [("b", 1)], sealed=pane + 1)
    assembler.add_seal(1, 5)
    if natural is not None:
        assembler.source_stopping(0, natural)
    assembler.add_cell(0, 4, 2, [("a", 2)], sealed=5)  # the open pane, flushed
    assembler.source_ended(0, natural)
    assembler.source_ended(1, None if natural is None else 5)
    return assembler


def test_a_window_cut_by_the_stop_shows_its_cut_panes_and_a_fidelity_below_one() -> None:
    """A stopped window's panes from a source's natural seal on were shown as data (flushed, partial) or sealed
    empty (never reached, yet the ended source's seal covers them): "stopped" with a fidelity of 100%. They are
    ``C``, cut by the stop, and not present; a window wholly before the stop is as it was."""
    assembler = _stopped_at_pane_4(natural=4)
    assert assembler.due(now=0.0) == [one(0, "complete"), *(one(w, "stopped") for w in range(1, 5))]
    results = [assembler.emit(w, "complete" if w == 0 else "stopped") for w in range(5)]
    assert [r.scoreboard["grid"] for r in results] == [
        ["DDDD", "EDED"],  # panes 0-3: before the stop
        ["DDDC", "DEDE"],  # panes 1-4: source 0 cut from 4 (pane 4 flushed), source 1 from 5
        ["DDCC", "EDEC"],
        ["DCCC", "DECC"],
        ["CCCC", "ECCC"],  # panes 4-7: source 0's flushed pane, then panes never reached
    ]
    assert [r.fidelity for r in results] == [1.0, 7 / 8, 5 / 8, 3 / 8, 1 / 8]
    assert [r.scoreboard["present"] for r in results] == [8, 7, 5, 3, 1]
    assert results[1].groups == {"a": 5, "b": 2}, "the flushed data is still in the window"
    assert assembler.finished
    exhausted = _stopped_at_pane_4(natural=None)  # ended on their own: panes past the end are sealed empty
    assert exhausted.due(now=0.0) == [one(w, "complete") for w in range(5)]
    results = [exhausted.emit(w, "complete") for w in range(5)]
    assert [r.scoreboard["grid"][1] for r in results] == ["EDED", "DEDE", "EDEE", "DEEE", "EEEE"]
    assert [r.scoreboard["grid"][0] for r in results] == ["DDDD", "DDDD", "DDDE", "DDEE", "DEEE"]
    assert all(r.fidelity == 1.0 for r in results)


def test_a_window_ending_where_the_stop_came_is_complete_and_whole() -> None:
    assembler = _assembler(sources=1, size=2, slide=1)  # windows of 2 panes sliding by 1
    assembler.add_cell(0, 0, 1, [("k", 1)], sealed=1)
    assembler.add_cell(0, 1, 1, [("k", 1)], sealed=2)
    assembler.source_ended(0, natural=2)  # stopped exactly at the end of window 0
    assert assembler.due(now=0.0) == [one(0, "complete"), one(1, "stopped")]
    whole, cut = assembler.emit(0, "complete"), assembler.emit(1, "stopped")
    assert whole.scoreboard["grid"] == ["DD"] and whole.fidelity == 1.0
    assert cut.scoreboard["grid"] == ["DC"] and cut.fidelity == 0.5


def test_a_lost_pane_or_a_gone_sources_past_a_stop_stays_lost() -> None:
    """The failure says more than the stop: a lost pane, or one a source gone for good never sent, is ``L``."""
    assembler = _assembler(sources=2, size=4, slide=1)
    assembler.add_cell(0, 0, 1, [("k", 1)], sealed=1)
    assembler.add_lost(0, 1, 3)
    assembler.source_ended(0, natural=2)
    assembler.add_cell(1, 0, 1, [("k", 1)], sealed=1)
    assembler.source_stopping(1, 1)
    assembler.source_gone(1)
    assert assembler.due(now=0.0)[0] == one(0, "source failure")
    result = assembler.emit(0, "source failure")
    assert result.scoreboard["grid"] == ["DLLC", "DLLL"] and result.fidelity == 2 / 8


def test_resent_cells_are_ignored() -> None:
    assembler = _assembler(sources=1, size=2, slide=2)
    assembler.add_cell(0, 0, 1, [("k", 1)], sealed=1)
    assert assembler.add_cell(0, 0, 1, [("k", 1)], sealed=1) == "duplicate"
    assembler.add_cell(0, 1, 1, [("k", 1)], sealed=2)
    assembler.emit(0, "complete")
    assert assembler.add_cell(0, 1, 1, [("k", 1)], sealed=2) == "duplicate"  # after eviction too


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(0, 10_000))
def test_differential_windows_equal_merged_windows(size: int, slide: int, sources: int, seed: int) -> None:
    """W1 = W0 - P0 + P2 with uncombine gives exactly the merge of the window's panes, keys vanishing included."""
    if slide > size:
        size, slide = slide, size
    rng = random.Random(seed)
    cells = [(s, p, Counter(rng.choices("abcd", k=rng.randint(0, 3)))) for p in range(12) for s in range(sources)]
    outputs = []
    for uncombine in (None, lambda key, current, old: current - old):
        assembler = _assembler(sources=sources, size=size, slide=slide, uncombine=uncombine)
        windows = {}
        for source, pane, counts in cells:
            assembler.add_cell(source, pane, sum(counts.values()), list(counts.items()), sealed=pane + 1)
            for closing in assembler.due(now=0.0):
                if closing.empty:
                    assembler.skip(closing.window, closing.end)
                    continue
                result = assembler.emit(closing.window, closing.reason)
                if result.records:
                    windows[closing.window] = result.groups
        outputs.append(windows)
    assert outputs[0] == outputs[1]
    for window, groups in outputs[0].items():
        expected: Counter[str] = Counter()
        for _source, pane, counts in cells:
            if pane in WindowSpec("records", size, slide).panes_of_window(window):
                expected.update(counts)
        assert groups == {k: v for k, v in expected.items() if v}


def test_assembler_state_round_trips_through_msgpack() -> None:
    assembler = _assembler(sources=2, size=4, slide=2)
    assembler.add_cell(0, 0, 1, [(("k", 1), 1)], sealed=1)
    assembler.add_cell(1, 0, 2, [(("k", 1), 2)], sealed=1)
    assembler.add_lost(1, 1, 2)
    state = msgpack.unpackb(msgpack.packb(assembler.to_state()), use_list=False, strict_map_key=False)
    restored = _assembler(sources=2, size=4, slide=2)
    restored.restore(state)

    def packed(a: WindowAssembler) -> bytes:
        return bytes(msgpack.packb(a.to_state()))

    assert packed(restored) == packed(assembler)
    assert restored.add_cell(0, 0, 1, [(("k", 1), 1)], sealed=1) == "duplicate"
    restored.add_cell(0, 1, 1, [(("k", 1), 4)], sealed=FOREVER)
    restored.source_ended(1)
    window, reason, _, _ = restored.due(now=0.0)[0]
    result = restored.emit(window, reason)
    assert result.groups == {("k", 1): 7} and reason == "source failure"


def test_tracker_forgets_old_windows_so_a_long_job_stays_flat(monkeypatch: pytest.MonkeyPatch) -> None:
    """The set of summarized windows grew by one per window for as long as a continuous job ran."""
    monkeypatch.setattr(tracker_module, "KEEP_DONE", 50)
    tracker = WindowTracker(1, 1, {"unit": "records"})
    board = {"sources": 1, "first_pane": 0, "panes": 1, "present": 1, "cells": 1, "grid": ["D"]}
    report = {"label": "w", "start": 0, "end": 10, "records": 1, "emitted_at": 1.0, "fidelity": 1.0}
    report.update(reason="complete", output_records=1, scoreboard=board)
    for number in range(1000):
        assert tracker.on_window_done(0, {**report, "window": number}) is not None
    assert len(tracker._done) == 50 and len(tracker.windows) <= tracker_module.KEEP_WINDOWS
    assert tracker.on_window_done(0, {**report, "window": 999}) is None  # a retry's second report of a recent one


def test_a_windows_rows_kept_are_its_largest_values_where_they_are_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A window's rows were cut in key order (each partition's first 1,000, the coordinator's first 2,000 of
    those): the web view's table, ranked by value, put a word at 7,429 on top while one at 14,729 was left out.
    Where every value is a number, the rows kept are the largest, in key order; else the first, as before."""
    from hop.stream.rows import largest_rows

    rows = [[f'"k{n:03d}"', str(value)] for n, value in enumerate([5, 90, 1, 70, "NaN", 88, -3])]
    assert largest_rows(rows, 3) == ([rows[1], rows[3], rows[5]], True)
    assert largest_rows(rows, 7) == (rows, False), "none cut"
    words = [[f'"w{n}"', f'"{n}"'] for n in range(5)]  # (strings of digits are no numbers)
    assert largest_rows(words, 2) == (words[:2], False)
    monkeypatch.setattr(tracker_module, "KEEP_ROWS", 3)
    tracker = WindowTracker(2, 1, {"unit": "records"})
    board = {"sources": 1, "first_pane": 0, "panes": 1, "present": 1, "cells": 1, "grid": ["D"]}
    report = {"window": 0, "label": "w0", "start": 0, "end": 10, "records": 9, "emitted_at": 1.0, "fidelity": 1.0}
    report.update(reason="complete", scoreboard=board)
    low = [['"a"', "1"], ['"b"', "2"], ['"c"', "3"]]
    high = [['"x"', "30"], ['"y"', "10"], ['"z"', "20"]]
    assert tracker.on_window_done(0, {**report, "output_records": 3, "rows": low}) is None
    summary = tracker.on_window_done(1, {**report, "output_records": 5, "rows": high, "rows_ranked": True})
    assert summary is not None and summary["rows"] == high and summary["rows_ranked"], summary


def test_tracker_says_which_window_folders_keep_windows_removes() -> None:
    """--keep-windows N: all but the newest N summarized windows' folders go, and one a reducer retry wrote again
    after its removal (it redoes the windows after its checkpoint) goes again; without it, none."""
    board = {"sources": 1, "first_pane": 0, "panes": 1, "present": 1, "cells": 1, "grid": ["D"]}
    report = {"start": 0, "end": 10, "records": 1, "emitted_at": 1.0, "fidelity": 1.0}
    report.update(reason="complete", output_records=1, scoreboard=board)
    tracker, keeping_all = WindowTracker(1, 1, {"unit": "records"}, keep_windows=3), WindowTracker(1, 1, {})
    for number in range(8):
        for each in (tracker, keeping_all):
            assert each.on_window_done(0, {**report, "window": number, "label": f"w{number}"}) is not None
    assert tracker.take_removals() == ["w0", "w1", "w2", "w3", "w4"] and tracker.take_removals() == []
    assert keeping_all.take_removals() == []
    assert tracker.on_window_done(0, {**report, "window": 3, "label": "w3"}) is None  # a retry wrote w3 again
    assert tracker.on_window_done(0, {**report, "window": 6, "label": "w6"}) is None  # kept: its folder stays
    assert tracker.take_removals() == ["w3"]


def test_tracker_merges_partitions_and_trims_what_all_checkpoints_cover() -> None:
    tracker = WindowTracker(2, 2, {"unit": "records"})
    board = {"sources": 2, "first_pane": 0, "panes": 1, "present": 2, "cells": 2}
    base = {"window": 0, "label": "w0", "start": 0, "end": 10, "records": 7, "emitted_at": 1.0, "fidelity": 1.0}
    first = {**base, "reason": "complete", "output_records": 2, "scoreboard": {**board, "grid": ["D", "D"]}}
    assert tracker.on_window_done(0, first) is None
    second = {**base, "reason": "latency", "output_records": 3, "scoreboard": {**board, "grid": ["D", "M"]}}
    summary = tracker.on_window_done(1, second)
    assert summary is not None
    assert summary["reason"] == "latency" and summary["output_records"] == 5 and summary["records"] == 7
    assert summary["scoreboard"]["grid"] == ["D", "M"] and summary["fidelity"] == 0.5
    assert tracker.since(0) == [summary]
    # Partition 0 built window 1; partition 1 held nothing of it and closed it in a stretch: summarized with both
    # reasons, the scoreboard from the partition that built it.
    assert tracker.on_window_done(0, {**first, "window": 1, "label": "w1"}) is None
    [skipped] = tracker.on_windows_skipped(1, 1, 5, "latency")
    assert skipped["window"] == 1 and skipped["reason"] == "latency" and skipped["output_records"] == 2
    assert [p["reason"] for p in skipped["partitions"]] == ["complete", "latency"]
    assert tracker.on_window_done(0, {**first, "window": 3, "label": "w3"})["window"] == 3  # type: ignore[index]
    assert tracker.on_windows_skipped(0, 5, 9, "complete") == []  # held no data in any partition: no summary
    assert tracker.on_checkpoint(0, [[0, 0, 9], [1, 0, 4]]) == []
    assert tracker.on_checkpoint(1, [[0, 0, 5], [1, 1, 0]]) == [(0, 0, 5), (1, 0, 4)]
    assert tracker.covered(1) == [0, 4]
    assert tracker.on_checkpoint(1, [[0, 0, 5], [1, 1, 0]]) == []  # nothing new


def test_tracker_merges_a_cell_cut_by_the_stop_as_not_present() -> None:
    """A pane cut by the stop (``C``) in one partition's scoreboard is cut in the window's, whatever another
    partition shows (data, sealed empty); one missing there stays missing."""
    tracker = WindowTracker(2, 1, {"unit": "records"})
    board = {"sources": 1, "first_pane": 0, "panes": 4, "present": 2, "cells": 4}
    base = {"window": 0, "label": "w0", "start": 0, "end": 4, "records": 5, "emitted_at": 1.0, "fidelity": 0.5}
    base.update(reason="stopped", output_records=1)
    assert tracker.on_window_done(0, {**base, "scoreboard": {**board, "grid": ["DECC"]}}) is None
    summary = tracker.on_window_done(1, {**base, "scoreboard": {**board, "grid": ["EDDM"]}})
    assert summary is not None and summary["reason"] == "stopped"
    assert summary["scoreboard"]["grid"] == ["DDCM"] and summary["scoreboard"]["present"] == 2
    assert summary["fidelity"] == 0.5


def test_a_time_window_holds_any_finite_stamp() -> None:
    """A stamp whose microseconds overflow a float (past ~1.8e302 s) still has a pane, below FOREVER (the
    ``sealed`` of an ended source: a pane past it would never be sealed, its records silently lost)."""
    spec = WindowSpec.parse("1ms")
    pane = spec.pane_of(1e305)
    assert abs(pane - 10**308) < 10**293 and pane < FOREVER  # (the float 1e305 is not exactly 10**305)
    assert spec.pane_of(1.7e18) >= 2**64 and spec.label(spec.pane_of(1.7e18)).startswith("E")


def test_a_jsonl_stream_line_of_whitespace_json_does_not_allow_is_a_bad_record_as_in_batch() -> None:
    """A line of JSON's white space is blank, no record; one of a no-break space, U+2028 or the control character
    0x1C (white space to Python's ``str.strip``) is not JSON: a bad record, as in a batch job's jsonl input. It was
    dropped as blank, uncounted."""
    from hop.stream.sources import SourceRecord
    from hop.stream.tasks import BLANK, StreamRecordError, _decoder

    decode = _decoder("jsonl")
    assert decode(SourceRecord(" \t\r", 4, 0.0)) is BLANK
    assert decode(SourceRecord('{"a": [1]}', 11, 0.0)) == {"a": (1,)}
    for text in ("\xa0", "\u2028", "\x1c"):
        with pytest.raises(StreamRecordError, match="is not valid JSON"):
            decode(SourceRecord(text, 2, 0.0))


def test_a_maps_checkpoints_are_ordered_by_their_numbers_past_the_width_of_their_names(tmp_path: Path) -> None:
    """Checkpoint names ``ATTEMPT-SEQ`` sort as text only while SEQ keeps its 8 digits (10^8 spills: about 11 days
    of 10 ms panes): past it the newest sorted first, was removed as stale, and a retry resumed from an older one."""
    numbers = [(0, 99_999_998), (0, 99_999_999), (0, 100_000_000), (0, 100_000_001), (1, 3)]
    for attempt, seq in numbers:
        (tmp_path / f"{attempt:04d}-{seq:08d}.msgpack").write_bytes(codec.packb({"seq": seq, "attempt": attempt}))
    assert [path.name for path in _map_checkpoints(tmp_path)] == [
        f"{attempt:04d}-{seq:08d}.msgpack" for attempt, seq in numbers
    ]
    assert _usable_map_checkpoint(tmp_path, None, replayable=False) == {"seq": 3, "attempt": 1}
    # Every reducer holds attempt 0's spills below 100,000,001 (its checkpoint 100,000,001 covers those < it).
    assert _usable_map_checkpoint(tmp_path, (0, 100_000_000), replayable=True) == {"seq": 100_000_001, "attempt": 0}


@pytest.mark.parametrize(
    ("fidelity", "shown"),
    [(1.0, "100%"), (0.999, "99.9%"), (0.9999995, "99.9999%"), (0.75, "75%"), (0.0004, "0.04%"), (0.0, "0%")],
)
def test_a_windows_fidelity_reads_100_percent_only_when_whole(fidelity: float, shown: str) -> None:
    """``hop run`` printed a window's fidelity with ``.0%``: 999 of 1,000 cells read "fidelity 100%", which a user
    takes for complete. A share short of whole (or above none) keeps the decimals that say so."""
    from hop.stream.runner import window_line

    window = {"label": "20231114T221421Z", "records": 178, "output_records": 1, "reason": "latency"}
    line = window_line({**window, "fidelity": fidelity})
    assert line == f"hop: window 20231114T221421Z: 178 records, 1 row, latency (fidelity {shown})", line


def test_the_help_names_a_continuous_options_value_as_its_text_speaks_of_it() -> None:
    """``--checkpoint-every CHECKPOINT_EVERY: checkpoint every N windows``, ``--sink SINK: ... to ENDPOINT`` and
    ``hop monitor --keep-windows KEEP_WINDOWS: ... the newest N windows``: the value is named as the text names it."""
    from hop.cli import _command_parser, build_parser

    parser = build_parser(True)
    run, monitor = (_command_parser(parser, [command]).format_help() for command in ("run", "monitor"))
    assert re.search(r"--checkpoint-every N\s+checkpoint every N windows", run), run
    assert re.search(r"--sink ENDPOINT\s+also publish", run), run
    assert re.search(r"--keep-windows N\s+keep the folders of the newest N", monitor), monitor


@pytest.mark.parametrize(
    "stamp", [4.1, 8.2, 16.4, 32.3, 0.3, 1_700_000_000.123, 86_399.1, -4.1, 4.000001, 1_100_000_000.001]
)
def test_a_stamp_on_a_window_boundary_opens_that_window(stamp: float) -> None:
    """A record stamped at a window's start, as written (``{"ts": 4.1}``), is in that window, not the one before:
    ``4.1 * 1e6`` is 4099999.9999999995, and flooring it put the record in the window ``[4.0, 4.1)``, whose end
    excludes 4.1."""
    spec = WindowSpec.parse("100ms") if stamp != 4.000001 else WindowSpec.parse("1us")
    if stamp == 1_100_000_000.001:
        spec = WindowSpec.parse("1ms")  # (its product is 1100000000000999.9)
    window = spec.pane_of(stamp)
    start, end = spec.bounds(window)
    assert start <= stamp < end, (stamp, start, end)
    assert spec.scale(stamp) == round(stamp * 1_000_000)


def test_a_stamp_between_microseconds_is_floored() -> None:
    """Only a stamp that is a whole microsecond as written moves up to it; others floor as before."""
    spec = WindowSpec.parse("100ms")
    assert spec.scale(4.0999999) == 4_099_999
    assert spec.scale(4.1000009) == 4_100_000
    assert spec.scale(-0.0000005) == -1
    assert spec.scale(1000) == 1_000_000_000 and isinstance(spec.scale(1000), int)


def test_an_arrival_time_stamp_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record of a job without time_field is stamped ``time.time()``: a stamp of today, whose product is a
    whole or a quarter microsecond, is floored as it is, never by the exact decimal path (2 us a record, where the
    fast one takes 0.15)."""
    import hop.stream.windows as windows_module

    def no_decimal(text: str) -> None:
        raise AssertionError(f"the decimal path for {text}")

    monkeypatch.setattr(windows_module.decimal, "Decimal", no_decimal)
    spec = WindowSpec.parse("1s")
    rng = random.Random(7)
    for _ in range(10_000):
        stamp = 1_795_929_647.0 + rng.random() * 1e6
        assert spec.scale(stamp) == math.floor(stamp * 1_000_000)
