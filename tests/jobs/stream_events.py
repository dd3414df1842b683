"""Test jobs over JSON-line events ``{"ts": seconds, "text": ...}``, windowed by their event time (the word counts
themselves are shipped: ``jobs/event_wordcount.py``)."""

from typing import Any

from hop import Job
from hop.aggregates import Sum
from jobs.event_wordcount import EventWordCount


class EventWordLists(Job):
    """A generic reduce (no aggregate): the sorted list of event hours per word, to check list windows."""

    input_format = "jsonl"
    time_field = "ts"

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        for word in event["text"].split():
            yield word, int(event["ts"])

    def reduce(self, word: str, stamps: Any) -> Any:
        yield word, sorted(stamps)


class EventAmounts(Job):
    """The built-in ``Sum`` of each event's ``amount`` per ``user``: an event without one yields None, which the
    aggregate must refuse as it does in a batch job."""

    input_format = "jsonl"
    time_field = "ts"

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        yield event["user"], event.get("amount")

    combine = reduce = Sum()


class EventUsers(EventAmounts):
    """Events per user, but the map yields the user alone: a two-letter name would unpack as a pair."""

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        yield event["user"]  # should be: yield event["user"], 1


class EventTagCounts(Job):
    """Events per ``tags`` array of the event (a JSON array inside the record, used as the key as it comes)."""

    input_format = "jsonl"
    time_field = "ts"

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        yield event["tags"], 1

    combine = reduce = Sum()


class SlowEventWordCount(EventWordCount):
    """Takes 4 ms per event: a map that cannot keep up with a fast stream (load shedding)."""

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        import time

        time.sleep(0.004)
        return super().map(event_time, event)


class FailingUncombine(Job):
    """Record windows over text lines, built differentially; ``uncombine`` raises for the word ``boom``."""

    def map(self, event_time: float, line: str) -> Any:
        for word in line.split():
            yield word, 1

    def combine(self, word: str, counts: Any) -> Any:
        yield word, sum(counts)

    def uncombine(self, word: str, current: int, old: int) -> int:
        if word == "boom":
            raise RuntimeError("cannot take boom out")
        return current - old
