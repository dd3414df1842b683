"""The map-side output buffer.

Map output goes into a hash map from key to the list of its values. When the buffer holds ``spill_records`` values or
``spill_keys`` distinct keys, it *spills*: it sorts only the distinct keys (not every record: in Python that is several
times cheaper), runs the combiner once per key, cuts the result into one sorted run per partition and
writes a spill file (``shuffle.spill``); without a combiner the runs are grouped, each key once with its list of
values (``shuffle.runs``). The spill callback then registers the file with the worker, which pushes it.

Contracts:

- ``combiner(key, values)`` yields pairs whose key equals ``key`` (it may yield zero, one or several); a combiner that
  changes keys would break the sort order, so it is rejected with an error naming the key.
- ``partitioner(key)`` returns an int in ``range(num_partitions)``; ``None`` means ``partition_hash(key) %
  num_partitions`` (``shuffle.keys``: ``hash``, but the same in every process for ``None`` and tuples holding it).
- Values of one key keep the order in which the map produced them.
- A key that is or holds a float NaN is refused as a spill is sorted (``shuffle.keys.refuse_nan_keys``), found per
  spill among its distinct keys (nothing per record).

When the combiner is a built-in aggregate (``hop.aggregates``), values are folded into one state per key as they
arrive (``lift`` then ``merge``, or an in-place ``+`` for sums): no list per key and no combiner call per key.

How many records a spill holds adapts to the combiner (HOP's rule, "MapReduce Online" section 3.1: when combining cuts
the volume to 1/k, wait for about k spills before sending). For a folding buffer, keeping k spills and merging them is
the same as folding k times longer into the same hash map, which costs nothing and whose memory is bounded by
``spill_keys``, not by records: so after each spill the next one holds ``spill_records`` times the spill's reduction k
(records in / keys out, at most ``MAX_SPILL_GROWTH``). Fewer, denser spills mean fewer pairs to encode, push and fold on
the reduce side. A folding buffer spills at ``spill_keys`` keys, or sooner when its states are large (``TopK(1000)``'s
heaps, ``CountDistinct``'s sets of values), once they take about ``spill_bytes`` (measured on sampled keys, not per
pair: see ``run_map``). Other buffers keep lists of values, whose memory grows with records: they spill every
``spill_records``, or sooner when the values are large, once they hold about ``spill_bytes`` of them (measured on
samples, not per pair: see ``run_map``), so that a map yielding megabyte values does not hold millions of them.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shuffle.keys import (
    MIXED,
    UNSORTED,
    first_unorderable_key,
    order_tag,
    partitions_of,
    plain_key,
    refuse_nan_keys,
    total_order_key,
)
from shuffle.pairs import checked_pairs
from shuffle.runs import UnencodableRecordError, iter_encoded_grouped_run, iter_encoded_run
from shuffle.spill import SpillFile, write_spill

Combiner = Callable[[Any, list[Any]], Iterable[tuple[Any, Any]]]
Partitioner = Callable[[Any], int]


DEFAULT_SPILL_RECORDS = 2_000_000
"""Values a map buffer holds before it spills (``hop run --spill-records``; a first spill holds fewer)."""
DEFAULT_SPILL_KEYS = 200_000
"""Distinct keys a map buffer holds before it spills."""
DEFAULT_SPILL_BYTES = 256 << 20
"""About how many bytes of values, or of keys and their states for a folding buffer, a buffer holds before it
spills."""
SIZE_CHECK_EVERY = 4096
"""Input records between two samples of the values' size, once a spill has grown past its first ones."""
MAX_SPILL_GROWTH = 16
"""A folding buffer's spill interval grows to at most this many times ``spill_records``."""
MAX_YIELD_EVERY = 4096
"""``run_map`` yields (for progress reports and control messages) every this many records at most..."""
MIN_YIELD_EVERY = 16
"""... and every this many at least, when records take long (a stride that took over 40 ms is cut to about 20 ms)."""
FIRST_SPILL_DIVISOR = 4
"""A map attempt's first spill holds ``spill_records`` divided by this (reducers start on the first spill)."""
KEY_SAMPLES = 16
"""Keys a folding buffer measures the states of, each standing for keys added about when it was (a few µs each)."""
DICT_SLOT_BYTES = 48
"""What a key costs a dict beyond its key and value objects (its entry and index at the dict's load)."""


def value_bytes(value: Any, depth: int = 2) -> int:
    """About the memory a value takes in a buffer's list: its own size, the sizes of (a sample of) its items down to
    ``depth`` levels, and the list's slot; and the containers its attributes hold (a ``CountDistinct`` state's set
    of its values, whose items it shares), as a reduce's fold map holds such states."""
    size = sys.getsizeof(value) + 8
    if depth and isinstance(value, dict) and value:  # (keys and values: an item's tuple is made only as it is read)
        pairs = list(itertools.islice(value.items(), 8))
        sampled = sum(value_bytes(key, depth - 1) + value_bytes(item, depth - 1) for key, item in pairs)
        size += sampled * len(value) // len(pairs)
    elif depth and isinstance(value, (list, tuple, set, frozenset)) and value:
        items = list(itertools.islice(value, 8))
        size += sum(value_bytes(item, depth - 1) for item in items) * len(value) // len(items)
    attributes = getattr(value, "__dict__", None)
    if attributes:
        size += sum(map(sys.getsizeof, attributes.values()))
    return size


def state_bytes(key: Any, state: Any) -> int:
    """About the memory one key and its state take in a hash map of states (a folding map buffer's, a reduce's fold
    map): the key, the state (:func:`value_bytes`) and the dict's slot."""
    return sys.getsizeof(key) + value_bytes(state) + DICT_SLOT_BYTES


class KeyCost:
    """A running estimate of one key's cost (:func:`state_bytes`) in a hash map of states, from keys sampled as the
    map grows (a reduce's fold map, a map-side merge, online summaries): a larger sample counts at once (the map may
    already hold too many keys), a smaller one by an eighth (one hot key's large state should not keep the budget
    down for long). No sample is taken below ``floor``, the least a key is taken to cost."""

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self.bytes = float(floor)
        """The estimate: bytes a key."""

    def add(self, sample: float) -> float:
        """Fold in one sampled key's cost; returns the new estimate."""
        sample = max(self.floor, sample)
        self.bytes = max(sample, self.bytes + (sample - self.bytes) / 8)
        return self.bytes


def folded_spill_records(spill_records: int, records_in: int, keys_out: int) -> int:
    """How many records a folding buffer's next spill holds, after one that folded ``records_in`` records into
    ``keys_out`` states: ``spill_records`` times that reduction, at most ``MAX_SPILL_GROWTH`` times."""
    return spill_records * min(MAX_SPILL_GROWTH, max(1, records_in // max(1, keys_out)))


class CombinerKeyError(ValueError):
    """A combiner yielded a key other than the one it was given, or something other than ``(key, value)`` pairs."""


def combined_values(
    combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]]], key: Any, values: list[Any]
) -> list[Any]:
    """The values ``combiner(key, values)`` yields, checked: it must yield ``(key, value)`` pairs with the key it
    was given (else :class:`CombinerKeyError`, naming the key)."""
    combined = []
    for item in combiner(key, values):  # (errors of the combiner's own code propagate as they are)
        try:
            out_key, out_value = item
        except (TypeError, ValueError) as error:
            raise CombinerKeyError(
                f"combine({key!r}, ...) must yield (key, value) pairs, and it yielded {item!r:.80} ({error}); "
                "yield key, value"
            ) from error
        if out_key is not key and out_key != key:  # ``is``: a NaN key is not equal to itself
            raise other_key_error(key, out_key)
        combined.append(out_value)
    return combined


def other_key_error(key: Any, out_key: Any, show_key: Callable[[Any], str] = repr) -> CombinerKeyError:
    """The error for a combiner that was given ``key`` and yielded ``out_key``, both shown by ``show_key``."""
    return CombinerKeyError(
        f"combine({show_key(key)}, ...) yielded key {show_key(out_key)}; a combiner must keep the key it was given"
    )


class AggregateValueError(TypeError):
    """A map yielded a value its aggregate combiner cannot take: ``None`` (a state is never None), or one its
    ``+``/``merge`` refuses (the task says which, from :attr:`MapOutputBuffer.failed_pair`)."""


def none_state_error(aggregate: Any, key: Any, value: Any) -> AggregateValueError:
    """The error for a key whose first value makes a ``None`` state (a fold takes ``None`` for "no state yet", so
    that value would be lost): raised by every loop that folds map output into an aggregate's states."""
    return AggregateValueError(
        f"{aggregate!r} got {value!r} as the first value of key {key!r:.80}, and an aggregate's state cannot be None "
        "(it would be lost); skip or replace None in the map (if value is not None: yield key, value)"
    )


class _NoneFirstValue(Exception):
    """Raised by :data:`NO_STATE` for a first value of None; the map loop turns it into :func:`none_state_error`,
    which names the aggregate and key."""


class _NoState:
    """The state of a key with no value yet in a sum's map loop: ``NO_STATE + value`` is ``value`` itself (so a
    first value keeps its type and identity, as if it were stored), and raises for None."""

    __slots__ = ()

    def __add__(self, value: Any) -> Any:
        if value is None:
            raise _NoneFirstValue
        return value

    def __repr__(self) -> str:
        return "NO_STATE"


NO_STATE = _NoState()


class UnhashableKeyError(TypeError):
    """A map yielded a key that cannot be a dict key (a list, a dict, a set)."""


def unhashable_key_error(key: Any) -> UnhashableKeyError:
    """The error for a map output ``key`` that cannot be hashed, without a traceback: the engine's frames where it
    was found say nothing to the user (the map had yielded it)."""
    part = _unhashable_part(key)
    what = f"a {type(key).__name__},"
    if part is not key:  # (said "('a', [1]) is a tuple, which cannot be a key")
        what = f"a tuple holding {part!r:.80}, a {type(part).__name__},"
    return UnhashableKeyError(
        f"map output key {key!r:.80} is {what} which cannot be a key (keys are grouped as dict keys): yield a tuple "
        "instead of a list, or a str or tuple form of a dict or set"
    ).with_traceback(None)


def _unhashable_part(key: Any) -> Any:
    """The first thing in ``key`` (a tuple's element, at any depth) that cannot be hashed, or ``key`` itself."""
    if isinstance(key, tuple):
        for element in key:
            if not hashable(element):
                return _unhashable_part(element)
    return key


def map_or_combine(error: UnencodableRecordError, mapped: Any) -> UnencodableRecordError:
    """``error`` said of the map or of the combiner, whichever yielded what could not be encoded. ``mapped``: the
    values the map yielded for the error's key, which a combiner ran over (``None`` when no combiner ran: the
    output is the map's). A key is the map's (a combiner keeps its keys: :func:`combined_values`), and so is a
    value among ``mapped`` (a combiner passing a value on yields that very object); another value is the
    combiner's. Both map buffers use it: this module's and the stream's (``hop.stream.panes``)."""
    if mapped is None or error.what == "key":
        return error.by("map")
    return error.by("map" if any(value is error.item for value in mapped) else "combine")


def unorderable_key_error(keys: Iterable[Any]) -> UnencodableRecordError:
    """The error for the first of ``keys`` that has no place in the keys' order (a ``datetime.date``, a
    ``frozenset``: :func:`~shuffle.keys.is_key`), said of the map (a combiner keeps its keys) and saying what to
    yield instead; ``ValueError`` if every one has a place. Every engine reports it with the record that yielded
    the key: a batch map found it as a spill sorted its keys (this module) and a stream map as a pane was sealed
    (``hop.stream.panes``), and both map their input again to find that record; a Spark map task checks each new
    key as it is yielded (``hop.spark_tasks``)."""
    key = first_unorderable_key(keys)
    return UnencodableRecordError("key", key, key, "map")


class PartitionError(ValueError):
    """A partitioner returned something other than a partition number."""


@dataclass
class BufferCounters:
    """What the buffer did, summed over its spills."""

    map_output_records: int = 0
    combine_input_records: int = 0
    combine_output_records: int = 0
    spill_files: int = 0
    spill_bytes: int = 0
    spill_seconds: float = 0.0
    spills: list[SpillFile] = field(default_factory=list)


class KeySampler:
    """How many keys a hash map of aggregate states (a folding map buffer's, a Spark map task's combine) may hold,
    at the size of its states: ``max_keys``, or fewer to keep them to about ``budget`` bytes. A ``TopK(1000)``
    state of 20 short strings costs 3.5 KB where a count costs 130 bytes: 200,000 of them took 730 MB above a
    map's start against a 256 MiB budget.

    No work per pair: at each check the middle one of the keys added since the check before (found by stepping
    back over them from the newest in C: a few ns a key) stands for them, and every sample is measured
    (:func:`state_bytes`; again each time, as states grow when their keys get more values): at most
    ``KEY_SAMPLES`` of them, every ``SIZE_CHECK_EVERY`` records at most. The mean cost is the samples' weighted by
    the keys each stands for. The keys a map first sees (a skewed input's hot ones, with large states) are sampled
    at checks 1, 2, 4, ... records apart, so they stand for few keys, where the latest pair's key (mostly a hot
    one) would count every key as hot, and the newest key (the rarest of those added since the check before)
    would count them all as rare. Past ``KEY_SAMPLES`` samples, the two neighbours of the most alike sizes
    (:func:`_merge_cost`) become one (the key standing for more)."""

    def __init__(self) -> None:
        self.samples: list[list[Any]] = []
        """``[key, keys it stands for, bytes]`` of the keys measured."""
        self.sampled_keys = 0
        """Keys the map held when the last sample was taken (the samples stand for that many)."""

    def reset(self) -> None:
        """The map was written out and started afresh."""
        self.samples, self.sampled_keys = [], 0

    def limit(self, groups: dict[Any, Any], max_keys: int, budget: int) -> int:
        """The keys ``groups`` may hold, from a sample taken now (call it at records 1, 2, 4, ... after
        :meth:`reset`, then every ``SIZE_CHECK_EVERY`` or so: no work per pair)."""
        samples = self.samples
        keys = len(groups)
        added = keys - self.sampled_keys
        if added > 0:
            middle = next(itertools.islice(reversed(groups), added // 2, None))
            samples.append([middle, added, 0])  # (measured below, with the others)
            self.sampled_keys = keys
            if len(samples) > KEY_SAMPLES:
                i = min(range(len(samples) - 1), key=lambda j: _merge_cost(samples[j], samples[j + 1]))
                first, second = samples[i], samples[i + 1]
                kept = first if first[1] >= second[1] else second
                samples[i : i + 2] = [[kept[0], first[1] + second[1], kept[2]]]
        if not samples:
            return max_keys
        for sample in samples:  # measured again: states grow as their keys get more values
            sample[2] = state_bytes(sample[0], groups[sample[0]])
        mean = sum(weight * size for _, weight, size in samples) / self.sampled_keys
        return min(max_keys, max(1, int(budget // mean)))


class MapOutputBuffer:
    """Collects one map attempt's output and spills it as sorted, combined, partitioned runs."""

    def __init__(
        self,
        spill_dir: str | Path,
        num_partitions: int,
        partitioner: Partitioner | None,
        combiner: Combiner | None = None,
        *,
        spill_records: int = DEFAULT_SPILL_RECORDS,
        spill_keys: int = DEFAULT_SPILL_KEYS,
        spill_bytes: int = DEFAULT_SPILL_BYTES,
        first_spill_records: int | None = None,
        on_spill: Callable[[SpillFile], None] | None = None,
        name: str = "spill",
        sort_runs: bool = True,
    ) -> None:
        self.spill_dir = Path(spill_dir)
        self.num_partitions = num_partitions
        self.partitioner = partitioner
        self.combiner = combiner
        self.spill_records = spill_records
        self.next_spill_records = spill_records if first_spill_records is None else first_spill_records
        """Records the next spill holds: ``first_spill_records`` at first (a smaller first spill gets data to
        reducers early; a retry resuming after kept spills passes the interval its first attempt had reached),
        then as the module docstring says."""
        self.spill_keys = spill_keys
        self.spill_bytes = spill_bytes
        self.on_spill = on_spill
        self.name = name
        self.sort_runs = sort_runs or not (hasattr(combiner, "lift") and hasattr(combiner, "merge"))
        """False only with an aggregate combiner whose reducer folds runs unordered (``shuffle.fold``)."""
        self.counters = BufferCounters()
        self._groups: dict[Any, Any] = {}
        self._pending = 0
        self.records_consumed = 0
        """Input records whose output is in spills already written (set by ``run_map`` before each spill)."""
        # A combiner with lift/merge (hop.aggregates.Aggregate) is folded in as records arrive.
        self._folding = hasattr(combiner, "lift") and hasattr(combiner, "merge")
        self._accumulating = self._folding and bool(getattr(combiner, "accumulates", False))
        """Whether the folded values are the aggregate's accumulators (turned into states at the spill)."""
        self._sampler = KeySampler()
        """The states a folding buffer measures (:class:`KeySampler`)."""
        self.failed_pair: tuple[Any, Any] | None = None
        """The (key, value) the map loop was inserting when it raised."""
        self.failed_output: Any = None
        """What the map call returned whose pairs the loop was reading when it raised (a generator is suspended at
        the ``yield`` that gave a non-pair: ``hop.usertrace.not_pairs`` shows that line)."""

    @property
    def folding(self) -> bool:
        """True when the combiner is an aggregate folded in as pairs arrive (its ``+``/``merge`` run in the loop)."""
        return self._folding

    def collect(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Add the pairs of one map call, spilling when the buffer is full (one record through ``run_map``)."""
        for _ in self.run_map([(None, None)], lambda _key, _value: pairs):
            pass

    def run_map(
        self, records: Iterable[tuple[Any, Any]], mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]] | None]
    ) -> Iterator[int]:
        """Call ``mapper`` on every record and collect its output: the engine's hot loop.

        A generator: every ``MAX_YIELD_EVERY`` input records (fewer, down to ``MIN_YIELD_EVERY``, while records are
        slow) it yields the number consumed so far, so the caller can report progress without a call per record. If
        ``mapper`` raises, the exception propagates with the offending record in ``self.current_record``.

        A buffer keeping lists of values also samples the size of the latest value (``value_bytes``) 1, 2, 4, ...
        records after each spill (and after the call began), then every ``SIZE_CHECK_EVERY``, and lowers the
        spill's record limit to about ``spill_bytes`` of values at the sizes seen: no work per pair, a limit found
        within a record or two when every value is large, and spills cut at the same records by a retry that
        resumes after a spill (the samples depend only on the records since it). A folding buffer (but a sum's,
        whose states are numbers) measures its states at the same records and lowers its key limit to about
        ``spill_bytes`` of keys and states (:class:`KeySampler`).
        """
        groups = self._groups
        spill_records = self.next_spill_records
        spill_keys = self.spill_keys
        spill_bytes = self.spill_bytes
        pending = self._pending
        spill_at = min(spill_records, pending + spill_keys - len(groups))
        """Where ``pending`` may have reached a limit: ``spill_records`` pairs, or ``spill_keys`` keys if every pair
        from here on is a new key (recomputed wherever it is reached or a limit changes)."""
        consumed = 0
        self.current_record: tuple[Any, Any] | None = None
        # The stride starts small and doubles while records are fast: yields at 16, 32, ..., 4,096 records, then
        # every 4,096 (a map whose records take a millisecond reports within 16 of them, not 4 s later).
        check_every = MIN_YIELD_EVERY // 2
        next_yield = MIN_YIELD_EVERY
        yielded_at = time.monotonic()
        yielded = -1
        never = 1 << 62
        # The four ways to insert a pair, chosen once per task rather than per record.
        inline_sum = self._folding and bool(getattr(self.combiner, "inline_sum", False))
        sizing = not self._folding  # a folding buffer holds one state per key...
        measuring = self._folding and not inline_sum  # ... bounded by spill_keys and, when it may be large, by bytes
        size_step = 1
        next_size = 1 if sizing or measuring else never
        value_size: float | None = None
        """The mean size of a value, over the samples since the spill (or call) began."""
        samples = 0
        next_check = min(next_yield, next_size)
        accumulating = self._accumulating
        lift: Any = self.combiner.lift if self._folding and not accumulating else None  # type: ignore[union-attr]
        merge: Any = self.combiner.merge if self._folding else None  # type: ignore[union-attr]
        start: Any = self.combiner.start if accumulating else None  # type: ignore[union-attr]
        add: Any = self.combiner.add if accumulating else None  # type: ignore[union-attr]
        record_key = record_value = key = value = output = None
        get = groups.get
        no_state = NO_STATE  # (a local: read per pair)
        check_pairs = True
        """Whether the next record's output is read through ``checked_pairs``: the first record's, then one every
        ``check_every`` (``shuffle.pairs``: a str or dict unpacked as a pair gives wrong output silently)."""
        try:
            for record_key, record_value in records:
                output = mapper(record_key, record_value)
                if check_pairs:
                    check_pairs = False
                    if output is not None:
                        output = checked_pairs(output)
                # Pairs are counted per call in ``added``, which stays small: an int up to 256 is a cached object,
                # while adding to the task-wide ``pending`` per pair allocated a new int every time (a few % of a
                # word count's map CPU).
                added = 0
                if output is None:
                    pass
                elif inline_sum:
                    # One lookup and one add a pair, as in a plain ``d[k] = d.get(k, 0) + v`` (a test for a new key
                    # measured 0-4% of a word count's map loop), but a key's first value is added to NO_STATE,
                    # which gives the value itself back (0 would turn a lone True into 1 and -0.0 into 0.0) and
                    # refuses None (a None state would be taken for "no state yet" and vanish); ``old + None``
                    # raises and is named below.
                    for key, value in output:
                        groups[key] = get(key, no_state) + value
                        added += 1
                elif start is not None:
                    # The aggregate's own accumulator, updated in place (Aggregate.accumulates): no state is built
                    # again per value. Turned into states at the spill.
                    for key, value in output:
                        accumulator = get(key)
                        if accumulator is not None:
                            add(accumulator, value)
                        else:
                            groups[key] = start(value)
                        added += 1
                elif lift is not None:
                    for key, value in output:
                        old = get(key)
                        if old is not None:
                            groups[key] = merge(old, lift(value))
                        else:
                            state = lift(value)
                            if state is None:
                                raise none_state_error(self.combiner, key, value)
                            groups[key] = state
                        added += 1
                else:
                    for key, value in output:
                        values = get(key)
                        if values is None:
                            groups[key] = [value]
                        else:
                            values.append(value)
                        added += 1
                pending += added
                consumed += 1
                # One comparison a record: a record adds at most as many keys as pairs, so neither limit can be
                # reached before ``pending`` reaches ``spill_at``, where both are checked exactly (the spills are
                # cut at the same records as by checking both every record).
                if pending >= spill_at:
                    if pending < spill_records and len(groups) < spill_keys:
                        spill_at = min(spill_records, pending + spill_keys - len(groups))
                    else:
                        self._pending = pending
                        self.current_record = (record_key, record_value)
                        self.records_consumed = consumed  # the spill covers exactly these records (checkpoints)
                        # (freed as the spill is written: not held while its callback merges spills)
                        del groups, get
                        self.spill()
                        groups = self._groups  # spill() swapped in a fresh map
                        get = groups.get
                        pending = 0
                        spill_records = self.next_spill_records
                        spill_keys = self.spill_keys
                        spill_at = min(spill_records, spill_keys)
                        if sizing or measuring:
                            size_step, next_size, value_size, samples = 1, consumed + 1, None, 0
                            next_check = min(next_yield, next_size)
                if consumed >= next_check:
                    if consumed >= next_size:
                        if measuring:
                            spill_keys = self._sampler.limit(groups, self.spill_keys, spill_bytes)
                        elif pending:
                            # (``value`` is the latest value collected, of this record or an earlier one)
                            samples += 1
                            size = value_bytes(value)
                            value_size = size if value_size is None else value_size + (size - value_size) / samples
                            spill_records = min(self.next_spill_records, max(1, int(spill_bytes // value_size)))
                        spill_at = min(spill_records, pending + spill_keys - len(groups))
                        size_step = min(2 * size_step, SIZE_CHECK_EVERY)
                        next_size = consumed + size_step
                    if consumed >= next_yield:
                        # Yield every 20 ms or so: every 4,096 records of a fast map, fewer of a slow one, whose
                        # progress reports, flow control and split requests (read at yields) would otherwise wait
                        # seconds. (Spills do not depend on it; the pair check runs at least as often.)
                        now = time.monotonic()
                        took, yielded_at = now - yielded_at, now
                        if took > 0.04:
                            check_every = max(MIN_YIELD_EVERY, int(check_every * 0.02 / took))
                        elif took < 0.01:
                            check_every = min(MAX_YIELD_EVERY, check_every * 2)
                        next_yield += check_every
                        check_pairs = True
                        self._pending = pending
                        self.current_record = (record_key, record_value)
                        yielded = consumed
                        yield consumed
                    next_check = min(next_yield, next_size)
        except BaseException as error:  # (sys.exit() in the map, an asyncio.CancelledError: any the map raises)
            if isinstance(error, GeneratorExit):
                raise  # (this loop closed by its task, suspended at a yield: no record failed)
            # Name the record the map was working on; the task turns this into file and offset.
            self.current_record = (record_key, record_value) if consumed or record_key is not None else None
            self.failed_pair = (key, value)  # for a report of what an aggregate could not fold
            self.failed_output = output
            if isinstance(error, _NoneFirstValue):
                raise none_state_error(self.combiner, key, value) from None
            if isinstance(error, TypeError) and not hashable(key):
                raise unhashable_key_error(key) from None  # the dict's own TypeError adds only engine frames
            raise
        self._pending = pending
        self.records_consumed = consumed
        if consumed != yielded:
            yield consumed  # (unless the last record's stride yield said it already: progress counts only up)

    def _whose(self, error: UnencodableRecordError, groups: dict[Any, Any]) -> UnencodableRecordError:
        """``error`` said of the map or of the combiner, whichever yielded what could not be encoded: a key is the
        map's (a combiner keeps its keys: ``combined_values``), and so is a value among those the map yielded for
        its key (a combiner passing a value on yields that very object); another value is the combiner's."""
        if self.combiner is None or self._folding:
            return map_or_combine(error, None)
        return map_or_combine(error, groups.get(error.key, ()) if hashable(error.key) else ())

    def _sortable(self, groups: dict[Any, Any]) -> tuple[dict[Any, Any], list[Any], str]:
        """``groups`` with keys that can be sorted, a list of those keys and their :func:`~shuffle.keys.order_tag`;
        or :func:`unorderable_key_error` raised.

        A key of a subclass of a key type (an ``IntEnum`` member...) has no place in the order: the groups are
        made again with every key as the plain value the shuffle sends for it (:func:`~shuffle.keys.plain_key`),
        which combine and reduce then receive. Only then: a spill of keys of the key types costs nothing more."""
        keys = list(groups)
        try:
            return groups, keys, order_tag(keys)
        except TypeError:
            pass
        try:
            plain = {plain_key(key): values for key, values in groups.items()}
        except TypeError:
            # Said of the map, so that the task finds and names the record that yielded the key, as it does for a
            # value the shuffle cannot encode (the sort's ``TypeError`` named only the task, under the engine's
            # traceback).
            raise unorderable_key_error(groups) from None
        keys = list(plain)
        return plain, keys, order_tag(keys)

    @property
    def pending_records(self) -> int:
        return self._pending

    def _partitions_of(self, keys: list[Any]) -> list[int]:
        """The partition of every key, computed in bulk and checked once."""
        partitions = self.num_partitions
        if partitions == 1:
            return [0] * len(keys)
        if self.partitioner is None:
            return partitions_of(keys, partitions)
        result = list(map(self.partitioner, keys))
        if result and (set(map(type, result)) != {int} or min(result) < 0 or max(result) >= partitions):
            key, bad = next(
                (k, p) for k, p in zip(keys, result, strict=True) if type(p) is not int or not 0 <= p < partitions
            )
            raise PartitionError(f"partition({key!r}) returned {bad!r}; expected an int in range({partitions})")
        return result

    def _by_partition(self, keys: list[Any]) -> list[list[Any]]:
        """``keys`` split by partition, each list in the order given: one pass, appending each key to its
        partition's list through a bound ``append`` (a comprehension per partition passed over every key once per
        partition: 44 ms against 12 ms for 100,000 keys in 4 partitions; 0.31 s of a no-combiner map's 1.10 s of
        spills on 40 MB)."""
        if self.num_partitions == 1:
            return [keys]
        buckets: list[list[Any]] = [[] for _ in range(self.num_partitions)]
        appends = [bucket.append for bucket in buckets]
        for key, partition in zip(keys, self._partitions_of(keys), strict=True):
            appends[partition](key)
        return buckets

    def spill(self, force: bool = False) -> SpillFile | None:
        """Write what the buffer holds as one spill file; returns ``None`` if the buffer is empty, unless ``force``
        (an online map marks the end of every input chunk with a spill, empty or not). ``on_spill`` is called once
        the keys and values written are let go: it may merge held spills (``shuffle.flow``), which would otherwise
        hold its own states beside the buffer's."""
        spill = self._write_spill(force)
        if spill is not None and self.on_spill is not None:
            self.on_spill(spill)
        return spill

    def _write_spill(self, force: bool) -> SpillFile | None:
        if not self._groups and not force:
            return None
        started = time.perf_counter()
        groups, self._groups = self._groups, {}
        self._sampler.reset()
        counters = self.counters
        counters_pending = self._pending
        counters.map_output_records += counters_pending
        self._pending = 0
        partitions = self.num_partitions
        out_keys: list[list[Any]] = [[] for _ in range(partitions)]
        out_values: list[list[Any]] = [[] for _ in range(partitions)]
        combiner = self.combiner
        combine_in = combine_out = 0
        folding = self._folding
        if folding:
            # One state per key already: bucket keys by partition, sort each bucket (unless the reducer folds
            # runs into a hash map and does not need order), look the states up.
            if self.sort_runs:
                groups, keys, tag = self._sortable(groups)
                order = total_order_key if tag == MIXED else None
                refuse_nan_keys(keys, tag)
            else:
                keys = list(groups)
                tag = UNSORTED
                refuse_nan_keys(keys)
            buckets = self._by_partition(keys)
            state_of = combiner.state_of if self._accumulating else None  # type: ignore[union-attr]
            for partition, bucket in enumerate(buckets):
                if self.sort_runs:
                    bucket.sort(key=order)
                out_keys[partition] = bucket
                values = map(groups.__getitem__, bucket)
                # (an accumulating aggregate's accumulators made states in the same pass, not a second list)
                out_values[partition] = list(map(state_of, values) if state_of is not None else values)
            combine_in, combine_out = counters_pending, len(keys)
            self.next_spill_records = folded_spill_records(self.spill_records, combine_in, combine_out)
            sorted_keys: list[Any] = []
        else:
            groups, sorted_keys, tag = self._sortable(groups)
            sorted_keys.sort(key=total_order_key if tag == MIXED else None)
            refuse_nan_keys(sorted_keys, tag)
            self.next_spill_records = self.spill_records
        if combiner is None:  # (never a folding buffer: its aggregate is its combiner)
            # No combiner: each key's list of values goes out as it is, in a grouped run (shuffle.runs): the key
            # once per spill instead of once per pair.
            out_keys = self._by_partition(sorted_keys)
            out_values = [list(map(groups.__getitem__, bucket)) for bucket in out_keys]
        else:
            for key, partition in zip(sorted_keys, self._partitions_of(sorted_keys), strict=True):
                values = groups[key]
                keys_p = out_keys[partition]
                values_p = out_values[partition]
                combine_in += len(values)
                combined = combined_values(combiner, key, values)
                keys_p += [key] * len(combined)
                values_p += combined
                combine_out += len(combined)
        if combiner is not None:
            counters.combine_input_records += combine_in
            counters.combine_output_records += combine_out
        # Each run is packed a block at a time as it is written: a spill of large values is never encoded whole
        # beside them (it held them about four times over).
        runs: list[tuple[Iterable[bytes], int, str]]
        if combiner is None:
            runs = [
                (iter_encoded_grouped_run(keys_p, lists_p), sum(map(len, lists_p)), tag)
                for keys_p, lists_p in zip(out_keys, out_values, strict=True)
            ]
        else:
            runs = [
                (iter_encoded_run(keys_p, values_p), len(keys_p), tag)
                for keys_p, values_p in zip(out_keys, out_values, strict=True)
            ]
        path = self.spill_dir / f"{self.name}-{counters.spill_files:05d}.spill"
        try:
            spill = write_spill(path, runs)  # SpillWriteError names the file and the remedy
        except UnencodableRecordError as error:
            raise self._whose(error, groups) from None
        counters.spill_files += 1
        counters.spill_bytes += spill.size
        counters.spills.append(spill)
        counters.spill_seconds += time.perf_counter() - started
        return spill


def _merge_cost(first: list[Any], second: list[Any]) -> float:
    """What making two neighbouring key samples ``[key, keys it stands for, bytes]`` one loses: the spread it adds
    to the sizes the keys are counted at (Ward's criterion), so that the few hot keys of a skewed input, sampled
    first and large, are not made one with the many small keys after them."""
    return first[1] * second[1] / (first[1] + second[1]) * (first[2] - second[2]) ** 2


def hashable(key: Any) -> bool:
    """Whether ``key`` can be a dict key."""
    try:
        hash(key)
    except TypeError:
        return False
    return True
