"""The reduce side of a continuous query: panes in, windows out, as a state machine with no I/O.

A stream reducer receives, from every source (one stream map per source), the *cells* of its partition: the combined
data of one pane of one source. With each cell, or alone, a source says how far it has *sealed*: every pane below
``sealed`` is final, and a pane it sent nothing for is empty. The assembler keeps the cells that windows not yet
emitted still need, decides when a window is due and why, builds it, and reports its C2 scoreboard: a grid of
sources x panes saying which cells it holds (``D`` data, ``E`` sealed empty, ``L`` lost in a failure, ``S`` shed by
the map to meet the latency bound, ``C`` cut by the stop, ``M`` missing when emitted); only ``D`` and ``E`` count as
present, and a window's fidelity is the share of its cells present. ``C`` marks every pane of a stopped source from
where it had naturally sealed on (``source_stopping``/``source_ended`` with ``natural``), with or without data:
flushed, not finished, or never reached. So a window the stop cut short has a fidelity below 1 (unless the stop came
exactly at its end); a lost or shed pane, or a pane a source gone for good never sent, keeps its ``L`` or ``S``. A
source that ended on its own (exhausted) has no such mark: its panes past its end are sealed empty, ``E``.

A window is emitted, in window order, as soon as one of these holds (the reason is recorded):

- ``complete``: every source sealed past the window's last pane (``source failure`` instead if some cell is lost
  or a source is gone for good);
- ``fidelity``: with a fidelity bound F < 1, the share of present cells reached F (C2's "earliest X% of panes");
- ``latency``: with ``max_latency`` L, L seconds passed since the first source sealed past the window's end;
- ``stopped``: the job was stopped and the window holds panes beyond where some source naturally sealed.

A window holding no record yet (past the last pane with data, or with shed or lost records) closes only on
``complete``, or on ``latency`` counted from a live source's seal: the panes of a source that ended on its own are
present forever and would make every later window meet a fidelity bound. A cell arriving for a window already
emitted is *late* for that window: the caller records it (``OUT/_late/``), it still counts in later windows that
include its pane. Nothing is revised after emission (C2's default).

Closing costs by the windows that hold something, not by the windows between: a run of windows in which this
partition holds no data cell (nor a shed or lost pane) and whose reason is the same closes as one *stretch*
(``due`` returns it as one :class:`Closing` with ``end > window + 1``; ``skip`` closes it), however long it is. A
record stamped far in the future (milliseconds where seconds are meant) thus costs a few steps, not one per window
in between. The caller reports every window and every stretch it closes, so that a window holding data in another
partition only is summarized with this partition's reason.

Windows are built by merging their panes' cells, or differentially when the job defines ``uncombine``: the running
state of the previous window loses the cells that left and gains the cells that came (W1 = W0 - P0 + P2), with a
per-key count of contributing cells so a key with none left disappears exactly as it would from a merge.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hop.stream.windows import WindowSpec

FOREVER = 1 << 1100
"""``sealed`` of a source that has ended: every pane is final. Past the pane of any position: a finite float event
time is below 2**1024 seconds, 2**1044 microseconds (a stamp in nanoseconds read as seconds, windowed by
milliseconds, is in pane ~1.7e20, which ``1 << 62`` once left unsealed and silently lost). Such numbers cross the
engine as ``shuffle.codec`` packs them."""

Merge = Callable[[Any, Any, Any], Any]
"""``merge(key, a, b)``: one value from two combined values of a key."""


@dataclass
class Cell:
    """One pane of one source, for this partition: ``data`` maps keys to a combined value (``lists=False``) or
    to the list of the values the map's combiner produced."""

    records: int
    data: dict[Any, Any]
    nbytes: int = 0
    """Its size as received (encoded): what the reducer's memory budget counts."""


class Closing(NamedTuple):
    """Windows ``[window, end)`` are due for ``reason``: one window to ``emit`` (``end == window + 1``), or, when
    ``empty``, one or more windows holding no data cell (nor a shed or lost pane) of this partition to ``skip``."""

    window: int
    reason: str
    end: int
    empty: bool = False


@dataclass
class WindowResult:
    """A window ready to be written: its groups (key -> combined value, or list of values) and its report."""

    window: int
    start: float
    end: float
    reason: str
    groups: dict[Any, Any]
    records: int
    scoreboard: dict[str, Any]
    fidelity: float


@dataclass
class SourceMarks:
    sealed: int = -FOREVER
    """Every pane below this is final."""
    natural: int | None = None
    """Where the source had sealed when it was stopped (panes past it were flushed, not finished)."""
    gone: bool = False
    received: int = -FOREVER
    """The highest pane received: a source sends its panes in order, so a lower one is a resend."""
    lost: list[tuple[int, int]] = field(default_factory=list)
    """Pane ranges [lo, hi) lost in a failure (a resumed source could not re-read them)."""
    shed: set[int] = field(default_factory=set)
    """Panes whose records the map skipped, in whole or in part, to keep up with the latency bound."""

    def is_lost(self, pane: int) -> bool:
        return any(lo <= pane < hi for lo, hi in self.lost)


class WindowAssembler:
    """Cells and marks of one reduce partition; see the module docstring for the rules."""

    def __init__(
        self,
        spec: WindowSpec,
        num_sources: int,
        lists: bool,
        merge: Merge,
        fidelity: float = 1.0,
        max_latency: float | None = None,
        uncombine: Merge | None = None,
    ) -> None:
        if not 0 < fidelity <= 1:
            raise ValueError(f"fidelity must be in (0, 1], got {fidelity}")
        self.spec = spec
        self.lists = lists
        self.merge = merge
        self.fidelity = fidelity
        self.max_latency = max_latency
        # Differential windows pay for subtracting what left; with tumbling windows everything leaves, so merging
        # the panes is cheaper (C2: differential wins when the slide is well under the range).
        self.uncombine = uncombine if not spec.tumbling else None
        self.sources = [SourceMarks() for _ in range(num_sources)]
        self.cells: dict[int, dict[int, Cell]] = {}
        self.next_window: int | None = None
        """The lowest window not yet emitted; set by the first cell until the first window is emitted."""
        self.started = False
        self._seal_times: list[tuple[int, float]] = []
        """(furthest seal of any source, ended and gone ones sealing forever; when first seen), increasing in both: a
        window's latency clock starts at the first entry sealed past its last pane (steps, not a clock per window:
        one far seal covers any number of windows)."""
        self._live_seal_times: list[tuple[int, float]] = []
        """The same for the furthest seal of a source still running (the clock of windows past the last data)."""
        self.max_data_pane: int | None = None
        self.late_cells = 0
        self.windows_emitted = 0
        self._running: dict[Any, list[Any]] = {}
        """Differential mode: key -> [value, contributing cells] of the last window built."""
        self._running_cells: dict[tuple[int, int], Cell] = {}
        """The cells the running state holds (kept here after the window that used them last is evicted)."""

    # Events ------------------------------------------------------------------------------------------------
    def add_cell(
        self, source: int, pane: int, records: int, pairs: Iterable[tuple[Any, Any]], sealed: int, nbytes: int = 0
    ) -> str:
        """Take one cell; returns ``"new"``, ``"duplicate"`` (a resent cell already held or already used) or
        ``"late"`` (every window containing the pane was emitted already, or some were: see ``late_windows``)."""
        self.add_seal(source, sealed)
        marks = self.sources[source]
        if pane <= marks.received:
            return "duplicate"  # a resumed map or a restarted push sends again what was already taken
        marks.received = pane
        if self.started and self.next_window is not None and pane < self.spec.panes_of_window(self.next_window).start:
            # Every window holding this pane is out: keep it only to say so.
            self.late_cells += 1
            return "late"
        data: dict[Any, Any] = {}
        if self.lists:
            for key, value in pairs:
                data.setdefault(key, []).append(value)
        else:
            for key, value in pairs:
                data[key] = self.merge(key, data[key], value) if key in data else value
        self.cells.setdefault(pane, {})[source] = Cell(records, data, nbytes)
        if records:
            self._note_held(pane, pane)
        late = (
            self.started and self.next_window is not None and self.spec.windows_of_pane(pane).start < self.next_window
        )
        if late:
            self.late_cells += 1
            return "late"
        return "new"

    def late_windows(self, pane: int) -> list[int]:
        """The windows holding ``pane`` that were already emitted."""
        if self.next_window is None:
            return []
        windows = self.spec.windows_of_pane(pane)
        return [w for w in windows if w < self.next_window]

    def _note_held(self, first: int, last: int) -> None:
        """Panes ``first`` to ``last`` hold records, or held some that were shed or lost: their windows are written
        (a window whose every record was shed, or lost, says so; it was left out when no data came after it)."""
        if self.max_data_pane is None or last > self.max_data_pane:
            self.max_data_pane = last
        if not self.started:
            window = self.spec.first_window_of_pane(first)
            self.next_window = window if self.next_window is None else min(self.next_window, window)

    def add_seal(self, source: int, sealed: int) -> None:
        marks = self.sources[source]
        marks.sealed = max(marks.sealed, sealed)

    def add_lost(self, source: int, lo: int, hi: int) -> None:
        """A resumed source could not re-read panes [lo, hi): they are final and lost."""
        if hi > lo:
            self.sources[source].lost.append((lo, hi))
            # A range open below (``-FOREVER``: a retry with no checkpoint lost all its source sent before it) has no
            # first pane to open windows from: its windows start with the data's, or with its own last pane. From
            # -FOREVER, a reducer with no window out yet walked window by window from pane -2**1100, each one
            # "holding" a lost pane, and never wrote a window again nor drained at the stop.
            self._note_held(lo if lo > -FOREVER else hi - 1, hi - 1)
            self.add_seal(source, hi)

    def add_shed(self, source: int, panes: Iterable[int]) -> None:
        """The map shed records of these panes (load shedding): their cells are incomplete."""
        shed = set(panes)
        self.sources[source].shed.update(shed)
        if shed:
            self._note_held(min(shed), max(shed))

    def source_stopping(self, source: int, natural: int) -> None:
        """The job is being stopped: panes from ``natural`` on are flushed, not finished."""
        self.sources[source].natural = natural

    def source_ended(self, source: int, natural: int | None = None) -> None:
        """A source sent its last pane (exhausted, or stopped: then ``natural`` is where it had sealed)."""
        marks = self.sources[source]
        marks.sealed = FOREVER
        if natural is not None:
            marks.natural = natural

    def source_gone(self, source: int) -> None:
        """A source failed for good: windows stop waiting for it and report its missing cells."""
        self.sources[source].gone = True

    @property
    def held_bytes(self) -> int:
        """Encoded size of the cells held (those a differential window still holds count too)."""
        held = {id(cell): cell.nbytes for by_source in self.cells.values() for cell in by_source.values()}
        held.update((id(cell), cell.nbytes) for cell in self._running_cells.values())
        return sum(held.values())

    def pause_pane(self) -> int | None:
        """C2's pause indicator: the last pane the next window needs. Sources may run up to it (so that window can
        complete and free memory) but should not run ahead of it while the reducer is over its memory budget."""
        if self.next_window is None:
            return None
        return self.spec.last_pane(self.next_window)

    @property
    def finished(self) -> bool:
        """Every source ended and every window holding data was emitted."""
        if not all(m.sealed >= FOREVER or m.gone for m in self.sources):
            return False
        if self.max_data_pane is None or self.next_window is None:
            return True
        return self.spec.panes_of_window(self.next_window).start > self.max_data_pane

    # Decisions ---------------------------------------------------------------------------------------------
    def _present(self, source: int, pane: int) -> str:
        """The scoreboard letter of one cell (module docstring)."""
        marks = self.sources[source]
        cell = self.cells.get(pane, {}).get(source)
        if pane in marks.shed:
            return "S"
        if cell is None and (marks.is_lost(pane) or (marks.gone and pane >= marks.sealed)):
            return "L"  # a failure, stopped or not, says more than the stop
        if marks.natural is not None and pane >= marks.natural:
            # Flushed by the stop, or never read: its data (if any) is part of the pane at most, and a pane with no
            # cell is not known to be empty, though an ended source's seal says every pane is final.
            return "C"
        if cell is not None:
            return "D" if cell.records else "E"
        return "E" if pane < marks.sealed else "M"

    def scoreboard(self, window: int) -> dict[str, Any]:
        panes = self.spec.panes_of_window(window)
        grid = ["".join(self._present(s, p) for p in panes) for s in range(len(self.sources))]
        present = sum(row.count("D") + row.count("E") for row in grid)
        return {
            "sources": len(self.sources),
            "first_pane": panes.start,
            "panes": len(panes),
            "grid": grid,
            "present": present,
            "cells": len(grid) * len(panes),
        }

    def due(self, now: float) -> list[Closing]:
        """The windows to close now, in order, with their reasons: single windows for ``emit``, stretches holding
        no data cell of this partition for ``skip`` (module docstring)."""
        self._note_seals(now)
        due: list[Closing] = []
        if self.next_window is None:
            return due
        window = self.next_window
        while True:
            reason = self._reason(window, now)
            if reason is None:
                break
            end = self._stretch_end(window, reason, now)
            due.append(Closing(window, reason, max(end, window + 1), empty=end > window))
            window = max(end, window + 1)
        return due

    def _note_seals(self, now: float) -> None:
        """Start the latency clocks of the windows sealed since the last call (see ``_seal_times``)."""
        for steps, seal in (
            (self._seal_times, max(FOREVER if m.gone else m.sealed for m in self.sources)),
            (self._live_seal_times, self._live_seal()),
        ):
            if not steps or seal > steps[-1][0]:
                steps.append((seal, now))
            if self.next_window is not None:  # forget steps no window still open can start at
                last = self.spec.last_pane(self.next_window)
                drop = bisect.bisect_right(steps, last, key=lambda step: step[0])
                del steps[: max(0, drop - 1)]

    def _clock(self, steps: list[tuple[int, float]], window: int) -> float | None:
        """When a seal (from ``steps``) first passed the last pane of ``window``; ``None`` if none has."""
        found = bisect.bisect_right(steps, self.spec.last_pane(window), key=lambda step: step[0])
        return steps[found][1] if found < len(steps) else None

    def _holds_something(self, panes: range) -> int | None:
        """The first pane from ``panes.start`` on that holds a data cell, a shed pane or a lost one (None: none)."""
        first = panes.start
        found = [p for p, by_source in self.cells.items() if p >= first and any(c.records for c in by_source.values())]
        for marks in self.sources:
            found += [p for p in marks.shed if p >= first]
            found += [max(lo, first) for lo, hi in marks.lost if hi > first]
        return min(found, default=None)

    def _stretch_end(self, window: int, reason: str, now: float) -> int:
        """The end of the run of windows from ``window`` that hold nothing of this partition and close now for the
        same ``reason`` (``window`` itself when it holds something: no stretch). The reason of a window holding
        nothing changes only where its last pane crosses a source's seal or stop mark or its first pane passes the
        last data; between those it holds for a prefix (clocks and sealed shares only decrease), so a binary search
        finds the end."""
        spec = self.spec
        special = self._holds_something(spec.panes_of_window(window))
        limit = spec.windows_of_pane(special).start if special is not None else FOREVER
        if limit <= window:
            return window

        def last_reaches(pane: int) -> int:  # the first window whose last pane is >= pane
            return -((spec.panes_per_window - 1 - pane) // spec.panes_per_slide)

        thresholds = [last_reaches(m.sealed) for m in self.sources if -FOREVER < m.sealed < FOREVER]
        thresholds += [last_reaches(m.natural) for m in self.sources if m.natural is not None]
        thresholds.append(last_reaches(self._live_seal()))
        if self.max_data_pane is not None:
            thresholds.append(self.max_data_pane // spec.panes_per_slide + 1)  # the first window past the data
        limit = min([limit, *(t for t in thresholds if t > window)])
        if limit >= FOREVER:
            return window + 1  # nothing bounds it (cannot happen while a reason holds); stay exact
        low, high = window + 1, limit  # the end lies in [low, high]: window low - 1 closes for reason
        while low < high:
            middle = (low + high + 1) // 2
            if self._reason(middle - 1, now) == reason:
                low = middle
            else:
                high = middle - 1
        return low

    def _live_seal(self) -> int:
        """The furthest pane boundary a source still running has sealed up to (-1 if none): ended and gone
        sources seal forever, which says nothing about when a later window closes."""
        return max((m.sealed for m in self.sources if m.sealed < FOREVER and not m.gone), default=-1)

    def _reason(self, window: int, now: float) -> str | None:
        past_data = self.max_data_pane is None or self.spec.panes_of_window(window).start > self.max_data_pane
        if past_data and all(m.sealed >= FOREVER or m.gone for m in self.sources):
            return None  # past the last data of ended sources: nothing more to emit
        last = self.spec.last_pane(window)
        sealed = [m.sealed > last or m.gone for m in self.sources]
        board = None
        if all(sealed):
            board = self.scoreboard(window)
            if any("L" in row for row in board["grid"]):
                return "source failure"
            if any("S" in row for row in board["grid"]):
                return "latency"  # complete but for the records the map shed to keep up with the latency bound
            if any(m.natural is not None and m.natural <= last for m in self.sources):
                return "stopped"
            return "complete"
        if past_data:
            # No record is in this window yet. An exhausted source's panes count as present forever, so --fidelity
            # would find every later window due, without end; and only a live source's seal starts its latency
            # clock (live seals are finite, so this walk ends).
            if self._live_seal() <= last:
                return None
            opened = self._clock(self._live_seal_times, window)
            late = self.max_latency is not None and opened is not None and now - opened >= self.max_latency
            return "latency" if late else None
        if self.fidelity < 1:
            board = board or self.scoreboard(window)
            if board["present"] >= self.fidelity * board["cells"]:
                return "fidelity"
        since = self._clock(self._seal_times, window) if any(sealed) else None
        if self.max_latency is not None and since is not None and now - since >= self.max_latency:
            return "latency"
        return None

    # Building ----------------------------------------------------------------------------------------------
    def skip(self, window: int, end: int) -> None:
        """Close the stretch ``[window, end)`` (the next windows due, holding no data cell of this partition) without
        building them; the caller reports it."""
        if self.uncombine is not None:
            self._build_differential([])  # the running state holds none of the stretch's (empty) cells
        self._close(end)

    def _close(self, end: int) -> None:
        """Every window below ``end`` is out: forget what no later window needs."""
        self.started = True
        self.next_window = end
        keep_from = self.spec.panes_of_window(end).start
        for pane in [p for p in self.cells if p < keep_from]:
            del self.cells[pane]
        for marks in self.sources:
            marks.shed = {p for p in marks.shed if p >= keep_from}

    def emit(self, window: int, reason: str) -> WindowResult:
        """Build ``window`` (the next one due), forget the panes no later window needs, and return the result
        (``records == 0`` when this partition received no record of it: it is reported all the same, since another
        partition may hold records of it)."""
        panes = self.spec.panes_of_window(window)
        board = self.scoreboard(window)
        members = [(p, s, cell) for p in panes for s, cell in self.cells.get(p, {}).items()]
        records = sum(cell.records for _, _, cell in members)
        groups = self._build_differential(members) if self.uncombine is not None else self._build_merged(members)
        start, end = self.spec.bounds(window)
        self._close(window + 1)
        self.windows_emitted += 1
        fidelity = board["present"] / board["cells"] if board["cells"] else 1.0
        return WindowResult(window, start, end, reason, groups, records, board, fidelity)

    def _build_merged(self, members: list[tuple[int, int, Cell]]) -> dict[Any, Any]:
        groups: dict[Any, Any] = {}
        merge = self.merge
        for _, _, cell in members:
            if self.lists:
                for key, values in cell.data.items():
                    groups.setdefault(key, []).extend(values)
            else:
                for key, value in cell.data.items():
                    groups[key] = merge(key, groups[key], value) if key in groups else value
        return groups

    def _single(self, key: Any, value: Any) -> Any:
        if not self.lists:
            return value
        values: list[Any] = value
        result = values[0]
        for more in values[1:]:
            result = self.merge(key, result, more)
        return result

    def _build_differential(self, members: list[tuple[int, int, Cell]]) -> dict[Any, Any]:
        assert self.uncombine is not None
        wanted = {(p, s): cell for p, s, cell in members}
        running, merge, uncombine = self._running, self.merge, self.uncombine
        for cell_id in [c for c in self._running_cells if c not in wanted]:  # cells that left the window
            cell = self._running_cells.pop(cell_id)
            for key, value in cell.data.items():
                entry = running[key]
                entry[1] -= 1
                if entry[1] == 0:
                    del running[key]
                else:
                    entry[0] = uncombine(key, entry[0], self._single(key, value))
        for cell_id in [c for c in wanted if c not in self._running_cells]:  # cells that came
            self._running_cells[cell_id] = wanted[cell_id]
            for key, value in wanted[cell_id].data.items():
                single = self._single(key, value)
                if key not in running:
                    running[key] = [single, 1]
                else:
                    running[key][0] = merge(key, running[key][0], single)
                    running[key][1] += 1
        return {key: ([entry[0]] if self.lists else entry[0]) for key, entry in running.items()}

    # Checkpoints -------------------------------------------------------------------------------------------
    def to_state(self) -> dict[str, Any]:
        """Everything needed to resume (msgpack-able; cell data as key/value column pairs)."""
        return {
            "cells": [
                [pane, source, cell.records, list(cell.data.keys()), list(cell.data.values()), cell.nbytes]
                for pane, by_source in self.cells.items()
                for source, cell in by_source.items()
            ],
            "sources": [
                [m.sealed, m.natural, m.gone, m.received, [list(r) for r in m.lost], sorted(m.shed)]
                for m in self.sources
            ],
            "next_window": self.next_window,
            "started": self.started,
            "max_data_pane": self.max_data_pane,
            "late_cells": self.late_cells,
            "windows_emitted": self.windows_emitted,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Load ``to_state()`` output (decoded with tuples for lists, as the shuffle decodes keys)."""
        self.cells = {}
        for pane, source, records, keys, values, nbytes in state["cells"]:
            data = {key: list(value) if self.lists else value for key, value in zip(keys, values, strict=True)}
            self.cells.setdefault(pane, {})[source] = Cell(records, data, nbytes)
        for marks, (sealed, natural, gone, received, lost, shed) in zip(self.sources, state["sources"], strict=True):
            marks.sealed, marks.natural, marks.gone, marks.received = sealed, natural, gone, received
            marks.shed = set(shed)
            marks.lost = [(lo, hi) for lo, hi in lost]
        self.next_window = state["next_window"]
        self.started = state["started"]
        self.max_data_pane = state["max_data_pane"]
        self.late_cells = state["late_cells"]
        self.windows_emitted = state["windows_emitted"]
        self._running, self._running_cells = {}, {}

    def sealed_marks(self) -> list[int]:
        """Per source, how far its cells are reflected in this state (for trimming what workers keep)."""
        return [m.sealed for m in self.sources]
