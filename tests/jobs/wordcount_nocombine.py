"""Word count without a combiner: every (word, 1) pair crosses the shuffle."""

from hop import Job


class WordCountNoCombiner(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        yield word, sum(counts)
