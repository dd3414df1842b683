"""A two-step job whose first step is a word count with the built-in Sum whose map sleeps a little per line (long
enough to take snapshots, so that ``--stop-when-accurate`` can stop it early), the second the total of the counts."""

import time

from hop import Job, Step
from hop.aggregates import Sum


class SlowSumTwoSteps(Job):
    def count_map(self, offset, line):
        time.sleep(0.0002)
        for word in line.split():
            yield word, 1

    def total_map(self, word, count):
        yield "words", count

    def steps(self):
        return [Step(mapper=self.count_map, combiner=Sum(), reducer=Sum()), Step(mapper=self.total_map, reducer=Sum())]
