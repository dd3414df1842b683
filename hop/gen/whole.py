"""Files the generators write whole or not at all (``hop.gen.text``, ``hop.gen.pageviews``).

A generator interrupted mid-file (Ctrl-C on ``hop gen text --size 10GB``) left a truncated file under the final
name: a text file one line short of nothing that looks complete, or a ``.gz`` that a job later fails to read. Each
file is written under a hidden name beside it (``.NAME.partial``: directory inputs and globs leave out names starting
with ``.``) and renamed once complete; any exception, KeyboardInterrupt included, removes it.

A run is whole or nothing too (:func:`all_or_nothing`): one interrupted (Ctrl-C, SIGTERM) or failing after some of
its files are written removes the files it wrote that were not there before and the folders it made, so ``hop gen
text out --files 5`` stopped half-way leaves no ``out`` (which a later ``hop gen text out`` took for a directory
it would not write a file as, or, holding some parts, for an earlier run's leftovers). Files that were there
before and that it rewrote stay (they were the user's), and the error says which.

:func:`make_directory` makes the directory they go in, refusing a file in the way as bad usage (a ValueError, exit
code 2) rather than an OSError ("[Errno 17] File exists"). :func:`refuse_leftovers` refuses, as bad usage too, to
write a folder of files into one holding files of the same kind that the run would not rewrite.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "Made",
    "all_or_nothing",
    "final_path",
    "make_directory",
    "partial_path",
    "refuse_leftovers",
    "whole_file",
]

_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


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
    """A binary file to write ``path``'s bytes to: it becomes ``path`` (the file it names, if a symbolic link) when
    the block ends normally, and is removed when the block raises (``path`` is then left as it was). ValueError for
    a directory, a device, a pipe or a socket."""
    if path.is_dir():  # (else written whole, then refused: "[Errno 21] Is a directory: '.data.partial' -> 'data'")
        raise ValueError(f"{path} is a directory: give the name of a file to write")
    # Renamed over, a symbolic link was replaced by the file (its target left as it was), and so was a device, pipe
    # or socket: hop gen text /dev/null, run as root, made /dev/null a file of text. A link is written through, to
    # the file it names; anything else but a regular file is refused.
    path = Path(os.path.realpath(path)) if path.is_symlink() else path
    if os.path.lexists(path) and not path.is_file():
        raise ValueError(
            f"{path} is not a regular file (a device, pipe or socket): a file is written under a temporary name, then "
            "renamed over it; give the name of a file to write"
        )
    temporary = partial_path(path)
    try:
        with open(temporary, "wb") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):  # (never made, or cannot be: the error that stopped the writing is the one)
            temporary.unlink()
        raise


def make_directory(path: Path) -> list[Path]:
    """Make the directory ``path`` (and its parents) unless it exists; ValueError if a file is in the way. Returns
    the directories it made, the deepest first."""
    for ancestor in (path, *path.parents):
        if ancestor.exists() and not ancestor.is_dir():
            raise ValueError(f"{ancestor} exists and is not a directory: choose another output path")
    missing = list(itertools.takewhile(lambda folder: not os.path.lexists(folder), (path, *path.absolute().parents)))
    path.mkdir(parents=True, exist_ok=True)
    return missing


class Made:
    """What one run of a generator made (:func:`all_or_nothing`): the folders it created, the files it wrote that
    were not there before, and the files it rewrote."""

    def __init__(self) -> None:
        self.folders: list[Path] = []
        self.files: list[Path] = []
        self.rewritten: list[Path] = []

    def directory(self, path: Path) -> None:
        """:func:`make_directory`, noting the folders made."""
        self.folders[:0] = make_directory(path)  # (deepest first: each is empty once those below it are gone)

    @contextlib.contextmanager
    def file(self, path: Path) -> Iterator[BinaryIO]:
        """:func:`whole_file`, noting the file once written (as new, or as rewritten if it was there before)."""
        existed = os.path.lexists(path)
        with whole_file(path) as out:
            yield out
        (self.rewritten if existed else self.files).append(path)

    def undo(self) -> None:
        """Remove the files written that were not there before, then the folders made, each only if empty (a file
        put there meanwhile is not the run's)."""
        for path in reversed(self.files):
            with contextlib.suppress(OSError):
                path.unlink()
        for folder in self.folders:
            with contextlib.suppress(OSError):
                folder.rmdir()

    def rewritten_note(self) -> str | None:
        """What the user should know of the files there before that the run rewrote before it stopped, or None."""
        if not self.rewritten:
            return None
        count = len(self.rewritten)
        shown = ", ".join(str(path) for path in self.rewritten[:3]) + (f" and {count - 3:,} more" if count > 3 else "")
        return (
            f"{shown}, there before, {'was' if count == 1 else 'were'} rewritten before it stopped (the files it "
            "wrote new are removed, those it had yet to rewrite are as they were): run the command again to write "
            "them all"
        )


@contextlib.contextmanager
def all_or_nothing() -> Iterator[Made]:
    """A :class:`Made` for one run: if the block raises (KeyboardInterrupt included), what the run made is removed
    (:meth:`Made.undo`) and the exception goes on, with a note (``add_note``) naming the files there before that it
    rewrote, if any. Ctrl-C and SIGTERM are held while it removes them (in the main thread), so that a second one
    does not stop the removal half-way: it comes once that is done."""
    made = Made()
    try:
        yield made
    except BaseException as error:
        held = threading.current_thread() is threading.main_thread()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS) if held else set()
        try:
            made.undo()
            note = made.rewritten_note()
            if note is not None:
                error.add_note(note)
        finally:
            if held:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        raise


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
