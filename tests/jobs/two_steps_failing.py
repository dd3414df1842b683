"""A two-step job whose second step's map fails on the words counted 3 times: the failure is in a map reading the
first step's (intermediate) output."""

from hop import Job, Step


class FailingCountOfCounts(Job):
    def count_map(self, offset, line):
        self.increment_counter("steps", "lines")
        for word in line.split():
            yield word, 1

    def count_reduce(self, word, counts):
        yield word, sum(counts)

    def invert_map(self, word, count):
        if count == 3:
            raise ValueError(f"refusing {word!r}, counted 3 times")
        yield count, 1

    def steps(self):
        return [
            Step(mapper=self.count_map, reducer=self.count_reduce),
            Step(mapper=self.invert_map, reducer=self.count_reduce),
        ]
