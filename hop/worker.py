"""The worker process (the TaskTracker): task slots, the spill directory and the shuffle server.

A worker connects a DEALER socket to the coordinator, registers its slots, and heartbeats every second. It starts one
long-lived task process per slot (``hop.taskproc``), connected to a ROUTER the worker binds on loopback. It relays task
events to the coordinator, registers the spills its maps write with its :class:`shuffle.pusher.SpillPusher`, and
forwards commit notices to the reduce tasks it runs. When a task process dies, the worker reports the attempt as
failed (retryable) and starts a new process for the slot.

Run as ``hop worker --coordinator tcp://HOST:PORT [--map-slots N] [--reduce-slots N] [--host ADDRESS]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket as socket_module
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import zmq

from hop import taskproc
from hop.forking import ForkedProcess, fork_call, wait_or_kill
from hop.interpreter import module_command, module_environment
from hop.lifetime import embedded, ignore_stop_signals, orphaned, stop_signals_taken
from hop.protocol import close_socket, connect_soon, message, unpack
from hop.spilldirs import make_spill_dir, remove_abandoned
from hop.wording import counted
from hop.worker_options import add_arguments
from monitoring.publisher import SamplePublisher
from shuffle.pusher import SpillPusher

if TYPE_CHECKING:
    from hop.coordinator_link import CoordinatorLink

HEARTBEAT_SECONDS = 0.5
SLOT_START_TIMEOUT = 30.0
LAST_WORDS_SECONDS = 0.2
"""How long a dead task's last messages may take to reach the worker (other tasks' messages are relayed meanwhile)."""
UNANSWERED_REGISTRATION_SECONDS = 10.0
"""How long a standalone worker waits for its registration's answer before it says it has none (still trying)."""
REGISTRATION_RETRY_SECONDS = 2.0
"""How long a standalone worker's registration may go unanswered over a connection that is up before it is sent
again over a new connection (``_retry_ignored_registration``), then twice as long each time, up to
``UNANSWERED_REGISTRATION_SECONDS``."""
COORDINATOR_GONE_SECONDS = 5.0
"""How long a standalone worker's connection to its coordinator is down before it says so (still trying)."""
COORDINATOR_HEARTBEAT_TIMEOUT = 5.0
"""A coordinator's heartbeat timeout by default (``hop coordinator --heartbeat-timeout``), until its answer to the
registration says its own."""
LEAVE_ANSWER_SECONDS = 2.0
"""How long a standalone worker stopped on its own waits for the coordinator to take note (``Worker._leave``)."""
ENDED_JOBS_KEPT = 1000
"""How many ended jobs a worker remembers, to drop the spills their killed maps sent just before the end."""
TASKS_TAKEN_KEPT = 10000
"""How many of the latest attempts it was sent a worker remembers, to take each once (``Worker.tasks_taken``)."""
COORDINATOR_SEND_STEP_MS = 1000
"""How long one try to queue a message for an unreachable coordinator blocks (then the worker checks whether it
should stop, and tries again)."""
RELAYED = {
    "pipe_ready",
    "snapshot_done",
    "task_started",
    "task_progress",
    "task_status",
    "source_listening",
    "reducer_ready",
    "first_run",
    "map_checkpoint",
    "map_split",
    "map_done",
    "reduce_done",
    "task_failed",
    "window_done",
    "windows_skipped",
    "stream_checkpoint",
    "stream_pause",
}
FINISHING = {"map_done", "reduce_done", "task_failed"}
ABOUT_RUNNING_JOBS = {"maps_added", "map_committed", "map_failed", "map_lost", "reducer_at"}
"""Coordinator messages about a job's maps and reducers that this worker keeps (``notices``, the pusher's tables)
until the job's ``job_done``: for a job that ended here they are dropped (``Worker.on_coordinator``)."""


def _attempt_of(msg: dict[str, Any]) -> tuple[str, int, int]:
    """The (job, index, attempt) a task's finishing message is about."""
    return msg.get("job_id", ""), msg.get("index", -1), msg.get("attempt", -1)


@dataclass
class Slot:
    name: str
    kind: str
    process: subprocess.Popen[bytes] | ForkedProcess
    ready: bool = False
    task: tuple[str, str, int, int] | None = None
    """(job_id, kind, index, attempt) of the attempt it runs."""


def _slots_address(spill_dir: Path) -> str:
    """Where the worker's task processes connect: known before the worker binds it, so they can start first.

    On Linux an abstract socket (no file, gone with the process); elsewhere a socket file in the spill directory.
    """
    if sys.platform.startswith("linux"):
        return f"ipc://@hop-worker-{os.getpid()}-{spill_dir.name}"
    return f"ipc://{spill_dir}/slots"


def _remember(seen: dict[Any, None], key: Any, most: int) -> None:
    """Add ``key`` to ``seen`` (keys in insertion order), forgetting the oldest beyond ``most``."""
    seen[key] = None
    while len(seen) > most:
        del seen[next(iter(seen))]


def _ended_how(code: int) -> str:
    """How a task process that ended with returncode ``code`` while running a task ended, and what may have ended
    it: "exited with code -9" left the user to work out that a signal killed it, which, and that the kernel kills a
    process so when memory runs short. (The job's code failing an ordinary way, sys.exit() too, is reported by the
    task itself.)"""
    if code >= 0:
        return f"exited with code {code} (os._exit() in the job's code?)"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if -code == signal.SIGKILL:
        return f"was killed by {name}: by the kernel if memory ran short (see dmesg), or by a user"
    return f"was killed by {name}"


class Worker:
    def __init__(
        self,
        coordinator: str,
        map_slots: int,
        reduce_slots: int,
        host: str = "127.0.0.1",
        name: str | None = None,
        spill_root: str | None = None,
        rack: str = "rack-0",
        sample_interval: float = 1.0,
        sample_scope: str = "host",
        host_label: str | None = None,
        stream_slots: int = 0,
    ) -> None:
        """``stream_slots``: task processes kept for continuous jobs (a source map or a window reducer runs until
        the job is stopped; in slots of its own it never takes a batch job's map or reduce slot)."""
        self.name = name or f"{socket_module.gethostname()}-{os.getpid()}"
        self.named = name is not None
        """Whether ``--name`` named it: a worker named by its host and pid has no namesake to be kept out by."""
        self.host = host
        self.host_label = host_label or (self.name if sample_scope == "process" else socket_module.gethostname())
        """The host name the cluster monitor shows: its samples' ``host``, and the ``host`` of the coordinator's
        faults about this worker (``host`` above is the address peers reach it at)."""
        self.rack = rack
        abandoned = remove_abandoned(spill_root)
        if abandoned and not embedded():
            folders = "spill directory" if len(abandoned) == 1 else "spill directories"  # ("1 ... directories")
            print(f"hop worker: removed {len(abandoned):,} {folders} of workers that died", file=sys.stderr)
        self.spill_dir = make_spill_dir(spill_root)
        self.slots_address = _slots_address(self.spill_dir)
        self.slots: dict[str, Slot] = {}
        self.map_slots, self.reduce_slots, self.stream_slots = map_slots, reduce_slots, stream_slots
        # Task processes first: while this process has no ZeroMQ context and no thread yet, they can be forked
        # from it (hop.forking). They connect to the slots socket before it is bound; ZeroMQ retries until it is.
        fork = sys.flags.hash_randomization == 0  # a fork hashes keys as this process does
        for i in range(map_slots):
            self._start_slot(f"{self.name}/m{i}", "map", fork)
        for i in range(reduce_slots):
            self._start_slot(f"{self.name}/r{i}", "reduce", fork)
        for i in range(stream_slots):
            self._start_slot(f"{self.name}/s{i}", "stream", fork)
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
        self.coordinator = self.context.socket(zmq.DEALER)
        self.coordinator.setsockopt(zmq.IDENTITY, self.name.encode())
        self.coordinator.setsockopt(zmq.LINGER, 1000)
        self.coordinator.setsockopt(zmq.SNDTIMEO, COORDINATOR_SEND_STEP_MS)  # see _send_to_coordinator
        self.link: CoordinatorLink | None = None
        """Whether the connection to the coordinator is up (``_check_link``); an embedded worker ends with it."""
        if not embedded():
            # (imported here: its ZeroMQ monitor imports asyncio, ~13 ms that an embedded cluster's launcher, which
            # imports this module before every `hop run` can start its job, spent for nothing)
            from hop.coordinator_link import CoordinatorLink

            self.link = CoordinatorLink(self.coordinator)
        self.said_link_down = False
        self.lost_after = COORDINATOR_HEARTBEAT_TIMEOUT
        """The coordinator's heartbeat timeout (its ``registered`` answer says it): with the connection down that
        long, the coordinator, if it still runs, has taken this worker for lost and runs its tasks again elsewhere."""
        self.dropped_for_link_down = False
        """Whether this outage of the connection reached ``lost_after`` (and ``_drop_work_for_link_down`` ran)."""
        self.register_when_up = False
        """Whether this worker ended work for an outage of the connection and registers afresh once it is up."""
        connect_soon(self.coordinator, coordinator)
        self.coordinator_address = coordinator
        self.unanswered_since: float | None = None
        """When the registration awaiting its answer went out (None: answered); ``_check_registered`` warns once."""
        self.warned_unanswered = False
        self.registration_retry = REGISTRATION_RETRY_SECONDS
        """How long the registration may now go unanswered over a connection that is up before it is sent again."""
        self.slots_socket = self.context.socket(zmq.ROUTER)
        # A restarted task process reconnects under its slot's name: let it take the name over at once (without
        # handover, ZeroMQ keeps routing to the dead connection and the new process never receives a task).
        self.slots_socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.slots_socket.bind(self.slots_address)
        self.pusher = SpillPusher(self.context)
        self.last_spill_seq: dict[tuple[str, int, int], int] = {}
        """Per (job, map, attempt), the seq of its latest spill this worker took in: a map's spill status says it, so
        the map counts spills it registered after that one (still on their way here) as unsent too."""
        self.waiting: list[tuple[dict[str, Any], bytes]] = []
        self.notices: dict[str, list[bytes]] = {}
        """Per running job, the commit/failure notices received so far (replayed to reduce tasks that waited)."""
        self.ended_jobs: dict[str, None] = {}
        """The latest jobs that ended here (insertion order, at most ``ENDED_JOBS_KEPT``): a spill of one of them
        still on its way when its files were deleted is dropped (it counts for nothing now)."""
        self.tasks_taken: dict[tuple[str, str, int, int], None] = {}
        """(job, kind, index, attempt) of the latest attempts this registration was sent (at most
        ``TASKS_TAKEN_KEPT``): a coordinator answering a registration sent again sends the attempts it assigned here
        and has not heard start again (``hop.coordinator.workers``), and one that came already is not run twice."""
        self.running = True
        self.shut_down = False
        """The coordinator ended this worker (``hop shutdown``): it needs no word that the worker leaves."""
        self.publisher: SamplePublisher | None = None
        if sample_interval > 0:
            # The cluster monitor's input: this host's and this worker's metrics (monitoring.publisher).
            self.publisher = SamplePublisher(
                self.context, host, self.name, self.host_label, rack, sample_interval, sample_scope
            )
        self.incarnation = 0
        """Registrations so far (``_register``)."""
        self._pushed_before = 0
        self._blocked_seconds = 0.0
        self._last_heartbeat: float | None = None
        self._heartbeat_lag = 0.0

    # Slots ---------------------------------------------------------------------------------------------------
    def _start_slot(self, name: str, kind: str, fork: bool = False) -> None:
        """Start the task process of a slot: forked from this process (only before it has a ZeroMQ context or a
        thread, see ``__init__``), else a fresh interpreter (restarts, while the worker runs)."""
        arguments = [self.slots_address, name, str(self.spill_dir), str(os.getpid())]
        process: subprocess.Popen[bytes] | ForkedProcess
        if fork:
            process = fork_call(taskproc.main, arguments)
        else:
            # Without the current directory on its path (hop.interpreter): a json.py there failed every restart.
            env = module_environment(dict(os.environ, PYTHONHASHSEED="0"))
            process = subprocess.Popen([*module_command("hop.taskproc"), *arguments], env=env)
        self.slots[name] = Slot(name, kind, process)

    def _wait_for_slots(self) -> None:
        deadline = time.monotonic() + SLOT_START_TIMEOUT
        while self.running and not all(slot.ready for slot in self.slots.values()):  # (a stop: no more waiting)
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {self.name}: task processes did not start within {SLOT_START_TIMEOUT}s")
            if self.slots_socket.poll(100):
                identity, frame = self.slots_socket.recv_multipart()
                msg = unpack(frame)
                if msg["type"] == "hello":
                    self.slots[identity.decode()].ready = True

    def _check_slots(self) -> None:
        for name, slot in list(self.slots.items()):
            code = slot.process.poll()
            if code is None:
                continue
            slot.ready = False  # (a task waiting for a slot must not be handed to this dead one as its last words end)
            if slot.task is not None:
                # What the task sent just before it died (a checkpoint, a spill) must reach the coordinator before
                # its failure does, or the retry starts over: relay whatever is still on the way.
                deadline = time.monotonic() + LAST_WORDS_SECONDS
                while slot.task is not None and time.monotonic() < deadline and self.slots_socket.poll(10):
                    self._drain(self.slots_socket, lambda identity, frame: self.on_slot(identity, frame))
            if slot.task is not None:
                job_id, kind, index, attempt = slot.task
                self._to_coordinator(
                    "task_failed",
                    job_id=job_id,
                    kind=kind,
                    index=index,
                    attempt=attempt,
                    error=f"{kind} task {index} attempt {attempt}: task process on worker {self.name} "
                    f"{_ended_how(code)}",
                    traceback=None,
                    record=None,
                    retryable=True,
                    at=time.time(),
                    pool=slot.kind,
                )
            if self.running:
                self._start_slot(name, slot.kind)

    def _dispatch(self) -> None:
        """Hand waiting tasks to ready, idle slots of their kind."""
        still_waiting = []
        for msg, frame in self.waiting:
            slot = self._free_slot(msg.get("pool", msg["kind"]))  # "stream": a continuous job's own slots
            if slot is None:
                still_waiting.append((msg, frame))
                continue
            slot.task = (msg["job"]["job_id"], msg["kind"], msg["index"], msg["attempt"])
            self._to_slot(slot, frame)
            if msg["kind"] == "reduce":
                # Commit and failure notices that arrived while the task waited for a slot were relayed to nobody:
                # replay the job's notices in order (applying them again is harmless).
                for notice in self.notices.get(msg["job"]["job_id"], []):
                    self._to_slot(slot, notice)
        self.waiting = still_waiting

    def _tell_waiting(self, job_id: str, kind: str, news: dict[str, Any]) -> None:
        """A stop (``stopping``), sources gone for good (``sources_gone``) or a new memory pause (``pause_pane``,
        None when lifted) of a continuous job, for its tasks of ``kind`` still waiting here for a slot: their
        ``run_task`` says so, and they start knowing it. Relayed to running tasks only, it was lost on them: a map
        assigned just before the stop ran for ever once it got its slot, a reducer waited for ever for the gone
        source, and a map ran past the paused pane while the reducer's memory grew."""
        for position, (msg, _) in enumerate(self.waiting):
            if msg["job"]["job_id"] != job_id or msg["kind"] != kind:
                continue
            told = dict(msg)
            if "sources_gone" in news:
                told["sources_gone"] = sorted({*msg.get("sources_gone", ()), *news["sources_gone"]})
            if news.get("stopping"):
                told["stopping"] = True
            if "pause_pane" in news:
                told["pause_pane"] = news["pause_pane"]
            self.waiting[position] = (told, message("run_task", **{k: v for k, v in told.items() if k != "type"}))

    def _point_waiting(self, task: list[Any], address: str) -> None:
        """A ``pipe_at`` (where the next job's map reading it listens) for a reduce attempt still waiting here for a
        slot: its ``run_task`` says so (``pipe_to``), and it streams there from its start. Relayed to running tasks
        only, it was lost on a retry that waited for the slot of the attempt that had just died: the retry streamed
        to no one, and that map read the committed file once it had ended."""
        for position, (msg, _) in enumerate(self.waiting):
            if [msg["job"]["job_id"], msg["kind"], msg["index"], msg["attempt"]] == list(task):
                told = {**msg, "pipe_to": address}
                self.waiting[position] = (told, message("run_task", **{k: v for k, v in told.items() if k != "type"}))

    def _ask_waiting(self, request: dict[str, Any], index: int) -> None:
        """A derived snapshot request (a pipeline's later job, ``source`` set) for the job's reduce tasks still
        waiting here for a slot (``index``: that one only, else all): their ``run_task`` lists it
        (``derived_snapshots``), and they start owing it. Relayed to running tasks only, it was lost on them; the
        notices replayed as such a task starts could tell it that every map had committed before it heard the
        request again from the coordinator, and the partition's final output answered it."""
        for position, (msg, _) in enumerate(self.waiting):
            if msg["job"]["job_id"] != request["job_id"] or msg["kind"] != "reduce" or index not in (-1, msg["index"]):
                continue
            owed = [entry for entry in msg.get("derived_snapshots") or () if entry["seq"] != request["seq"]]
            owed.append({key: request[key] for key in ("seq", "label", "source")})
            told = {**msg, "derived_snapshots": owed}
            self.waiting[position] = (told, message("run_task", **{k: v for k, v in told.items() if k != "type"}))

    def _free_slot(self, kind: str) -> Slot | None:
        for slot in self.slots.values():
            if slot.kind == kind and slot.ready and slot.task is None:
                return slot
        return None

    # Messages ------------------------------------------------------------------------------------------------
    def _to_coordinator(self, msg_type: str, /, **fields: Any) -> None:
        fields["worker"] = self.name
        self._send_to_coordinator(message(msg_type, **fields), droppable=msg_type == "heartbeat")

    def _send_to_coordinator(self, frame: bytes, droppable: bool = False) -> None:
        """Queue ``frame`` for the coordinator. With the coordinator gone, ZeroMQ queues up to the socket's high-water
        mark and then blocks: a heartbeat is dropped then (a late one means nothing), anything else waits, in
        bounded steps (the socket's send timeout), until it is taken or this worker is told to stop."""
        while True:
            try:
                self.coordinator.send(frame, zmq.NOBLOCK if droppable else 0)
                return
            except zmq.Again:
                if droppable or not self.running or orphaned():
                    return

    def _to_slot(self, slot: Slot, payload: bytes) -> None:
        self.slots_socket.send_multipart([slot.name.encode(), payload])

    def on_coordinator(self, frame: bytes) -> None:
        msg = unpack(frame)
        kind = msg["type"]
        if kind in ABOUT_RUNNING_JOBS and msg["job_id"] in self.ended_jobs:
            # After the job's end: the coordinator answers a map attempt's late map_done with map_failed (its
            # output counts for nothing). Its tasks are stopped and its spills deleted; taken in, it made the job's
            # notices and shuffle tables again, kept for as long as the worker ran (a few per hundred jobs).
            return
        if kind == "run_task":
            job = msg["job"]
            taken = (job["job_id"], msg["kind"], msg["index"], msg["attempt"])
            if taken in self.tasks_taken:
                return
            _remember(self.tasks_taken, taken, TASKS_TAKEN_KEPT)
            self.pusher.register_job(job["job_id"], job["mode"], job["num_reduces"])
            # A slot whose process is being restarted is not ready yet: the task waits for it here.
            self.waiting.append((msg, frame))
            self._dispatch()
        elif kind == "maps_added":  # tail splitting made a map: reducers wait for it too (replayed like commits)
            self.notices.setdefault(msg["job_id"], []).append(frame)
            for slot in self.slots.values():
                if slot.task is not None and slot.task[0] == msg["job_id"] and slot.task[1] == "reduce":
                    self._to_slot(slot, frame)
        elif kind in ("map_committed", "map_failed", "map_lost"):
            self.notices.setdefault(msg["job_id"], []).append(frame)
            if kind == "map_committed":
                self.pusher.commit(msg["job_id"], msg["index"], msg["attempt"], msg.get("segments", []))
            else:
                self.pusher.fail(msg["job_id"], msg["index"], msg["attempt"], msg.get("keep_below"))
            for slot in self.slots.values():
                if slot.task is not None and slot.task[0] == msg["job_id"] and slot.task[1] == "reduce":
                    self._to_slot(slot, frame)
        elif kind in ("pipe_at", "pipe_file", "pipe_release", "split_off"):
            for slot in self.slots.values():  # to one task (any attempt of it for pipe_at: the message names it)
                if slot.task is not None and list(slot.task) == msg["task"]:
                    self._to_slot(slot, frame)
            if kind == "pipe_at":
                self._point_waiting(msg["task"], msg["address"])
        elif kind == "snapshot":  # to every reducer of the job, or to one (``index``: a restarted one)
            index = msg.get("index", -1)
            for slot in self.slots.values():
                task = slot.task
                if task is not None and task[0] == msg["job_id"] and task[1] == "reduce" and index in (-1, task[2]):
                    self._to_slot(slot, frame)
            if msg.get("source"):
                self._ask_waiting(msg, index)
        elif kind in ("stream_stop", "stream_pause", "stream_source_gone"):
            # Continuous jobs: maps drain and end on stop and pause on a reducer's memory pressure; reducers stop
            # waiting for a source gone for good.
            wanted = "reduce" if kind == "stream_source_gone" else "map"
            for slot in self.slots.values():
                if slot.task is not None and slot.task[0] == msg["job_id"] and slot.task[1] == wanted:
                    self._to_slot(slot, frame)
            if kind == "stream_stop":
                self._tell_waiting(msg["job_id"], wanted, {"stopping": True})
            elif kind == "stream_source_gone":
                self._tell_waiting(msg["job_id"], wanted, {"sources_gone": [int(msg["index"])]})
            else:
                self._tell_waiting(msg["job_id"], wanted, {"pause_pane": msg.get("pane")})
        elif kind == "stream_checkpoint_seen":  # to the reduce attempt whose checkpoint it is
            for slot in self.slots.values():
                if slot.task == (msg["job_id"], "reduce", msg["index"], msg["attempt"]):
                    self._to_slot(slot, frame)
        elif kind == "stream_trim":
            self.pusher.trim(msg["job_id"], msg["index"], msg["attempt"], msg["seq"])
        elif kind == "kill_task":
            self._kill_task((msg["job_id"], msg["kind"], msg["index"], msg["attempt"]))
        elif kind == "reducer_at":
            self.pusher.set_reducer(msg["job_id"], msg["index"], msg["attempt"], msg["address"])
        elif kind == "job_done":
            self._ended(msg["job_id"])
            self.notices.pop(msg["job_id"], None)
            self.pusher.finish_job(msg["job_id"], self.spill_dir)
            for key in [key for key in self.last_spill_seq if key[0] == msg["job_id"]]:
                del self.last_spill_seq[key]
            if msg.get("failed") or msg.get("stop_tasks"):
                self._stop_job_tasks(msg["job_id"])
        elif kind == "registered":
            self.lost_after = float(msg.get("heartbeat_timeout", COORDINATOR_HEARTBEAT_TIMEOUT))
            self._registered()
            if msg.get("samples"):
                self._publish_at(msg["samples"])
        elif kind == "reinit":
            if msg.get("incarnation") == self.incarnation:  # else about a registration already replaced
                self._reinit(msg.get("why"))
        elif kind == "shutdown":
            if not embedded():  # a standalone worker: say why it ends
                print(f"hop worker {self.name}: the coordinator shut the cluster down", file=sys.stderr, flush=True)
            self.running, self.shut_down = False, True

    def _registered(self) -> None:
        """The coordinator took the registration: a standalone worker says so (its only sign of life)."""
        if self.unanswered_since is None:
            return
        self.unanswered_since = None
        if not embedded():
            slots = f"{self.map_slots} map, {self.reduce_slots} reduce, {self.stream_slots} stream slots"
            print(
                f"hop worker {self.name}: registered with the coordinator at {self.coordinator_address} ({slots})",
                file=sys.stderr,
                flush=True,
            )

    def _publish_at(self, endpoint: str) -> None:
        """The coordinator knew a predecessor of this worker (killed and restarted under its name): publish samples
        where it did, so that a monitor started before the restart still sees this worker, and say where."""
        if self.publisher is None or endpoint == self.publisher.endpoint:
            return
        if self.publisher.move_to(endpoint):
            self._to_coordinator("samples_at", samples=endpoint)
        elif not embedded():
            print(
                f"hop worker {self.name}: cannot publish samples at {endpoint}, where the worker it replaces did: a "
                f"hop monitor started before the restart will not see this worker (restart the monitor)",
                file=sys.stderr,
                flush=True,
            )

    def _check_registered(self) -> None:
        """Say once when a registration has gone unanswered for ``UNANSWERED_REGISTRATION_SECONDS``: no coordinator
        listens at the address, or a live worker under this name holds it (the coordinator's socket then drops this
        one's connection without a word), and the worker would otherwise wait in silence for ever."""
        sent = self.unanswered_since
        if sent is None or self.warned_unanswered or embedded():
            return
        if time.monotonic() - sent < UNANSWERED_REGISTRATION_SECONDS:
            return
        self.warned_unanswered = True  # said once (a late answer is said too)
        if self.link is not None:
            self.link.take_events()
        if self.link is not None and not self.link.ever_connected:
            # Nothing took a connection: no namesake can be the cause (a worker started before its coordinator was
            # told of one that keeps it out).
            why = "nothing has taken a connection there; still trying. Is the coordinator running, at that address?"
        else:
            namesake = (
                f" (A worker named {self.name} that is still connected keeps this one out: give each worker its own "
                "--name.)"
                if self.named
                else ""
            )
            why = f"still trying. Is the coordinator running there?{namesake}"
        print(
            f"hop worker {self.name}: no answer from a coordinator at {self.coordinator_address} within "
            f"{UNANSWERED_REGISTRATION_SECONDS:.0f} s; {why}",
            file=sys.stderr,
            flush=True,
        )

    def _retry_ignored_registration(self) -> None:
        """Send the registration again over a new connection once it went unanswered for ``registration_retry``
        over a connection that is up. A coordinator that was stopped while this worker's connection closed (its
        pings unanswered) and a new one opened finds, as it resumes, the old one still open now and then, and ZeroMQ
        then ignores the new one for good: a second connection under a name it holds (as it keeps out a live
        namesake). The new connection is taken once the old one is gone; a namesake still keeps it out."""
        if self.link is None or self.unanswered_since is None:
            return
        self.link.take_events()
        up = self.link.up_for()
        # (A registration sent before this connection came up waited for the link, not for an answer.)
        if up is None or min(up, time.monotonic() - self.unanswered_since) < self.registration_retry:
            return
        self.registration_retry = min(2 * self.registration_retry, UNANSWERED_REGISTRATION_SECONDS)
        self.link.reconnect(self.coordinator_address)
        self._send_registration()

    def _check_link(self) -> None:
        """Say once when the connection to the coordinator has been down for ``COORDINATOR_GONE_SECONDS`` (its
        process ended or stopped answering, or its host went down or is cut off: ``hop.coordinator_link``): a
        worker that went on heartbeating into nothing said nothing at all. Said again when it is up again, if it
        was said down; if this worker ended its work meanwhile (``_drop_work_for_link_down``), it registers afresh
        then, so that a coordinator that still counts on its tasks (one that was stopped, and does not count its
        own silence against workers) runs them again elsewhere rather than waiting for them for ever."""
        if self.link is None:
            return
        self.link.take_events()
        down = self.link.gone_for()
        at = f"the coordinator at {self.coordinator_address}"
        if down is None:
            register, self.register_when_up, self.dropped_for_link_down = self.register_when_up, False, False
            if self.said_link_down or register:
                self.said_link_down = False
                again = "; registering afresh (the work it held ended)" if register else ""
                print(f"hop worker {self.name}: connected to {at} again{again}", file=sys.stderr, flush=True)
            if register:
                self._register()
            return
        if down >= COORDINATOR_GONE_SECONDS and not self.said_link_down:
            self.said_link_down = True
            print(
                f"hop worker {self.name}: the connection to {at} closed {down:.0f} s ago (the coordinator ended or "
                "stopped answering, or its host is down or cut off); still trying. A coordinator started again there "
                "takes this worker afresh; Ctrl-C stops this worker",
                file=sys.stderr,
                flush=True,
            )
        if down >= self.lost_after and not self.dropped_for_link_down:
            self.dropped_for_link_down = True
            self.register_when_up = self._drop_work_for_link_down(down)

    def _drop_work_for_link_down(self, down: float) -> bool:
        """The connection has been down for the coordinator's heartbeat timeout: a coordinator that ended took its
        jobs with it, and one still running (cut off from this worker) has taken this worker for lost and runs its
        tasks again elsewhere. Either way what this worker runs counts for nothing: its tasks ran on, taking the
        host's cores, until a coordinator came back. They end, and the jobs' spills are dropped. (A coordinator
        that was stopped meanwhile learns it from the registration that follows: ``_check_link``.) Returns whether
        there was anything to drop."""
        tasks = self._tasks_held()
        jobs = self._jobs_held()
        if not tasks and not jobs:
            return False
        print(
            f"hop worker {self.name}: the connection to the coordinator at {self.coordinator_address} has been closed "
            f"for {down:.0f} s, its heartbeat timeout (the coordinator ended or stopped, or took this worker for lost "
            f"and runs its tasks elsewhere); ending its {counted(tasks, 'running task')} and dropping the spill files "
            f"of {counted(jobs, 'job')}",
            file=sys.stderr,
            flush=True,
        )
        self._drop_work()
        return True

    def _tell_unsent(self, job_id: str, map_index: int, attempt: int) -> None:
        """Tell a running map attempt how many of its spills are not yet pushed (its flow control reads this)."""
        for slot in self.slots.values():
            if slot.task == (job_id, "map", map_index, attempt):
                unsent = self.pusher.unsent(job_id, map_index, attempt)
                last_seq = self.last_spill_seq.get((job_id, map_index, attempt))
                status = {"job_id": job_id, "index": map_index, "attempt": attempt, "unsent": unsent}
                self._to_slot(slot, message("spill_status", **status, last_seq=last_seq))
                return

    def _kill_task(self, task: tuple[str, str, int, int]) -> None:
        """End ``task`` on the coordinator's request (it lost a speculative race, its job failed, it was restarted
        for its pipeline, or it passed ``--task-timeout`` without advancing): kill its process (``_check_slots``
        restarts the slot) or drop it from the waiting list, and report the slot free, since the coordinator
        expects no other report from a task it settled itself."""
        waiting = [(m, f) for m, f in self.waiting if (m["job"]["job_id"], m["kind"], m["index"], m["attempt"]) == task]
        if waiting:
            self.waiting = [entry for entry in self.waiting if entry not in waiting]
            self._to_coordinator("slot_free", job_id=task[0], kind=task[1], pool=waiting[0][0].get("pool", task[1]))
        for slot in self.slots.values():
            if slot.task == task:
                self._end_slot_process(slot)
                self._to_coordinator("slot_free", job_id=task[0], kind=task[1], pool=slot.kind)

    @staticmethod
    def _end_slot_process(slot: Slot) -> None:
        """Kill a slot's task process and forget its task; ``_check_slots`` restarts the slot."""
        slot.task = None
        slot.ready = False  # dead until _check_slots restarts it and the new process says hello
        if slot.process.poll() is None:
            slot.process.kill()
            try:
                slot.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # Stuck in the kernel (a hung disk or network file system): the slot stays down, and
                # ``_check_slots`` restarts it once the process is gone; the worker itself must go on.
                print(
                    f"hop worker: task process {slot.process.pid} of slot {slot.name} did not end within 10 s of "
                    "being killed; its slot stays down until it does",
                    file=sys.stderr,
                    flush=True,
                )

    def _register(self) -> None:
        """Offer this worker's slots to the coordinator (again after a ``reinit``: a new incarnation)."""
        self.incarnation += 1
        self.unanswered_since, self.warned_unanswered = time.monotonic(), False
        self.tasks_taken.clear()  # (a coordinator started again at the address numbers its jobs afresh)
        self.registration_retry = REGISTRATION_RETRY_SECONDS
        self._send_registration()

    def _send_registration(self) -> None:
        """Send this incarnation's registration."""
        self._to_coordinator(
            "register",
            host=self.host,
            host_label=self.host_label,
            pid=os.getpid(),
            map_slots=self.map_slots,
            reduce_slots=self.reduce_slots,
            stream_slots=self.stream_slots,
            rack=self.rack,
            samples=self.publisher.endpoint if self.publisher is not None else None,
            incarnation=self.incarnation,
        )

    def _reinit(self, why: str | None = None) -> None:
        """The coordinator declared this worker lost and has rescheduled all it ran (``why``: ``"lost"``), or does
        not know it (``"unknown"``: a coordinator started again at its address): end every task, forget every job
        and its spills, and register again as an empty worker. A standalone worker says why first: it logged only
        a second "registered", which told its reader neither that it had been lost nor what it dropped."""
        if not embedded():
            self._say_reinit(why)
        self._drop_work()
        self._register()

    def _tasks_held(self) -> int:
        """The tasks this worker runs, or holds until a slot is ready for them."""
        return sum(slot.task is not None for slot in self.slots.values()) + len(self.waiting)

    def _jobs_held(self) -> int:
        """The jobs whose spills or reduce stores this worker keeps (a folder each in its spill directory)."""
        return sum(entry.is_dir() for entry in self.spill_dir.iterdir())

    def _drop_work(self) -> None:
        """End every task and forget every job and its spills: nothing this worker runs counts any more."""
        for slot in self.slots.values():
            self._end_slot_process(slot)
        while self.slots_socket.poll(10):  # what the killed tasks sent last (spills, results): void now
            self.slots_socket.recv_multipart()
        self.waiting.clear()
        self.notices.clear()
        self.pusher.close()  # the jobs' connections and queued spills: their attempts count no more
        self.pusher = SpillPusher(self.context)
        self.last_spill_seq.clear()
        self._pushed_before = 0
        for entry in self.spill_dir.iterdir():
            if entry.is_dir():  # the jobs' spills and reduce stores (not the slots' socket file, off Linux)
                shutil.rmtree(entry, ignore_errors=True)
        self._check_slots()

    def _say_reinit(self, why: str | None) -> None:
        tasks = self._tasks_held()
        jobs = self._jobs_held()
        coordinator = f"the coordinator at {self.coordinator_address}"
        if why == "unknown":
            cause = f"{coordinator} does not know this worker (started again there: the jobs of the one before ended)"
        else:
            cause = (
                f"{coordinator} took this worker for lost (silent past its heartbeat timeout: stopped, starved or cut "
                "off) and runs its tasks again on other workers"
            )
        print(
            f"hop worker {self.name}: {cause}; ending its {counted(tasks, 'running task')}, dropping the spill files "
            f"of {counted(jobs, 'job')} and registering again",
            file=sys.stderr,
            flush=True,
        )

    def _ended(self, job_id: str) -> None:
        """Remember that ``job_id`` ended (bounded: the oldest is forgotten first)."""
        _remember(self.ended_jobs, job_id, ENDED_JOBS_KEPT)

    def _stop_job_tasks(self, job_id: str) -> None:
        """A failed job's tasks would wait forever for input: end them."""
        tasks = [slot.task for slot in self.slots.values() if slot.task is not None and slot.task[0] == job_id]
        tasks += [
            (m["job"]["job_id"], m["kind"], m["index"], m["attempt"])
            for m, _ in self.waiting
            if m["job"]["job_id"] == job_id
        ]
        for task in tasks:
            self._kill_task(task)

    def on_slot(self, identity: bytes, frame: bytes) -> None:
        msg = unpack(frame)
        kind = msg["type"]
        slot = self.slots.get(identity.decode())
        if kind == "hello":
            if slot is not None:
                slot.ready = True
                self._dispatch()
            return
        if kind == "spill":
            if msg["job_id"] in self.ended_jobs:
                # Sent by a map of a job that ended meanwhile (stopped early, failed, cancelled) before the end
                # killed it: its files are deleted, and opening this one killed the worker (FileNotFoundError).
                Path(msg["path"]).unlink(missing_ok=True)
                return
            self.pusher.add_spill(msg["job_id"], msg["index"], msg["attempt"], msg["seq"], msg["path"], msg.get("meta"))
            self.last_spill_seq[(msg["job_id"], msg["index"], msg["attempt"])] = msg["seq"]
            self._tell_unsent(msg["job_id"], msg["index"], msg["attempt"])
            return
        if kind in FINISHING and slot is not None:
            if slot.task is not None and (slot.task[0], slot.task[2], slot.task[3]) == _attempt_of(msg):
                slot.task = None
                msg["pool"] = slot.kind  # which of this worker's slots is free again (the coordinator counts them)
                self._dispatch()  # (a task waiting here for a slot of this kind starts now, not at the next hello)
            else:
                # The last words of an attempt this worker ended itself (killed at the coordinator's request, and
                # its slot reported free then) that were on their way as it was killed: its slot must not count as
                # freed twice. The coordinator, counting one slot too many, gave this worker a task it had no slot
                # for, which waited here behind a busy slot while the job waited for it.
                msg["pool"] = None
        if kind in RELAYED:
            msg["worker"] = self.name
            self._send_to_coordinator(message(kind, **{k: v for k, v in msg.items() if k != "type"}))

    # Loop ----------------------------------------------------------------------------------------------------
    def serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self.coordinator, zmq.POLLIN)
        poller.register(self.slots_socket, zmq.POLLIN)
        if self.link is not None and self.link.events is not None:
            poller.register(self.link.events, zmq.POLLIN)  # (back up: said before what the coordinator answers)
        try:
            self._wait_for_slots()
            if self.running:  # (a worker stopped while it started never registers: nobody needs telling)
                self._register()
            next_heartbeat = time.monotonic()
            while self.running:
                timeout = 5 if self.pusher.pending() else 100
                events = dict(poller.poll(timeout))
                if self.slots_socket in events:
                    self._drain(self.slots_socket, lambda identity, frame: self.on_slot(identity, frame))
                if self.link is not None and self.link.events in events:
                    self._check_link()
                if self.coordinator in events:
                    self._drain(self.coordinator, lambda frame: self.on_coordinator(frame))
                for job_id, map_index, attempt in self.pusher.pump():
                    self._tell_unsent(job_id, map_index, attempt)
                now = time.monotonic()
                if self.pusher.blocked_reducers():
                    self._blocked_seconds += timeout / 1000  # roughly: this turn waited with reducers out of credit
                if self.publisher is not None:
                    self.publisher.tick(self._engine_metrics)
                if now >= next_heartbeat:
                    if self._last_heartbeat is not None:
                        self._heartbeat_lag = max(0.0, now - self._last_heartbeat - HEARTBEAT_SECONDS)
                    self._last_heartbeat = now
                    next_heartbeat = now + HEARTBEAT_SECONDS
                    self._to_coordinator(
                        "heartbeat",
                        running=sum(s.task is not None for s in self.slots.values()),
                        incarnation=self.incarnation,  # a coordinator that does not know this worker answers reinit
                    )
                    self._check_slots()
                    self._check_registered()
                    self._check_link()
                    self._retry_ignored_registration()
                    if orphaned():
                        self.running = False
        finally:
            try:
                self._leave()
            finally:
                self.close()

    def _leave(self) -> None:
        """A standalone worker stopped on its own (Ctrl-C, SIGTERM) tells the coordinator, which runs its attempts
        again elsewhere at once instead of after the heartbeat timeout, and says what became of its tasks. It waits
        ``LEAVE_ANSWER_SECONDS`` at most for the answer: a coordinator that is gone learns nothing it needs."""
        if embedded() or self.shut_down or self.unanswered_since is not None or not self.incarnation:
            return  # stopped with its embedded cluster or by the coordinator, or never registered (or answered)
        tasks = self._tasks_held()
        coordinator = f"the coordinator at {self.coordinator_address}"
        if self.link is not None:
            self.link.take_events()
        if self.link is not None and (down := self.link.gone_for()) is not None:
            # No coordinator to tell (it ended, or its host is down): said so, without waiting for an answer that
            # cannot come and saying it would declare this worker lost.
            ended = f"its {counted(tasks, 'running task')} ended" if tasks else "no task was running"
            ago = f"{down:.0f} s ago" if down >= 1 else "a moment ago"
            print(
                f"hop worker {self.name}: stopped ({ended}); {coordinator} was not told: the connection to it closed "
                f"{ago} (the coordinator ended or stopped answering, or its host is down or cut off)",
                file=sys.stderr,
                flush=True,
            )
            return
        answered = False
        with contextlib.suppress(zmq.ZMQError):
            self.coordinator.send(message("leaving", worker=self.name, incarnation=self.incarnation), zmq.NOBLOCK)
            deadline = time.monotonic() + LEAVE_ANSWER_SECONDS
            while not answered and (left := deadline - time.monotonic()) > 0:
                if self.coordinator.poll(int(left * 1000) + 1):
                    answered = unpack(self.coordinator.recv())["type"] == "left"
        if not answered:
            then = f", and runs its {counted(tasks, 'running task')} again then" if tasks else " (no task was running)"
            said = (
                f"no answer from {coordinator} within {LEAVE_ANSWER_SECONDS:.0f} s: it declares this worker lost "
                f"once its heartbeat timeout passes{then}"
            )
        elif tasks:
            said = f"{coordinator} runs its {counted(tasks, 'running task')} again on other workers"
        else:
            said = f"{coordinator} knows (no task was running)"
        print(f"hop worker {self.name}: stopped; {said}", file=sys.stderr, flush=True)

    def _engine_metrics(self) -> dict[str, float]:
        """This worker's engine metrics for the monitor (``monitoring.sampler.engine_metric_names``)."""
        running = [slot.task[1] for slot in self.slots.values() if slot.task is not None]
        pushed = self.pusher.total_pushed_bytes
        interval = self.publisher.interval if self.publisher is not None else 1.0
        out_rate, self._pushed_before = (pushed - self._pushed_before) / interval, pushed
        blocked, self._blocked_seconds = self._blocked_seconds, 0.0
        return {
            "running_maps": running.count("map"),
            "running_reduces": running.count("reduce"),
            "spill_queue": self.pusher.pending(),
            "unsent_spills": self.pusher.unsent_total(),
            "shuffle_out_bytes_s": out_rate,
            "blocked_reducers": self.pusher.blocked_reducers(),
            "backpressure_seconds": blocked,
            "heartbeat_lag_ms": self._heartbeat_lag * 1000,
        }

    @staticmethod
    def _drain(socket: zmq.Socket, handle: Any) -> None:
        for _ in range(1000):
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            handle(*frames)

    def close(self) -> None:
        self.running = False
        for slot in self.slots.values():
            if slot.process.poll() is None:
                if slot.ready and slot.task is None:
                    with contextlib.suppress(zmq.ZMQError):
                        self._to_slot(slot, message("stop"))
                else:
                    # Not connected yet (a stop message could not reach it), or busy with a task that would read
                    # the stop only when done: the worker is going, so is the task. Killed: task processes ignore
                    # SIGTERM (hop.lifetime.ignore_stop_signals), and hold nothing a polite end would save.
                    slot.process.kill()
        wait_or_kill([slot.process for slot in self.slots.values()], time.monotonic() + 5)
        self.pusher.close()
        if self.publisher is not None:
            self.publisher.close()
        close_socket(self.slots_socket)
        if self.link is not None:
            self.link.close()
        close_socket(self.coordinator)
        shutil.rmtree(self.spill_dir, ignore_errors=True)


def address_toward(coordinator: str) -> str:
    """The local address this host reaches ``coordinator`` from: what a worker advertises when given no ``--host``
    (other hosts reach it the way it reaches the coordinator, where 127.0.0.1 would send them to themselves).
    127.0.0.1 for an ``ipc://`` or loopback coordinator, or when the route cannot be found."""
    parsed = urllib.parse.urlsplit(coordinator)
    if parsed.scheme != "tcp" or not parsed.hostname:
        return "127.0.0.1"
    try:
        with socket_module.socket(socket_module.AF_INET, socket_module.SOCK_DGRAM) as probe:
            probe.connect((parsed.hostname, parsed.port or 9))  # (UDP: picks the route, sends nothing)
            return str(probe.getsockname()[0])
    except (OSError, ValueError):
        return "127.0.0.1"


def main(argv: list[str] | None = None) -> int:
    if sys.flags.hash_randomization and os.environ.get("PYTHONHASHSEED") != "0":
        # Task processes are forked from the worker, and every process of a cluster must hash keys alike (the
        # default partitioner is shuffle.keys.partition_hash(key) % R): run the worker itself with hash
        # randomization off.
        arguments = sys.argv[1:] if argv is None else argv
        # (without the current directory on its path: hop.interpreter)
        environment = module_environment({**os.environ, "PYTHONHASHSEED": "0"})
        os.execve(sys.executable, [*module_command("hop.worker"), *arguments], environment)
    parser = argparse.ArgumentParser(prog="hop worker")
    add_arguments(parser)
    args = parser.parse_args(argv)
    # A standalone worker stops on SIGTERM, SIGHUP and Ctrl-C from its very start. Signals that come while it starts
    # (its spill directory made, its task processes forked) are noted and stop it as soon as it has started: the
    # handler was installed only once it had, and until then SIGTERM killed it outright, its spill directory left
    # behind. An embedded cluster's worker ignores them (its coordinator stops it, or it ends when orphaned).
    stops = () if ignore_stop_signals() else stop_signals_taken()
    came: list[int] = []
    started: list[Worker] = []

    def stop(number: int, _frame: Any) -> None:
        came.append(number)
        for worker in started:
            worker.running = False

    interrupt = signal.getsignal(signal.SIGINT)
    for number in stops:
        signal.signal(number, stop)
    worker = Worker(
        args.coordinator,
        args.map_slots,
        args.reduce_slots,
        args.host or address_toward(args.coordinator),
        args.name,
        args.spill_dir,
        rack=args.rack,
        sample_interval=args.sample_interval,
        sample_scope=args.sample_scope,
        host_label=args.host_label,
        stream_slots=args.stream_slots,
    )
    started.append(worker)
    if came:  # (one that came before it was listed above)
        worker.running = False
    # From here SIGTERM, and SIGHUP (its terminal or SSH session closed, unless started with nohup), stop it as Ctrl-C
    # does: it tells the coordinator and removes its spill directory. SIGHUP killed it outright, leaving both. Ctrl-C
    # is a KeyboardInterrupt again, which ends serve wherever it waits.
    if signal.SIGINT in stops:
        signal.signal(signal.SIGINT, signal.SIG_DFL if interrupt is None else interrupt)
    with contextlib.suppress(KeyboardInterrupt):
        worker.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
