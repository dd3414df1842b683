"""Standard input as a job's input (``hop run JOB - -o OUT``), as mrjob reads it.

Map tasks read files, in other processes and perhaps on other hosts, so the data is first copied to a file beside
the output directory (where every worker must see the output anyway; beside its nearest existing parent if its
parent does not exist yet), in ``.OUT.stdin-XXXXXXXX/stdin`` so that
directory and glob inputs leave it out; it is removed when the run ends, or by the next run writing ``OUT`` on
this host if the run was killed outright. Error messages and ``self.input_file``
name that file; the job's report names ``-`` (:func:`inputs_as_given`).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from hop.inputs import InputError
from hop.spilldirs import scratch_folder

__all__ = ["STDIN", "STDIN_COPY_OPTION", "inputs_as_given", "stdin_as_file"]

STDIN = "-"
STDIN_FILE = "stdin"
"""The copy's name, in a directory marked as the run's (``hop.spilldirs``): a run killed outright cannot remove it,
and the next run writing the same output on this host does."""


STDIN_COPY_OPTION = "stdin_copy"
"""The job option holding the copy's absolute path, so that the job's report (``_job.json``'s ``inputs``) names the
input as it was given, ``-``, not a file removed when the run ends."""


def inputs_as_given(inputs: Sequence[str], options: Mapping[str, Any]) -> list[str]:
    """A job's ``inputs`` as the user gave them: standard input's copy (``options``' :data:`STDIN_COPY_OPTION`) as
    ``-``."""
    copy = options.get(STDIN_COPY_OPTION)
    return [STDIN if path == copy else path for path in inputs]


@contextmanager
def stdin_as_file(inputs: list[str], output: str, stream: BinaryIO | None = None) -> Iterator[list[str]]:
    """``inputs`` with ``-`` replaced by a file holding all of ``stream`` (standard input by default), removed
    on exit; ``inputs`` as they are if none is ``-``. Raises :class:`InputError` for ``-`` given twice, or for a
    terminal as standard input (the run would wait for typing that nothing prompts for)."""
    if STDIN not in inputs:
        yield inputs
        return
    if inputs.count(STDIN) > 1:
        raise InputError("input '-' (standard input) is given more than once: it can be read only once")
    stream = sys.stdin.buffer if stream is None else stream
    if stream.isatty():
        raise InputError(
            "input '-' reads standard input, which is a terminal here: pipe or redirect the data in "
            "(cat data.txt | hop run JOB - -o OUT, or hop run JOB - -o OUT < data.txt)"
        )
    target = Path(output).absolute()
    beside = next(folder for folder in target.parents if folder.is_dir())  # (a run refused later leaves no folder)
    with scratch_folder(beside, target.name, "stdin") as folder:
        path = folder / STDIN_FILE
        with open(path, "wb") as file:
            shutil.copyfileobj(stream, file, 1 << 20)
        yield [str(path) if name == STDIN else name for name in inputs]
