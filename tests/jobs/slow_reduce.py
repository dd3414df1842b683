"""Word count whose reduce takes 4 ms a key: long enough for the reduce's progress to be seen rising."""

import time

from hop import Job


class SlowReduce(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        time.sleep(0.004)
        yield word, sum(counts)
