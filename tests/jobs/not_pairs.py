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


class MapYieldsCodes(Job):
    """Counts lines per language code, but yields the code alone: a two-letter str unpacks as a pair."""

    def map(self, offset, line):
        yield line.split()[0]  # should be: yield line.split()[0], 1

    combine = reduce = Sum()


class MapYieldsRecords(Job):
    def map(self, offset, line):
        for word in line.split():
            yield {"word": word, "count": 1}  # should be: yield word, 1 (a two-key dict unpacks as its keys)

    def reduce(self, word, counts):
        yield word, sum(counts)


class ReduceYieldsText(Job):
    def map(self, offset, line):
        yield line.split()[0], 1

    def reduce(self, code, counts):
        yield code  # should be: yield code, sum(counts)


class CombineYieldsSet(ReduceYieldsText):
    def combine(self, code, counts):
        yield {code, sum(counts)}  # should be: yield code, sum(counts)

    def reduce(self, code, counts):
        yield code, sum(counts)
