"""File names as hop passes them between processes: UTF-8 text.

Paths travel in msgpack messages (coordinator, workers, task processes) and in ``_job.json``, both UTF-8. A name
that is not valid UTF-8 (a Latin-1 ``résumé.txt`` from an older system) reaches Python as text with surrogate
escapes, which neither can carry: the job failed as an internal error with the coordinator's traceback. The
inputs (``hop.inputs.expand_inputs``) and the output directory (``hop.outputs.check_output``) are checked before
the job starts, and so is a name that is empty.
"""

from __future__ import annotations

import os

__all__ = ["EMPTY_NAME", "NOT_UTF8", "non_utf8_bytes"]

NOT_UTF8 = "its name is not valid UTF-8, which hop needs to pass paths between its processes"
EMPTY_NAME = "give a path (for the current directory, '.')"
"""What to do about an empty path, which Python reads as the current directory: ``hop run JOB "$IN" -o out``
with ``IN`` unset read everything under the current directory."""


def non_utf8_bytes(path: str) -> bytes | None:
    """``path`` as the bytes the file system holds, if its name is not valid UTF-8 (else None: it can be used).

    >>> non_utf8_bytes("r\u00e9sum\u00e9.txt") is None
    True
    """
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path)
    return None
