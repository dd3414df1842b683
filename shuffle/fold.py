"""A reduce-side store for aggregates: committed runs are folded into one state per key as they complete.

When a step's reduce is a built-in aggregate (``hop.aggregates``), the runs carry aggregate states and the reduce only
merges them. :class:`FoldingRunStore` keeps tentative runs exactly like :class:`shuffle.store.RunStore` (per attempt,
dropped on failure), but as soon as an attempt has committed and all its runs are here, it merges the runs into a
hash map of key -> state and frees their bytes. (Only complete attempts are folded: an incomplete committed attempt
whose worker is lost must still be droppable.) In pipelined mode commits arrive while other maps
still run, so when the last map commits little work is left: sort the distinct keys and write.

Memory: the map holds at most ``max_keys`` keys (plus one block's); past that it is written to disk as one sorted
run and a new map is started. The bound is checked after every block folded (a map attempt's runs may hold far more
distinct keys than ``max_keys`` between them), a run on disk is folded as it is streamed (a map's spill may make a
run larger than the whole budget) and the map is written out a block at a time. :meth:`sorted_pairs` then merges
those runs with the map (a key may appear in several; the aggregate's reducer merges them again, which is correct
because ``merge`` is associative), streaming at most ``fan_in`` files: more are merged first, in passes, as a
reduce merges its run files.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from shuffle.buffer import KeyCost, state_bytes
from shuffle.keys import combined_order, sort_keys
from shuffle.merge import group_sorted, merge_runs
from shuffle.runs import BLOCK_RECORDS, RunWriter, iter_blocks, iter_file_blocks, iter_run_file, iter_run_file_blocks
from shuffle.store import RunStore

BYTES_PER_KEY = 128
"""Least memory cost of one key and its state in the map (a word and its count), to turn ``memory_limit`` into a key
budget; larger states (``TopK``'s values, ``CountDistinct``'s) are measured as they are folded
(``shuffle.buffer.state_bytes``)."""


class FoldingRunStore(RunStore):
    """A :class:`RunStore` that folds committed runs with an aggregate's ``merge``."""

    def __init__(
        self,
        spill_dir: str | Path,
        aggregate: Any,
        memory_limit: int = 64 << 20,
        fan_in: int | None = None,
        max_keys: int | None = None,
    ) -> None:
        super().__init__(spill_dir, memory_limit=memory_limit, fan_in=fan_in)
        self.aggregate = aggregate
        self.state: dict[Any, Any] = {}
        self._fixed_max_keys = max_keys is not None
        self.max_keys = max_keys if max_keys is not None else max(1024, memory_limit // BYTES_PER_KEY)
        self._key_cost = KeyCost(BYTES_PER_KEY)
        """One key's cost in the map, from a key sampled per block folded (:meth:`_resize_budget`)."""
        self.folded_records = 0
        self._dumps: list[Path] = []
        self._dump_tags: list[str] = []
        self._dumped_keys = 0
        """Keys written out by ``_dump_state`` (a key may be in several dumps)."""
        self._state_tag = "empty"

    def add(
        self,
        task: int,
        attempt: int,
        seq: int,
        data: bytes | Path,
        records: int,
        order_tag: str,
        resumes: Sequence[Sequence[int]] = (),
    ) -> None:
        super().add(task, attempt, seq, data, records, order_tag, resumes)
        attempt = self.owner(task, attempt, seq)
        if self.committed.get(task) == attempt and self.complete(task, attempt):
            self._fold_attempt(task, attempt)

    def commit(self, task: int, attempt: int, spills: int, segments: list[list[int]] = ()) -> None:  # type: ignore[assignment]
        super().commit(task, attempt, spills, segments)
        if self.committed.get(task) == attempt and self.complete(task, attempt):
            self._fold_attempt(task, attempt)

    def _fold_attempt(self, task: int, attempt: int) -> None:
        attempt_runs = self.attempts.get((task, attempt))
        if attempt_runs is None:
            return
        for run in attempt_runs.runs.values():
            if run.folded:
                continue
            if run.data is not None:
                self._fold(iter_blocks(run.data))
            else:
                assert run.path is not None
                self._fold(iter_file_blocks(run.path))
            self._release(run)
            run.folded = True
            self.folded_records += run.records

    def _fold(self, blocks: Iterable[tuple[Sequence[Any], Sequence[Any]]]) -> None:
        """Fold blocks of (key, state) pairs into the map, writing it to disk whenever it passes ``max_keys``."""
        inline_sum = self.aggregate.inline_sum
        merge = self.aggregate.merge
        for keys, values in blocks:
            state = self.state
            get = state.get
            if inline_sum:
                for key, value in zip(keys, values, strict=True):
                    old = get(key)
                    state[key] = value if old is None else old + value
            else:
                for key, value in zip(keys, values, strict=True):
                    old = get(key)
                    state[key] = value if old is None else merge(old, value)
            if keys and not self._fixed_max_keys:
                self._resize_budget(keys[-1], state[keys[-1]])
            if len(state) > self.max_keys:
                self._dump_state()

    def _resize_budget(self, key: Any, value: Any) -> None:
        """Fold one sampled key's cost into the mean and set ``max_keys`` from it: a count costs about
        ``BYTES_PER_KEY``, a ``TopK(20)`` state seven times that, so a fixed count of keys let such states take
        seven times the budget."""
        self.max_keys = max(1024, int(self.memory_limit // self._key_cost.add(state_bytes(key, value))))

    def _sorted_state(self) -> list[Any]:
        """The keys of the in-memory state in the total order (runs may have come unsorted: order is ours)."""
        keys, tag = sort_keys(list(self.state))
        self._state_tag = tag
        return keys

    def _dump_state(self) -> None:
        path = self.new_run_path("folded")
        writer = RunWriter(path)
        state = self.state
        keys = self._sorted_state()
        for start in range(0, len(keys), BLOCK_RECORDS):  # a block at a time: never the whole map encoded at once
            block = keys[start : start + BLOCK_RECORDS]
            writer.add_block(block, [state[key] for key in block])
        self._dump_tags.append(self._state_tag)
        size = writer.close()
        self._merged[path] = size  # tracked like merge outputs: counted on disk, deleted by close()
        self._add_disk(size)
        self._dumps.append(path)
        self._dumped_keys += len(keys)
        self.state = {}

    def sorted_pairs(self) -> Iterator[tuple[Any, Any]]:
        """Committed (key, state) pairs in key order; a key repeats only if the state was dumped to disk."""
        state = self.state
        keys = self._sorted_state()
        if not self._dumps:
            return ((key, state[key]) for key in keys)
        # Blocks made as the merge reaches them: a store that dumped to disk is short of memory already.
        in_memory = (
            [(key, state[key]) for key in keys[start : start + BLOCK_RECORDS]]
            for start in range(0, len(keys), BLOCK_RECORDS)
        )
        order = combined_order([*self._dump_tags, self._state_tag])
        # One stream per dump, each holding a decoded block: merged first, ``fan_in`` at a time, to at most
        # ``fan_in - 1`` of them (the map is one more stream), as a reduce merges its run files.
        dumps: list[Any] = list(self._dumps)
        while len(dumps) > max(1, self.fan_in - 1):
            dumps = self._merge_pass(dumps, combined_order(self._dump_tags), self.fan_in)
        self._dumps = dumps
        return merge_runs([*(iter_run_file_blocks(path) for path in dumps), in_memory], order)

    def finished_columns(self) -> tuple[list[Any], list[Any]] | None:
        """Every committed key in key order and its finished value (``aggregate.finish`` of its state), as two
        lists; ``None`` if part of the state was dumped to disk (then :meth:`grouped` merges it). ``finish``
        errors propagate."""
        if self._dumps:
            return None
        keys = self._sorted_state()
        states = map(self.state.__getitem__, keys)
        if getattr(self.aggregate, "finish_is_identity", False):  # the state is the value: no call per key
            return keys, list(states)
        return keys, list(map(self.aggregate.finish, states))

    def grouped(self) -> Iterator[tuple[Any, Iterable[Any]]]:
        """Folded states by key (a key has several only if the state was dumped to disk)."""
        self._groups_total = len(self.state) + self._dumped_keys  # (at most: a key dumped twice is one group)
        return group_sorted(self.sorted_pairs())

    def snapshot_groups(self) -> dict[Any, list[Any]]:
        """The folded states (in memory and dumped) plus the states of runs not folded yet, by key."""
        groups = super().snapshot_groups()
        for path in self._dumps:
            for key, value in iter_run_file(path):
                groups.setdefault(key, []).append(value)
        for key, value in self.state.items():
            groups.setdefault(key, []).append(value)
        return groups

    def snapshot_grouped(self) -> Iterator[tuple[Any, list[Any]]]:
        """:meth:`snapshot_groups` sorted by key: built whole (its runs may be unsorted, an aggregate's reduce folds
        them; an online job's snapshot of an aggregate streams from ``hop.online.state`` instead)."""
        groups = self.snapshot_groups()
        ordered, _ = sort_keys(list(groups))
        return ((key, groups[key]) for key in ordered)

    def close(self) -> None:
        super().close()
        self.state = {}
        self._dumps = []
