"""Test job: one map record that keeps a core busy for ``busy_seconds`` (a CPU hog for the cluster monitor)."""

import time
from typing import Any

from hop import Job


class BusyMap(Job):
    busy_seconds = 45.0

    def map(self, offset: int, line: str) -> Any:
        deadline = time.monotonic() + self.busy_seconds
        spins = 0
        while time.monotonic() < deadline:
            spins += 1
        yield line, spins
