"""Continuous word counts for ``bench.continuous``.

``EventWordCount`` reads JSON-line events ``{"ts": seconds, "text": ...}`` and windows them by their event time;
``EventWordCountDifferential`` builds sliding windows with ``uncombine`` instead of merging their panes;
``ArrivalWordCount`` counts the words of text lines windowed by arrival time (``jobs/stream_wordcount.py`` without
``uncombine``, which tumbling windows do not use: a differential tumbling window subtracts every key it adds).
"""

from typing import Any

from hop import Job
from hop.aggregates import Sum


class EventWordCount(Job):
    input_format = "jsonl"
    time_field = "ts"

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        for word in event["text"].split():
            yield word, 1

    combine = reduce = Sum()


class EventWordCountDifferential(EventWordCount):
    def uncombine(self, key: str, current: int, old: int) -> int:
        return current - old


class ArrivalWordCount(Job):
    def map(self, event_time: float, line: str) -> Any:
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()
