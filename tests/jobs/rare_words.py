"""The words seen fewer than ``RARE`` times, with their counts: a hand-written reduce that filters its groups, as a
query's HAVING does. A snapshot, taken on part of the input, lists words the whole input holds ``RARE`` times or
more: on such an input every snapshot has rows and the final output none. The map sleeps a little per line, long
enough to take snapshots."""

import time

from hop import Job

RARE = 8


class RareWords(Job):
    def map(self, offset, line):
        time.sleep(0.0005)
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        total = sum(counts)
        if total < RARE:
            yield word, total
