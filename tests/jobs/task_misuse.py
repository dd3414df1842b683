"""Jobs whose code does what a task cannot: ``sys.exit()`` in a map, combine or reduce (also of a later step),
reading ``sys.stdin``, raising an error whose message holds a lone surrogate, writing output JSON or UTF-8 cannot
hold."""

import sys

from hop import Job, Step


class ExitsInMap(Job):
    """``sys.exit()`` in the function named by ``where``, at the word ``boom``."""

    where = "map"

    def map(self, offset, line):
        for word in line.split():
            if self.where == "map" and word == "boom":
                sys.exit(2)
            yield word, 1

    def combine(self, key, values):
        if self.where == "combine" and key == "boom":
            sys.exit()
        yield key, sum(values)

    def reduce(self, key, values):
        if self.where == "reduce" and key == "boom":
            sys.exit(0)
        yield key, sum(values)


class ExitsInCombine(ExitsInMap):
    where = "combine"


class ExitsInReduce(ExitsInMap):
    where = "reduce"


class ExitsInStepTwo(Job):
    """Three steps; the second one's reduce calls ``sys.exit(3)``."""

    def steps(self):
        return [
            Step(mapper=self.words, reducer=self.total),
            Step(mapper=self.as_one, reducer=self.exits),
            Step(reducer=self.total),
        ]

    def words(self, offset, line):
        for word in line.split():
            yield word, 1

    def total(self, key, values):
        yield key, sum(values)

    def as_one(self, word, count):
        yield "words", count

    def exits(self, key, values):
        sys.exit(3)


class ReadsStdin(Job):
    """A map written as a streaming mapper: its lines from ``sys.stdin``."""

    def map(self, offset, line):
        for text in sys.stdin:
            yield text.strip(), 1


class SurrogateError(Job):
    """A map whose error message holds a lone surrogate (as one quoting a JSON input's ``"\\ud800"`` may)."""

    def map(self, offset, line):
        raise ValueError(f"cannot take {line!r} \ud800")


class WritesSurrogate(Job):
    """A reduce whose output holds a lone surrogate, which UTF-8 cannot write."""

    def reduce(self, key, values):
        yield key, "x\ud800"


class FinalYieldsSet(Job):
    """A ``reducer_final`` yielding a value JSON cannot hold."""

    def reducer_final(self):
        yield "fin", {1}
