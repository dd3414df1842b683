"""Jobs of ``tests/test_stream_exactness.py`` over JSON-line events ``{"ts": seconds, "text": ...}``: what each
yields for a window is computed there again, serially, from the events alone."""

from typing import Any

from hop import Job
from hop.aggregates import Max, Sum


class WordSum(Job):
    """Words per window, each window merged from its panes."""

    input_format = "jsonl"
    time_field = "ts"

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        for word in event["text"].split():
            yield word, 1

    combine = reduce = Sum()


class WordSumDifferential(WordSum):
    """The same, sliding windows built from the previous one with ``uncombine``."""

    def uncombine(self, key: str, current: int, old: int) -> int:
        return current - old


class WordStamps(WordSum):
    """A generic reduce: every event time of a word in the window, sorted (a record counted twice or lost shows)."""

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        for word in event["text"].split():
            yield word, event_time

    combine = None  # type: ignore[assignment]

    def reduce(self, word: str, stamps: Any) -> Any:
        yield word, sorted(stamps)


class LatestPerWord(WordSum):
    """The built-in ``Max`` of each word's event time."""

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        for word in event["text"].split():
            yield word, event_time

    combine = reduce = Max()


class WholeText(WordSum):
    """Events per text, the whole text the key: keys holding U+2028 and its kin, which ``str.splitlines`` splits."""

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        yield event["text"], 1


class SlowWordSum(WordSum):
    """Takes 3 ms an event: a map that falls behind a fast stream (load shedding)."""

    def map(self, event_time: float, event: dict[str, Any]) -> Any:
        import time

        time.sleep(0.003)
        return super().map(event_time, event)
