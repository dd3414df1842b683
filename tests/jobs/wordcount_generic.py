"""Word count with hand-written combine and reduce (the engine's general, list-per-key path)."""

from hop import Job


class WordCountGeneric(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def combine(self, word, counts):
        yield word, sum(counts)

    def reduce(self, word, counts):
        yield word, sum(counts)
