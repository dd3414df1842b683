"""Word count whose reducers run their reduce one at a time, as the test lets them: each takes the next number
``N`` in ``reducer_init`` (the first ``entered-N`` it creates in the folder named by ``HOP_TEST_GATE``) and waits
(30 s at most) for ``go-N`` there. With one reduce slot, reducer ``N`` is the ``N``-th to start, not partition
``N``."""

import os
import time
from itertools import count
from pathlib import Path

from hop import Job


class ReducesInTurn(Job):
    def map(self, offset, line):
        for word in line.split():
            yield word, 1

    def reducer_init(self):
        gate = Path(os.environ["HOP_TEST_GATE"])
        for number in count():
            try:
                (gate / f"entered-{number}").touch(exist_ok=False)
                break
            except FileExistsError:
                continue
        deadline = time.monotonic() + 30
        while not (gate / f"go-{number}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return ()

    def reduce(self, word, counts):
        yield word, sum(counts)
