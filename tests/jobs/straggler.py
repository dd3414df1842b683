"""Word count whose first attempt at the file named ``slow-*`` stalls: a straggler for speculative execution.

The first attempt to read that file drops a marker next to it and sleeps; a backup attempt sees the marker and runs
at full speed.
"""

import os
import time

from hop import Job
from hop.aggregates import Sum


class StragglerWordCount(Job):
    def setup(self):
        self._checked = False

    def map(self, offset, line):
        if not self._checked:
            self._checked = True
            name = os.path.basename(self.input_file or "")
            marker = os.path.join(os.path.dirname(self.input_file or "."), "_straggler-marker")
            if name.startswith("slow-") and not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(60)
        for word in line.split():
            yield word, 1

    reduce = Sum()
