"""Jobs over ``key value`` lines (an int value), one per built-in aggregate and a hand-written reduce; their maps
pause briefly every 2,000 lines so that a single map's snapshots land part-way through its input."""

import time

from hop import Job, Step
from hop.aggregates import Count, Max, Mean, Sum


class KeyedValues(Job):
    lines = 0

    def map(self, offset, line):
        self.lines += 1
        if self.lines % 2000 == 0:
            time.sleep(0.03)
        key, value = line.split()
        yield key, int(value)


class SumValues(KeyedValues):
    combine = reduce = Sum()


class CountValues(KeyedValues):
    combine = reduce = Count()


class MeanValues(KeyedValues):
    reduce = Mean()


class MaxValues(KeyedValues):
    reduce = Max()


class MedianValues(KeyedValues):
    def reduce(self, key, values):
        ordered = sorted(values)
        yield key, [len(ordered), ordered[len(ordered) // 2]]


class TotalsByDigit(KeyedValues):
    """Two steps: a Sum per key, then how many keys' totals end in each digit."""

    def digit_map(self, key, total):
        yield total % 10, 1

    def steps(self):
        return [Step(mapper=self.map, combiner=Sum(), reducer=Sum()), Step(mapper=self.digit_map, reducer=Sum())]
