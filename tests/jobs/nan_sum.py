"""Each input line is ``KEY VALUE``, the value a float as Python writes it (``nan`` too): summed per key. A key with
a NaN value has a NaN estimate in every snapshot, and no interval.

The map is paced (20 ms every 1,000 lines), so that a run's snapshots come while its maps run, each with more of
the input read: unpaced, a small input's maps all ended within a snapshot or two, and whether some snapshot had read
any chunk before the last was down to the machine's load."""

import time

from hop import Job
from hop.aggregates import Sum


class NanSum(Job):
    lines = 0

    def map(self, offset, line):
        self.lines += 1
        if self.lines % 1000 == 0:
            time.sleep(0.02)
        key, _, value = line.partition(" ")
        yield key, float(value)

    combine = reduce = Sum()
