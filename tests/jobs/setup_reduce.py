"""Word count whose reduce reads what ``setup()`` made and counts its groups (a user counter): a snapshot's reduce
must see the one and leave the other as the final reduce makes it."""

from hop import Job


class SetupReduce(Job):
    def setup(self):
        self.weight = 1

    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        self.increment_counter("reduce", "groups")
        yield word, sum(counts) * self.weight
