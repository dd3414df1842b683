"""The monitor's feed: follows the monitoring query's windows and the workers' raw samples for the dashboard.

A :class:`MonitorFeed` thread asks the coordinator for its workers' host labels once, then polls it for new windows of
the monitoring job, folds them into a :class:`~monitoring.state.MonitorState`, appends alert state changes to
``OUT/_alerts.jsonl`` and faults to ``OUT/_faults.jsonl``, and keeps the latest raw sample of every worker (a SUB
socket on every sample stream) and the coordinator's list of workers (alive, last heard from) for the Prometheus
exposition, and its list of jobs, so the dashboard lists a running job before a window of the query has it. Its
faults are those from the query's submission on (``MonitorState.faults_since``, the job's ``submitted_at``).
Readers (the web view) take ``snapshot()`` or wait on ``changed``.

The query's sources are the workers there were when it was submitted: a worker that registers later (a new name, not
one restarted under its old name) is not in its windows. The feed says so on stderr, once per such worker, and lists
them in ``snapshot()["unwatched_workers"]`` (a new state, so the dashboard shows them at once): a monitor started
again watches them.

With ``keep_windows`` N, the feed removes the folders of all but the newest N complete windows of ``OUT/windows/``
(the monitoring query writes one every slide, some 20 KB each, for as long as it runs) after each poll that brought
windows and once more when it stops; the dashboard's charts, alerts and faults live in memory and the logs.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import zmq

from hop.client import Client, CoordinatorUnavailable, JobRejected
from hop.stream.windows import label_order
from monitoring.state import COORDINATOR, MonitorState
from monitoring.waiting import SlotWaits

TASKS_EVERY_SECONDS = 1.0
"""How often the feed reads the monitoring job's task table (for its tasks waiting for a slot)."""


class MonitorFeed(threading.Thread):
    def __init__(
        self,
        coordinator: str,
        job_id: str,
        output: str,
        source_names: list[str],
        sample_endpoints: list[str],
        keep_windows: int | None = None,
        alert_rule: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(name="hop-monitor-feed", daemon=True)
        self.coordinator, self.job_id, self.output = coordinator, job_id, Path(output)
        self.keep_windows = keep_windows
        self.alert_rule = alert_rule
        """The monitoring job's alert rule (``ClusterMonitor.alert_rule()``), for the dashboard to state it."""
        self.state = MonitorState(source_names)
        self.samples: dict[str, dict[str, Any]] = {}
        self.workers: list[dict[str, Any]] = []
        """The coordinator's workers as of the latest poll (``Client.workers()``: alive, last heard from)."""
        self.sample_endpoints = sample_endpoints
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.version = 0
        self.unwatched: list[str] = []
        """Live workers with a sample stream that the query has no source for (registered after it started)."""
        self.waits = SlotWaits(source_names)
        """The query's tasks waiting for a slot (``monitoring.waiting``)."""
        self._halt = threading.Event()

    def run(self) -> None:
        client = Client(self.coordinator, timeout=10)
        context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        sub = context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        for endpoint in self.sample_endpoints:
            sub.connect(endpoint)
        after = 0
        labelled = False
        tasks_read = float("-inf")
        try:
            while not self._halt.is_set():
                if time.monotonic() - tasks_read >= TASKS_EVERY_SECONDS:
                    tasks_read = time.monotonic()
                    self._note_waiting(client)
                while sub.poll(0):
                    sample = msgpack.unpackb(sub.recv(), raw=False)
                    with self.lock:
                        self.samples[sample.get("worker", "?")] = sample
                try:
                    workers = client.workers()
                    with self.lock:
                        self.workers = workers
                    self._note_unwatched(workers)
                    if not labelled:  # before the first window: the dashboard names hosts by label throughout
                        labels = {w["name"]: str(w.get("host_label") or w["name"]) for w in workers}
                        with self.lock:
                            self.state.host_labels.update(labels)
                        labelled = True
                    windows = client.windows(self.job_id, after=after, all_rows=True)  # every host's rows
                    faults = client.cluster()["faults"]
                    jobs: list[dict[str, Any]] | None = client.jobs()
                except (CoordinatorUnavailable, JobRejected):
                    windows, faults, jobs = [], [], None  # (the jobs listed last stay)
                if windows:
                    after = max(w["seq"] for w in windows)
                    self._remove_old_windows()
                with self.changed:
                    if jobs is not None and self.state.faults_since is None:
                        self.state.faults_since = next(
                            (job.get("submitted_at") for job in jobs if job["job_id"] == self.job_id), None
                        )
                    for window in windows:
                        self.state.add_window(window)
                    jobs_changed = jobs is not None and self.state.set_cluster_jobs(jobs, time.time())
                    if self.state.faults_since is None:
                        faults = []  # (not yet known which are this monitor's)
                    if self.state.add_faults(faults) or windows or jobs_changed:
                        self._write_logs()
                        self.version += 1
                        self.changed.notify_all()
                self._halt.wait(0.3)
        finally:
            sub.close(linger=0)
            client.close()

    def _note_unwatched(self, workers: list[dict[str, Any]]) -> None:
        """Say once of each live worker publishing samples that the query does not watch (one that registered after
        it started): it was in the dashboard's worker list, never in its hosts, alerts or ``missing_hosts``."""
        watched = self.state.source_names
        for worker in workers:
            name = worker["name"]
            if worker.get("alive") and worker.get("samples") and name not in watched and name not in self.unwatched:
                with self.changed:  # a new state: pushed to the dashboard now, not with the next window
                    self.unwatched.append(name)
                    self.version += 1
                    self.changed.notify_all()
                print(
                    f"hop: warning: worker {name} registered after the monitor started; the monitoring query watches "
                    f"the workers it started with ({', '.join(n for n in watched if n != COORDINATOR)}), not {name}: "
                    "start the monitor again to watch it",
                    file=sys.stderr,
                    flush=True,
                )

    def _note_waiting(self, client: Client) -> None:
        """Say of each task of the query that has no slot (all taken), and of each of those once it runs (on any
        worker, one registered after the monitor started too): its windows lack that task's stream meanwhile."""
        try:
            job = client.job(self.job_id)
        except (CoordinatorUnavailable, JobRejected):
            return
        if job.get("state") != "running":
            return
        with self.changed:
            said = self.waits.update(job.get("tasks") or [], time.monotonic())
            if said:  # a new state: the dashboard names the waiting tasks now
                self.version += 1
                self.changed.notify_all()
        for notice in said:
            print(f"hop: {'warning: ' if notice.warning else ''}{notice.text}", file=sys.stderr, flush=True)

    def _remove_old_windows(self) -> None:
        """Remove the folders of all but the newest ``keep_windows`` complete windows."""
        if self.keep_windows is None:
            return
        folder = self.output / "windows"
        try:
            complete = sorted(
                (entry.name for entry in folder.iterdir() if (entry / "_window.json").exists()), key=label_order
            )
        except FileNotFoundError:
            return
        for label in complete[: max(0, len(complete) - self.keep_windows)]:
            shutil.rmtree(folder / label, ignore_errors=True)

    def _write_logs(self) -> None:
        alerts = self.state.take_alert_log()
        if alerts:
            with open(self.output / "_alerts.jsonl", "a", encoding="utf-8") as file:
                file.writelines(json.dumps(alert) + "\n" for alert in alerts)
        faults = self.state.take_fault_log()
        if faults:
            with open(self.output / "_faults.jsonl", "a", encoding="utf-8") as file:
                file.writelines(json.dumps(fault) + "\n" for fault in faults)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            data = self.state.snapshot()
            data["version"] = self.version
            data["alert_rule"] = self.alert_rule
            data["samples"] = {name: dict(sample) for name, sample in self.samples.items()}
            data["workers"] = [dict(worker) for worker in self.workers]
            data["unwatched_workers"] = list(self.unwatched)
            data["waiting_tasks"] = [
                {key: value for key, value in entry.items() if key != "since"} for entry in self.waits.listed()
            ]
            data["now"] = time.time()
            return data

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following; called once the query has ended, so its last windows are pruned too."""
        self._halt.set()
        self.join(timeout)
        self._remove_old_windows()
