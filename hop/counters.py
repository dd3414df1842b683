"""User counters (``Job.increment_counter``): ``{group: {name: int}}``, and how several add up.

A job's counters are summed over its committed task attempts (``hop.scheduler``); a multi-step run's ``_job.json``
sums them again over its steps (``hop.runner``, ``hop.spark_engine``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping

__all__ = ["UserCounters", "format_user_counters", "print_user_counters", "total_user_counters"]

UserCounters = dict[str, dict[str, int]]
"""``{group: {name: count}}``."""


def total_user_counters(parts: Iterable[Mapping[str, Mapping[str, int]]]) -> UserCounters:
    """The sum of ``parts`` per group and name: a new dict, ``parts`` untouched. O(total names)."""
    totals: UserCounters = {}
    for part in parts:
        for group, names in part.items():
            target = totals.setdefault(group, {})
            for name, value in names.items():
                target[name] = target.get(name, 0) + value
    return totals


def format_user_counters(counters: Mapping[str, Mapping[str, int]]) -> str:
    """The lines ``hop run`` prints for a job's user counters after its summary, as mrjob prints them (a count, then
    each group and its ``name=value`` lines, sorted); ``""`` when there are none.

    >>> print(format_user_counters({"words": {"total": 1234, "distinct": 5}}))
    hop: counters: 2
      words
        distinct=5
        total=1234
    """
    groups = {group: names for group, names in sorted(counters.items()) if names}
    if not groups:
        return ""
    lines = [f"hop: counters: {sum(map(len, groups.values()))}"]
    for group, names in groups.items():
        lines.append(f"  {group}")
        lines.extend(f"    {name}={value}" for name, value in sorted(names.items()))
    return "\n".join(lines)


def print_user_counters(counters: Mapping[str, Mapping[str, int]]) -> None:
    """Print :func:`format_user_counters` on stderr, where ``hop run`` prints its summary, if there are any."""
    lines = format_user_counters(counters)
    if lines:
        print(lines, file=sys.stderr)
