"""Mean and longest word length per first letter: Mean and Max aggregates on one job, via two steps."""

from hop import Job, Step
from hop.aggregates import Max, Mean


class WordLengths(Job):
    def lengths(self, offset, line):
        for word in line.split():
            yield word[0], len(word)

    def steps(self):
        return [Step(mapper=self.lengths, reducer=Mean())]


class LongestWords(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word[0], len(word)

    reduce = Max()
