"""``--task-timeout``: running attempts that have not advanced for that long fail, killed, and run again.

Checked about once a second (:data:`CHECK_SECONDS`) from the coordinator's loop; a job without the option costs a
look at its ``task_timeout``. Stalls are measured as ``hop run``'s note and the cluster monitor's stuck-task alert
measure them (``JobState.running_attempts``), but not across a pause of the coordinator itself (stopped, suspended
with its machine, starved: ``hop.coordinator.workers.PAUSE_SECONDS``): its attempts' progress could not be heard
meanwhile, and a laptop woken after an hour would otherwise kill every running attempt at once. Nor across a silence
of an attempt's worker (:data:`SILENT_SECONDS` without a heartbeat): its progress could not be heard either, and its
silence is the heartbeat timeout's to judge (a worker stopped for good is lost, its attempts run again uncounted).
"""

from __future__ import annotations

import time

from hop.coordinator.host import CoordinatorHost
from hop.coordinator.workers import HEARTBEAT_SECONDS, PAUSE_SECONDS

CHECK_SECONDS = 1.0
"""How often the coordinator looks for attempts past their job's ``--task-timeout``: a kill comes up to this late."""
SILENT_SECONDS = 3 * HEARTBEAT_SECONDS
"""A worker not heard from for this long (three heartbeats missed, as the cluster's faults count them) is silent:
its attempts are not timed out, and stall again only from when it is heard again."""


class TaskTimeouts(CoordinatorHost):
    """Fails the attempts of jobs with a ``task_timeout`` that stopped advancing (``JobState.time_out_stalled``)."""

    # State of its own (set up in ``Coordinator.__init__``)
    _timeouts_turn: float
    _timeouts_checked: float
    _stalls_count_from: float
    _heard_since: dict[str, float]

    def _time_out_stalled_attempts(self) -> None:
        """Called every turn of the loop: notes a pause of the coordinator (a gap between turns longer than
        ``PAUSE_SECONDS``), from whose end stalls count again; at most every :data:`CHECK_SECONDS`, fails the
        running jobs' attempts past their ``task_timeout``."""
        turn = time.monotonic()
        paused, self._timeouts_turn = turn - self._timeouts_turn, turn
        if paused > PAUSE_SECONDS:
            self._stalls_count_from = time.time()
        if turn - self._timeouts_checked < CHECK_SECONDS:
            return
        self._timeouts_checked = turn
        now = time.time()
        for worker in self.workers.values():
            if not worker.alive or now - worker.last_seen > SILENT_SECONDS:
                self._heard_since[worker.name] = now
        for job in list(self.jobs.values()):
            if job.task_timeout is None or job.state != "running":
                continue
            with self._failing_job_on_error(job, "timing out its stalled attempts"):
                counted_from, heard = self._stalls_count_from, self._heard_since
                self._execute(job, job.time_out_stalled(now, counted_from, *self._upstream_wait(job), heard))
