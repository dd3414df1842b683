"""Where a run's skipped bad records are listed: ``OUT/_bad_records/``, for every step of a multi-step run.

The coordinator lists the records a job skipped (``--skip-bad-records``) in ``OUTPUT/_bad_records/TASK.jsonl``.
An earlier step's OUTPUT is a scratch directory the run deletes at its end, so its listing went with it while the
records stayed out of the result. :mod:`hop.runner` holds each earlier step's listing aside as the run goes
(:func:`hold_bad_records`) and moves them into the run's output once the last step succeeded
(:func:`place_bad_records`), each named ``step-N-TASK.jsonl`` with ``N`` the step's number over the whole run, from 1.
A later step's records name the file they were read from, which is an earlier step's output: where the run kept it
(``--keep-intermediate``), :func:`rename_files` names it there.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

__all__ = ["BAD_RECORDS", "hold_bad_records", "place_bad_records", "rename_files"]

BAD_RECORDS = "_bad_records"
_STEP_PREFIX = "step-"


def hold_bad_records(step_output: Path, held: Path, number: int, *, move: bool = False) -> None:
    """Copy (``move``: move) the listings of step ``number``'s output into ``held``, named ``step-NUMBER-TASK.jsonl``;
    a listing already named for its step (a job's earlier steps, gathered by an inner run) keeps its name."""
    listings = step_output / BAD_RECORDS
    if not listings.is_dir():
        return
    held.mkdir(parents=True, exist_ok=True)
    for listing in sorted(listings.iterdir()):
        name = listing.name if listing.name.startswith(_STEP_PREFIX) else f"{_STEP_PREFIX}{number}-{listing.name}"
        if move:
            shutil.move(str(listing), held / name)
        else:
            shutil.copy2(listing, held / name)
    if move:
        listings.rmdir()


def place_bad_records(held: Path, final_output: Path, last_number: int) -> None:
    """Once the run's last step (``last_number``) wrote ``final_output``: in a run of several steps
    (``last_number`` > 1), the last step's own listings are named for it too, as the earlier steps' are (held in
    ``held``) whether or not any of those skipped records, and every listing ends in ``final_output``'s."""
    if last_number > 1:
        hold_bad_records(final_output, held, last_number, move=True)
    if not held.is_dir() or not any(held.iterdir()):
        return
    listings = final_output / BAD_RECORDS
    listings.mkdir()
    for listing in sorted(held.iterdir()):
        shutil.move(str(listing), listings / listing.name)


def rename_files(output: Path, renamed: Callable[[str], str | None]) -> None:
    """Rewrite the ``file`` of each entry listed in ``output``'s listings that ``renamed`` gives another name (and
    leave those it gives ``None``): a later step's records named the scratch file, or the pipe, they were read
    from, gone when the run ended, where the run kept that file."""
    for listing in sorted((output / BAD_RECORDS).glob("*.jsonl")):
        entries = [json.loads(line) for line in listing.read_text(encoding="utf-8").splitlines() if line]
        changed = False
        for entry in entries:
            name = entry.get("file")
            new = renamed(name) if isinstance(name, str) else None
            if new is not None:
                entry["file"], changed = new, True
        if changed:  # (written as the coordinator writes them)
            partial = listing.with_name(f".{listing.name}.partial")
            partial.write_text("".join(json.dumps(entry, ensure_ascii=False) + "\n" for entry in entries), "utf-8")
            partial.replace(listing)
