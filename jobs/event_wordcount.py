"""Word count over a stream of JSON-line events ``{"ts": seconds, "text": ...}``, windowed by their event time.

    hop run jobs/event_wordcount.py --job-class EventWordCount --source replay:events.jsonl --window 10s -o out/

``EventWordCount`` builds each window by merging its panes; ``EventWordCountDifferential`` builds sliding windows
from the previous one with ``uncombine`` (same results); ``ArrivalWordCount`` counts the words of text lines
windowed by arrival time (``jobs/stream_wordcount.py`` without ``uncombine``). The tests and ``bench.continuous``
run these.
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
