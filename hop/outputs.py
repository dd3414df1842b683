"""The rules for a job's output directory, shared by the coordinator, the runners and the command line.

Kept apart from ``hop.coordinator`` so that checking an output path imports nothing heavy: ``hop run`` checks it
before it starts a cluster, and every process it starts pays for its imports in start-up time.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

__all__ = ["OutputError", "OutputExistsError", "check_output", "prepare_output"]


class OutputError(ValueError):
    """The output directory cannot be used; the message names it and what to do."""


class OutputExistsError(OutputError):
    """The output directory exists and may not be replaced."""


def check_output(output: str, overwrite: bool, inputs: Iterable[str] = ()) -> bool:
    """Raise :class:`OutputExistsError` if ``output`` may not be written; return whether it must be cleared.

    Clearing (``overwrite``) is refused when the directory holds one of ``inputs`` (files, directories or glob
    patterns) or the current directory: it would delete what the job is about to read, or the user's work."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"output {output} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise OutputExistsError(f"output directory {output} is not empty; choose another or pass --overwrite")
        _refuse_to_clear_inputs(output, inputs)
        return True
    return False


def _refuse_to_clear_inputs(output: str, inputs: Iterable[str]) -> None:
    root = Path(output).resolve()
    named = [(f"input {item}", item) for item in inputs] + [("the current directory", os.getcwd())]
    for what, item in named:
        resolved = Path(item).resolve()
        if resolved == root or root in resolved.parents:
            raise OutputExistsError(
                f"output directory {output} holds {what}: --overwrite would delete it; choose another output directory"
            )


def prepare_output(output: str, overwrite: bool, inputs: Iterable[str] = ()) -> None:
    """Create the output directory; refuse a non-empty one unless ``overwrite``, which clears it (see
    :func:`check_output` for what it never clears)."""
    try:
        if check_output(output, overwrite, inputs):
            shutil.rmtree(output)
        Path(output).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"cannot create output directory {output}: {error.strerror or error}") from None
