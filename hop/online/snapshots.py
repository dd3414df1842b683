"""A snapshot's files: ``OUT/_snapshots/<label>/``.

- ``part-NNNNN``: one line per group, ``json(key) TAB json(value)`` as in the job's output, sorted by key; the value
  is the estimate of the final value for Sum/Count/Mean, else the value so far.
- ``estimates-NNNNN.jsonl``: one JSON object per group: ``key``, ``value`` (so far), ``estimate``, ``low``,
  ``high`` (``null`` without an interval) and ``final`` (the value can no longer change).
- ``_snapshot.json`` (written by the coordinator once every partition reported): time, progress (the trigger), the
  fraction of input bytes and of chunks the reducers had seen, per-partition progress.

``<label>`` is a threshold of map progress, three decimals (``0.100``; more when ``--snapshot-every`` is below
0.001, so labels stay unique: ``0.0005``): a fraction of the input (bytes) the snapshot holds at least
(``hop.online.tracker``); a snapshot asked for with ``hop snapshot`` is ``<progress>-now<seq>``, the map progress as
it was asked. A snapshot answered late is published under a higher label than it was asked for (``staged_as``:
the staging folder keeps the one asked for).

A snapshot is assembled out of sight, in ``OUT/_temporary/snapshots/<label>/`` (its staging folder): each partition's
files are written there under a temporary name and renamed, and once every partition answered the coordinator writes
``_snapshot.json`` there and renames the folder to ``OUT/_snapshots/<label>/`` (:func:`publish_snapshot`). A folder of
``OUT/_snapshots/`` is thus a whole snapshot, never one being written or one whose job ended first (cancelled,
stopped early, failed, its reducers killed mid-write): those stay in ``OUT/_temporary``, which the job's end removes.
"""

from __future__ import annotations

import heapq
import json
import math
import os
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

from hop.jsonline import to_json, to_json_column
from hop.online.state import SnapshotRow, SnapshotTable
from hop.outputs import OutputGuard

__all__ = [
    "ROWS_ON_THE_WIRE",
    "LargestFirst",
    "PartitionSnapshotWriter",
    "held_fraction",
    "row_to_wire",
    "snapshot_directory",
    "label_digits",
    "publish_snapshot",
    "snapshot_label",
    "staging_directory",
    "top_positions",
    "write_final_partition_snapshot",
    "write_partition_snapshot",
]

ROWS_ON_THE_WIRE = 2000
"""Rows per partition a reducer sends the coordinator with a snapshot: its largest estimates (``top_positions``;
all rows are in the files)."""

_dumps = to_json


def snapshot_label(progress: float, on_demand_seq: int | None = None, digits: int = 3) -> str:
    """``progress`` with ``digits`` decimals (see ``label_digits``), ``-now<seq>`` for ``hop snapshot``."""
    label = f"{progress:.{digits}f}"
    return label if on_demand_seq is None else f"{label}-now{on_demand_seq}"


def label_digits(every: float | None) -> int:
    """Decimals that tell multiples of ``every`` apart (3 unless ``every`` is below 0.001): two labels of
    consecutive multiples differ by at least one unit of the last decimal, so no two snapshots share a folder."""
    return 3 if not every else max(3, math.ceil(-math.log10(every) - 1e-9))


def held_fraction(chunks: Collection[int], chunk_sizes: Sequence[int]) -> float:
    """The fraction of the input (its bytes) that input chunks ``chunks`` (ids into ``chunk_sizes``) hold. Of an
    input of no bytes (empty files), the fraction of its chunks: all of it once each was read (it said 0.0 of a
    snapshot holding every chunk, as the final output does)."""
    total = sum(chunk_sizes)
    if not total:
        return len(chunks) / max(1, len(chunk_sizes))
    return sum(chunk_sizes[chunk] for chunk in chunks) / total


def snapshot_directory(output: str | Path, label: str) -> Path:
    """Where snapshot ``label`` is published, whole: ``OUT/_snapshots/<label>``."""
    return Path(output) / "_snapshots" / label


def staging_directory(output: str | Path, label: str) -> Path:
    """Where snapshot ``label``'s files are written until it is published: ``OUT/_temporary/snapshots/<label>``."""
    return Path(output) / "_temporary" / "snapshots" / label


def publish_snapshot(
    output: OutputGuard, label: str, description: dict[str, Any], staged_as: str | None = None
) -> Path:
    """Write ``_snapshot.json`` (``description``) into snapshot ``label``'s staging folder (that of ``staged_as``,
    the label it was asked for, if given), every partition's files being there (and the temporaries of attempts
    killed while writing them gone), and rename the folder into ``OUT/_snapshots/<label>``: it appears there whole
    or not at all. Returns the published folder. A label is published once: a folder already there (none is, in an
    output cleared at submit) is an error, not replaced.

    All of it in the output directory ``output`` holds open (:class:`~hop.outputs.OutputGuard`), never by name: an
    output removed meanwhile is not made again (a staging folder made with all its parents brought it back, for the
    next run of it to find not empty), nor one given its name written; :class:`~hop.outputs.OutputRemovedError`."""
    staging = output.folder(staging_directory(output.output, staged_as or label))  # (none if each answered an error)
    for name in output.listdir(staging):  # of attempts killed while writing there: their retries wrote it whole
        if name.startswith(".") and name.endswith(".tmp"):
            output.unlink(staging / name)
    with open(staging / "_snapshot.json", "w", encoding="utf-8", opener=output.opener) as file:
        file.write(json.dumps(description, indent=2) + "\n")
    folder = snapshot_directory(output.output, label)
    output.folder(folder.parent)
    if output.exists(folder):
        raise FileExistsError(f"snapshot {label} is already published in {folder}")
    output.replace(staging, folder)
    return folder


def row_to_wire(row: SnapshotRow) -> dict[str, Any]:
    estimate = row.estimate
    return {
        "key": row.key,
        "value": row.value,
        "estimate": estimate.value if estimate is not None else None,
        "low": estimate.low if estimate is not None else None,
        "high": estimate.high if estimate is not None else None,
        "final": row.final,
    }


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value  # NaN ranks nowhere


T = TypeVar("T")

_PLAIN_NUMBERS = frozenset({int, float})
"""Value types :meth:`LargestFirst.add_many` filters in bulk (not a bool, nor a subclass with its own ``>``)."""


class LargestFirst(Generic[T]):
    """The ``limit`` items whose values rank first, as the rows a snapshot sends are ranked: the largest numeric
    values, largest first, ties in the order they were added; if fewer are numeric, then the first others in the
    order they were added (a hand-written reduce's lists or texts have no size to rank by). Items are added one at a
    time and at most ``2 * limit`` are held: a partition, or a job's final output, may hold millions of rows.

    >>> ranked = LargestFirst[str](2)
    >>> for value, item in [(3, "a"), ("x", "b"), (7.5, "c"), (7.5, "d")]:
    ...     ranked.add(value, item)
    >>> ranked.items()
    ['c', 'd']
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._largest: list[tuple[Any, int, T]] = []
        """A min-heap of (value, -position, item): the largest numeric values, the earlier item first among equals
        (positions differ, so items are never compared)."""
        self._others: list[T] = []
        """The first items without a numeric value, for when fewer than ``limit`` have one."""
        self._added = 0

    def add(self, value: Any, item: T) -> None:
        position, self._added = self._added, self._added + 1
        if not _numeric(value):
            if len(self._others) < self.limit:
                self._others.append(item)
        elif len(self._largest) < self.limit:
            heapq.heappush(self._largest, (value, -position, item))
        elif self._largest and value > self._largest[0][0]:  # (an equal value came later: it ranks below)
            heapq.heapreplace(self._largest, (value, -position, item))

    def add_many(self, values: Sequence[Any], item_at: Callable[[int], T]) -> None:
        """``add(values[i], item_at(i))`` for every ``i`` in order, but an item whose value cannot rank is never made:
        once ``limit`` numbers are held, a batch of plain ints and floats is filtered in one pass against the least
        of them (it only grows as items are added, so nothing that would rank is left out). A snapshot ranks every
        row of a partition, millions, to send 2,000."""
        start = self._added
        count = len(values)
        first = 0
        while first < count and len(self._largest) < self.limit:
            self.add(values[first], item_at(first))
            first += 1
        if first < count and self._largest and set(map(type, values)) <= _PLAIN_NUMBERS:
            least = self._largest[0][0]
            for i in [i for i in range(first, count) if values[i] > least]:  # (a NaN is never greater: never ranks)
                self._added = start + i
                self.add(values[i], item_at(i))
        else:
            for i in range(first, count):
                self.add(values[i], item_at(i))
        self._added = start + count

    def items(self) -> list[T]:
        """The items, largest first, then the others (``limit`` in all at most)."""
        chosen = [item for _, _, item in sorted(self._largest, key=lambda entry: entry[:2], reverse=True)]
        return chosen + self._others[: self.limit - len(chosen)]


def top_positions(shown: Sequence[Any], limit: int) -> list[int]:
    """The positions of the rows a snapshot sends: the ``limit`` largest numeric ``shown`` values (a row's estimate,
    else its value), ranked as :class:`LargestFirst` ranks them."""
    ranked = LargestFirst[int](limit)
    for position, value in enumerate(shown):
        ranked.add(value, position)
    return ranked.items()


def _write_atomically(path: Path, lines: Iterable[str], held: OutputGuard) -> None:
    """Write ``path`` (in the output directory ``held`` holds open) whole: a temporary file renamed over it."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8", newline="\n", opener=held.opener) as file:
        file.writelines(lines)
    held.replace(temporary, path)


class PartitionSnapshotWriter:
    """One partition's files written as batches of rows come, in key order, holding only what the answer needs
    besides the files: the ``ROWS_ON_THE_WIRE`` rows that rank first (:class:`LargestFirst`) and the group count.
    Each batch's text is formatted and written, then the batch dropped: a partition may hold millions of groups.
    Use as a context manager; the files are renamed into place on a clean exit, deleted otherwise. With ``held``
    (the reduce attempt's hold on its output directory, in which it made ``directory``), all in the directory held."""

    def __init__(self, directory: Path, index: int, held: OutputGuard | None = None) -> None:
        if held is None:
            directory.mkdir(parents=True, exist_ok=True)
        self.held = held
        self.groups = 0
        self.ranked = LargestFirst[tuple[Any, ...]](ROWS_ON_THE_WIRE)
        self._paths = [directory / f"part-{index:05d}", directory / f"estimates-{index:05d}.jsonl"]
        self._temporaries = [path.with_name(f".{path.name}.{os.getpid()}.tmp") for path in self._paths]
        opener = None if held is None else held.opener
        self._files = [
            open(path, "w", encoding="utf-8", newline="\n", opener=opener)  # noqa: SIM115
            for path in self._temporaries
        ]

    def __enter__(self) -> PartitionSnapshotWriter:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        for file in self._files:
            file.close()
        held = self.held
        for temporary, path in zip(self._temporaries, self._paths, strict=True):
            if kind is None and held is None:
                os.replace(temporary, path)
            elif kind is None and held is not None:
                held.replace(temporary, path)
            elif held is None:
                temporary.unlink(missing_ok=True)
            else:
                held.unlink(temporary)

    def add(self, batch: SnapshotTable) -> None:
        """Rows that follow those added before in key order."""
        keys = to_json_column(batch.keys, keys=True)
        values = to_json_column(batch.values)
        estimates, lows, highs = (to_json_column(column) for column in (batch.estimates, batch.lows, batch.highs))
        shown = [v if e == "null" else e for e, v in zip(estimates, values, strict=True)]
        finals = ["true" if final else "false" for final in batch.finals]
        part, details = self._files
        part.writelines(f"{k}\t{v}\n" for k, v in zip(keys, shown, strict=True))
        details.writelines(
            f'{{"key":{k},"value":{v},"estimate":{e},"low":{lo},"high":{hi},"final":{f}}}\n'
            for k, v, e, lo, hi, f in zip(keys, values, estimates, lows, highs, finals, strict=True)
        )
        columns = (batch.keys, batch.values, batch.estimates, batch.lows, batch.highs, batch.finals)
        ranked_by = [value if estimate is None else estimate for value, estimate in zip(*columns[1:3], strict=True)]
        self.ranked.add_many(ranked_by, lambda i: tuple(column[i] for column in columns))
        self.groups += len(batch)

    def wire_rows(self) -> list[dict[str, Any]]:
        """The rows sent with the answer (``row_to_wire``), largest first, as ``top_positions`` ranks them."""
        fields = ("key", "value", "estimate", "low", "high", "final")
        return [
            dict(zip(fields, row if row[2] is not None else (*row[:2], None, None, None, row[5]), strict=True))
            for row in self.ranked.items()
        ]


def write_partition_snapshot(directory: Path, index: int, table: SnapshotTable) -> SnapshotTable:
    """Write one partition's files; returns the table sorted by key."""
    ordered = table.sorted()
    with PartitionSnapshotWriter(directory, index) as writer:
        writer.add(ordered)
    return ordered


def write_final_partition_snapshot(
    held: OutputGuard, directory: Path, index: int, part: Path
) -> tuple[int, list[dict[str, Any]]]:
    """A partition that finished before it answered a snapshot: its snapshot is its final output (every row
    final, exact). Copies ``part`` and writes the matching estimates; returns the number of groups and the
    ``ROWS_ON_THE_WIRE`` rows ``top_positions`` would pick, read in one pass holding only those (this runs in the
    coordinator, and a partition may hold millions of groups). ``directory`` and ``part`` are in the output
    directory ``held`` holds open, and ``directory`` is made there (:meth:`~hop.outputs.OutputGuard.folder`): all
    of it is read and written in that directory, never in another given its name since it was checked."""
    ranked = LargestFirst[dict[str, Any]](ROWS_ON_THE_WIRE)
    groups = 0

    def rows() -> Iterable[str]:
        nonlocal groups
        with open(part, encoding="utf-8", opener=held.opener) as lines:
            for line in lines:
                key_text, _, value_text = line.rstrip("\n").partition("\t")
                value = json.loads(value_text)
                row = {"key": json.loads(key_text), "value": value, "estimate": None, "low": None, "high": None}
                if isinstance(value, int | float) and not isinstance(value, bool):
                    row.update(estimate=value, low=value, high=value)
                ranked.add(value, row)
                row["final"] = True
                groups += 1
                yield _dumps(row) + "\n"

    _write_atomically(directory / f"estimates-{index:05d}.jsonl", rows(), held)
    temporary = directory / f".part-{index:05d}.{os.getpid()}.tmp"
    held.copy(part, temporary)
    held.replace(temporary, directory / f"part-{index:05d}")
    return groups, ranked.items()
