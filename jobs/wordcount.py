"""Word count: how many times each whitespace-separated token occurs (case kept, exact counts)."""

from hop import Job


class WordCount(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def combine(self, word, counts):
        yield word, sum(counts)

    def reduce(self, word, counts):
        yield word, sum(counts)
