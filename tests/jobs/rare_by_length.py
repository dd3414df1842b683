"""How many of the rare words (``rare_words``' output: word, count) have each length."""

from hop import Job
from hop.aggregates import Sum


class RareByLength(Job):
    def map(self, word, count):
        yield len(word), 1

    combine = reduce = Sum()
