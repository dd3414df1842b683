"""Word count whose map takes 3 ms a line of the files named ``slow-*`` (as ``slow_file_map``), and whose
``mapper_final`` says the map ran and how many lines it read since its ``mapper_init``: the output counts the maps."""

import os
import time

from hop import Job


class SlowFileHookedMap(Job):
    def mapper_init(self):
        self.lines = 0

    def map(self, offset, line):
        if os.path.basename(self.input_file or "").startswith("slow-"):
            time.sleep(0.003)
        self.lines += 1
        for word in line.split():
            yield word, 1

    def mapper_final(self):
        yield "~maps", 1
        yield "~lines", self.lines

    def combine(self, key, values):
        yield key, sum(values)

    reduce = combine
