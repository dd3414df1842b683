"""Word count whose aggregate combiner feeds a hand-written reduce that also reports how many states it got (one per
map spill holding the word, on hop and on Spark alike; the map imports its helper beside this file in the method)."""

from hop import Job
from hop.aggregates import Count


class CountedStates(Job):
    def map(self, offset, line):
        from word_helpers import words  # a module beside this file, imported where it is used

        for word in words(line):
            yield word, 1

    combine = Count()

    def reduce(self, word, counts):
        counts = list(counts)
        yield word, [sum(counts), len(counts)]
