"""Calling the user's code in a task, and the errors a task reports for it.

The batch tasks (:mod:`hop.tasks`), the stream tasks (:mod:`hop.stream.tasks`) and Spark's tasks
(:mod:`hop.spark_tasks`) call the user's functions through these, so a failure reads the same on every engine: where
it happened (map, combine, reduce, setup...), the record or key, and the user's traceback (:mod:`hop.usertrace`).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

from hop.usertrace import error_text, has_user_frame, user_traceback
from shuffle.buffer import AggregateValueError

__all__ = [
    "NO_STANDARD_INPUT",
    "USER_FAILURES",
    "TASK_FAILURES",
    "NoStandardInput",
    "Place",
    "UserCodeError",
    "call_user",
    "describe_record",
    "fold_error",
    "sendable",
    "shown",
    "shown_key",
]

USER_FAILURES = (Exception, SystemExit)
"""What user code raises that fails its call: any exception, and ``sys.exit()``'s ``SystemExit``, which is no
``Exception``: past a task's handlers it ended the task process, and the task was retried as if its worker had
failed, its record and traceback lost."""

TASK_FAILURES = (BaseException,)
"""What user code raises that fails its call in a task process of hop's engine: :data:`USER_FAILURES`, and the
other exceptions that are no ``Exception`` either (an ``asyncio.CancelledError`` out of the map's event loop, a
``KeyboardInterrupt`` a library raises, a job's own ``BaseException`` subclass). Past the task's handlers they ended
the task process: the task was retried as a crash (``exited with code 1 (os._exit() in the job's code?)``, ``killed
by SIGINT``) and the job failed after four attempts, its record not named. A task process ignores SIGINT, so a
``KeyboardInterrupt`` there is the code's own, not a Ctrl-C. A ``try`` around a generator's ``yield`` re-raises
``GeneratorExit``, which closing the generator raises there."""


NO_STANDARD_INPUT = (
    "a task has no standard input: a map's records are its arguments (key and value: a text file's byte offset and "
    "line), not lines of sys.stdin"
)


class NoStandardInputError(io.UnsupportedOperation):
    """A task read ``sys.stdin`` (:class:`NoStandardInput`): the job's code is wrong for every record, so no record
    is to blame (``--skip-bad-records`` would skip them all)."""


class NoStandardInput(io.TextIOBase):
    """``sys.stdin`` of a task, on every engine: reading it raises, saying where a map's records come from. A task
    process of hop's inherited its worker's (``hop run``'s terminal or pipe), so a map written as a streaming mapper
    (``for line in sys.stdin``) waited on it forever without a word; a Spark worker's reads ``/dev/null``, so such a
    map read nothing and the job succeeded without its records' output."""

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        raise NoStandardInputError(NO_STANDARD_INPUT)

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        raise NoStandardInputError(NO_STANDARD_INPUT)


def sendable(text: str) -> str:
    """``text`` as UTF-8 can carry it to the worker and into a report: a lone surrogate, which UTF-8 cannot encode,
    escaped. The user's error messages and records may hold one (a JSON input's ``"\\ud800"``, a line of an mrjob
    job's input kept as bytes with ``surrogateescape``), and a task that could not send its failure died instead,
    retried as a crash. A byte kept with ``surrogateescape`` is shown as that byte (``\\xff``)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # (a surrogate that stands for no byte: \ud800)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


RECORD_CHARS = 500
"""The most characters of the record or key a :class:`UserCodeError` names: a reduce's key is any size, and a
failing reduce of a 300 KB line printed all of it."""


class Place(str):
    """Where a failing map record is, as :func:`describe_record` words it: its record already cut to
    :data:`RECORD_CHARS` with its length, after the file's name, which :class:`UserCodeError` does not cut again."""


def shown(value: Any, show: Callable[[Any], str] = repr) -> str:
    """``show(value)``, or for a longer one than :data:`RECORD_CHARS` its start, left open, and its length: a
    string's characters where ``show`` is ``repr``, else the shown text's. (A map's record was cut to 200 characters
    in quotes, as if whole.)"""
    if isinstance(value, str) and show is repr:
        if len(value) <= RECORD_CHARS:
            return repr(value)
        return f"{repr(value[:RECORD_CHARS])[:-1]}... ({len(value):,} characters)"
    text = show(value)
    if len(text) <= RECORD_CHARS:
        return text
    return f"{text[:RECORD_CHARS]}... ({len(text):,} characters)"


def shown_key(key: Any, show: Callable[[Any], str] = repr) -> Place:
    """A key as an error names it: ``key`` and its :func:`shown` form (``show``: the step's ``show_key``), cut only
    there (a long key's length is the key's, not that of the text naming it)."""
    return Place(f"key {shown(key, show)}")


class UserCodeError(Exception):
    """The user's map, combine, reduce, setup or teardown raised. ``str()`` is a one-line reason."""

    skippable = False
    """Whether ``--skip-bad-records`` would have skipped the record: the user's map or reduce raised on it (not
    ``sys.exit()``, output the engine cannot take, or an aggregate refusing a value, which it does not skip)."""

    def __init__(self, where: str, error: BaseException, record: str | None) -> None:
        if record is not None and len(record) > RECORD_CHARS and not isinstance(record, Place):
            record = f"{record[:RECORD_CHARS]}... ({len(record):,} characters)"
        self.where = where
        self.record = record
        self.user_traceback: str | None = sendable(user_traceback(error))
        at = f" at {record}" if record else ""
        if isinstance(error, SystemExit):
            code = "" if error.code is None else repr(error.code)
            reason = f"called sys.exit({code}), which fails the job as an exception does (a task cannot exit early)"
        else:
            reason = f"raised {error_text(error)}"
        super().__init__(sendable(f"{where}{at} {reason}"))

    def without_traceback(self) -> UserCodeError:
        """This error without a traceback to show: the engine found what is wrong with the user's output (it names
        the call and the record), no frame of the user's raised it."""
        self.user_traceback = None
        return self


def describe_record(source: str, record: tuple[Any, Any] | None, keyed: bool) -> str:
    """Where a failing map record is, as errors name it: ``source`` (a file, or where a later step's records come
    from) and the byte offset and line, or for ``keyed`` records (a hop job's output read back: the ``output`` input
    format, a pipeline's later step) the record's key and value, each as its ``repr``."""
    if record is None:
        return Place(f"{source} (before the first record)")
    key, value = record
    if keyed:  # (the value as the map got it, a number not quoted: a map treating it as a line fails on it)
        return Place(f"{source} record with key {_bytes_shown(shown(key))}: {_bytes_shown(shown(value))}")
    return Place(f"{source} byte offset {key}: {_bytes_shown(shown(str(value)))}")


_KEPT_BYTE = re.compile(r"(?<!\\)((?:\\\\)*)\\udc([89a-f][0-9a-f])")
"""In a ``repr``, the escape of a surrogate that ``surrogateescape`` keeps a byte of 0x80-0xff in (not preceded by
an odd number of backslashes: those are a backslash of the text, escaped)."""


def _bytes_shown(shown: str) -> str:
    """``shown`` (a ``repr``) with each byte kept with ``surrogateescape`` (an mrjob job's input line that is not
    UTF-8) shown as that byte, ``\\xff`` where the ``repr`` had ``\\udcff``, as :func:`sendable` shows it in the
    bad records' listing."""
    return _KEPT_BYTE.sub(r"\1\\x\2", shown)


def call_user(where: str, function: Callable[[], Any], record: str | None = None) -> Any:
    """``function()`` (user code: ``where`` says which, ``record`` what it was working on); what it returns, or a
    :class:`UserCodeError` (chained to the original exception) if it raised one of :data:`TASK_FAILURES` (its
    callers run in hop's task processes). One raised by a ``call_user`` inside it passes as it is: it names the
    user's code that failed more closely (an mrjob job's ``load_args``, called by its adapter's ``setup``)."""
    try:
        return function()
    except UserCodeError:
        raise
    except TASK_FAILURES as error:
        raise UserCodeError(where, error, record) from error


def fold_error(aggregate: Any, failed_pair: tuple[Any, Any] | None, error: BaseException) -> BaseException:
    """``error``, raised while a map's output was folded into ``aggregate``'s states (None: the map does not fold)
    at ``failed_pair`` (the key and value being folded), as the user should read it: when the aggregate's own
    ``+``/``merge`` refused the value (no frame of the user's code raised it), an :class:`AggregateValueError`
    naming the aggregate, key and value, without the engine's frames; any other error as it is. Checking the error
    once costs nothing per value, unlike checking every value. Batch maps (``MapOutputBuffer``), stream maps
    (``PaneBuffer``) and Spark's map tasks (``hop.spark_tasks``) use it."""
    if isinstance(error, AggregateValueError):
        return error.with_traceback(None)
    if aggregate is None or has_user_frame(error) or not isinstance(error, (TypeError, ValueError)):
        return error
    key, value = failed_pair or (None, None)
    return AggregateValueError(
        f"{aggregate!r} could not fold a value of key {key!r:.80} (the latest, {value!r:.80}): "
        f"{type(error).__name__}: {error}; the map must yield values {aggregate!r} can combine, and no None"
    )
