"""A reducer's running summary of what it received, per map attempt, for snapshots of a built-in aggregate.

Every run of an online job carries the chunk it belongs to (``chunk``), whether it is the last run of that chunk
from its map attempt (``end``) and whether the attempt read only part of the chunk (``partial``: it resumed after a
checkpoint mid-chunk). Runs of a chunk are merged per key until the chunk ends; then the chunk's per-key state ``x``
is folded into the attempt's summary: the aggregate state and, for Sum/Count/Mean, the sums of squares and cross
products and the number of chunks the key occurred in, which the estimators need (``hop.online.estimators``). A
snapshot merges the summaries of the attempts that count (per map task: its committed attempt, else its live attempt
with the most chunks), so producing one costs the number of distinct keys per attempt, never a re-read of the runs.
Summaries of failed attempts are forgotten with them: a snapshot never includes them.

A map attempt that failed after a checkpoint leaves its spills below the checkpoint (``keep_below``) to the attempt
that resumes after them (the run store keeps them; the retry's runs say which kept segments they continue:
``resumes``, ``[[attempt, first, end], ...]``). The failed attempt's summary is then rebuilt from the store's runs
below the checkpoint (once per failure: a re-read of those runs only) and counts as part of every attempt that
resumes after it, so each kept chunk is counted exactly once. A chunk the checkpoint cut in two (its first part in
kept spills, the rest in the retry's ``partial`` runs) is counted once both parts are here, as one chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hop.aggregates import Aggregate
from hop.online.estimators import Bytes, Estimate, estimate_means, estimate_totals
from shuffle.keys import sort_keys
from shuffle.runs import iter_blocks

__all__ = ["SnapshotRow", "SnapshotState", "SnapshotTable", "estimate_kind"]

MOMENT_KINDS = {"sum": "total", "count": "total", "mean": "mean"}
"""Aggregates that carry an estimate; the others (Min, Max, ...) report their current value."""


def estimate_kind(reducer: Any) -> str | None:
    """``"total"`` or ``"mean"`` for a reduce that snapshots estimate with intervals (hop's own ``Sum``, ``Count``,
    ``Mean``), ``None`` for any other (``Min``, ``Max``, ``TopK``, a hand-written reduce): its snapshots hold the
    value so far, which no interval bounds."""
    if not isinstance(reducer, Aggregate) or type(reducer).__module__ != "hop.aggregates":
        return None
    return MOMENT_KINDS.get(reducer.name)


@dataclass
class _Summary:
    """What one map attempt contributed: chunks completed, per-key state and per-key second moments."""

    chunks: set[int] = field(default_factory=set)
    state: dict[Any, Any] = field(default_factory=dict)
    moments: dict[Any, Any] = field(default_factory=dict)
    pending: dict[int, dict[Any, Any]] = field(default_factory=dict)
    """Chunks whose last run has not arrived: their per-key state so far."""
    tails: dict[int, dict[Any, Any]] = field(default_factory=dict)
    """Partial chunks (the attempt resumed in their middle): the rest after the kept spills' part, per key."""
    runs: dict[int, tuple[int, bool, bool]] = field(default_factory=dict)
    """Every run received, by spill seq: (chunk, end, partial), to rebuild a failed attempt's kept part."""
    limit: int | None = None
    """A failed attempt's checkpoint: only its runs below this seq count (they are kept for a retry)."""
    resumes: tuple[tuple[int, int, int], ...] = ()
    """The kept segments ``(attempt, first, end)`` of failed attempts this attempt resumes after."""


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
        read_run: Callable[[int, int, int], bytes | None] | None = None,
        values: bool = True,
        chunk_sizes: Sequence[int] | None = None,
    ) -> None:
        """``values=False``: follow which chunks the runs complete, never reading their records (the coverage of a
        hand-written reduce's snapshot; its groups and values come from the run store). ``chunk_sizes``: every
        chunk's bytes, by chunk id, which Sum and Count estimates scale by (``None``: chunks of one size)."""
        self.aggregate = aggregate
        self.values = values
        self.read_run = read_run
        """(task, attempt, seq) -> a received run's bytes (the run store's): rebuilds a failed attempt's kept part."""
        self.kind = estimate_kind(aggregate)
        self.chunk_strata = chunk_strata
        self.stratum_sizes: dict[str, int] = {}
        for stratum in chunk_strata:
            self.stratum_sizes[stratum] = self.stratum_sizes.get(stratum, 0) + 1
        self.chunk_sizes: Sequence[int] = chunk_sizes if chunk_sizes is not None else [1] * len(chunk_strata)
        if len(self.chunk_sizes) != len(chunk_strata):
            raise ValueError(f"{len(self.chunk_sizes)} chunk sizes for {len(chunk_strata)} chunks")
        self.stratum_bytes: dict[str, int] = {}
        for stratum, size in zip(chunk_strata, self.chunk_sizes, strict=True):
            self.stratum_bytes[stratum] = self.stratum_bytes.get(stratum, 0) + size
        self.key_stratum = key_stratum
        self.confidence = confidence
        self.attempts: dict[tuple[int, int], _Summary] = {}
        self.committed: dict[int, int] = {}

    # Events mirrored from the run store. ---------------------------------------------------------------------
    def add_run(
        self,
        task: int,
        attempt: int,
        seq: int,
        data: bytes,
        chunk: int,
        end: bool,
        partial: bool = False,
        resumes: Sequence[Sequence[int]] = (),
    ) -> None:
        """One run of ``attempt`` of map ``task`` (spill ``seq``); ``resumes`` as the run's header says."""
        for kept_attempt, _, below in resumes:  # the retry's runs may arrive before the failure notice
            self.keep(task, kept_attempt, below)
        summary = self.attempts.get((task, attempt))
        if summary is None:
            summary = self.attempts[(task, attempt)] = _Summary(resumes=_segments(resumes))
        if (summary.limit is not None and seq >= summary.limit) or seq in summary.runs:
            return  # past a failed attempt's checkpoint (the retry redoes it), or a resend
        summary.runs[seq] = (chunk, end, partial)
        self._add(summary, data, chunk, end, partial)

    def _add(self, summary: _Summary, data: bytes, chunk: int, end: bool, partial: bool) -> None:
        pending = summary.pending.setdefault(chunk, {})
        merge = self.aggregate.merge
        get = pending.get
        for keys, values in iter_blocks(data) if self.values else ():
            for key, value in zip(keys, values, strict=True):
                old = get(key)
                pending[key] = value if old is None else merge(old, value)
        if end:
            chunk_values = summary.pending.pop(chunk)
            if partial:
                summary.tails[chunk] = chunk_values  # counted with the kept part (see _stitched)
            else:
                self._fold_chunk(summary, chunk, chunk_values)

    def commit(self, task: int, attempt: int, segments: Sequence[Sequence[int]] = ()) -> None:
        """``attempt`` committed, resuming after the kept ``segments``; every other attempt of the task is dropped."""
        self.committed[task] = attempt
        for kept_attempt, _, below in segments:
            self.keep(task, kept_attempt, below)
        summary = self.attempts.setdefault((task, attempt), _Summary())
        summary.resumes = summary.resumes or _segments(segments)
        lineage = {attempt, *(kept_attempt for kept_attempt, _, _ in summary.resumes)}
        for key in [key for key in self.attempts if key[0] == task and key[1] not in lineage]:
            self.drop(*key)

    def keep(self, task: int, attempt: int, below: int) -> None:
        """``attempt`` failed after a checkpoint: from now on it stands for its runs below ``below`` only, kept for
        the attempt that resumes after them (rebuilt from the store's copies of those runs, once)."""
        summary = self.attempts.get((task, attempt))
        if summary is not None and summary.limit == below:
            return
        kept = _Summary(resumes=summary.resumes if summary is not None else (), limit=below)
        if summary is not None:
            for seq in sorted(seq for seq in summary.runs if seq < below):
                data = self.read_run(task, attempt, seq) if self.read_run is not None else None
                if data is None:
                    continue  # not in the store: the kept part stays incomplete (no chunk is cut in two with it)
                kept.runs[seq] = summary.runs[seq]
                self._add(kept, data, *summary.runs[seq])
        self.attempts[(task, attempt)] = kept

    def drop(self, task: int, attempt: int) -> None:
        """A failed, lost or superseded attempt: its contribution leaves every later snapshot."""
        self.attempts.pop((task, attempt), None)
        if self.committed.get(task) == attempt:
            del self.committed[task]

    def lineage(self, task: int, attempt: int) -> list[int]:
        """The attempts whose runs make up ``attempt``'s output: the kept ones it resumes after, then itself."""
        summary = self.attempts.get((task, attempt))
        return [*(kept for kept, _, _ in summary.resumes), attempt] if summary is not None else [attempt]

    # Snapshots. ----------------------------------------------------------------------------------------------
    def _fold_chunk(self, summary: _Summary, chunk: int, values: dict[Any, Any]) -> None:
        summary.chunks.add(chunk)
        size = self.chunk_sizes[chunk]
        state, moments, merge = summary.state, summary.moments, self.aggregate.merge
        for key, x in values.items():
            old = state.get(key)
            state[key] = x if old is None else merge(old, x)
            # Besides the squares, the chunks the key occurred in (its interval's degrees of freedom) and, for a
            # total, the sum of its contributions times their chunk's bytes (the ratio estimator's residuals).
            if self.kind == "total" and isinstance(x, int | float):
                q, occurred, cross = moments.get(key, (0, 0, 0))
                moments[key] = (q + x * x, occurred + 1, cross + x * size)
            elif self.kind == "mean":
                count, total = x
                qxx, qxy, qyy, occurred = moments.get(key, (0, 0, 0, 0))
                moments[key] = (qxx + count * count, qxy + count * total, qyy + total * total, occurred + 1)

    def counted(self) -> list[_Summary]:
        """The summaries a snapshot includes: per map task its committed attempt's, else those of its live attempt
        with the most chunks; each with the kept parts it resumes after and the chunks stitched across them."""
        best: dict[int, tuple[int, list[_Summary]]] = {}
        for task, attempt in self.attempts:
            committed = self.committed.get(task)
            if committed is not None and committed != attempt:
                continue
            pieces = self._pieces(task, attempt)
            chunks = sum(len(piece.chunks) for piece in pieces)  # disjoint: a chunk is in one piece only
            current = best.get(task)
            if current is None or committed == attempt or chunks > current[0]:
                best[task] = (chunks, pieces)
        return [piece for _, pieces in best.values() for piece in pieces]

    def _pieces(self, task: int, attempt: int) -> list[_Summary]:
        """``attempt``'s summary after those of the kept segments it resumes after (those still here), and a
        summary of the chunks cut in two by a checkpoint whose parts are all here."""
        summary = self.attempts[(task, attempt)]
        pieces = [self.attempts[(task, kept)] for kept, _, _ in summary.resumes if (task, kept) in self.attempts]
        pieces.append(summary)
        stitched = self._stitched(summary.resumes, pieces)
        return pieces if stitched is None else [*pieces, stitched]

    def _stitched(self, segments: tuple[tuple[int, int, int], ...], pieces: list[_Summary]) -> _Summary | None:
        """Chunks cut by a checkpoint: the kept part is pending in a kept summary, the rest is a later piece's tail.
        Counted only once every kept run arrived (else a late kept run could still belong to the chunk)."""
        if not any(piece.tails for piece in pieces):
            return None
        if len(pieces) != len(segments) + 1 or any(
            any(seq not in piece.runs for seq in range(first, end))
            for piece, (_, first, end) in zip(pieces, segments, strict=False)
        ):
            return None
        done = set().union(*(piece.chunks for piece in pieces))
        stitched = _Summary()
        merge = self.aggregate.merge
        for position, piece in enumerate(pieces):
            for chunk, tail in piece.tails.items():
                parts = [earlier.pending[chunk] for earlier in pieces[:position] if chunk in earlier.pending]
                if chunk in done or not parts:
                    continue  # wholly in a kept spill (the retry re-sent an empty rest), or no kept part
                values: dict[Any, Any] = {}
                for part in [*parts, tail]:
                    for key, value in part.items():
                        old = values.get(key)
                        values[key] = value if old is None else merge(old, value)
                self._fold_chunk(stitched, chunk, values)
                done.add(chunk)
        return stitched if stitched.chunks else None

    def seen_chunks(self) -> set[int]:
        return set().union(*(summary.chunks for summary in self.counted()))

    def strata_seen(self, chunks: set[int]) -> dict[str, int]:
        seen = dict.fromkeys(self.stratum_sizes, 0)
        for chunk in chunks:
            seen[self.chunk_strata[chunk]] += 1
        return seen

    def table(self) -> SnapshotTable:
        """Every group seen so far with its current value and estimate, in no particular order (estimates are
        computed for all groups at once)."""
        summaries = self.counted()
        chunks = set().union(*(summary.chunks for summary in summaries))
        seen = self.strata_seen(chunks)
        total_seen, total_chunks = len(chunks), len(self.chunk_strata)
        state: dict[Any, Any] = {}
        moments: dict[Any, Any] = {}
        merge = self.aggregate.merge
        inline_sum = self.aggregate.inline_sum
        for summary in summaries:
            get = state.get
            for key, value in summary.state.items():
                old = get(key)
                state[key] = value if old is None else (old + value if inline_sum else merge(old, value))
            for key, value in summary.moments.items():
                old = moments.get(key)
                moments[key] = value if old is None else _add(old, value)
        keys = list(state)
        states = [state[key] for key in keys]
        n: list[int] = []
        big_n: list[int] = []
        # Per stratum (None: the whole input) the bytes seen, their squares and all its bytes.
        strata_bytes: dict[str | None, tuple[float, float, float]] = {None: (0, 0, sum(self.chunk_sizes))}
        for name, size in self.stratum_bytes.items():
            strata_bytes[name] = (0, 0, size)
        for chunk in chunks:
            size = self.chunk_sizes[chunk]
            for scope in (None, self.chunk_strata[chunk]):
                seen_bytes, byte_squares, all_bytes = strata_bytes[scope]
                strata_bytes[scope] = (seen_bytes + size, byte_squares + size * size, all_bytes)
        key_strata: list[str | None] = []
        if self.key_stratum is None:
            n, big_n = [total_seen] * len(keys), [total_chunks] * len(keys)
            key_strata = [None] * len(keys)
        else:
            for key in keys:
                stratum = self.key_stratum(key)
                # As the engine takes ``str(input_stratum(path))``: a job whose two methods both return the hour as
                # an int matched no stratum and was estimated unstratified (scaled by overall progress) silently.
                stratum = None if stratum is None else str(stratum)
                if stratum is not None and stratum in self.stratum_sizes:
                    n.append(seen[stratum])
                    big_n.append(self.stratum_sizes[stratum])
                    key_strata.append(stratum)
                else:
                    n.append(total_seen)
                    big_n.append(total_chunks)
                    key_strata.append(None)
        finish = self.aggregate.finish
        values = states if inline_sum else [finish(value) for value in states]
        finals = [a == b for a, b in zip(n, big_n, strict=True)]
        nothing: list[float | None] = [None] * len(keys)
        table = SnapshotTable(keys, values, list(nothing), list(nothing), list(nothing), finals)
        estimable = [i for i in range(len(keys)) if n[i] > 0]
        if self.kind == "total":
            estimable = [i for i in estimable if isinstance(states[i], int | float)]
            if estimable:
                table.fill(
                    estimable,
                    *estimate_totals(
                        [states[i] for i in estimable],
                        [moments.get(keys[i], (0, 0, 0))[0] for i in estimable],
                        [n[i] for i in estimable],
                        [big_n[i] for i in estimable],
                        self.confidence,
                        [moments.get(keys[i], (0, 0, 0))[1] for i in estimable],
                        [Bytes(moments.get(keys[i], (0, 0, 0))[2], *strata_bytes[key_strata[i]]) for i in estimable],
                    ),
                )
                # An exact total is the final value: the output's type (an int Sum or Count stays an int, as in
                # the final part files); only a scaled estimate is a float.
                for i in estimable:
                    if finals[i] and isinstance(states[i], int):
                        table.estimates[i] = table.lows[i] = table.highs[i] = states[i]
        elif self.kind == "mean" and estimable:
            table.fill(
                estimable,
                *estimate_means(
                    [(*states[i], *moments.get(keys[i], (0, 0, 0, 0))[:3]) for i in estimable],
                    [n[i] for i in estimable],
                    [big_n[i] for i in estimable],
                    self.confidence,
                    [moments.get(keys[i], (0, 0, 0, 0))[3] for i in estimable],
                ),
            )
        return table

    def rows(self) -> Iterator[SnapshotRow]:
        """:meth:`table` row by row."""
        table = self.table()
        return (table.row(i) for i in range(len(table)))


@dataclass
class SnapshotTable:
    """A snapshot as columns: per group its key, current value, estimate, interval bounds and finality."""

    keys: list[Any]
    values: list[Any]
    estimates: list[float | None]
    lows: list[float | None]
    highs: list[float | None]
    finals: list[bool]

    @classmethod
    def from_rows(cls, rows: list[SnapshotRow]) -> SnapshotTable:
        table = cls([], [], [], [], [], [])
        for row in rows:
            estimate = row.estimate
            table.keys.append(row.key)
            table.values.append(row.value)
            table.estimates.append(estimate.value if estimate is not None else None)
            table.lows.append(estimate.low if estimate is not None else None)
            table.highs.append(estimate.high if estimate is not None else None)
            table.finals.append(row.final)
        return table

    def __len__(self) -> int:
        return len(self.keys)

    def fill(
        self,
        positions: list[int],
        estimates: list[float],
        lows: list[float | None],
        highs: list[float | None],
        finals: list[bool],
    ) -> None:
        for position, estimate, low, high, final in zip(positions, estimates, lows, highs, finals, strict=True):
            self.estimates[position], self.lows[position], self.highs[position] = estimate, low, high
            self.finals[position] = final

    def row(self, i: int) -> SnapshotRow:
        estimate = self.estimates[i]
        return SnapshotRow(
            self.keys[i],
            self.values[i],
            None if estimate is None else Estimate(estimate, self.lows[i], self.highs[i], self.finals[i]),
            self.finals[i],
        )

    def sorted(self) -> SnapshotTable:
        """The rows in the engine's key order (rows of one key keep their order)."""
        try:
            index = {key: i for i, key in enumerate(self.keys)}
        except TypeError:  # an unhashable key from a hand-written reduce: leave the order as it is
            return self
        if len(index) == len(self.keys):  # one row per key (an aggregate's table): no lists of positions
            ordered_keys, _ = sort_keys(list(index))
            order = list(map(index.__getitem__, ordered_keys))
        else:
            positions: dict[Any, list[int]] = {}
            for i, key in enumerate(self.keys):
                positions.setdefault(key, []).append(i)
            ordered_keys, _ = sort_keys(list(positions))
            order = [i for key in ordered_keys for i in positions[key]]
        return SnapshotTable(
            [self.keys[i] for i in order],
            [self.values[i] for i in order],
            [self.estimates[i] for i in order],
            [self.lows[i] for i in order],
            [self.highs[i] for i in order],
            [self.finals[i] for i in order],
        )


def _segments(segments: Sequence[Sequence[int]]) -> tuple[tuple[int, int, int], ...]:
    return tuple((int(a), int(first), int(end)) for a, first, end in segments)


def _add(a: Any, b: Any) -> Any:
    if isinstance(a, tuple):
        return tuple(x + y for x, y in zip(a, b, strict=True))
    return a + b
