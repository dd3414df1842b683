"""Mean and longest word length per first letter: Mean and Max aggregates on one job, via two steps."""

from hop import Job, Step
from hop.aggregates import CountDistinct, Max, Mean, TopK


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


class LongestAndDistinct(Job):
    """Per first letter the three longest word lengths (TopK, declared through steps())."""

    def steps(self):
        return [Step(mapper=self.lengths, reducer=TopK(3))]

    def lengths(self, offset, line):
        for word in line.split():
            yield word[0], len(word)


class DistinctWords(Job):
    """Per first letter how many distinct words (CountDistinct)."""

    def map(self, offset, line):
        for word in line.split():
            yield word[0], word

    reduce = CountDistinct()
