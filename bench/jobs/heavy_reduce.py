"""Heavy reduce: for each word, statistics of the lengths of the lines it occurs in.

The map emits ``(word, len(line))`` for every word and there is NO combiner, so every value crosses the
shuffle; the reduce sorts all of a key's values and computes the count, mean, standard deviation and nine
nearest-rank percentiles. The floats are exact whatever the order values arrive in (an integer sum,
``math.fsum``), so every engine must produce the same output. Run by hop with ``--reducers 4`` to compare
pipelined with blocking shuffles.
"""

import math

from hop import Job

PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)


class HeavyReduce(Job):
    def map(self, offset, line):
        length = len(line)
        for word in line.split():
            yield word, length

    def reduce(self, word, lengths):
        values = sorted(lengths)
        count = len(values)
        mean = sum(values) / count
        deviation = math.sqrt(math.fsum((value - mean) ** 2 for value in values) / count)
        ranks = [values[min(count - 1, percent * count // 100)] for percent in PERCENTILES]
        yield word, [count, mean, deviation, *ranks]
