"""What the coordinator's concerns share: the record of each worker, and the state and methods of one another they use.

:class:`hop.coordinator.server.Coordinator` is made of one mixin per concern (``hop.coordinator.workers``, ``jobs``,
``task_reports``, ``actions``, ``pipelines``, ``snapshots``, ``streams``, ``scheduling``, ``cluster_samples``). Each
subclasses :class:`CoordinatorHost`, which declares the coordinator's state that more than one of them reads or
changes (set up in ``Coordinator.__init__``, which documents each field; a mixin declares in its own body the state
that it alone uses) and the methods one concern calls on another; the class that combines them defines every one of
those, and mypy checks each definition against its declaration here. A concern's own methods are not declared here:
only its neighbours' entry points are.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from hop.jobspec import JobSpec
from hop.online.tracker import Snapshot
from hop.scheduler import Action, FinishJob, JobState
from hop.stream.tracker import WindowTracker
from monitoring.events import ClusterEvents


@dataclass
class WorkerInfo:
    """A registered worker as the coordinator sees it: its slots and how many of each pool are free, when it was
    last heard from, and whether it is still taken for alive (``hop.coordinator.workers``)."""

    identity: bytes
    name: str
    host: str
    pid: int
    map_slots: int
    reduce_slots: int
    free_map: int
    free_reduce: int
    last_seen: float
    alive: bool = True
    rack: str = "rack-0"
    samples: str | None = None
    """The worker's metric sample stream (``monitoring.publisher``), for the cluster monitor."""
    heartbeat_late: bool = False
    stream_slots: int = 0
    """Slots kept for continuous jobs' tasks (see ``_pool``); ``free_stream`` of them are free."""
    free_stream: int = 0
    incarnation: int = 0
    """How many times this worker has registered: a ``reinit`` names the registration it ends."""
    host_label: str = ""
    """The host name its metric samples carry (``hop worker --host-label``); ``host`` is its network address."""
    ended_at: float | None = None
    """When this process saw the worker's process end (an embedded cluster's: ``ended_workers``); it is lost a
    moment later (``hop.coordinator.workers.ENDED_GRACE_SECONDS``) and takes no task meanwhile."""

    @property
    def takes_tasks(self) -> bool:
        """Alive and its process not seen ended: a task may be sent to it."""
        return self.alive and self.ended_at is None

    def where(self) -> dict[str, str]:
        """How a fault names this worker's host: ``host`` as its samples and Prometheus labels do (so faults join
        them), ``address`` as peers reach it."""
        return {"host": self.host_label or self.host, "address": self.host}

    def free(self, pool: str) -> int:
        """Free slots in ``pool`` ("map", "reduce" or "stream": the ``free_<pool>`` field)."""
        return int(getattr(self, f"free_{pool}"))

    def take(self, pool: str) -> None:
        setattr(self, f"free_{pool}", self.free(pool) - 1)

    def give_back(self, pool: str) -> None:
        setattr(self, f"free_{pool}", min(getattr(self, f"{pool}_slots"), self.free(pool) + 1))


class CoordinatorHost(Protocol):
    """The coordinator as each of its concerns sees the others (see the module's docstring)."""

    # State more than one concern uses (set up in ``Coordinator.__init__``; a concern declares its own alone) --------
    address: str
    """The address it listens at, as clients reach it (replies name it in the commands they suggest)."""
    workers: dict[str, WorkerInfo]
    jobs: dict[str, JobState]
    events: ClusterEvents
    succeeded_a_coordinator: bool
    chunk_strata: dict[str, list[str] | None]
    downstream: dict[str, str]
    pipe_readers: dict[tuple[str, int], tuple[int, str]]
    deferred_done: dict[tuple[str, int], list[dict[str, Any]]]

    # Messages (hop.coordinator.server) ---------------------------------------------------------------------------
    def _send(self, identity: bytes, msg_type: str, /, **fields: Any) -> None: ...

    def _broadcast(self, msg_type: str, /, **fields: Any) -> None: ...

    def _job_for(self, msg: dict[str, Any]) -> JobState | None: ...

    def _failing_job_on_error(self, job: JobState, doing: str) -> AbstractContextManager[None]: ...

    # Actions and outputs (hop.coordinator.actions) ---------------------------------------------------------------
    def _execute(self, job: JobState, actions: list[Action]) -> None: ...

    def _finish(self, job: JobState, action: FinishJob, stop_tasks: bool = False) -> None: ...

    def _output_removed(self, job: JobState) -> bool: ...

    def _remove_leftovers_of_ended(self, job: JobState | None) -> None: ...

    # Cluster samples (hop.coordinator.cluster_samples) ---------------------------------------------------------
    def _advancing_attempts(self, job: JobState, now: float) -> list[dict[str, Any]]: ...

    def _upstream_wait(self, job: JobState) -> tuple[bool, float | None]: ...

    # Jobs (hop.coordinator.jobs) ---------------------------------------------------------------------------------
    def _job_summary(self, job: JobState) -> dict[str, Any]: ...

    def _retire(self) -> None: ...

    def _unknown_job(self, identity: bytes, job_id: str) -> None: ...

    # Workers and task reports (hop.coordinator.workers, hop.coordinator.task_reports) -----------------------------
    def _free_slot(self, msg: dict[str, Any], kind: str) -> None: ...

    def _map_done(self, msg: dict[str, Any]) -> None: ...

    # Scheduling (hop.coordinator.scheduling) ---------------------------------------------------------------------
    def _send_run_task(
        self, job: JobState, kind: str, index: int, number: int, worker: WorkerInfo, pool: str
    ) -> None: ...

    # Pipelines (hop.coordinator.pipelines) -----------------------------------------------------------------------
    def _upstream_of(self, spec: JobSpec) -> JobState | None: ...

    def _upstream_committed(self, upstream: JobState, index: int, piped: dict[str, Any] | None) -> None: ...

    def _upstream_attempt_gone(self, upstream: JobState, index: int, reason: str) -> None: ...

    def _release_pipe_waits(self) -> None: ...

    def _preempt_downstream(self, job: JobState, kind: str) -> None: ...

    def _forget_links(self, job_id: str) -> None: ...

    # Snapshots (hop.coordinator.snapshots) -----------------------------------------------------------------------
    def _request_snapshot(self, job: JobState, snapshot: Snapshot) -> None: ...

    def _ask_reducers(
        self, job: JobState, snapshot: Snapshot, worker: bytes | None = None, index: int = -1
    ) -> None: ...

    def _answer_from_committed(self, job: JobState) -> None: ...

    def _answer_snapshots_with_final(self, job: JobState, index: int) -> None: ...

    # Continuous jobs (hop.coordinator.streams) -------------------------------------------------------------------
    def _set_pause(self, job_id: str, windows: WindowTracker, partition: int, pane: int | None) -> None: ...
