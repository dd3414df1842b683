"""Sum, Count and Mean of ``key TAB number`` lines per key (``--job-class KeyedSum|KeyedCount|KeyedMean``): the
inputs ``bench.online_coverage`` writes, whose exact answers it compares snapshot intervals with."""

from hop import Job
from hop.aggregates import Count, Mean, Sum


class KeyedValues(Job):
    def map(self, offset, line):
        key, value = line.split("\t")
        yield key, float(value)


class KeyedSum(KeyedValues):
    combine = reduce = Sum()


class KeyedCount(KeyedValues):
    combine = reduce = Count()


class KeyedMean(KeyedValues):
    combine = reduce = Mean()
