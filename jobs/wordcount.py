"""Word count: how many times each whitespace-separated token occurs (case kept, exact counts).

``Sum`` is a built-in aggregate: the engine adds counts in place as the map yields them and merges partial sums
on the reduce side as maps commit. ``tests/jobs/wordcount_generic.py`` is the same job with hand-written
``combine``/``reduce`` functions, which the engine runs through the general path.
"""

from hop import Job
from hop.aggregates import Sum


class WordCount(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()
