"""Word count whose map sleeps a little per line, so maps run long enough to observe pipelining."""

import time

from hop import Job


class SlowWordCount(Job):
    def map(self, offset, line):
        time.sleep(0.0005)
        for word in line.split():
            yield word, 1

    def combine(self, word, counts):
        yield word, sum(counts)

    reduce = combine
