"""The cluster monitor: an ordinary continuous MapReduce job over the metric samples of every worker (HOP's demo).

``hop monitor`` runs it with one source per worker (``zmq+sub:`` the worker's sample stream, ``monitoring.publisher``)
and one for the coordinator (jobs, workers, faults: ``monitoring.events``), in sliding windows of event time
(default 10 s range, 2 s slide). Per window it gives:

- ``["host", HOST, METRIC]``, ``["rack", RACK, METRIC]``, ``["cluster", "", METRIC]`` ->
  ``{"mean", "max", "p95", "n", "rack"?}`` for every host metric (CPU, load, memory, swap, disk, network, open files)
  and every engine metric (running tasks, spill queue, unsent spills, shuffle bytes, backpressure, heartbeat lag);
- ``["job", JOB_ID]`` -> the job's latest progress in the window, its records/s and failures (job perspective);
- ``["fault", ID]`` -> a fault the coordinator saw (task failure, missed heartbeats, lost worker);
- ``["alert", HOST, METRIC]`` -> HOP's alert rule for ``ALERT_METRICS``: a host whose 20 s moving average
  (``short_window``) is above the other hosts' 120 s moving average (``long_window``) by more than 2 standard
  deviations raises a *tentative* alert, if it is that far above the others' average over the same 20 s too (a rise
  every host shares, such as the machine-wide load of workers on one machine, is no host's anomaly); 10 tentative
  alerts in a row (``tentative_to_alert``, one per window) make an ``alert``. Its value: ``state``,
  ``tentative_count``, ``host_average`` and ``others_average`` over ``host_window_s`` and ``others_window_s``
  seconds, ``others_recent_average`` over ``host_window_s``, ``others_std``, ``threshold``, ``at`` (the newest
  sample's time).
- ``["stuck", JOB_ID, TASK, ATTEMPT]`` -> a running attempt of a batch job that has not advanced (no new progress
  report: no records read, no groups reduced) for ``stuck_after`` seconds or more, while its worker heartbeats
  (user code in an endless loop, blocked on I/O): its ``job_id``, ``name``, ``task``, ``attempt``, ``worker``,
  ``host``, ``records``, ``fraction``, ``stalled_s`` and ``stuck_after_s``, as of the window's newest coordinator
  sample. It goes with the first window whose newest coordinator sample shows the attempt advanced or no longer
  lists it (it ended): every coordinator sample goes to one key, ``("tasks",)``, so that a window's older samples of
  an attempt that ended do not keep it stuck for the window's whole range.
  The reducer keeps the last ``long_window`` seconds of samples per metric in memory to compute the moving averages
  (a restarted reducer rebuilds that history from new windows). ``hop monitor --alert-average/--alert-baseline/
  --alert-after/--alert-stuck`` run a subclass with other values (:func:`with_alert_rule`).

Which hosts reported in a window is the window's C2 scoreboard (sources x panes): a host that stops sending shows
as missing there, and its window is emitted on the latency bound.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from hop import Job

ALERT_METRICS = ("cpu_percent", "load1", "mem_percent")


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


class ClusterMonitor(Job):
    input_format = "jsonl"  # recorded samples replay as JSON lines; live ones arrive as msgpack maps
    time_field = "ts"
    short_window: ClassVar[float] = 20.0
    long_window: ClassVar[float] = 120.0
    deviations: ClassVar[float] = 2.0
    tentative_to_alert: ClassVar[int] = 10
    stuck_after: ClassVar[float] = 120.0
    """Seconds a running attempt may go without advancing before it is stuck (maps report every 0.5 s while they
    read, reduces while they reduce; a single record or key group that takes longer is the user's to explain)."""
    min_deviation: ClassVar[dict[str, float]] = {"cpu_percent": 5.0, "load1": 0.25, "mem_percent": 2.0}
    """A floor under the others' standard deviation, so idle hosts (all near 0) do not alert on noise (memory: a host
    alerts from 4% of the machine's memory above the others, 1 GB of 24 GB)."""

    @classmethod
    def alert_rule(cls) -> dict[str, Any]:
        """The alert rule this class runs, as the dashboard describes it."""
        return {
            "metrics": list(ALERT_METRICS),
            "host_window_s": cls.short_window,
            "others_window_s": cls.long_window,
            "deviations": cls.deviations,
            "windows_in_a_row": cls.tentative_to_alert,
            "stuck_after_s": cls.stuck_after,
        }

    def setup(self) -> None:
        self._history: dict[str, deque[tuple[float, str, float]]] = {}
        self._seen: dict[tuple[str, str], float] = {}
        self._tentative: dict[tuple[str, str], int] = {}

    def map(self, ts: float, sample: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        if sample.get("kind") == "worker":
            host, rack = sample["host"], sample["rack"]
            metrics = {**sample["host_metrics"], **sample["engine"]}
            for name, value in metrics.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                yield ("host", host, name), (value, rack)
                yield ("rack", rack, name), (value, rack)
                yield ("cluster", "", name), (value, rack)
                if name in ALERT_METRICS:
                    yield ("alert", name), (ts, host, value)
        elif sample.get("kind") == "coordinator":
            for job in sample.get("jobs", []):
                yield ("job", job["job_id"]), (ts, job)
            for fault in sample.get("faults", []):
                yield ("fault", fault["id"]), fault
            yield ("tasks",), (ts, sample.get("tasks", []))  # (an empty list too: it says none is running)

    def reduce(self, key: tuple[Any, ...], values: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        kind = key[0]
        if kind in ("host", "rack", "cluster"):
            pairs = list(values)
            numbers = [float(value) for value, _ in pairs]
            summary = {
                "mean": sum(numbers) / len(numbers),
                "max": max(numbers),
                "p95": _p95(numbers),
                "n": len(numbers),
            }
            if kind == "host":
                summary["rack"] = pairs[0][1]
            yield key, summary
        elif kind == "job":
            ordered = sorted(values, key=lambda pair: pair[0])
            (first_ts, first), (last_ts, last) = ordered[0], ordered[-1]
            rate = (last["input_records"] - first["input_records"]) / (last_ts - first_ts) if last_ts > first_ts else 0
            yield key, {**last, "records_per_s": max(0.0, rate)}
        elif kind == "fault":
            yield key, next(iter(values))
        elif kind == "alert":
            yield from self._alerts(key[1], values)
        elif kind == "tasks":
            _, tasks = max(values, key=lambda pair: pair[0])  # the running attempts as of the newest sample
            for task in tasks:
                if task["stalled_s"] >= self.stuck_after:
                    stuck = ("stuck", task["job_id"], task["task"], task["attempt"])
                    yield stuck, {**task, "stuck_after_s": self.stuck_after}

    def _alerts(self, metric: str, values: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
        """HOP's rule over this metric's samples of the last ``long_window`` seconds (kept across windows)."""
        history = self._history.setdefault(metric, deque())
        for ts, host, value in sorted(values):
            if ts > self._seen.get((metric, host), float("-inf")):
                history.append((ts, host, float(value)))
                self._seen[(metric, host)] = ts
        if not history:
            return
        now = max(ts for ts, _, _ in history)
        # The last long_window seconds, (now - long_window, now]: at one sample a second, long_window samples.
        while history and history[0][0] <= now - self.long_window:
            history.popleft()
        hosts = sorted({host for _, host, _ in history})
        for host in hosts:
            recent = [v for ts, h, v in history if h == host and ts > now - self.short_window]
            others = [v for _, h, v in history if h != host]
            others_recent = [v for ts, h, v in history if h != host and ts > now - self.short_window]
            if not recent or not others_recent or len(others) < 2:  # (no peer reporting now: nothing to compare)
                continue
            host_average = sum(recent) / len(recent)
            others_average = sum(others) / len(others)
            others_recent_average = sum(others_recent) / len(others_recent)
            spread = math.sqrt(sum((v - others_average) ** 2 for v in others) / (len(others) - 1))
            margin = self.deviations * max(spread, self.min_deviation.get(metric, 0.0))
            threshold = others_average + margin
            # HOP's rule, and above the others as they are now: a rise every host shares (a machine-wide metric such
            # as load1, identical on workers of one machine; the load of a lost worker's tasks restarting) lifts
            # every host's short average over the others' long one, and is no host's anomaly.
            tentative = host_average > threshold and host_average > others_recent_average + margin
            count = self._tentative.get((metric, host), 0) + 1 if tentative else 0
            self._tentative[(metric, host)] = count
            if not tentative:
                continue
            yield (
                ("alert", host, metric),
                {
                    "state": "alert" if count >= self.tentative_to_alert else "tentative",
                    "tentative_count": count,
                    "host_average": host_average,
                    "host_window_s": self.short_window,
                    "others_average": others_average,
                    "others_window_s": self.long_window,
                    "others_recent_average": others_recent_average,
                    "others_std": spread,
                    "threshold": threshold,
                    "at": now,
                },
            )


def with_alert_rule(
    job: type[ClusterMonitor],
    short_window: float | None = None,
    long_window: float | None = None,
    tentative_to_alert: int | None = None,
    stuck_after: float | None = None,
) -> type[ClusterMonitor]:
    """``job`` with the alert rule's values that are given (None keeps ``job``'s): a subclass of the same name and
    module, so it is shipped by value as ``job`` is and reported under the same name; ``job`` itself when nothing
    changes. Raises ValueError for a rule that cannot hold."""
    given = {
        "short_window": short_window,
        "long_window": long_window,
        "tentative_to_alert": tentative_to_alert,
        "stuck_after": stuck_after,
    }
    rule = {name: getattr(job, name) if value is None else value for name, value in given.items()}
    if not 0 < rule["short_window"] <= rule["long_window"]:
        raise ValueError(
            f"the alert rule's host average ({rule['short_window']:g} s, --alert-average) must be positive and no "
            f"longer than the others' baseline ({rule['long_window']:g} s, --alert-baseline)"
        )
    if rule["tentative_to_alert"] < 1:
        raise ValueError(f"an alert needs at least 1 tentative alert in a row, got {rule['tentative_to_alert']}")
    if not rule["stuck_after"] > 0:
        raise ValueError(f"a task is stuck after a positive time without progress (--alert-stuck), got {stuck_after}")
    if all(getattr(job, name) == value for name, value in rule.items()):
        return job
    namespace = {"__module__": job.__module__, "__qualname__": job.__qualname__, "__doc__": job.__doc__, **rule}
    return type(job.__name__, (job,), namespace)
