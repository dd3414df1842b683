"""Jobs that give something other than (key, value) pairs, as users write them by mistake."""

from hop import Job
from hop.aggregates import Sum


class MapReturnsOnePair(Job):
    def map(self, offset, line):
        return (line, 1)  # should be: yield line, 1

    combine = reduce = Sum()


class ReduceYieldsValues(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        yield sum(counts)  # should be: yield word, sum(counts)


class MapYieldsValues(Job):
    def map(self, offset, line):
        yield from self.words(line)

    def words(self, line):
        for word in line.split():
            yield word.lower()  # should be: yield word.lower(), 1

    combine = reduce = Sum()


class CombineYieldsValues(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def combine(self, word, counts):
        yield sum(counts)  # should be: yield word, sum(counts)

    def reduce(self, word, counts):
        yield word, sum(counts)


class CombineChangesKey(CombineYieldsValues):
    def combine(self, word, counts):
        yield word.upper(), sum(counts)  # a combiner must keep its key


class FinalHookYieldsValues(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()

    def reducer_final(self):
        yield "done"  # should be: yield "done", True


class PartitionOutOfRange(CombineYieldsValues):
    def combine(self, word, counts):
        yield word, sum(counts)

    def partition(self, key, num_partitions):
        return len(key) + num_partitions  # should be: len(key) % num_partitions
