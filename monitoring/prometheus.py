"""The monitor's ``/metrics`` page: Prometheus text exposition of the latest samples, windows and alerts.

``render(samples, windows, alerts, *, jobs, fault_counts, stuck_tasks, missing_hosts, workers) -> (body,
content_type)`` builds a fresh ``CollectorRegistry`` per call (nothing is kept between calls) and returns
``prometheus_client.generate_latest`` of it with ``CONTENT_TYPE_LATEST``. Every family is a gauge but the two
``_total`` counters.

A worker that stopped publishing (dead, cut off) keeps its latest sample in the monitor, but not its gauges: once
that sample is older than ``STALE_SECONDS`` (workers publish every second) only ``hop_worker_up 0`` and
``hop_sample_age_seconds`` remain of it, so a scrape never reports a dead host's last values as current, and after
``FORGET_SECONDS`` those go too (Prometheus then marks its series stale, as for a vanished target). A sample
without ``ts`` counts as fresh (its age is unknown).

Input (what the monitor keeps):

- ``samples``: the latest raw sample per worker, ``{worker: {"ts", "host", "rack", "worker", "host_metrics": {...},
  "engine": {...}}}`` (the ``monitoring.publisher`` message; a missing ``worker`` falls back to the dict key, a
  missing ``host``/``rack`` to ``""``);
- ``windows``: the latest window rows of the monitoring query, ``{"level": "host"|"rack"|"cluster", "name",
  "metric", "mean", "max", "p95"}`` (other fields are ignored);
- ``alerts``: ``{"host", "metric", "state": "tentative"|"alert", "since": unix time}``;
- ``jobs``: the job perspective (``MonitorState.job_list()``): ``{"job_id", "name", "state", "map_fraction",
  "reduce_fraction", "input_records", "failures"}``, only ``state == "running"`` ones exposed;
- ``fault_counts``: faults the monitor has seen per kind (``MonitorState.fault_counts``);
- ``stuck_tasks``: ``{"job_id", "name", "task", "attempt", "worker", "host", "stalled_s"}`` (the stuck-task alert);
- ``missing_hosts``: the host labels missing from the latest window's scoreboard;
- ``workers``: the coordinator's workers (``Client.workers()``: ``name``, ``host_label``, ``alive``,
  ``last_seen``).

Output:

=============================================================  ==================================================
``hop_host_<metric>{host,rack,worker}``                        every numeric host metric of a sample (in base
                                                               units: see below)
``hop_host_cpu_core_percent{host,rack,worker,core}``           ``cpu_per_core``, one series per core (``core`` =
                                                               its index); other lists are skipped
``hop_engine_<metric>{host,rack,worker}``                      every numeric engine metric of a sample
``hop_sample_age_seconds{host,rack,worker}``                   ``now - ts`` of the sample (negative under clock
                                                               skew between the worker and the monitor)
``hop_worker_up{host,rack,worker}``                            1 while the worker's samples are fresh, 0 once
                                                               stale (until forgotten)
``hop_window_metric{level,name,metric,stat}``                  ``stat`` = ``mean``, ``max``, ``p95``
``hop_alert{host,metric,state}``                               1 per alert
``hop_alert_since_timestamp_seconds{host,metric,state}``       the alert's ``since``
``hop_job_map_progress_ratio{job_id,name}``                    a running job's maps done, 0-1 (``map_fraction``)
``hop_job_reduce_progress_ratio{job_id,name}``                 its reduces done, 0-1
``hop_job_input_records{job_id,name}``                         input records its maps have read (a retried map
                                                               counts from its new attempt: not a counter)
``hop_job_failed_attempts_total{job_id,name}``                 counter: its attempts that failed or were lost
``hop_faults_total{kind}``                                     counter: faults the monitor saw since it started
                                                               (``task_failed``, ``heartbeat_missed``,
                                                               ``worker_lost``, ...)
``hop_task_stuck{job_id,name,task,attempt,worker,host}``       1 per running attempt in the stuck-task alert
``hop_task_stalled_seconds{job_id,name,task,attempt,worker,    seconds since that attempt last advanced
host}``
``hop_host_missing{host}``                                     1 per host with no data in the latest window
``hop_worker_alive{worker,host}``                              the coordinator's view: 1 live, 0 declared lost
``hop_worker_heartbeat_age_seconds{worker,host}``              seconds since the coordinator heard the worker
=============================================================  ==================================================

Values that are not real numbers (``None``, strings, dicts; booleans count as 0/1) are skipped, so a partial sample
renders what it has. ``<metric>`` is sanitized into a valid Prometheus name by :func:`sanitize_name` (characters outside
``[A-Za-z0-9_]`` become ``_``, runs of ``_`` collapse, leading/trailing ``_`` go, ``""`` becomes ``unnamed``), in
Prometheus's base units (:func:`exposed_name`: ``heartbeat_lag_ms`` is ``hop_engine_heartbeat_lag_seconds``, in seconds;
``_bytes_s`` rates end in ``_bytes_per_second``); label values are free text and kept as they are (``generate_latest``
escapes them). When two metrics sanitize to the same family, the series merge into it: the same label values keep the
last value, and a series whose label names differ from the family's (a host metric named ``cpu_core_percent`` against
``hop_host_cpu_core_percent``) is dropped. ``hop_sample_age_seconds``, ``hop_worker_up``, ``hop_host_cpu_core_percent``,
``hop_window_metric``, ``hop_alert`` and the job, fault, stuck-task, missing-host and worker families are always
declared, even empty.
"""

from __future__ import annotations

import numbers
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

WORKER_LABELS = ("host", "rack", "worker")
WINDOW_LABELS = ("level", "name", "metric", "stat")
ALERT_LABELS = ("host", "metric", "state")
JOB_LABELS = ("job_id", "name")
TASK_LABELS = ("job_id", "name", "task", "attempt", "worker", "host")
WINDOW_STATS = ("mean", "max", "p95")
STALE_SECONDS = 10.0
"""A worker whose latest sample is older than this is down: its metric gauges are dropped, ``hop_worker_up`` is 0
(ten missed samples; the coordinator declares a worker lost after 5 s without a heartbeat)."""
FORGET_SECONDS = 300.0
"""A worker whose latest sample is older than this has no series at all any more."""
SAMPLE_AGE_HELP = "Seconds since the worker's latest sample."
UP_HELP = "1 while the worker's samples arrive, 0 once its latest is older than the stale bound (then forgotten)."

HELP: dict[str, str] = {
    "cpu_percent": "CPU busy, percent (process scope: the worker's process tree over all cores).",
    "cpu_core_percent": "CPU busy per core, percent.",
    "load1": "Load average over 1 minute.",
    "load5": "Load average over 5 minutes.",
    "mem_percent": "Memory used, percent of total.",
    "mem_used_bytes": "Memory used, bytes (process scope: the worker's process tree RSS).",
    "swap_percent": "Swap used, percent.",
    "disk_read_bytes_s": "Disk read, bytes per second.",
    "disk_write_bytes_s": "Disk write, bytes per second.",
    "disk_busy_percent": "Busiest disk's busy time, percent.",
    "net_sent_bytes_s": "Network sent, bytes per second.",
    "net_recv_bytes_s": "Network received, bytes per second.",
    "open_files": "Open file descriptors.",
    "running_maps": "Map tasks running on the worker.",
    "running_reduces": "Reduce tasks running on the worker.",
    "spill_queue": "Spills queued for the shuffle on the worker.",
    "unsent_spills": "Spills not yet sent to every reducer.",
    "shuffle_out_bytes_s": "Shuffle bytes pushed per second.",
    "blocked_reducers": "Reducers the worker's pushes are blocked on.",
    "backpressure_seconds": "Seconds the worker was blocked by flow control in the last sample interval.",
    "heartbeat_lag_ms": "Lag of the worker's heartbeat, seconds.",
}

_INVALID = re.compile(r"[^A-Za-z0-9_]+")
_UNDERSCORES = re.compile(r"__+")


def sanitize_name(name: object) -> str:
    """A metric name part that is valid after a ``hop_*_`` prefix: ``"disk read/s"`` -> ``"disk_read_s"``."""
    cleaned = _UNDERSCORES.sub("_", _INVALID.sub("_", str(name))).strip("_")
    return cleaned or "unnamed"


UNIT_SUFFIXES: tuple[tuple[str, str, float], ...] = (("_ms", "_seconds", 0.001), ("_bytes_s", "_bytes_per_second", 1.0))
"""Sample metric name endings that are not Prometheus's base units or unit words, what they are exposed as, and the
factor to it (the samples and the monitoring query keep their own names and units)."""


def exposed_name(metric: object) -> tuple[str, float]:
    """The name part a sample metric is exposed under and the factor its value is multiplied by:
    ``"heartbeat_lag_ms"`` -> ``("heartbeat_lag_seconds", 0.001)``, ``"net_sent_bytes_s"`` ->
    ``("net_sent_bytes_per_second", 1.0)``, others as :func:`sanitize_name` makes them, with 1.0."""
    name = sanitize_name(metric)
    for suffix, unit, factor in UNIT_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)] + unit, factor
    return name, 1.0


def _number(value: object) -> float | None:
    if isinstance(value, numbers.Real):
        return float(value)
    return None


class _Gauges(Collector):
    """Gauge families (and counters: a name ending in ``_total``) built up by name, collected once by
    ``generate_latest``."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, tuple[str, ...], dict[tuple[str, ...], float]]] = {}

    def declare(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self._families.setdefault(name, (documentation, labels, {}))

    def set(self, name: str, documentation: str, labels: Mapping[str, str], value: float) -> None:
        self.declare(name, documentation, tuple(labels))
        _, names, series = self._families[name]
        if names == tuple(labels):
            series[tuple(labels.values())] = value

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        for name, (documentation, labels, series) in self._families.items():
            family: GaugeMetricFamily | CounterMetricFamily
            if name.endswith("_total"):  # (the family is named without it; its sample gets it back)
                family = CounterMetricFamily(name[: -len("_total")], documentation, labels=list(labels))
            else:
                family = GaugeMetricFamily(name, documentation, labels=list(labels))
            for values, value in series.items():
                family.add_metric(list(values), value)
            yield family


def _worker_series(
    gauges: _Gauges, samples: Mapping[str, Mapping[str, Any]], now: float, stale: float, forget: float
) -> None:
    for key, sample in samples.items():
        labels = {
            "host": str(sample.get("host") or ""),
            "rack": str(sample.get("rack") or ""),
            "worker": str(sample.get("worker") or key),
        }
        ts = _number(sample.get("ts"))
        age = None if ts is None else now - ts
        if age is not None and age > forget:
            continue
        if age is not None:
            gauges.set("hop_sample_age_seconds", SAMPLE_AGE_HELP, labels, age)
        up = age is None or age <= stale
        gauges.set("hop_worker_up", UP_HELP, labels, 1.0 if up else 0.0)
        if not up:
            continue  # its last values are not the host's current ones
        for metric, value in (sample.get("host_metrics") or {}).items():
            if metric == "cpu_per_core" and isinstance(value, list | tuple):
                for core, share in enumerate(value):
                    number = _number(share)
                    if number is not None:
                        gauges.set(
                            "hop_host_cpu_core_percent", HELP["cpu_core_percent"], {**labels, "core": str(core)}, number
                        )
                continue
            number = _number(value)
            if number is not None:
                name, factor = exposed_name(metric)
                documentation = HELP.get(sanitize_name(metric), f"Host metric {metric}.")
                gauges.set(f"hop_host_{name}", documentation, labels, number * factor)
        for metric, value in (sample.get("engine") or {}).items():
            number = _number(value)
            if number is not None:
                name, factor = exposed_name(metric)
                documentation = HELP.get(sanitize_name(metric), f"Engine metric {metric}.")
                gauges.set(f"hop_engine_{name}", documentation, labels, number * factor)


def _window_series(gauges: _Gauges, windows: Iterable[Mapping[str, Any]]) -> None:
    documentation = "Sliding-window statistic of a metric per host, rack or the cluster (the monitoring query)."
    gauges.declare("hop_window_metric", documentation, WINDOW_LABELS)
    for row in windows:
        for stat in WINDOW_STATS:
            number = _number(row.get(stat))
            if number is not None:
                labels = {
                    "level": str(row.get("level", "")),
                    "name": str(row.get("name", "")),
                    "metric": str(row.get("metric", "")),
                    "stat": stat,
                }
                gauges.set("hop_window_metric", documentation, labels, number)


def _alert_series(gauges: _Gauges, alerts: Iterable[Mapping[str, Any]]) -> None:
    documentation = "1 for every host metric in a tentative or confirmed alert."
    since_documentation = "When the alert started, seconds since the epoch."
    gauges.declare("hop_alert", documentation, ALERT_LABELS)
    for alert in alerts:
        labels = {name: str(alert.get(name, "")) for name in ALERT_LABELS}
        gauges.set("hop_alert", documentation, labels, 1.0)
        since = _number(alert.get("since"))
        if since is not None:
            gauges.set("hop_alert_since_timestamp_seconds", since_documentation, labels, since)


JOB_FAMILIES = (
    ("hop_job_map_progress_ratio", "map_fraction", "A running job's map progress: the share of its maps done, 0-1."),
    ("hop_job_reduce_progress_ratio", "reduce_fraction", "A running job's reduce progress, 0-1."),
    ("hop_job_input_records", "input_records", "Input records a running job's maps have read."),
    ("hop_job_failed_attempts_total", "failures", "A running job's task attempts that failed or were lost."),
)
FAULTS_HELP = "Faults the monitor has seen since it started, per kind (task failures, missed heartbeats, lost workers)."
STUCK_HELP = "1 for every running task attempt that has not advanced for the stuck-task alert's time."
STALLED_HELP = "Seconds since a stuck task attempt last advanced (read a record, reduced a group)."
MISSING_HELP = "1 for every host with no data in the monitoring query's latest window."
ALIVE_HELP = "The coordinator's view of a worker: 1 while it heartbeats, 0 once declared lost."
HEARTBEAT_AGE_HELP = "Seconds since the coordinator last heard from the worker."


def _job_series(gauges: _Gauges, jobs: Iterable[Mapping[str, Any]]) -> None:
    for name, _, documentation in JOB_FAMILIES:
        gauges.declare(name, documentation, JOB_LABELS)
    for job in jobs:
        if job.get("state") != "running":
            continue
        labels = {"job_id": str(job.get("job_id", "")), "name": str(job.get("name") or "")}
        for name, field, documentation in JOB_FAMILIES:
            number = _number(job.get(field))
            if number is not None:
                gauges.set(name, documentation, labels, number)


def _fault_series(gauges: _Gauges, fault_counts: Mapping[str, int]) -> None:
    gauges.declare("hop_faults_total", FAULTS_HELP, ("kind",))
    for kind, count in sorted(fault_counts.items()):
        gauges.set("hop_faults_total", FAULTS_HELP, {"kind": str(kind)}, float(count))


def _stuck_series(gauges: _Gauges, stuck_tasks: Iterable[Mapping[str, Any]]) -> None:
    gauges.declare("hop_task_stuck", STUCK_HELP, TASK_LABELS)
    gauges.declare("hop_task_stalled_seconds", STALLED_HELP, TASK_LABELS)
    for task in stuck_tasks:
        labels = {name: str(task.get(name, "")) for name in TASK_LABELS}
        gauges.set("hop_task_stuck", STUCK_HELP, labels, 1.0)
        stalled = _number(task.get("stalled_s"))
        if stalled is not None:
            gauges.set("hop_task_stalled_seconds", STALLED_HELP, labels, stalled)


def _missing_series(
    gauges: _Gauges, missing_hosts: Iterable[str], workers: Iterable[Mapping[str, Any]], now: float
) -> None:
    gauges.declare("hop_host_missing", MISSING_HELP, ("host",))
    gauges.declare("hop_worker_alive", ALIVE_HELP, ("worker", "host"))
    gauges.declare("hop_worker_heartbeat_age_seconds", HEARTBEAT_AGE_HELP, ("worker", "host"))
    for host in missing_hosts:
        gauges.set("hop_host_missing", MISSING_HELP, {"host": str(host)}, 1.0)
    for worker in workers:
        labels = {"worker": str(worker.get("name", "")), "host": str(worker.get("host_label") or worker.get("name"))}
        gauges.set("hop_worker_alive", ALIVE_HELP, labels, 1.0 if worker.get("alive") else 0.0)
        last_seen = _number(worker.get("last_seen"))
        if last_seen is not None:
            gauges.set("hop_worker_heartbeat_age_seconds", HEARTBEAT_AGE_HELP, labels, max(0.0, now - last_seen))


def render(
    samples: Mapping[str, Mapping[str, Any]],
    windows: Iterable[Mapping[str, Any]],
    alerts: Iterable[Mapping[str, Any]],
    *,
    jobs: Iterable[Mapping[str, Any]] = (),
    fault_counts: Mapping[str, int] | None = None,
    stuck_tasks: Iterable[Mapping[str, Any]] = (),
    missing_hosts: Iterable[str] = (),
    workers: Iterable[Mapping[str, Any]] = (),
    now: float | None = None,
    stale_seconds: float = STALE_SECONDS,
    forget_seconds: float = FORGET_SECONDS,
) -> tuple[bytes, str]:
    """The ``/metrics`` body and its content type (see the module docstring); ``now`` defaults to ``time.time()``."""
    gauges = _Gauges()
    gauges.declare("hop_sample_age_seconds", SAMPLE_AGE_HELP, WORKER_LABELS)
    gauges.declare("hop_worker_up", UP_HELP, WORKER_LABELS)
    gauges.declare("hop_host_cpu_core_percent", HELP["cpu_core_percent"], (*WORKER_LABELS, "core"))
    now = time.time() if now is None else now
    _worker_series(gauges, samples, now, stale_seconds, forget_seconds)
    _window_series(gauges, windows)
    _alert_series(gauges, alerts)
    _job_series(gauges, jobs)
    _fault_series(gauges, fault_counts or {})
    _stuck_series(gauges, stuck_tasks)
    _missing_series(gauges, missing_hosts, workers, now)
    registry = CollectorRegistry()
    registry.register(gauges)
    return generate_latest(registry), CONTENT_TYPE_LATEST
