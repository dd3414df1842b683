"""The second job of a word-count pipeline whose map refuses every word from "m" on: it fails while the word
count's reducers are still streaming their output to it."""

from hop import Job
from hop.aggregates import TopK


class FailingTopK(Job):
    def map(self, word, count):
        if word >= "m":
            raise RuntimeError(f"refusing {word}")
        yield "top", (count, word)

    combine = reduce = TopK(5)
