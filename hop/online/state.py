"""A reducer's running summary of what it received, per map attempt, for snapshots of a built-in aggregate.

Every run of an online job carries the chunk it belongs to (``chunk``), whether it is the last run of that chunk
from its map attempt (``end``) and whether the attempt read only part of the chunk (``partial``: it resumed after a
checkpoint mid-chunk). Runs of a chunk are merged per key until the chunk ends; then the chunk's per-key state ``x``
is folded into the attempt's summary: the aggregate state and, for Sum/Count/Mean, the sums of squares and cross
products (and of third powers for Sum/Mean, for their intervals' skewness) and the number of chunks the key
occurred in, which the estimators need (``hop.online.estimators``): per chunk and key, never per record. A
snapshot merges the summaries of the attempts that count (per map task: its committed attempt, else its live attempt
with the most chunks), so producing one costs the number of distinct keys per attempt, never a re-read of the runs.
Summaries of failed attempts are forgotten with them: a snapshot never includes them. The other attempts of a
committed map task are forgotten when the run store drops their runs (:meth:`SnapshotState.settle`), once the
committed attempt's runs are all here: until then it may yet be lost, and a rerun's runs that came early count.

Memory: the summaries hold at most ``max_keys`` keys between them (half the reducer's budget at the cost of a key,
measured as chunks are folded: ``SUMMARY_BYTES_PER_KEY`` at least); past that the largest summary's keys are written
to disk as one sorted run (its state and moments per key) and it starts afresh. A snapshot
(:meth:`SnapshotState.batches`) merges every counted summary's sorted runs and its in-memory keys (sorted as it
reaches them) in key order, folds each key's pieces in the order the whole-table merge folded them and computes the
estimates a batch of keys at a time, so it holds one block per stream and one batch of rows, never a table of every
group. A key whose state was written out part by part is folded from those parts (``merge`` is associative: the same
value; a float sum may differ in its last bits from one folded in one go).

A map attempt that failed after a checkpoint leaves its spills below the checkpoint (``keep_below``) to the attempt
that resumes after them (the run store keeps them; the retry's runs say which kept segments they continue:
``resumes``, ``[[attempt, first, end], ...]``). The failed attempt's summary is then rebuilt from the store's runs
below the checkpoint (once per failure: a re-read of those runs only) and counts as part of every attempt that
resumes after it, so each kept chunk is counted exactly once. A chunk the checkpoint cut in two (its first part in
kept spills, the rest in the retry's ``partial`` runs) is counted once both parts are here, as one chunk.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hop.aggregates import Aggregate
from hop.online.estimators import Bytes, Estimate, estimate_means, estimate_totals
from shuffle.buffer import KeyCost, state_bytes
from shuffle.keys import combined_order, sort_keys
from shuffle.merge import group_sorted, merge_runs
from shuffle.runs import RunWriter, iter_blocks, iter_run_file_blocks

__all__ = ["SnapshotRow", "SnapshotState", "SnapshotTable", "estimate_kind", "summary_keys"]

SUMMARY_BYTES_PER_KEY = 320
"""Least memory one key costs in an attempt's summary: the key, its entry (state and moments, one tuple) and a
dict slot (measured when state and moments were apart, in two dicts: 2,000,000 word keys of a Sum took about 600 MB
in the summaries of 2 map attempts, about 300 bytes a key; in one tuple, with tracemalloc, 100,000 keys in 2
chunks: a Sum of ints 424 -> 393 bytes a key with its third powers, a Mean 441 -> 410). Larger states (``TopK``'s
values, ``CountDistinct``'s) are measured as chunks are folded."""

THIRDS_BYTES_PER_KEY = 128
"""What a Sum's or a Mean's third-power moments add to a key (:attr:`SnapshotState.skewed`): 3 or 4 more numbers
in a longer tuple (measured with tracemalloc, 100,000 keys in 2 chunks: a Sum of ints 297 -> 421 bytes a key, of
floats 272 -> 367, a Mean 367 -> 502), counted in the floor so the summaries keep to their share of the budget."""


def summary_keys(memory_limit: int, key_bytes: int = SUMMARY_BYTES_PER_KEY) -> int:
    """The keys the summaries may hold in memory under a reducer's ``memory_limit`` at ``key_bytes`` a key: half of
    it (the run store keeps the rest of its runs on disk meanwhile), at least 1024."""
    return max(1024, memory_limit // (2 * key_bytes))


MAX_SUMMARY_DUMPS = 8
"""Sorted runs one summary may have on disk before they are merged into one, which rewrites all its keys. A
snapshot streaming more runs than the budget allows merges them in passes first (:meth:`SnapshotState.batches`),
which it does again each time. The word count of 2,000,000 distinct words (docs/online.md): at 4 the job took 67 s
(50 s without the bound) and a snapshot 11 s; at 16, 51 s and 14 s; at 8, 50 s and 11 s."""

SUMMARY_BLOCK_RECORDS = 2048
"""Keys per block of a summary written to disk: a decoded block of keys with their states and moments takes about
``SUMMARY_BYTES_PER_KEY`` a key, and a snapshot holds one per run it streams (600 KB each, where 8192 keys took
2.4 MB)."""

_NO_COUNT: tuple[int, ...] = (0, 0, 0)
"""A Count's moments before its first chunk: ``sum x²``, chunks occurred in, ``sum x b`` (``x`` its per-chunk
contribution, ``b`` the chunk's bytes)."""
_NO_SUM: tuple[int, ...] = (0, 0, 0, 0, 0, 0)
"""A Sum's: a Count's, then ``sum x³``, ``sum x² b``, ``sum x b²`` (its interval's skewness)."""
_NO_MEAN = (0, 0, 0, 0, 0, 0, 0, 0)
"""A mean's moments before its first chunk: ``sum x²``, ``sum xy``, ``sum y²``, chunks occurred in, ``sum x³``,
``sum x² y``, ``sum x y²``, ``sum y³`` (``x`` its per-chunk count, ``y`` sum)."""
_NO_COUNT_ENTRY, _NO_SUM_ENTRY, _NO_MEAN_ENTRY = ((None, *moments) for moments in (_NO_COUNT, _NO_SUM, _NO_MEAN))
"""A key's entry in a summary before its first chunk: no state yet (``None``), then no moments."""

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
    """What one map attempt contributed: chunks completed, per-key state and per-key moments."""

    chunks: set[int] = field(default_factory=set)
    state: dict[Any, Any] = field(default_factory=dict)
    """Per key its state or, for an estimating aggregate (:attr:`SnapshotState.kind`), its state followed by its
    moments in one tuple: one lookup and one store a key per chunk folded, where a dict of states and one of
    moments took two of each (a third of a reducer's fold of a word count's chunks)."""
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
    dumps: list[Path] = field(default_factory=list)
    """Sorted runs of ``(key, entry)`` (as in :attr:`state`) written out when the summaries held too many keys,
    oldest first; ``state`` holds the keys added since."""
    dump_tags: list[str] = field(default_factory=list)
    """The order tag of each dump's keys."""


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
        spill_path: Callable[[], Path] | None = None,
        memory_limit: int | None = None,
    ) -> None:
        """``values=False``: follow which chunks the runs complete, never reading their records (the coverage of a
        hand-written reduce's snapshot; its groups and values come from the run store). ``chunk_sizes``: every
        chunk's bytes, by chunk id, which Sum and Count estimates scale by (``None``: chunks of one size).
        ``spill_path`` names a new file for a summary written to disk once the summaries hold more than ``max_keys``
        keys, about half of ``memory_limit`` at the size of their keys and states (``None``: never written out)."""
        self.aggregate = aggregate
        self.values = values
        self.read_run = read_run
        """(task, attempt, seq) -> a received run's bytes (the run store's): rebuilds a failed attempt's kept part."""
        self.kind = estimate_kind(aggregate)
        self.nonnegative = self.kind is not None and bool(getattr(aggregate, "nonnegative", False))
        """A ``Sum(nonnegative=True)`` (its intervals start no lower than the sum so far: :func:`_floor_lows`) or a
        ``Mean(nonnegative=True)`` (no lower than 0)."""
        self.negative: tuple[Any, Any] | None = None
        """The first ``(key, contribution)`` of a chunk that broke the ``nonnegative`` declaration: every snapshot
        from then on fails naming it (its floors would rest on a false premise)."""
        self.skewed = self.kind == "mean" or (self.kind == "total" and aggregate.name == "sum")
        """The moments carry third powers, for an interval corrected for skewness (a Sum's or a Mean's)."""
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
        self.spill_path = spill_path
        self.memory_limit = memory_limit
        floor = SUMMARY_BYTES_PER_KEY + (THIRDS_BYTES_PER_KEY if self.skewed else 0)
        self.max_keys = summary_keys(memory_limit, floor) if memory_limit is not None else None
        self._key_cost = KeyCost(floor)
        """One key's cost in a summary, from a key sampled per chunk folded (:meth:`_resize_budget`)."""
        self.dumped_keys = 0
        """Keys written to disk over the state's life (a measure of how often the budget was reached)."""
        self.compactions = 0
        """Times a summary's runs on disk were merged into one."""
        self.max_dumps = MAX_SUMMARY_DUMPS

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
        if end:
            self._bound()

    def _add(self, summary: _Summary, data: bytes, chunk: int, end: bool, partial: bool) -> None:
        pending = summary.pending.setdefault(chunk, {})
        merge = self.aggregate.merge
        get = pending.get
        for keys, values in iter_blocks(data) if self.values else ():
            # A run holds each key once (a map's spill is folded by key), and a chunk is mostly one run: its
            # blocks are taken whole, in C, unless a key is in them twice or already pending.
            block = dict(zip(keys, values, strict=True))
            if len(block) == len(keys) and pending.keys().isdisjoint(block):
                if pending:
                    pending.update(block)
                else:
                    summary.pending[chunk] = pending = block
                    get = pending.get
                continue
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
        """``attempt`` committed, resuming after the kept ``segments``: snapshots count it for ``task`` from now on.
        The other attempts stay until :meth:`settle` (as the run store keeps their runs until the committed
        attempt's are all here: one may be the rerun of this attempt, lost with its worker before they were)."""
        self.committed[task] = attempt
        for kept_attempt, _, below in segments:
            self.keep(task, kept_attempt, below)
        summary = self.attempts.setdefault((task, attempt), _Summary())
        summary.resumes = summary.resumes or _segments(segments)

    def settle(self, task: int, attempt: int) -> None:
        """The committed ``attempt``'s runs are all here (``RunStore.settled``): every other attempt of ``task`` is
        dropped, but the kept ones it resumes after."""
        lineage = set(self.lineage(task, attempt))
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
        if summary is not None:
            _delete_dumps(summary)
        self.attempts[(task, attempt)] = kept
        self._bound()

    def drop(self, task: int, attempt: int) -> None:
        """A failed, lost or superseded attempt: its contribution leaves every later snapshot."""
        summary = self.attempts.pop((task, attempt), None)
        if summary is not None:
            _delete_dumps(summary)
        if self.committed.get(task) == attempt:
            del self.committed[task]

    def lineage(self, task: int, attempt: int) -> list[int]:
        """The attempts whose runs make up ``attempt``'s output: the kept ones it resumes after, then itself."""
        summary = self.attempts.get((task, attempt))
        return [*(kept for kept, _, _ in summary.resumes), attempt] if summary is not None else [attempt]

    # Snapshots. ----------------------------------------------------------------------------------------------
    def _fold_chunk(self, summary: _Summary, chunk: int, values: dict[Any, Any]) -> None:
        summary.chunks.add(chunk)
        if self.kind == "total":
            if self.nonnegative and self.negative is None:
                self._check_nonnegative(chunk, values)
            self._fold_total(summary, self.chunk_sizes[chunk], values)
        elif self.kind == "mean":
            if self.nonnegative and self.negative is None:
                self._check_nonnegative(chunk, {key: state[1] for key, state in values.items()})
            self._fold_mean(summary, values)
        else:
            _fold_states(summary.state, values, self.aggregate)
        if values and self.memory_limit is not None:
            # The chunk's middle key (in C: a few ns a key): its last is often one of its rarest, smallest.
            key = next(itertools.islice(values, len(values) // 2, None))
            entry = summary.state[key]
            self._resize_budget(key, entry if self.kind is None else entry[0])

    def _check_nonnegative(self, chunk: int, values: dict[Any, Any]) -> None:
        """Keep the first key whose contribution in ``chunk`` (a Mean's: the sum of its values) is below 0 (a
        ``nonnegative=True`` aggregate's values are not): ``min`` over the chunk's values in C, the keys looked at
        only when it is below 0. A chunk's contribution is its values' sum, so a negative value outweighed within
        its chunk goes unseen: the check is of what the floors rest on (no chunk takes the sum down), not of every
        record. Values ``<`` cannot order (no numbers) are left unchecked: they have no interval."""
        try:
            if not values or not min(values.values()) < 0:
                return
        except TypeError:
            return
        for key, x in values.items():
            if isinstance(x, _NUMBERS) and x < 0:
                self.negative = (key, x)
                return

    # One loop per kind of moments, chosen once per chunk: this is a reducer's per-key work for every chunk a key
    # occurs in (a word count's 100,000 words in 1 MB chunks: millions of keys a job), so nothing is looked up or
    # tested per key that is the same for the whole chunk.
    def _fold_total(self, summary: _Summary, size: int, values: dict[Any, Any]) -> None:
        """A Sum's or a Count's chunk: per key its state folded and, for a number, besides the squares, the chunks
        the key occurred in (its interval's degrees of freedom) and the sum of its contributions times their
        chunk's bytes (the ratio estimator's residuals), and a Sum's third powers (with the bytes: its interval's
        skewness, ``hop.online.estimators``; a Count's interval holds its level without, docs/online.md,
        Calibration). A chunk that added 0 tells no more than one without the key: it does not count as occurred
        (a Sum of mostly-zero values seen as 0 in 5 chunks had the interval [0, 0], read as exact). A value that is
        no number (a Sum of fractions) is folded into the state only."""
        entries = summary.state
        get = entries.get
        merge = None if self.aggregate.inline_sum else self.aggregate.merge
        if self.skewed:
            for key, x in values.items():
                old, q, occurred, cross, cube, square_size, size_square = get(key, _NO_SUM_ENTRY)
                state = x if old is None else old + x if merge is None else merge(old, x)
                if isinstance(x, _NUMBERS):
                    xx = x * x
                    xb = x * size
                    entries[key] = (
                        state,
                        q + xx,
                        occurred + (x != 0),
                        cross + xb,
                        cube + xx * x,
                        square_size + xx * size,
                        size_square + xb * size,
                    )
                else:
                    entries[key] = (state, q, occurred, cross, cube, square_size, size_square)
        else:
            for key, x in values.items():
                old, q, occurred, cross = get(key, _NO_COUNT_ENTRY)
                state = x if old is None else old + x if merge is None else merge(old, x)
                if isinstance(x, _NUMBERS):
                    entries[key] = (state, q + x * x, occurred + (x != 0), cross + x * size)
                else:
                    entries[key] = (state, q, occurred, cross)

    def _fold_mean(self, summary: _Summary, values: dict[Any, Any]) -> None:
        """A Mean's chunk: per key its state folded and the moments of its count ``x`` and sum ``y``."""
        entries = summary.state
        get = entries.get
        merge = self.aggregate.merge
        for key, x in values.items():
            old, qxx, qxy, qyy, occurred, xxx, xxy, xyy, yyy = get(key, _NO_MEAN_ENTRY)
            count, total = x
            xx, xy, yy = count * count, count * total, total * total
            entries[key] = (
                x if old is None else merge(old, x),
                qxx + xx,
                qxy + xy,
                qyy + yy,
                occurred + 1,
                xxx + xx * count,
                xxy + xx * total,
                xyy + xy * total,
                yyy + yy * total,
            )

    def _resize_budget(self, key: Any, state: Any) -> None:
        """Fold one sampled key's cost into the mean and set ``max_keys`` from it, as the reduce's fold map does
        (``shuffle.fold``): a fixed 320 bytes a key let ``CountDistinct`` summaries of the words following each
        word take 118 MB above a reducer's start under --reduce-memory 16MB (``bench/jobs/next_words.py``)."""
        assert self.memory_limit is not None
        # (The moments of a total's or a mean's key, a few numbers, are within the floor: it was set with them.)
        self.max_keys = summary_keys(self.memory_limit, int(self._key_cost.add(state_bytes(key, state))))

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

    # Memory. -------------------------------------------------------------------------------------------------
    def held_keys(self) -> int:
        """Keys the summaries hold in memory (their dumps on disk not counted)."""
        return sum(len(summary.state) for summary in self.attempts.values())

    def _bound(self) -> None:
        """Write the largest summaries to disk while they hold more than ``max_keys`` keys between them."""
        if self.spill_path is None or self.max_keys is None:
            return
        held = self.held_keys()
        while held > self.max_keys:
            largest = max(self.attempts.values(), key=lambda summary: len(summary.state))
            held -= len(largest.state)
            self._dump(largest)

    def _dump(self, summary: _Summary) -> None:
        assert self.spill_path is not None
        keys, tag = sort_keys(list(summary.state))
        path = self.spill_path()
        writer = RunWriter(path, SUMMARY_BLOCK_RECORDS)
        entries = summary.state
        for start in range(0, len(keys), SUMMARY_BLOCK_RECORDS):  # a block at a time: never the whole summary
            block = keys[start : start + SUMMARY_BLOCK_RECORDS]
            writer.add_block(block, list(map(entries.__getitem__, block)))
        writer.close()
        self.dumped_keys += len(keys)
        summary.dumps.append(path)
        summary.dump_tags.append(tag)
        summary.state = {}
        if len(summary.dumps) > self.max_dumps:
            self._compact(summary)

    def _compact(self, summary: _Summary) -> None:
        """Merge a summary's dumps into one, each key's pieces folded (oldest first)."""
        path = self._write_folded([iter_run_file_blocks(dump) for dump in summary.dumps], summary.dump_tags)
        tag = _merged_tag(summary.dump_tags)
        _delete_dumps(summary)
        summary.dumps, summary.dump_tags = [path], [tag]
        self.compactions += 1

    def close(self) -> None:
        """Delete every summary's files on disk."""
        for summary in self.attempts.values():
            _delete_dumps(summary)

    # Snapshots. ----------------------------------------------------------------------------------------------
    def table(self) -> SnapshotTable:
        """Every group seen so far with its current value and estimate, in key order: :meth:`batches` joined (for
        tests and small states; a snapshot streams the batches)."""
        table = SnapshotTable([], [], [], [], [], [])
        for batch in self.batches():
            table.extend(batch)
        return table

    def batches(self, size: int = SUMMARY_BLOCK_RECORDS) -> Iterator[SnapshotTable]:
        """Every group seen so far with its current value and estimate, in the engine's key order, ``size`` groups
        at a time: each counted summary's dumps and in-memory keys merged by key, a key's pieces folded in the order
        of the summaries (:meth:`counted`), then oldest dump first (the order the whole-table merge folded them),
        estimates computed per batch (they are per group)."""
        if self.negative is not None:
            key, x = self.negative
            raise ValueError(
                f"the reduce is {self.aggregate!r}, but key {key!r} added up to {x!r} in one input chunk: its values "
                "are not all nonnegative, and the intervals' lower bounds rest on that (declare "
                f"{type(self.aggregate).__name__}() instead, whose intervals assume nothing of the values)"
            )
        summaries = self.counted()
        chunks = set().union(*(summary.chunks for summary in summaries))
        seen = self.strata_seen(chunks)
        # Per stratum (None: the whole input) the bytes seen, their squares, all its bytes and the cubes seen.
        strata_bytes: dict[str | None, tuple[float, float, float, float]] = {None: (0, 0, sum(self.chunk_sizes), 0)}
        for name, size_of in self.stratum_bytes.items():
            strata_bytes[name] = (0, 0, size_of, 0)
        for chunk in chunks:
            b = self.chunk_sizes[chunk]
            for scope in (None, self.chunk_strata[chunk]):
                seen_bytes, byte_squares, all_bytes, byte_cubes = strata_bytes[scope]
                strata_bytes[scope] = (seen_bytes + b, byte_squares + b * b, all_bytes, byte_cubes + b * b * b)
        # A stratum whose every byte was read counts as whole: its chunks unread are empty (empty files), which hold
        # no record. Counted as unread, they kept every group's interval open (low -15 for an exact Sum of 12) and
        # none final in a snapshot of all the input's bytes.
        seen = {
            stratum: self.stratum_sizes[stratum] if 0 < strata_bytes[stratum][0] == strata_bytes[stratum][2] else count
            for stratum, count in seen.items()
        }
        whole = 0 < strata_bytes[None][0] == strata_bytes[None][2]
        streams: list[Iterable[list[tuple[Any, Any]]]] = []
        tags: list[str] = []
        for summary in summaries:
            streams += [iter_run_file_blocks(dump) for dump in summary.dumps]
            tags += summary.dump_tags
            if summary.state:
                keys, tag = sort_keys(list(summary.state))
                streams.append(_memory_blocks(keys, summary.state))
                tags.append(tag)
        context = _Context(len(self.chunk_strata) if whole else len(chunks), seen, strata_bytes)
        passes: list[Path] = []
        try:
            while self.max_keys is not None and self.spill_path is not None and len(streams) > self._fan_in():
                streams, tags = self._merge_pass(streams, tags, passes)
            yield from self._batched(streams, tags, context, size)
        finally:
            for path in passes:
                path.unlink(missing_ok=True)

    def _fan_in(self) -> int:
        """Streams a snapshot merges at once: a decoded block each, about as many bytes as the keys held."""
        assert self.max_keys is not None
        return max(4, self.max_keys // SUMMARY_BLOCK_RECORDS)

    def _merge_pass(
        self, streams: list[Iterable[list[tuple[Any, Any]]]], tags: list[str], passes: list[Path]
    ) -> tuple[list[Iterable[list[tuple[Any, Any]]]], list[str]]:
        """Merge consecutive streams, ``_fan_in`` at a time, into files (listed in ``passes``, deleted after the
        snapshot), each key's pieces folded in stream order: many summaries written out (a map task each) were
        streamed at once, a block each, whatever the budget."""
        fan_in = self._fan_in()
        merged: list[Iterable[list[tuple[Any, Any]]]] = []
        merged_tags: list[str] = []
        for start in range(0, len(streams), fan_in):
            group_tags = tags[start : start + fan_in]
            path = self._write_folded(streams[start : start + fan_in], group_tags)
            passes.append(path)
            merged.append(iter_run_file_blocks(path))
            merged_tags.append(_merged_tag(group_tags))
        return merged, merged_tags

    def _write_folded(self, streams: list[Iterable[list[tuple[Any, Any]]]], tags: list[str]) -> Path:
        """Merge ``streams`` of ``(key, entry)`` blocks by key into a new file of ``spill_path``, each
        key's pieces folded in stream order (:meth:`_fold_pieces`); its path."""
        assert self.spill_path is not None
        path = self.spill_path()
        writer = RunWriter(path, SUMMARY_BLOCK_RECORDS)
        for key, pieces in group_sorted(merge_runs(streams, combined_order(tags))):
            writer.add(key, list(self._fold_pieces(pieces)))
        writer.close()
        return path

    def _batched(
        self, streams: list[Iterable[list[tuple[Any, Any]]]], tags: list[str], context: _Context, size: int
    ) -> Iterator[SnapshotTable]:
        keys_batch: list[Any] = []
        entries: list[Any] = []
        for key, pieces in group_sorted(merge_runs(streams, combined_order(tags))):
            keys_batch.append(key)
            entries.append(self._fold_pieces(pieces))
            if len(keys_batch) >= size:
                yield self._estimated(keys_batch, entries, context)
                keys_batch, entries = [], []
        if keys_batch:
            yield self._estimated(keys_batch, entries, context)

    def _fold_pieces(self, pieces: Iterable[Any]) -> Any:
        """One key's entries (``_Summary.state``) folded in order: the states by the aggregate's ``merge``, the
        moments added item by item (a Sum's or a Count's state with them: its ``merge`` is ``+``)."""
        merge, add = self.aggregate.merge, operator.add
        entry: Any = None
        if self.kind is None:
            for piece in pieces:
                entry = piece if entry is None else merge(entry, piece)
        elif merge is add:
            for piece in pieces:
                entry = piece if entry is None else tuple(map(add, entry, piece))
        else:  # (a Mean's state is a pair)
            for piece in pieces:
                entry = piece if entry is None else (merge(entry[0], piece[0]), *map(add, entry[1:], piece[1:]))
        return entry

    def _estimated(self, keys: list[Any], entries: list[Any], context: _Context) -> SnapshotTable:
        """The rows of ``keys`` with their folded ``entries`` (``_Summary.state``), estimates filled. An entry's
        moments follow its state: ``entry[1:]`` are the moments ``_NO_SUM``, ``_NO_COUNT`` or ``_NO_MEAN`` name."""
        states = entries if self.kind is None else [entry[0] for entry in entries]
        total_seen, total_chunks = context.total_seen, len(self.chunk_strata)
        seen, strata_bytes = context.seen, context.strata_bytes
        n: list[int] = []
        big_n: list[int] = []
        key_strata: list[str | None] = []
        if self.key_stratum is None:
            n, big_n = [total_seen] * len(keys), [total_chunks] * len(keys)
            key_strata = [None] * len(keys)
        else:
            for key in keys:
                try:
                    stratum = self.key_stratum(key)
                except Exception as error:  # (the snapshot fails, not the task: named, or it read "KeyError: 'b'")
                    message = f"the job's key_stratum failed on key {key!r}: {type(error).__name__}: {error}"
                    raise ValueError(message) from error
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
        values = states if self.aggregate.inline_sum else [finish(value) for value in states]
        finals = [a == b for a, b in zip(n, big_n, strict=True)]
        nothing: list[float | None] = [None] * len(keys)
        table = SnapshotTable(keys, values, list(nothing), list(nothing), list(nothing), finals)
        estimable = [i for i in range(len(keys)) if n[i] > 0]
        if self.kind == "total":
            estimable = [i for i in estimable if isinstance(states[i], int | float)]
            if estimable:
                totals = [entries[i][1:] for i in estimable]  # (the moments _NO_SUM or _NO_COUNT name)
                values, crosses = [states[i] for i in estimable], [m[2] for m in totals]
                squares, cubes = [m[0] for m in totals], [m[3] for m in totals] if self.skewed else []
                shifts = (
                    None
                    if _fit_floats([*values, *crosses], squares, cubes)
                    else [
                        _shift(states[i], m[2], square=m[0], cube=m[3] if self.skewed else 0)
                        for m, i in zip(totals, estimable, strict=True)
                    ]
                )
                estimated = estimate_totals(
                    _scaled(values, shifts),
                    _scaled(squares, shifts, 2),
                    [n[i] for i in estimable],
                    [big_n[i] for i in estimable],
                    self.confidence,
                    [m[1] for m in totals],
                    [
                        Bytes(cross, *strata_bytes[key_strata[i]])
                        for cross, i in zip(_scaled(crosses, shifts), estimable, strict=True)
                    ],
                    list(
                        zip(
                            _scaled(cubes, shifts, 3),
                            _scaled([m[4] for m in totals], shifts, 2),
                            _scaled([m[5] for m in totals], shifts),
                            strict=True,
                        )
                    )
                    if self.skewed
                    else None,
                )
                table.fill(estimable, *(estimated if shifts is None else _shifted_back(shifts, estimated)))
                # An exact total is the final value: the output's type (an int Sum or Count stays an int, as in
                # the final part files); only a scaled estimate is a float.
                for i in estimable:
                    if finals[i] and isinstance(states[i], int):
                        table.estimates[i] = table.lows[i] = table.highs[i] = states[i]
                if self.aggregate.name == "count" or self.nonnegative:
                    _floor_lows(table, estimable, states)
        elif self.kind == "mean" and estimable:
            means = [entries[i][1:] for i in estimable]  # (the moments _NO_MEAN names)
            # (count, sum) per group, and its moments: the sums (y) scaled down as a total's values are, each power
            # of y by as many times the shift.
            counts, sums = [states[i][0] for i in estimable], [states[i][1] for i in estimable]
            shifts = (
                None
                if _fit_floats([*sums, *(m[1] for m in means)], [m[2] for m in means], [m[7] for m in means])
                else [_shift(states[i][1], m[1], square=m[2], cube=m[7]) for m, i in zip(means, estimable, strict=True)]
            )
            estimated = estimate_means(
                list(
                    zip(
                        counts,
                        _scaled(sums, shifts),
                        [m[0] for m in means],
                        _scaled([m[1] for m in means], shifts),
                        _scaled([m[2] for m in means], shifts, 2),
                        strict=True,
                    )
                ),
                [n[i] for i in estimable],
                [big_n[i] for i in estimable],
                self.confidence,
                [m[3] for m in means],
                list(
                    zip(
                        [m[4] for m in means],
                        _scaled([m[5] for m in means], shifts),
                        _scaled([m[6] for m in means], shifts, 2),
                        _scaled([m[7] for m in means], shifts, 3),
                        strict=True,
                    )
                ),
            )
            table.fill(estimable, *(estimated if shifts is None else _shifted_back(shifts, estimated)))
            if self.nonnegative:
                _floor_lows(table, estimable, [0] * len(keys))
        return table

    def rows(self) -> Iterator[SnapshotRow]:
        """:meth:`batches` row by row."""
        return (batch.row(i) for batch in self.batches() for i in range(len(batch)))


SCALED_BITS = 300
"""Ints of more bits than this are scaled down by a power of two before a group's estimate is computed in floats
(``_shift``): their squares and cubes, in the estimators' moments, would not fit a float (about 2**1024)."""


def _shift(*values: Any, square: Any, cube: Any = 0) -> int:
    """The power of two to divide a group's ``values`` (twice it its ``square``, three times its ``cube``) by, so
    that the estimators' floats hold them and their powers: 0 unless one is an int past ``SCALED_BITS`` bits. A Sum
    of ints past 10**154 (ints are exact at any size, and a job may sum ones of thousands of digits) failed every
    snapshot with "OverflowError: int too large to convert to float"."""
    bits = [abs(value).bit_length() for value in values if type(value) is int]
    if type(square) is int:
        bits.append((square.bit_length() + 1) // 2)
    if type(cube) is int:
        bits.append((abs(cube).bit_length() + 2) // 3)
    return max(0, max(bits, default=0) - SCALED_BITS)


def _floor_lows(table: SnapshotTable, positions: list[int], counts: list[Any]) -> None:
    """A Count's interval starts no lower than the count so far: records seen are never uncounted, so its final
    value is at least that (the symmetric t interval of a group seen in few chunks reached below it, below 0 even:
    a word count's snapshot at a quarter of its input had half its groups' ``low`` under their count so far).
    So does a ``Sum(nonnegative=True)``'s, ``counts`` then being the sums so far: the unread values cannot take
    them down. Raising ``low`` there never leaves out the final value; ``high`` and the estimate stay (an estimate
    scales the sum so far up, never below it)."""
    lows = table.lows
    for i in positions:
        low = lows[i]
        if low is not None and low < counts[i]:
            # (A Sum of ints past a float's range keeps its low as computed.)
            with contextlib.suppress(OverflowError):
                lows[i] = float(counts[i])


def _fit_floats(values: list[Any], squares: list[Any], cubes: list[Any]) -> bool:
    """Whether :func:`_shift` is 0 for every group of a batch whose values, squares and cubes these are (tested in
    C, per batch: :func:`_shift` per group was a sixth of a snapshot's time). True only when no number is past
    ``SCALED_BITS`` bits (its square past twice, its cube past three times that): a float that large, an infinity
    or a NaN first in a list gives False, as does a value ``abs`` or ``<`` refuses (a Mean of some other type),
    and the groups are shifted one by one as before."""
    try:
        return bool(
            max(map(abs, values), default=0) < _VALUES_BELOW
            and max(map(abs, squares), default=0) < _SQUARES_BELOW
            and max(map(abs, cubes), default=0) < _CUBES_BELOW
        )
    except TypeError:
        return False


_VALUES_BELOW = 1 << SCALED_BITS
_SQUARES_BELOW = 1 << (2 * SCALED_BITS)
_CUBES_BELOW = 1 << (3 * SCALED_BITS)
"""The bounds of :func:`_fit_floats`: an int below each has a shift of 0 in :func:`_shift` (``(bits + 1) // 2`` of
a square, ``(bits + 2) // 3`` of a cube at most ``SCALED_BITS``)."""


def _scaled(column: list[Any], shifts: list[int] | None, power: int = 1) -> list[Any]:
    """``column`` (a value per group, or a power of one) scaled down by each group's shift times ``power``
    (:func:`_shift`); the column itself when no group is shifted (``shifts`` ``None``)."""
    if shifts is None:
        return column
    return [_down(value, power * shift) for value, shift in zip(column, shifts, strict=True)]


def _down(value: Any, shift: int) -> Any:
    """``value / 2**shift`` (exactly rounded for an int of any size); ``value`` itself when ``shift`` is 0."""
    return value / (1 << shift) if shift else value


def _shifted_back(
    shifts: list[int], estimated: tuple[list[float], list[float | None], list[float | None], list[bool]]
) -> tuple[list[float | None], list[float | None], list[float | None], list[bool]]:
    """Estimates computed on values scaled down by ``shifts`` (``_shift``), scaled back up. One past a float's range
    (about 10**308) has no estimate (``None``): its value so far stands in the part files."""
    values, lows, highs, finals = estimated
    out_values: list[float | None] = list(values)
    for i, shift in enumerate(shifts):
        if not shift:
            continue
        try:
            out_values[i] = math.ldexp(values[i], shift)
            lows[i], highs[i] = (None if bound is None else math.ldexp(bound, shift) for bound in (lows[i], highs[i]))
        except OverflowError:
            out_values[i] = lows[i] = highs[i] = None
    return out_values, lows, highs, finals


@dataclass(frozen=True)
class _Context:
    """What every batch of a snapshot shares: chunks seen (in all and per stratum) and bytes per stratum."""

    total_seen: int
    seen: dict[str, int]
    strata_bytes: dict[str | None, tuple[float, float, float, float]]


def _memory_blocks(keys: list[Any], entries: dict[Any, Any]) -> Iterator[list[Any]]:
    """A summary's in-memory keys (sorted) as blocks of ``(key, entry)``, made (in C) as the merge reaches them."""
    for start in range(0, len(keys), SUMMARY_BLOCK_RECORDS):
        block = keys[start : start + SUMMARY_BLOCK_RECORDS]
        yield list(zip(block, map(entries.__getitem__, block), strict=True))


_NUMBERS = (int, float)
"""What a total's moments are kept for (a tuple: ``isinstance`` with it is quicker than with ``int | float``)."""


def _fold_states(state: dict[Any, Any], values: dict[Any, Any], aggregate: Aggregate) -> None:
    """Fold a chunk's per-key ``values`` into ``state`` with the aggregate's ``merge`` (``+`` inline for a Sum)."""
    get = state.get
    if aggregate.inline_sum:
        for key, x in values.items():
            old = get(key)
            state[key] = x if old is None else old + x
    else:
        merge = aggregate.merge
        for key, x in values.items():
            old = get(key)
            state[key] = x if old is None else merge(old, x)


def _merged_tag(tags: list[str]) -> str:
    """The order tag of the keys of runs with these tags merged."""
    distinct = {tag for tag in tags if tag != "empty"}
    if not distinct:
        return "empty"
    return distinct.pop() if len(distinct) == 1 else "mixed"


def _delete_dumps(summary: _Summary) -> None:
    for path in summary.dumps:
        path.unlink(missing_ok=True)
    summary.dumps, summary.dump_tags = [], []


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

    def slices(self, size: int) -> Iterator[SnapshotTable]:
        """The rows ``size`` at a time, in order."""
        for start in range(0, len(self), size):
            end = start + size
            yield SnapshotTable(
                self.keys[start:end],
                self.values[start:end],
                self.estimates[start:end],
                self.lows[start:end],
                self.highs[start:end],
                self.finals[start:end],
            )

    def extend(self, other: SnapshotTable) -> None:
        """Append ``other``'s rows."""
        self.keys += other.keys
        self.values += other.values
        self.estimates += other.estimates
        self.lows += other.lows
        self.highs += other.highs
        self.finals += other.finals

    def fill(
        self,
        positions: list[int],
        estimates: list[float] | list[float | None],
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
