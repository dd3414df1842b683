"""Jobs whose map yields (for the line ``odd``) a pair the shuffle cannot encode though pickle can (a set value, a
str with a lone surrogate), or whose combiner does."""

from hop import Job
from hop.aggregates import Max


class SetValue(Job):
    def map(self, offset, line):
        yield line, {line} if line == "odd" else 1

    def reduce(self, key, values):
        yield key, len(list(values))


class SurrogateKey(Job):
    def map(self, offset, line):
        yield line + "\ud800" if line == "odd" else line, 1

    def reduce(self, key, values):
        yield key.encode("utf-8", "surrogatepass").decode("utf-8", "replace"), sum(values)


class SurrogateValue(Job):
    def map(self, offset, line):
        yield line, line + "\udc80" if line == "odd" else line

    def reduce(self, key, values):
        yield key, len(list(values))


class CombineYieldsSet(Job):
    """The map's values are fine; the combiner gathers them into a set (of one: the same order in every process)."""

    def map(self, offset, line):
        yield line, line

    def combine(self, key, values):
        yield key, set(values)

    def reduce(self, key, values):
        yield key, len(list(values))


class CombinePassesSet(Job):
    """The map yields the set, the combiner passes its values on: the map's output."""

    def map(self, offset, line):
        yield len(line), {line} if line == "odd" else line

    def combine(self, key, values):
        for value in values:
            yield key, value

    def reduce(self, key, values):
        yield key, len(list(values))


class MaxOfSets(Job):
    """The map yields a set, which the reduce's aggregate folds in the map task into a state that is a set."""

    def map(self, offset, line):
        yield "all", {line}

    reduce = Max()
