"""A job whose map yields ``None`` for the value ``-`` (an optional field), with ``Sum`` as its reduce."""

from hop import Job
from hop.aggregates import Sum


class OptionalValues(Job):
    def map(self, offset, line):
        key, value = line.split()
        yield key, None if value == "-" else int(value)

    reduce = Sum()
