"""A running task's status message (a hop job's ``Job.set_status``, mrjob's ``set_status``), carried by the engine to
whoever follows the job.

A task process used to print it on its standard error, which an embedded cluster shares with ``hop run``: on a
terminal the line landed between ``hop run``'s progress bars, which were then redrawn a row off (a copy of the map
bar left on screen per message), and a standalone worker's standard error is not the submitter's at all (the
message was lost for ``hop submit``). Instead the task process running an attempt installs a sender
(:func:`reporting`: a ``task_status`` message to its worker, relayed to the coordinator), the coordinator numbers
each message and keeps the latest of every attempt (``hop.scheduler.JobState.on_task_status``) and puts them in the
job's status, and ``hop run``/``hop submit`` print each new one above their bars (``hop.runner.ProgressDisplay``) in
:func:`status_line`'s words (a continuous job's ``hop run`` among its windows' lines, ``hop.stream.runner``). This
module imports nothing of the engine: the job's code calls :func:`report` from any process.

A job may set its status on every record: :func:`report` sends a message only when it differs from the last one
sent and a second has passed since (:data:`STATUS_EVERY`), so the coordinator gets at most about one a second per
attempt, and keeps the rest as the attempt's latest, which :func:`flush` sends. The task process flushes before it
reports its attempt's end, whether it succeeded or failed: the last status a failing attempt set is what a user
debugging it wants, and a word that came after the failure would be dropped (an attempt no longer live is not
heard).

Outside an attempt (a job's methods called by hand, in a unit test) a message is printed on standard error instead,
under the same limit, and the one held back last is printed as the process exits, if no later call or
:func:`flush` printed it (no task ends there to flush it).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STATUS_CHARS = 1000
"""The longest status message sent, in characters: a longer one is cut there (``…`` marks the cut). It travels in a
message of its own and in every status reply that carries it, so it stays a line, not a report."""

STATUS_EVERY = 1.0
"""Seconds between two messages sent for one attempt (or, outside an attempt, printed by one process)."""

_clock = time.monotonic  # (one global read per call: a job may set its status on every record)

_sender: Callable[[str], None] | None = None
"""Sends a status message of the attempt this process runs (:func:`reporting`), or None outside one."""
_sent: str | None = None
"""The last message sent."""
_next_at = float("-inf")
"""When (``time.monotonic()``) another may be sent: a second after it."""
_pending: str | None = None
"""The last message set, when it is not the last one sent (held back by the once-a-second limit)."""
_owner: object = ""
"""Whose the pending message is: a job's name, or the ``Job`` whose class names it (printed with it outside an
attempt)."""
_flushed_at_exit = False
"""Whether :func:`flush` runs as this process exits (registered with the first message printed outside an attempt)."""
_attempts_begun = 0
_attempt = 0
"""The number of the attempt this process runs (:func:`reporting`: 1, 2... in the order they began), 0 outside one."""


@contextmanager
def reporting(send: Callable[[str], None]) -> Iterator[None]:
    """While the block runs (one task attempt), :func:`report` sends through ``send``; the attempt's first message
    goes at once, whatever the attempt before it in this process sent."""
    global _sender, _attempts_begun, _attempt
    _forget()
    _sender = send
    _attempts_begun += 1
    _attempt = _attempts_begun
    try:
        yield
    finally:
        _sender = None
        _attempt = 0
        _forget()


def current_attempt() -> int:
    """Which attempt this process runs: a number no other attempt of this process has, while it runs (0 outside
    any). What a task's hook set up for its attempt (its own ``teardown`` skipped by a failure) can tell it by."""
    return _attempt


def _forget() -> None:
    global _sent, _next_at, _pending, _owner
    _sent = _pending = None
    _next_at = float("-inf")
    _owner = ""  # (not the attempt's job, which would live on in this process until the next attempt's message)


def report(name: str, message: str) -> None:
    """Set ``message`` as the status of the running attempt of job ``name``: sent now if it is a new one and the
    last was sent a second ago or more (:data:`STATUS_EVERY`), else kept for later (a next call, or
    :func:`flush`). Outside a task attempt (user code run by hand) it is printed on standard error instead, as
    :func:`status_line` words it with this process's id for the task."""
    setter(name)(message)


def setter(name: str) -> Callable[[Any], None]:
    """:func:`report` for job ``name`` as one call of one argument, any object (said as ``str`` says it, as mrjob's
    ``%s`` does), to be called per record: a comparison and, for a new message, a clock read (it is an mrjob job's
    ``set_status``, ``hop.mrjob_adapter``). Its parameter is mrjob's, ``msg``: a job may pass it by keyword."""
    return functools.partial(set_status_of, name)  # (called in C: no frame of its own per record)


def set_status_of(owner: object, msg: Any) -> None:
    """Set ``msg`` (any object, said as ``str`` says it) as the status of the running attempt of ``owner``'s job:
    :func:`report`'s work, ``owner`` a job's name or a hop ``Job`` (named by its class only when a message is
    printed outside an attempt, so a ``Job.set_status`` called per record costs a call, a comparison and, for a new
    message, a clock read)."""
    global _pending, _owner
    message = msg if type(msg) is str else str(msg)
    if message == _sent:
        _pending = None
    elif _clock() >= _next_at:
        _send(owner, message)
    else:
        _pending, _owner = message, owner


def flush() -> None:
    """Send the last message set if it was not sent (the attempt ends: its last word must precede its end)."""
    if _pending is not None:
        _send(_owner, _pending)


def _send(owner: object, message: str) -> None:
    global _sent, _next_at, _pending, _flushed_at_exit
    _sent, _next_at, _pending = message, _clock() + STATUS_EVERY, None
    if _sender is not None:
        _sender(_short(message))
        return
    name = owner if isinstance(owner, str) else type(owner).__name__
    print(f"hop: {name} status (task pid {os.getpid()}): {one_line(_short(message))}", file=sys.stderr, flush=True)
    if not _flushed_at_exit:  # (a message held back after this one would otherwise never be said)
        _flushed_at_exit = True
        atexit.register(flush)


def _short(message: str) -> str:
    if len(message) <= STATUS_CHARS:
        return message
    return message[: STATUS_CHARS - 1] + "…"


_ESCAPED = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]}
_ESCAPED |= {0x0A: "\\n", 0x0D: "\\r", 0x09: " "}
"""What a control character of a message becomes on a terminal: the escape Python would write for it (a tab, a
space)."""


def one_line(message: str) -> str:
    """``message`` as one line of plain text: its line breaks and other control characters (an escape sequence
    would recolour or clear the terminal, a carriage return overwrite the line) written as escapes, ``\\n``."""
    if message.isprintable():  # (the usual case: nothing to do)
        return message
    return message.translate(_ESCAPED)


def status_line(name: str, entry: dict[str, Any], label: str = "") -> str:
    """The line that says a task's status ``entry`` (``{kind, index, attempt, message}``, from a job status's
    ``task_status``) of job ``name``, ``label`` naming the step of a run of several (``"step 1/2 "``)."""
    again = f" attempt {entry['attempt']}" if entry.get("attempt") else ""
    return f"hop: {label}{name} status (task {entry['kind']} {entry['index']}{again}): {one_line(entry['message'])}"


class StatusFeed:
    """The task status messages a run says, each once, in the order they were sent: shared by the progress displays
    of a run's steps (``hop.runner``), which follow one step at a time while a pipeline's later steps run beside it
    and send theirs. ``steps``: each step's job id -> the label and job name its messages are said with."""

    def __init__(self, steps: dict[str, tuple[str, str]] | None = None) -> None:
        self.steps = steps or {}
        self.seen = 0
        """The last message said (its ``seq``): a status that brings it again does not say it twice, and the next
        step's display asks for those after it."""

    def lines(self, status: dict[str, Any], label: str = "") -> list[str]:
        """The lines that say the messages of ``status`` (a job's, shown under ``label``) not said yet."""
        lines = []
        job_id = status.get("job_id", "job")
        for entry in status.get("task_status", ()):
            if entry["seq"] > self.seen:
                self.seen = entry["seq"]
                other = entry.get("job_id", job_id)
                step_label, name = self.steps.get(other, (label, status.get("name", job_id)))
                lines.append(status_line(name, entry, step_label))
        return lines
