"""A word count whose map sets its status on every record: ``mapped N``, N the records its task has read."""

from hop import Job
from hop.aggregates import Sum


class StatusPerRecord(Job):
    def setup(self):
        self.mapped = 0

    def map(self, offset, line):
        self.mapped += 1
        self.set_status(f"mapped {self.mapped}")
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()
