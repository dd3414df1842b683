"""A reducer's running summary of what it received, per map attempt, for snapshots of a built-in aggregate.

Every run of an online job carries the chunk it belongs to (``chunk``), whether it is the last run of that chunk
from its map attempt (``end``) and whether the attempt read only part of the chunk (``partial``: it resumed after a
checkpoint mid-chunk). Runs of a chunk are merged per key until the chunk ends; then the chunk's per-key state ``x``
is folded into the attempt's summary: the aggregate state and, for Sum/Count/Mean, the sums of squares and cross
products the estimators need (``hop.online.estimators``). A snapshot merges the summaries of the attempts that
count (per map task: its committed attempt, else its live attempt with the most chunks), so producing one costs
the number of distinct keys per attempt, never a re-read of the runs. Summaries of failed attempts are forgotten
with them: a snapshot never includes them. Partial chunks are left out (their data is in the final result).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hop.aggregates import Aggregate
from hop.online.estimators import Estimate, estimate_mean, estimate_total
from shuffle.runs import iter_blocks

__all__ = ["SnapshotRow", "SnapshotState"]

MOMENT_KINDS = {"sum": "total", "count": "total", "mean": "mean"}
"""Aggregates that carry an estimate; the others (Min, Max, ...) report their current value."""


@dataclass
class _Summary:
    """What one map attempt contributed: chunks completed, per-key state and per-key second moments."""

    chunks: set[int] = field(default_factory=set)
    state: dict[Any, Any] = field(default_factory=dict)
    moments: dict[Any, Any] = field(default_factory=dict)
    pending: dict[int, dict[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class SnapshotRow:
    """One group in a snapshot: its key, current finished value and (for estimating aggregates) the estimate."""

    key: Any
    value: Any
    estimate: Estimate | None
    final: bool
    """Every chunk of the group's stratum has been seen: the value can no longer change."""


class SnapshotState:
    """Per-attempt summaries for one reduce partition (see the module docstring)."""

    def __init__(
        self,
        aggregate: Aggregate,
        chunk_strata: list[str],
        key_stratum: Callable[[Any], str | None] | None = None,
        confidence: float = 0.95,
    ) -> None:
        self.aggregate = aggregate
        self.kind = MOMENT_KINDS.get(aggregate.name) if type(aggregate).__module__ == "hop.aggregates" else None
        self.chunk_strata = chunk_strata
        self.stratum_sizes: dict[str, int] = {}
        for stratum in chunk_strata:
            self.stratum_sizes[stratum] = self.stratum_sizes.get(stratum, 0) + 1
        self.key_stratum = key_stratum
        self.confidence = confidence
        self.attempts: dict[tuple[int, int], _Summary] = {}
        self.committed: dict[int, int] = {}

    # Events mirrored from the run store. ---------------------------------------------------------------------
    def add_run(self, task: int, attempt: int, data: bytes, chunk: int, end: bool, partial: bool = False) -> None:
        summary = self.attempts.setdefault((task, attempt), _Summary())
        pending = summary.pending.setdefault(chunk, {})
        merge = self.aggregate.merge
        get = pending.get
        for keys, values in iter_blocks(data):
            for key, value in zip(keys, values, strict=True):
                old = get(key)
                pending[key] = value if old is None else merge(old, value)
        if end:
            chunk_values = summary.pending.pop(chunk)
            if not partial:
                self._fold_chunk(summary, chunk, chunk_values)

    def commit(self, task: int, attempt: int) -> None:
        self.committed[task] = attempt

    def drop(self, task: int, attempt: int) -> None:
        """A failed, lost or superseded attempt: its contribution leaves every later snapshot."""
        self.attempts.pop((task, attempt), None)
        if self.committed.get(task) == attempt:
            del self.committed[task]

    # Snapshots. ----------------------------------------------------------------------------------------------
    def _fold_chunk(self, summary: _Summary, chunk: int, values: dict[Any, Any]) -> None:
        summary.chunks.add(chunk)
        state, moments, merge = summary.state, summary.moments, self.aggregate.merge
        for key, x in values.items():
            old = state.get(key)
            state[key] = x if old is None else merge(old, x)
            if self.kind == "total" and isinstance(x, int | float):
                moments[key] = moments.get(key, 0) + x * x
            elif self.kind == "mean":
                count, total = x
                qxx, qxy, qyy = moments.get(key, (0, 0, 0))
                moments[key] = (qxx + count * count, qxy + count * total, qyy + total * total)

    def counted(self) -> list[_Summary]:
        """The summaries a snapshot includes: per map task its committed attempt, else its best live attempt."""
        best: dict[int, tuple[int, _Summary]] = {}
        for (task, attempt), summary in self.attempts.items():
            committed = self.committed.get(task)
            if committed is not None and committed != attempt:
                continue
            current = best.get(task)
            if current is None or (committed == attempt) or len(summary.chunks) > len(current[1].chunks):
                best[task] = (attempt, summary)
        return [summary for _, summary in best.values()]

    def seen_chunks(self) -> set[int]:
        return set().union(*(summary.chunks for summary in self.counted()))

    def strata_seen(self, chunks: set[int]) -> dict[str, int]:
        seen = dict.fromkeys(self.stratum_sizes, 0)
        for chunk in chunks:
            seen[self.chunk_strata[chunk]] += 1
        return seen

    def rows(self) -> Iterator[SnapshotRow]:
        """Every group seen so far with its current value and estimate, in no particular order."""
        summaries = self.counted()
        chunks = set().union(*(summary.chunks for summary in summaries))
        seen = self.strata_seen(chunks)
        total_seen, total_chunks = len(chunks), len(self.chunk_strata)
        state: dict[Any, Any] = {}
        moments: dict[Any, Any] = {}
        merge = self.aggregate.merge
        for summary in summaries:
            for key, value in summary.state.items():
                old = state.get(key)
                state[key] = value if old is None else merge(old, value)
            for key, value in summary.moments.items():
                old = moments.get(key)
                moments[key] = value if old is None else _add(old, value)
        finish = self.aggregate.finish
        for key, value in state.items():
            stratum = self.key_stratum(key) if self.key_stratum is not None else None
            if stratum is not None and stratum in self.stratum_sizes:
                n, big_n = seen[stratum], self.stratum_sizes[stratum]
            else:
                n, big_n = total_seen, total_chunks
            estimate = self._estimate(value, moments.get(key), n, big_n)
            yield SnapshotRow(key, finish(value), estimate, n == big_n)

    def _estimate(self, state: Any, moment: Any, seen: int, chunks: int) -> Estimate | None:
        if seen == 0 or chunks == 0:
            return None
        if self.kind == "total" and isinstance(state, int | float):
            return estimate_total(state, moment or 0, seen, chunks, self.confidence)
        if self.kind == "mean":
            count, total = state
            qxx, qxy, qyy = moment or (0, 0, 0)
            return estimate_mean(count, total, qxx, qxy, qyy, seen, chunks, self.confidence)
        return None  # Min, Max and user aggregates: the current value, final once the stratum is complete


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, tuple):
        return tuple(x + y for x, y in zip(a, b, strict=True))
    return a + b
