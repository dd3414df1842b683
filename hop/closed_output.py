"""A command's standard output or error whose reader has gone (``hop run ... 2>&1 | head -1``), taken as SIGPIPE.

Python ignores SIGPIPE, so a write to a pipe whose reader ended raises ``BrokenPipeError`` where the write is: in
``hop run``'s progress display, past every clean-up made for an interruption, so the run ended with its job
abandoned, no ``_job.json`` saying why and the job's scratch folder left in its output. A shell's own commands end
on SIGPIPE (``yes | head``): a command whose messages nobody reads any more stops, as on Ctrl-C, and says why
where it leaves a trace.

:func:`watched_output` wraps ``sys.stdout`` and ``sys.stderr`` for the length of a command: the first write or
flush that finds its reader gone points that stream's descriptor at ``/dev/null`` (what is printed from then on
is dropped, as the reader that has gone would have dropped it, and the clean-up's own messages cannot fail again)
and calls ``closed()`` in the main thread, which raises the interruption there. A write from another thread (a
progress bar's) only notes it: the main thread's next write or flush calls ``closed()``. A pipe that other code
writes itself (a socket, a child's standard input) is not watched: its ``BrokenPipeError`` is that code's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["watched_output"]


class _Pending:
    """Whether a watched stream found its reader gone, and whether ``closed()`` was called for it already."""

    def __init__(self, closed: Callable[[], None]) -> None:
        self.closed = closed
        self.found = False
        self.told = False

    def tell(self) -> None:
        """Call ``closed()`` once, from the main thread only (it raises there)."""
        if self.found and not self.told and threading.current_thread() is threading.main_thread():
            self.told = True
            self.closed()


class _WatchedStream:
    """``stream``, whose writes and flushes that find its reader gone are dropped and reported to ``pending``."""

    def __init__(self, stream: TextIO, pending: _Pending) -> None:
        self._stream = stream
        self._pending = pending

    def write(self, text: str) -> int:
        self._pending.tell()
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        self._pending.tell()
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def _gone(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # (a stream without a descriptor: nothing to point elsewhere)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            self._stream.flush()  # (what the buffer held goes to /dev/null now)
        self._pending.found = True
        self._pending.tell()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def watched_output(closed: Callable[[], None]) -> Iterator[None]:
    """Watch ``sys.stdout`` and ``sys.stderr`` for a reader gone while the block runs (module docstring), calling
    ``closed`` in the main thread when one is; the streams are restored as the block ends."""
    pending = _Pending(closed)
    original = sys.stdout, sys.stderr
    sys.stdout = _WatchedStream(sys.stdout, pending)
    sys.stderr = _WatchedStream(sys.stderr, pending)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = original
