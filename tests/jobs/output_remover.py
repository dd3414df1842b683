"""Test job: takes its output directory away while it runs, as its user might. Each input line is ``WHEN HOW PATH``:
the call that acts (``map``, or ``reduce``: once its part file is open) on the folder ``PATH``, and how: ``removed``
(deleted), ``moved`` (renamed to ``PATH.elsewhere``) or ``replaced`` (moved so, and a folder of the user's, holding
``mine.txt``, made under its name)."""

import shutil
from pathlib import Path
from typing import Any

from hop import Job


def take_away(how: str, folder: Path) -> None:
    if how == "removed":
        shutil.rmtree(folder)
        return
    folder.rename(f"{folder}.elsewhere")
    if how == "replaced":
        folder.mkdir()
        (folder / "mine.txt").write_text("the user's\n")


class OutputRemover(Job):
    def map(self, offset: int, line: str) -> Any:
        when, how, path = line.split(" ", 2)
        if when == "map":
            take_away(how, Path(path))
        yield line, 1

    def reduce(self, line: str, counts: Any) -> Any:
        when, how, path = line.split(" ", 2)
        if when == "reduce":
            take_away(how, Path(path))
        yield line, sum(counts)
