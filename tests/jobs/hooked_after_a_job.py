"""A job to run after another in a list of job files: a hop job's hooks as methods, each map saying it ran."""

from hop import Job


class HookedAfterAJob(Job):
    def setup(self):
        self.read = 0

    def map(self, key, value):
        self.read += 1
        yield "records", 1

    def mapper_final(self):
        yield "maps", 1
        yield "read", self.read

    def reduce(self, key, values):
        yield key, sum(values)
