"""What the cluster monitor's dashboard shows, built from the monitoring query's windows, with no I/O.

:class:`MonitorState` takes each window of ``jobs/cluster_monitor.py`` as the coordinator reports it
(``Client.windows``: bounds, reason, C2 scoreboard and rows ``[key_json, value_json]``) and keeps:

- the latest window as a roll-up tree: ``cluster`` metrics, ``racks`` (metrics and their hosts), ``hosts`` (rack
  and metrics), each metric ``{"mean", "max", "p95", "n"}``;
- a time series per (level, name, metric) of the last ``keep`` windows, for charts;
- the job perspective (per job: progress, records/s, snapshots, failures), from the query's ``job`` rows and the
  coordinator's job list as the caller polls it (:meth:`MonitorState.set_cluster_jobs`): a job no window has yet
  (before the first window, or while the query's coordinator source has no slot) is listed all the same, without
  records/s and failures, and a listed job's state and progress are the coordinator's latest;
- alerts (the query's tentative alerts and alerts, latest state per host and metric; ``alert_log`` has every
  state change for ``OUT/_alerts.jsonl``) and faults (task failures, missed heartbeats, lost workers), newest last;
- stuck tasks (``stuck``: the query's ``["stuck", JOB_ID, TASK, ATTEMPT]`` rows of the latest window the coordinator
  reported in; ``alert_log`` gets ``metric: "stuck_task"`` entries as one starts and clears);
- ``fault_counts``: faults seen so far per kind (every one, unlike ``faults``, which keeps the last 200);
- the scoreboard of the latest window with each source named (``names``: worker names, then ``coordinator``) and
  its host label (``hosts``: ``host_labels[name]``, the name itself for a worker of unknown label and for the
  coordinator), so a host that stopped reporting is visible;
- ``missing_hosts``: the host labels (as ``hosts`` and ``racks`` name them) of the workers whose scoreboard row
  has no data (every pane ``M``, ``L`` or ``E``: :func:`silent`), sorted and once each, and ``missing_workers``:
  those workers, ``[{"worker", "host"}]`` in scoreboard order (several workers may share a host label).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

JOB_MEMORY_SECONDS = 300.0
"""How long a job no window mentions stays in the job perspective."""
COORDINATOR = "coordinator"
"""The source name of the coordinator's stream (not a host)."""


def silent(row: str) -> bool:
    """Whether a source's scoreboard row has none of its records: every pane missing (``M``), lost (``L``) or sealed
    empty (``E``). Sources here send a sample a second, so an empty pane is one they were not heard in: a live
    source's map that runs again after a gap (its worker left, it waited for a slot) seals the panes it missed as
    ``E``. A shed pane (``S``) had records, and one cut by the stop (``C``, the last windows of a stopped monitor) may
    have: neither is silence."""
    return set(row) <= {"M", "L", "E"}


class MonitorState:
    def __init__(self, source_names: list[str], keep: int = 300, host_labels: dict[str, str] | None = None) -> None:
        self.source_names = source_names
        self.host_labels: dict[str, str] = dict(host_labels or {})
        """Worker name -> host label (the coordinator's ``host_label``); the caller may fill it in later."""
        self.keep = keep
        self.latest: dict[str, Any] | None = None
        self.series: dict[tuple[str, str, str], deque[dict[str, float]]] = {}
        self.jobs: dict[str, dict[str, Any]] = {}
        """Job id -> the job's latest ``job`` row of the query (the coordinator's summary, records/s, failures)."""
        self.cluster_jobs: dict[str, dict[str, Any]] = {}
        """Job id -> the coordinator's summary of a job running or ended in the last ``JOB_MEMORY_SECONDS``, with its
        ``elapsed``, as of the latest :meth:`set_cluster_jobs`."""
        self.alerts: dict[tuple[str, str], dict[str, Any]] = {}
        self.alert_log: list[dict[str, Any]] = []
        """Alert state changes not yet written out (the caller drains it)."""
        self.faults: deque[dict[str, Any]] = deque(maxlen=200)
        self.fault_log: list[dict[str, Any]] = []
        """Faults not yet written out (the caller drains it)."""
        self._fault_ids: set[Any] = set()
        self.faults_since: float | None = None
        """Faults before this time (seconds since the epoch, the coordinator's clock: the query's submission) are
        left out: the coordinator keeps its last faults, from long before the monitor too, and a coordinator sample
        carries those of the second before it. None: every fault is kept."""
        self.fault_counts: dict[str, int] = {}
        self.stuck: dict[tuple[str, str, int], dict[str, Any]] = {}
        self.windows_seen = 0

    def add_window(self, window: dict[str, Any]) -> None:
        """Fold one window of the monitoring query into the state."""
        self.windows_seen += 1
        cluster: dict[str, Any] = {}
        racks: dict[str, dict[str, Any]] = {}
        hosts: dict[str, dict[str, Any]] = {}
        end = float(window["end"])
        alerted: set[tuple[str, str]] = set()
        stuck: dict[tuple[str, str, int], dict[str, Any]] = {}
        for key_text, value_text in window.get("rows", []):
            key, value = json.loads(key_text), json.loads(value_text)
            kind = key[0]
            if kind in ("host", "rack", "cluster"):
                _, name, metric = key
                stats = {k: value[k] for k in ("mean", "max", "p95", "n")}
                if kind == "cluster":
                    cluster[metric] = stats
                elif kind == "rack":
                    racks.setdefault(name, {"metrics": {}, "hosts": []})["metrics"][metric] = stats
                else:
                    entry = hosts.setdefault(name, {"rack": value.get("rack"), "metrics": {}})
                    entry["metrics"][metric] = stats
                series = self.series.setdefault((kind, name, metric), deque(maxlen=self.keep))
                series.append({"t": end, **{k: stats[k] for k in ("mean", "max", "p95")}})
            elif kind == "job":
                self.jobs[key[1]] = {**value, "window_end": end}
            elif kind == "fault":
                self._add_fault(value)
            elif kind == "alert":
                _, host, metric = key
                alerted.add((host, metric))
                previous = self.alerts.get((host, metric))
                changed = previous is None or previous["state"] != value["state"]
                since = end if changed or previous is None else previous["since"]
                entry = {"host": host, "metric": metric, **value, "window_end": end, "since": since}
                if changed:
                    self.alert_log.append({"ts": end, **entry})
                self.alerts[(host, metric)] = entry
            elif kind == "stuck":
                stuck[(key[1], key[2], key[3])] = value
        for host_metric in [hm for hm in self.alerts if hm not in alerted]:
            ended = self.alerts.pop(host_metric)
            self.alert_log.append({"ts": end, **ended, "state": "cleared"})
        if self._coordinator_reported(window):  # (a window without its samples says nothing of the tasks)
            self._update_stuck(stuck, end)
        for job_id in [j for j, job in self.jobs.items() if job["window_end"] < end - JOB_MEMORY_SECONDS]:
            del self.jobs[job_id]  # ended long ago: the job perspective shows current work
        for name, entry in hosts.items():
            rack = entry.get("rack")
            if rack is not None:
                racks.setdefault(rack, {"metrics": {}, "hosts": []})["hosts"].append(name)
        for rack in racks.values():
            rack["hosts"].sort()
        board = dict(window.get("scoreboard", {}))
        board["names"] = self.source_names[: board.get("sources", len(self.source_names))]
        board["hosts"] = [self.host_of(name) for name in board["names"]]
        missing = [
            {"worker": name, "host": self.host_of(name)}
            for name, row in zip(board["names"], board.get("grid", []), strict=False)
            if row and silent(row) and name != COORDINATOR
        ]
        self.latest = {
            "label": window["label"],
            "start": window["start"],
            "end": end,
            "reason": window["reason"],
            "fidelity": window["fidelity"],
            "emitted_at": window.get("emitted_at"),
            "cluster": cluster,
            "racks": racks,
            "hosts": hosts,
            "scoreboard": board,
            "missing_hosts": sorted({entry["host"] for entry in missing}),
            "missing_workers": missing,
        }

    def _coordinator_reported(self, window: dict[str, Any]) -> bool:
        """Whether the coordinator's samples are in ``window`` (its scoreboard row has data; True without one)."""
        if COORDINATOR not in self.source_names:
            return True
        grid = window.get("scoreboard", {}).get("grid") or []
        index = self.source_names.index(COORDINATOR)
        return index >= len(grid) or not grid[index] or not silent(grid[index])

    def _update_stuck(self, stuck: dict[tuple[str, str, int], dict[str, Any]], end: float) -> None:
        """The stuck tasks are those of the latest window: log the ones that start and the ones that clear."""
        for key, value in stuck.items():
            previous = self.stuck.get(key)
            entry = {**value, "metric": "stuck_task", "state": "alert", "window_end": end}
            entry["since"] = previous["since"] if previous is not None else end
            if previous is None:
                self.alert_log.append({"ts": end, **entry})
            self.stuck[key] = entry
        for key in [key for key in self.stuck if key not in stuck]:
            self.alert_log.append({"ts": end, **self.stuck.pop(key), "state": "cleared"})

    def host_of(self, source: str) -> str:
        """The host label of the worker named ``source`` (its name when unknown, and for the coordinator)."""
        return self.host_labels.get(source, source)

    def add_faults(self, faults: list[dict[str, Any]]) -> bool:
        """Faults the coordinator kept (``Client.cluster``): those its stream carried while the monitor's source
        for it was restarting would be missing otherwise. Returns whether any was new."""
        added = [self._add_fault(fault) for fault in sorted(faults, key=lambda f: f.get("ts", 0))]
        return any(added)  # every fault is added: no short-circuit

    def _add_fault(self, fault: dict[str, Any]) -> bool:
        """Keep a fault once, however many times (window rows, the coordinator's list) it arrives."""
        if fault.get("id") in self._fault_ids:
            return False
        if self.faults_since is not None and float(fault.get("ts") or 0) < self.faults_since:
            return False  # no fault of this monitor's
        self._fault_ids.add(fault.get("id"))
        kind = str(fault.get("kind", "unknown"))
        self.fault_counts[kind] = self.fault_counts.get(kind, 0) + 1
        self.faults.append(fault)
        self.fault_log.append(fault)
        return True

    def set_cluster_jobs(self, jobs: list[dict[str, Any]], now: float) -> bool:
        """The coordinator's jobs (``Client.jobs()``) as polled at ``now`` (seconds since the epoch). The query's
        windows list a job only once its coordinator source runs and a window with its samples is out: the dashboard
        said "No job seen yet" meanwhile, the monitoring job itself running. Returns whether a job came, went or
        changed state (progress alone comes with the next window)."""
        listed = {
            job["job_id"]: {**job, "elapsed": (job.get("finished_at") or now) - float(job.get("submitted_at") or now)}
            for job in jobs
            if job.get("state") == "running" or (job.get("finished_at") or 0) > now - JOB_MEMORY_SECONDS
        }
        states = {job_id: job.get("state") for job_id, job in listed.items()}
        changed = states != {job_id: job.get("state") for job_id, job in self.cluster_jobs.items()}
        self.cluster_jobs = listed
        return changed

    def job_list(self) -> list[dict[str, Any]]:
        """The job perspective: every job of the windows' ``job`` rows or of the coordinator's latest list, the
        coordinator's fields over the window's (fresher), records/s and failures from the windows."""
        jobs = {job_id: dict(job) for job_id, job in self.jobs.items()}
        for job_id, listed in self.cluster_jobs.items():
            jobs[job_id] = {**jobs.get(job_id, {}), **listed}
        return sorted(jobs.values(), key=lambda job: job.get("submitted_at", 0))

    def snapshot(self) -> dict[str, Any]:
        """The dashboard's whole state as JSON-ready data."""
        return {
            "latest": self.latest,
            "jobs": self.job_list(),
            "alerts": sorted(self.alerts.values(), key=lambda a: (a["host"], a["metric"])),
            "faults": list(self.faults),
            "fault_counts": dict(self.fault_counts),
            "stuck_tasks": sorted(self.stuck.values(), key=lambda t: (t["job_id"], t["task"], t["attempt"])),
            "windows_seen": self.windows_seen,
            "sources": self.source_names,
            "host_labels": dict(self.host_labels),
        }

    def series_of(self, level: str, name: str, metric: str) -> list[dict[str, float]]:
        return list(self.series.get((level, name, metric), ()))

    def take_alert_log(self) -> list[dict[str, Any]]:
        log, self.alert_log = self.alert_log, []
        return log

    def take_fault_log(self) -> list[dict[str, Any]]:
        log, self.fault_log = self.fault_log, []
        return log
