"""The top-k of a counting job's output whose map sleeps 0.2 ms a record: a pipeline step slower than the
reduce streaming into it."""

import time

from hop import Job
from hop.aggregates import TopK


class SlowTopWords(Job):
    input_format = "output"

    def map(self, key, count):
        time.sleep(0.0002)
        yield "top", (count, key)

    combine = reduce = TopK(20)
