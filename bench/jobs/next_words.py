"""How many distinct words follow each word: a ``CountDistinct`` whose state per key is a set of words (hundreds of
bytes to many kilobytes), where a count's is a number. Measures memory with large aggregate states::

    python -m bench.reducer_memory --job bench/jobs/next_words.py --no-check ...
"""

from hop import Job
from hop.aggregates import CountDistinct


class NextWords(Job):
    def map(self, offset, line):
        words = line.split()
        yield from zip(words, words[1:], strict=False)

    combine = reduce = CountDistinct()
