"""A job whose map raises on the line containing the word 'boom'."""

from hop import Job


class FailingMap(Job):
    def map(self, offset, line):
        if "boom" in line:
            raise RuntimeError("cannot handle boom")
        yield line, 1

    def reduce(self, key, values):
        yield key, sum(values)
