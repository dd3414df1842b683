"""The coordinator's view of a continuous job's windows and checkpoints, with no I/O.

Every stream reducer reports each window it closes: one it built (``window_done``, also with no record of its own),
or a stretch of windows in which it held no data cell (``windows_skipped``: ``[window, end)`` and their reason).
Once every partition reported or skipped a window that some partition built, the tracker returns its
``_window.json`` content: bounds, records, why it was emitted (per partition, and the first reason that is not
``complete`` overall), the fidelity and the C2 scoreboard (merged over the partitions that built it: a cell counts
as present, ``D`` or ``E``, only where every one of them held it; ``_merge_cell``). Windows every partition skipped
held no data: they get no summary. The newest windows are kept for the web view and ``hop windows``. With
``keep_windows`` N, the tracker also says which windows' folders to remove (:meth:`WindowTracker.take_removals`):
all but the newest N summarized, and a removed window's folder again when a reducer retry writes its part anew (it
redoes the windows after its checkpoint; the window keeps no folder of parts without a ``_window.json``).

Reducers also report what their checkpoints cover (per map, the last spill taken); the minimum over all
partitions is what no reducer attempt can need again, so workers may delete those spills (``stream_trim``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from hop.stream.rows import largest_rows

KEEP_WINDOWS = 500
"""Windows the coordinator keeps in memory for queries (every window is on disk)."""
KEEP_ROWS = 2000
"""Rows per window kept for queries: those of the largest values, where they are numbers (``hop.stream.rows``)."""
KEEP_ROWS_WINDOWS = 50
"""How many of the newest windows keep their rows in memory (the coordinator's memory stays flat)."""
KEEP_DONE = 100_000
"""Summarized windows remembered, to ignore a retried reducer's second report of one: a retry redoes the windows
after its last checkpoint only, far fewer; a bound keeps a job that runs for months from growing (6 MB at most)."""


class WindowTracker:
    def __init__(
        self, num_partitions: int, num_sources: int, window: dict[str, Any], keep_windows: int | None = None
    ) -> None:
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
        self._done: set[int] = set()
        self._done_order: deque[int] = deque()
        self._pauses: dict[int, int] = {}
        self._skipped: dict[int, list[tuple[int, int, str]]] = {}
        """partition -> stretches [window, end) it closed holding no data cell, with their reason."""
        self._closed_below: dict[int, int] = {}
        """partition -> the first window it has not closed (that it reported)."""
        self.keep_windows = keep_windows
        self._kept: deque[tuple[int, str]] = deque()
        """(window, label) of the summarized windows whose folders are kept, oldest summarized first."""
        self._kept_numbers: set[int] = set()
        self._removed_through: int | None = None
        """The highest window whose folder was removed."""
        self._removals: list[str] = []
        """Labels of window folders to remove (``take_removals``)."""

    def on_window_done(self, partition: int, report: dict[str, Any]) -> dict[str, Any] | None:
        """Record one partition's report; returns the window's summary once every partition reported or
        skipped it."""
        number = int(report["window"])
        self._closed_below[partition] = max(self._closed_below.get(partition, number + 1), number + 1)
        if number in self._done:
            # Written again by a reducer retry after its checkpoint: already summarized. Its folder, if removed
            # already, was made again for this part alone: it goes too.
            through = self._removed_through
            if through is not None and number <= through and number not in self._kept_numbers:
                self._removals.append(str(report["label"]))
            return None
        self._partial.setdefault(number, {})[partition] = report
        return self._complete(number)

    def on_windows_skipped(self, partition: int, window: int, end: int, reason: str) -> list[dict[str, Any]]:
        """A partition closed windows ``[window, end)`` holding no data cell of its own; returns the summaries of
        the windows other partitions built that are now reported by all."""
        self._skipped.setdefault(partition, []).append((window, end, reason))
        self._closed_below[partition] = max(self._closed_below.get(partition, end), end)
        summaries = [self._complete(number) for number in sorted(self._partial) if window <= number < end]
        if len(self._closed_below) == self.num_partitions:  # forget stretches every partition has passed
            low = min(self._closed_below.values())
            for ranges in self._skipped.values():
                ranges[:] = [r for r in ranges if r[1] > low]
        return [summary for summary in summaries if summary is not None]

    def _skip_reason(self, partition: int, number: int) -> str | None:
        return next((r for lo, hi, r in self._skipped.get(partition, ()) if lo <= number < hi), None)

    def _complete(self, number: int) -> dict[str, Any] | None:
        parts = self._partial[number]
        skipped = {p: self._skip_reason(p, number) for p in range(self.num_partitions) if p not in parts}
        if any(reason is None for reason in skipped.values()):
            return None
        del self._partial[number]
        self._done.add(number)
        self._done_order.append(number)
        if len(self._done_order) > KEEP_DONE:
            self._done.discard(self._done_order.popleft())
        return self._summarize([parts[p] for p in sorted(parts)], sorted(parts), skipped)

    def _summarize(
        self, reports: list[dict[str, Any]], partitions: list[int], skipped: dict[int, str | None]
    ) -> dict[str, Any]:
        first = reports[0]
        reasons = [r["reason"] for r in reports] + [str(r) for r in skipped.values()]
        reason = next((r for r in reasons if r != "complete"), "complete")
        grids = [r["scoreboard"]["grid"] for r in reports]
        merged = []
        for rows in zip(*grids, strict=True):
            merged.append("".join(_merge_cell(cells) for cells in zip(*rows, strict=True)))
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
            "records": max(r["records"] for r in reports),  # each partition counts every record of its cells
            "output_records": sum(r["output_records"] for r in reports),
            "reason": reason,
            "fidelity": present / cells if cells else 1.0,
            "scoreboard": {**first["scoreboard"], "grid": merged, "present": present, "cells": cells},
            "partitions": sorted(
                [
                    {
                        "partition": p,
                        "reason": r["reason"],
                        "fidelity": r["fidelity"],
                        "output_records": r["output_records"],
                        "emitted_at": r["emitted_at"],
                    }
                    for p, r in zip(partitions, reports, strict=True)
                ]
                + [
                    {"partition": p, "reason": r, "fidelity": None, "output_records": 0, "no_data": True}
                    for p, r in skipped.items()
                ],
                key=lambda entry: int(entry["partition"]),
            ),
            "window_spec": self.window,
        }
        kept_rows, ranked = largest_rows([row for r in reports for row in r.get("rows", [])], KEEP_ROWS)
        summary["rows"] = kept_rows
        summary["rows_ranked"] = ranked or any(r.get("rows_ranked") for r in reports)
        self.windows.append(summary)
        if self.keep_windows is not None:
            self._kept.append((int(summary["window"]), str(summary["label"])))
            self._kept_numbers.add(int(summary["window"]))
            while len(self._kept) > self.keep_windows:
                number, label = self._kept.popleft()
                self._kept_numbers.discard(number)
                through = self._removed_through
                self._removed_through = number if through is None else max(through, number)
                self._removals.append(label)
        if len(self.windows) > KEEP_ROWS_WINDOWS:  # older windows keep their report; their rows are on disk
            self.windows[-KEEP_ROWS_WINDOWS - 1]["rows"] = []
        return summary

    def take_removals(self) -> list[str]:
        """The labels of the window folders to remove now (``keep_windows``), each once; empty without it."""
        removals, self._removals = self._removals, []
        return removals

    def since(self, after: int, limit: int = 100) -> list[dict[str, Any]]:
        """Windows with ``seq > after``, oldest first, at most ``limit`` (ask again from the last one for more;
        a first request with ``after=0`` gets the newest ``limit``)."""
        newer = [w for w in self.windows if w["seq"] > after]
        return newer[-limit:] if after <= 0 else newer[:limit]

    def on_pause(self, partition: int, pane: int | None) -> tuple[bool, int | None]:
        """A reducer's pause indicator changed; returns whether the job's (the lowest over reducers) changed, and
        it (``None``: no reducer is over its budget)."""
        before = min(self._pauses.values()) if self._pauses else None
        if pane is None:
            self._pauses.pop(partition, None)
        else:
            self._pauses[partition] = int(pane)
        after = self.pause()
        return after != before, after

    def pause(self) -> int | None:
        """The job's pause indicator now: the lowest pane any reducer over its memory budget still needs (``None``:
        none is over). A map attempt started while it holds is told it with its task: it missed the broadcast."""
        return min(self._pauses.values()) if self._pauses else None

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


def _merge_cell(states: tuple[str, ...]) -> str:
    """One scoreboard cell over all partitions: present (``D`` or ``E``) only where every partition had it;
    otherwise the worst of missing, lost, shed and cut by the stop (``C``), in that order."""
    if len(set(states)) == 1:
        return states[0]
    for worst in ("M", "L", "S", "C"):
        if worst in states:
            return worst
    return "D"  # data in some partitions, sealed empty in others
