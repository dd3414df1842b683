"""The peak resident memory of this process over a span of its life (a task attempt's, in a task process that runs
attempts one after another: ``hop.taskproc``).

On Linux the kernel keeps the peak (``VmHWM`` in ``/proc/self/status``) and resets it when ``5`` is written to
``/proc/self/clear_refs``: exact, with no sampling and no cost while the task runs. Elsewhere, or where the reset is
refused, there is no peak of a span to give: :meth:`PeakMemory.peak` is ``None``.
"""

from __future__ import annotations

import re
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
_RESET_PEAK = "5"
"""What ``clear_refs`` takes to reset the peak resident set size (Linux 4.0 and later)."""


def _status_bytes(field: str) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) * 1024 if match else None


class PeakMemory:
    """The process's peak resident set size from this object's creation on (the peak is reset then)."""

    def __init__(self) -> None:
        try:
            _CLEAR_REFS.write_text(_RESET_PEAK)
            self._reset = True
        except OSError:
            self._reset = False
        self.start = _status_bytes("VmRSS") if self._reset else None
        """Bytes resident when the span began (what the process held before: its code, an earlier task's
        leftovers), or ``None``."""

    def peak(self) -> int | None:
        """Bytes: the most this process held resident since this object was made, or ``None`` (not measurable)."""
        return _status_bytes("VmHWM") if self._reset else None

    def report(self) -> dict[str, int] | None:
        """``{"start_bytes", "peak_bytes"}`` (a task attempt's entry in the job report), or ``None``."""
        peak = self.peak()
        if self.start is None or peak is None:
            return None
        return {"start_bytes": self.start, "peak_bytes": peak}
