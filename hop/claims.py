"""Which hop run or job on this machine is writing a folder, told by the holds each keeps on what it writes.

Two holds, both ``flock(2)`` locks, which the kernel drops with the process holding them, so that a run or a
coordinator killed outright (``kill -9``) leaves nothing that blocks anyone, however its folders were left:

- a run's (``hop run``, ``hop submit``, ``hop run --engine spark``, ``hop run --source``) on its output directory,
  from its start to its end (:func:`hop.outputs.claim_output`): exclusive, so that no other run writes there; a
  continuous run's turns shared once taken (:data:`READ_AS_WRITTEN`);
- a coordinator's on a running batch job's ``OUT/_temporary``, from its acceptance to its end
  (:func:`hold_scratch`): the job's own client may be elsewhere (another host, the API) or gone (killed), so the
  run's hold may be missing.

A batch job's output is partial until it ends: a job reading it, or a folder holding it, would read the parts
committed so far as if they were all (:func:`input_claimed` says why such a job is refused), and one writing it
would mix its parts with the running job's (:func:`hop.outputs.claim_output` refuses it, naming the holder, or
:func:`output_written_by_job` the job). Windows of a continuous job are each complete once written, so its output is
read as it is written, as a coordinator allows for its own continuous jobs.

The process holding a hold is named from ``/proc/locks`` where there is one (Linux): its pid and command line.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

SCRATCH = "_temporary"
"""The folder of a batch job's output where its reducers write their parts before they commit: a coordinator holds
it (:func:`hold_scratch`) while the job runs."""

READ_AS_WRITTEN = fcntl.LOCK_SH
"""A continuous run's hold, once taken exclusive: shared, so a reader testing for a writer (a shared hold of its own,
for an instant) passes, while another run claiming the folder (exclusive) is still refused."""


def hold_scratch(output_descriptor: int) -> int | None:
    """Hold the job's scratch folder :data:`SCRATCH` in the output directory open as ``output_descriptor``: the
    descriptor holding it (close it as the job ends), or ``None`` where it cannot be held (gone already, a file
    system without ``flock``: the job runs on, unnamed to other runs)."""
    try:
        descriptor = os.open(SCRATCH, os.O_RDONLY | os.O_DIRECTORY, dir_fd=output_descriptor)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


TEST_TRIES = 5
"""How many times a hold found is tested again, :data:`TEST_PAUSE` apart, before it is taken for a writer's: another
run testing the folder (as an input, or as one its ``--overwrite`` would clear) holds it for an instant too."""
TEST_PAUSE = 0.01


def held_exclusive(folder: str | Path) -> bool:
    """Whether another open of ``folder`` (another process's, or this one's through another descriptor) holds it
    exclusive: tested by taking a shared hold for an instant."""
    return _held(folder, fcntl.LOCK_SH)


def held(folder: str | Path) -> bool:
    """Whether another open of ``folder`` holds it at all, exclusive or shared (a continuous run's): tested by taking
    an exclusive hold for an instant."""
    return _held(folder, fcntl.LOCK_EX)


def _held(folder: str | Path, test: int) -> bool:
    try:
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        for attempt in range(TEST_TRIES):
            try:
                fcntl.flock(descriptor, test | fcntl.LOCK_NB)
                return False
            except BlockingIOError:
                if attempt + 1 < TEST_TRIES:
                    time.sleep(TEST_PAUSE)
            except OSError:
                return False  # (a file system without flock: no hold to find)
        return True
    finally:
        os.close(descriptor)  # (closing it drops the hold taken)


def written_below(folder: str | Path) -> str | None:
    """What clearing ``folder`` (``--overwrite``) would delete under a run or job still running on this machine:
    ``FOLDER/SUB, the output of WRITER`` for the first folder below it that one holds (batch or continuous), or
    ``None``. Every folder below is looked in, hidden ones too: clearing deletes them all."""
    for root, folders, _ in os.walk(folder):
        for name in sorted(folders):
            written = _output_of_another(os.path.join(root, name))
            if written is not None:
                return written
    return None


def writer_of(folder: str | Path) -> str | None:
    """What writes ``folder`` as its output, still running, named for a message (``another hop run on this machine
    (pid 123: hop run wc.py in -o out)``), or ``None``: no batch run holds it (:func:`held_exclusive`), nor a
    coordinator's batch job (:func:`job_writing`)."""
    if held_exclusive(folder):
        return f"another hop run on this machine{holder(folder)}"
    return job_writing(folder)


def writer_above(folder: str | Path) -> str | None:
    """The nearest folder holding ``folder`` that a run or job still running on this machine writes as its output
    (batch or continuous), named with its writer for a message (``/data/out, the output of another hop run on this
    machine (pid 123: ...)``), or ``None``. An output made inside it would be among its parts (and read with them)."""
    for above in Path(folder).absolute().parents:
        written = _output_of_another(above)
        if written is not None:
            return written
    return None


def _output_of_another(folder: str | Path) -> str | None:
    """``FOLDER, the output of WRITER`` where a run (batch or continuous: any hold) or a coordinator's batch job on
    this machine writes ``folder``, or ``None``."""
    if held(folder):
        return f"{folder}, the output of another hop run on this machine{holder(folder)}"
    writer = job_writing(folder)
    return None if writer is None else f"{folder}, the output of {writer}"


def job_writing(folder: str | Path) -> str | None:
    """The batch job of a coordinator on this machine writing ``folder`` as its output, named for a message
    (``a job of a hop coordinator on this machine (pid 45: hop coordinator --bind ...)``), or ``None``: its
    :data:`SCRATCH` is held (:func:`hold_scratch`) by no other open."""
    scratch = os.path.join(folder, SCRATCH)
    if held_exclusive(scratch):
        return f"a job of a hop coordinator on this machine{holder(scratch)}"
    return None


def holder(path: str | Path) -> str:
    """`` (pid N: COMMAND)`` of the process holding a ``flock`` on ``path``, from ``/proc/locks``;
    ``""`` where it cannot be told (another system, another pid namespace, the holder ended meanwhile)."""
    try:
        status = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return ""
    # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2154508 0 EOF" (device numbers in hex, the inode in decimal); a waiting
    # request's line has "->" after its number.
    # An exclusive hold (WRITE) first: a shared one (READ) may be another run's testing the folder for an instant.
    wanted = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    holds = [fields for fields in map(str.split, lines) if len(fields) >= 6 and fields[1] == "FLOCK"]
    holds = [fields for fields in holds if fields[5] == wanted and fields[4].isdigit() and fields[4] != "0"]
    holds.sort(key=lambda fields: fields[3] != "WRITE")
    if not holds:
        return ""
    pid = int(holds[0][4])
    command = _command(pid)
    return f" (pid {pid}: {command})" if command else f" (pid {pid})"


COMMAND_CHARACTERS = 200
"""The most of a holder's command line a message gives."""


def _command(pid: int) -> str:
    """Process ``pid``'s command line, its program named by its base name (``python3 -m hop run ...``)."""
    import shlex  # (only to name a holder: not imported by every run's start)

    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().decode("utf-8", "replace").split("\0")
    except OSError:
        return ""
    words = [word for word in words if word]
    if not words:
        return ""
    command = shlex.join([os.path.basename(words[0]), *words[1:]])
    return command if len(command) <= COMMAND_CHARACTERS else command[: COMMAND_CHARACTERS - 3] + "..."


ASKED_SECONDS = 1.5
"""How long a run refused an output or input asks its coordinator which jobs run there (less than
``hop.client.WAITING_NOTE_SECONDS``: a coordinator that is not there leaves the refusal as it was, said at once)."""


def running_outputs(address: str, timeout: float = ASKED_SECONDS, continuous: bool = False) -> dict[Path, str]:
    """The outputs (resolved) of the batch jobs (with ``continuous``, the continuous ones too) running on the
    coordinator at ``address``, and their ids: none if it does not answer within ``timeout`` seconds."""
    from hop.client import Client, CoordinatorUnavailable

    try:
        with contextlib.closing(Client(address, timeout=timeout)) as client:
            jobs = client.jobs()
    except CoordinatorUnavailable:
        jobs = []
    return {
        Path(job["output"]).resolve(): job["job_id"]
        for job in jobs
        if job["state"] == "running" and (continuous or not job.get("continuous"))
    }


def output_written_by_job(address: str | None, output: str) -> str | None:
    """The refusal of an ``output`` that a job running on the coordinator at ``address`` writes, or that is inside
    such a job's output, naming the job as the coordinator itself would (a run refused before it asks: ``output
    directory ... is not empty``, or held by the job's own run, said less), or ``None``."""
    if address is None:
        return None
    outputs = running_outputs(address, continuous=True)
    resolved = Path(output).resolve()
    job_id = outputs.get(resolved)
    if job_id is not None:
        return (
            f"output directory {output} is being written by job {job_id}, still running; wait for it, stop it "
            f"(hop stop {job_id} --coordinator {address}) or choose another"
        )
    for above in resolved.parents:
        if above in outputs:
            job_id = outputs[above]
            return (
                f"output directory {output} is inside {above}, the output of job {job_id}, still running: its files "
                f"would be mixed with that job's; wait for it, stop it (hop stop {job_id} --coordinator {address}) "
                "or choose a folder outside it"
            )
    return None


def input_claimed(patterns: Iterable[str], output: str | None = None) -> str | None:
    """Why a job reading ``patterns`` (files, directories, globs) is refused when one of them is the output of a
    batch run or job on this machine still running (:func:`writer_of`), names a file of it (``OUT/part-00000``, a
    glob of its parts), or is a folder holding it; ``None`` if none is. The job's own ``output`` is left out (its
    own run holds it), and so are folders a directory is read without (names starting with ``_`` or ``.``).

    Each folder an input is in and each listed folder below a directory input is tested: a shared ``flock`` taken
    and dropped, a few microseconds each."""
    for pattern, folder, how in _distinct_folders(patterns, output):
        writer = writer_of(folder)
        if writer is None:
            continue
        what = "is" if how == "is" else f"{how} {folder}, which is" if how == "matches" else f"{how} {folder},"
        return (
            f"input {pattern} {what} the output of {writer}, still running: its part files are not all written "
            f"yet; run this job again once it has ended (or read {folder} once its _job.json says it succeeded)"
        )
    return None


def inputs_left_partial(patterns: Iterable[str], output: str | None = None) -> list[str]:
    """Warnings for the inputs among ``patterns`` that are (or are in, or hold) an output a run left partial: its
    :data:`SCRATCH` is there, held by no one on this machine, and no ``_job.json``, so the run writing it was killed
    outright (a run that ends, or fails, removes it and writes its report), or runs on another host. Not refused:
    nothing is writing it here, and its parts may be what the user wants; but read without a word, they were taken
    for the whole result."""
    warnings: list[str] = []
    for pattern, folder, _ in _distinct_folders(patterns, output):
        scratch, report = os.path.join(folder, SCRATCH), os.path.join(folder, "_job.json")
        # (A report says how the job ended: a reducer killed as it ended may leave the scratch folder behind.)
        if os.path.isdir(scratch) and not os.path.exists(report) and writer_of(folder) is None:
            warnings.append(
                f"input {pattern}: {folder} holds {SCRATCH}, which no run on this machine is writing: the run "
                "that wrote it was killed before it ended (or runs on another host), so its part files may be "
                "only part of its result"
            )
    return warnings


def _distinct_folders(patterns: Iterable[str], output: str | None) -> Iterator[tuple[str, str, str]]:
    """Each folder of :func:`_folders` of every pattern once, as ``(pattern, folder, how)``: the first pattern
    naming it. ``output``: the job's own, never one."""
    own = os.path.realpath(output) if output is not None else None
    tested: set[str] = set()
    for pattern in patterns:
        for folder, how in _folders(pattern, own):
            if folder not in tested:
                tested.add(folder)
                yield pattern, folder, how


def _folders(pattern: str, own: str | None) -> Iterator[tuple[str, str]]:
    """The folders (real paths) whose writer would make ``pattern`` a partial input, each with how the input
    relates to it: ``"is"`` (the input is that folder), ``"is in"`` (a file or folder within it), ``"matches"`` and
    ``"matches files in"`` (a glob's), ``"holds"`` (a listed folder below a directory the input is). ``own`` (the
    job's own output) is never one."""
    import glob

    globbed = glob.has_magic(pattern) and not os.path.lexists(pattern)
    if globbed:
        matches = glob.glob(pattern, recursive=True)
        if not matches:  # (counts/part-* before the first part commits: where its fixed part is)
            parts = Path(pattern).parts
            fixed = next(i for i, part in enumerate(parts) if glob.has_magic(part))
            matches = [str(Path(*parts[:fixed]))] if fixed else []
    else:
        matches = [pattern]
    visited: set[str] = set()
    parents: set[str] = set()
    for match in matches:
        folder = os.path.isdir(match)
        if not folder and not os.path.islink(match):  # (a file: the folders it is in count, alike for a folder's)
            parent = os.path.dirname(match)
            if parent in parents:
                continue
            parents.add(parent)
        path = os.path.realpath(match)
        if own is not None and (path == own or path.startswith(own + os.sep)):
            continue
        for depth, around in enumerate([path, *map(str, Path(path).parents)]):
            if depth == 0:
                if folder:
                    yield around, "matches" if globbed else "is"
            else:
                yield around, "matches files in" if globbed else "is in"
        if folder:
            for below in _listed_folders(path, own, visited):
                yield below, "holds"


def _listed_folders(top: str, own: str | None, visited: set[str]) -> Iterator[str]:
    """The folders below ``top`` that reading it as a directory lists (their names not starting with ``_`` or
    ``.``; ``own`` left out with what it holds), as real paths, each once (``visited``: a loop of links ends)."""
    with contextlib.suppress(OSError):
        for root, folders, _ in os.walk(top, followlinks=True):
            kept = []
            for name in sorted(folders):
                real = os.path.realpath(os.path.join(root, name))
                if name.startswith(("_", ".")) or real == own or real in visited:
                    continue
                visited.add(real)
                kept.append(name)
                yield real
            folders[:] = kept
