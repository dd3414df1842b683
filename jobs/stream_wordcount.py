"""Word count over a stream, per window: ``hop run jobs/stream_wordcount.py --source tail:logs/ --window 60s
--slide 10s -o out/``.

Each line is stamped with its arrival time (JSON-line events windowed by their ``ts`` field:
``jobs/event_wordcount.py``); words are counted into panes on the map side, and every window's counts are
built from the previous window's by subtracting the pane that left and adding the one that came (``uncombine``).
"""

from typing import Any

from hop import Job
from hop.aggregates import Sum


class StreamWordCount(Job):
    """Counts the words of text lines; windows by arrival time (or records/bytes, per ``--window``)."""

    def map(self, event_time: float, line: str) -> Any:
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()

    def uncombine(self, key: str, current: int, old: int) -> int:
        return current - old
