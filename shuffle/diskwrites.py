"""A write to a worker's spill directory that failed: the error naming the file and what to do.

Every file the shuffle writes lives in the worker's spill directory: a map's spill files (``shuffle.spill``) and a
reducer's run files (``shuffle.store``, ``shuffle.fold``, ``shuffle.pieces``: runs written out when its memory is
short, merge passes, an aggregate's dumped state). A full disk there (or a quota, or a file size limit) gave a bare
``OSError: [Errno 28] No space left on device`` and the engine's traceback: :func:`spill_write_error` words it as
the disk's fault, naming the file and where the directory is set, and the task is retried (on a cluster another
host's disk may have room).
"""

from __future__ import annotations

import errno
from pathlib import Path

NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""The errors of a file system without room for a write: a full disk, a quota, a file size limit."""

SPILL_DIR = "the worker's spill directory (hop worker --spill-dir; hop run's own cluster: TMPDIR)"
"""Where a worker's spill files go, and what sets it: a worker's option, or the temporary directory for the cluster
``hop run`` starts (``hop.local_cluster``)."""


class SpillWriteError(OSError):
    """A file in a worker's spill directory could not be written (disk full, file too large): an infrastructure
    failure, retryable (``hop.taskproc`` reports its message alone, without the engine's frames)."""


def spill_write_error(path: str | Path, error: OSError, what: str = "spill file", more: str = "") -> SpillWriteError:
    """The :class:`SpillWriteError` of ``error``, met writing ``path``, a ``what`` in a worker's spill directory;
    ``more`` is a further remedy for want of room (``"or ..."``)."""
    if error.errno in NO_ROOM:
        remedy = f"free space in {SPILL_DIR} or point it at a larger disk{f', {more}' if more else ''}"
    else:
        remedy = f"check that {SPILL_DIR} exists and is writable"
    failure = SpillWriteError(f"cannot write {what} {path}: {error.strerror or error}; {remedy}")
    failure.errno = error.errno  # (set apart: given to the constructor, it would prefix the message "[Errno 28]")
    return failure


def run_write_error(path: str | Path, error: OSError) -> SpillWriteError:
    """The :class:`SpillWriteError` of ``error``, met writing ``path``, a reducer's run file: a run it received
    written out when its memory was short, a merge pass's output, an aggregate's state dumped, a large run received
    in pieces. More memory is a remedy too: less of the reducer's input then goes to disk."""
    more = "or give the reducers more memory (--reduce-memory) so that less of their input goes to disk"
    return spill_write_error(path, error, "the reducer's run file", more)
