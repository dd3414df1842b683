"""Snapshots on the reduce side: what a reduce attempt does when the coordinator asks for one.

A snapshot is the reduce over everything this attempt has received so far: committed runs and the tentative runs of
live map attempts (per map task the committed attempt, else the live attempt with the most data; never a failed
attempt's). Two ways to produce one:

- Online jobs whose reduce is a built-in aggregate keep a :class:`hop.online.state.SnapshotState` fed with every
  run, so a snapshot merges per-attempt summaries (no re-read of the runs) and carries estimates.
- Otherwise the run store's snapshot groups (``RunStore.snapshot_grouped``) are reduced with the job's reducer: the
  values so far, without estimates.
- A later job of a pipeline recomputes from the previous job's snapshot (``source``: its directory): the rows of
  each of its part files go through this step's map as one map task of the pipeline reads its partition (its own job
  instance: ``setup``, ``mapper_init``, the map, ``mapper_final``, ``teardown``), and the pairs of this partition
  through its reduce, so an early top-k follows an early word count.

Memory: the first way streams (the summaries keep to the reducer's budget and a snapshot merges them by key, a
batch of rows at a time), and the second streams its input (the store merges the runs as the final reduce does); the
files are written a batch at a time, keeping only the rows sent (:class:`hop.online.snapshots.PartitionSnapshotWriter`).
Not bounded: a hand-written reduce's output rows, held to be sorted by their keys (its output keys need not be its
input keys), a derived snapshot's input, grouped in memory, and the snapshot of an aggregate's reduce in a job run
without online options (``hop snapshot``): the folding store's groups, built whole (its runs may be unsorted).
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import time
import traceback
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

from hop import faults
from hop.aggregates import Aggregate, Count
from hop.inputs import parse_output_line
from hop.online.snapshots import ROWS_ON_THE_WIRE, PartitionSnapshotWriter, held_fraction, staging_directory
from hop.online.state import SnapshotRow, SnapshotState, SnapshotTable
from hop.online.tracker import UNBOUNDED_EXAMPLES
from hop.outputs import OutputGuard, make_in_output
from shuffle.keys import sort_keys
from shuffle.pairs import checked_pairs
from shuffle.store import RunStore

__all__ = ["ReducerSnapshots"]

SNAPSHOT_BATCH = 2048
"""Rows a snapshot formats and writes at a time (their JSON texts are held meanwhile)."""


class ReducerSnapshots:
    """One reduce attempt's snapshot machinery (see the module docstring)."""

    def __init__(
        self,
        output: str,
        index: int,
        store: RunStore,
        reducer: Callable[[Any, Iterable[Any]], Iterable[tuple[Any, Any]] | None],
        aggregate: Aggregate | None,
        chunk_strata: list[str] | None,
        key_stratum: Callable[[Any], str | None] | None,
        confidence: float = 0.95,
        map_task: Callable[[Iterable[tuple[Any, Any]], str], Iterable[tuple[int, Any, Any]]] | None = None,
        chunk_sizes: list[int] | None = None,
        attempt: int = 0,
        held: OutputGuard | None = None,
        prepare: Callable[[], None] | None = None,
        finish: Callable[[], None] | None = None,
        hook: Callable[[str], list[tuple[Any, Any]]] | None = None,
    ) -> None:
        """``chunk_strata`` and ``chunk_sizes``: every input chunk's stratum and bytes, by chunk id (online jobs);
        ``attempt``: the reduce attempt's number (for ``hop.faults``); ``held``: the attempt's hold on ``output``,
        which its snapshots' files are written in (never in a directory given its name since); ``prepare`` and
        ``finish``: called before each snapshot calls ``reducer``, and once it has written its rows (a new job
        instance's ``setup()`` and its ``teardown()``), a failure failing the snapshot alone. ``reducer`` should
        belong to a job instance of the snapshot's own, not the final reduce's: what its calls count and leave in it
        is not the job's. ``map_task`` (a pipeline's later job): one map task of this step over the records of one
        of the step before's partitions (and the part file they come from, its ``input_file``), on an instance of
        its own, giving ``(partition, key, value)`` of its output. ``hook``: runs the reducer's init or final hook
        (``"reducer_init"``, ``"reducer_final"``) on the instance ``prepare`` made and gives its pairs: a snapshot
        that calls the job's reduce runs them around its calls, as a reduce task does, their pairs among its rows
        (without, a reduce using what ``reducer_init`` set failed every snapshot, and ``reducer_final``'s pairs, in
        the partition's output, were in none)."""
        self.prepare = prepare
        self.finish = finish
        self.output = output
        self.held = held
        self.index = index
        self.attempt = attempt
        self.store = store
        self.reducer = reducer
        self.state = (
            SnapshotState(
                aggregate,
                chunk_strata,
                key_stratum,
                confidence,
                read_run=store.run_bytes,
                chunk_sizes=chunk_sizes,
                spill_path=lambda: store.new_run_path("summary"),
                memory_limit=store.memory_limit,
            )
            if aggregate is not None and chunk_strata
            else None
        )
        self.coverage = self.state
        """Which input chunks the received runs cover: the aggregate's state, else (a hand-written reduce of an
        online job) a state that follows the runs' chunks without reading them. Without it such a snapshot's
        ``input_fraction`` was the map progress that triggered it (0.75 for a reducer holding half the input)."""
        if self.coverage is None and chunk_strata:
            self.coverage = SnapshotState(Count(), chunk_strata, read_run=store.run_bytes, values=False)
        self.chunk_sizes = chunk_sizes if chunk_sizes is not None else [1] * len(chunk_strata or ())
        self.taken = 0
        self.map_task = map_task
        self.hook = hook
        self.aggregate = aggregate

    def close(self) -> None:
        """Delete the snapshot state's files."""
        if self.state is not None:
            self.state.close()

    def receive(self, header: dict[str, Any], data: bytes | Path) -> None:
        """A run arrived (its bytes, or the store's file holding them: ``shuffle.pieces``): into the snapshot state
        and the store."""
        task, attempt = header["map"], header["attempt"]
        resumes = header.get("resumes") or ()
        settled = self.store.settled(task)
        # (A run of another attempt than the one the store holds whole is a loser's: the store drops it, so does the
        # state.)
        if (
            self.coverage is not None
            and "chunk" in header
            and settled in (None, self.store.owner(task, attempt, header["seq"]))
        ):
            self.coverage.add_run(
                task,
                attempt,
                header["seq"],
                data.read_bytes() if isinstance(data, Path) else data,
                header["chunk"],
                bool(header.get("end")),
                bool(header.get("partial")),
                resumes,
            )
        self.store.add(task, attempt, header["seq"], data, header["records"], header["tag"], resumes)
        self._settle(task, settled)

    def notice(self, notice: dict[str, Any]) -> None:
        """A map attempt committed, failed or was lost: the snapshot state follows, then the store (the state reads
        what the store holds before the notice changes it: a failed attempt's kept runs, before a commit moves them
        to the attempt that resumed after them; whether a lost attempt was complete)."""
        task, attempt, kind = notice["index"], notice["attempt"], notice["type"]
        state = self.coverage
        settled = self.store.settled(task)
        if state is not None:
            if kind == "map_committed":
                if settled in (None, attempt):  # (else the store ignores it: it keeps the attempt it holds whole)
                    state.commit(task, attempt, notice.get("segments", ()))
            elif kind == "map_failed" and notice.get("keep_below"):
                state.keep(task, attempt, notice["keep_below"])  # kept for the attempt that resumes after them
            elif kind == "map_failed" or (kind == "map_lost" and not self.store.complete(task, attempt)):
                for lost in state.lineage(task, attempt) if kind == "map_lost" else [attempt]:
                    state.drop(task, lost)
        if kind == "map_committed":
            self.store.commit(task, attempt, notice["spills"], notice.get("segments", []))
        elif kind == "map_failed":
            self.store.drop(task, attempt, notice.get("keep_below"))
        elif kind == "map_lost":
            self.store.lost(task, attempt)
        self._settle(task, settled)

    def _settle(self, task: int, before: int | None) -> None:
        """The state drops the other attempts of ``task`` when the store does: once it holds every run of the
        committed attempt (``RunStore.settled``; ``before``: the store's settled attempt before the event). At the
        commit, it dropped the runs of the attempt's rerun that came before the word of the commit and of the loss:
        a snapshot then missed them."""
        settled = self.store.settled(task)
        if self.coverage is not None and settled is not None and settled != before:
            self.coverage.settle(task, settled)

    def holds(self, fraction: float | None) -> bool:
        """Whether this attempt holds at least ``fraction`` of the input (its bytes, in chunks whose runs are all
        here, as ``_snapshot.json``'s ``input_fraction`` counts them): a threshold's snapshot waits for it (``None``,
        or no chunks to count: at once)."""
        if fraction is None or self.coverage is None:
            return True
        return held_fraction(self.coverage.seen_chunks(), self.chunk_sizes) + 1e-9 >= fraction

    def answer(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The ``snapshot_done`` fields of snapshot requests that were queued together (``label`` and, for a
        pipeline's later job, ``source`` each), in order. Those without a source are answered by one snapshot,
        taken under the newest label and copied under the others: it holds everything received by now, so each
        would be the same, and taking it once per label made a reducer that fell behind fall further behind (and
        every label hold the data of the first one)."""
        answers: dict[int, dict[str, Any]] = {}
        plain = [number for number, request in enumerate(requests) if not request.get("source")]
        if plain:
            taken = self.take(requests[plain[-1]]["label"])
            for number in plain[:-1]:
                answers[number] = self._copy(taken, requests[number]["label"])
            answers[plain[-1]] = taken
        for number, request in enumerate(requests):
            if request.get("source"):
                answers[number] = self.take(request["label"], request["source"])
        return [answers[number] for number in range(len(requests))]

    def _copy(self, taken: dict[str, Any], label: str) -> dict[str, Any]:
        """``taken``'s files and fields under ``label`` as well (an error, as :meth:`take`'s, if they cannot be)."""
        if "error" not in taken:
            try:
                self._copy_files(taken["label"], label)
            except Exception as error:  # (an output removed meanwhile, above all: the job fails for it, not the task)
                return _failed(label, error)
        self.taken += 1
        return {**taken, "label": label}

    def _copy_files(self, taken: str, label: str) -> None:
        """This partition's files of snapshot ``taken`` copied under ``label``."""
        source, target = staging_directory(self.output, taken), self._staging(label)
        opener = None if self.held is None else self.held.opener
        for name in (f"part-{self.index:05d}", f"estimates-{self.index:05d}.jsonl"):
            temporary = target / f".{name}.{os.getpid()}.tmp"
            with open(source / name, "rb", opener=opener) as read, open(temporary, "wb", opener=opener) as write:
                shutil.copyfileobj(read, write)
            if self.held is None:
                os.replace(temporary, target / name)
            else:
                self.held.replace(temporary, target / name)

    def _staging(self, label: str) -> Path:
        """Snapshot ``label``'s staging folder, made (in the directory held, if one is), never the output itself."""
        folder = staging_directory(self.output, label)
        if self.held is None:
            make_in_output(self.output, folder)
        else:
            self.held.folder(folder)
        return folder

    def take(self, label: str, source: str | None = None) -> dict[str, Any]:
        """Write this partition's snapshot files under ``label`` and return the ``snapshot_done`` fields.

        With ``source`` (a pipeline's later job) the snapshot is recomputed from the previous job's snapshot in that
        directory: its rows go through this step's map, the pairs of this partition through its reduce.
        """
        started = time.time()
        intervals = _IntervalFields()
        batches = self._batches(source)
        calls_the_job = source is not None or self.state is None  # (an aggregate's state calls no code of the job)
        try:
            if self.prepare is not None and calls_the_job:
                self.prepare()
            first = next(batches, None)  # (a reduce that fails at once leaves no files behind)
            with PartitionSnapshotWriter(self._staging(label), self.index, self.held) as writer:
                for batch in itertools.chain([] if first is None else [first], batches):
                    writer.add(batch)
                    intervals.add(batch)
                    faults.inject("reduce", "snapshotting", self.index, self.attempt)
                if self.finish is not None and calls_the_job:
                    self.finish()
        except Exception as error:  # a reducer that fails on partial data must not fail the task
            return _failed(label, error)
        finally:
            batches.close()  # its merge files are deleted now, not when it is collected
        self.taken += 1
        fields: dict[str, Any] = {
            "label": label,
            "rows": writer.wire_rows(),
            "truncated": writer.groups > ROWS_ON_THE_WIRE,
            "groups": writer.groups,
            "seconds": round(time.time() - started, 4),
            **intervals.fields(),
        }
        if self.coverage is not None:
            chunks = self.coverage.seen_chunks()
            fields["chunks_seen"] = sorted(chunks)
            fields["strata_seen"] = self.coverage.strata_seen(chunks)
        return fields

    def _batches(self, source: str | None) -> Generator[SnapshotTable, None, None]:
        """The snapshot's rows in key order, in batches: streamed from the aggregate's state (its memory bounded
        as the state's is: ``hop.online.state``), else one table sorted whole (a hand-written reduce's, a derived
        snapshot's)."""
        if source is not None:
            yield from SnapshotTable.from_rows(self._derived_rows(Path(source))).sorted().slices(SNAPSHOT_BATCH)
        elif self.state is not None:
            yield from self.state.batches()
        else:
            yield from self._table().sorted().slices(SNAPSHOT_BATCH)

    def _table(self) -> SnapshotTable:
        """A hand-written reduce's rows: its input merged by key from the store, its output rows held (as columns:
        no object per row) to be sorted by their keys."""
        keys: list[Any] = []
        values: list[Any] = []
        for out_key, out_value in self._hook_pairs("reducer_init"):
            keys.append(out_key)
            values.append(out_value)
        for key, grouped in self.store.snapshot_grouped():
            for out_key, out_value in checked_pairs(self.reducer(key, grouped) or ()):
                keys.append(out_key)
                values.append(out_value)
        for out_key, out_value in self._hook_pairs("reducer_final"):
            keys.append(out_key)
            values.append(out_value)
        nothing: list[float | None] = [None] * len(keys)
        return SnapshotTable(keys, values, nothing, nothing, nothing, [False] * len(keys))

    def _derived_rows(self, source: Path) -> list[SnapshotRow]:
        if self.map_task is None:
            raise ValueError("a derived snapshot needs the step's map task")
        groups: dict[Any, list[Any]] = {}
        for part in sorted(source.glob("part-*")):
            with open(part, encoding="utf-8") as lines:
                # A map task per part, as the pipeline has a map per partition of the step before.
                for partition, out_key, out_value in self.map_task(_output_records(lines, part), str(part)):
                    if partition == self.index:
                        groups.setdefault(out_key, []).append(out_value)
        ordered, _ = sort_keys(list(groups))
        rows = [SnapshotRow(key, value, None, False) for key, value in self._hook_pairs("reducer_init")]
        aggregate = self.aggregate
        for key in ordered:
            values = groups[key]
            if aggregate is not None:  # map output values are raw: lift them into states first
                rows.append(
                    SnapshotRow(key, aggregate.finish(aggregate.fold_values(map(aggregate.lift, values))), None, False)
                )
                continue
            for out_key, out_value in checked_pairs(self.reducer(key, values) or ()):
                rows.append(SnapshotRow(out_key, out_value, None, False))
        rows.extend(SnapshotRow(key, value, None, False) for key, value in self._hook_pairs("reducer_final"))
        return rows

    def _hook_pairs(self, name: str) -> list[tuple[Any, Any]]:
        """What the snapshot's instance's reducer hook ``name`` yields (nothing without ``hook``)."""
        return [] if self.hook is None else self.hook(name)


def _output_records(lines: Iterable[str], part: Path) -> Iterator[tuple[Any, Any]]:
    """The records of a snapshot's part file, a bad line named by its number (no byte offset is counted)."""
    for number, line in enumerate(lines, 1):
        yield parse_output_line(line.rstrip("\n"), str(part), number, numbered=True)


class _IntervalFields:
    """What ``--stop-when-accurate`` decides on, and what to tell the user when it cannot stop, gathered over a
    snapshot's rows in key order (:meth:`add` per batch): ``max_relative_half_width``, the widest interval relative
    to its estimate, by the distance from the estimate to the interval's farther end (a symmetric interval's
    half-width; ``None`` if some group has no interval yet), ``widest`` (that group's key), and for groups
    without an interval ``unbounded`` (how many) and ``unbounded_examples`` (a few keys, each with why, those that
    will never have one first). Without these a job that never stopped early did not say which groups held it back
    (a NaN among a group's values, a group seen in one chunk)."""

    def __init__(self) -> None:
        self.widest = 0.0
        self.widest_key: Any = None
        self.unbounded = 0
        # Groups that will never have an interval (a NaN estimate) are named before those still waiting for a
        # second chunk (``waiting``): reading on gives the latter one, never the former.
        self.never: list[dict[str, Any]] = []
        self.not_yet: list[dict[str, Any]] = []

    def add(self, table: SnapshotTable) -> None:
        for key, estimate, low, high, final in zip(
            table.keys, table.estimates, table.lows, table.highs, table.finals, strict=True
        ):
            if final:
                continue
            if estimate is None or low is None or high is None:
                self.unbounded += 1
                waiting = estimate is not None and math.isfinite(estimate)
                named = self.not_yet if waiting else self.never
                if len(named) < UNBOUNDED_EXAMPLES:
                    named.append({"key": key, "why": _why_unbounded(estimate), "waiting": waiting})
                continue
            # How far from the estimate the final value may lie within the interval: its farther end, not its
            # half-width. The two are one for a symmetric interval; a lopsided one (a Count's or a nonnegative
            # Sum's low raised to the value so far, a skewed Sum's longer upper arm) reaches further on one side
            # than its half-width: [95, 120] around 100 is 12.5% by half-width, and a stop on it said "accurate to
            # 12.5%" of an estimate the final value may be 20% above.
            half = max(estimate - low, high - estimate)
            width = half / abs(estimate) if estimate else (0.0 if half == 0 else math.inf)
            if self.widest_key is None or width > self.widest:
                self.widest, self.widest_key = width, key

    def fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"max_relative_half_width": None if self.unbounded else self.widest}
        if self.widest_key is not None:
            fields["widest"] = self.widest_key
        if self.unbounded:
            fields["unbounded"] = self.unbounded
            fields["unbounded_examples"] = (self.never + self.not_yet)[:UNBOUNDED_EXAMPLES]
        return fields


def _interval_fields(table: SnapshotTable) -> dict[str, Any]:
    """:class:`_IntervalFields` of one table."""
    gathered = _IntervalFields()
    gathered.add(table)
    return gathered.fields()


def _failed(label: str, error: Exception) -> dict[str, Any]:
    """The ``snapshot_done`` fields of a snapshot this partition could not take (``error``, being handled)."""
    return {"label": label, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}


def _why_unbounded(estimate: float | None) -> str:
    if estimate is None:
        return "no estimate: not a Sum, Count or Mean of numbers, or past a float's range"
    if not math.isfinite(estimate):
        return f"its estimate is {estimate}: a NaN or infinite value among its records"
    return "no interval yet: it occurs in fewer than 2 of the chunks read, or its values there are all alike"
