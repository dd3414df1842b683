"""Two steps whose second one's maps say, from their hooks, that they ran: the first step keeps the words seen at
least ``MIN_COUNT`` times (none of a small input), and every map of the second step yields ``("maps", 1)`` from its
``mapper_final`` and the records it read, counted since its ``mapper_init``. Each map of a later step runs its hooks,
an empty intermediate output's too, in either mode."""

from hop import Job, Step

MIN_COUNT = 1000


class HookedSecondStep(Job):
    def words(self, offset, line):
        for word in line.split():
            yield word, 1

    def frequent(self, word, counts):
        total = sum(counts)
        if total >= MIN_COUNT:
            yield word, total

    def start(self):
        self.read = 0

    def count(self, word, total):
        self.read += 1
        yield "words", 1

    def end(self):
        yield "maps", 1
        yield "read", self.read

    def add(self, key, values):
        yield key, sum(values)

    def steps(self):
        return [
            Step(mapper=self.words, reducer=self.frequent),
            Step(mapper=self.count, mapper_init=self.start, mapper_final=self.end, reducer=self.add),
        ]
