"""The ``hop`` command's entry point, and the embedded cluster's launcher started before it knows its options.

``hop run`` without ``--coordinator`` starts an embedded cluster (``hop.local_cluster``), whose launcher
(``hop.cluster_launch``) is a fresh interpreter that imports the coordinator's and worker's code. Started only once
the command had imported its own modules, loaded the job and checked the inputs, the two interpreters' start-ups ran
one after the other on a 2-core machine; :func:`main` starts the launcher before importing the rest of the command,
so they run side by side (word count, from ``hop run`` to the job's start: 0.21 s before, 0.17 s after). The
launcher cannot be given its options then (how many workers and reduce slots, where its socket goes: the command
knows them only once it has parsed its arguments and loaded the job), so it imports and waits on a pipe for them.

Contracts:

- A :class:`Prelaunch` is owned by whoever holds it: :meth:`Prelaunch.configure` sends the options, with the
  environment of this process at that moment (what the cluster's processes get, as if started then), and hands
  over the launcher's report stream; :meth:`Prelaunch.discard` kills and reaps a launcher never configured (it has
  created nothing yet: no socket, no directory, no worker).
- :func:`main` starts one only when the arguments look like ``hop run`` on an embedded cluster
  (:func:`wants_embedded_cluster`), and discards it before returning unless it was taken (:func:`take`, which
  ``hop run`` passes to ``LocalCluster(prelaunched=...)``). A wrong guess costs the launcher's start-up CPU, never
  correctness: a cluster with nothing to take starts its own launcher the same way.
- The options are one line of JSON: the launcher acts on the first line and does not wait for end-of-file, which
  a process forked by user code in between (holding a copy of the pipe) could hold off. End-of-file before a line
  (the command ended or died without a cluster) makes the launcher exit quietly.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from hop.interpreter import module_command, module_environment
from hop.lifetime import PARENT_VARIABLE, SERVING_COMMANDS, STOP_SIGNALS, stop_signals_noted, stop_signals_taken

__all__ = ["Prelaunch", "main", "take", "wants_embedded_cluster"]

_ELSEWHERE_OPTIONS = ("--coordinator", "--source", "--help")
"""``hop run`` options meaning no embedded cluster (another cluster, a continuous job's own sizing, help); argparse
takes any unambiguous prefix, so prefixes count too. ``--engine spark`` is checked apart: ``--engine hop`` is the
default engine."""

_pending: Prelaunch | None = None


class Prelaunch:
    """A launcher (``python -P -m hop.cluster_launch --config-fd``): started, importing, waiting for its options."""

    def __init__(self) -> None:
        config_read, self._config_write = os.pipe()
        self._report_read, report_write = os.pipe()
        # Fixed now: the parent variable (the cluster's processes end on their own if this process dies without
        # stopping them, hop.lifetime.orphaned) and PYTHONHASHSEED=0, which takes effect only as an interpreter
        # starts (a worker would otherwise re-execute itself to get it, hop.worker.main). The rest of the
        # environment comes with the options.
        # Without the current directory on its path (hop.interpreter): a json.py there replaced the standard
        # library's in the launcher, which then failed to start.
        environment = module_environment({**os.environ, PARENT_VARIABLE: str(os.getpid()), "PYTHONHASHSEED": "0"})
        try:
            with _stop_signals_ignored_by_children():
                self.process: subprocess.Popen[bytes] = subprocess.Popen(
                    [
                        *module_command("hop.cluster_launch"),
                        "--config-fd",
                        str(config_read),
                        "--report-fd",
                        str(report_write),
                    ],
                    env=environment,
                    pass_fds=(config_read, report_write),
                )
        except BaseException:
            os.close(self._config_write)
            os.close(self._report_read)
            if hasattr(self, "process"):  # started, and a Ctrl-C held meanwhile came as the block ended: reaped
                self.process.kill()
                self.process.wait()
            raise
        finally:
            os.close(config_read)
            os.close(report_write)

    def configure(self, arguments: list[str]) -> TextIO:
        """Send the launcher its options (``hop.cluster_launch``'s arguments but the two fds) and this process's
        environment; return its report stream, which the caller then owns. Once only.

        A launcher that died before reading them is not an error here: its report stream ends without an address,
        which the caller reports with the launcher's exit code.
        """
        if self._config_write < 0:
            raise RuntimeError("a launcher is configured once")
        line = json.dumps({"arguments": arguments, "environment": dict(os.environ)}) + "\n"
        config = os.fdopen(self._config_write, "wb")
        self._config_write = -1
        try:
            with config:  # waits while the launcher still imports if the line is larger than the pipe's buffer
                config.write(line.encode())
        except BrokenPipeError:
            pass
        report = os.fdopen(self._report_read)
        self._report_read = -1
        return report

    def discard(self, timeout: float = 5.0) -> None:
        """End a launcher that was never configured: kill it and reap it."""
        for fd in (self._config_write, self._report_read):
            if fd >= 0:
                os.close(fd)
        self._config_write = self._report_read = -1
        self.process.kill()
        self.process.wait(timeout=timeout)


@contextlib.contextmanager
def _stop_signals_ignored_by_children() -> Iterator[None]:
    """Processes started in this block begin with Ctrl-C and SIGTERM ignored, as a cluster's processes run
    (``hop.lifetime.ignore_stop_signals``): from their first instruction, not once their imports are done. Ctrl-C
    in a terminal reaches the whole process group; one pressed while the launcher still started up killed it with a
    KeyboardInterrupt traceback (or "Fatal Python error" from its site import) printed after ``hop run``'s own
    message. An ignored disposition is what survives ``exec``; this process keeps its own: the signals are blocked
    meanwhile (in this thread), so one sent then is held and delivered here at the end of the block, not lost. The
    launcher unblocks them as it starts (``hop.cluster_launch.main``): a blocked mask survives ``exec`` too."""
    if threading.current_thread() is not threading.main_thread():
        yield  # (only the main thread may set handlers: the launcher then ignores them once it has imported)
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    handlers = [signal.signal(number, signal.SIG_IGN) for number in STOP_SIGNALS]
    try:
        yield
    finally:
        for number, handler in zip(STOP_SIGNALS, handlers, strict=True):
            signal.signal(number, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def wants_embedded_cluster(argv: list[str]) -> bool:
    """Whether ``argv`` (the command's arguments) is ``hop run`` on an embedded cluster, as far as a scan can tell."""
    if argv[:1] != ["run"]:
        return False
    options = argv[1 : argv.index("--")] if "--" in argv else argv[1:]  # after --: an mrjob job's own options
    for position, option in enumerate(options):
        name, equals, value = option.partition("=")
        if option == "-h" or (len(name) > 2 and any(known.startswith(name) for known in _ELSEWHERE_OPTIONS)):
            return False
        if len(name) > 2 and "--engine".startswith(name):
            engine = value if equals else (options[position + 1] if position + 1 < len(options) else "")
            if engine == "spark":
                return False
    return True


def take() -> Prelaunch | None:
    """The launcher :func:`main` started, if any and not taken yet; the caller owns it from then on."""
    global _pending
    prelaunch, _pending = _pending, None
    return prelaunch


def main() -> int:
    """Run the ``hop`` command (``hop.cli.main``), with a launcher started first when it will want one."""
    global _pending
    _skip_collections_at_exit()
    # Ctrl-C and SIGTERM during the imports are noted, not raised: a KeyboardInterrupt raised in them could land in a
    # weak reference callback of the import machinery, where Python prints "Exception ignored" and goes on (a Ctrl-C
    # lost: the job then ran to the end), and SIGTERM ended the command with no message (exit -15).
    came: list[int] = []
    try:
        with stop_signals_noted(came, stop_signals_taken()):
            if wants_embedded_cluster(sys.argv[1:]):
                _pending = Prelaunch()
            from hop.cli import main as cli_main  # the imports the launcher's start-up now overlaps
        if came:
            if sys.argv[1:2] and sys.argv[1] in SERVING_COMMANDS:
                return 0  # (stopped before it started: as when stopped while it serves)
            # Ctrl-C or SIGTERM during the command's imports, before it handles interruptions itself: its message
            # and exit code rather than a traceback of whichever module was being imported.
            print("hop: error: interrupted", file=sys.stderr)
            return 128 + came[0]
        return cli_main()
    finally:
        leftover = take()
        if leftover is not None:
            leftover.discard()
        _forget_handled_interruptions()


def _skip_collections_at_exit() -> None:
    """Leave the objects of this process out of the garbage collections the interpreter makes as it exits, once
    the exit handlers have run (registered first, this one runs last).

    Those collections walk every object the command's imports made, ~20 ms after every ``hop run``, spent freeing
    memory that the process's end frees anyway. Objects are still destroyed as their modules are cleared (a file is
    flushed and closed, a ``__del__`` runs); only objects that are garbage in reference cycles at exit are left
    as they are, whose finalizers Python does not promise to run at exit either. (At exit, not now: ``main`` may
    be called by a process that goes on, which must keep collecting its garbage.)"""
    global _collections_skipped
    if not _collections_skipped:
        atexit.register(gc.freeze)
        _collections_skipped = True


_collections_skipped = False


def _forget_handled_interruptions() -> None:
    """Make the interpreter exit with the command's exit code after a KeyboardInterrupt that was handled.

    CPython notes a KeyboardInterrupt that leaves code run by ``eval`` or ``exec`` of a string (``namedtuple`` and
    ``dataclass`` classes are made so, as a module is imported) as unhandled, even when a caller catches it, and it
    ends such an interpreter by killing itself with SIGINT instead of the exit code: a Ctrl-C that landed there made
    ``hop run`` print its message and then die of SIGINT (exit -2), not exit 130. Evaluating a string resets that
    note, and an interruption not handled by the time the command returns is noted again as it leaves."""
    eval("None")  # (a constant: what matters is that a string is evaluated)
