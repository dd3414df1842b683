"""Files the generators write whole or not at all (``hop.gen.text``, ``hop.gen.pageviews``).

A generator interrupted mid-file (Ctrl-C on ``hop gen text --size 10GB``) left a truncated file under the final
name: a text file one line short of nothing that looks complete, or a ``.gz`` that a job later fails to read. Each
file is written under a hidden name beside it (``.NAME.partial``: directory inputs and globs leave out names starting
with ``.``) and renamed once complete; any exception, KeyboardInterrupt included, removes it.

:func:`make_directory` makes the directory they go in, refusing a file in the way as bad usage (a ValueError, exit
code 2) rather than an OSError ("[Errno 17] File exists"). :func:`refuse_leftovers` refuses, as bad usage too, to
write a folder of files into one holding files of the same kind that the run would not rewrite.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["final_path", "make_directory", "partial_path", "refuse_leftovers", "whole_file"]


def partial_path(path: Path) -> Path:
    """Where ``path`` is written until it is complete."""
    return path.with_name(f".{path.name}.partial")


def final_path(path: Path) -> Path:
    """The file that ``path`` is written for: ``path`` itself, or the file a :func:`partial_path` becomes."""
    if path.name.startswith(".") and path.name.endswith(".partial"):
        return path.with_name(path.name[1 : -len(".partial")])
    return path


@contextlib.contextmanager
def whole_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write ``path``'s bytes to: it becomes ``path`` when the block ends normally, and is removed
    when the block raises (``path`` is then left as it was)."""
    if path.is_dir():  # (else written whole, then refused: "[Errno 21] Is a directory: '.data.partial' -> 'data'")
        raise ValueError(f"{path} is a directory: give the name of a file to write")
    temporary = partial_path(path)
    try:
        with open(temporary, "wb") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):  # (never made, or cannot be: the error that stopped the writing is the one)
            temporary.unlink()
        raise


def make_directory(path: Path) -> None:
    """Make the directory ``path`` (and its parents) unless it exists; ValueError if a file is in the way."""
    for ancestor in (path, *path.parents):
        if ancestor.exists() and not ancestor.is_dir():
            raise ValueError(f"{ancestor} exists and is not a directory: choose another output path")
    path.mkdir(parents=True, exist_ok=True)


def refuse_leftovers(folder: Path, pattern: str, names: list[str]) -> None:
    """ValueError (bad usage, before anything is written) if ``folder`` holds files matching ``pattern`` other than
    ``names``, the files about to be written: an earlier run's (``--files 3`` after ``--files 2``, other ``--days``
    or ``--start``, ``--no-gzip`` after gzip) that this one would not rewrite. Each file was replaced, the others
    stayed, and the folder, read as one input, held two runs' data without a word."""
    if not folder.is_dir():
        return
    written = set(names)
    left = sorted(path.name for path in folder.glob(pattern) if path.name not in written)
    if left:
        shown = ", ".join(left[:3]) + (f" and {len(left) - 3:,} more" if len(left) > 3 else "")
        raise ValueError(
            f"{folder} holds {shown} of an earlier run, which this one would not rewrite: read as one input, the "
            "folder would mix the two runs' files; remove those, or write into another folder"
        )
