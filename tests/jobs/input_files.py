"""Counts the records read from each input file, by the file's name (``self.input_file``)."""

import os

from hop import Job
from hop.aggregates import Sum


class InputFiles(Job):
    input_format = "output"

    def map(self, key, value):
        yield os.path.basename(self.input_file), 1

    combine = reduce = Sum()
