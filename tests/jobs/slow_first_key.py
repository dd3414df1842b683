"""Word count whose reduce waits a second before its first key: a pipeline's next job has its maps waiting on the
pipe by the time this job's reducers write, so the two steps stream into each other even on a tiny input."""

import time

from hop import Job


class SlowFirstKey(Job):
    started = False

    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reduce(self, word, counts):
        if not self.started:
            self.started = True
            time.sleep(1.0)
        yield word, sum(counts)
