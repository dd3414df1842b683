"""A two-step job: count words, then count how many words have each count."""

from hop import Job, Step


class CountOfCounts(Job):
    def count_map(self, offset, line):
        self.increment_counter("steps", "lines")  # (a counter of each step: the run's counters sum them)
        for word in line.split():
            yield word, 1

    def count_reduce(self, word, counts):
        yield word, sum(counts)

    def invert_map(self, word, count):
        self.increment_counter("steps", "words")
        yield count, 1

    def sum_reduce(self, key, values):
        yield key, sum(values)

    def steps(self):
        return [
            Step(mapper=self.count_map, combiner=self.count_reduce, reducer=self.count_reduce),
            Step(mapper=self.invert_map, combiner=self.sum_reduce, reducer=self.sum_reduce),
        ]
