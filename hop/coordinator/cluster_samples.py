"""The coordinator's sample for the cluster monitor (``monitoring.events``): jobs, workers, running attempts.

Published every second on the coordinator's own sample stream; ``cluster`` says where that stream is and lists the
recent faults. Only reads the coordinator's state.
"""

from __future__ import annotations

import time
from typing import Any

from hop.coordinator.host import CoordinatorHost
from hop.scheduler import JobState


class ClusterSamples(CoordinatorHost):
    """The cluster monitor's view of the coordinator."""

    def _cluster_sample(self) -> dict[str, Any]:
        now = time.time()
        return {
            "jobs": [
                # A job that ended stays in the samples for 10 s more; its time ends with it (the dashboard showed a
                # job of 0.5 s as taking up to 10 s, the time since it was submitted).
                {
                    **self._job_summary(job),
                    "failures": job.failed_attempts(),
                    "elapsed": (job.finished_at or now) - job.submitted_at,
                }
                for job in self.jobs.values()
                if job.state == "running" or (job.finished_at or 0) > now - 10
            ],
            "workers": [
                {"worker": w.name, **w.where(), "rack": w.rack, "alive": w.alive, "silent_s": now - w.last_seen}
                for w in self.workers.values()
            ],
            # Running attempts of batch jobs with the seconds since each advanced (the stuck-task alert)
            "tasks": [
                {"job_id": job.spec.job_id, "name": job.spec.name, **attempt, **self._where(attempt["worker"])}
                for job in self.jobs.values()
                for attempt in self._advancing_attempts(job, now)
            ],
        }

    def _advancing_attempts(self, job: JobState, now: float) -> list[dict[str, Any]]:
        """``job``'s running attempts that should be advancing, with the seconds since each did (``stalled_s``:
        ``JobState.running_attempts``), given the pipeline step before, which feeds its maps."""
        return job.running_attempts(now, *self._upstream_wait(job))

    def _upstream_wait(self, job: JobState) -> tuple[bool, float | None]:
        """Whether the pipeline step before ``job`` (which feeds its maps) still runs, and when it ended (None: it
        has not, or ``job`` is no later step): ``JobState.running_attempts``' ``upstream_running`` and
        ``upstream_ended_at``."""
        upstream = self.jobs.get(str(job.spec.options.get("upstream") or ""))
        if upstream is None:
            return False, None
        return upstream.state == "running", upstream.finished_at

    def _where(self, worker: str) -> dict[str, Any]:
        """The worker's host label and address (``Worker.where``), or nothing for a worker no longer known."""
        known = self.workers.get(worker)
        return known.where() if known is not None else {}

    def on_cluster(self, identity: bytes, msg: dict[str, Any]) -> None:
        """Where the coordinator's sample stream is, and the recent faults."""
        self._send(identity, "cluster", events=self.events.endpoint, faults=list(self.events.faults))
