"""Hadoop streaming's counter and status lines, written to standard error by an mrjob job's own code.

A task of Hadoop streaming (and of mrjob's runners, which parse the tasks' standard error as Hadoop does:
``mrjob.parse.parse_mr_job_stderr``) takes a line ``reporter:counter:GROUP,COUNTER,AMOUNT`` on standard error as an
increment of that counter, and ``reporter:status:MESSAGE`` as the task's status. mrjob's ``increment_counter`` and
``set_status`` write those lines (hop's adapter replaces both), but jobs written for Hadoop streaming write them
themselves (``sys.stderr.write("reporter:counter:...")``): on hop they were printed as they were and counted
nowhere. :func:`report_to` routes them, line by line, to the running task's counters and status; any other text
goes to standard error as it came.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any, TextIO

from hop import task_status

__all__ = ["report_to"]

_COUNTER = re.compile(r"reporter:counter:([^,]*),([^,]*),(-?\d+)")
_STATUS = re.compile(r"reporter:status:(.*)")
"""The lines, as mrjob parses them (``mrjob.parse._COUNTER_RE``, ``_STATUS_RE``), without their line end."""


class _ReporterStream:
    """Standard error with the reporter lines written through it taken out (see the module docstring). Text is held
    only while its line is not ended, and only while it may still be a reporter line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.counter: Callable[[str, str, int], None] | None = None
        self.status: Callable[[str], None] | None = None
        self.attempt = 0
        """The task attempt whose the counter and status are (``hop.task_status.current_attempt``): lines written
        in another pass through, as a failed attempt, which gets no ``teardown``, left them set for the next."""
        self._line = ""

    def write(self, text: str) -> int:
        if self.counter is None or self.status is None or task_status.current_attempt() != self.attempt:
            held, self._line = self._line, ""  # (an unended line of the attempt before goes first, as text)
            self.stream.write(held + text)
            return len(text)
        pending = self._line + text
        *lines, self._line = pending.split("\n")
        passed = []
        for line in lines:
            stripped = line.rstrip("\r")
            if counter := _COUNTER.fullmatch(stripped):
                group, name, amount = counter.groups()
                self.counter(group, name, int(amount))
            elif status := _STATUS.fullmatch(stripped):
                self.status(status.group(1))
            else:
                passed.append(line + "\n")
        if self._line and not "reporter:".startswith(self._line[:9]):
            passed.append(self._line)  # (no reporter line: written now, as an unbuffered stderr would)
            self._line = ""
        if passed:
            self.stream.write("".join(passed))
        return len(text)

    def flush(self) -> None:
        if self._line:
            self.stream.write(self._line)
            self._line = ""
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:  # (fileno, encoding, isatty, buffer...: the stream's own)
        return getattr(self.stream, name)


def report_to(counter: Callable[[str, str, int], None] | None, status: Callable[[str], None] | None) -> None:
    """From now on, route the reporter lines written to ``sys.stderr`` to ``counter(group, name, amount)`` and
    ``status(message)``, while the task attempt running now runs; ``None`` for both: pass them through again (a task's
    end). The stream is wrapped once per process."""
    stream = sys.stderr
    if not isinstance(stream, _ReporterStream):
        if counter is None:
            return
        stream = _ReporterStream(stream)
        sys.stderr = stream
    stream.flush()  # (a line left unended by the task before goes out as it is)
    stream.counter, stream.status = counter, status
    stream.attempt = task_status.current_attempt()
