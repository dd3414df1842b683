"""A worker's spill directory, and the removal of those left by workers that died without removing their own.

A worker removes its spill directory when it stops; one killed (``kill -9``, the OOM killer, a power cut) cannot,
and its map output stays on disk, gigabytes of it for a large job, with nothing ever reading it again. So every
directory carries an ``owner`` file naming the host, process id and process start time of its worker, and a worker
starting on that host removes the directories whose owner is no longer running. The start time tells a live owner
from a new process that reuses its id; the host name keeps a worker from judging another host's directories on a
spill root that hosts share.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

import psutil

__all__ = ["PREFIX", "make_spill_dir", "remove_abandoned"]

PREFIX = "hop-worker-"
OWNER = "owner"


def make_spill_dir(root: str | None) -> Path:
    """A new spill directory under ``root`` (the system's temporary directory if None), marked as this process's."""
    folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
    me = psutil.Process()
    (folder / OWNER).write_text(f"{socket.gethostname()} {me.pid} {me.create_time()}\n", encoding="utf-8")
    return folder


def remove_abandoned(root: str | None) -> list[Path]:
    """Remove the spill directories under ``root`` whose owner ran on this host and is no longer running; return
    them. A directory without an owner file (being made, or another program's) is left alone."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        try:
            host, pid, started = (folder / OWNER).read_text(encoding="utf-8").split()
        except (OSError, ValueError):
            continue
        if host == socket.gethostname() and not _running(int(pid), float(started)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _running(pid: int, started: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started) < 0.01
    except psutil.AccessDenied:
        return True  # another user's process: not ours to judge (nor its directory ours to remove)
    except (psutil.NoSuchProcess, ValueError):
        return False
