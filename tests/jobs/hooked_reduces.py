"""Two steps whose reduces use what their ``reducer_init`` set, as mrjob jobs often do (a lookup loaded once per
task): the first counts words (its map sleeps a little per line, so that snapshots are taken while it runs) and its
``reducer_final`` says how many groups its reduce saw; the second totals the counts scaled by ``reducer_init``'s
factor. A reduce called without ``reducer_init`` fails."""

import time

from hop import Job, Step


class HookedReduces(Job):
    def words(self, offset, line):
        time.sleep(0.0002)
        for word in line.split():
            yield word, 1

    def add(self, key, values):
        yield key, sum(values)

    def count_init(self):
        self.groups = 0

    def count(self, word, counts):
        self.groups += 1
        yield word, sum(counts)

    def count_final(self):
        yield "~groups", self.groups

    def to_total(self, key, count):
        yield ("groups" if key == "~groups" else "total"), count

    def total_init(self):
        self.scale = 2

    def total(self, key, values):
        yield key, self.scale * sum(values)

    def steps(self):
        return [
            Step(mapper=self.words, combiner=self.add, reducer=self.count, reducer_init=self.count_init,
                 reducer_final=self.count_final),
            Step(mapper=self.to_total, reducer=self.total, reducer_init=self.total_init),
        ]  # fmt: skip
