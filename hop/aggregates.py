"""Built-in aggregates: combiners and reducers the engine understands, so it can run them fast.

An aggregate folds the values of a key into a *state*: ``lift(value)`` makes the state of one value and
``merge(a, b)`` joins two states (associative and commutative); ``finish(state)`` is the final value. Declared as a
job's ``combine`` or ``reduce``::

    class WordCount(hop.Job):
        def map(self, offset, line):
            for word in line.split():
                yield word, 1

        combine = reduce = Sum()

the engine folds map output into a hash map of states as records arrive (no list per key, no call per key at spill
time), ships states through the shuffle, and merges them on the reduce side as map attempts commit, so little is left
to do when the last map ends. An aggregate instance is also an ordinary callable ``(key, values) -> [(key, value)]``:
as a combiner it yields the merged state, as a reducer the finished value.

Rules: when ``reduce`` is an aggregate and ``combine`` is not set, the same aggregate is used as the combiner (it is
always valid for one). When ``combine`` is an aggregate and ``reduce`` is user code, the reducer receives states
(for ``Sum``, ``Count``, ``Min`` and ``Max`` the state is a plain number).

A state is never ``None`` (the fold loops take ``None`` for "no state yet"): a map yielding ``None`` to ``Sum``,
``Min`` or ``Max``, whose state is the value itself, fails with an error naming the aggregate, the key and the input
record, as does a value the aggregate's ``+`` or ``merge`` refuses. Custom aggregates: ``lift`` must not return
``None``.

A map folds a key's values one by one. For a state that costs O(size) to build again per value (``CountDistinct``'s
tuple of the distinct values: O(n²) per key that way; ``TopK``'s sort of k + 1 values), an aggregate sets
``accumulates`` and gives ``start``, ``add`` (in place), ``state_of`` and ``accumulator_of``: the map buffer, stream
panes and Spark's map-side combine then keep an accumulator per key (a dict of the distinct values, a heap of the k
largest), private to them, and turn it into a state where the state leaves them.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Iterable, Iterator
from functools import reduce as fold
from typing import Any


class Aggregate:
    """Base class: subclasses set ``lift``, ``merge`` and, if the state is not the value, ``finish``."""

    name = "aggregate"
    inline_sum = False
    """True when ``lift`` is the identity and ``merge`` is ``+``: the map loop then adds in place."""
    accumulates = False
    """True when the map loop should fold a key's values into an accumulator (:meth:`start`, :meth:`add`,
    :meth:`state_of`) rather than by ``merge(state, lift(value))``: for a state that is costly to build again for
    every value (``CountDistinct``'s tuple of n values cost O(n) per value, O(n²) per key)."""

    def lift(self, value: Any) -> Any:
        return value

    merge: Callable[[Any, Any], Any] = staticmethod(operator.add)

    def finish(self, state: Any) -> Any:
        return state

    def start(self, value: Any) -> Any:
        """A key's accumulator, from its first value: the engine's own, never shared, updated by :meth:`add` in place
        and turned into a state by :meth:`state_of` (here a one-item list holding the state)."""
        return [self.lift(value)]

    def add(self, accumulator: Any, value: Any) -> None:
        """Fold ``value`` into ``accumulator`` in place."""
        accumulator[0] = self.merge(accumulator[0], self.lift(value))

    def state_of(self, accumulator: Any) -> Any:
        """The state of the values added to ``accumulator`` (as ``merge`` of their lifts would give)."""
        return accumulator[0]

    def accumulator_of(self, state: Any) -> Any:
        """An accumulator holding ``state`` (a checkpoint's, read back), to :meth:`add` more values to."""
        return [state]

    @property
    def finish_is_identity(self) -> bool:
        """True when ``finish`` is the base class's: the state is the final value (reducers skip the calls)."""
        return type(self).finish is Aggregate.finish

    def fold_values(self, values: Iterable[Any]) -> Any:
        """Merge an iterable of *states* into one."""
        return fold(self.merge, values)

    def __call__(self, key: Any, values: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        """As a combiner: merge the states of a key (used when the engine does not take the fast path)."""
        yield key, self.fold_values(values)

    def as_reducer(self) -> Callable[[Any, Iterable[Any]], Iterator[tuple[Any, Any]]]:
        def reduce(key: Any, values: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
            yield key, self.finish(self.fold_values(values))

        return reduce

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Sum(Aggregate):
    """The sum of the values with ``+``. Values are added in no fixed order (as maps and spills arrive), so ``+``
    must not depend on it: numbers, not strings or lists.

    ``nonnegative=True`` declares that no value is below 0 (counts, bytes, page views). The sum can then only grow
    as more input is read, so an online snapshot's interval starts no lower than the sum so far, as a ``Count``'s
    does (docs/online.md); without it nothing tells the engine that the unread input cannot pull the sum down, and
    an early interval may reach below what was already summed, below 0 even. The declaration changes nothing
    else: the result is the same sum. A snapshot that finds it false (a key's values in some input chunk adding up
    to less than 0) fails, naming the key, rather than give intervals that rest on it."""

    name = "sum"
    inline_sum = True

    def __init__(self, nonnegative: bool = False) -> None:
        self.nonnegative = bool(nonnegative)

    def __repr__(self) -> str:
        return "Sum(nonnegative=True)" if self.nonnegative else "Sum()"


class Count(Aggregate):
    """How many values there were (the values themselves are ignored)."""

    name = "count"

    def lift(self, value: Any) -> int:
        return 1


class Min(Aggregate):
    """The smallest value."""

    name = "min"
    merge = staticmethod(min)


class Max(Aggregate):
    """The largest value."""

    name = "max"
    merge = staticmethod(max)


class Mean(Aggregate):
    """The arithmetic mean; the state is ``(count, sum)``.

    ``nonnegative=True`` declares that no value is below 0, as :class:`Sum`'s does: an online snapshot's interval
    then starts no lower than 0 (the unread values may pull the mean down as far as 0, no further). A snapshot
    that finds it false (a key's values in some input chunk adding up to less than 0) fails, naming the key."""

    name = "mean"

    def __init__(self, nonnegative: bool = False) -> None:
        self.nonnegative = bool(nonnegative)

    def __repr__(self) -> str:
        return "Mean(nonnegative=True)" if self.nonnegative else "Mean()"

    def lift(self, value: Any) -> tuple[int, Any]:
        return (1, value)

    @staticmethod
    def merge(a: tuple[int, Any], b: tuple[int, Any]) -> tuple[int, Any]:
        return (a[0] + b[0], a[1] + b[1])

    def finish(self, state: tuple[int, Any]) -> float:
        return state[1] / state[0]


class TopK(Aggregate):
    """The ``k`` largest values, largest first (values must be mutually comparable: numbers, or ``(score, item)``
    pairs). The state is a tuple of at most ``k`` values in descending order."""

    name = "topk"

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError(f"TopK needs k >= 1, got {k}")
        self.k = k

    def lift(self, value: Any) -> tuple[Any, ...]:
        return (value,)

    def merge(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(sorted((*a, *b), reverse=True)[: self.k])

    accumulates = True

    def start(self, value: Any) -> list[Any]:
        """A min-heap of at most ``k`` values: one value costs O(log k), where a merge sorted k + 1 of them."""
        return [value]

    def add(self, accumulator: list[Any], value: Any) -> None:
        if len(accumulator) < self.k:
            heapq.heappush(accumulator, value)
        elif value > accumulator[0]:
            heapq.heapreplace(accumulator, value)

    @staticmethod
    def state_of(accumulator: list[Any]) -> tuple[Any, ...]:
        return tuple(sorted(accumulator, reverse=True))

    @staticmethod
    def accumulator_of(state: tuple[Any, ...]) -> list[Any]:
        heap = list(state)
        heapq.heapify(heap)
        return heap

    def finish(self, state: tuple[Any, ...]) -> list[Any]:
        return list(state)

    def __repr__(self) -> str:
        return f"TopK({self.k})"


class DistinctValues(tuple):
    """A :class:`CountDistinct` state made by ``merge``: a tuple of distinct values (what the shuffle packs and a
    user's reduce gets) that carries the set of them on to the next merge. A key's values are folded in one by one
    (``merge(state, (value,))``), and building the set of a state of n values again in each merge made a key with
    n distinct values cost n²/2 set insertions (10 keys of 400 KB of values took 3.4 s, twice that 18.8 s).

    The set is handed on, never shared: the state a merge grew from gives its set up to the result, so a later
    merge of that older state builds a set of its own values (any state may be merged again: a snapshot's, a
    retried map's) and never takes values only the newer state holds for its own."""


_NAN = math.nan
"""The one NaN a :class:`CountDistinct` state holds: NaN equals nothing, so a set keeps NaN objects apart by
identity, and a state decoded from the shuffle holds new objects: NaNs counted by identity counted as many as there
were spills and maps carrying them (1, 41 or 3,000 for 3,000 ``math.nan`` values, by ``--spill-records``)."""


def _one_nan(values: tuple[Any, ...]) -> tuple[Any, ...] | list[Any]:
    """``values`` with every float NaN the same object (:data:`_NAN`); ``values`` itself when it holds none."""
    if any(type(value) is float and value != value for value in values):
        return [_NAN if type(value) is float and value != value else value for value in values]
    return values


class CountDistinct(Aggregate):
    """How many distinct values there were (exact). The state is a tuple of the distinct values seen. Float NaNs
    count as one value (Python's ``set`` tells NaN objects apart by identity, which the shuffle does not keep)."""

    name = "count_distinct"
    accumulates = True

    def lift(self, value: Any) -> tuple[Any, ...]:
        return (value,)

    def start(self, value: Any) -> dict[Any, None]:
        """The distinct values in the order first seen, as a dict's keys (a value added again changes nothing)."""
        return {value: None}

    @staticmethod
    def add(accumulator: dict[Any, None], value: Any) -> None:
        accumulator[value] = None  # (NaNs are made one in state_of: once per distinct value, not per value)

    @staticmethod
    def state_of(accumulator: dict[Any, None]) -> DistinctValues:
        values = tuple(accumulator)
        one_nan = _one_nan(values)
        return DistinctValues(values if one_nan is values else dict.fromkeys(one_nan))

    @staticmethod
    def accumulator_of(state: tuple[Any, ...]) -> dict[Any, None]:
        return dict.fromkeys(_one_nan(state))

    @staticmethod
    def merge(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(a) < len(b):
            a, b = b, a
        seen: set[Any] | None = a.__dict__.pop("seen", None) if type(a) is DistinctValues else None
        if seen is None:
            seen = set(_one_nan(a))
        new = [value for value in dict.fromkeys(_one_nan(b)) if value not in seen]
        if new:
            seen.update(new)
            merged = DistinctValues(a + tuple(new))
        else:
            merged = a if type(a) is DistinctValues else DistinctValues(a)
        merged.seen = seen  # type: ignore[attr-defined]
        return merged

    def finish(self, state: tuple[Any, ...]) -> int:
        return len(state)


def as_aggregate(function: object) -> Aggregate | None:
    """The aggregate behind a step's combine or reduce, if it is one."""
    return function if isinstance(function, Aggregate) else None


__all__ = ["Aggregate", "Count", "CountDistinct", "Max", "Mean", "Min", "Sum", "TopK", "as_aggregate"]
