"""Which Parquet pieces of the materialized view (:mod:`hop.stream.view`) a compaction rewrites: I/O-free planning.

The view's base is a set of *pieces*, each holding every row of a range of ``window_start`` (``lo``..``hi``, its
least and greatest), the ranges disjoint, so a (window_start, partition, key) lives in one piece and a reader sees
one row for it whatever pieces it reads. A compaction plans from the manifest's pieces and the window starts of the
new delta rows (counted as the deltas are checked, before Spark starts):

- a new row goes to the piece whose range holds its window_start: the last piece whose ``lo`` is at most it (the
  first piece below every ``lo``), except a row past the newest piece's ``hi``, which goes to a new piece. A window
  arriving late (a retried reducer's rewritten delta, a partition behind the others) so rewrites the piece holding
  its range, and only that one; the windows the job moves on to make a new piece, rewriting nothing.
- pieces are merged size-tiered, by generation: a new piece has level 0, and a run of :data:`FAN_IN` adjacent pieces
  of one level (each under :data:`PIECE_ROWS` rows) becomes one piece of the next level, as a counter in base
  :data:`FAN_IN` carries. So there are at most ``FAN_IN - 1`` pieces of each level, and a row is rewritten once a
  level: a compaction costs its new rows and the pieces they touch, plus now and then a merge of at most ``FAN_IN``
  pieces of under :data:`PIECE_ROWS` rows each; never the whole base. A piece of :data:`PIECE_ROWS` rows or more is
  *full*: merged no more (rewritten alone when late rows touch it).
- a full piece (or the legacy one) ends for good the runs of the pieces before it: no later piece can join them, so
  their levels would keep up to ``FAN_IN - 1`` of each level there forever (a dozen pieces per full piece). A run of
  at least :data:`FAN_IN` mergeable pieces that such a piece ends has its first ``FAN_IN`` merged, whatever their
  levels (into the level above their highest), in a compaction without a carry, one such merge a compaction (so a
  compaction still merges fewer than ``FAN_IN * PIECE_ROWS`` rows besides its new rows and the pieces they touch):
  fewer than ``FAN_IN`` stay before each full piece. The pieces number ``(FAN_IN - 1)`` a level (about
  ``log_FAN_IN`` of the compactions since the newest full piece) plus at most ``FAN_IN`` per :data:`PIECE_ROWS`
  rows of the view (a full piece and those before it).
- a base written before pieces existed is one *legacy* piece (no known range, level ``None``: never merged) that
  takes every new row, so the first compaction after an upgrade rewrites it whole, once; its result is a piece.

Estimates: a rewritten piece's rows are taken as its old rows plus its new ones (new rows replacing old cells make
it fewer); the real counts come from what Spark wrote.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FAN_IN", "PIECE_ROWS", "Piece", "Plan", "Target", "plan", "target"]

FAN_IN = 4
"""Adjacent pieces of one level merged into one of the next level."""
PIECE_ROWS = 250_000
"""A piece of this many rows or more is full: merged no more. It bounds what one merge rewrites (fewer than
``FAN_IN * PIECE_ROWS`` rows) and so what one compaction costs, whatever the view's age."""


@dataclass(frozen=True)
class Piece:
    """A piece of the base, as the manifest lists it: ``files`` Parquet files named by :meth:`names` (``None``: a
    legacy base, whose files are every Parquet file of its folder), holding ``rows`` rows of ``windows`` distinct
    window starts from ``lo`` to ``hi``; ``level`` is its merge generation (``None``: never merged)."""

    id: int
    lo: float
    hi: float
    rows: int
    windows: int
    level: int | None
    files: int | None

    def names(self) -> list[str]:
        assert self.files is not None
        return [f"piece-{self.id:08d}-{number:03d}.parquet" for number in range(self.files)]

    def record(self) -> dict[str, Any]:
        return dict(id=self.id, lo=self.lo, hi=self.hi, rows=self.rows, windows=self.windows, level=self.level,
                    files=self.files)  # fmt: skip

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> Piece:
        level, files = record["level"], record["files"]
        level, files = None if level is None else int(level), None if files is None else int(files)
        lo, hi, rows, windows = float(record["lo"]), float(record["hi"]), int(record["rows"]), int(record["windows"])
        return cls(int(record["id"]), lo, hi, rows, windows, level, files)

    @classmethod
    def legacy(cls, rows: int, windows: int) -> Piece:
        return cls(0, -math.inf, math.inf, rows, windows, None, None)


@dataclass(frozen=True)
class Target:
    """Where a delta row goes, by its window_start (picklable, for Spark's executors): ``pieces[i]`` for the last
    ``i`` with ``los[i] <= start`` (0 below them all), or ``beyond`` when past ``last_hi``."""

    los: tuple[float, ...]
    pieces: tuple[int, ...]
    last_hi: float
    beyond: int | None


def target(where: Target, start: float) -> int:
    """The id of the piece (of the new base) a delta row of window ``start`` goes to."""
    if where.beyond is not None and start > where.last_hi:
        return where.beyond
    return where.pieces[max(0, bisect.bisect_right(where.los, start) - 1)]


@dataclass
class _Slot:
    sources: list[Piece]
    new_rows: int
    level: int | None
    rows: int  # estimated

    def mergeable(self, level: int) -> bool:
        return self.level == level and self.rows < PIECE_ROWS


@dataclass
class Plan:
    """What a compaction does: ``pieces`` the new base's, in range order; of those, ``written`` (id -> the old
    pieces whose rows it takes, maybe none) are written by Spark, the others linked unchanged from the current base;
    ``where`` sends each delta row to its piece; ``levels`` the written pieces' levels; ``next_piece`` the next id."""

    pieces: list[int]
    kept: dict[int, Piece]
    written: dict[int, list[Piece]]
    levels: dict[int, int | None]
    where: Target
    next_piece: int
    estimated_rows: dict[int, int] = field(default_factory=dict)


def plan(pieces: list[Piece], starts: Mapping[float, int], next_piece: int) -> Plan:
    """Plan a compaction of ``pieces`` (the current base's) with new rows counted by window start ``starts``,
    numbering the pieces it writes from ``next_piece`` (module docstring)."""
    pieces = sorted(pieces, key=lambda piece: piece.lo)
    los = tuple(piece.lo for piece in pieces)
    last_hi = pieces[-1].hi if pieces else -math.inf
    slots = [_Slot([piece], 0, piece.level, piece.rows) for piece in pieces]
    beyond = _Slot([], 0, 0, 0)
    for start, count in starts.items():
        slot = beyond if start > last_hi else slots[max(0, bisect.bisect_right(los, start) - 1)]
        slot.new_rows += count
        slot.rows += count
    placed = [*slots, beyond] if beyond.new_rows else slots
    owner = {id(slot): slot for slot in placed}  # what each original slot was merged into
    merged = carried = True
    while merged:  # the lowest level first, so carries cascade upwards as in a counter
        merged = False
        levels = sorted({slot.level for slot in placed if slot.level is not None and slot.rows < PIECE_ROWS})
        for level in levels:
            run = _first_run(placed, level, FAN_IN)
            if run is not None:
                _merge(placed, owner, *run, level + 1)
                merged, carried = True, False
                break
    if carried and (run := _closed_run(placed, FAN_IN)) is not None:  # (module docstring)
        first, end = run
        _merge(placed, owner, first, end, max(slot.level or 0 for slot in placed[first:end]) + 1)
    order, kept, written, new_levels, estimated = [], {}, {}, {}, {}
    ids: dict[int, int] = {}
    for slot in placed:
        if slot.new_rows == 0 and len(slot.sources) == 1:
            piece = slot.sources[0]
            kept[piece.id] = piece
            ids[id(slot)] = piece.id
        else:
            ids[id(slot)] = next_piece
            written[next_piece], new_levels[next_piece] = slot.sources, slot.level
            estimated[next_piece] = slot.rows
            next_piece += 1
        order.append(ids[id(slot)])
    where = Target(
        los,
        tuple(ids[id(owner[id(slot)])] for slot in slots),
        last_hi,
        ids[id(owner[id(beyond)])] if beyond.new_rows else None,
    )
    return Plan(order, kept, written, new_levels, where, next_piece, estimated)


def _merge(placed: list[_Slot], owner: dict[int, _Slot], first: int, end: int, level: int) -> None:
    """Replace ``placed[first:end]`` by one slot of ``level`` taking all their pieces and rows."""
    group = placed[first:end]
    union = _Slot([p for s in group for p in s.sources], sum(s.new_rows for s in group), level,
                  sum(s.rows for s in group))  # fmt: skip
    for original, slot in list(owner.items()):
        if any(slot is member for member in group):
            owner[original] = union
    placed[first:end] = [union]


def _closed_run(placed: list[_Slot], fan_in: int) -> tuple[int, int] | None:
    """The first ``fan_in`` adjacent slots of a run of mergeable slots (any level) that a full slot ends, as
    (first, end): no slot past that full one (or legacy one) can ever join them, so their levels would keep them
    apart for good."""
    index = 0
    while index < len(placed):
        end = index
        while end < len(placed) and placed[end].level is not None and placed[end].rows < PIECE_ROWS:
            end += 1
        if end < len(placed) and end - index >= fan_in:
            return index, index + fan_in
        index = end + 1
    return None


def _first_run(placed: list[_Slot], level: int, fan_in: int) -> tuple[int, int] | None:
    """The first maximal run of at least ``fan_in`` adjacent mergeable slots of ``level``, as (first, end)."""
    index = 0
    while index < len(placed):
        end = index
        while end < len(placed) and placed[end].mergeable(level):
            end += 1
        if end - index >= fan_in:
            return index, end
        index = end + 1
    return None
