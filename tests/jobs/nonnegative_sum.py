"""Each input line is ``KEY VALUE``, the value an int: summed per key by a ``Sum(nonnegative=True)``, whose
snapshots' intervals start no lower than the sum so far (docs/online.md). A negative value among them makes the
declaration false, and the snapshots that see it fail.

The map is paced (20 ms every 1,000 lines), so that a run's snapshots come while its maps run."""

import time

from hop import Job
from hop.aggregates import Sum


class NonnegativeSum(Job):
    lines = 0

    def map(self, offset, line):
        self.lines += 1
        if self.lines % 1000 == 0:
            time.sleep(0.02)
        key, _, value = line.partition(" ")
        yield key, int(value)

    combine = reduce = Sum(nonnegative=True)
