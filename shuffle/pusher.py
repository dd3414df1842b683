"""The worker's shuffle server: push registered spills to the reduce tasks that need them.

Per job, the pusher holds every spill its map attempts registered and, per partition, the current reduce attempt's
address and a queue of spills not yet sent to it. In ``pipelined`` mode a spill is queued as soon as it is registered;
in ``blocking`` mode (the Hadoop baseline) only once the coordinator reports its map attempt committed. A new reduce
attempt for a partition gets every eligible spill again: map output stays on disk until the job ends for that reason.
The address of an attempt older than the partition's current one (late) is ignored.

Credit-based flow: each reduce attempt binds a ROUTER; the pusher connects one DEALER per reduce attempt and keeps
at most ``CREDITS`` messages in flight to it. A run goes as one message per ``PIECE_BYTES`` of it (its header says
where the piece starts and the run's size; ``shuffle.pieces`` puts them back together), so a run of large values
never sits whole in a reducer's or a worker's memory. The reducer acknowledges every message once taken (a one-frame
message: the run's ``seq``), which returns one credit. ZeroMQ's own buffers cannot hide a slow reducer this way, so
the ``unsent`` count that maps use for flow control (queued + in flight) is exact. Sending never blocks the worker,
and run bytes are read from the spill file only when sent: what a slow reducer has not taken stays on disk, not in
memory, and at most ``CREDITS`` pieces per reducer are in the network.
"""

from __future__ import annotations

import shutil
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from shuffle import codec
from shuffle.spill import SpillFile

CREDITS = 4
"""Messages in flight (sent, not yet acknowledged) per reduce attempt: bounds network buffers and reveals slow
reducers."""

PIECE_BYTES = 1 << 20
"""Run bytes per message at most: a reducer holds at most ``CREDITS`` of them per worker in its network buffers."""


RUN_HEADER_INTS = ("map", "attempt", "seq", "partition")
"""The fields of a run piece's header that every receiver reads, all ints (with ``job_id``, a str)."""


def run_message(frames: list[Any]) -> tuple[Any, dict[str, Any], Any] | None:
    """A message a reduce attempt's ROUTER took, as ``(sender, header, data)`` if it is a run piece as this module
    sends them (the sender's identity, the msgpack header, the bytes); ``None`` for anything else that connected to
    the reducer's port (a port scanner, a stray client): it failed the reduce attempt with a decoding error.
    ``frames`` may be bytes or ``zmq.Frame`` objects (``copy=False``)."""
    if len(frames) != 3:
        return None
    sender, header_frame, data = frames
    try:
        header = codec.unpackb(header_frame.bytes if isinstance(header_frame, zmq.Frame) else header_frame, True)
    except (ValueError, TypeError):  # (msgpack's errors are ValueErrors; a map with a list key is a TypeError)
        return None
    if not isinstance(header, dict) or not isinstance(header.get("job_id"), str):
        return None
    if any(type(header.get(name)) is not int for name in RUN_HEADER_INTS):
        return None
    return sender, header, data


@dataclass(frozen=True)
class RegisteredSpill:
    map_index: int
    attempt: int
    seq: int
    spill: SpillFile
    meta: dict[str, Any] | None = None
    """Online jobs: the input chunk the spill holds (``chunk``, ``end``, ``partial``), sent with each run."""


@dataclass
class _Reducer:
    attempt: int
    address: str
    socket: zmq.Socket
    queue: deque[RegisteredSpill] = field(default_factory=deque)
    in_flight: deque[RegisteredSpill] = field(default_factory=deque)
    """One entry per message (piece) sent and not yet acknowledged."""
    sent: int = 0
    """Bytes of the first queued spill's run already sent (it leaves the queue with its last piece)."""

    def drop_queued(self, unwanted: Callable[[RegisteredSpill], bool]) -> list[RegisteredSpill]:
        """Forget the queued spills ``unwanted`` says, and return them; a run dropped after some of its pieces went
        is not finished (the reducer drops its attempt's runs too)."""
        head = self.queue[0] if self.queue else None
        dropped = [s for s in self.queue if unwanted(s)]
        if dropped:
            self.queue = deque(s for s in self.queue if not unwanted(s))
        if not self.queue or self.queue[0] is not head:
            self.sent = 0
        return dropped


@dataclass
class _JobShuffle:
    """One job's spills and reducers, with the counts a map's flow control asks for after every spill it registers
    kept as they change: counting them afresh took time in proportion to the spills queued, and with spills
    registered faster than pushed (27,000 queued at ``--spill-records 1``) a worker's loop turns grew to seconds,
    it missed its heartbeats and was declared lost."""

    mode: str
    num_partitions: int
    spills: list[RegisteredSpill] = field(default_factory=list)
    committed: set[tuple[int, int]] = field(default_factory=set)
    reducers: dict[int, _Reducer] = field(default_factory=dict)
    pushed_runs: int = 0
    pushed_bytes: int = 0
    registered: Counter[tuple[int, int]] = field(default_factory=Counter)
    """Per (map, attempt): its spills in ``spills``."""
    holds: Counter[tuple[int, int, int]] = field(default_factory=Counter)
    """Per spill (map, attempt, seq) some reducer has not been sent yet: its entries in the reducers' queues plus its
    pieces in flight (a piece holds it until acknowledged)."""
    unsent: Counter[tuple[int, int]] = field(default_factory=Counter)
    """Per (map, attempt): its spills in ``holds``."""

    def hold(self, spill: RegisteredSpill, times: int = 1) -> None:
        key = (spill.map_index, spill.attempt, spill.seq)
        if not self.holds[key]:
            self.unsent[key[:2]] += 1
        self.holds[key] += times

    def release(self, spill: RegisteredSpill, times: int = 1) -> None:
        key = (spill.map_index, spill.attempt, spill.seq)
        left = self.holds[key] - times
        if left > 0:
            self.holds[key] = left
            return
        del self.holds[key]
        self.unsent[key[:2]] -= 1
        if not self.unsent[key[:2]]:
            del self.unsent[key[:2]]

    def forget(self, gone: Callable[[RegisteredSpill], bool]) -> None:
        """Drop the spills ``gone`` says from ``spills`` and from every reducer's queue (pieces in flight stay held
        until acknowledged)."""
        kept = []
        for spill in self.spills:
            if gone(spill):
                self.registered[(spill.map_index, spill.attempt)] -= 1
            else:
                kept.append(spill)
        self.spills = kept
        self.registered = +self.registered  # (without the zero counts)
        for reducer in self.reducers.values():
            for spill in reducer.drop_queued(gone):
                self.release(spill)

    def add_reducer(self, partition: int, reducer: _Reducer) -> None:
        """Point ``partition`` at ``reducer``, replacing (and releasing everything held by) the one before."""
        old = self.reducers.pop(partition, None)
        if old is not None:
            old.socket.close(linger=0)
            for spill in (*old.queue, *old.in_flight):
                self.release(spill)
        for spill in reducer.queue:
            self.hold(spill)
        self.reducers[partition] = reducer


class SpillPusher:
    """Pushes spill runs to reducers for every job running on this worker."""

    def __init__(self, context: zmq.Context) -> None:
        self._context = context
        self._jobs: dict[str, _JobShuffle] = {}
        self.total_pushed_bytes = 0
        """Run bytes sent over all jobs since start (the monitor's shuffle rate)."""

    def _job(self, job_id: str, mode: str = "pipelined", num_partitions: int = 1) -> _JobShuffle:
        job = self._jobs.get(job_id)
        if job is None:
            job = self._jobs[job_id] = _JobShuffle(mode, num_partitions)
        return job

    def register_job(self, job_id: str, mode: str, num_partitions: int) -> None:
        job = self._job(job_id, mode, num_partitions)
        job.mode, job.num_partitions = mode, num_partitions

    def _eligible(self, job: _JobShuffle, spill: RegisteredSpill) -> bool:
        return job.mode == "pipelined" or (spill.map_index, spill.attempt) in job.committed

    def add_spill(
        self, job_id: str, map_index: int, attempt: int, seq: int, path: str, meta: dict[str, Any] | None = None
    ) -> None:
        """Register a spill file written by a local map attempt."""
        job = self._job(job_id)
        spill = RegisteredSpill(map_index, attempt, seq, SpillFile.open(path), meta)
        job.spills.append(spill)
        job.registered[(map_index, attempt)] += 1
        if self._eligible(job, spill):
            for reducer in job.reducers.values():
                reducer.queue.append(spill)
                job.hold(spill)

    def commit(self, job_id: str, map_index: int, attempt: int, segments: list[list[int]] = ()) -> None:  # type: ignore[assignment]
        """A map attempt committed; ``segments`` are the kept spills ``[attempt, first, end)`` it resumed after."""
        job = self._job(job_id)
        parts = [(attempt, 0, 1 << 62), *((a, lo, hi) for a, lo, hi in segments)]
        for part_attempt, _, _ in parts:
            job.committed.add((map_index, part_attempt))
        if job.mode == "blocking":
            mine = [
                s
                for s in job.spills
                if s.map_index == map_index and any(s.attempt == a and lo <= s.seq < hi for a, lo, hi in parts)
            ]
            for reducer in job.reducers.values():
                reducer.queue.extend(mine)
                for spill in mine:
                    job.hold(spill)

    def fail(self, job_id: str, map_index: int, attempt: int, keep_below: int | None = None) -> None:
        """Forget a failed or superseded attempt's spills (those from ``keep_below`` on, if given: the ones
        below are covered by its checkpoint and a retry builds on them)."""
        job = self._job(job_id)
        keep = keep_below or 0

        def dead(s: RegisteredSpill) -> bool:
            return (s.map_index, s.attempt) == (map_index, attempt) and s.seq >= keep

        job.forget(dead)

    def trim(self, job_id: str, map_index: int, attempt: int, seq: int) -> None:
        """Continuous jobs: every reducer's checkpoint covers this map's spills up to (``attempt``, ``seq``), so no
        reducer attempt will need them again: forget them and delete their files (a stream never ends, so its
        spills cannot wait for the end of the job)."""
        job = self._jobs.get(job_id)
        if job is None:
            return

        def covered(s: RegisteredSpill) -> bool:
            return s.map_index == map_index and (s.attempt, s.seq) <= (attempt, seq)

        for spill in job.spills:
            if covered(spill):
                Path(spill.spill.path).unlink(missing_ok=True)
        job.forget(covered)

    def set_reducer(self, job_id: str, partition: int, attempt: int, address: str) -> None:
        """Point a partition at a (new) reduce attempt and queue every eligible spill for it. An attempt older than
        the one the partition points at is ignored: attempts of a task are numbered in the order they start, so
        such an address arrived late (its attempt has ended), and taking it would send the partition's runs to a
        socket nobody reads while the live attempt waited for them for ever."""
        job = self._job(job_id)
        current = job.reducers.get(partition)
        if current is not None and attempt < current.attempt:
            return
        socket = self._context.socket(zmq.DEALER)
        socket.setsockopt(zmq.LINGER, 0)
        socket.connect(address)
        # Runs in flight to a previous attempt are lost with it: the new attempt gets everything eligible.
        queue = deque(s for s in job.spills if self._eligible(job, s))
        job.add_reducer(partition, _Reducer(attempt, address, socket, queue))

    def unsent(self, job_id: str, map_index: int, attempt: int) -> int:
        """How many of an attempt's spills some reducer has not been sent yet (a reducer not running yet counts)."""
        job = self._jobs.get(job_id)
        if job is None:
            return 0
        if len(job.reducers) < job.num_partitions:
            return job.registered[(map_index, attempt)]
        return job.unsent[(map_index, attempt)]

    def unsent_total(self) -> int:
        """Spills some reducer has not been sent yet, over all jobs and maps (for the monitor)."""
        return sum(len(job.holds) for job in self._jobs.values())

    def pending(self) -> int:
        """Runs queued or in flight, over all jobs: while non-zero the worker should pump often."""
        return sum(len(r.queue) + len(r.in_flight) for job in self._jobs.values() for r in job.reducers.values())

    def blocked_reducers(self) -> int:
        """Reducers with runs waiting because all their credits are in use."""
        return sum(
            bool(r.queue) and len(r.in_flight) >= CREDITS for job in self._jobs.values() for r in job.reducers.values()
        )

    def pump(self, budget: int = 64) -> set[tuple[str, int, int]]:
        """Send up to ``budget`` queued runs without blocking; returns the (job, map, attempt) whose runs moved."""
        sent = 0
        moved: set[tuple[str, int, int]] = set()
        for job_id, job in self._jobs.items():
            for partition, reducer in job.reducers.items():
                while True:  # take back the credits of acknowledged runs
                    try:
                        reducer.socket.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if reducer.in_flight:
                        done = reducer.in_flight.popleft()
                        job.release(done)
                        moved.add((job_id, done.map_index, done.attempt))
                while reducer.queue and sent < budget and len(reducer.in_flight) < CREDITS:
                    spill = reducer.queue[0]
                    entry = spill.spill.partitions[partition]
                    fields = {
                        "job_id": job_id,
                        "map": spill.map_index,
                        "attempt": spill.attempt,
                        "seq": spill.seq,
                        "partition": partition,
                        "records": entry.records,
                        "tag": entry.order_tag,
                        "offset": reducer.sent,
                        "size": entry.length,
                    }
                    if spill.meta:
                        fields.update(spill.meta)
                    header = codec.packb(fields)  # a stream pane's number can pass 64 bits
                    try:
                        reducer.socket.send(header, zmq.SNDMORE | zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    # With the first frame accepted, ZeroMQ takes the rest of the message atomically.
                    data = spill.spill.read_partition(partition, reducer.sent, PIECE_BYTES)
                    reducer.socket.send(data, copy=False)
                    reducer.sent += len(data)
                    reducer.in_flight.append(spill)
                    job.hold(spill)
                    if reducer.sent >= entry.length:  # the last piece (or the only one: an empty run is one too)
                        job.release(reducer.queue.popleft())
                        reducer.sent = 0
                        job.pushed_runs += 1
                    job.pushed_bytes += len(data)
                    self.total_pushed_bytes += len(data)
                    sent += 1
        return moved

    def finish_job(self, job_id: str, spill_dir: Path | None = None) -> None:
        """Close the job's connections and delete its spill files."""
        job = self._jobs.pop(job_id, None)
        if job is not None:
            for reducer in job.reducers.values():
                reducer.socket.close(linger=0)
        if spill_dir is not None:
            shutil.rmtree(spill_dir / job_id, ignore_errors=True)

    def close(self) -> None:
        for job_id in list(self._jobs):
            self.finish_job(job_id)
