"""The monitor's ``/metrics`` page: Prometheus text exposition of the latest samples, windows and alerts.

``render(samples, windows, alerts) -> (body, content_type)`` builds a fresh ``CollectorRegistry`` per call (nothing
is kept between calls) and returns ``prometheus_client.generate_latest`` of it with ``CONTENT_TYPE_LATEST``. Every
family is a gauge.

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
- ``alerts``: ``{"host", "metric", "state": "tentative"|"alert", "since": unix time}``.

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
=============================================================  ==================================================

Values that are not real numbers (``None``, strings, dicts; booleans count as 0/1) are skipped, so a partial sample
renders what it has. ``<metric>`` is sanitized into a valid Prometheus name by :func:`sanitize_name` (characters outside
``[A-Za-z0-9_]`` become ``_``, runs of ``_`` collapse, leading/trailing ``_`` go, ``""`` becomes ``unnamed``), in
Prometheus's base units (:func:`exposed_name`: ``heartbeat_lag_ms`` is ``hop_engine_heartbeat_lag_seconds``, in seconds;
``_bytes_s`` rates end in ``_bytes_per_second``); label values are free text and kept as they are (``generate_latest``
escapes them). When two metrics sanitize to the same family, the series merge into it: the same label values keep the
last value, and a series whose label names differ from the family's (a host metric named ``cpu_core_percent`` against
``hop_host_cpu_core_percent``) is dropped. ``hop_sample_age_seconds``, ``hop_worker_up``, ``hop_host_cpu_core_percent``,
``hop_window_metric`` and ``hop_alert`` are always declared, even empty.
"""

from __future__ import annotations

import numbers
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

WORKER_LABELS = ("host", "rack", "worker")
WINDOW_LABELS = ("level", "name", "metric", "stat")
ALERT_LABELS = ("host", "metric", "state")
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
    """Gauge families built up by name, collected once by ``generate_latest``."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, tuple[str, ...], dict[tuple[str, ...], float]]] = {}

    def declare(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        self._families.setdefault(name, (documentation, labels, {}))

    def set(self, name: str, documentation: str, labels: Mapping[str, str], value: float) -> None:
        self.declare(name, documentation, tuple(labels))
        _, names, series = self._families[name]
        if names == tuple(labels):
            series[tuple(labels.values())] = value

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, (documentation, labels, series) in self._families.items():
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


def render(
    samples: Mapping[str, Mapping[str, Any]],
    windows: Iterable[Mapping[str, Any]],
    alerts: Iterable[Mapping[str, Any]],
    *,
    now: float | None = None,
    stale_seconds: float = STALE_SECONDS,
    forget_seconds: float = FORGET_SECONDS,
) -> tuple[bytes, str]:
    """The ``/metrics`` body and its content type (see the module docstring); ``now`` defaults to ``time.time()``."""
    gauges = _Gauges()
    gauges.declare("hop_sample_age_seconds", SAMPLE_AGE_HELP, WORKER_LABELS)
    gauges.declare("hop_worker_up", UP_HELP, WORKER_LABELS)
    gauges.declare("hop_host_cpu_core_percent", HELP["cpu_core_percent"], (*WORKER_LABELS, "core"))
    _worker_series(gauges, samples, time.time() if now is None else now, stale_seconds, forget_seconds)
    _window_series(gauges, windows)
    _alert_series(gauges, alerts)
    registry = CollectorRegistry()
    registry.register(gauges)
    return generate_latest(registry), CONTENT_TYPE_LATEST
