"""The rules for a job's output directory, shared by the coordinator, the runners and the command line.

Kept apart from ``hop.coordinator`` so that checking an output path imports nothing heavy: ``hop run`` checks it
before it starts a cluster, and every process it starts pays for its imports in start-up time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

__all__ = ["OutputError", "OutputExistsError", "check_output", "claim_output", "prepare_output"]


class OutputError(ValueError):
    """The output directory cannot be used; the message names it and what to do."""


class OutputExistsError(OutputError):
    """The output directory exists and may not be replaced."""


def check_output(output: str, overwrite: bool, inputs: Iterable[str] = (), job_files: Iterable[str] = ()) -> bool:
    """Raise :class:`OutputExistsError` if ``output`` may not be written; return whether it must be cleared.

    Clearing (``overwrite``) is refused when the directory holds one of ``inputs`` (files, directories or glob
    patterns), one of ``job_files`` or the current directory: it would delete what the job is about to read, the
    job itself, or the user's work."""
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise OutputExistsError(f"output {output} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise OutputExistsError(f"output directory {output} is not empty; choose another or pass --overwrite")
        _refuse_to_clear_inputs(output, inputs, job_files)
        return True
    return False


def _refuse_to_clear_inputs(output: str, inputs: Iterable[str], job_files: Iterable[str]) -> None:
    root = Path(output).resolve()
    named = [(f"input {item}", item) for item in inputs] + [(f"the job file {item}", item) for item in job_files]
    named.append(("the current directory", os.getcwd()))
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


CLAIMS_DIRECTORY = "hop-output-claims"
"""Under the system's temporary directory: one lock file per output directory being written by a run here."""

_claimed: set[str] = set()
"""Output directories this process holds (a run that runs jobs one after another claims the same one again)."""


def claim_output(output: str) -> Callable[[], None]:
    """Hold ``output`` for this run against other hop runs on this machine, until the returned function is called
    (or the process ends: the hold is an ``flock``, which the kernel drops with the process, so a killed run leaves
    nothing to clean up). Raises :class:`OutputExistsError` naming the run that holds it.

    Without it, two runs started together both found a new ``output`` empty and both wrote it. Runs submitted to
    one coordinator are also kept apart there (``hop.coordinator``); this covers runs on separate embedded
    clusters. It is a safety net: where the lock file cannot be made (a read-only temporary directory) the run goes
    on without it."""
    real = os.path.realpath(output)
    if real in _claimed:
        return lambda: None
    try:
        folder = Path(tempfile.gettempdir()) / CLAIMS_DIRECTORY
        if not folder.is_dir():
            folder.mkdir(exist_ok=True)
            folder.chmod(0o1777)  # shared by every user's runs, as /tmp is
        name = hashlib.sha256(real.encode()).hexdigest()[:32] + ".lock"
        file = open(folder / name, "a+", encoding="utf-8")  # noqa: SIM115 - closed by the returned function
    except OSError:
        return lambda: None
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        file.seek(0)
        holder = file.read().strip() or "another process"
        file.close()
        raise OutputExistsError(
            f"output directory {output} is being written by another hop run ({holder}); wait for it to end or "
            "choose another"
        ) from None
    file.seek(0)
    file.truncate()
    file.write(f"pid {os.getpid()}, output {real}\n")
    file.flush()
    _claimed.add(real)

    def release() -> None:
        _claimed.discard(real)
        with contextlib.suppress(OSError):
            file.truncate(0)
        file.close()  # (closing the file drops the flock)

    return release
