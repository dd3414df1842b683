"""A two-step job whose every step takes at least a second and a half (its reduce sleeps): for ``--timeout``,
which counts the whole run."""

import time

from hop import Job, Step


class SlowSteps(Job):
    def count_map(self, offset, line):
        yield line, 1

    def slow_sum(self, key, values):
        time.sleep(1.5)
        yield key, sum(values)

    def again_map(self, key, count):
        yield key, count

    def steps(self):
        return [Step(mapper=self.count_map, reducer=self.slow_sum), Step(mapper=self.again_map, reducer=self.slow_sum)]
