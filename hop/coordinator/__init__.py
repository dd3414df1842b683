"""The coordinator process (the JobTracker): accepts jobs, assigns tasks to worker slots, relays commits.

It binds one ROUTER socket; workers and clients connect DEALER sockets (messages in ``hop.protocol``). Per job the
bookkeeping lives in :class:`hop.scheduler.JobState`; this package only moves messages, carries out the state
machine's actions (broadcasts, output renames, the job report) and watches heartbeats.

Run as ``hop coordinator [--bind tcp://HOST:PORT]``; it prints its address on the first line of stdout.

:class:`Coordinator` (``server``: the socket loop and message dispatch) is made of one mixin per concern, each in a
module of its own over the state and entry points that ``host.CoordinatorHost`` declares:

- ``workers``: registration, heartbeats, slots given back, a worker's loss;
- ``jobs``: submission, status, the job queries, retiring jobs that ended;
- ``task_reports``: what task attempts report (started, progress, done, failed);
- ``actions``: the state machine's actions carried out, output commits and a job's end;
- ``pipelines``: job-to-job pipes (``hop.pipe``);
- ``snapshots``: online jobs' snapshots (``hop.online``);
- ``streams``: continuous jobs (``hop.stream``);
- ``scheduling``: pending tasks given slots, tail splits;
- ``cluster_samples``: the cluster monitor's samples;
- ``cli``: ``hop coordinator`` and :func:`run`.
"""

from hop.coordinator.cli import main, run
from hop.coordinator.host import WorkerInfo
from hop.coordinator.jobs import (
    BLOCKING_SNAPSHOT_MAPS,
    JOB_ID_SHAPE,
    JOB_ID_TIME,
    KEEP_JOBS,
    RETIRED_IDS,
    _where_report_is,
    blocking_maps,
    submitted_before,
)
from hop.coordinator.pipelines import PREEMPT_SECONDS
from hop.coordinator.server import (
    FOLLOW_UP_SECONDS,
    JUST_ENDED_SECONDS,
    STOP_LINGER_MILLISECONDS,
    STOP_TELL_SECONDS,
    Coordinator,
)
from hop.coordinator.streams import SOURCE_SLOT_GRACE_SECONDS
from hop.coordinator.workers import HEARTBEAT_SECONDS, HEARTBEAT_TIMEOUT, PAUSE_SECONDS

__all__ = [
    "BLOCKING_SNAPSHOT_MAPS",
    "FOLLOW_UP_SECONDS",
    "HEARTBEAT_SECONDS",
    "HEARTBEAT_TIMEOUT",
    "JOB_ID_SHAPE",
    "JOB_ID_TIME",
    "JUST_ENDED_SECONDS",
    "KEEP_JOBS",
    "PAUSE_SECONDS",
    "PREEMPT_SECONDS",
    "RETIRED_IDS",
    "SOURCE_SLOT_GRACE_SECONDS",
    "STOP_LINGER_MILLISECONDS",
    "STOP_TELL_SECONDS",
    "Coordinator",
    "WorkerInfo",
    "_where_report_is",  # (named by the tests of retired jobs' answers)
    "blocking_maps",
    "main",
    "run",
    "submitted_before",
]
