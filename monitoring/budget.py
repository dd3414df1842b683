"""``hop monitor --duration``: one deadline for the whole command.

The monitor waits before its query runs: for the coordinator's first answer (``--coordinator``), for the workers of
its embedded cluster, for a first worker that publishes samples. Each wait took up to the duration (or 30 s) of its
own, and the query then ran the whole duration, so ``hop monitor --duration 10s`` could take 30 s. A
:class:`Budget` is the duration as a deadline counted from the command's start: every wait takes from it, and the
query runs for what is left (then drains, which its own bound covers: :data:`monitoring.cli.STOP_TIMEOUT`).
"""

from __future__ import annotations

import math
import time


class Budget:
    """What is left of ``duration`` seconds from its creation (``None``: no deadline, every wait its own bound)."""

    def __init__(self, duration: float | None) -> None:
        self.duration = duration
        self.started = time.monotonic()
        self.deadline = None if duration is None else self.started + duration

    def left(self, cap: float = math.inf) -> float:
        """Seconds left, at most ``cap`` and never below 0 (``cap`` itself without a deadline)."""
        if self.deadline is None:
            return cap
        return max(0.0, min(cap, self.deadline - time.monotonic()))

    def spent(self) -> float:
        """Seconds since the budget started."""
        return time.monotonic() - self.started

    def bounds(self, cap: float) -> bool:
        """Whether a wait of at most ``cap`` seconds is cut short by the deadline (what to blame for its end)."""
        return self.deadline is not None and self.left() < cap
