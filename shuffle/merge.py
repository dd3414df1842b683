"""Merging sorted runs and grouping equal keys.

Two strategies, chosen by where the runs live:

- Runs held in memory are concatenated and sorted with ``list.sort``. Timsort finds the pre-sorted runs and merges them
  in C, which is several times faster than a heap merge driven from Python.
- Runs on disk are streamed through ``heapq.merge``, so memory stays bounded by one block per run.

Both use the order given by ``shuffle.keys.combined_order`` (native, or the total order for mixed key types).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from operator import itemgetter
from typing import Any

from shuffle.keys import KeyOrder
from shuffle.runs import iter_blocks

Pair = tuple[Any, Any]

_first = itemgetter(0)
_second = itemgetter(1)


def _pair_key(order: KeyOrder) -> Callable[[Pair], Any]:
    if order is None:
        return _first
    return lambda pair: order(pair[0])


def sort_runs_in_memory(runs: Iterable[bytes | memoryview], order: KeyOrder) -> list[Pair]:
    """Decode run bytes and return all their pairs in one sorted list (stable: earlier runs first on ties)."""
    pairs: list[Pair] = []
    for data in runs:
        for keys, values in iter_blocks(data):
            pairs.extend(zip(keys, values, strict=False))
    pairs.sort(key=_pair_key(order))
    return pairs


def merge_runs(streams: Iterable[Iterable[Pair]], order: KeyOrder) -> Iterator[Pair]:
    """K-way merge of sorted pair streams (stable across streams, in the order given)."""
    streams = list(streams)
    if len(streams) == 1:
        return iter(streams[0])
    return heapq.merge(*streams, key=_pair_key(order))


def group_sorted(pairs: Iterable[Pair]) -> Iterator[tuple[Any, Iterator[Any]]]:
    """Group a sorted pair stream into ``(key, values)`` with a lazy values iterator, like a reduce input."""
    for key, group in itertools.groupby(pairs, key=_first):
        yield key, map(_second, group)
