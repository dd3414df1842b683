"""Fault injection for tests: kill a chosen task, or its whole worker, at a chosen point.

Set ``HOP_FAULT`` in the environment of the cluster's processes (the embedded cluster passes its environment on) to
a comma-separated list of ``KIND:POINT:INDEX[:ATTEMPT[:TARGET]]``:

- ``KIND`` is ``map`` or ``reduce``; ``INDEX`` the task index; ``ATTEMPT`` the attempt number (default 0, so the
  retry runs clean); ``TARGET`` is ``task`` (default: SIGKILL the task process), ``worker`` (SIGKILL the worker
  process, then the task process: the whole node is gone) or ``pause`` (the task stops there for
  ``PAUSE_SECONDS``, then goes on: a test can act while the task is at that point, e.g. cancel its job).
- map points: ``running`` (after the first progress report, mid-input), ``pushed`` (after the first spill was
  registered and pushed to every reducer, before commit), ``checkpointed`` (after the first checkpoint was sent,
  given ``hop.tasks.FAULT_SEND_SECONDS`` to leave the process, and its spills pushed: the retry resumes there),
  ``done`` (all input read and spilled, before the commit report).
- reduce points: ``snapshot`` (a snapshot request arrived, before it is answered), ``snapshotting`` (half-way
  through writing a snapshot's files: its first rows written), ``received`` (every committed run is here, before
  the merge), ``merging`` (half-way through writing the output), ``commit`` (output written, before the commit
  report).

Nothing here runs unless ``HOP_FAULT`` is set.
"""

from __future__ import annotations

import os
import signal
import time

POINTS = {
    "map": ("running", "pushed", "checkpointed", "done"),
    "reduce": ("snapshot", "snapshotting", "received", "merging", "commit"),
}
TARGETS = ("task", "worker", "pause")

PAUSE_SECONDS = 60.0
"""How long a ``pause`` fault holds its task: longer than a test waits for anything."""


def _parse(spec: str) -> list[tuple[str, str, int, int, str]]:
    faults = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        fields = item.split(":")
        if len(fields) < 3 or fields[0] not in POINTS or fields[1] not in POINTS[fields[0]]:
            raise ValueError(
                f"HOP_FAULT entry {item!r}: expected KIND:POINT:INDEX[:ATTEMPT[:TARGET]] with points {POINTS}"
            )
        attempt = int(fields[3]) if len(fields) > 3 else 0
        target = fields[4] if len(fields) > 4 else "task"
        if target not in TARGETS:
            raise ValueError(f"HOP_FAULT entry {item!r}: target must be one of {', '.join(TARGETS)}")
        faults.append((fields[0], fields[1], int(fields[2]), attempt, target))
    return faults


def wanted(kind: str, point: str, index: int, attempt: int) -> bool:
    """Whether a fault is configured for this point (cheap when ``HOP_FAULT`` is unset)."""
    spec = os.environ.get("HOP_FAULT")
    return bool(spec) and any(f[:4] == (kind, point, index, attempt) for f in _parse(spec or ""))


def inject(kind: str, point: str, index: int, attempt: int) -> None:
    """Kill (or pause) the configured target if a fault is set for this point; otherwise do nothing."""
    spec = os.environ.get("HOP_FAULT")
    if not spec:
        return
    for fault in _parse(spec):
        if fault[:4] == (kind, point, index, attempt):
            if fault[4] == "pause":
                time.sleep(PAUSE_SECONDS)
                continue
            if fault[4] == "worker":
                os.kill(os.getppid(), signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
