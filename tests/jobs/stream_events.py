"""Test job: word count over JSON-line events ``{"ts": seconds, "text": ...}``, windowed by their event time."""

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


class EventWordLists(Job):
    """A generic reduce (no aggregate): the sorted list of event hours per word, to check list windows."""

    input_format = "jsonl"
    time_field = "ts"

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        for word in event["text"].split():
            yield word, int(event["ts"])

    def reduce(self, word: str, stamps: Any) -> Any:
        yield word, sorted(stamps)


class SlowEventWordCount(EventWordCount):
    """Takes 4 ms per event: a map that cannot keep up with a fast stream (load shedding)."""

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        import time

        time.sleep(0.004)
        return super().map(event_time, event)
