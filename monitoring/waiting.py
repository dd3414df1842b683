"""The monitoring query's tasks that wait for a slot, for ``hop monitor`` to say so.

The query runs, for as long as it runs, a task per watched worker's sample stream, one for the coordinator's stream
and a reducer: in stream slots first (``hop worker --stream-slots``), then map and reduce slots. On a cluster whose
slots are all taken, one of them waits, and the coordinator gives it the first slot that frees or comes, on any
worker: one that registered after the monitor started too (the task reads a network stream, whatever its host), and
that worker then runs it. Meanwhile the windows lack that stream (the scoreboard shows it missing: the coordinator's
means no stuck tasks, job records/s or failures), or without the reducer do not come at all; nothing said why.
:class:`SlotWaits` follows the job's task table and names each task that has waited ``WAIT_NOTICE_SECONDS``, and
where it runs once it gets a slot.
"""

from __future__ import annotations

from typing import Any, NamedTuple

WAIT_NOTICE_SECONDS = 3.0
"""How long a task may have no slot before it is named: the coordinator assigns every task it has a slot for at once,
so one without after that waits for a slot to free."""
WAITING = ("pending",)
"""Task table states of a task that waits for a slot: not started yet, or again after its attempt ended (its worker
stopped or was lost, or it failed; ``last_attempt`` says which)."""


class Notice(NamedTuple):
    text: str
    warning: bool
    """A task waits (a warning), or one that waited got its slot (not)."""


class SlotWaits:
    def __init__(self, source_names: list[str]) -> None:
        self.source_names = source_names
        """The query's sources in map order: worker names, then ``coordinator``."""
        self.waiting: dict[str, dict[str, Any]] = {}
        """Task name -> ``{"task", "stream", "since"}`` of the tasks named as waiting and still without a slot."""
        self._since: dict[str, float] = {}

    def update(self, tasks: list[dict[str, Any]], now: float) -> list[Notice]:
        """Fold in the job's task table (``Client.job(...)["tasks"]``) as of ``now`` (seconds, any clock); returns
        what to say: each task that has now waited ``WAIT_NOTICE_SECONDS``, and each of those that got a slot."""
        said: list[Notice] = []
        for task in tasks:
            name = f"{task['kind']}-{int(task['index']):05d}"
            if task["state"] in WAITING:
                since = self._since.setdefault(name, now)
                if now - since >= WAIT_NOTICE_SECONDS and name not in self.waiting:
                    stream = self.stream_of(task)
                    self.waiting[name] = {"task": name, "stream": stream, "since": since}
                    text = (
                        f"the monitoring query's task for {stream} ({name}) has had no slot for {now - since:.0f} s: "
                        f"every slot of the cluster is taken. Until one frees or a worker registers, {_lacking(stream)}"
                    )
                    said.append(Notice(text, warning=True))
                continue
            self._since.pop(name, None)
            if self.waiting.pop(name, None) is not None and task["state"] == "running":
                worker = task["worker"]
                text = f"the monitoring query's task for {self.stream_of(task)} ({name}) runs, on worker {worker}"
                if worker not in self.source_names:
                    text += " (one the query does not watch: a task runs on any worker)"
                said.append(Notice(text, warning=False))
        return said

    def stream_of(self, task: dict[str, Any]) -> str:
        """What ``task`` of the query reads: ``coordinator's stream``, ``WORKER's samples``, or ``the windows``."""
        if task["kind"] != "map":
            return "the windows"
        index = int(task["index"])
        source = self.source_names[index] if index < len(self.source_names) else f"source {index}"
        return "the coordinator's stream" if source == "coordinator" else f"{source}'s samples"

    def listed(self) -> list[dict[str, Any]]:
        """The waiting tasks named so far, for the dashboard."""
        return [dict(entry) for entry in self.waiting.values()]


def _lacking(stream: str) -> str:
    if stream == "the windows":
        return "no window comes (the query's reducer makes them)"
    if stream == "the coordinator's stream":
        return "its windows lack that stream (missing on the scoreboard): no stuck task, nor job records/s or failures"
    return "its windows lack that stream (missing on the scoreboard)"
