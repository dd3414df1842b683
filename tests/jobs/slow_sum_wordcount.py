"""Word count with the built-in Sum aggregate whose map sleeps a little per line: long enough to take snapshots."""

import time

from hop import Job
from hop.aggregates import Sum


class SlowSumWordCount(Job):
    def map(self, offset, line):
        time.sleep(0.0002)
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()
