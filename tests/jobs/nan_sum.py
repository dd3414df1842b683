"""Each input line is ``KEY VALUE``, the value a float as Python writes it (``nan`` too): summed per key. A key with
a NaN value has a NaN estimate in every snapshot, and no interval."""

from hop import Job
from hop.aggregates import Sum


class NanSum(Job):
    def map(self, offset, line):
        key, _, value = line.partition(" ")
        yield key, float(value)

    combine = reduce = Sum()
