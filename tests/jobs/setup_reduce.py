"""Word count whose reduce reads what ``setup()`` made, counts its groups (a user counter) and keeps count of them
in ``self`` for ``reducer_final``: a snapshot's reduce must see the one and leave the others as the final reduce
makes them."""

from hop import Job


class SetupReduce(Job):
    def setup(self):
        self.weight = 1
        self.groups = 0

    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        self.increment_counter("reduce", "groups")
        self.groups += 1
        yield word, sum(counts) * self.weight

    def reducer_final(self):
        yield "~groups", self.groups
