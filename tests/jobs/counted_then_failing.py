"""A two-step job over another job's (key, value) output whose first step counts every record and succeeds, and
whose second step's map fails on its first record: a failure after a step of the same job committed user counters."""

from hop import Job, Step


class CountedThenFailing(Job):
    def count_map(self, key, value):
        self.increment_counter("steps", "records")
        yield key, value

    def sum_reduce(self, key, values):
        yield key, sum(values)

    def failing_map(self, key, value):
        raise ValueError(f"refusing {key!r} in the second step")

    def steps(self):
        return [
            Step(mapper=self.count_map, reducer=self.sum_reduce),
            Step(mapper=self.failing_map, reducer=self.sum_reduce),
        ]
