"""A map that yields a list as its key (a user's mistake: keys must be hashable, a tuple would do)."""

from hop import Job


class ListKeys(Job):
    def map(self, offset, line):
        yield line.split(), 1

    def reduce(self, key, values):
        yield key, sum(values)
