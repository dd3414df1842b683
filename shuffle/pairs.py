"""Refusing what Python would silently unpack as a ``(key, value)`` pair.

A map, combine or reduce gives pairs, which the engine reads with ``for key, value in output``. Python unpacks any
iterable of two items that way: a map that yields a language code (``yield "en"``) instead of a pair gives key
``"e"`` with value ``"n"``, a two-key dict gives its keys, a two-item set gives them in no set order, and the job
succeeds with output that is wrong without a word (only a str of another length fails, with "too many values to
unpack"). Strings, bytes, dicts and sets are never meant as pairs, so they are refused, whatever their length.

Checking every pair of a map would cost a few % of a word count's map CPU, so a map's output is checked on samples
(``shuffle.buffer.MapOutputBuffer.run_map``): a job that yields a non-pair does so on every record, and the first is
checked. A combine's, reduce's and hook's output is checked whole (one call per key, not per input record).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["NOT_PAIRS", "checked_pairs", "not_a_pair"]

NOT_PAIRS = (str, bytes, bytearray, memoryview, dict, set, frozenset)
"""Types whose two-item objects Python would unpack as a pair, but which no job means as one."""


def not_a_pair(item: Any) -> TypeError:
    """The error for ``item``, one of :data:`NOT_PAIRS` given where a pair was expected. Its message is read by
    ``hop.usertrace.not_pairs``, which says what the user's function must yield instead."""
    return TypeError(f"a {type(item).__name__} is not a (key, value) pair: {item!r:.80}")


def checked_pairs(output: Iterable[Any]) -> Iterator[Any]:
    """The items of ``output``, raising :func:`not_a_pair` at the first one of :data:`NOT_PAIRS`; a user's generator
    is left suspended at the ``yield`` that gave it (``hop.usertrace.not_pairs`` shows that line)."""
    for item in output:
        if isinstance(item, NOT_PAIRS):
            raise not_a_pair(item)
        yield item
