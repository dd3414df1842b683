"""Adaptive flow control on the map side (HOP section 3.1).

Before a map registers a new spill with its worker, it looks at how many of its spills the worker has not yet pushed
to every reducer (*unsent*). While more than ``unsent_threshold`` are unsent, the reducers (or the network) are the
bottleneck: the map keeps new spills back instead of queueing them. When the backlog drains, it merges the held
spills into one, running the combiner across them, and registers that single spill. This moves combining work from
the overloaded reducers to the map, and sends fewer, smaller runs.

Whether merging is worth it is measured, not assumed: each merge records its ratio (records out / records in). When
merges stop paying (ratio above ``useless_merge_ratio``, e.g. a combiner that cannot shrink uniform data), held
spills are registered as they are once the backlog drains, instead of spending map CPU on merges that do not shrink
anything. At most ``max_held`` spills are held: past that they are merged into one held spill, so the number of
files stays bounded while the map keeps running; when merging does not pay (no combiner, or measured useless), they
are registered as they are instead, since one held spill grown by merge after merge would be read and written
again by every merge, spending the map's CPU and disk for as long as the reducers lag.

A merge streams its spills (:func:`merge_spills`): it holds about a block per spill, one key's values and a block of
output, not the spills' partitions, so that held spills, however large, do not make the map's memory grow.

Nothing is dropped: every record of every held spill ends up in exactly one registered spill.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any

from shuffle.buffer import DEFAULT_SPILL_BYTES, DEFAULT_SPILL_KEYS, KeyCost, combined_values, state_bytes
from shuffle.keys import UNSORTED, KeyOrder, combined_order
from shuffle.merge import merge_blocks
from shuffle.runs import BLOCK_RECORDS, Block, FlatRunEncoder, GroupedRunEncoder, flat_block
from shuffle.spill import SpillFile, write_spill

_first = itemgetter(0)
_second = itemgetter(1)


@dataclass
class FlowCounters:
    spills_held_back: int = 0
    max_spills_held: int = 0
    spills_merged_map_side: int = 0
    """The map's spills (as its buffer wrote them) that went into a merge; a held merge result merged again is not
    counted again."""
    merge_records_in: int = 0
    merge_records_out: int = 0
    hold_seconds: float = 0.0
    """Summed over held spills: how long each waited for the shuffle backlog to drain."""

    @property
    def merge_ratio(self) -> float | None:
        return self.merge_records_out / self.merge_records_in if self.merge_records_in else None


MERGE_FOLD_KEYS = DEFAULT_SPILL_KEYS
"""States a merge of unsorted spills holds at most per partition: as many as a folding map buffer holds before it
spills, so that the merge never holds more than the buffer beside it..."""
MERGE_FOLD_BYTES = DEFAULT_SPILL_BYTES
"""... and about as many bytes of keys and states (measured: ``TopK``'s and ``CountDistinct``'s states are large)."""


def merge_spills(
    spills: list[SpillFile],
    target: Path,
    combiner: Any | None,
    *,
    fold_keys: int = MERGE_FOLD_KEYS,
    fold_bytes: int = MERGE_FOLD_BYTES,
) -> SpillFile:
    """Merge spill files partition by partition into one spill at ``target``, combining across them.

    ``combiner`` is ``None`` (keep every pair: a grouped run, each key once with its values in spill order), an
    aggregate with ``merge`` (fold states, in spill order) or a generic combine function ``(key, values) -> pairs``
    (``shuffle.buffer.combined_values``). The inputs are deleted once the merged spill is written.

    Memory: a partition's runs are streamed block by block (``SpillFile.iter_partition_blocks``), merged by key in
    the spills' order (``shuffle.merge.merge_blocks``) and the merged run is packed and written a block at a time
    (``shuffle.runs.FlatRunEncoder``, ``GroupedRunEncoder``): a merge holds about one block per spill, one key's
    values and one output block, however large the spills. Partitions whose runs are unsorted (an aggregate whose
    reducer folds runs in a hash map: ``shuffle.keys.UNSORTED``) have no order to merge by: their states are folded
    into a dict, in the order the spills give them, and written out in that order; past ``fold_keys`` states, or
    about ``fold_bytes`` of keys and states (a key sampled per block, ``shuffle.buffer.state_bytes``), the dict is
    written out and started again (a key may then come twice in the run: its folding reducer merges the states
    again, as it does across runs), so it holds about that much at most (checked after each block) whatever the
    spills hold. Below that, the output is what folding the spills in one dict gives.
    Unsorted runs come only from a folding aggregate's spills and are merged only with that aggregate.
    """
    runs = (
        _merged_partition(spills, partition, combiner, fold_keys, fold_bytes)
        for partition in range(len(spills[0].partitions))
    )
    merged = write_spill(target, runs)
    for spill in spills:
        spill.path.unlink(missing_ok=True)
    return merged


def _merged_partition(
    spills: list[SpillFile], partition: int, combiner: Any | None, fold_keys: int, fold_bytes: int
) -> tuple[Iterator[bytes], Callable[[], int], str]:
    """One partition's merged run for ``write_spill``: its blocks as they are packed, its records once written, and
    its order tag."""
    tags = [spill.partitions[partition].order_tag for spill in spills]
    if UNSORTED in tags:
        if combiner is None or not hasattr(combiner, "merge"):
            raise ValueError(
                f"unsorted runs (partition {partition} of {spills[0].path}) come only from an aggregate's spills and "
                f"merge only with that aggregate; got combiner {combiner!r}"
            )
        flat = FlatRunEncoder()
        folded = _folded_unsorted(spills, partition, combiner.merge, fold_keys, fold_bytes, flat)
        return folded, lambda: flat.records, UNSORTED
    order = combined_order(tags)
    tag = _merged_order_tag(tags, order)
    if combiner is None:
        grouped = GroupedRunEncoder()
        return _grouped(_merged_groups(spills, partition, order), grouped), lambda: grouped.records, tag
    flat = FlatRunEncoder()
    if hasattr(combiner, "merge"):
        return _folded(spills, partition, order, combiner.merge, flat), lambda: flat.records, tag
    return _combined(_merged_groups(spills, partition, order), combiner, flat), lambda: flat.records, tag


def _merged_groups(spills: list[SpillFile], partition: int, order: KeyOrder) -> Iterator[list[tuple[Any, list[Any]]]]:
    """The keys of the spills' runs in key order, each with its values in spill order, read a block at a time and
    given in batches (one per batch of ``shuffle.merge.merge_blocks``: about a block per spill): a key whose values
    go on in the next batch comes in the batch that ends it."""
    open_key: Any = None
    open_values: list[Any] | None = None
    for batch in merge_blocks(_pair_streams(spills, partition), order):
        groups = [(key, list(map(_second, pairs))) for key, pairs in itertools.groupby(batch, key=_first)]
        if open_values is not None:
            if groups[0][0] == open_key:
                open_values += groups[0][1]
                groups[0] = (open_key, open_values)
            else:
                groups.insert(0, (open_key, open_values))
        open_key, open_values = groups.pop()
        if groups:
            yield groups
    if open_values is not None:
        yield [(open_key, open_values)]


def _grouped(batches: Iterable[list[tuple[Any, list[Any]]]], encoder: GroupedRunEncoder) -> Iterator[bytes]:
    for groups in batches:
        for key, values in groups:
            yield from encoder.add(key, values)
    yield from encoder.close()


def _folded(
    spills: list[SpillFile], partition: int, order: KeyOrder, merge: Callable[[Any, Any], Any], encoder: FlatRunEncoder
) -> Iterator[bytes]:
    """Each key's states folded with ``merge`` in spill order, as a dict folds the spills one after another: per
    batch of merged pairs (about a block per spill) the same dict loop, the batch's last key held over to the next
    batch (its states may go on there) as the first entry of its dict."""
    state: dict[Any, Any] = {}
    for batch in merge_blocks(_pair_streams(spills, partition), order):
        get = state.get
        for key, value in batch:
            old = get(key)
            state[key] = value if old is None else merge(old, value)
        last = next(reversed(state))
        held = state.pop(last)
        if state:
            yield from encoder.add(list(state), list(state.values()))
        state = {last: held}
    if state:
        yield from encoder.add(list(state), list(state.values()))
    yield from encoder.close()


def _pair_streams(spills: list[SpillFile], partition: int) -> list[Iterator[list[tuple[Any, Any]]]]:
    """Each spill's run of ``partition`` as blocks of pairs, read a block at a time (``merge_blocks``' sources)."""
    return [map(_pairs, spill.iter_partition_blocks(partition)) for spill in spills]


def _pairs(block: Block) -> list[tuple[Any, Any]]:
    keys, values = flat_block(block)
    return list(zip(keys, values, strict=True))


def _combined(
    batches: Iterable[list[tuple[Any, list[Any]]]], combiner: Any, encoder: FlatRunEncoder
) -> Iterator[bytes]:
    for groups in batches:
        keys: list[Any] = []
        values: list[Any] = []
        for key, key_values in groups:
            combined = combined_values(combiner, key, key_values)
            keys += [key] * len(combined)
            values += combined
        yield from encoder.add(keys, values)
    yield from encoder.close()


def _folded_unsorted(
    spills: list[SpillFile],
    partition: int,
    merge: Callable[[Any, Any], Any],
    fold_keys: int,
    fold_bytes: int,
    encoder: FlatRunEncoder,
) -> Iterator[bytes]:
    """Unsorted runs folded into a dict spill after spill, written in the dict's order, and whenever it passes
    ``fold_keys`` states or about ``fold_bytes`` of them (checked after each block)."""
    state: dict[Any, Any] = {}
    key_cost = KeyCost(0)
    """One key's cost in the dict, from the last key of every block folded (as ``shuffle.fold`` sizes its map)."""
    limit = fold_keys
    for spill in spills:
        for block in spill.iter_partition_blocks(partition):
            keys, values = flat_block(block)
            get = state.get
            for key, value in zip(keys, values, strict=True):
                old = get(key)
                state[key] = value if old is None else merge(old, value)
            if keys:
                key_bytes = key_cost.add(state_bytes(keys[-1], state[keys[-1]]))
                limit = min(fold_keys, max(1, int(fold_bytes // key_bytes)))
            if len(state) > limit:
                yield from _written_out(state, encoder)
                state = {}
    yield from _written_out(state, encoder)
    yield from encoder.close()


def _written_out(state: dict[Any, Any], encoder: FlatRunEncoder) -> Iterator[bytes]:
    """The blocks of ``state``'s pairs in its order, a block's worth of keys at a time."""
    pairs = iter(state.items())
    while chunk := list(itertools.islice(pairs, BLOCK_RECORDS)):
        keys, values = zip(*chunk, strict=True)
        yield from encoder.add(keys, values)


def _merged_order_tag(tags: list[str], order: Any) -> str:
    """The order tag of a run merged from runs with ``tags`` in ``order`` (``shuffle.keys.combined_order``)."""
    return next((t for t in tags if t != "empty"), "empty") if order is None else "mixed"


class FlowController:
    """Decides, spill by spill, whether to register, hold or merge (see the module docstring)."""

    def __init__(
        self,
        register: Callable[[SpillFile], None],
        unsent: Callable[[], int],
        combiner: Any | None,
        merge_dir: Path,
        *,
        unsent_threshold: int = 2,
        max_held: int = 8,
        useless_merge_ratio: float = 0.9,
        enabled: bool = True,
        may_merge: bool = True,
    ) -> None:
        self._register = register
        self._unsent = unsent
        self.combiner = combiner
        self.merge_dir = merge_dir
        self.unsent_threshold = unsent_threshold
        self.max_held = max_held
        self.useless_merge_ratio = useless_merge_ratio
        self.enabled = enabled
        self.may_merge = may_merge
        """False: held spills are registered one by one, never merged (each must stay one input chunk)."""
        self.held: list[SpillFile] = []
        self.counters = FlowCounters()
        self._merges = 0
        self._held_since: list[float] = []
        self._merge_results: set[Path] = set()
        """Held spills that are merges of others (``max_held``): already counted in ``spills_merged_map_side``."""

    def offer(self, spill: SpillFile) -> None:
        """A new spill was written: register it, or hold it while the worker has a backlog."""
        if not self.enabled:
            self._register(spill)
            return
        if self._unsent() > self.unsent_threshold:
            self.held.append(spill)
            self._held_since.append(time.monotonic())
            self.counters.spills_held_back += 1
            self.counters.max_spills_held = max(self.counters.max_spills_held, len(self.held))
            if len(self.held) >= self.max_held:
                if self._merging_pays():
                    self.held = [self._merge(self.held)]
                else:
                    # A merge that does not shrink the data would only grow one held spill (and the work of
                    # every next merge, which reads it all again) for as long as the reducers lag: register them.
                    self._release(self.held)
            return
        self._release([*self.held, spill])

    def poll(self) -> None:
        """Called between spills: release held spills once the backlog has drained."""
        if self.held and self._unsent() <= self.unsent_threshold:
            self._release(self.held)

    def finish(self) -> None:
        """The map is done: whatever is held is registered now (merged if merging pays)."""
        if self.held:
            self._release(self.held)

    def _merging_pays(self) -> bool:
        ratio = self.counters.merge_ratio
        return self.may_merge and self.combiner is not None and (ratio is None or ratio <= self.useless_merge_ratio)

    def _release(self, spills: Iterable[SpillFile]) -> None:
        spills = list(spills)
        self.held = []
        now = time.monotonic()
        self.counters.hold_seconds += sum(now - since for since in self._held_since)
        self._held_since = []
        if len(spills) > 1 and self._merging_pays():
            spills = [self._merge(spills)]
        for spill in spills:
            self._register(spill)

    def _merge(self, spills: list[SpillFile]) -> SpillFile:
        if len(spills) == 1:
            return spills[0]
        self._merges += 1
        records_in = sum(spill.records for spill in spills)
        merged = merge_spills(spills, self.merge_dir / f"merged-{self._merges:05d}.spill", self.combiner)
        counters = self.counters
        counters.spills_merged_map_side += sum(spill.path not in self._merge_results for spill in spills)
        self._merge_results.difference_update(spill.path for spill in spills)
        self._merge_results.add(merged.path)
        counters.merge_records_in += records_in
        counters.merge_records_out += merged.records
        return merged
