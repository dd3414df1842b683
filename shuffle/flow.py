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
are registered as they are instead, since a merge decodes its spills in memory and one held spill grown by merge
after merge would make the map's memory grow for as long as the reducers lag.

Nothing is dropped: every record of every held spill ends up in exactly one registered spill.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shuffle.buffer import combined_values
from shuffle.keys import UNSORTED, combined_order
from shuffle.merge import join_groups, sort_groups_in_memory
from shuffle.runs import encode_grouped_run, encode_run, iter_blocks
from shuffle.spill import SpillFile, write_spill


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


def merge_spills(spills: list[SpillFile], target: Path, combiner: Any | None) -> SpillFile:
    """Merge spill files partition by partition into one spill at ``target``, combining across them.

    ``combiner`` is ``None`` (keep every pair), an aggregate with ``merge`` (fold states), or a generic combine
    function ``(key, values) -> pairs``.
    """
    runs = []
    for partition in range(len(spills[0].partitions)):
        entries = [spill.partitions[partition] for spill in spills]
        tags = [entry.order_tag for entry in entries]
        unsorted = UNSORTED in tags
        order = None if unsorted else combined_order(tags)
        data = [spill.read_partition(partition) for spill in spills]
        keys: list[Any]
        values: list[Any]
        if combiner is None:
            # Every pair kept: each key once with its values from every spill, in spill order (a grouped run).
            keys, lists = [], []
            for key, key_values in join_groups(sort_groups_in_memory(data, order)):
                keys.append(key)
                lists.append(key_values)
            tag = _merged_order_tag(tags, order)
            runs.append((encode_grouped_run(keys, lists), sum(map(len, lists)), tag))
            continue
        if hasattr(combiner, "merge"):
            state: dict[Any, Any] = {}
            merge = combiner.merge
            for chunk in data:
                for block_keys, block_values in iter_blocks(chunk):
                    for key, value in zip(block_keys, block_values, strict=True):
                        old = state.get(key)
                        state[key] = value if old is None else merge(old, value)
            keys = list(state) if unsorted else sorted(state, key=order)
            values = [state[key] for key in keys]
        else:
            keys, values = [], []
            for key, key_values in join_groups(sort_groups_in_memory(data, order)):
                combined = combined_values(combiner, key, key_values)
                keys += [key] * len(combined)
                values += combined
        tag = UNSORTED if unsorted else _merged_order_tag(tags, order)
        runs.append((encode_run(keys, values), len(keys), tag))
    merged = write_spill(target, runs)
    for spill in spills:
        spill.path.unlink(missing_ok=True)
    return merged


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
                    # A merge that does not shrink the data would only grow one held spill (and the memory of
                    # the next merge, which decodes it whole) for as long as the reducers lag: register them.
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
