"""Word count whose ``key_stratum`` fails on every word but ``a``: its snapshots cannot be estimated, its final
output is exact all the same.

Its map pauses twice, so that a snapshot asked for at half of a 34,000-line input (64KB chunks) is taken before the
input is all read, whatever the machine's load: past half of it, long enough for a progress report to go out
(every 0.5 s, ``hop.tasks.PROGRESS_SECONDS``: the lines before took a fraction of that), then long enough for the
snapshot to be taken before the last lines are read."""

import time

from hop import Job
from hop.aggregates import Sum

PAUSES = {20_000: 0.6, 30_000: 1.5}
"""Seconds the map sleeps at these line numbers (counted from 1 per map task)."""


class FailingKeyStratum(Job):
    def setup(self):
        self.lines = 0

    def map(self, offset, line):
        self.lines += 1
        if self.lines in PAUSES:
            time.sleep(PAUSES[self.lines])
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()

    def input_stratum(self, path):
        return "all"

    def key_stratum(self, key):
        return {"a": "all"}[key]
