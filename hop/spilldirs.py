"""A worker's spill directory, and the removal of those left by workers that died without removing their own.

A worker removes its spill directory when it stops; one killed (``kill -9``, the OOM killer, a power cut) cannot,
and its map output stays on disk, gigabytes of it for a large job, with nothing ever reading it again. So every
directory carries an ``owner`` file naming the host, process id and process start time of its worker, and a worker
starting on that host removes the directories whose owner is no longer running. The start time tells a live owner
from a new process that reuses its id; the host name keeps a worker from judging another host's directories on a
spill root that hosts share.

The same marking serves the scratch a run keeps beside its output directory (``prefix``): a pipeline's step outputs
(``.OUT.steps-*``, ``hop.runner``) and the copy of standard input (``.OUT.stdin-*``, ``hop.stdin_input``), which a
run killed outright left there, hidden, gigabytes for a large pipeline or input; the next run writing ``OUT`` on that
host removes them.

And it serves the directories other commands make and remove when they end, which a command killed outright left
behind (:func:`make_marked_dir`): an mrjob run's directory of task files beside its output (``.hop-mrjob-files-*``,
``hop.mrjob_adapter``), and in the system's temporary directory an embedded cluster's (``hop-cluster-*``, its
socket and the workers' spill directories, left when its whole process group was killed), the Spark driver's
logging configuration (``hop-spark-log4j2-*``) and its JVM's temporary directory (``hop-spark-tmp-*``), a
compaction child's (``hop-compaction-*``) and ``hop compare``'s outputs (``hop-compare-*``); the next command making
one of the same kind removes them.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from hop.lifetime import stop_signals_held
from hop.outputs import OutputError

__all__ = [
    "PREFIX",
    "kept_step_output",
    "make_marked_dir",
    "make_scratch",
    "make_spill_dir",
    "remove_abandoned",
    "scratch_folder",
    "scratch_step",
]

PREFIX = "hop-worker-"
OWNER = "owner"
SCRATCH_USES = {
    "steps": "the folder of the intermediate outputs of a multi-step run",
    "jobs": "the folder of the intermediate outputs of a pipeline of jobs",
    "stdin": "the copy of standard input",
}
"""What a run keeps beside its output ``OUT``, in ``.OUT.KIND-XXXXXXXX``, by KIND: a pipeline's intermediate outputs
(steps of one job, jobs of a ``--blocking`` pipeline) and the copy of standard input (as an error names it)."""
SCRATCH_KINDS = tuple(SCRATCH_USES)


def scratch_use(kind: str, output_name: str, one_step: bool = False) -> str:
    """What the scratch folder of ``kind`` beside the output ``output_name`` is for, as an error names it.
    ``one_step``: a ``steps`` folder of a run of one step, which holds no intermediate output (it is made all the
    same, and its failure says early that the output's folder cannot take the run's files): an error called it
    "the folder of the intermediate outputs of a multi-step run" when the job had one step."""
    if kind == "steps" and one_step:
        return f"the run's scratch folder (.{output_name}.steps-*, hidden, removed as the run ends)"
    return SCRATCH_USES[kind]


def make_spill_dir(root: str | None, prefix: str = PREFIX) -> Path:
    """A new spill directory under ``root`` (the system's temporary directory if None), marked as this process's;
    its name starts with ``prefix``."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    try:
        me = psutil.Process()
        (folder / OWNER).write_text(f"{socket.gethostname()} {me.pid} {me.create_time()}\n", encoding="utf-8")
    except BaseException:  # (a Ctrl-C too): a folder without its owner file is one that no later run removes
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def remove_abandoned(root: str | None, prefix: str = PREFIX) -> list[Path]:
    """Remove the spill directories under ``root`` named ``prefix...`` whose owner ran on this host and is no
    longer running; return them. A directory without an owner file (being made, or another program's) is left
    alone."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{glob.escape(prefix)}*"):
        try:
            host, pid, started = (folder / OWNER).read_text(encoding="utf-8").split()
        except (OSError, ValueError):
            continue
        if host == socket.gethostname() and not _running(int(pid), float(started)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def make_marked_dir(root: str | None, prefix: str) -> Path:
    """A new directory under ``root`` (the system's temporary directory if None) named ``prefix...`` and marked as
    this process's (:func:`make_spill_dir`), once those of processes on this host that died without removing
    theirs are removed (:func:`remove_abandoned`). The caller removes the whole directory when done with it; its
    ``owner`` file is not for it to use."""
    remove_abandoned(root, prefix)
    return make_spill_dir(root, prefix)


def _running(pid: int, started: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started) < 0.01
    except psutil.AccessDenied:
        return True  # another user's process: not ours to judge (nor its directory ours to remove)
    except (psutil.NoSuchProcess, ValueError):
        return False


def make_scratch(beside: Path, output_name: str, kind: str, one_step: bool = False) -> Path:
    """A new scratch directory ``beside/.OUTPUT_NAME.KIND-XXXXXXXX`` marked as this process's, once every scratch
    directory of runs killed outright that wrote ``output_name`` on this host (any kind) is removed. One that cannot
    be made raises :class:`OutputError` saying what it is for (:func:`scratch_use`; ``one_step``: the run has one
    step) and what to do."""
    for other in SCRATCH_KINDS:
        remove_abandoned(str(beside), f".{output_name}.{other}-")
    try:
        return make_spill_dir(str(beside), f".{output_name}.{kind}-")
    except OSError as error:
        # (a PermissionError traceback, the output directory itself being writable: the user saw no reason)
        remedy = (
            "free space (or quota) on its file system, or write the output elsewhere (-o)"
            if error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # (a full disk: no folder elsewhere helps)
            else "choose an output directory in a folder this user can write"
        )
        raise OutputError(
            f"cannot make {scratch_use(kind, output_name, one_step)} beside the output directory, in {beside} "
            f"({error.strerror or error}): "
            f"{remedy}"
        ) from None


@contextlib.contextmanager
def scratch_folder(beside: Path, output_name: str, kind: str, one_step: bool = False) -> Iterator[Path]:
    """:func:`make_scratch`'s directory for the block, removed when the block ends, however it ends.

    A Ctrl-C or SIGTERM that comes while the directory is made is held until it is recorded for removal, then
    acts (a ``KeyboardInterrupt`` out of the ``with``): taken as it was made, before any ``try`` knew of it, it left
    the directory behind, hidden beside the output until a later run writes that same output."""
    folder: Path | None = None
    try:
        with stop_signals_held():
            folder = make_scratch(beside, output_name, kind, one_step)
        yield folder
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


_SCRATCH_NAME = re.compile(r"\.(?P<output>.+)\.(?:steps|jobs)-[^/]+")
"""A run's scratch directory beside its output ``OUT``: ``.OUT.steps-*``, ``.OUT.jobs-*`` (:func:`make_scratch`)."""


def scratch_step(output: str) -> tuple[Path, str] | None:
    """For the output of a run's earlier step, which it writes in its scratch directory (``.OUT.steps-*/step-N``,
    or in the scratch of a job of a staged run, inside ``.OUT.jobs-*``) and deletes when it ends: the run's own
    output ``OUT`` and the step's folder name, ``step-N`` (``N`` numbered over the whole run); else ``None``."""
    path = Path(output)
    outermost = None
    for folder in path.parents:
        if (match := _SCRATCH_NAME.fullmatch(folder.name)) is not None:
            outermost = folder.parent / match["output"]
    if outermost is None or not path.name.startswith("step-"):
        return None
    return outermost, path.name


def kept_step_output(output: str) -> Path | None:
    """Where ``--keep-intermediate`` kept the output of the step that wrote ``output`` (:func:`scratch_step`):
    ``OUT/_steps/step-N``, if it is there (with its ``_job.json``), else ``None``. A step's output is known by the
    path it was given (the web view's and the coordinator's, once the run has ended and removed its scratch
    directory)."""
    step = scratch_step(output)
    if step is None:
        return None
    kept = step[0] / "_steps" / step[1]
    # (Without --keep-intermediate, a step that stopped early leaves its snapshot there, and nothing else.)
    return kept if (kept / "_job.json").is_file() else None
