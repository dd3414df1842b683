"""A reducer's side of runs sent in pieces (``shuffle.pusher``): the pieces of each run put back together.

A run's pieces come in order over one connection, each message's header saying where its piece starts in the run and
the run's size. A run no larger than ``memory_limit`` is gathered in memory and handed over as bytes; a larger one is
written piece by piece to a file (named by the store, in its directory) and handed over as that file's path, so a
run of large values is never held whole. A write of that file that fails (a full disk) is a
``shuffle.diskwrites.SpillWriteError`` naming it and what to do; the run is forgotten.

Pieces are keyed by ``(map task, attempt, seq)``, whose bytes never change (a spill file is written once). So a piece
that starts where the bytes received so far end is the run's next, whichever connection it came by, and any other
is one that a resend will bring again: a worker that reconnects to a reduce attempt sends its queued runs from
their start, and until then the old connection's last pieces may still be coming (ZeroMQ queues the two
connections fairly, interleaved). Those are skipped, not taken for the run's bytes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from shuffle.diskwrites import run_write_error

RunKey = tuple[int, int, int]
"""(map task, attempt, seq)."""


@dataclass
class _Partial:
    size: int
    received: int = 0
    pieces: list[bytes] = field(default_factory=list)
    path: Path | None = None
    file: IO[bytes] | None = None


class RunPieces:
    """Runs being received in pieces; :meth:`add` returns a run once its last piece is in."""

    def __init__(self, memory_limit: int | None = None, new_path: Callable[[], Path] | None = None) -> None:
        """``memory_limit`` ``None``: every run is gathered in memory (a stream reducer's panes, held anyway)."""
        self.memory_limit = memory_limit
        self._new_path = new_path
        self._partial: dict[RunKey, _Partial] = {}

    def add(self, key: RunKey, offset: int, size: int, piece: bytes) -> bytes | Path | None:
        """Take one piece of the run ``key`` (``size`` bytes in all): the whole run (bytes, or the path of the file
        holding it) if this was its last piece, else ``None`` (also for a piece that does not start where the run's
        received bytes end: see the module docstring)."""
        partial = self._partial.get(key)
        if partial is None:
            if offset:
                return None
            if len(piece) == size:
                return piece  # a run in one piece (most runs of small pairs): no copy
            partial = self._partial[key] = _Partial(size)
            if self.memory_limit is not None and size > self.memory_limit and self._new_path is not None:
                partial.path = self._new_path()
                try:
                    partial.file = open(partial.path, "wb")  # noqa: SIM115 - closed when the run is complete
                except OSError as error:
                    del self._partial[key]
                    raise run_write_error(partial.path, error) from error
        if offset != partial.received or offset + len(piece) > partial.size:
            return None
        if partial.file is not None:
            try:
                partial.file.write(piece)
            except OSError as error:  # (a full spill disk: the file named, not a bare "[Errno 28]")
                self.discard(key)
                raise run_write_error(partial.path or "", error) from error  # (path: set with file)
        else:
            partial.pieces.append(piece)
        partial.received += len(piece)
        if partial.received < partial.size:
            return None
        del self._partial[key]
        if partial.file is not None:
            assert partial.path is not None
            try:
                partial.file.close()  # (writes what is buffered)
            except OSError as error:
                partial.path.unlink(missing_ok=True)
                raise run_write_error(partial.path, error) from error
            return partial.path
        return b"".join(partial.pieces)

    def discard(self, key: RunKey) -> None:
        """Forget a run's pieces received so far (and its file)."""
        partial = self._partial.pop(key, None)
        if partial is not None and partial.file is not None:
            with contextlib.suppress(OSError):  # (its buffered bytes, which a full disk cannot take: dropped anyway)
                partial.file.close()
            assert partial.path is not None
            partial.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Forget every unfinished run."""
        for key in list(self._partial):
            self.discard(key)
