"""Word count whose partition 1 holds only the key "slow", whose reduce sleeps: partition 0 commits seconds first."""

import time

from hop import Job


class SlowPartition(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def partition(self, key, num_partitions):
        return 1 if key == "slow" else 0

    def reduce(self, key, values):
        if key == "slow":
            time.sleep(5)
        yield key, sum(values)
