"""Jobs whose map yields a key the shuffle cannot sort or encode (a date, a frozenset) for the line ``odd``."""

import datetime

from hop import Job
from hop.aggregates import Sum


def _key(line):
    return datetime.date(2020, 1, 2) if line == "odd" else line


class OddKeys(Job):
    def map(self, offset, line):
        yield _key(line), 1

    def reduce(self, key, values):
        yield key, sum(values)


class OddKeysSummed(Job):
    """The map's pairs are folded by the reduce's aggregate in the map task (with a key's first value)."""

    def map(self, offset, line):
        yield ("pair", frozenset(line.split())) if line == "odd" else line, 1

    reduce = Sum()


class OddFinalKey(Job):
    """The odd key comes from mapper_final, after the last record."""

    def map(self, offset, line):
        yield line, 1

    def mapper_final(self):
        yield datetime.date(2020, 1, 2), 1

    def reduce(self, key, values):
        yield key, sum(values)
