"""Stream map and stream reduce attempts: the task-process side of a continuous job.

A continuous job (``spec.options["stream"]``, see :mod:`hop.stream.options`) has one stream map per source and
``num_reduces`` stream reducers, all running until the sources end or the job is stopped.

**Stream map** (``run_stream_map``): reads its source, gives every record its event time once (the job's
``time_field`` of a dict record, else the arrival time), maps it with ``key = event time`` and folds the output into
the pane of its position (``hop.stream.panes``). Its *watermark* says which panes are final: for time windows the
pane holding ``max event time - lateness`` (or ``now - lateness`` for arrival times) and every pane after it stay
open; for record and byte windows the pane holding the next record. Sealed panes become spill files whose ``meta``
(``pane``, ``pane_records``, ``sealed``) travels with every run, through the worker's push shuffle and its credits;
an advance of the watermark with no data is sent as an empty spill. A record for a pane already sealed is *late*: it
goes to ``OUT/_late/map-NNNNN.jsonl`` and a counter, never into a window. A *bad* record (the source could not
decode it, it is not JSON for a ``jsonl`` job, or its ``time_field`` is missing or not a finite number) is dropped
and counted (``bad_records_skipped``; per source in ``_job.json``'s ``continuous.bad_records``), and the first
:data:`BAD_RECORDS_LOGGED` are logged in full on stderr: one bad record never stops a stream. The map pauses
reading while more than ``pause_threshold`` of its spills are unsent (pane flow control: a slow reducer stops the
source, not the memory), and with ``max_latency`` it sheds the records of panes whose deadline has passed
(``shed_records``, and the panes are reported to reducers as shed, which C2 shows).

Checkpoints: every ``checkpoint_seconds``, when every spill it registered has reached every reducer, the map writes
``OUT/_checkpoints/state/map-NNNNN.msgpack``: its source position, open panes, watermark and counters. A retry
resumes from it. A source that cannot re-read (ZeroMQ, TCP) notes how far it sealed and read in
``OUT/_checkpoints/state/map-NNNNN-progress.msgpack`` before any spill saying so leaves; its retry declares the panes
from the checkpoint to past that note lost and numbers new records (positions, or event panes) after it.

**Stream reducer** (``run_stream_reduce``): feeds received cells to a :class:`~hop.stream.assembler.WindowAssembler`,
writes each due window as ``OUT/windows/<label>/part-NNNNN`` (the job's reduce over the window's groups, sorted by
key), tells the coordinator (``window_done``, which writes ``_window.json``), and every ``checkpoint_windows``
windows or ``checkpoint_seconds`` appends the windows written since to a delta file
(``OUT/_checkpoints/deltas/``, compacted by Spark into the materialized view, ``hop.stream.view``) and saves its
state (``OUT/_checkpoints/state/reduce-NNNNN.msgpack``). A retry restores that state and ignores cells it already
holds; workers push every spill since the reducer's last checkpoint again (``stream_trim`` lets them forget older
ones).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import zmq

from hop.aggregates import Aggregate
from hop.inputs import JSON_WHITESPACE, InputError, freeze_json
from hop.jsonline import to_json
from hop.outputs import OutputGuard, OutputRemovedError, OutputWriteError, output_write_error, writing_output
from hop.protocol import unsent_spills
from hop.stream.assembler import FOREVER, WindowAssembler, WindowResult
from hop.stream.options import StreamOptions
from hop.stream.panes import PaneBuffer
from hop.stream.rows import largest_rows
from hop.stream.sources import ReplaySource, Source, SourceError, SourceRecord, open_source
from hop.stream.windows import MAX_EVENT_SECONDS, WindowSpec
from hop.tasks import (
    TaskChannel,
    first_unencodable_call,
    instantiate,
    reduce_to_file,
    unencodable_combine_call,
    unencodable_map_call,
)
from hop.usercode import Place, UserCodeError, call_user, fold_error, shown, shown_key
from hop.usertrace import not_pairs
from shuffle import codec
from shuffle.buffer import PartitionError, UnhashableKeyError
from shuffle.keys import NanKeyError, sort_keys
from shuffle.pairs import checked_pairs
from shuffle.pieces import RunPieces
from shuffle.pusher import run_message
from shuffle.runs import UnencodableRecordError, iter_run
from shuffle.spill import write_spill
from shuffle.store import DECODED_EXPANSION

PROGRESS_SECONDS = 1.0
ROWS_REPORTED = 1000
"""Rows of each window a reducer sends the coordinator with ``window_done`` (the web view's table): those of the
largest values, where they are numbers (``hop.stream.rows``). The whole
result is in the window's part file, which the coordinator reads for a ``windows`` request with ``all_rows``; the
``--sink`` gets every row."""
KEEP_MAP_CHECKPOINTS = 64
"""Map checkpoints kept: a retry needs one its reducers' checkpoints cover, which can lag by a few seconds."""
POLL_RECORDS = 2000
BAD_RECORDS_LOGGED = 10
"""Bad records a stream map logs in full (stderr, which the worker passes on); later ones are only counted."""


def _state_path(output: str, name: str) -> Path:
    return Path(output) / "_checkpoints" / "state" / f"{name}.msgpack"


def _write_atomically(output: OutputGuard, path: Path, data: bytes) -> None:
    """Write ``path`` (in the job's output directory) whole, never into an output directory removed or replaced
    since the task started (:class:`~hop.outputs.OutputGuard`). A full disk raises an
    :class:`~hop.outputs.OutputWriteError` naming ``path`` and what to do (no half-written file is left)."""
    temporary = path.with_name(path.name + f".tmp-{os.getpid()}")
    try:
        with writing_output(path):
            output.folder(path.parent)
            with open(temporary, "wb", opener=output.opener) as file:
                file.write(data)
    except OutputWriteError:
        with contextlib.suppress(OSError):
            output.unlink(temporary)
        raise
    _publish(output, temporary, path)


def _publish(output: OutputGuard, temporary: Path, path: Path) -> None:
    """Rename ``temporary`` to ``path``, once the output directory is checked again: it may have been replaced while
    the file was written. It is then removed, from the directory the task started with, wherever that went."""
    try:
        output.check()
    except OutputRemovedError:
        output.unlink(temporary)
        raise
    output.replace(temporary, path)


def _append(output: OutputGuard, path: Path, lines: Iterable[str]) -> None:
    """Append ``lines`` to ``path`` (a ``_late`` file), in the output directory the task started with only. A full
    disk raises an :class:`~hop.outputs.OutputWriteError` naming ``path`` and what to do."""
    with writing_output(path):
        output.folder(path.parent)
        with open(path, "a", encoding="utf-8", opener=output.opener) as file:
            file.writelines(lines)


@contextlib.contextmanager
def _writing_part(part: Path) -> Iterator[None]:
    """Name ``part``, a window's part file, in the error of a write that failed for want of room (or an I/O error)
    inside, its own or :func:`~hop.tasks.reduce_to_file`'s, which names the hidden file it is written under."""
    try:
        with writing_output(part):
            yield
    except OutputWriteError as error:
        cause = error.__cause__
        if not isinstance(cause, OSError):
            raise
        raise output_write_error(part, cause) from cause


def _read_state(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    return codec.unpackb(path.read_bytes())  # (ints of any size: a pane's Sum may pass 64 bits)


class StreamRecordError(ValueError):
    """A record the job cannot read (not JSON) or place in time (no or a bad ``time_field``): says what is wrong
    with it and shows its start; the map drops and counts it."""


# Stream map --------------------------------------------------------------------------------------------------------
class _MapState:
    """What a stream map checkpoints besides its panes."""

    def __init__(self) -> None:
        self.ordinal = 0
        self.offset = 0
        self.max_event = float("-inf")
        self.sealed = -FOREVER
        self.records = 0
        self.late = 0
        self.shed = 0
        self.bad = 0


def run_stream_map(
    spec: Any,
    index: int,
    attempt: int,
    job_dir: Path,
    channel: TaskChannel,
    resume_below: tuple[int, int] | None = None,
    stopping: bool = False,
    pause_pane: int | None = None,
) -> dict[str, Any]:
    """Run one stream map attempt until its source ends or the job is stopped; returns ``map_done`` fields.
    ``stopping``: the job was stopped before this attempt started (it drains at once). ``pause_pane``: the job's
    memory pause as this attempt started (it holds at that pane as if it had heard the ``stream_pause``).

    A retry (``attempt > 0``) resumes from the newest checkpoint whose spills every reducer's checkpoint covers
    (``resume_below``: the (attempt, seq) of the last such spill, from the coordinator), so whatever a restarted
    reducer lost is sent again; with none, it starts from the beginning of its source. Reducers ignore the cells
    they already hold."""
    job, functions = instantiate(spec)
    output = OutputGuard(spec.output)
    options = StreamOptions.from_spec(spec)
    window = options.window
    url = options.sources[index]
    time_field = getattr(job, "time_field", None)
    attempt_dir = job_dir / f"stream-map-{index:05d}-{attempt}"
    attempt_dir.mkdir(parents=True, exist_ok=True)
    checkpoint_dir = Path(spec.output) / "_checkpoints" / "state" / f"map-{index:05d}"
    late_path = Path(spec.output) / "_late" / f"map-{index:05d}.jsonl"
    num_reduces = spec.num_reduces

    def partition(key: Any) -> int:
        """The job's partition of ``key``, checked as a batch map checks it (``shuffle.buffer``): out of range, it
        was an IndexError as its pane was sealed, retried as the engine's failure until the source was given up
        and the job ended 'succeeded' with no window. Not called with one reducer, as in batch (``Job.partition``)."""
        if num_reduces == 1:
            return 0
        try:
            result = job.partition(key, num_reduces)
        except Exception as error:
            raise UserCodeError("partition", error, shown_key(key)) from error
        if type(result) is not int or not 0 <= result < num_reduces:
            raise PartitionError(f"partition({key!r}) returned {result!r}; expected an int in range({num_reduces})")
        return result

    aggregate = functions.reduce_aggregate or (
        functions.combiner if isinstance(functions.combiner, Aggregate) else None
    )
    buffer = PaneBuffer(num_reduces, partition, aggregate, None if aggregate else functions.combiner)
    marks = _MapState()
    try:
        source = open_source(url, spec.options.get("max_line_bytes"), options.directory)
    except SourceError as error:
        raise InputError(f"stream map {index}: {error}") from error  # the message says it all: no engine frames
    if source.listening is not None:  # where producers send: a port the URL left to the system is known only now
        channel.send("source_listening", index=index, attempt=attempt, address=source.listening)
    seq = 0
    unsent = 0
    started = time.time()
    lost_announce: tuple[int, int] | None = None
    saved = _usable_map_checkpoint(checkpoint_dir, resume_below, source.replayable) if attempt > 0 else None
    if attempt > 0 and source.replayable:
        # The records read since the checkpoint (or the start) are read again, and the late ones among them listed
        # again: the failed attempt's lines past the checkpoint go first (a retry listed 45 late records twice).
        _cut_late_file(late_path, 0 if saved is None else saved.get("late_bytes"))
    if saved is not None:
        buffer.restore(saved["buffer"])
        for name in ("ordinal", "offset", "max_event", "sealed", "records", "late", "shed"):
            setattr(marks, name, saved[name])
        marks.bad = saved.get("bad", 0)
        if source.replayable:
            source.seek(saved["position"])
        for group, names in saved["user_counters"].items():
            for name, value in names.items():
                job.increment_counter(group, name, value)
    progress_path = _state_path(spec.output, f"map-{index:05d}-progress")
    noted = (-FOREVER, -FOREVER)
    """(sealed, furthest pane read into) last written to ``progress_path``: a source that cannot re-read notes it
    before any spill that says so leaves, for a retry (:func:`_restart_pane`)."""
    if attempt > 0 and not source.replayable:
        # What the failed attempts read since the checkpoint (or since the start) is gone, and the reducers may hold
        # panes they sent after it: declare everything up to past the furthest pane they noted lost (C2 shows the
        # panes that did not arrive as L) and number new records from there, so none lands in a pane reducers hold
        # (they would drop it as a resend) or in one that lost records while showing D.
        buffer.panes.clear()
        buffer.records.clear()
        note = _read_state(progress_path)
        restart = _restart_pane(window, options, time_field is None, note)
        _count_from_note(marks, note, late_path)
        if restart > marks.sealed:
            lost_announce = (marks.sealed, restart)
            if window.unit == "records":
                marks.ordinal = restart * window.pane
            elif window.unit == "bytes":
                marks.offset = restart * window.pane
    # With event time, a record is late when its pane lies below the watermark of the records before it (the
    # greatest event time read so far, less the lateness): moved record by record, not once per poll, so which
    # records are late depends on the input's order alone, not on how many records a poll happened to take (a
    # replay at another rate, a slower map, a restart from a checkpoint give the same windows).
    event_watermark = window.unit == "time" and time_field is not None
    unheard_from: int | None = None
    """A retry of an event-time source that cannot re-read: the first pane it may not have heard. What was sent
    while no attempt listened is gone, at event times nobody saw; the panes its first records' watermark passes over
    are lost, not empty (else they showed ``E`` and their windows claimed full fidelity)."""
    if attempt > 0 and event_watermark and not source.replayable:
        unheard_from = lost_announce[1] if lost_announce else marks.sealed
    open_from = _event_watermark_pane(window, options, marks.max_event) if event_watermark else -FOREVER
    # The event time from which open_from may move on (a little early: float rounding), so that the pane is
    # computed when the watermark crosses into a new pane, not for every in-order record.
    moves_at = _next_pane_start(window, options, open_from) if event_watermark else float("inf")
    last_checkpoint = time.monotonic()
    last_seal_sent = 0.0
    announced = marks.sealed
    last_report = time.monotonic()
    paused_seconds = 0.0
    pauses = 0

    # ``pause_pane``: a reducer over its memory budget asked the sources not to run past this pane (C2's pause
    # indicator); then as ``stream_pause`` messages say.
    memory_pauses = 0
    max_unsent = 0
    """The most of this map's pane spills not yet at every reducer (pane flow control keeps it near the threshold)."""

    def take_control() -> None:
        nonlocal unsent, stopping, pause_pane
        while (msg := channel.receive(0)) is not None:
            if msg.get("type") == "spill_status" and msg.get("index") == index:
                unsent = unsent_spills(msg, seq)
            elif msg.get("type") == "stream_stop":
                stopping = True
            elif msg.get("type") == "stream_pause":
                pause_pane = msg.get("pane")

    def hold_input(still: Callable[[], bool]) -> None:
        """Read nothing while ``still()``, following control messages; returns after at most 0.5 s so the loop can
        seal panes, checkpoint and report progress, and reads nothing that round either if ``still()`` holds."""
        nonlocal paused_seconds
        start = time.monotonic()
        while still() and not stopping and time.monotonic() < start + 0.5:
            time.sleep(0.005)
            take_control()
        paused_seconds += time.monotonic() - start

    def poll_budget() -> int:
        """How many records the next poll may take: about as many as fill the panes left below the threshold, at
        the rate panes have filled so far, so that a backlog (a source catching up after a pause) arrives a few
        panes at a time instead of ``POLL_RECORDS`` records' worth of panes in one poll."""
        room = max(1, options.pause_threshold + 1 - unsent)
        # Before the first pane is registered there is no rate to go by: start at a record a pane and grow with what
        # has been read (every registered spill counts in ``seq``: errs toward smaller polls).
        per_pane = max(1, marks.records // seq if seq else marks.records)
        return min(POLL_RECORDS, room * per_pane)

    def note_progress() -> None:
        """Write how far this map sealed and read (non-replayable sources; see ``noted``)."""
        nonlocal noted
        if source.replayable:
            return
        if window.unit != "time":
            top = window.pane_of(marks.ordinal if window.unit == "records" else marks.offset)
        elif time_field is None:
            top = window.pane_of(time.time())
        else:
            top = window.pane_of(marks.max_event) if marks.max_event > float("-inf") else -FOREVER
        if (marks.sealed, top) > noted:
            noted = (max(marks.sealed, noted[0]), max(top, noted[1]))
            counts = {
                "records": marks.records - sum(buffer.records.values()),  # those in sealed panes: a retry's count
                "late": marks.late,
                "late_bytes": late_path.stat().st_size if late_path.exists() else 0,  # (written before: each poll)
                "bad": marks.bad,
            }
            _write_atomically(output, progress_path, codec.packb({"sealed": noted[0], "top": noted[1], **counts}))

    def register(
        pane: int | None, pane_records: int, runs: list[tuple[bytes, int, str]], sealed: int, **meta: Any
    ) -> None:
        """Send one spill: pane ``pane``'s runs, or with ``pane`` None no pane (a watermark, the end, a loss or
        shedding to announce; not -1, which is the pane of the last seconds before 1970 in event time)."""
        nonlocal seq, unsent, announced, last_seal_sent, max_unsent
        path = attempt_dir / f"pane-{seq:08d}.spill"
        write_spill(path, runs)
        meta = {"pane": pane, "pane_records": pane_records, "sealed": sealed, **meta}
        channel.send("spill", index=index, attempt=attempt, seq=seq, path=str(path), meta=meta)
        seq += 1
        unsent += 1
        if unsent > max_unsent:
            max_unsent = unsent
        announced, last_seal_sent = sealed, time.monotonic()

    def empty_runs() -> list[tuple[bytes, int, str]]:
        return [(b"", 0, "empty")] * num_reduces

    def seal(limit: int, **meta: Any) -> None:
        """Close the panes below ``limit``. Each pane's spill says it seals only up to itself (the next ones are
        on their way), the last says ``limit``; an advance with no data is announced at most every
        ``seal_interval``, and the end of the source at once (``meta``)."""
        panes = buffer.seal_below(limit)
        marks.sealed = max(marks.sealed, limit)
        note_progress()
        # A stop flushes open panes: each of their spills says where the source had naturally sealed, so a
        # reducer never takes a flushed window for a complete one while the final marker is still on its way.
        stopped = {"natural": meta["natural"]} if meta.get("natural") is not None else {}
        for number, sealed_pane in enumerate(panes):
            last = number == len(panes) - 1
            sealed = marks.sealed if last and not meta else sealed_pane.pane + 1
            register(sealed_pane.pane, sealed_pane.records, sealed_pane.runs, sealed, **stopped)
        if meta or (marks.sealed > announced and time.monotonic() - last_seal_sent >= options.seal_interval):
            register(None, 0, empty_runs(), marks.sealed, **meta)  # the watermark moved with no data, or the end

    def checkpoint() -> None:
        state = {
            "position": source.position(),
            "buffer": buffer.to_state(),
            "user_counters": job.counters_so_far(),
            **{name: getattr(marks, name) for name in ("ordinal", "offset", "max_event", "sealed")},
            **{name: getattr(marks, name) for name in ("records", "late", "shed", "bad")},
            "late_bytes": late_path.stat().st_size if late_path.exists() else 0,  # (written before: each poll)
        }
        _write_atomically(output, checkpoint_dir / f"{attempt:04d}-{seq:08d}.msgpack", codec.packb(state))
        for stale in _map_checkpoints(checkpoint_dir)[:-KEEP_MAP_CHECKPOINTS]:
            output.unlink(stale)

    def event_time(record: SourceRecord, value: Any) -> float:
        if time_field is None:
            return record.arrival
        if not isinstance(value, dict) or time_field not in value:
            raise StreamRecordError(
                f"has no field {time_field!r} (the job's time_field): {value!r:.200}; send dict records (JSON lines "
                "or msgpack maps) that carry it, or unset time_field to use arrival time"
            )
        stamp = value[time_field]
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)) or not math.isfinite(stamp):
            raise StreamRecordError(
                f"has field {time_field!r} = {stamp!r:.100}, not seconds since the epoch (the job's time_field); "
                "fix the producer"
            )
        if not abs(stamp) < MAX_EVENT_SECONDS:  # (an int too large for a float is above it too)
            raise StreamRecordError(
                f"has field {time_field!r} = {stamp!r:.100}, not seconds since the epoch (the job's time_field): "
                f"no window can be named for it (at most {MAX_EVENT_SECONDS:g} s either way); fix the producer"
            )
        return float(stamp)

    def where(record: SourceRecord, number: int) -> str:
        """Where a record was, for messages: its file or client and byte offset, as the source says, or for a
        record without a place (a ZeroMQ frame) its ``number`` in the source (from 0, bad records included)."""
        return source.where(record) or f"{url}: record {number}"

    def drop_bad(problem: str) -> None:
        """Count a bad record and log the first few; it goes into no pane and takes no record or byte position
        (a ``--window 1000r`` window still holds 1000 good records)."""
        marks.bad += 1
        if marks.bad <= BAD_RECORDS_LOGGED:
            later = "; later ones are only counted (bad_records_skipped)" if marks.bad == BAD_RECORDS_LOGGED else ""
            print(f"hop: stream map {index} dropped bad record {marks.bad}: {problem}{later}", file=sys.stderr)

    def report_progress() -> None:
        channel.send(
            "task_progress",
            kind="map",
            index=index,
            attempt=attempt,
            fraction=0.0,
            records=marks.records,
            bad=marks.bad,
        )

    decode = _decoder(spec.input_format)
    mapper = functions.mapper

    def unencodable(error: UnencodableRecordError | NanKeyError, batch: list[SourceRecord]) -> Exception:
        """What to report for a pane whose output the shuffle cannot encode, or whose key holds a float NaN: the
        combine call by its key, or the map call that yielded it with its record, found after the failure only (the
        loop checks nothing per pair) by mapping again the records of the last poll, then those of a replayable
        source from its start; else ``error`` (a socket's record read before the last poll is gone)."""
        if isinstance(error, UnencodableRecordError) and error.source == "combine":
            return unencodable_combine_call(error)

        def calls(records: Iterable[SourceRecord], placed: Source) -> Iterator[tuple[tuple[float, Any], Any]]:
            for record in records:
                if record.error is not None:
                    continue
                try:
                    value = decode(record)
                    if value is not BLANK:
                        yield (event_time(record, value), value), (placed.where(record) or url, value)
                except StreamRecordError:
                    continue

        found = first_unencodable_call(mapper, calls(batch, source))
        if found is None and source.replayable:
            found = _read_again(
                url,
                spec.options.get("max_line_bytes"),
                options.directory,
                lambda again, records: first_unencodable_call(mapper, calls(records, again)),
            )
        if found is None:
            return error
        (place, value), pair = found
        return unencodable_map_call(Place(f"{place}: {shown(value)}"), pair)

    shed_panes: set[int] = set()
    late_lines: list[str] = []
    """Late records not yet appended to ``OUT/_late/map-NNNNN.jsonl`` (written once per poll)."""
    call_user("setup", job.setup)
    batch: list[SourceRecord] = []
    """The records of the latest poll (kept for :func:`unencodable`)."""
    try:
        if lost_announce is not None:
            marks.sealed = lost_announce[1]
            note_progress()
            register(None, 0, empty_runs(), marks.sealed, lost=list(lost_announce))
        while True:
            take_control()
            if stopping or source.exhausted:
                break
            if pause_pane is not None and marks.sealed > pause_pane:
                # Every pane the reducers need for their next window is sealed: wait for them to free memory.
                memory_pauses += 1
                hold_input(lambda: pause_pane is not None and marks.sealed > pause_pane)
            if unsent > options.pause_threshold:
                # Pane flow control: reducers are behind; stop taking input rather than buffering it.
                pauses += 1
                hold_input(lambda: unsent > options.pause_threshold)
            # Still over the threshold after a hold's 0.5 s: read nothing this round (the source's own queue, socket
            # buffer or file keeps the records), but seal, checkpoint and report below as usual. A memory pause is
            # not held this way: an event-time map must read past the paused pane to seal it (its watermark comes
            # from the records), and the reducer frees memory only once that window closes.
            held_back = unsent > options.pause_threshold
            batch = [] if held_back else source.poll(poll_budget(), 0.05)
            for record in batch:
                if record.error is not None:
                    drop_bad(record.error)
                    continue
                try:
                    value = decode(record)
                    if value is BLANK:
                        continue  # no record, as in batch: takes no position, counts nowhere
                    stamp = event_time(record, value)
                except StreamRecordError as error:
                    drop_bad(f"{where(record, marks.ordinal + marks.bad)} {error}")
                    continue
                position = (
                    stamp if window.unit == "time" else marks.ordinal if window.unit == "records" else marks.offset
                )
                pane = window.pane_of(position)
                marks.ordinal += 1
                marks.offset += record.nbytes
                if pane < marks.sealed or pane < open_from:
                    marks.late += 1
                    late_lines.append(to_json({"event_time": stamp, "pane": pane, "value": value}) + "\n")
                    continue
                if options.max_latency is not None and window.unit == "time":
                    deadline = (pane + 1) * window.pane / 1_000_000 + options.lateness + options.max_latency
                    now = time.time()  # per record: mapping a poll's records can take seconds (a slow map)
                    if time_field is not None and now > deadline and now - stamp < 86_400:
                        marks.shed += 1  # its windows were emitted on the latency bound already: load shedding
                        shed_panes.add(pane)
                        continue
                marks.records += 1
                if stamp > marks.max_event:
                    marks.max_event = stamp
                    if stamp >= moves_at:
                        open_from = _event_watermark_pane(window, options, stamp)
                        moves_at = _next_pane_start(window, options, open_from)
                pairs = None
                try:
                    pairs = mapper(stamp, value) or ()
                    if marks.records & 4095 == 1:  # the first record's pairs and every 4,096th (shuffle.pairs)
                        pairs = checked_pairs(pairs)
                    buffer.add(pane, pairs)
                except Exception as error:
                    place = where(record, marks.ordinal - 1 + marks.bad)  # (ordinal counts it already)
                    folded = fold_error(buffer.aggregate, buffer.failed_pair, not_pairs("map", error, pairs))
                    if isinstance(error, UnhashableKeyError):
                        folded = error.with_traceback(None)  # the key, not a value: its frames are the engine's
                    raise UserCodeError("map", folded, Place(f"{place}: {shown(value)}")) from error
            if late_lines:
                _append(output, late_path, late_lines)
                late_lines.clear()
            watermark = _watermark(window, options, marks, time_field)
            if shed_panes:  # tell the reducers which panes lost records to shedding: C2 shows them. Before the
                # seal (and a retry's announcement of lost panes, which seals too): a reducer may emit a window as
                # soon as the seal past it arrives, and must know of its shed panes by then or it calls the window
                # complete (or its shed panes lost).
                register(None, 0, empty_runs(), marks.sealed, shed=sorted(shed_panes))
                shed_panes.clear()
            if unheard_from is not None and watermark > max(unheard_from, marks.sealed):
                # Lost up to the first pane holding a record this attempt heard (sealed as usual below): a
                # lost pane is sealed with the announcement, so one with data must not be in it.
                heard = min((pane for pane in buffer.panes if pane >= unheard_from), default=watermark)
                lost_to = min(watermark, heard)
                if lost_to > max(unheard_from, marks.sealed):
                    marks.sealed = lost_to
                    note_progress()
                    register(None, 0, empty_runs(), marks.sealed, lost=[unheard_from, lost_to])
                unheard_from = None
            seal(watermark)
            take_control()
            mono = time.monotonic()
            if mono - last_checkpoint >= options.checkpoint_seconds and unsent == 0:
                checkpoint()
                last_checkpoint = mono
            if mono - last_report >= PROGRESS_SECONDS:
                last_report = mono
                report_progress()
        natural = marks.sealed
        seal(FOREVER, final=True, natural=natural if stopping else None)
        checkpoint()
        call_user("teardown", job.teardown)
    except (UnencodableRecordError, NanKeyError) as error:
        report_progress()
        raise unencodable(error, batch) from None
    except Exception:
        report_progress()  # the failure report carries no counters: the job's report needs what this one read
        raise
    finally:
        source.close()
        output.close()
    return {
        "spills": seq,
        "counters": {
            "map_input_records": marks.records,
            "map_output_records": buffer.output_records,
            "combine_output_records": buffer.combine_output_records,
            "spill_files": seq,
            "late_records": marks.late,
            "shed_records": marks.shed,
            "bad_records_skipped": marks.bad,
            "stream_pauses": pauses,
            "stream_memory_pauses": memory_pauses,
            "stream_paused_ms": int(paused_seconds * 1000),
            "max_unsent_panes": max_unsent,
            "stream_seconds": int(time.time() - started),
        },
        "user_counters": job.take_counters(),
    }


SEARCH_SECONDS = 30.0
"""How long a stream map that failed on an output the shuffle cannot encode reads its source again for the record."""
Found = TypeVar("Found")


def _read_again(
    url: str,
    max_line_bytes: int | None,
    directory: str | None,
    search: Callable[[Source, Iterator[SourceRecord]], Found],
) -> Found | None:
    """``search(source, its records)`` over replayable source ``url`` opened again: its records from its start (a
    map resumed from a checkpoint holds panes mapped before it), as fast as it reads them (a replay's rate paces
    the stream, not this), until it has no more now or :data:`SEARCH_SECONDS` have passed; None if it cannot be
    opened."""
    try:
        again = open_source(url, max_line_bytes, directory)
    except Exception:  # noqa: BLE001 (any failure to reopen: the report of the unencodable output goes on without)
        return None
    if isinstance(again, ReplaySource):
        again.rate = None
    deadline = time.monotonic() + SEARCH_SECONDS

    def records() -> Iterator[SourceRecord]:
        while time.monotonic() < deadline and (polled := again.poll(POLL_RECORDS, 0.05)):
            yield from polled

    try:
        return search(again, records())
    finally:
        again.close()


def _cut_late_file(late_path: Path, size: int | None) -> None:
    """Cut a map's ``_late`` file to the ``size`` it had at the checkpoint a retry resumes from (None: a checkpoint
    that did not note it, left as it is; a file already no longer than that is left too)."""
    if size is None:
        return
    try:
        if late_path.stat().st_size > size:
            os.truncate(late_path, size)
    except FileNotFoundError:
        pass


def _map_checkpoints(folder: Path) -> list[Path]:
    """A map's checkpoints ``ATTEMPT-SEQ.msgpack``, oldest first, in the order of their numbers: their names sort
    so only while the numbers keep their width (8 digits of spills: about 11 days of 10 ms panes), past which the
    newest would sort first, be removed as stale and a retry resume from an older one."""
    return sorted(folder.glob("*.msgpack"), key=_checkpoint_number)


def _checkpoint_number(path: Path) -> tuple[int, int]:
    attempt, seq = path.stem.split("-")
    return int(attempt), int(seq)


def _usable_map_checkpoint(folder: Path, covered: tuple[int, int] | None, replayable: bool) -> dict[str, Any] | None:
    """The newest map checkpoint ``ATTEMPT-SEQ.msgpack`` (covering spills ``< SEQ`` of that attempt) whose spills
    are all in every reducer's checkpoint. A source that cannot re-read takes the newest checkpoint whatever the
    reducers hold: going back would not bring the records back."""
    for path in reversed(_map_checkpoints(folder)):
        attempt, seq = _checkpoint_number(path)
        last_spill = (attempt, seq - 1)
        if not replayable or (covered is not None and last_spill <= tuple(covered)):
            return _read_state(path)
    return None


def _count_from_note(marks: _MapState, note: dict[str, Any] | None, late_path: Path) -> None:
    """Set a retry's counts (of a source that cannot re-read) to what the failed attempts had counted as they last
    noted their progress (``note``): the records of the panes they sealed, which the reducers may hold (the records
    of their open panes are lost with them, their panes ``L``), the late records, and the bad ones. The checkpoint's
    counts are older (every seal since wrote a note) and count the records of the checkpoint's open panes, which the
    retry drops: one that took them reported fewer records read than its windows held (834 of 952 after a killed
    worker) and fewer late records than ``_late`` lists. Late lines appended after the note are counted from the
    ``_late`` file, which keeps them (a source that cannot re-read will not send them again)."""
    if note is None or "records" not in note:  # (a note written before it carried counts)
        return
    marks.records, marks.bad = int(note["records"]), max(marks.bad, int(note["bad"]))
    late, since = int(note["late"]), int(note["late_bytes"])
    try:
        with open(late_path, "rb") as file:
            file.seek(since)
            late += sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 16), b""))
    except FileNotFoundError:
        pass
    marks.late = late


def _restart_pane(window: WindowSpec, options: StreamOptions, arrival_time: bool, noted: dict[str, Any] | None) -> int:
    """The first pane a retry of a map whose source cannot re-read may put records in: past every pane an earlier
    attempt sealed or read into (``noted``: it may have sent them, or lost records in them), and for arrival times
    not before ``now - lateness`` (what arrives now belongs there)."""
    restart = -FOREVER
    if noted is not None:
        sealed, top = int(noted["sealed"]), int(noted["top"])
        restart = (top if sealed >= FOREVER else max(sealed, top)) + 1  # a finished source sealed FOREVER
    if window.unit == "time" and arrival_time:
        restart = max(restart, window.pane_of(time.time() - options.lateness))
    return restart


def _event_watermark_pane(window: WindowSpec, options: StreamOptions, max_event: float) -> int:
    """The first pane open to a record, given the greatest event time read before it."""
    return window.pane_of(max_event - options.lateness) if max_event > float("-inf") else -FOREVER


def _next_pane_start(window: WindowSpec, options: StreamOptions, open_from: int) -> float:
    """The least event time that can move the watermark past pane ``open_from``, less 10 microseconds (pane
    bounds are whole microseconds of floats near 1.7e9 s, which round): below it, ``open_from`` cannot move."""
    if open_from == -FOREVER:
        return float("-inf")
    return (open_from + 1) * window.pane / 1_000_000 + options.lateness - 1e-5


def _watermark(window: WindowSpec, options: StreamOptions, marks: _MapState, time_field: str | None) -> int:
    """The first pane still open."""
    if window.unit == "time":
        if time_field is not None:
            return max(marks.sealed, _event_watermark_pane(window, options, marks.max_event))
        return window.pane_of(time.time() - options.lateness)
    if window.unit == "records":
        return marks.ordinal // window.pane
    return marks.offset // window.pane


BLANK = object()
"""What :func:`_decoder` gives for a blank text line of a ``jsonl`` job: no record, as in a batch job's input (not a
bad record either)."""


def _decoder(input_format: str) -> Callable[[SourceRecord], Any]:
    """A record's value as the job's ``map`` gets it, as a batch job's input format gives it: for a ``jsonl`` job,
    a text record parsed as JSON (arrays as tuples at any depth), for a ``csv`` job, the list of a CSV row's fields
    (:class:`StreamRecordError` if it is neither; :data:`BLANK` for a blank line, an empty one for CSV); msgpack
    frames arrive decoded."""
    if input_format not in ("jsonl", "csv"):
        return lambda record: record.value

    def decode_jsonl(text: str) -> Any:
        if not text.strip(JSON_WHITESPACE):  # (as in batch: a line of a no-break space is not JSON, a bad record)
            return BLANK
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise StreamRecordError(f"is not valid JSON ({error}): {text!r:.200}") from None
        except (ValueError, RecursionError) as error:  # an int of more than 4,300 digits, arrays nested too deep
            raise StreamRecordError(f"cannot be read as JSON ({error}): {text!r:.200}") from None
        return freeze_json(value)

    def decode_csv(text: str) -> Any:
        if not text:
            return BLANK
        try:
            return next(csv.reader([text], strict=True))
        except csv.Error as error:
            raise StreamRecordError(f"is not a CSV row ({error}; each row must be one line): {text!r:.200}") from None

    parse = decode_jsonl if input_format == "jsonl" else decode_csv
    return lambda record: parse(record.value) if isinstance(record.value, str) else record.value


# Stream reduce -----------------------------------------------------------------------------------------------------
def run_stream_reduce(
    spec: Any,
    index: int,
    attempt: int,
    num_maps: int,
    channel: TaskChannel,
    host: str = "127.0.0.1",
    sources_gone: Iterable[int] = (),
) -> dict[str, Any]:
    """Run one stream reduce attempt until every source ended and every window was written. ``sources_gone``: the
    sources gone for good before this attempt started (given up, ended unstarted by a stop, or ended with the spills
    it kept lost with its worker), of which it hears no ``stream_source_gone``."""
    job, functions = instantiate(spec)
    output = OutputGuard(spec.output)
    options = StreamOptions.from_spec(spec)
    window = options.window
    aggregate = functions.reduce_aggregate
    lists = aggregate is None
    merge = _merge_function(aggregate, functions.combiner)
    uncombine = getattr(job, "uncombine", None)
    assembler = WindowAssembler(
        window,
        num_maps,
        lists,
        merge,
        options.fidelity,
        options.max_latency,
        _user_uncombine(uncombine) if callable(uncombine) else None,
    )
    state_path = _state_path(spec.output, f"reduce-{index:05d}")
    saved = _read_state(state_path) if attempt > 0 else None
    # Summed over reducers into the job's counters (``max_*``: the largest): each says what it counts job-wide.
    # Windows written are counted once, by the coordinator (the report's ``continuous.windows_written``); here the
    # part files. ``late_records`` is the maps' (records sent to ``_late/map-*``); a late cell reaches every
    # partition, so its records count per partition under their own name. Shed panes reach every partition too:
    # partition 0 counts them.
    counters = {
        "window_parts_written": 0,
        "late_cells": 0,
        "late_cell_records": 0,
        "duplicate_cells": 0,
        "checkpoints": 0,
        "shed_panes": 0,
        "memory_pauses": 0,
        "max_held_bytes": 0,
    }
    delta_seq = 0
    processed: dict[int, tuple[int, int]] = {}
    """Per map, the (attempt, seq) of the last spill this reducer took: what a checkpoint covers."""
    unconfirmed: list[tuple[int, str, dict[str, Any]]] = []
    """The window reports (``window_done`` without its rows, ``windows_skipped``) sent since the newest checkpoint
    the coordinator confirmed, each after the number of the checkpoints before it. Reports go through the worker,
    and die with it: a retry that restored a checkpoint written after them sends them again, or the coordinator
    never heard of those windows (their folders had part files and no ``_window.json``, and the job's report
    counted six windows fewer). The coordinator ignores a report it has."""
    late_path = Path(spec.output) / "_late" / f"reduce-{index:05d}.jsonl"
    if attempt > 0:
        # Every spill since the checkpoint (or the start) is pushed again, and the late cells among them listed
        # again: the failed attempt's lines past the checkpoint go first (a retry listed 4 late cells of 9 twice).
        _cut_late_file(late_path, 0 if saved is None else saved.get("late_bytes"))
    if saved is not None:
        assembler.restore(saved["assembler"])
        counters.update(saved["counters"])
        delta_seq = saved["delta_seq"]
        processed = {int(m): (a, s) for m, a, s in saved["processed"]}
        unconfirmed = [(int(n), str(kind), dict(fields)) for n, kind, fields in saved.get("unconfirmed", [])]
    for source in sources_gone:
        assembler.source_gone(int(source))
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    pull = context.socket(zmq.ROUTER)
    port = pull.bind_to_random_port(f"tcp://{host}")
    sink = None
    if options.sink:
        sink = context.socket(zmq.PUB)
        sink.setsockopt(zmq.LINGER, 1000)  # let the last windows out when the job ends
        sink.connect(options.sink)
    pending_delta: list[str] = []
    windows_since_checkpoint = 0
    last_checkpoint = time.monotonic()
    poller = zmq.Poller()
    poller.register(pull, zmq.POLLIN)
    poller.register(channel.control_socket, zmq.POLLIN)
    received_runs = 0
    received_bytes = 0
    # Pane flow control (C2): past this many bytes of held cells, ask the maps to pause ahead of the next window.
    memory_budget = max(1, spec.reduce_memory // DECODED_EXPANSION)
    pause_sent: int | None = None
    # Test-only: slow this reducer down per received run, to exercise the maps' pane flow control.
    test_delay = float(os.environ.get("HOP_TEST_SLOW_REDUCE_SECONDS", "0"))

    def checkpoint() -> None:
        nonlocal delta_seq, pending_delta, windows_since_checkpoint, last_checkpoint
        if pending_delta and options.deltas:
            delta = Path(spec.output) / "_checkpoints" / "deltas" / f"delta-{index:05d}-{delta_seq:08d}.jsonl"
            _write_atomically(output, delta, "".join(pending_delta).encode())
            delta_seq += 1
        pending_delta = []
        counters["checkpoints"] += 1
        state = {
            "assembler": assembler.to_state(),
            "counters": counters,
            "late_bytes": late_path.stat().st_size if late_path.exists() else 0,
            "delta_seq": delta_seq,
            "processed": [[m, a, s] for m, (a, s) in processed.items()],
            "unconfirmed": [[n, kind, fields] for n, kind, fields in unconfirmed],
        }
        _write_atomically(output, state_path, codec.packb(state))
        windows_since_checkpoint, last_checkpoint = 0, time.monotonic()
        channel.send(
            "stream_checkpoint",
            index=index,
            attempt=attempt,
            processed=state["processed"],
            checkpoint=counters["checkpoints"],
        )

    def report_window(kind: str, fields: dict[str, Any]) -> None:
        """Send a window report, and keep it (without rows) until a checkpoint after it is confirmed."""
        channel.send(kind, index=index, attempt=attempt, **fields)
        unconfirmed.append((counters["checkpoints"], kind, {k: v for k, v in fields.items() if k != "rows"}))

    def send_unconfirmed() -> None:
        """A retry's first words: the reports its checkpoint keeps, the rows read again from their part files."""
        for _, kind, fields in unconfirmed:
            if kind == "window_done":
                part = Path(spec.output) / "windows" / fields["label"] / f"part-{index:05d}"
                try:
                    with open(part, encoding="utf-8", opener=output.opener) as file:
                        rows = [line.split("\t", 1) for line in file.read().split("\n")[:-1]]
                except FileNotFoundError:
                    rows = []
                fields = {**fields, "rows": largest_rows(rows, ROWS_REPORTED)[0]}
            channel.send(kind, index=index, attempt=attempt, **fields)

    def write_window(result: WindowResult) -> None:
        """Write this partition's part of a window and report it; a window with no record of this partition
        (another may hold some) has no part file but is reported all the same."""
        nonlocal windows_since_checkpoint
        label = window.label(result.window)
        lines: list[str] = []
        output_records = 0
        folder = Path(spec.output) / "windows" / label
        part = folder / f"part-{index:05d}"
        # A retry redoes the windows since its checkpoint, some of which an earlier attempt emitted and the
        # coordinator summarized (its _window.json is there, and it ignores this report): that window is final,
        # and its part stays as written. The retry may hold less of it (the spills of a map that had ended went
        # with their worker) or more (cells that came too late for it): rewritten, a window said "complete" lost
        # a third of its rows.
        final = attempt > 0 and output.exists(folder / "_window.json")
        if result.groups:  # (records count the whole pane: a partition given none of its keys has no groups)
            temporary = folder / f".part-{index:05d}.tmp-{attempt}"
            ordered, _ = sort_keys(list(result.groups))
            groups = ((key, result.groups[key] if lists else [result.groups[key]]) for key in ordered)
            try:
                # (a full disk named by the part, not by its hidden temporary name; as any failed attempt, this one
                # is retried from its checkpoint, which redoes this window: it is not lost, nor reported unwritten)
                with _writing_part(part):
                    output.folder(folder)
                    # (reduced all the same when final: a reduce that keeps state across windows sees every window)
                    output_records = reduce_to_file(groups, functions.reducer, temporary, opener=output.opener)
            except BaseException:
                with contextlib.suppress(OSError):  # (a window folder a full disk could not make has no file)
                    output.unlink(temporary)  # the user's reduce failed: no half-written file in the window
                raise
            if final:
                output.unlink(temporary)
            else:
                _publish(output, temporary, part)
                counters["window_parts_written"] += 1
        if result.groups or final:
            try:
                with open(part, encoding="utf-8", opener=output.opener) as file:
                    # (at "\n" only: a key or value holds U+2028 and its kin as they are, where str.splitlines
                    # splits, and a row cut there failed the job)
                    lines = file.read().split("\n")[:-1]
            except FileNotFoundError:  # (final, and the partition had no record of the window then)
                lines = []
            if final:
                output_records = len(lines)
        for line in lines:
            key_text, value_text = line.split("\t", 1)
            pending_delta.append(
                f'{{"window_start": {result.start}, "window_end": {result.end}, "partition": {index}, '
                f'"key": {key_text}, "value": {value_text}}}\n'
            )
        windows_since_checkpoint += 1
        report = {
            "window": result.window,
            "label": label,
            "start": result.start,
            "end": result.end,
            "records": result.records,
            "reason": result.reason,
            "fidelity": result.fidelity,
            "scoreboard": result.scoreboard,
            "output_records": output_records,
            "emitted_at": time.time(),
        }
        every_row = [line.split("\t", 1) for line in lines]
        report["rows"], report["rows_ranked"] = largest_rows(every_row, ROWS_REPORTED)
        report_window("window_done", report)
        if sink is not None and not final:  # the window's output stream, every row: each window once, as written
            report["rows"] = every_row
            del report["rows_ranked"]
            sink.send(codec.packb({"job_id": spec.job_id, "partition": index, **report}))

    pieces = RunPieces()  # a pane's run comes in pieces (shuffle.pusher): put together before it is taken

    def take_run(header: dict[str, Any], run: bytes) -> None:
        nonlocal received_runs, received_bytes
        source = int(header["map"])
        mark = (int(header["attempt"]), int(header["seq"]))
        if mark <= processed.get(source, (-1, -1)):
            counters["duplicate_cells"] += 1
            return  # pushed again after a restart, and this state already reflects it
        processed[source] = mark
        received_runs += 1
        received_bytes += len(run)
        sealed = int(header.get("sealed", -FOREVER))
        if "lost" in header:
            lo, hi = header["lost"]
            assembler.add_lost(source, int(lo), int(hi))
        if "shed" in header:
            new = set(header["shed"]) - assembler.sources[source].shed
            assembler.add_shed(source, header["shed"])
            if index == 0:  # every partition hears of every shed pane: one counts them for the job
                counters["shed_panes"] += len(new)
        if header.get("natural") is not None:
            assembler.source_stopping(source, int(header["natural"]))
        pane = header.get("pane")  # (None: no pane, only marks; a pane before 1970 in event time is negative)
        if pane is not None:
            pane = int(pane)
            outcome = assembler.add_cell(source, pane, int(header["pane_records"]), iter_run(run), sealed, len(run))
            if outcome == "duplicate":
                counters["duplicate_cells"] += 1
            elif outcome == "late":
                counters["late_cells"] += 1
                counters["late_cell_records"] += int(header["pane_records"])
                windows = [window.label(w) for w in assembler.late_windows(pane)]
                late = {"source": source, "pane": pane, "records": header["pane_records"], "windows": windows}
                _append(output, late_path, [json.dumps(late) + "\n"])
        else:
            assembler.add_seal(source, sealed)
        if header.get("final"):
            assembler.source_ended(source, header.get("natural"))

    try:
        channel.send("reducer_ready", index=index, attempt=attempt, address=f"tcp://{host}:{port}")
        send_unconfirmed()
        call_user("setup", job.setup)
        while not assembler.finished:
            events = dict(poller.poll(100))
            if pull in events:
                for _ in range(256):
                    try:
                        frames = pull.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    received = run_message(frames)
                    if received is None:
                        continue  # not a run piece (something else connected to this port): nobody to answer
                    sender, header, data = received
                    if (header["job_id"], header["partition"]) == (spec.job_id, index):
                        # (else not ours: a connection to a dead reduce attempt, reconnected to this port)
                        key = (header["map"], header["attempt"], header["seq"])
                        run = pieces.add(key, header.get("offset", 0), header.get("size", len(data)), data)
                        if run is not None:
                            assert isinstance(run, bytes)  # (no memory limit: never a file)
                            take_run(header, run)
                    if test_delay:
                        time.sleep(test_delay)
                    pull.send_multipart([sender, b"%d" % header["seq"]])
            # Every turn, not only on a control event: receive() also ends this task if its worker died.
            while (control := channel.receive(0)) is not None:
                if control.get("job_id") == spec.job_id and control["type"] == "stream_source_gone":
                    assembler.source_gone(int(control["index"]))
                elif (control.get("job_id"), control["type"], control.get("attempt")) == (
                    spec.job_id,
                    "stream_checkpoint_seen",
                    attempt,
                ):
                    # The coordinator took every report sent before that checkpoint (they come in order).
                    seen = int(control["checkpoint"])
                    unconfirmed[:] = [entry for entry in unconfirmed if entry[0] >= seen]
            for closing in assembler.due(time.time()):
                if closing.empty:  # windows holding no data cell here: one step and one report, however many
                    assembler.skip(closing.window, closing.end)
                    report_window("windows_skipped", closing._asdict())
                else:
                    write_window(assembler.emit(closing.window, closing.reason))
            held = assembler.held_bytes
            counters["max_held_bytes"] = max(counters["max_held_bytes"], held)
            if held > memory_budget and pause_sent is None:
                pause_sent = assembler.pause_pane()
                if pause_sent is not None:
                    counters["memory_pauses"] += 1
                    channel.send("stream_pause", index=index, attempt=attempt, pane=pause_sent)
            elif pause_sent is not None and held <= memory_budget * 0.8:
                pause_sent = None
                channel.send("stream_pause", index=index, attempt=attempt, pane=None)
            idle = time.monotonic() - last_checkpoint
            if windows_since_checkpoint >= options.checkpoint_windows or (
                windows_since_checkpoint and idle >= options.checkpoint_seconds
            ):
                checkpoint()
        checkpoint()
        call_user("teardown", job.teardown)
    finally:
        pull.close(linger=0)
        output.close()
        if sink is not None:
            sink.close(linger=1000)
    return {
        "path": None,
        "first_run_at": None,
        "counters": {
            **counters,
            "late_cells_total": assembler.late_cells,
            "spills_pushed": received_runs,
            "shuffle_bytes": received_bytes,
        },
        "user_counters": job.take_counters(),
    }


def _user_uncombine(uncombine: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """The job's ``uncombine``, its exceptions the user's (shown with the key, not retried as an engine crash)."""

    def call(key: Any, current: Any, old: Any) -> Any:
        try:
            return uncombine(key, current, old)
        except Exception as error:
            raise UserCodeError("uncombine", error, shown_key(key)) from error

    return call


def _merge_function(
    aggregate: Aggregate | None, combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]]] | None
) -> Callable[[Any, Any, Any], Any]:
    """``merge(key, a, b)`` for the assembler: the aggregate's merge, or the job's combiner on two values."""
    if aggregate is not None:
        merge = aggregate.merge
        return lambda key, a, b: merge(a, b)

    def combine_two(key: Any, a: Any, b: Any) -> Any:
        if combiner is None:
            raise ValueError("a differential window (uncombine) needs a combiner to add values")
        try:
            values = [value for _, value in combiner(key, [a, b])]
        except Exception as error:
            raise UserCodeError("combine", error, shown_key(key)) from error
        if len(values) != 1:
            raise ValueError(f"uncombine needs a combiner that yields one value per key; key {key!r} gave {values!r}")
        return values[0]

    return combine_two
