"""Word count with user counters in setup, map, reduce and teardown, and a partition function of its own."""

from hop import Job


class CountingWordCount(Job):
    def setup(self):
        self.increment_counter("tasks", "setup")

    def map(self, offset, line):
        self.increment_counter("lines", "all")
        if not line.strip():
            self.increment_counter("lines", "blank")
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        total = sum(counts)
        if total == 1:
            self.increment_counter("words", "once")
        yield word, total

    def partition(self, word, num_partitions):
        return len(word) % num_partitions

    def teardown(self):
        self.increment_counter("tasks", "teardown")
