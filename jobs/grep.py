"""Grep: the lines matching a regular expression, with how often each occurs.

The pattern comes from the environment variable ``HOP_GREP_PATTERN`` when the job is submitted (default ``error``);
it is read at submit time and shipped with the job class, so every task uses the same pattern.
"""

import os
import re

from hop import Job


class Grep(Job):
    pattern = os.environ.get("HOP_GREP_PATTERN", "error")

    def setup(self):
        self._regex = re.compile(self.pattern)

    def map(self, offset, line):
        if self._regex.search(line):
            self.increment_counter("grep", "matching_lines")
            yield line, 1

    def combine(self, line, counts):
        yield line, sum(counts)

    reduce = combine
