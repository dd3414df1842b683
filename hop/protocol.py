"""Engine messages: what the coordinator, workers, task processes and clients say to each other.

Transport: ZeroMQ. The coordinator binds a ROUTER; workers and clients connect DEALER sockets. Each worker binds a
ROUTER for its task processes (one DEALER each). Every control message is one frame: a msgpack map with a ``"type"``
field (packed by ``shuffle.codec``: ints of any size); the other fields are listed below. Times are seconds since the
epoch (floats).

Client -> coordinator (each answered by one reply):
    submit      {job: JobSpec, working_directory}           -> submitted {job_id} | error {message}
                (working_directory: the client's current directory, or None; --overwrite never clears it)
    status      {job_id, wait?, status_after?, status_of?}  -> status {job_id, name, state, maps_done, maps_total,
                                                               map_fraction, reduces_done, reduces_total,
                                                               reduce_fraction, input_records, error,
                                                               task_status [{job_id, kind, index, attempt,
                                                               message, seq}]: the latest status message of each
                                                               running attempt and of each failed attempt of a
                                                               task not done, or with status_after every one
                                                               newer than that seq (of any attempt: one that just
                                                               ended too), and those of the jobs status_of names
                                                               (a pipeline's other steps; seqs are numbered over
                                                               all jobs);
                                                               continuous: sources_gone [{index, url, attempts,
                                                               error}], sources_listening [{index, url,
                                                               address}]}
    shutdown    {}                                          -> bye {}

Worker -> coordinator:
    register    {worker, host, pid, map_slots, reduce_slots, incarnation, shuffle: "push"}
                                                -> registered {heartbeat_timeout, samples?}
                                                (heartbeat_timeout: a worker cut off that long ends its tasks)
                                                (samples: where a predecessor under its name published samples)
    samples_at  {worker, samples}               it took that endpoint over: its sample stream is there now
    heartbeat   {worker, running: int, incarnation}        (from a worker the coordinator does not know:
                                                -> reinit {incarnation, why: "unknown"}; from one it declared lost,
                                                any message but register and leaving -> reinit {..., why: "lost"})
    slot_free   {worker, job_id, kind, pool}                an attempt ended on the coordinator's request (kill_task)
    task_started  {job_id, kind, index, attempt, pid, at}
    task_progress {job_id, kind, index, attempt, fraction, records, bad?, written?, taken?, from_file?}
                  (bad: a stream map's bad records; written: a pipelined reduce's whole output's size; taken,
                  from_file: a map reading a pipe, the bytes it took and whether from the committed file)
    task_status   {job_id, kind, index, attempt, message}   the attempt's latest status (a job's set_status;
                  at most about once a second, up to ``hop.task_status.STATUS_CHARS`` characters)
    source_listening {job_id, index, attempt, address}     a stream map's source listens there (zmq:, tcp:)
    reducer_ready {job_id, index, attempt, address}          a reduce attempt's PULL address
    first_run     {job_id, index, attempt, at}               the first run reached this reduce attempt
    map_checkpoint {job_id, index, attempt, spills, records, offset, counters, user_counters, bad_records}
                                                             registered spills cover the first ``records`` records
    map_done      {job_id, index, attempt, spills, counters, user_counters, bad_records, at}
    reduce_done   {job_id, index, attempt, path, counters, user_counters, at, first_run_at, input_complete_at,
                  memory}
    task_failed   {job_id, kind, index, attempt, error, traceback, record, retryable, at}

Client -> coordinator, online aggregation and the web view:
    jobs        {}                                          -> jobs {jobs: [summary]}
    job         {job_id}                                    -> job {summary..., tasks: [{kind, index, state,
                                                               fraction, attempts, worker}]}
    snapshots   {job_id, after}                             -> snapshots {snapshots: [{seq, label, progress, time,
                                                               complete, input_fraction, partitions, rows, ...}]}
    snapshot    {job_id}                                    -> snapshot_requested {seq, label}

Worker -> coordinator, relayed from task processes:
    snapshot_done {job_id, index, attempt, seq, label, rows, groups, chunks_seen?, strata_seen?, error?}
    pipe_ready    {job_id, index, attempt, address}          a pipelined map waits for its upstream partition

Continuous jobs (hop.stream) and the monitor:
    stop_job    {job_id, reason?, now?}   client -> coordinator -> stopping {job_id, state, cancelled?,
                                          interrupted?}; then stream_stop {job_id} to workers, relayed to the job's
                                          maps (drain, end); with now, the job ends at once as interrupted (its
                                          _job.json written; interrupted: whether it was running); a batch job is
                                          cancelled instead (cancelled: whether it was running)
    windows     {job_id, after, limit,    client -> coordinator -> windows {windows: [_window.json + rows, seq],
                 [all_rows], [rows]}       omitted}; rows False: the windows without their rows
    cluster     {}                        client -> coordinator -> cluster {events: PUB endpoint, faults}
    window_done {job_id, index, attempt, window, label, start, end, records, reason, fidelity, scoreboard,
                 output_records, emitted_at, rows}                        stream reducer -> (worker) -> coordinator
    stream_checkpoint {job_id, index, attempt, processed: [[map, attempt, seq], ...], checkpoint}   what a reducer's
                 state covers, and its number
    stream_checkpoint_seen {job_id, index, attempt, checkpoint}   coordinator -> worker -> that reducer: every
                 report it sent before that checkpoint arrived (a retry sends those after it again: they may have died
                 with the worker)
    stream_trim {job_id, index, attempt, seq}   coordinator -> workers: forget map ``index``'s spills up to there
    stream_source_gone {job_id, index}          coordinator -> workers -> reducers: stop waiting for that source
    stream_pause {job_id, index, attempt, pane}  a stream reducer over (pane) or back under (None) its memory budget
                 -> coordinator; then {job_id, pane} -> workers -> maps when the job's lowest pane changes
    A continuous job's run_task carries what its attempt would have missed of these broadcasts: a map's
    ``stopping`` and ``pause_pane`` (the job's pause now), a reducer's ``sources_gone``; a worker updates the
    run_task of a task waiting for a slot as they come.
    register also carries ``host_label`` (the host name of its samples, which faults about it use), ``rack``,
    ``samples`` (the worker's metric PUB endpoint, ``monitoring.publisher``) and ``stream_slots``; run_task
    carries ``pool`` ("map", "reduce" or "stream": which of the worker's slots runs it), and the worker names that
    pool again when the slot is free (map_done, reduce_done, task_failed, slot_free).

Coordinator -> worker:
    run_task      {job: JobSpec, kind, index, attempt, split?, resume?, num_maps, committed, derived_snapshots?}
                                                             (derived_snapshots: a pipeline's later job's reduce,
                                                             the ``snapshot`` requests with ``source`` its partition
                                                             has not answered; a worker adds those that come while
                                                             the task waits there for a slot)
    map_committed {job_id, index, attempt, spills, segments} sent to every worker; relayed to reduce tasks;
                                                             ``segments`` [[attempt, first, end], ...] are kept
                                                             spills of failed attempts this one resumed after
    map_failed    {job_id, index, attempt, keep_below?}      drop that attempt's runs (those with seq >= keep_below
                                                             if given: a checkpoint covers the rest, and a retry
                                                             resumes after them)
    map_lost      {job_id, index, attempt}                   a committed attempt's output died with its worker:
                                                             keep it if every run is here, else drop it
    reducer_at    {job_id, index, attempt, address}          push partition ``index`` there
    job_done      {job_id, failed, stop_tasks}               delete the job's spill files (end its tasks if
                                                             failed or stopped early)
    snapshot      {job_id, seq, label, source?, fraction?}   relayed to the job's reduce tasks; ``source``: the
                                                             upstream snapshot directory a pipeline's later job
                                                             recomputes from; ``fraction``: a threshold's, answered
                                                             once the reducer holds that much of the input (bytes)
    pipe_at       {task, job_id, address}                    relayed to that upstream reduce task: stream there
    pipe_file     {task, job_id, path, attempt}              relayed to that map task: read the committed file
    pipe_release  {task, job_id}                             relayed to that upstream reduce task, its output whole:
                                                               commit now (a task waits for its slot)
                                                             (of upstream ``attempt``: a map that got part of its
                                                             stream reads on from there)
    shutdown      {}

Task process <-> worker: the worker forwards ``run_task``, ``map_committed``, ``map_failed``, ``map_lost`` to task
processes; a task process sends ``hello {slot, pid}``, the task events above, and for each spill it registers:
    spill         {job_id, index, attempt, seq, path, meta}  the worker registers it and pushes its runs
                                                             (``meta``: online jobs' chunk, sent with each run)
and the worker answers with, and sends again whenever runs of that attempt are acknowledged:
    spill_status  {job_id, index, attempt, unsent, last_seq} spills not yet pushed to every reducer (flow control),
                                                             as of the latest spill the worker took in (last_seq)

Shuffle (worker -> reduce task): the reduce attempt binds a ROUTER socket; each worker connects one DEALER per
reduce attempt. A run goes as one or more messages of two frames: a msgpack header ``{job_id, map, attempt, seq,
partition, records, tag, offset, size}`` and a piece of the run bytes of that partition (``shuffle.runs`` format),
the ``size`` bytes of the run cut into pieces of at most ``shuffle.pusher.PIECE_BYTES``, in order, each saying where
it starts (``offset``); an empty run is one message with an empty piece. The reducer answers every message with one
frame, the ASCII decimal ``seq``, once it is taken: a credit back to the worker, which keeps at most
``shuffle.pusher.CREDITS`` messages in flight per reducer. A message whose ``job_id`` and ``partition`` are not the
reducer's (a connection to a dead reduce attempt reconnected to whatever bound its port next) is acknowledged and
ignored. Every spill sends a run to every partition, even an empty one, so a reducer knows when it holds all runs
of a committed attempt (``map_committed.spills``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any

import zmq

from shuffle import codec

TaskKey = tuple[str, int, int]
"""(kind, index, attempt)."""


def unsent_spills(status: dict[str, Any], registered: int) -> int:
    """A map's spills not yet pushed to every reducer, from its worker's ``spill_status`` and the number of spills
    it has registered (its next seq): the worker's count plus those registered after the latest it had taken in,
    which are still on their way to it."""
    last_seq = status.get("last_seq")
    on_the_way = max(0, registered - 1 - int(last_seq)) if last_seq is not None else 0
    return int(status["unsent"]) + on_the_way


def pack(message: dict[str, Any]) -> bytes:
    """A message as one frame, ints of any size (``shuffle.codec``): a pane or window number can pass 64 bits
    (an event stamped in nanoseconds read as seconds, windowed by milliseconds)."""
    return codec.packb(message)


def unpack(frame: bytes | zmq.Frame) -> dict[str, Any]:
    data = frame.bytes if isinstance(frame, zmq.Frame) else frame
    message = codec.unpackb(data, use_list=True)
    if not isinstance(message, dict) or "type" not in message:
        raise ValueError(f"malformed engine message: {message!r:.200}")
    return message


def message(msg_type: str, /, **fields: Any) -> bytes:
    """Encode a control message of type ``msg_type``."""
    fields["type"] = msg_type
    return pack(fields)


def close_socket(socket: zmq.Socket) -> None:
    """Close without lingering: pending messages to a peer that is gone must not block exit."""
    socket.close(linger=0)


@dataclasses.dataclass(frozen=True)
class SocketFile:
    """The file of an ``ipc://PATH`` address this process has bound, which :meth:`remove` deletes when it stops
    listening there.

    ZeroMQ deletes it itself only once its I/O thread gets to close the listener, which a process that exits right
    after closing its socket does not wait for: the file stayed, and every command given that address afterwards
    found a socket file nothing listens on. The file is known by its inode, so that one another process has bound
    at the same path since (a coordinator started in this one's place) is left alone."""

    path: str
    device: int
    inode: int

    @classmethod
    def bound_at(cls, address: str) -> SocketFile | None:
        """The socket file of ``address``, as bound now; None for a TCP address or an abstract ``ipc://@NAME``."""
        if not address.startswith("ipc://") or address.startswith("ipc://@"):
            return None
        path = address.removeprefix("ipc://")
        try:
            found = os.stat(path)
        except OSError:
            return None
        return cls(path, found.st_dev, found.st_ino)

    def remove(self) -> None:
        """Delete the file, if it is still the one bound (call it once the socket is closed)."""
        with contextlib.suppress(OSError):
            found = os.stat(self.path)
            if (found.st_dev, found.st_ino) == (self.device, self.inode):
                os.unlink(self.path)


def connect_soon(socket: zmq.Socket, address: str) -> None:
    """Connect ``socket`` to a peer that may bind ``address`` a moment later.

    The processes of a cluster start together, so a worker or task process often connects before its peer has
    bound. ZeroMQ then retries after ``RECONNECT_IVL`` (100 ms by default, a large share of a short job); retry
    after 10 ms instead, backing off to 1 s so that an absent remote peer is not polled in a tight loop.
    """
    socket.setsockopt(zmq.RECONNECT_IVL, 10)
    socket.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
    socket.connect(address)
