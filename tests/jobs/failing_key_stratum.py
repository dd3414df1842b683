"""Word count whose ``key_stratum`` fails on every word but ``a``: its snapshots cannot be estimated, its final
output is exact all the same."""

from hop import Job
from hop.aggregates import Sum


class FailingKeyStratum(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()

    def input_stratum(self, path):
        return "all"

    def key_stratum(self, key):
        return {"a": "all"}[key]
