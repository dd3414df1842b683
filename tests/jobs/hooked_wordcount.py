"""Word count with mrjob's init/final hooks as methods: each map counts its lines and tasks, each reducer marks its
start and end (their pairs join the map's output and the reduce's output)."""

from hop import Job


class HookedWordCount(Job):
    def mapper_init(self):
        self.lines = 0
        yield "map tasks", 1

    def map(self, offset, line):
        self.lines += 1
        for word in line.split():
            yield word, 1

    def mapper_final(self):
        yield "lines", self.lines

    def combine(self, word, counts):
        yield word, sum(counts)

    def reducer_init(self):
        return [("reducer started", True)]

    def reduce(self, word, counts):
        yield word, sum(counts)

    def reducer_final(self):
        yield "reducer ended", None
