"""Merging sorted runs and grouping equal keys.

Two strategies, chosen by where the runs live:

- Runs held in memory are concatenated and sorted with ``list.sort``. Timsort finds the pre-sorted runs and merges them
  in C, which is several times faster than a heap merge driven from Python.
- Runs on disk are streamed block by block through :func:`merge_blocks`, so memory stays bounded by about one block
  per run; it sorts batches of pairs in C rather than comparing pair by pair in Python as ``heapq.merge`` does.

Both use the order given by ``shuffle.keys.combined_order`` (native, or the total order for mixed key types).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

from shuffle.keys import KeyOrder
from shuffle.runs import BLOCK_RECORDS, block_groups, iter_stored_blocks

Pair = tuple[Any, Any]

_first = itemgetter(0)
_second = itemgetter(1)


def _pair_key(order: KeyOrder) -> Callable[[Pair], Any]:
    if order is None:
        return _first
    return lambda pair: order(pair[0])


def sort_groups_in_memory(runs: Iterable[bytes | memoryview], order: KeyOrder) -> list[tuple[Any, Sequence[Any]]]:
    """Decode run bytes and return all their ``(key, values)`` items (``shuffle.runs.block_groups``) in one sorted
    list (stable: earlier runs first on equal keys, so chaining equal keys' values keeps run order)."""
    items: list[tuple[Any, Sequence[Any]]] = []
    for data in runs:
        for block in iter_stored_blocks(data):
            items.extend(block_groups(block))
    items.sort(key=_pair_key(order))
    return items


def join_groups(items: Iterable[tuple[Any, Sequence[Any]]]) -> Iterator[tuple[Any, list[Any]]]:
    """Key-ordered ``(key, values)`` items with each key once: the values of neighbouring equal keys joined."""
    for key, group in itertools.groupby(items, key=_first):
        yield key, list(itertools.chain.from_iterable(map(_second, group)))


def merge_blocks(sources: Iterable[Iterable[list[Pair]]], order: KeyOrder) -> Iterator[list[Pair]]:
    """K-way merge of sources that each yield sorted blocks (lists of pairs), as batches of pairs in key order.

    Stable across sources in the order given: equal keys come out source by source. Per batch it takes from every
    source the pairs below the smallest last key of their current blocks and sorts them together (timsort merges
    the sorted pieces in C), then passes the pairs equal to that key source by source (reading on while a source's
    next block starts with it). Memory holds about one block per source, whatever the size of one key's group.
    """
    pair_key = _pair_key(order)
    key_of = (lambda key: key) if order is None else order
    # Per live source: its current block and where the unconsumed part starts (offsets, not slices, so that no
    # pair is copied more than once whatever the number of sources).
    blocks: list[list[Pair]] = []
    starts: list[int] = []
    live: list[Iterator[list[Pair]]] = []
    for feed in map(iter, sources):
        block = _next_block(feed)
        if block:
            blocks.append(block)
            starts.append(0)
            live.append(feed)
    while blocks:
        bound = min(key_of(block[-1][0]) for block in blocks)
        batch: list[Pair] = []
        for i, block in enumerate(blocks):
            cut = bisect.bisect_left(block, bound, starts[i], key=pair_key)
            batch += block[starts[i] : cut]
            starts[i] = cut
        if batch:
            batch.sort(key=pair_key)
            yield batch
        # Every block now starts at or after ``bound``; the source(s) whose block ended at it may hold more of it.
        kept = 0
        for block, start, feed in zip(blocks, starts, live, strict=True):
            while start < len(block) and key_of(block[start][0]) == bound:
                cut = bisect.bisect_right(block, bound, start, key=pair_key)
                yield block[start:cut]
                start = cut
                if start == len(block):
                    block, start = _next_block(feed), 0
            if start < len(block):
                blocks[kept], starts[kept], live[kept] = block, start, feed
                kept += 1
        del blocks[kept:], starts[kept:], live[kept:]


def _next_block(feed: Iterator[list[Pair]]) -> list[Pair]:
    """The next non-empty block of ``feed``, or an empty list at its end."""
    for block in feed:
        if block:
            return block
    return []


def merge_runs(streams: Iterable[Iterable[list[Pair]]], order: KeyOrder) -> Iterator[Pair]:
    """K-way merge of sorted sources given as blocks (see :func:`merge_blocks`), one pair at a time."""
    return itertools.chain.from_iterable(merge_blocks(streams, order))


def blocks_of(pairs: list[Pair], size: int = BLOCK_RECORDS) -> Iterator[list[Pair]]:
    """A sorted list of pairs as blocks for :func:`merge_blocks`."""
    for start in range(0, len(pairs), size):
        yield pairs[start : start + size]


def group_merged(items: Iterable[tuple[Any, Sequence[Any]]]) -> Iterator[tuple[Any, Iterator[Any]]]:
    """Group a key-ordered stream of ``(key, values)`` items (``shuffle.runs.block_groups``) into ``(key, values)``
    with a lazy values iterator that chains the items' lists, like a reduce input."""
    for key, group in itertools.groupby(items, key=_first):
        yield key, itertools.chain.from_iterable(map(_second, group))


def group_sorted(pairs: Iterable[Pair]) -> Iterator[tuple[Any, Iterator[Any]]]:
    """Group a sorted pair stream into ``(key, values)`` with a lazy values iterator, like a reduce input."""
    for key, group in itertools.groupby(pairs, key=_first):
        yield key, map(_second, group)
