"""The coordinator's view of a continuous job's windows and checkpoints, with no I/O.

Every stream reducer reports each window it wrote (``window_done``); once all partitions reported a window the
tracker returns its ``_window.json`` content: bounds, records, why it was emitted (per partition, and the first
reason that is not ``complete`` overall), the fidelity and the C2 scoreboard (a cell counts as present only where
every partition held it). The newest windows are kept for the web view and ``hop windows``.

Reducers also report what their checkpoints cover (per map, the last spill taken); the minimum over all
partitions is what no reducer attempt can need again, so workers may delete those spills (``stream_trim``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

KEEP_WINDOWS = 500
"""Windows the coordinator keeps in memory for queries (every window is on disk)."""


class WindowTracker:
    def __init__(self, num_partitions: int, num_sources: int, window: dict[str, Any]) -> None:
        self.num_partitions = num_partitions
        self.num_sources = num_sources
        self.window = window
        self._partial: dict[int, dict[int, dict[str, Any]]] = {}
        self.windows: deque[dict[str, Any]] = deque(maxlen=KEEP_WINDOWS)
        self.seq = 0
        self.total = 0
        self._covered: dict[int, dict[int, tuple[int, int]]] = {}
        """partition -> map -> (attempt, seq) its latest checkpoint covers."""
        self._trimmed: dict[int, tuple[int, int]] = {}

    def on_window_done(self, partition: int, report: dict[str, Any]) -> dict[str, Any] | None:
        """Record one partition's report; returns the window's summary once every partition reported it."""
        parts = self._partial.setdefault(int(report["window"]), {})
        parts[partition] = report
        if len(parts) < self.num_partitions:
            return None
        del self._partial[int(report["window"])]
        return self._summarize([parts[p] for p in sorted(parts)], sorted(parts))

    def _summarize(self, reports: list[dict[str, Any]], partitions: list[int]) -> dict[str, Any]:
        first = reports[0]
        reasons = [r["reason"] for r in reports]
        reason = next((r for r in reasons if r != "complete"), "complete")
        grids = [r["scoreboard"]["grid"] for r in reports]
        merged = []
        for rows in zip(*grids, strict=True):
            merged.append(
                "".join(
                    cells[0] if len(set(cells)) == 1 else ("M" if "M" in cells else "L" if "L" in cells else "D")
                    for cells in zip(*rows, strict=True)
                )
            )
        present = sum(row.count("D") + row.count("E") for row in merged)
        cells = sum(len(row) for row in merged)
        self.seq += 1
        self.total += 1
        summary = {
            "seq": self.seq,
            "window": first["window"],
            "label": first["label"],
            "start": first["start"],
            "end": first["end"],
            "emitted_at": max(r["emitted_at"] for r in reports),
            "records": first["records"],
            "output_records": sum(r["output_records"] for r in reports),
            "reason": reason,
            "fidelity": present / cells if cells else 1.0,
            "scoreboard": {**first["scoreboard"], "grid": merged, "present": present, "cells": cells},
            "partitions": [
                {
                    "partition": p,
                    "reason": r["reason"],
                    "fidelity": r["fidelity"],
                    "output_records": r["output_records"],
                    "emitted_at": r["emitted_at"],
                }
                for p, r in zip(partitions, reports, strict=True)
            ],
            "window_spec": self.window,
            "rows": [row for r in reports for row in r.get("rows", [])][:500],
        }
        self.windows.append(summary)
        return summary

    def since(self, after: int) -> list[dict[str, Any]]:
        return [w for w in self.windows if w["seq"] > after]

    def covered(self, source: int) -> list[int] | None:
        """The (attempt, seq) of the last spill of ``source`` that every reducer's checkpoint holds."""
        mark = self._trimmed.get(source)
        return list(mark) if mark is not None else None

    def on_checkpoint(self, partition: int, processed: list[list[int]]) -> list[tuple[int, int, int]]:
        """A reducer checkpointed; returns the (map, attempt, seq) up to which workers may now forget spills."""
        self._covered[partition] = {int(m): (int(a), int(s)) for m, a, s in processed}
        if len(self._covered) < self.num_partitions:
            return []
        trims = []
        for source in range(self.num_sources):
            marks = [covered.get(source) for covered in self._covered.values()]
            if any(mark is None for mark in marks):
                continue
            low = min(mark for mark in marks if mark is not None)
            if low > self._trimmed.get(source, (-1, -1)):
                self._trimmed[source] = low
                trims.append((source, *low))
        return trims
