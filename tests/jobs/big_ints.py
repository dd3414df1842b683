"""Sums of JSON-line numbers by parity: ints past the 4,300 digits Python converts to and from text by default."""

from hop import Job
from hop.aggregates import Sum


class BigInts(Job):
    input_format = "jsonl"
    combine = reduce = Sum()

    def map(self, offset, number):
        yield number % 2, number
