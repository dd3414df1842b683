"""Word count whose reduce raises for words starting with 'bad', only after a second on such a word: the other
reducers commit their parts first."""

import time

from hop import Job


class LateFailingReduce(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        if word.startswith("bad"):
            time.sleep(1.0)
            raise ValueError(f"refusing {word}")
        yield word, sum(counts)
