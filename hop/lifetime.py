"""How long the processes of an embedded cluster live: no longer than the process that started them.

The process that starts an embedded cluster's launcher (``hop.prelaunch.Prelaunch``, for
``hop.local_cluster.LocalCluster``) puts its own pid in ``HOP_EMBEDDED_PARENT_PID`` for the coordinator and the
workers it forks; they call :func:`orphaned` in their loops and exit when their parent is gone (killed without a
chance to stop them), so a killed ``hop run`` leaves no processes behind. Task processes watch their worker the
same way.

While that parent lives, it alone decides when they stop (:func:`ignore_stop_signals`): a signal sent to the whole
process group (Ctrl-C, ``kill -TERM -PGID``) or cgroup (systemd's ``KillMode=control-group``, a container's stop)
reaches them too, and they leave it to the parent, which drains its job and then stops them in order.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = [
    "PARENT_VARIABLE",
    "SAME_SIGNAL_SECONDS",
    "SERVING_COMMANDS",
    "STOP_SIGNALS",
    "Interrupted",
    "become_subreaper",
    "die_with_parent",
    "embedded",
    "ignore_stop_signals",
    "name_process",
    "orphaned",
    "redeliver_swallowed_interruptions",
    "redelivered",
    "stop_signals_held",
    "stop_signals_noted",
    "stop_signals_taken",
]

PARENT_VARIABLE = "HOP_EMBEDDED_PARENT_PID"

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What :func:`ignore_stop_signals` ignores: Ctrl-C, the polite stop of ``kill``, systemd and container runtimes, and
the hang-up of a closed terminal or SSH session (sent to the whole foreground process group: it killed ``hop run``
and its embedded cluster at once, leaving the cluster's directory in /tmp)."""

SERVING_COMMANDS = ("coordinator", "worker")
"""The ``hop`` commands a stop signal ends with exit code 0, as a service manager (systemd) expects of its service
stopped: whether it serves yet or is still starting (a run or a job stopped so exits 128 + the signal)."""


def stop_signals_taken() -> tuple[int, ...]:
    """The :data:`STOP_SIGNALS` a command should stop on: all but a hang-up that it was started ignoring (``nohup``
    says to run on when the terminal closes)."""
    return tuple(
        number for number in STOP_SIGNALS if number != signal.SIGHUP or signal.getsignal(number) is not signal.SIG_IGN
    )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM, raised by a signal handler that says which (``signum``), so that whoever ends the command
    exits 130 or 143 as the shell would (SIGPIPE: its output's reader went away, ``hop.closed_output``, 141);
    ``command`` (``"hop run"``) is the command interrupted, if known."""

    def __init__(self, signum: int, command: str | None = None) -> None:
        super().__init__()
        self.signum = signum
        self.command = command

    def cancel_reason(self) -> str:
        """The error of a job cancelled by this interruption, as its ``_job.json`` gives it (a run on Spark
        writes the same, ``hop.spark_engine``)."""
        command = self.command or "hop"
        if self.signum == signal.SIGPIPE:  # (hop.closed_output: what it printed had no reader any more)
            return f"cancelled: the reader of {command}'s output or messages went away (SIGPIPE)"
        return f"cancelled: {command} was interrupted by {signal.Signals(self.signum).name}"


def orphaned() -> bool:
    """Whether this process belongs to an embedded cluster whose parent is gone."""
    parent = os.environ.get(PARENT_VARIABLE)
    return parent is not None and os.getppid() != int(parent)


def embedded() -> bool:
    """Whether this process belongs to an embedded cluster (``hop run`` started it), not a standalone ``hop
    worker`` or ``hop coordinator``."""
    return os.environ.get(PARENT_VARIABLE) is not None


def ignore_stop_signals(always: bool = False) -> bool:
    """Ignore :data:`STOP_SIGNALS` in a process of an embedded cluster (or ``always``: task processes, whose worker
    ends them); return whether they are ignored. A process that is neither (a ``hop worker`` or ``hop coordinator``
    started on its own) keeps its handlers: those signals are how it is stopped.

    Ctrl-C in a terminal interrupts the whole foreground process group, and ``kill -TERM -PGID``, systemd or a
    container runtime terminate every process of a group or cgroup: cluster processes included. The process that
    started them handles the signal (a continuous job drains, writes its last windows and checkpoints; a batch run
    ends with 143) and then stops them in order, which it could not do if they had died of the same signal. They
    still end without it: on its shutdown message, when :func:`orphaned` (their parent died without stopping them),
    or on SIGKILL, which is how their parent ends one that does not stop in time (SIGTERM would be ignored).
    Ignored dispositions survive ``fork`` and ``exec``: a process a task starts inherits them.
    """
    if not (always or embedded()):
        return False
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    return True


_PR_SET_PDEATHSIG = 1
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


def die_with_parent() -> bool:
    """Have the kernel SIGKILL this process as soon as its parent ends (Linux only); True when that worked.

    Task processes use it: they look for their worker between records and control messages, but a task busy in
    the user's code (one long record, a reduce of a huge group) would outlive a worker killed meanwhile, using a
    core for nobody. They hold nothing a polite end would save (their worker owns the spill files).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)) == 0
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


@contextlib.contextmanager
def stop_signals_noted(
    came: list[int], numbers: tuple[int, ...] = STOP_SIGNALS, repeat_acts: bool = False
) -> Iterator[None]:
    """While the block runs, the signals ``numbers`` are appended to ``came`` instead of acting (a handler that
    raises nothing); their handlers are restored after it. ``repeat_acts``: a second one (Ctrl-C pressed again)
    restores them at once, empties ``came`` and is sent again, so it acts inside the block, as a user pressing twice
    asks. Outside the main thread, where Python runs no signal handler, the block just runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def restore() -> None:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)

    def note(number: int, _frame: Any) -> None:
        came.append(number)
        if repeat_acts and len(came) > 1:
            restore()
            came.clear()
            signal.raise_signal(number)  # (its own handler runs as this one returns)

    previous = {number: signal.signal(number, note) for number in numbers}
    try:
        yield
    finally:
        restore()


@contextlib.contextmanager
def stop_signals_held(repeat_acts: bool = False) -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM (:data:`STOP_SIGNALS`) while the block runs, then act on those that came as they would
    have acted: for a step that must not be cut in half. Starting a child and recording it is one: a Ctrl-C inside
    ``subprocess.Popen`` (which waits for the child's exec) leaves a child started and unknown to its parent, which
    then cannot end it. ``repeat_acts``: a second signal acts at once (:func:`stop_signals_noted`), for a block that
    can wait long. Outside the main thread, where Python runs no signal handler, the block just runs."""
    came: list[int] = []
    try:
        with stop_signals_noted(came, repeat_acts=repeat_acts):
            yield
    finally:
        for held in dict.fromkeys(came):
            signal.raise_signal(held)  # (its handler runs now: a KeyboardInterrupt for Ctrl-C)


_redelivering: list[int] = []
"""Signals sent again by :func:`redeliver_swallowed_interruptions`, not yet taken by :func:`redelivered`."""


def redeliver_swallowed_interruptions() -> None:
    """Make a Ctrl-C or SIGTERM whose KeyboardInterrupt Python swallowed act after all (main thread only).

    A signal handler runs wherever the main thread is when the signal comes; where that is a callback whose
    exceptions Python cannot pass on (an ``os.register_at_fork`` hook, such as the one logging runs in the parent
    after every ``subprocess.Popen`` with a ``preexec_fn``; a ``__del__``; a weak reference callback), the handler's
    KeyboardInterrupt is printed as "Exception ignored in: ..." and dropped, and the command runs on as if the
    signal had never come. PySpark starts its JVM that way, and the instant after that fork is when a signal sent
    once the JVM appears lands: ``hop run --engine spark`` then ran its job to the end and exited 0.

    Installed here, ``sys.unraisablehook`` takes such a KeyboardInterrupt (without printing it) and has a thread
    send its signal (``signum``, else SIGINT) to this process again, so that the handler then in place runs once
    more, in ordinary code; :func:`redelivered` lets that handler know the signal is this one again, not a second
    one. Any other unraisable exception goes to the hook there was before."""
    previous = sys.unraisablehook
    if threading.current_thread() is not threading.main_thread() or getattr(previous, "redelivers", False):
        return  # (no signal handler runs elsewhere; installed once however many commands a process runs)

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            previous(unraisable)
            return
        signum = int(getattr(unraisable.exc_value, "signum", signal.SIGINT))
        _redelivering.append(signum)
        sender = threading.Thread(target=_send_once_out_of, args=(hook.__code__, signum), name="hop-redeliver")
        sender.daemon = True
        sender.start()

    hook.redelivers = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def _send_once_out_of(code: Any, signum: int, timeout: float = 5.0) -> None:
    """Send ``signum`` to this process once the main thread has left ``code`` (the unraisable hook): a handler run
    inside the hook would have its exception swallowed there too ("Exception ignored in sys.unraisablehook"). Should
    it land in another such callback next, the hook sends it once more."""
    main = threading.main_thread().ident
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main or -1)
        while frame is not None and frame.f_code is not code:
            frame = frame.f_back
        if frame is None:
            break
        time.sleep(0.001)
    os.kill(os.getpid(), signum)


SAME_SIGNAL_SECONDS = 0.5
"""A Ctrl-C or SIGTERM within this long of the one before is that one delivered again, not a second one. Coreutils
``timeout`` (``timeout -s INT 60 hop run ...``) sends its signal to the command and then to the command's process
group, which holds the command: ``hop run`` got it twice, 0.4 ms apart, unless the kernel merged the two, and a
continuous run took the second for "stop now" and ended without draining. A second Ctrl-C a person means comes after
the run's "stopping" line, read. ``hop run --engine spark`` takes them so while its Spark job runs
(``hop.spark_engine``). (The embedded cluster's processes, in the group too, ignore both signals:
:func:`ignore_stop_signals`.)"""


def redelivered(signum: int) -> bool:
    """Whether this ``signum`` is one :func:`redeliver_swallowed_interruptions` sent again (then it is taken)."""
    if signum in _redelivering:
        _redelivering.remove(signum)
        return True
    return False
