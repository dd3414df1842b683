"""Which rows of a window travel to the coordinator and stay there: what the web view's table and chart rank.

A window's whole result is in its part files; a reducer sends the coordinator at most ``ROWS_REPORTED`` rows of its
partition and the coordinator keeps at most ``KEEP_ROWS`` of a window (``hop.stream.tracker``). Cut in key order, a
table ranked by value showed the largest of the first keys, not the largest: a word at 7,429 on top while one at
14,729 was left out. Where every value is a number, the rows kept are those with the largest values (any row among a
window's largest is among its partition's largest); else the first, in key order.
"""

from __future__ import annotations

import heapq
import math

__all__ = ["largest_rows"]


def largest_rows(rows: list[list[str]], limit: int) -> tuple[list[list[str]], bool]:
    """``rows`` (``[key text, value text]``, JSON) cut to ``limit``, and whether they were cut by value: with more
    than ``limit`` and every value a JSON number, the ``limit`` with the largest values (NaN lowest), in their
    order; else the first ``limit``."""
    if len(rows) <= limit:
        return rows, False
    try:
        values = [_number(value) for _, value in rows]
    except ValueError:
        return rows[:limit], False
    kept = sorted(heapq.nlargest(limit, range(len(rows)), key=values.__getitem__))
    return [rows[position] for position in kept], True


def _number(text: str) -> float:
    """A JSON number's value (``NaN`` lowest); raises ``ValueError`` for any other JSON value, a string of digits
    (quoted) too."""
    value = float(text)  # (refuses "true", "null", '"12"', lists and objects)
    return -math.inf if math.isnan(value) else value
