"""User counters (``Job.increment_counter``): ``{group: {name: int}}``, and how several add up.

A job's counters are summed over its committed task attempts (``hop.scheduler``); a multi-step run's ``_job.json``
sums them again over its steps (``hop.runner``, ``hop.spark_engine``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["UserCounters", "total_user_counters"]

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
