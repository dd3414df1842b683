"""Files the generators write whole or not at all (``hop.gen.text``, ``hop.gen.pageviews``).

A generator interrupted mid-file (Ctrl-C on ``hop gen text --size 10GB``) left a truncated file under the final
name: a text file one line short of nothing that looks complete, or a ``.gz`` that a job later fails to read. Each
file is written under a hidden name beside it (``.NAME.partial``: directory inputs and globs leave out names starting
with ``.``) and renamed once complete; any exception, KeyboardInterrupt included, removes it.

:func:`make_directory` makes the directory they go in, refusing a file in the way as bad usage (a ValueError, exit
code 2) rather than an OSError ("[Errno 17] File exists").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["make_directory", "partial_path", "whole_file"]


def partial_path(path: Path) -> Path:
    """Where ``path`` is written until it is complete."""
    return path.with_name(f".{path.name}.partial")


@contextlib.contextmanager
def whole_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s bytes to: it becomes ``path`` when the block ends normally, and is removed
    when the block raises (``path`` is then left as it was)."""
    temporary = partial_path(path)
    try:
        with open(temporary, "wb") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def make_directory(path: Path) -> None:
    """Make the directory ``path`` (and its parents) unless it exists; ValueError if a file is in the way."""
    for ancestor in (path, *path.parents):
        if ancestor.exists() and not ancestor.is_dir():
            raise ValueError(f"{ancestor} exists and is not a directory: choose another output path")
    path.mkdir(parents=True, exist_ok=True)
