"""The reduce side's store of received runs, kept per map attempt.

A run arrives tagged with the map task, the attempt that produced it and its spill sequence number. Runs of an
attempt are *tentative* until the coordinator reports that attempt committed; then they join the committed
set. Runs of a failed or superseded attempt are dropped and never reach the reduce (HOP section 3.3, with
attempts isolated).

Memory: ``memory_limit`` is the store's budget for decoded pairs. Run bytes are held in memory up to
``memory_limit / (2 * DECODED_EXPANSION)`` (encoded size; decoded, small pairs are about that many times larger),
leaving the other half of the budget to the streams of the on-disk runs being merged: ``fan_in`` of them at a time,
each costing about ``STREAM_BYTES``, so ``fan_in`` follows from the budget (at most 64). Past the held limit, the
largest in-memory runs are written to files in ``spill_dir`` and later streamed, so the store's memory does not grow
with the input (a write that fails there, a full disk, is a ``shuffle.diskwrites.SpillWriteError`` naming the file
and what to do). At the end, :meth:`RunStore.grouped` first merges neighbouring on-disk runs in passes until at
most ``fan_in`` files remain (the in-memory runs stay encoded meanwhile), then sorts each stretch of consecutive
in-memory committed runs in one pass and merges the results with the files in run order (so ties stay in map task,
then spill order).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shuffle.diskwrites import run_write_error
from shuffle.keys import KeyOrder, combined_order, sort_keys
from shuffle.merge import blocks_of, group_merged, merge_blocks, sort_groups_in_memory
from shuffle.runs import RunWriter, is_grouped, iter_run_file_groups, iter_stored_blocks

DECODED_EXPANSION = 16
"""How much larger small (key, value) pairs are as Python objects than as msgpack (a 7-byte word-count pair becomes
a 56-byte tuple, a 56-byte str and a list slot: about 120 bytes; 12 left the 1 GB reducer benchmark over budget).
The store keeps ``memory_limit / (2 * DECODED_EXPANSION)`` encoded bytes in memory so that decoding them at the end
takes half of ``memory_limit``."""

STREAM_BYTES = 3 << 20
"""Memory one on-disk run costs while it is merged: its decoded block (8192 small pairs: about 1 MB), its read
buffer, its share of the merge's batch and of the allocator's fragmentation (measured: merging 64 run files of word
pairs peaked 165 MB above the idle process with 64 KiB read buffers, 200 MB with 256 KiB). A block of large values
is cut at ``shuffle.runs.BLOCK_BYTES`` (it decodes to about that much: the same), but one value larger than that
is a block of its own, held twice while it is read (encoded in the read buffer, decoded): see
:meth:`RunStore.merge_fan_in`."""

STREAM_COPIES = 3
"""A stream of values larger than a block costs about this many times its values' size (read buffer, decoded
block, the allocator's slack): merging 40 run files of 2 MiB values at a time peaked 259 MiB above the idle
process."""

MAX_FAN_IN = 64

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
    folded: bool = False
    """Merged into a folding store's state (``shuffle.fold``): neither in memory nor on disk any more."""


@dataclass
class AttemptRuns:
    """The runs of one map attempt received so far."""

    runs: dict[int, StoredRun] = field(default_factory=dict)
    committed_spills: int | None = None
    """Set when the attempt committed: how many spills it produced (so we know when all have arrived)."""


class RunStore:
    """Runs for one reduce partition, by map attempt, with tentative/committed states and a memory limit."""

    def __init__(
        self,
        spill_dir: str | Path,
        memory_limit: int = 64 << 20,
        fan_in: int | None = None,
        expansion: int = DECODED_EXPANSION,
    ) -> None:
        self.spill_dir = Path(spill_dir)
        self.memory_limit = memory_limit
        self.held_limit = max(1, memory_limit // (2 * expansion))
        """Encoded bytes held in memory: decoded at the final merge they take about ``expansion`` times more, half
        the budget; the other half is for the streams of the on-disk runs (``fan_in`` at most)."""
        if fan_in is None:
            fan_in = max(2, min(MAX_FAN_IN, memory_limit // (2 * STREAM_BYTES)))
        self.fan_in = fan_in
        self.attempts: dict[AttemptKey, AttemptRuns] = {}
        self.committed: dict[int, int] = {}
        """map task -> the attempt that committed."""
        self.memory_bytes = 0
        self.disk_bytes = 0
        self.disk_bytes_peak = 0
        """The most bytes of run and merge files held at once."""
        self.received_runs = 0
        self.received_bytes = 0
        self.dropped_runs = 0
        self._file_seq = 0
        self.aliases: dict[AttemptKey, tuple[int, int, int]] = {}
        """(task, failed attempt) -> (committed attempt, first seq, end seq) for kept spill segments."""
        self.resumed: dict[AttemptKey, list[list[int]]] = {}
        """(task, attempt) -> the kept segments it resumes after (from its runs' headers, online jobs): snapshots
        count those with it before it commits."""
        self.kept_below: dict[AttemptKey, int] = {}
        """(task, failed attempt) -> its checkpoint's first spill: the runs below are kept, later ones dropped."""
        self._merged: dict[Path, int] = {}
        """Files written by multi-pass merges (not runs of any attempt), with their sizes."""
        self._groups_total: int | None = None
        """After :meth:`grouped`: the groups it hands out (or at most), when known; else None, and ``_records_*``."""
        self._records_total = 0
        self._records_taken = 0
        if fan_in < 2:
            raise ValueError(f"fan_in must be at least 2, got {fan_in}")

    def owner(self, task: int, attempt: int, seq: int) -> int:
        """The attempt a run belongs to: a kept spill of a failed attempt belongs to the attempt resumed after it."""
        alias = self.aliases.get((task, attempt))
        return alias[0] if alias is not None and alias[1] <= seq < alias[2] else attempt

    def run_bytes(self, task: int, attempt: int, seq: int) -> bytes | None:
        """A held run's bytes (``None`` if not held or already folded)."""
        attempt_runs = self.attempts.get((task, attempt))
        run = attempt_runs.runs.get(seq) if attempt_runs is not None else None
        if run is None or run.folded:
            return None
        return run.data if run.data is not None else (run.path.read_bytes() if run.path is not None else None)

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
        """Store one run; a run of an attempt superseded by another committed attempt whose runs are all here, or of
        a failed one past its checkpoint, is dropped. ``resumes``: the kept segments of failed attempts the run's
        attempt resumes after (online jobs' run headers, see :attr:`resumed`). ``data`` is the run's bytes or a file
        holding them, named by :meth:`new_run_path` (a large run received in pieces, ``shuffle.pieces``): the store
        owns it.

        A committed attempt with runs still to come may yet be lost with its worker (:meth:`lost`), and the map run
        again: the rerun's runs come straight from its worker, the word of the loss through this reducer's own
        worker, so they may come first. They are kept, tentative, until the committed attempt is complete (then
        they go) or lost (then they are the rerun's): dropped as a loser's, the rerun committed with them missing
        and the reducer waited for them for ever."""
        size = data.stat().st_size if isinstance(data, Path) else len(data)
        self.received_runs += 1
        self.received_bytes += size
        if resumes:
            self.resumed.setdefault((task, attempt), [list(segment) for segment in resumes])
        attempt = self.owner(task, attempt, seq)
        settled = self.settled(task)
        kept_below = self.kept_below.get((task, attempt))
        if (settled is not None and settled != attempt) or (kept_below is not None and seq >= kept_below):
            self.dropped_runs += 1
            if isinstance(data, Path):
                data.unlink(missing_ok=True)
            return
        runs = self.attempts.setdefault((task, attempt), AttemptRuns()).runs
        if seq in runs:
            if isinstance(data, Path):
                data.unlink(missing_ok=True)
            return  # a resend of a run we hold: idempotent
        if isinstance(data, Path):
            runs[seq] = StoredRun(seq, records, order_tag, size, path=data)
            self._add_disk(size)
        else:
            runs[seq] = StoredRun(seq, records, order_tag, size, data=data)
            self.memory_bytes += size
            if self.memory_bytes > self.held_limit:
                self._evict()
        if settled is None and self.settled(task) == attempt:
            self._drop_others(task, attempt)  # the committed attempt can no longer be lost here: the rest are losers

    def complete(self, task: int, attempt: int) -> bool:
        """Whether ``attempt`` committed and every one of its runs has arrived."""
        attempt_runs = self.attempts.get((task, attempt))
        return (
            attempt_runs is not None
            and attempt_runs.committed_spills is not None
            and len(attempt_runs.runs) >= attempt_runs.committed_spills
        )

    def settled(self, task: int) -> int | None:
        """The attempt whose runs are ``task``'s for good: committed, with all its runs here (it can no longer be lost
        here: :meth:`lost`), or ``None``. Once there is one, every other attempt's runs are dropped, those still to
        come as they arrive, and another attempt's commit is ignored; before, they are kept, tentative (:meth:`add`).
        """
        attempt = self.committed.get(task)
        return attempt if attempt is not None and self.complete(task, attempt) else None

    def commit(self, task: int, attempt: int, spills: int, segments: list[list[int]] = ()) -> None:  # type: ignore[assignment]
        """Record that ``attempt`` of ``task`` committed with ``spills`` spill files; drop other attempts once its
        runs are all here.

        If another attempt of the task already committed and all its runs are here (its output was later lost
        with its worker, so the map ran again), the store keeps what it has and ignores the new attempt.
        """
        if self.settled(task) not in (None, attempt):
            return
        self.committed[task] = attempt
        target = self.attempts.setdefault((task, attempt), AttemptRuns())
        for kept_attempt, first, end in segments:
            # The committed attempt resumed after these spills of a failed one: they are part of its output.
            self.aliases[(task, kept_attempt)] = (attempt, first, end)
            self.kept_below.pop((task, kept_attempt), None)  # (its later runs lose to the committed attempt now)
            kept = self.attempts.pop((task, kept_attempt), None)
            if kept is not None:
                for seq, run in kept.runs.items():
                    if first <= seq < end:
                        target.runs[seq] = run
                    else:
                        self._release(run)
                        self.dropped_runs += 1
        self.attempts.setdefault((task, attempt), AttemptRuns()).committed_spills = spills
        if self.settled(task) == attempt:
            # (else other attempts' runs stay, tentative, until it is: one may be the rerun of this attempt, lost
            # before its last runs came, its runs here before the word of the commit and of the loss: :meth:`add`)
            self._drop_others(task, attempt)

    def _drop_others(self, task: int, attempt: int) -> None:
        """Forget the runs of every attempt of ``task`` but ``attempt``."""
        for key in [key for key in self.attempts if key[0] == task and key[1] != attempt]:
            self.drop(*key)

    def lost(self, task: int, attempt: int) -> None:
        """A committed attempt's map output was lost with its worker: keep it if complete, else forget it."""
        if self.complete(task, attempt):
            return
        if self.committed.get(task) == attempt:
            del self.committed[task]
        self.drop(task, attempt)

    def drop(self, task: int, attempt: int, keep_below: int | None = None) -> None:
        """Forget the runs of a failed or superseded attempt (from ``keep_below`` on, if given: the runs below are
        covered by its checkpoint and stay, tentative, for the attempt that resumes after them)."""
        if keep_below:
            self.kept_below[(task, attempt)] = keep_below  # its runs still in flight past the checkpoint are dropped
            attempt_runs = self.attempts.get((task, attempt))
            if attempt_runs is not None:
                for seq in [seq for seq in attempt_runs.runs if seq >= keep_below]:
                    self._release(attempt_runs.runs.pop(seq))
                    self.dropped_runs += 1
            return
        self.aliases = {k: v for k, v in self.aliases.items() if v[0] != attempt or k[0] != task}
        self.resumed.pop((task, attempt), None)
        self.kept_below.pop((task, attempt), None)
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

    def committed_records(self) -> int:
        """The pairs the committed runs hold: the reduce's input."""
        return sum(run.records for run in self.committed_runs())

    def sorted_pairs(self) -> Iterator[tuple[Any, Any]]:
        """All committed pairs in key order (stable by map task, then spill order): :meth:`grouped`, flattened."""
        return ((key, value) for key, values in self.grouped() for value in values)

    def _merge_sources(self) -> tuple[list[_Encoded | Path], KeyOrder]:
        """The committed runs as at most ``fan_in`` files plus stretches of consecutive in-memory runs (still
        encoded), in run order, and their key order."""
        runs = self.committed_runs()
        order = combined_order(run.order_tag for run in runs)
        return self._stretches(runs, order), order

    def _stretches(self, runs: list[StoredRun], order: KeyOrder) -> list[_Encoded | Path]:
        """``runs`` as merge sources: at most ``fan_in`` files plus stretches of consecutive in-memory runs."""
        # Each source keeps its place in run order, so the stable merge keeps ties in run order: consecutive
        # in-memory runs are sorted together, each on-disk run is a file. The merge passes run while the in-memory
        # runs are still encoded (a stretch is a list of run bytes): their decoded pairs and the passes' streams
        # would not both fit in the budget.
        stretches: list[_Encoded | Path] = []
        for run in runs:
            if run.data is not None:
                if stretches and isinstance(stretches[-1], _Encoded):
                    stretches[-1].runs.append(run.data)
                else:
                    stretches.append(_Encoded([run.data]))
            elif run.path is not None:
                stretches.append(run.path)
        fan_in = self.merge_fan_in(runs)
        while sum(isinstance(source, Path) for source in stretches) > fan_in:
            stretches = self._merge_pass(stretches, order, fan_in)
        return stretches

    def merge_fan_in(self, runs: Sequence[StoredRun]) -> int:
        """How many files a merge streams at once: ``fan_in``, fewer when the runs' values are so large that a
        stream of them costs more than ``STREAM_BYTES`` (by their mean encoded size, from each run's bytes and
        records: a value is read whole, whatever the block size), so that the streams keep to half the budget."""
        largest = max((run.size // max(1, run.records) for run in runs), default=0)
        stream = max(STREAM_BYTES, STREAM_COPIES * largest)
        return max(2, min(self.fan_in, self.memory_limit // (2 * stream)))

    def grouped(self) -> Iterator[tuple[Any, Iterable[Any]]]:
        """All committed values grouped by key, in key order: the reduce input.

        When every committed run is in memory, pairs are grouped in a hash map and only the distinct keys are
        sorted (several times cheaper in Python than sorting every pair); values keep run order. Otherwise the runs
        are merged from disk, each key's values in run order, and come as a lazy iterator.
        """
        runs = self.committed_runs()
        if any(run.data is None for run in runs) or self._merged:
            # Streamed from disk: merge runs of equal keys, not single pairs (see shuffle.runs.block_groups).
            sources, order = self._merge_sources()
            self._groups_total, self._records_total, self._records_taken = None, sum(r.records for r in runs), 0
            streams = [self._counted(blocks) for blocks in _as_group_blocks(sources, order)]
            return group_merged(itertools.chain.from_iterable(merge_blocks(streams, order)))
        groups: dict[Any, list[Any]] = {}
        for run in runs:
            _group_into(groups, run.data or b"")
        ordered, _ = sort_keys(list(groups))
        self._groups_total = len(ordered)
        return ((key, groups[key]) for key in ordered)

    def input_fraction(self, groups: int) -> float:
        """After :meth:`grouped`: how much of the reduce input it has handed out, from 0 to 1, given the ``groups``
        the caller has taken. Of the groups when their number is known (every run was in memory), else of the
        records in the blocks the merge has read (at most a block per stream ahead of the caller)."""
        if self._groups_total is not None:
            return min(1.0, groups / self._groups_total) if self._groups_total else 1.0
        return min(1.0, self._records_taken / self._records_total) if self._records_total else 1.0

    def _counted(self, blocks: Iterator[list[tuple[Any, list[Any]]]]) -> Iterator[list[tuple[Any, list[Any]]]]:
        """``blocks`` of ``(key, values)`` items, their values counted in ``_records_taken`` as each is read."""
        for block in blocks:
            self._records_taken += sum(map(len, map(_values_of, block)))
            yield block

    def snapshot_runs(self) -> list[StoredRun]:
        """The runs a snapshot includes: per map task its committed attempt's, else those of its live attempt with
        the most runs, with the kept runs of failed attempts it resumes after (``resumed``); failed attempts' own
        runs are gone from the store already."""
        best: dict[int, tuple[int, list[StoredRun]]] = {}
        for (task, attempt), attempt_runs in self.attempts.items():
            committed = self.committed.get(task)
            if committed is not None and committed != attempt:
                continue
            runs = list(attempt_runs.runs.values())
            if committed != attempt:  # a committed attempt holds its kept runs already
                for kept_attempt, first, end in self.resumed.get((task, attempt), ()):
                    kept = self.attempts.get((task, kept_attempt))
                    runs += [run for seq, run in kept.runs.items() if first <= seq < end] if kept else []
            current = best.get(task)
            if current is None or committed == attempt or len(runs) > current[0]:
                best[task] = (len(runs), runs)
        return [run for _, (_, runs) in sorted(best.items()) for run in sorted(runs, key=lambda run: run.seq)]

    def snapshot_groups(self) -> dict[Any, list[Any]]:
        """Values received so far by key (see :meth:`snapshot_runs`), read without changing the store."""
        groups: dict[Any, list[Any]] = {}
        for run in self.snapshot_runs():
            if run.folded:
                continue
            data = run.data if run.data is not None else (run.path.read_bytes() if run.path is not None else b"")
            _group_into(groups, data)
        return groups

    def snapshot_grouped(self) -> Iterator[tuple[Any, list[Any]]]:
        """:meth:`snapshot_groups` in key order, streamed: the input of a snapshot's reduce.

        The snapshot's runs are merged as the final reduce merges the committed ones (:meth:`_merge_sources`):
        stretches of in-memory runs sorted together, run files streamed a block each, merged first in passes to at
        most ``fan_in`` files (written beside the runs and deleted once the snapshot is read). So a snapshot holds
        what the final reduce holds, not every value received (the dict of every key's values it built before
        took 15 times the runs' bytes). Each key's values are in run order (map task, then spill), as before."""
        runs = [run for run in self.snapshot_runs() if not run.folded]
        order = combined_order(run.order_tag for run in runs)
        before = set(self._merged)
        try:
            sources = self._stretches(runs, order)
            for key, values in group_merged(
                itertools.chain.from_iterable(merge_blocks(_as_group_blocks(sources, order), order))
            ):
                yield key, list(values)
        finally:
            for path in [path for path in self._merged if path not in before]:
                path.unlink(missing_ok=True)
                self.disk_bytes -= self._merged.pop(path)

    def close(self) -> None:
        """Delete every run file this store wrote."""
        for attempt_runs in self.attempts.values():
            for run in attempt_runs.runs.values():
                self._release(run)
        self.attempts.clear()
        for path, size in self._merged.items():
            path.unlink(missing_ok=True)
            self.disk_bytes -= size
        self._merged.clear()

    def _check(self) -> None:
        """Assert the store's invariants (for tests): byte counts match the runs held, no loser is kept."""
        runs = [run for attempt_runs in self.attempts.values() for run in attempt_runs.runs.values()]
        assert all(run.folded or (run.data is None) != (run.path is None) for run in runs), "in memory xor on disk"
        assert all(not run.folded or (run.data is None and run.path is None) for run in runs)
        assert all(len(run.data) == run.size for run in runs if run.data is not None)
        assert all(run.path.stat().st_size == run.size for run in runs if run.path is not None)
        assert self.memory_bytes == sum(run.size for run in runs if run.data is not None)
        assert self.memory_bytes <= self.held_limit
        on_disk = sum(run.size for run in runs if run.path is not None)
        assert self.disk_bytes == on_disk + sum(self._merged.values())
        assert all(path.stat().st_size == size for path, size in self._merged.items())
        for task, attempt in self.committed.items():
            if self.complete(task, attempt):  # (before, another attempt's runs wait in case it is lost: ``add``)
                assert all(key == (task, attempt) for key in self.attempts if key[0] == task), "loser kept"
        for (task, attempt), attempt_runs in self.attempts.items():
            assert attempt_runs.committed_spills is None or self.committed.get(task) == attempt

    def _merge_pass(self, sources: list[_Encoded | Path], order: Any, fan_in: int) -> list[_Encoded | Path]:
        """Merge consecutive sources holding up to ``fan_in`` files into one file each, in order."""
        result: list[Any] = []
        group: list[Any] = []
        files = 0
        for source in [*sources, None]:
            if source is None or (isinstance(source, Path) and files == fan_in):
                if files > 1:
                    result.append(self._merge_files(group, order))
                else:
                    result.extend(group)
                group, files = [], 0
            if source is not None:
                group.append(source)
                files += isinstance(source, Path)
        return result

    def _merge_files(self, sources: list[_Encoded | Path], order: Any) -> Path:
        target = self.new_run_path("merged")
        writer = RunWriter(target)
        for batch in merge_blocks(_as_group_blocks(sources, order), order):
            writer.add_groups(batch)
        size = writer.close()
        self._merged[target] = size
        self._add_disk(size)
        # An earlier pass's outputs, read whole, are in the target now: deleted, so that the disk holds at most
        # about twice the runs whatever the number of passes (the runs themselves stay until close()).
        for source in sources:
            if isinstance(source, Path) and source in self._merged:
                source.unlink(missing_ok=True)
                self.disk_bytes -= self._merged.pop(source)
        return target

    def _add_disk(self, size: int) -> None:
        self.disk_bytes += size
        self.disk_bytes_peak = max(self.disk_bytes_peak, self.disk_bytes)

    def _evict(self) -> None:
        """Write in-memory runs to disk, largest first, until memory is under half the limit."""
        in_memory = [run for attempt in self.attempts.values() for run in attempt.runs.values() if run.data]
        in_memory.sort(key=lambda run: run.size, reverse=True)
        for run in in_memory:
            if self.memory_bytes <= self.held_limit // 2:
                break
            path = self.new_run_path("run")
            try:
                with open(path, "wb") as file:
                    file.write(run.data or b"")
            except OSError as error:  # (a full spill disk: named, not a bare "[Errno 28]" from the engine's frames)
                path.unlink(missing_ok=True)
                raise run_write_error(path, error) from error
            self.memory_bytes -= run.size
            self._add_disk(run.size)
            run.data, run.path = None, path

    def _release(self, run: StoredRun) -> None:
        if run.data is not None:
            self.memory_bytes -= run.size
            run.data = None
        if run.path is not None:
            run.path.unlink(missing_ok=True)
            self.disk_bytes -= run.size
            run.path = None

    def new_run_path(self, kind: str = "run") -> Path:
        """A new file name in the store's directory (``kind`` names what it holds)."""
        self._file_seq += 1
        return self.spill_dir / f"{kind}-{self._file_seq:06d}.run"


@dataclass
class _Encoded:
    """Consecutive in-memory runs, still encoded, while merge passes run (see ``RunStore._merge_sources``)."""

    runs: list[bytes]


def _group_into(groups: dict[Any, list[Any]], data: bytes | memoryview) -> None:
    """Add the values of run bytes to ``groups`` (key -> values in order): per pair for a flat block, per key for a
    grouped one."""
    get = groups.get
    for block in iter_stored_blocks(data):
        if is_grouped(block):
            for key, values in zip(block[0], block[1], strict=True):
                group = get(key)
                if group is None:
                    groups[key] = list(values)
                else:
                    group.extend(values)
            continue
        for key, value in zip(block[0], block[1], strict=True):
            group = get(key)
            if group is None:
                groups[key] = [value]
            else:
                group.append(value)


def _as_group_blocks(sources: list[_Encoded | Path], order: KeyOrder) -> list[Iterator[list[tuple[Any, Any]]]]:
    """Merge sources as streams of ``(key, values)`` item blocks for ``merge_blocks``: each key moves through the
    merge once per block, not once per pair (a run file streamed block by block; a stretch of in-memory runs
    decoded and sorted now: it fits half the budget, see the module docstring)."""
    return [
        iter_run_file_groups(source)
        if isinstance(source, Path)
        else blocks_of(sort_groups_in_memory(source.runs, order))
        for source in sources
    ]


_values_of = operator.itemgetter(1)
"""A ``(key, values)`` item's values."""
