"""Run after a counting job: twice the total of its counts, with hooks a snapshot must run as a task runs them. The
map scales by what ``mapper_init`` set (a map called without it fails), ``mapper_final`` says the map ran, and with
``HOOKED_TOTAL_CALLS`` set (a folder) each ``setup()`` and ``teardown()`` leaves a file there named by the instance,
so that a test can tell every instance set up was torn down."""

import os
import uuid

from hop import Job


class HookedTotal(Job):
    input_format = "output"

    def setup(self):
        self.name = uuid.uuid4().hex
        self._mark("setup")

    def teardown(self):
        self._mark("teardown")

    def _mark(self, what):
        folder = os.environ.get("HOOKED_TOTAL_CALLS")
        if folder:
            with open(os.path.join(folder, f"{what}-{self.name}"), "w"):
                pass

    def mapper_init(self):
        self.scale = 2

    def map(self, key, count):
        yield "total", count * self.scale

    def mapper_final(self):
        yield "maps", 1

    def reduce(self, key, values):
        yield key, sum(values)
