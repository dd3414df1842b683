"""How long the processes of an embedded cluster live: no longer than the process that started them.

The process that starts an embedded cluster's launcher (``hop.prelaunch.Prelaunch``, for
``hop.local_cluster.LocalCluster``) puts its own pid in ``HOP_EMBEDDED_PARENT_PID`` for the coordinator and the
workers it forks; they call :func:`orphaned` in their loops and exit when their parent is gone (killed without a
chance to stop them), so a killed ``hop run`` leaves no processes behind. Task processes watch their worker the
same way.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["PARENT_VARIABLE", "become_subreaper", "ignore_terminal_interrupts", "name_process", "orphaned"]

PARENT_VARIABLE = "HOP_EMBEDDED_PARENT_PID"


def orphaned() -> bool:
    """Whether this process belongs to an embedded cluster whose parent is gone."""
    parent = os.environ.get(PARENT_VARIABLE)
    return parent is not None and os.getppid() != int(parent)


def ignore_terminal_interrupts(always: bool = False) -> None:
    """Ignore SIGINT in a process of an embedded cluster (or ``always``: task processes, whose worker ends them).

    Ctrl-C in a terminal interrupts the whole foreground process group, cluster processes included; the process
    that started them handles it (a continuous job drains, writes its last windows and checkpoints) and then
    stops them in order, which it could not do if they had died of the same signal.
    """
    if always or os.environ.get(PARENT_VARIABLE) is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36
_NAME_BYTES = 15  # the kernel keeps 16 bytes of a process name, the last one a NUL


def name_process(name: str) -> bool:
    """Give this process the name ``ps -o comm``, ``top`` and ``psutil.Process.name()`` show (Linux only; the
    last 15 bytes of ``name``); True when that worked.

    Task processes are forked from their worker, so their command line is the worker's: the name tells them apart
    (``local-0/r0``: worker ``local-0``'s first reduce slot).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_NAME, name.encode()[-_NAME_BYTES:], 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux only); True when that worked.

    A benchmark needs it to count (and reap) what a run leaves behind; the test session needs it so that the
    task processes of a worker a test killed are still its descendants, and the leak check sees them.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
