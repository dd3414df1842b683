"""The view's piece planning (``hop.stream.pieces``), without Spark: a compaction's plan is applied to the pieces as
Spark would write them (rows counted, ranges the least and greatest window start), over thousands of compactions."""

from __future__ import annotations

import math

import pytest

from hop.stream import pieces as module
from hop.stream.pieces import FAN_IN, Piece, plan, target


class View:
    """Pieces as compactions leave them: each cell (window start, key) is in the piece its window's range names."""

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self.cells: dict[int, set[tuple[float, int]]] = {}  # piece id -> its cells
        self.next_piece = 1
        self.written: list[int] = []  # rows written by each compaction

    def compact(self, new: dict[float, int]) -> None:
        """Compact ``new`` rows: window start -> how many keys (0..n-1, so a late window rewrites cells)."""
        todo = plan(self.pieces, new, self.next_piece)
        assert set(todo.kept) | set(todo.written) == set(todo.pieces)
        cells: dict[int, set[tuple[float, int]]] = {piece_id: set() for piece_id in todo.written}
        for piece_id, old in todo.written.items():
            for piece in old:
                cells[piece_id] |= self.cells.pop(piece.id)
        for start, keys in new.items():
            cells[target(todo.where, start)] |= {(start, key) for key in range(keys)}
        result = []
        for piece_id in todo.pieces:
            if piece_id in todo.kept:
                result.append(todo.kept[piece_id])
                continue
            starts = {start for start, _ in cells[piece_id]}
            self.cells[piece_id] = cells[piece_id]
            result.append(Piece(piece_id, min(starts), max(starts), len(cells[piece_id]), len(starts),
                                todo.levels[piece_id], 1))  # fmt: skip
        self.pieces, self.next_piece = result, todo.next_piece
        self.written.append(sum(len(cells[piece_id]) for piece_id in todo.written))

    def check(self) -> None:
        """Ranges in order and disjoint; each piece holds the cells of its range only."""
        for before, after in zip(self.pieces, self.pieces[1:], strict=False):
            assert before.hi < after.lo
        for piece in self.pieces:
            assert all(piece.lo <= start <= piece.hi for start, _ in self.cells[piece.id])


@pytest.mark.parametrize("keys", [1, 100])
def test_pieces_stay_few_and_each_row_is_written_a_few_times(keys: int) -> None:
    """A compaction per window for 5,000 windows: the pieces number at most FAN_IN - 1 a level (a counter in base
    FAN_IN), and the rows written in all are a few times the rows, where rewriting the base each time wrote them
    2,500 times over."""
    view = View()
    for window in range(5000):
        view.compact({float(window): keys})
        assert len(view.pieces) <= (FAN_IN - 1) * (math.log(window + 1, FAN_IN) + 1)
    view.check()
    rows = 5000 * keys
    assert sum(piece.rows for piece in view.pieces) == rows
    assert sum(view.written) <= 8 * rows


def test_late_rows_rewrite_only_the_piece_of_their_window() -> None:
    view = View()
    for window in range(64):
        view.compact({float(window): 3})
    before = {piece.id: piece for piece in view.pieces}
    holder = next(piece for piece in view.pieces if piece.lo <= 5.0 <= piece.hi)
    view.compact({5.0: 4, 64.0: 3})  # window 5 again, with a fourth key, and a new window
    written = [piece for piece in view.pieces if piece.id not in before]
    assert holder.id not in {piece.id for piece in view.pieces}
    assert {(piece.lo, piece.hi) for piece in written} == {(holder.lo, holder.hi), (64.0, 64.0)}
    assert view.written[-1] == holder.rows + 1 + 3
    view.check()
    view.compact({-10.0: 1})  # below every piece: the first one takes it
    assert view.pieces[0].lo == -10.0 and len(view.pieces) == len(before) + 1
    view.check()


def test_no_merge_takes_a_full_piece_and_one_compaction_writes_little(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces of PIECE_ROWS rows or more are merged no more: past them a compaction writes its new rows, and now and
    then a merge of fewer than FAN_IN * PIECE_ROWS rows, however many rows the view holds."""
    monkeypatch.setattr(module, "PIECE_ROWS", 1000)
    view = View()
    view.compact({float(window): 100 for window in range(100)})  # a backlog compacted at once: 10,000 rows
    assert [piece.rows for piece in view.pieces] == [10_000]
    for window in range(100, 3100):
        view.compact({float(window): 10})
        assert view.written[-1] < FAN_IN * 1000
    view.check()
    assert view.pieces[0].rows == 10_000  # never merged again
    full = [piece.rows for piece in view.pieces[1:] if piece.rows >= 1000]
    assert all(rows < FAN_IN * 1000 for rows in full) and sum(full) > 30_000 - FAN_IN * 1000
    assert len(view.pieces) - 1 - len(full) <= (FAN_IN - 1) * 5  # levels of 10 rows to 1,000: 0 to 4


def test_a_legacy_base_takes_every_row_once() -> None:
    legacy = Piece.legacy(rows=50, windows=5)
    todo = plan([legacy], {3.0: 1, 1e9: 2}, 1)
    assert todo.pieces == [1] and todo.written == {1: [legacy]} and todo.levels == {1: None}
    assert target(todo.where, 1e9) == target(todo.where, -1e9) == 1
    assert Piece.of(Piece(1, 0.0, 2.5, 9, 2, 3, 1).record()) == Piece(1, 0.0, 2.5, 9, 2, 3, 1)


def test_pieces_before_a_full_one_are_still_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    """A full piece ends the runs of the pieces before it: they can never merge with the ones after it. Once every
    full piece (a backlog compacted at once, a big window) left up to FAN_IN - 1 pieces of every level behind it for
    good, so the pieces grew by a dozen per full piece, not by one. They are merged FAN_IN at a time whatever their
    generation, at most one such merge a compaction, so the pieces stay about one per PIECE_ROWS rows."""
    monkeypatch.setattr(module, "PIECE_ROWS", 1000)
    view = View()
    bursts, every = 20, 1000
    for window in range(bursts * every):
        burst = window % every == every - 1
        view.compact({float(window): 1000 if burst else 1})  # 1-row windows, and now and then a full one
        assert view.written[-1] < FAN_IN * 1000 + (1000 if burst else 1)
    view.check()
    full = sum(1 for piece in view.pieces if piece.rows >= 1000)
    assert full >= bursts
    levels = 1 + math.ceil(math.log(1000, FAN_IN))  # of 1 row to 1,000
    assert len(view.pieces) <= full * FAN_IN + (FAN_IN - 1) * levels  # was 260 (20 full, 240 left behind)
    rows = sum(piece.rows for piece in view.pieces)
    assert sum(view.written) <= 8 * rows
