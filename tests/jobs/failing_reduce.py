"""Word count whose reduce raises for words starting with 'bad'."""

from hop import Job


class FailingReduce(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        if word.startswith("bad"):
            raise ValueError(f"refusing {word}")
        yield word, sum(counts)
