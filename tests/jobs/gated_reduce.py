"""Word count whose reducer waits in ``reducer_init`` until the test lets it go: it touches ``entered`` in the folder
named by ``HOP_TEST_GATE``, waits (30 s at most) for ``go`` there, and touches ``ended`` in ``reducer_final``, which
then raises if ``fail`` is there too (the reducer's output written)."""

import os
import time
from pathlib import Path

from hop import Job


class GatedReduce(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reducer_init(self):
        gate = Path(os.environ["HOP_TEST_GATE"])
        (gate / "entered").touch()
        deadline = time.monotonic() + 30
        while not (gate / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return ()

    def reduce(self, word, counts):
        yield word, sum(counts)

    def reducer_final(self):
        gate = Path(os.environ["HOP_TEST_GATE"])
        (gate / "ended").touch()
        if (gate / "fail").exists():
            raise RuntimeError("failing as told")
        return ()
