"""A snapshot's files: ``OUT/_snapshots/<label>/``.

- ``part-NNNNN``: one line per group, ``json(key) TAB json(value)`` as in the job's output, sorted by key; the value
  is the estimate of the final value for Sum/Count/Mean, else the value so far.
- ``estimates-NNNNN.jsonl``: one JSON object per group: ``key``, ``value`` (so far), ``estimate``, ``low``,
  ``high`` (``null`` without an interval) and ``final`` (the value can no longer change).
- ``_snapshot.json`` (written by the coordinator once every partition reported): time, progress (the trigger), the
  fraction of input bytes and of chunks the reducers had seen, per-partition progress.

``<label>`` is the progress the snapshot was taken at, three decimals (``0.100``; more when ``--snapshot-every`` is
below 0.001, so labels stay unique: ``0.0005``); a snapshot asked for with ``hop snapshot`` is
``<progress>-now<seq>``. Files are written under a temporary name and renamed.
"""

from __future__ import annotations

import heapq
import json
import math
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from hop.jsonline import to_json, to_json_column
from hop.online.state import SnapshotRow, SnapshotTable

__all__ = [
    "ROWS_ON_THE_WIRE",
    "row_to_wire",
    "snapshot_directory",
    "label_digits",
    "snapshot_label",
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


def snapshot_directory(output: str | Path, label: str) -> Path:
    return Path(output) / "_snapshots" / label


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


def top_positions(shown: Sequence[Any], limit: int) -> list[int]:
    """The positions of the rows a snapshot sends: the ``limit`` largest numeric ``shown`` values (a row's estimate,
    else its value), largest first, ties in position order; if fewer are numeric, then the others in position order
    (a hand-written reduce's lists or texts have no size to rank by)."""
    numeric = [i for i, value in enumerate(shown) if _numeric(value)]
    ranked = heapq.nlargest(limit, numeric, key=shown.__getitem__)
    if len(ranked) < limit and len(numeric) < len(shown):
        ranked += [i for i, value in enumerate(shown) if not _numeric(value)][: limit - len(ranked)]
    return ranked


def _write_atomically(path: Path, lines: Iterable[str]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8", newline="\n") as file:
        file.writelines(lines)
    os.replace(temporary, path)


def write_partition_snapshot(directory: Path, index: int, table: SnapshotTable) -> SnapshotTable:
    """Write one partition's files; returns the table sorted by key."""
    directory.mkdir(parents=True, exist_ok=True)
    ordered = table.sorted()
    keys = to_json_column(ordered.keys, keys=True)
    values = to_json_column(ordered.values)
    estimates, lows, highs = (to_json_column(column) for column in (ordered.estimates, ordered.lows, ordered.highs))
    shown = [v if e == "null" else e for e, v in zip(estimates, values, strict=True)]
    finals = ["true" if final else "false" for final in ordered.finals]
    _write_atomically(directory / f"part-{index:05d}", (f"{k}\t{v}\n" for k, v in zip(keys, shown, strict=True)))
    _write_atomically(
        directory / f"estimates-{index:05d}.jsonl",
        (
            f'{{"key":{k},"value":{v},"estimate":{e},"low":{lo},"high":{hi},"final":{f}}}\n'
            for k, v, e, lo, hi, f in zip(keys, values, estimates, lows, highs, finals, strict=True)
        ),
    )
    return ordered


def write_final_partition_snapshot(directory: Path, index: int, part: Path) -> tuple[int, list[dict[str, Any]]]:
    """A partition that finished before it answered a snapshot: its snapshot is its final output (every row
    final, exact). Copies ``part`` and writes the matching estimates; returns the number of groups and the
    ``ROWS_ON_THE_WIRE`` rows ``top_positions`` would pick, read in one pass holding only those (this runs in the
    coordinator, and a partition may hold millions of groups)."""
    directory.mkdir(parents=True, exist_ok=True)
    limit = ROWS_ON_THE_WIRE
    largest: list[tuple[Any, int, dict[str, Any]]] = []
    """A min-heap of (value, -position, row): the largest numeric values, the earlier row first among equals."""
    others: list[dict[str, Any]] = []
    """The first rows without a numeric value, for when there are fewer numeric ones than ``limit``."""
    groups = 0

    def rows() -> Iterable[str]:
        nonlocal groups
        with open(part, encoding="utf-8") as lines:
            for position, line in enumerate(lines):
                key_text, _, value_text = line.rstrip("\n").partition("\t")
                value = json.loads(value_text)
                row = {"key": json.loads(key_text), "value": value, "estimate": None, "low": None, "high": None}
                if isinstance(value, int | float) and not isinstance(value, bool):
                    row.update(estimate=value, low=value, high=value)
                if _numeric(value):
                    entry = (value, -position, row)
                    if len(largest) < limit:
                        heapq.heappush(largest, entry)
                    elif entry > largest[0]:
                        heapq.heapreplace(largest, entry)
                elif len(others) < limit:
                    others.append(row)
                row["final"] = True
                groups += 1
                yield _dumps(row) + "\n"

    _write_atomically(directory / f"estimates-{index:05d}.jsonl", rows())
    temporary = directory / f".part-{index:05d}.{os.getpid()}.tmp"
    shutil.copyfile(part, temporary)
    os.replace(temporary, directory / f"part-{index:05d}")
    chosen = [row for _, _, row in sorted(largest, key=lambda entry: (entry[0], entry[1]), reverse=True)]
    return groups, chosen + others[: limit - len(chosen)]
