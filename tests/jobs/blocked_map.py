"""Test job: a map stuck on one record and one that fails once (the cluster monitor's stuck-task alert, job progress
and faults). Input lines: ``block`` sleeps ``blocked_seconds`` (blocked, as on I/O, reading nothing more), ``fail-once
PATH`` ends the task process of the attempt that first finds no file at PATH (creating it: a crash, retried),
anything else is counted."""

import os
import time
from pathlib import Path
from typing import Any

from hop import Job


class BlockedMap(Job):
    blocked_seconds = 60.0

    def map(self, offset: int, line: str) -> Any:
        if line == "block":
            time.sleep(self.blocked_seconds)
        elif line.startswith("fail-once "):
            marker = Path(line.split(" ", 1)[1])
            if not marker.exists():
                marker.touch()
                os._exit(3)
        yield line, 1

    def reduce(self, key: Any, values: Any) -> Any:
        yield key, sum(values)


class BrieflyBlockedSlowReduce(BlockedMap):
    """Its ``block`` map stalls ``blocked_seconds``; its reduce takes ``reduce_seconds`` per key, advancing."""

    blocked_seconds = 3.0
    reduce_seconds = 0.01

    def reduce(self, key: Any, values: Any) -> Any:
        time.sleep(self.reduce_seconds)
        yield key, sum(values)


class BrieflyBlockedMap(BlockedMap):
    """Its ``block`` map stalls ``blocked_seconds``."""

    blocked_seconds = 3.0


class PassedOn(Job):
    """A pipeline's next step after ``BrieflyBlockedMap``: its maps read that job's output (as it comes, a pipe)."""

    def map(self, key: Any, count: Any) -> Any:
        yield key, count

    def reduce(self, key: Any, values: Any) -> Any:
        yield key, sum(values)
