"""Word count whose map takes 3 ms a line of the files named ``slow-*``: one map runs long after the others
(tail splitting gives the rest of its input to an idle slot)."""

import os
import time

from hop import Job
from hop.aggregates import Sum


class SlowFileWordCount(Job):
    def map(self, offset, line):
        if os.path.basename(self.input_file or "").startswith("slow-"):
            time.sleep(0.003)
        for word in line.split():
            yield word, 1

    combine = reduce = Sum()
