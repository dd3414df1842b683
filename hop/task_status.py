"""A running task's status message (mrjob's ``set_status``), carried by the engine to whoever follows the job.

A task process used to print it on its standard error, which an embedded cluster shares with ``hop run``: on a
terminal the line landed between ``hop run``'s progress bars, which were then redrawn a row off (a copy of the map
bar left on screen per message), and a standalone worker's standard error is not the submitter's at all (the
message was lost for ``hop submit``). Instead the task process running an attempt installs a sender
(:func:`reporting`: a ``task_status`` message to its worker, relayed to the coordinator), the coordinator keeps the
latest message per task (``hop.scheduler.JobState.on_task_status``) and puts it in the job's status, and ``hop
run``/``hop submit`` print each new one above their bars (``hop.runner.ProgressDisplay``) in :func:`status_line`'s
words. This module imports nothing of the engine: the job's code calls :func:`report` from any process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STATUS_CHARS = 1000
"""The longest status message sent, in characters: a longer one is cut there (``…`` marks the cut). It travels in a
message of its own and in every status reply that carries it, so it stays a line, not a report."""

_sender: Callable[[str], None] | None = None
"""Sends a status message of the attempt this process runs (:func:`reporting`), or None outside one."""


@contextmanager
def reporting(send: Callable[[str], None]) -> Iterator[None]:
    """While the block runs (one task attempt), :func:`report` sends through ``send``."""
    global _sender
    _sender = send
    try:
        yield
    finally:
        _sender = None


def report(name: str, message: str) -> None:
    """Say ``message`` as the status of the running attempt of job ``name`` (the caller rate-limits: at most about
    once a second per attempt). Outside a task attempt (user code run by hand), it is printed on standard error, as
    :func:`status_line` words it with this process's id for the task."""
    message = _short(message)
    if _sender is not None:
        _sender(message)
    else:
        print(f"hop: {name} status (task pid {os.getpid()}): {message}", file=sys.stderr, flush=True)


def _short(message: str) -> str:
    if len(message) <= STATUS_CHARS:
        return message
    return message[: STATUS_CHARS - 1] + "…"


def status_line(name: str, entry: dict[str, Any], label: str = "") -> str:
    """The line that says a task's status ``entry`` (``{kind, index, attempt, message}``, from a job status's
    ``task_status``) of job ``name``, ``label`` naming the step of a run of several (``"step 1/2 "``)."""
    again = f" attempt {entry['attempt']}" if entry.get("attempt") else ""
    return f"hop: {label}{name} status (task {entry['kind']} {entry['index']}{again}): {entry['message']}"
