"""The map side of a continuous query: records are mapped and combined once, into the pane of their position.

A :class:`PaneBuffer` keeps the open panes of one stream map: per pane, per key, the combined value (a built-in
aggregate's state, folded in place) or the list of values (a user combiner runs once per key when the pane is
sealed; without a combiner the values travel as they are). ``seal_below(p)`` closes every open pane below ``p`` in
pane order and returns, for each, one encoded run per reduce partition, ready for a spill file
(``shuffle.spill.write_spill``), so sealed panes travel through the same push shuffle as batch spills.

The buffer's whole state (open panes and counters) is msgpack-able for map checkpoints: a resumed map restores it,
seeks its source to the checkpoint's position and goes on, so no record is mapped twice into a pane.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hop.aggregates import Aggregate
from shuffle.buffer import hashable, map_or_combine, none_state_error, unhashable_key_error, unorderable_key_error
from shuffle.keys import plain_key, refuse_nan_keys, sort_keys
from shuffle.pairs import checked_pairs
from shuffle.runs import UnencodableRecordError, encode_run


@dataclass
class SealedPane:
    pane: int
    records: int
    """Input records mapped into this pane."""
    runs: list[tuple[bytes, int, str]]
    """Per partition: (run bytes, pairs, order tag)."""


class PaneBuffer:
    """Open panes of one stream map; see the module docstring."""

    def __init__(
        self,
        num_partitions: int,
        partition: Callable[[Any], int],
        aggregate: Aggregate | None,
        combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]]] | None,
    ) -> None:
        self.num_partitions = num_partitions
        self.partition = partition
        self.aggregate = aggregate
        self.combiner = combiner
        self.panes: dict[int, dict[Any, Any]] = {}
        self.records: dict[int, int] = {}
        self.output_records = 0
        self.combine_output_records = 0
        self.failed_pair: tuple[Any, Any] | None = None
        """The (key, value) :meth:`add` was folding when it raised (``hop.usercode.fold_error`` reports it)."""
        self.accumulating = aggregate is not None and aggregate.accumulates
        """Whether an open pane holds the aggregate's accumulators (``Aggregate.accumulates``), made states as the
        pane is sealed or checkpointed: a pane's states are merged into every window it is part of, so they are
        never changed in place."""

    @property
    def open_panes(self) -> list[int]:
        return sorted(self.panes)

    def add(self, pane: int, pairs: Iterable[tuple[Any, Any]]) -> None:
        """Fold one record's map output into ``pane``. A built-in aggregate folds as a batch map does
        (``shuffle.buffer.MapOutputBuffer.run_map``): a key's first value is its state, which must not be None
        (``AggregateValueError``); when ``+`` or ``merge`` refuses a value, the pair is in :attr:`failed_pair`. A key
        that cannot be a dict key (a list) raises ``shuffle.buffer.UnhashableKeyError``, as in a batch map."""
        table = self.panes.get(pane)
        if table is None:
            table = self.panes[pane] = {}
            self.records[pane] = 0
        self.records[pane] += 1
        aggregate = self.aggregate
        count = 0
        get = table.get
        key = value = None
        try:
            if aggregate is None:
                for key, value in pairs:
                    entry = get(key)
                    if entry is None:
                        table[key] = [value]
                    else:
                        entry.append(value)
                    count += 1
            elif aggregate.inline_sum:
                for key, value in pairs:
                    old = get(key)
                    if old is not None:
                        table[key] = old + value
                    elif value is not None:  # (not 0 + value: a Sum of strings, as in batch, takes no 0)
                        table[key] = value
                    else:
                        raise none_state_error(aggregate, key, value)
                    count += 1
            elif self.accumulating:
                start, add = aggregate.start, aggregate.add
                for key, value in pairs:
                    accumulator = get(key)
                    if accumulator is not None:
                        add(accumulator, value)
                    else:
                        table[key] = start(value)
                    count += 1
            else:
                lift, merge = aggregate.lift, aggregate.merge
                for key, value in pairs:
                    old = get(key)
                    if old is not None:
                        table[key] = merge(old, lift(value))
                    elif (state := lift(value)) is not None:
                        table[key] = state
                    else:
                        raise none_state_error(aggregate, key, value)
                    count += 1
        except Exception as error:
            self.failed_pair = (key, value)
            if isinstance(error, TypeError) and not hashable(key):
                raise unhashable_key_error(key) from None  # as a batch map says it: the dict's error names no key
            raise
        self.output_records += count

    def seal_below(self, limit: int) -> list[SealedPane]:
        """Close every open pane below ``limit``, in pane order."""
        sealed = []
        for pane in sorted(p for p in self.panes if p < limit):
            table = self.panes.pop(pane)
            records = self.records.pop(pane)
            sealed.append(SealedPane(pane, records, self._runs(table)))
        return sealed

    def _runs(self, table: dict[Any, Any]) -> list[tuple[bytes, int, str]]:
        keys_by_partition: list[list[Any]] = [[] for _ in range(self.num_partitions)]
        for key in table:
            keys_by_partition[self.partition(key)].append(key)
        runs = []
        for keys in keys_by_partition:
            try:
                ordered, tag = sort_keys(keys)
            except TypeError:
                # A key of a subclass of a key type (an IntEnum member...) goes as its plain value, as a batch map
                # sends it (``shuffle.buffer``); equal, with the same hash, it finds its entry in ``table``. A key
                # that is no key (a date...) fails as in a batch map, for the task to name the record that yielded it.
                try:
                    plain = [plain_key(key) for key in keys]
                except TypeError:
                    raise unorderable_key_error(keys) from None
                ordered, tag = sort_keys(plain)
            # A NaN key equals nothing, so each of its records would be a group of its own in every window: refused
            # as a batch map refuses it (``shuffle.buffer``), per pane among its distinct keys (nothing per record).
            refuse_nan_keys(ordered, tag)
            out_keys: list[Any] = []
            out_values: list[Any] = []
            for key in ordered:
                value = table[key]
                if self.aggregate is not None:
                    out_keys.append(key)
                    out_values.append(self.aggregate.state_of(value) if self.accumulating else value)
                elif self.combiner is not None:
                    for out_key, out_value in checked_pairs(self.combiner(key, value)):
                        out_keys.append(out_key)
                        out_values.append(out_value)
                else:
                    out_keys.extend([key] * len(value))
                    out_values.extend(value)
            self.combine_output_records += len(out_keys)
            try:
                runs.append((encode_run(out_keys, out_values), len(out_keys), tag))
            except UnencodableRecordError as error:
                raise map_or_combine(error, self._mapped_values(table, error.key)) from None
        return runs

    def _mapped_values(self, table: dict[Any, Any], key: Any) -> Any:
        """What the map yielded for ``key`` in a pane when a user combiner ran over it; None when none did."""
        if self.combiner is None or self.aggregate is not None:
            return None
        try:
            return table.get(key, ())
        except TypeError:  # (a key the combiner yielded, which no map did)
            return ()

    # Checkpoints -------------------------------------------------------------------------------------------
    def _states(self, table: dict[Any, Any]) -> list[Any]:
        """An open pane's values as a checkpoint keeps them: states, not accumulators."""
        if self.accumulating:
            return list(map(self.aggregate.state_of, table.values()))  # type: ignore[union-attr]
        return list(table.values())

    def to_state(self) -> dict[str, Any]:
        return {
            "panes": [[pane, self.records[pane], list(t.keys()), self._states(t)] for pane, t in self.panes.items()],
            "output_records": self.output_records,
            "combine_output_records": self.combine_output_records,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.panes, self.records = {}, {}
        for pane, records, keys, values in state["panes"]:
            if self.aggregate is None:
                values = map(list, values)
            elif self.accumulating:
                values = map(self.aggregate.accumulator_of, values)
            self.panes[pane] = dict(zip(keys, values, strict=True))
            self.records[pane] = records
        self.output_records = state["output_records"]
        self.combine_output_records = state["combine_output_records"]
