"""The user's part of a traceback: what a failing map, combine or reduce shows.

An exception raised by user code travels up through the engine's loops (``hop.tasks``, ``shuffle.buffer``...)
before the task reports it; the frames of those loops come first in its traceback and say nothing to the user.
:func:`user_traceback` leaves out the engine's leading frames, so the report starts at the user's code. An error
with no user frame at all (the engine's own) keeps its whole traceback.
"""

from __future__ import annotations

import os
import re
import traceback
from types import TracebackType
from typing import Any

import hop
import shuffle

__all__ = [
    "MESSAGE_CHARS",
    "error_text",
    "has_user_frame",
    "not_pairs",
    "raised_importing",
    "suspended_at",
    "user_traceback",
]

MESSAGE_CHARS = 2_000
"""The most characters of a user's error message (and of each part of its traceback) that a report shows, the rest
cut with its length: a map raising ``ValueError(f"cannot parse {line}")`` on a 50 MB line printed 100 MB on
stderr (the message in the traceback and in the error line) and wrote a 150 MB ``_job.json``."""


def _cut(text: str, tail: str = "") -> str:
    """``text``, or for a longer one than :data:`MESSAGE_CHARS` its start and its length (then ``tail``)."""
    if len(text) <= MESSAGE_CHARS:
        return text
    return f"{text[:MESSAGE_CHARS]}... ({len(text):,} characters){tail}"


def error_text(error: BaseException) -> str:
    """``Type: message`` of ``error`` as hop's errors and the bad records' listing name it: its message cut to
    :data:`MESSAGE_CHARS`, and that of an exception whose own ``__str__`` raises shown as Python's traceback shows
    it (``<exception str() failed>``): formatting it raised in the task's error handling, which the task reported
    as its own crash, retried it, and named neither the user's error nor the record."""
    try:
        message = str(error)
    except Exception:
        message = "<exception str() failed>"
    return f"{type(error).__name__}: {_cut(message)}"


_ENGINE_DIRECTORIES = tuple(
    os.path.dirname(os.path.abspath(package.__file__ or "")) + os.sep for package in (hop, shuffle)
)


_IMPORTLIB = "<frozen importlib."
"""How the import machinery's frames name their file (``<frozen importlib._bootstrap_external>``)."""


def _is_engine(frame: TracebackType) -> bool:
    return _is_engine_code(frame.tb_frame.f_code.co_filename)


def _is_engine_code(filename: str) -> bool:
    """Code of hop's packages, or of the import machinery they call to import a job file."""
    return filename.startswith(_IMPORTLIB) or os.path.abspath(filename).startswith(_ENGINE_DIRECTORIES)


def user_traceback(error: BaseException) -> str:
    """``error``'s traceback as text (with its chained causes), from the first frame outside hop's packages (and
    outside the import machinery they call to import a job file), leaving out such frames between the user's too:
    a module beside the job that the job's code imports as it runs comes through the import machinery and hop's
    loader (``hop.jobspec``), whose frames said nothing to the user (Python's own loader hides its frames so)."""
    entries = []
    entry = error.__traceback__
    while entry is not None:
        entries.append(entry)
        entry = entry.tb_next
    last_user = max((i for i, entry in enumerate(entries) if not _is_engine(entry)), default=None)
    if last_user is None:
        return _joined(traceback.format_exception(type(error), error, error.__traceback__))
    # The user's frames, and hop's after the last of them (an error the engine raised on what it was given), but not
    # after a syntax error in the user's file (its line and caret follow: hop's loader compiled it) nor, as under
    # Python's own loader, the import machinery's
    users_syntax = isinstance(error, SyntaxError) and not _is_engine_code(error.filename or "")
    kept = [
        entry
        for i, entry in enumerate(entries)
        if not _is_engine(entry)
        or (i > last_user and not users_syntax and not entry.tb_frame.f_code.co_filename.startswith(_IMPORTLIB))
    ]
    shown = None
    for entry in reversed(kept):
        shown = TracebackType(shown, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return _joined(traceback.format_exception(type(error), error, shown))


def _joined(parts: list[str]) -> str:
    """A formatted traceback's ``parts`` (its frames, its error's line) as one text, each part cut to
    :data:`MESSAGE_CHARS`: an error's message is any size."""
    return "".join(_cut(part, "\n") for part in parts)


def has_user_frame(error: BaseException) -> bool:
    """True when ``error`` passed through code outside hop's packages (the user's), False when only the engine's
    own frames raised it (an ``int + None`` in a fold loop, say)."""
    frame = error.__traceback__
    while frame is not None:
        if not _is_engine(frame):
            return True
        frame = frame.tb_next
    return False


def raised_importing(error: BaseException) -> bool:
    """True when ``error`` came out of an import the user's code ran as it was called (``import helper`` inside a
    map, failing on the module's syntax or its top-level code): the import machinery's frames are on its way. No
    record is to blame: every record would fail the same way, so ``--skip-bad-records`` neither skips nor suggests
    skipping it (it skipped N records, then failed all the same)."""
    frame = error.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_filename.startswith(_IMPORTLIB):
            return True
        frame = frame.tb_next
    return False


_UNPACKING = re.compile(
    r"(too many|not enough) values to unpack \(expected 2|cannot unpack non-iterable|object is not iterable"
    r"|object is not subscriptable"  # (the mrjob adapter reads a pair's key as pair[0]: hop.mrjob_codec)
    r"|is not a \(key, value\) pair"  # (a str, dict or set: shuffle.pairs)
)


class NotPairsError(TypeError):
    """The user's function gave something other than ``(key, value)`` pairs."""


def not_pairs(where: str, error: BaseException, output: Any = None) -> BaseException:
    """``error``, or, when the engine's loop failed to read what the user's ``where`` (map, reduce...) gave as
    ``(key, value)`` pairs (no user frame raised it: the function returned one pair, a number, or yielded values
    without keys), a :class:`NotPairsError` saying what a ``where`` must give: Python's own "too many values to
    unpack" names neither.

    ``output`` is what the function returned. When it is a generator, it is suspended at the ``yield`` that gave
    the non-pair: the error's traceback is that line (through any ``yield from``), so the user sees their own line
    and not the engine's loop."""
    if has_user_frame(error) or not isinstance(error, (TypeError, ValueError)) or not _UNPACKING.search(str(error)):
        return error
    problem = NotPairsError(
        f"the {where} gave something other than (key, value) pairs ({type(error).__name__}: {error}): yield each "
        f"pair (yield key, value) or return a list of pairs; not one pair alone, nor values without their keys"
    )
    return problem.with_traceback(suspended_at(_users_generator(output, error)))


_SEARCH_LIMIT = 64
"""The most objects :func:`_users_generator` looks at (the engine's generators hold a few locals each)."""


def _users_generator(output: Any, error: BaseException) -> Any:
    """The user's suspended generator that gave what could not be read as a pair: ``output`` itself, or one that an
    engine generator re-encoding the user's pairs (the mrjob adapter's, ``hop.mrjob_codec``) was iterating, found
    among the locals of ``output``'s frame or of the frames ``error`` was raised through. None if there is none."""
    pending = [output]
    entry = error.__traceback__
    while entry is not None:
        pending.extend(entry.tb_frame.f_locals.values())
        entry = entry.tb_next
    seen: set[int] = set()
    while pending and len(seen) < _SEARCH_LIMIT:
        candidate = pending.pop(0)
        frame = getattr(candidate, "gi_frame", None)
        if frame is None or id(candidate) in seen:
            continue
        seen.add(id(candidate))
        if not _is_engine_code(frame.f_code.co_filename):
            return candidate
        pending.extend(frame.f_locals.values())
    return None


def suspended_at(generator: Any) -> TracebackType | None:
    """Traceback entries at the ``yield`` where ``generator`` (and each generator it delegates to with ``yield
    from``, innermost last) is suspended; None for anything else (a list, a finished generator)."""
    frames = []
    while (frame := getattr(generator, "gi_frame", None)) is not None:
        frames.append(frame)
        generator = generator.gi_yieldfrom
    entry = None
    for frame in reversed(frames):
        entry = TracebackType(entry, frame, frame.f_lasti, frame.f_lineno)
    return entry
