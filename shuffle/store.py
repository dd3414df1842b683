"""The reduce side's store of received runs, kept per map attempt.

A run arrives tagged with the map task, the attempt that produced it and its spill sequence number. Runs of an attempt
are *tentative* until the coordinator reports that attempt committed; then they join the committed set. Runs of a
failed or superseded attempt are dropped and never reach the reduce (HOP section 3.3, with attempts isolated).

Memory: run bytes are held in memory up to ``memory_limit`` bytes (encoded size). Past that, the largest in-memory runs
are written to files in ``spill_dir`` and later streamed, so the store's memory does not grow with the input. At the
end, :meth:`RunStore.sorted_pairs` sorts the in-memory committed runs in one pass and heap-merges the result with the
on-disk runs, first merging on-disk runs in passes of ``fan_in`` so at most ``fan_in`` files are open at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shuffle.keys import combined_order
from shuffle.merge import merge_runs, sort_runs_in_memory
from shuffle.runs import RunWriter, iter_run_file

AttemptKey = tuple[int, int]
"""(map task index, attempt number)."""


@dataclass
class StoredRun:
    """One received run: in memory (``data``) or on disk (``path``)."""

    seq: int
    records: int
    order_tag: str
    size: int
    data: bytes | None = None
    path: Path | None = None


@dataclass
class AttemptRuns:
    """The runs of one map attempt received so far."""

    runs: dict[int, StoredRun] = field(default_factory=dict)
    committed_spills: int | None = None
    """Set when the attempt committed: how many spills it produced (so we know when all have arrived)."""


class RunStore:
    """Runs for one reduce partition, by map attempt, with tentative/committed states and a memory limit."""

    def __init__(self, spill_dir: str | Path, memory_limit: int = 64 << 20, fan_in: int = 64) -> None:
        self.spill_dir = Path(spill_dir)
        self.memory_limit = memory_limit
        self.fan_in = fan_in
        self.attempts: dict[AttemptKey, AttemptRuns] = {}
        self.committed: dict[int, int] = {}
        """map task -> the attempt that committed."""
        self.memory_bytes = 0
        self.disk_bytes = 0
        self.received_runs = 0
        self.received_bytes = 0
        self.dropped_runs = 0
        self._file_seq = 0

    def add(self, task: int, attempt: int, seq: int, data: bytes, records: int, order_tag: str) -> None:
        """Store one run; a run of an attempt already superseded by another committed attempt is dropped."""
        self.received_runs += 1
        self.received_bytes += len(data)
        winner = self.committed.get(task)
        if winner is not None and winner != attempt:
            self.dropped_runs += 1
            return
        runs = self.attempts.setdefault((task, attempt), AttemptRuns()).runs
        if seq in runs:
            return  # a resend of a run we hold: idempotent
        runs[seq] = StoredRun(seq, records, order_tag, len(data), data=data)
        self.memory_bytes += len(data)
        if self.memory_bytes > self.memory_limit:
            self._evict()

    def commit(self, task: int, attempt: int, spills: int) -> None:
        """Record that ``attempt`` of ``task`` committed with ``spills`` spill files; drop other attempts' runs."""
        self.committed[task] = attempt
        self.attempts.setdefault((task, attempt), AttemptRuns()).committed_spills = spills
        for key in [key for key in self.attempts if key[0] == task and key[1] != attempt]:
            self.drop(*key)

    def drop(self, task: int, attempt: int) -> None:
        """Forget every run of a failed or superseded attempt."""
        attempt_runs = self.attempts.pop((task, attempt), None)
        if attempt_runs is None:
            return
        for run in attempt_runs.runs.values():
            self._release(run)
            self.dropped_runs += 1

    def missing(self, num_maps: int) -> int:
        """How many map tasks are not yet committed with all their runs received."""
        missing = 0
        for task in range(num_maps):
            attempt = self.committed.get(task)
            if attempt is None:
                missing += 1
                continue
            runs = self.attempts[(task, attempt)]
            if runs.committed_spills is None or len(runs.runs) < runs.committed_spills:
                missing += 1
        return missing

    def committed_runs(self) -> list[StoredRun]:
        return [
            run
            for (task, attempt), attempt_runs in sorted(self.attempts.items())
            if self.committed.get(task) == attempt
            for run in sorted(attempt_runs.runs.values(), key=lambda run: run.seq)
        ]

    def sorted_pairs(self) -> Iterator[tuple[Any, Any]]:
        """All committed pairs in key order (stable by map task, then spill order)."""
        runs = self.committed_runs()
        order = combined_order(run.order_tag for run in runs)
        in_memory = [run.data for run in runs if run.data is not None]
        on_disk = [run.path for run in runs if run.path is not None]
        while len(on_disk) > self.fan_in:
            batch, on_disk = on_disk[: self.fan_in], on_disk[self.fan_in :]
            on_disk.append(self._merge_files(batch, order))
        streams: list[Any] = [iter_run_file(path) for path in on_disk]
        if in_memory:
            streams.insert(0, sort_runs_in_memory(in_memory, order))
        return merge_runs(streams, order) if streams else iter(())

    def close(self) -> None:
        """Delete every run file this store wrote."""
        for attempt_runs in self.attempts.values():
            for run in attempt_runs.runs.values():
                self._release(run)
        self.attempts.clear()

    def _merge_files(self, paths: list[Path], order: Any) -> Path:
        target = self._next_path("merged")
        writer = RunWriter(target)
        for key, value in merge_runs([iter_run_file(path) for path in paths], order):
            writer.add(key, value)
        self.disk_bytes += writer.close()
        return target

    def _evict(self) -> None:
        """Write in-memory runs to disk, largest first, until memory is under half the limit."""
        in_memory = [run for attempt in self.attempts.values() for run in attempt.runs.values() if run.data]
        in_memory.sort(key=lambda run: run.size, reverse=True)
        for run in in_memory:
            if self.memory_bytes <= self.memory_limit // 2:
                break
            path = self._next_path("run")
            with open(path, "wb") as file:
                file.write(run.data or b"")
            self.memory_bytes -= run.size
            self.disk_bytes += run.size
            run.data, run.path = None, path

    def _release(self, run: StoredRun) -> None:
        if run.data is not None:
            self.memory_bytes -= run.size
            run.data = None
        if run.path is not None:
            try:
                os.unlink(run.path)
            except FileNotFoundError:
                pass
            self.disk_bytes -= run.size
            run.path = None

    def _next_path(self, kind: str) -> Path:
        self._file_seq += 1
        return self.spill_dir / f"{kind}-{self._file_seq:06d}.run"
