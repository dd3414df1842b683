"""The rules for a job's output directory, shared by the coordinator, the runners and the command line.

Kept apart from ``hop.coordinator`` so that checking an output path imports nothing heavy: ``hop run`` checks it
before it starts a cluster, and every process it starts pays for its imports in start-up time.
"""

from __future__ import annotations

import shutil
from pathlib import Path

__all__ = ["OutputExistsError", "check_output", "prepare_output"]


class OutputExistsError(ValueError):
    pass


def check_output(output: str, overwrite: bool) -> bool:
    """Raise :class:`OutputExistsError` if ``output`` may not be written; return whether it must be cleared."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"output {output} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise OutputExistsError(f"output directory {output} is not empty; choose another or pass --overwrite")
        return True
    return False


def prepare_output(output: str, overwrite: bool) -> None:
    """Create the output directory; refuse a non-empty one unless ``overwrite``, which clears it."""
    if check_output(output, overwrite):
        shutil.rmtree(output)
    Path(output).mkdir(parents=True, exist_ok=True)
