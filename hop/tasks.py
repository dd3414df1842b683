"""Map and reduce task attempts, as they run inside a task process.

Each function runs one attempt to completion and returns the ``*_done`` message fields; the events it must send
while running (spills registered, progress, the reducer's address) go through the ``TaskChannel`` it is given, so
this module does no socket work of its own beyond the reduce task's shuffle input.

Errors in user code are raised as :class:`UserCodeError` with the user's traceback and the record (file and byte
offset for maps, key for reduces); the task process turns them into a ``task_failed`` message.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import zmq

from hop import faults
from hop.aggregates import Aggregate, as_aggregate
from hop.inputs import (
    MAX_LINE_BYTES,
    BadLine,
    InputError,
    ReadLimit,
    Split,
    compressed_text_bytes,
    iter_records,
)
from hop.job import Job, Step, TaskIdentity, identity_map, identity_reduce
from hop.jobspec import JobSpec, load_job_class
from hop.jsonline import NotJSONError, to_json, to_json_column, to_json_key
from hop.online.reducer import ReducerSnapshots
from hop.outputs import OutputGuard, OutputWriteError, output_write_error, writing_output
from hop.peak_memory import PeakMemory
from hop.pipe import PipeBroken, PipeReceiver, PipeSender
from hop.protocol import unsent_spills
from hop.usercode import (
    TASK_FAILURES,
    NoStandardInputError,
    UserCodeError,
    call_user,
    describe_record,
    fold_error,
    sendable,
    shown_key,
)
from hop.usertrace import error_text, not_pairs, raised_importing, user_traceback
from shuffle import codec
from shuffle.buffer import (
    FIRST_SPILL_DIVISOR,
    AggregateValueError,
    CombinerKeyError,
    MapOutputBuffer,
    PartitionError,
    UnhashableKeyError,
    other_key_error,
)
from shuffle.flow import FlowController
from shuffle.fold import FoldingRunStore
from shuffle.keys import NanKeyError, holds_nan, is_key
from shuffle.pairs import checked_pairs
from shuffle.pieces import RunPieces
from shuffle.pusher import run_message
from shuffle.runs import UnencodableRecordError
from shuffle.spill import SpillFile, SpillWriteError
from shuffle.store import RunStore

PROGRESS_SECONDS = 0.5
TAIL_SPLIT_MIN_BYTES = 1 << 10
"""A map does not cut off a rest of the chunk it reads shorter than this (``split_off``): whether the rest is worth
a map of its own is the coordinator's call, by time (``hop.scheduler.TAIL_SPLIT_SECONDS``)."""
FAULT_SEND_SECONDS = 0.2
"""Fault injection only (``HOP_FAULT``): how long a task that kills itself after a message lets it leave first."""


class TaskChannel(Protocol):
    """How a running task talks to its worker (and through it, the coordinator)."""

    def send(self, msg_type: str, /, **fields: Any) -> None: ...

    def receive(self, timeout: float) -> dict[str, Any] | None: ...

    @property
    def control_socket(self) -> zmq.Socket: ...


@dataclass
class _StepFunctions:
    mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]] | None]
    combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]]] | None
    reducer: Callable[[Any, Iterable[Any]], Iterable[tuple[Any, Any]] | None]
    reduce_aggregate: Aggregate | None = None
    """Set when the reduce is a built-in aggregate: the reducer can fold runs as maps commit."""
    step: Step | None = None
    """The step itself, for its optional init/final hooks."""


def instantiate(spec: JobSpec) -> tuple[Job, _StepFunctions]:
    """Create the user's job object and pick the functions of the step this spec runs."""
    job = load_job_class(spec.job_code)()
    job.step_number = spec.step
    step: Step = job.resolved_steps()[spec.step]
    # A combiner with init/final hooks is not run (hop.job.Step): combining is optional.
    combiner: Any = None if step.combiner_init or step.combiner_final else step.combiner
    reducer: Any = step.reducer or identity_reduce
    reduce_aggregate = as_aggregate(reducer)
    if reduce_aggregate is not None:
        # The shuffle carries the aggregate's states: combine with it, and finish them in the reduce.
        combiner = combiner if combiner is not None else reduce_aggregate
        reducer = reduce_aggregate.as_reducer()
    if combiner is not None and as_aggregate(combiner) is None:
        combiner = _guarded_combiner(combiner, step.show_key)
    return job, _StepFunctions(step.mapper or identity_map, combiner, reducer, reduce_aggregate, step)


def _hook_output(step: Step | None, where: str) -> list[tuple[Any, Any]]:
    """Run ``step``'s init or final hook named ``where`` (user code: ``mapper_init``, ``reducer_final``...) and
    return what it yielded; nothing where the step has none."""
    hook: Callable[[], Iterable[tuple[Any, Any]] | None] | None = getattr(step, where) if step is not None else None
    if hook is None:
        return []
    output = None
    try:
        output = hook()
        return [(key, value) for key, value in checked_pairs(output or ())]  # (here: a non-pair is shown at its yield)
    except TASK_FAILURES as error:
        raise UserCodeError(where, not_pairs(where, error, output), None) from error


def _append_pairs(
    output: Path, pairs: list[tuple[Any, Any]], where: str, opener: Callable[[str, int], int] | None = None
) -> int:
    """Append what ``where`` (a reducer_final hook) yielded to the output file (opened with ``opener``)."""
    with open(output, "a", encoding="utf-8", newline="\n", opener=opener) as file:
        _write_pairs(file, pairs, where)
    return len(pairs)


def _write_pairs(file: IO[str], pairs: list[tuple[Any, Any]], where: str) -> None:
    """Write ``json(key) TAB json(value)`` lines of a hook's pairs; a str that cannot be UTF-8 names its key."""
    for key, value in pairs:
        try:
            file.write(f"{to_json_key(key)}\t{to_json(value)}\n")
        except UnicodeEncodeError as error:
            raise UserCodeError(where, not_utf8_output(error), shown_key(key)) from error
        except NotJSONError as error:
            raise UserCodeError(where, error, shown_key(key)).without_traceback() from error


class NotUTF8OutputError(ValueError):
    """Output holding a str that UTF-8 cannot encode; the message says so (the frame writing it, all its traceback
    has, is the engine's)."""


def not_utf8_output(error: UnicodeEncodeError) -> NotUTF8OutputError:
    """Output that cannot be written as UTF-8: a str the user's code made of bytes it decoded with
    ``surrogateescape``, or a JSON input's lone surrogate (``"\\ud800"``) passed on (a text file's lines are valid
    UTF-8, so the engine never makes one)."""
    return NotUTF8OutputError(f"its output cannot be written as UTF-8 ({error}); yield valid text")


def _guarded_combiner(
    combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]] | None], show_key: Callable[[Any], str] = repr
) -> Callable[[Any, list[Any]], Iterable[tuple[Any, Any]]]:
    """``combiner`` whose failures name the call by its key (as ``show_key`` shows it: :attr:`hop.job.Step.show_key`)
    and whose output is checked: pairs (a non-pair is shown at its yield), with the key it was given."""

    def combine(key: Any, values: list[Any]) -> Iterable[tuple[Any, Any]]:
        output = None
        try:
            output = combiner(key, values)
            # Read as pairs here, while a generator is suspended at the yield that gave a non-pair: not_pairs shows
            # that line (the buffer's own check, after, would show only the engine's frames).
            pairs = [(out_key, out_value) for out_key, out_value in checked_pairs(output or ())]
        except TASK_FAILURES as error:
            raise UserCodeError("combine", not_pairs("combine", error, output), shown_key(key, show_key)) from error
        for out_key, _ in pairs:
            if out_key is not key and out_key != key:  # (checked here too, to show the keys as show_key does)
                raise other_key_error(key, out_key, show_key)
        return pairs

    return combine


NOT_A_BAD_RECORD = (SystemExit, NoStandardInputError, UnhashableKeyError, AggregateValueError)
"""What a map raises that ``--skip-bad-records`` does not skip, whatever record it was at: ``sys.exit()``, reading
``sys.stdin``, a key the buffer cannot hold, a value the aggregate refuses (raised after the map call returned)."""


def run_map(
    spec: JobSpec,
    index: int,
    attempt: int,
    chunks: list[tuple[int, Split]],
    spill_dir: Path,
    channel: TaskChannel,
    resume: dict[str, Any] | None = None,
    pipe: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run one map attempt over its input ``chunks`` (``(chunk id, split)``, in order; ``hop.planning``); each spill
    is announced to the worker as soon as it is written.

    A map of a pipelined job's later stage has no chunks but ``pipe`` (``host``, ``committed``): it reads the
    previous job's reduce partition ``index`` as that reduce attempt streams it, or its committed file
    (``hop.pipe``), and reports which upstream attempt it read (``upstream_attempt``).

    Online jobs (``options["online"]``) spill at the end of every chunk, and every spill says which chunk it holds
    and whether it ends it (``meta``), so a reducer knows exactly which chunks its data covers (``hop.online``).

    Checkpoints: whenever every spill written so far is registered (none held back by flow control), the attempt
    sends ``map_checkpoint`` with the number of spills, the input records they cover and the counters so far. A
    retry given ``resume`` (the checkpoint of a failed attempt) keeps that attempt's registered spills, skips the
    records they cover without mapping them, numbers its own spills after them, and adds the checkpoint's counters
    to its own, so the committed result counts every record once. A map reading a pipe, or with mapper hooks, or
    reading files whole, sends none.
    """
    cpu_began = time.process_time()  # the slot's process runs one task after another: count this one's
    job, functions = instantiate(spec)
    job.task_identity = TaskIdentity("map", index, attempt, spec.job_id)
    prefix: dict[str, Any] = resume or {
        "spills": 0,
        "records": 0,
        "counters": {},
        "user_counters": {},
        "bad_records": [],
    }
    job.input_file = chunks[0][1].path if chunks else None
    job.input_split = chunks[0][1] if chunks else None  # (a pipe is no byte range of a file: None)
    if pipe is not None:
        # The upstream partition's part file, which the pipe streams as its reduce writes it: the file a --blocking
        # run's map reads whole, and the job's output read on its own. It was None, so a job taking a name from it
        # (a date, a part number) failed run pipelined alone.
        job.input_file = pipe.get("file")
    attempt_dir = spill_dir / f"map-{index:05d}-{attempt}"
    attempt_dir.mkdir(parents=True, exist_ok=True)
    num_reduces = spec.num_reduces
    partition_method = job.partition

    def partitioner(key: Any) -> int:
        try:
            return partition_method(key, num_reduces)
        except TASK_FAILURES as error:
            raise UserCodeError("partition", error, shown_key(key)) from error

    registered = prefix["spills"]
    unsent_now = 0
    checkpoints_sent = 0

    online = bool(spec.options.get("online"))
    consumed_before = 0
    """Input records of earlier chunks (online jobs drive the buffer chunk by chunk)."""
    spill_meta: dict[Path, dict[str, Any]] = {}
    """Online jobs: the chunk each spill holds, taken when it is written (flow control may register it later)."""
    # A retry's runs name the kept spills it resumes after: reducers count those with it in snapshots.
    chunk_meta: dict[str, Any] = {"resumes": resume["segments"]} if resume is not None else {}

    def register(spill: SpillFile) -> None:
        nonlocal registered, unsent_now
        meta = spill_meta.pop(spill.path, None)
        channel.send("spill", index=index, attempt=attempt, seq=registered, path=str(spill.path), meta=meta)
        registered += 1
        unsent_now += 1  # until the worker says otherwise
        if registered == prefix["spills"] + 1 and faults.wanted("map", "pushed", index, attempt):
            _wait_until_pushed(unsent, spec.mode)
            faults.inject("map", "pushed", index, attempt)

    pipe_notices: list[dict[str, Any]] = []

    def take_control() -> None:
        """Read the worker's messages: spill status for flow control, pipe notices for the pipe reader, requests
        to split off the rest of the input."""
        nonlocal unsent_now
        while (status := channel.receive(0)) is not None:
            if status.get("type") == "spill_status" and status.get("index") == index:
                unsent_now = unsent_spills(status, registered)
            elif status.get("type") == "pipe_file":
                pipe_notices.append(status)
            elif status.get("type") == "split_off" and (status.get("index"), status.get("attempt")) == (index, attempt):
                split_off(float(status.get("keep", 0.5)))

    sizes: list[int] = []
    """Bytes of each input chunk (the last one less what it split off)."""
    reading: list[tuple[int, ReadLimit] | None] = [None]
    """The chunk being read (its number) and its read limit, while a map reading files reads one: what it can hand
    over (``split_off``)."""
    kept_chunks = [len(chunks)]
    """How many of its chunks this attempt reads: fewer once it handed the later ones over."""

    def split_off(keep: float) -> None:
        """Answer the coordinator's ``split_off``: end the chunk being read ``keep`` of the way through what is left
        of it (unless that would leave less than ``TAIL_SPLIT_MIN_BYTES``) and hand that rest over with the chunks
        after it: ``chunk`` (its number) and ``cut`` (where it now ends, or ``None``: read whole). Declined
        (``chunk`` ``None``) between chunks, at the end, or with nothing to hand over; for good (``never``) by a map
        whose step has ``mapper_init``/``mapper_final``: its rest would be a map of its own running them again, so
        a hook reporting its map (what it counted) gave another output as a straggler was split or not (and than
        Spark, which runs the maps planned). Sent before the map can commit, on the same channel."""
        if hooked:
            channel.send("map_split", index=index, attempt=attempt, chunk=None, cut=None, never=True)
            return
        now = reading[0]
        number = cut = None
        if now is not None:
            number, limit = now
            rest = limit.cut(keep, TAIL_SPLIT_MIN_BYTES)
            if rest is not None:
                cut = rest.start
                sizes[number] -= rest.length
                current[0] = limit.split  # (progress and error messages name the split as it now is)
                job.input_split = limit.split  # (and the job, from its next record on)
            elif number == kept_chunks[0] - 1:
                number = None  # nothing after it either
        if number is not None:
            kept_chunks[0] = number + 1
            sizes[number + 1 :] = [0] * (len(sizes) - number - 1)
        channel.send("map_split", index=index, attempt=attempt, chunk=number, cut=cut)

    def unsent() -> int:
        """This attempt's spills not yet pushed to every reducer: the worker's latest count and those on their way."""
        take_control()
        return unsent_now

    def next_pipe_notice() -> dict[str, Any] | None:
        take_control()
        return pipe_notices.pop(0) if pipe_notices else None

    flow = FlowController(
        register,
        unsent,
        functions.combiner,
        attempt_dir,
        unsent_threshold=int(spec.options.get("unsent_threshold", 2)),
        enabled=spec.mode == "pipelined",
        may_merge=not online,  # merging spills would mix chunks, and snapshots count chunks
    )

    # A mapper_init/mapper_final hook keeps state across the attempt (hop.job.Step): a retry must start over. So
    # must one of a map reading a file whole, whose spills cut its one call (_whole_file_batches), and one reading a
    # pipe: its records are an upstream reduce attempt's output, which a retry may get from another attempt, in
    # another order within a key, so a count of records read names other records there.
    hooked = functions.step is not None and bool(functions.step.mapper_init or functions.step.mapper_final)
    resumable = not hooked and not spec.reads_whole_files and pipe is None

    def spill_counters() -> dict[str, Any]:
        """The counters of this attempt's spills and flow control: a checkpoint carries them too, since its
        spills are part of the output of the retry that resumes after them."""
        return {
            "spill_files": buffer.counters.spill_files,
            "spill_bytes": buffer.counters.spill_bytes,
            "map_spill_seconds": round(buffer.counters.spill_seconds, 3),
            "spills_held_back": flow.counters.spills_held_back,
            "max_spills_held": flow.counters.max_spills_held,
            "spill_hold_seconds": round(flow.counters.hold_seconds, 3),
            "spills_merged_map_side": flow.counters.spills_merged_map_side,
            "map_merge_records_in": flow.counters.merge_records_in,
            "map_merge_records_out": flow.counters.merge_records_out,
        }

    def spilled(spill: SpillFile) -> None:
        nonlocal checkpoints_sent
        if online:
            spill_meta[spill.path] = dict(chunk_meta)
        flow.offer(spill)
        if flow.held or not resumable:
            return  # some output is not registered (or hooks hold state): no consistent point to resume from
        counters = buffer.counters
        channel.send(
            "map_checkpoint",
            index=index,
            attempt=attempt,
            spills=registered,
            records=prefix["records"] + consumed_before + buffer.records_consumed,
            offset=buffer.current_record[0] if buffer.current_record else None,
            next_spill_records=buffer.next_spill_records,
            counters=_add_counts(
                prefix["counters"],
                {
                    "map_input_records": consumed_before + buffer.records_consumed,
                    "map_output_records": counters.map_output_records,
                    "combine_input_records": counters.combine_input_records,
                    "combine_output_records": counters.combine_output_records,
                    **spill_counters(),
                },
            ),
            user_counters=job.counters_so_far(),
            bad_records=prefix["bad_records"] + bad_records,
        )
        checkpoints_sent += 1
        if checkpoints_sent == 1 and faults.wanted("map", "checkpointed", index, attempt):
            _wait_until_pushed(unsent, spec.mode)
            # A SIGKILL drops whatever ZeroMQ's I/O thread has not yet sent; in blocking mode nothing above waits,
            # and the checkpoint was lost in about one run of five (the retry then started over). This point is
            # "after the checkpoint was sent": give it time to leave.
            time.sleep(FAULT_SEND_SECONDS)
            faults.inject("map", "checkpointed", index, attempt)

    default_partition = type(job).partition is Job.partition
    buffer = MapOutputBuffer(
        attempt_dir,
        num_reduces,
        None if default_partition else partitioner,
        functions.combiner,
        spill_records=spec.spill_records,
        # Reducers start on the first spill, so make it small (HOP: push map output as early as possible). Not
        # in a retry that resumes after kept spills: its spills must cut the input where a first attempt would,
        # so it goes on with the spill interval the checkpoint recorded.
        first_spill_records=(
            max(1, spec.spill_records // FIRST_SPILL_DIVISOR) if resume is None else resume.get("next_spill_records")
        ),
        on_spill=spilled,
        # A reducer that folds runs into a hash map (its reduce is an aggregate) does not need them sorted.
        sort_runs=functions.reduce_aggregate is None,
    )
    bad_records: list[dict[str, Any]] = []
    call_user("setup", job.setup)
    if resume is not None:
        # The checkpoint's counters include what the failed attempt's setup counted: this one's would count twice.
        job.take_counters()
        for group, names in prefix["user_counters"].items():
            for name, value in names.items():
                job.increment_counter(group, name, value)
    init_pairs = _hook_output(functions.step, "mapper_init")
    if init_pairs:  # (a map with mapper_init never resumes: see hop.job.Step)
        buffer.collect(init_pairs)
    mapper = functions.mapper
    skip_limit = int(spec.options.get("skip_bad_records", 0))
    current: list[Split] = [chunks[0][1] if chunks else Split("", 0, 0)]
    """The split being read, for error messages and progress."""
    on_bad: BadLine | None = None
    read_line: list[tuple[int, str]] | None = None
    """The line of the record read last, in a format parsing lines (jsonl, csv, output): a bad one is listed so."""
    if skip_limit:
        read_line = [] if spec.input_format != "text" else None
        mapper = _skipping_mapper(mapper, current, skip_limit, bad_records, read_line)
        # Lines the resumed attempt already listed: read again while this one skips the records its spills cover.
        listed = {(entry["file"], entry["offset"]) for entry in prefix["bad_records"]}

        def on_bad(offset: int, line: str, error: str) -> None:
            """An input line that cannot be decoded or parsed: skipped like a record whose map raises."""
            if (current[0].path, offset) in listed:
                return
            entry = {
                "file": current[0].path,
                "offset": offset,
                "record": line[:1000],
                "error": error,
                "traceback": None,
            }
            _note_bad_record(bad_records, skip_limit, entry, None)

    whole_file_mapper = mapper
    if spec.reads_whole_files:
        mapper = _batch_of_pairs  # (the records are batches of the one call's pairs: _whole_file_batches)
    max_line_bytes = int(spec.options.get("max_line_bytes", MAX_LINE_BYTES))
    sizes[:] = [_split_bytes(split) for _, split in chunks]
    keyed_records = spec.input_format == "output"
    """Whether a record's key is the record's own (a hop job's output read back), not its line's byte offset."""
    bytes_done = 0
    last_report = time.monotonic()

    consumed = 0
    fault_checked = False
    """Whether the map has read 4,096 records, where the ``running`` fault point is (``hop.faults``)."""

    def chunk_records(split: Split, limit: ReadLimit | None = None) -> Iterator[tuple[Any, Any]]:
        current[0] = split
        job.input_file, job.input_split = split.path, split
        if spec.reads_whole_files:
            return _whole_file_batches(whole_file_mapper, split.path)
        encoding = spec.options.get("fallback_encoding")
        return iter_records(split, spec.input_format, max_line_bytes, on_bad, encoding, read_line, limit)

    def drive(loop: Iterator[int]) -> int:
        """Run the buffer's map loop to its end, turning errors into ``UserCodeError`` and reporting progress."""
        nonlocal last_report, fault_checked
        consumed = 0
        while True:
            try:
                consumed = next(loop)
            except StopIteration:
                return consumed
            except (
                UserCodeError,
                TooManyBadRecords,  # (not the record being read: it lists the bad ones)
                InputError,
                PipeBroken,
                CombinerKeyError,
                NanKeyError,  # found as a spill is sorted: the record being read then is not the one that made it
                PartitionError,
                UnencodableRecordError,
                SpillWriteError,
            ):
                raise
            except TASK_FAILURES as error:  # the user's map raised, or its output could not be folded
                where = _describe_record(current[0], buffer.current_record, spec)
                problem = not_pairs("map", error, buffer.failed_output)
                if isinstance(error, UnhashableKeyError):
                    problem = error.with_traceback(None)  # found in the engine's loop: its frames say nothing
                elif problem is error:
                    problem = fold_error(buffer.combiner if buffer.folding else None, buffer.failed_pair, error)
                failure = UserCodeError("map", problem, where)
                # The map raised on its record (what --skip-bad-records skips), unless the error is the buffer's (a
                # key it cannot hold) or the fold's (an aggregate refusing a value: a built-in one's refusal is an
                # AggregateValueError, a job's own aggregate's merge is its code).
                failure.skippable = (
                    problem is error
                    and not isinstance(error, NOT_A_BAD_RECORD)
                    and not raised_importing(error)
                    and (not buffer.folding or type(buffer.combiner).__module__ == Aggregate.__module__)
                )
                raise failure from error
            if not fault_checked and consumed_before + consumed >= 4096:  # mid-input for most splits
                fault_checked = True
                faults.inject("map", "running", index, attempt)
            if reading[0] is not None:
                take_control()  # (a split_off is answered within a few records, not at the next report)
            now = time.monotonic()
            if now - last_report >= PROGRESS_SECONDS:
                last_report = now
                flow.poll()
                offset = buffer.current_record[0] if buffer.current_record else 0
                if keyed_records and reading[0] is not None:
                    offset = reading[0][1].position  # (where its reader is: the record's key is no offset)
                split = current[0]
                within = _fraction(split, offset) * _split_bytes(split)
                fraction = min(1.0, (bytes_done + within) / max(1, sum(sizes)))
                piped = {}
                if receiver is not None:
                    # A pipe's size is known here only once the map reads the committed file: the coordinator
                    # makes the map's progress of this and the upstream reduce's (JobState.map_task_fraction).
                    fraction = receiver.taken_fraction()
                    piped = {"taken": receiver.taken_bytes(), "from_file": receiver.file_bytes > 0}
                channel.send(
                    "task_progress",
                    kind="map",
                    index=index,
                    attempt=attempt,
                    fraction=fraction,
                    records=consumed_before + consumed,
                    **piped,
                )

    receiver: PipeReceiver | None = None
    reread: list[tuple[Split, Callable[[], Iterator[tuple[Any, Any]]]]] | None = None
    """A pipe's records that can be read again, for an output the shuffle cannot encode (chunks are read again)."""
    if pipe is not None:
        receiver = PipeReceiver(pipe.get("host", "127.0.0.1"))
        channel.send("pipe_ready", index=index, attempt=attempt, address=receiver.address)
        current[0] = Split(f"pipe:{spec.options.get('upstream')}/part-{index:05d}", 0, 0)
        reread = [(current[0], receiver.recent_records)]
        try:
            pairs = receiver.records(channel.control_socket, next_pipe_notice, pipe.get("committed"), read_line)
            consumed = drive(buffer.run_map(pairs, mapper))
        except (UnencodableRecordError, NanKeyError) as error:
            raise unencodable_map_output(spec, chunks, error, reread) from None
        finally:
            receiver.close()
    elif not online:

        def chunk_readers() -> Iterator[Iterator[tuple[Any, Any]]]:
            """Each chunk's records in turn; what follows a ``yield`` runs once that chunk is read to its end."""
            nonlocal bytes_done
            for number, (_, split) in enumerate(chunks):
                if number >= kept_chunks[0]:
                    break  # handed over (split_off)
                if split.length < 0:  # (a compressed file is read whole)
                    yield chunk_records(split)
                else:
                    limit = ReadLimit(split)
                    reading[0] = (number, limit)
                    yield chunk_records(split, limit)
                    reading[0] = None
                bytes_done += sizes[number]

        # Chained in C: a generator yielding each record from its chunk's reader resumed a Python frame per record
        # (about 2% of a word count's map CPU).
        records: Iterator[tuple[Any, Any]] = itertools.chain.from_iterable(chunk_readers())
        if prefix["records"]:
            records = itertools.islice(records, prefix["records"], None)  # covered by the kept spills
        consumed = drive(buffer.run_map(records, mapper))
    else:
        to_skip = prefix["records"]  # covered by the kept spills of the attempt this one resumes after
        for (chunk_id, split), size in zip(chunks, sizes, strict=True):
            records = chunk_records(split)
            partial = False
            if to_skip:
                skipped = sum(1 for _ in itertools.islice(records, to_skip))
                to_skip -= skipped
                if to_skip:
                    bytes_done += size
                    continue  # the whole chunk is in kept spills
                partial = skipped > 0
            chunk_meta.update(chunk=chunk_id, end=False, partial=partial)
            chunk_consumed = drive(buffer.run_map(records, mapper))
            chunk_meta["end"] = True
            buffer.records_consumed = chunk_consumed
            buffer.spill(force=True)  # even an empty chunk: reducers must know it was read
            consumed_before += chunk_consumed
            buffer.records_consumed = 0
            bytes_done += size
        consumed = consumed_before
    if spec.reads_whole_files:
        consumed = len(chunks)  # (its records were batches of each file's pairs)
    final_pairs = _hook_output(functions.step, "mapper_final")
    if final_pairs:
        buffer.collect(final_pairs)
    call_user("teardown", job.teardown)
    try:
        buffer.spill()
    except (UnencodableRecordError, NanKeyError) as error:
        if reread is None:
            raise  # (a map of chunks reads them again: hop.taskproc)
        raise unencodable_map_output(spec, chunks, error, reread) from None
    flow.finish()
    faults.inject("map", "done", index, attempt)
    counters = buffer.counters
    return {
        "spills": registered,
        "counters": _add_counts(
            prefix["counters"],
            {
                "map_input_records": consumed,
                "map_output_records": counters.map_output_records,
                "combine_input_records": counters.combine_input_records,
                "combine_output_records": counters.combine_output_records,
                **spill_counters(),
                "bad_records_skipped": len(prefix["bad_records"]) + len(bad_records),
                "map_resumed_records": prefix["records"],
                "pipe_streamed_bytes": receiver.received_bytes if receiver is not None else 0,
                "pipe_file_bytes": receiver.file_bytes if receiver is not None else 0,
                "map_cpu_seconds": round(time.process_time() - cpu_began, 3),
            },
        ),
        "user_counters": job.take_counters(),
        "bad_records": prefix["bad_records"] + bad_records,
        "upstream_attempt": receiver.upstream_attempt if receiver is not None else None,
    }


WHOLE_FILE_BATCH = 1024
"""Pairs of the map of a file read whole that reach the buffer as one record (:func:`_whole_file_batches`)."""


def _whole_file_batches(
    mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]] | None], path: str
) -> Iterator[tuple[int, list[tuple[Any, Any]]]]:
    """The map of a file read whole (:attr:`JobSpec.reads_whole_files`), its one call ``mapper(0, path)``, as
    records ``(0, batch of its pairs)`` for the buffer (mapped by :func:`_batch_of_pairs`): it spills between them,
    so that the call's output, a whole file's, need not fit in memory as one record's does. A failure is the map's,
    at that file (a pair that is none shown at its yield)."""
    output = None
    try:
        output = mapper(0, path)
        pairs = checked_pairs(output or ())
        while batch := list(itertools.islice(pairs, WHOLE_FILE_BATCH)):
            yield 0, batch
    except TASK_FAILURES as error:
        if isinstance(error, GeneratorExit):
            raise  # (closed at its yield by the task: the file's call did not fail)
        problem = not_pairs("map", error, output)
        failure = UserCodeError("map", problem, f"{path} (the whole file)")
        # (--skip-bad-records skips such a file, as it skips a record)
        failure.skippable = problem is error and not isinstance(error, NOT_A_BAD_RECORD) and not raised_importing(error)
        raise failure from error


def _batch_of_pairs(offset: int, batch: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    return batch


def _add_counts(base: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Counters of a checkpoint (``base``) and of the attempt resuming after it: summed, ``max_*`` ones the
    maximum (as ``hop.scheduler`` totals them over tasks)."""
    total = dict(base)
    for name, value in more.items():
        total[name] = max(total.get(name, 0), value) if name.startswith("max_") else total.get(name, 0) + value
    return total


class TooManyBadRecords(Exception):
    """More records failed than ``--skip-bad-records`` allows in one task. ``str()`` lists the first ten bad records
    (file and byte offset, or key, and the error); ``user_traceback`` is the last one's, if the user's code raised."""

    def __init__(self, message: str, user_traceback: str | None) -> None:
        super().__init__(message)
        self.user_traceback = user_traceback


def _skipping_mapper(
    mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]] | None],
    current: list[Split],
    limit: int,
    bad_records: list[dict[str, Any]],
    read_line: list[tuple[int, str]] | None = None,
) -> Callable[[Any, Any], Iterable[tuple[Any, Any]]]:
    """Wrap ``mapper`` so a record that raises is skipped (its partial output discarded) and recorded;
    ``current[0]`` is the split being read. A record is listed as its line, as read: a text record is one; for a
    format that parses lines, ``read_line`` holds the offset and line of the record read last (as
    :func:`hop.inputs.iter_records` and a pipe's :meth:`hop.pipe.PipeReceiver.records` fill it)."""

    def skipping(key: Any, value: Any) -> Iterable[tuple[Any, Any]]:
        try:
            return list(mapper(key, value) or ())  # all of the record's output, or none of it
        except TASK_FAILURES as error:
            if isinstance(error, SystemExit) or raised_importing(error):  # (an import: the code's fault, not the
                raise  # record's, as every record would fail so; sys.exit() is never skipped)
            offset, record = read_line[0] if read_line else (key, str(value))
            entry = {
                "file": current[0].path,
                "offset": offset,
                "record": record[:1000],
                "error": error_text(error),
                "traceback": user_traceback(error),
            }
            _note_bad_record(bad_records, limit, entry, error)
            return ()

    return skipping


def _note_bad_record(
    bad_records: list[dict[str, Any]], limit: int, entry: dict[str, Any], cause: BaseException | None, kind: str = "map"
) -> None:
    """Keep a skipped map record (or, for ``kind="reduce"``, a skipped key); past ``limit`` of them, fail the task
    listing the first ten."""
    bad_records.append({name: sendable(item) if isinstance(item, str) else item for name, item in entry.items()})
    entry = bad_records[-1]
    if len(bad_records) > limit:
        if kind == "map":
            listing = "; ".join(f"{b['file']} byte offset {b['offset']}: {b['error']}" for b in bad_records[:10])
        else:
            listing = "; ".join(f"key {b['key']}: {b['error']}" for b in bad_records[:10])
        what = "records" if kind == "map" else "keys"
        raise TooManyBadRecords(
            f"{len(bad_records)} bad {what} in one {kind} task, more than --skip-bad-records {limit}: {listing}",
            entry.get("traceback"),
        ) from cause


def unencodable_map_output(
    spec: JobSpec,
    chunks: list[tuple[int, Split]],
    error: UnencodableRecordError | NanKeyError,
    reread: Sequence[tuple[Split, Callable[[], Iterable[tuple[Any, Any]]]]] | None = None,
) -> Exception:
    """What to report for a map task whose output the shuffle could not encode or sort (``error``, raised by a
    spill: an unencodable key or value, or a NaN key): the combine call that yielded it (by key), or the map call
    that did and its input record (file, offset), found by mapping the task's input again (``chunks``, or for a map
    that read a pipe ``reread``: the records it can read again), checking every pair until one fails. On this
    failure path only: the map loop checks nothing per pair. Where no record is found, ``error`` said of the map (a
    pipe's records read too long ago; a map that yields something else the second time) or, if the step has them,
    of its mapper_init and mapper_final hooks (whose output the map's own record does not explain)."""
    if isinstance(error, UnencodableRecordError) and error.source == "combine":
        return unencodable_combine_call(error)
    job, functions = instantiate(spec)
    piped = reread is not None  # (its split only names the pipe: no byte range of a file)
    if reread is None:
        reread = [(split, functools.partial(_chunk_records, spec, split)) for _, split in chunks]

    def calls() -> Iterator[tuple[tuple[Any, Any], tuple[Split, tuple[Any, Any]]]]:
        job.setup()
        for split, records in reread:
            job.input_file, job.input_split = split.path, None if piped else split
            for record in records():
                yield record, (split, record)

    found = first_unencodable_call(functions.mapper, calls())
    if found is None:
        if isinstance(error, NanKeyError):
            return error
        step = functions.step
        hooked = step is not None and (step.mapper_init or step.mapper_final)
        return error.by("mapper_init/mapper_final" if hooked else "map")
    (split, record), pair = found
    return unencodable_map_call(_describe_record(split, record, spec), pair)


def _chunk_records(spec: JobSpec, split: Split) -> Iterator[tuple[Any, Any]]:
    """The records of ``split`` as the map read them (bad lines left out: the map skipped or failed on them)."""
    if spec.reads_whole_files:
        return iter(((0, split.path),))
    max_line_bytes = int(spec.options.get("max_line_bytes", MAX_LINE_BYTES))
    fallback = spec.options.get("fallback_encoding")
    return iter_records(split, spec.input_format, max_line_bytes, lambda *bad: None, fallback)


def first_unencodable_call(
    mapper: Callable[..., Iterable[tuple[Any, Any]] | None], calls: Iterable[tuple[tuple[Any, ...], Any]]
) -> tuple[Any, tuple[str, Any, Any]] | None:
    """The first of ``calls`` (the map's arguments, and what names that input record for the caller) whose map
    output holds a key or value the shuffle cannot encode, or a key holding a float NaN (which it refuses): what
    names it and ``(what, item, key)`` of the pair;
    None if none does or the map (or reading the records) fails another way, as it did not the first time. Run
    only after a spill failed: the map is called again, and every pair encoded. Batch maps and stream maps
    (``hop.stream.tasks``) use it."""
    try:
        for arguments, record in calls:
            for key, value in mapper(*arguments) or ():
                for what, item in (("key", key), ("value", value)):
                    if not _packs(item) or (what == "key" and (not is_key(item) or holds_nan(item))):
                        return record, (what, item, key)
    except Exception:
        return None
    return None


def unencodable_map_call(record: str, found: tuple[str, Any, Any]) -> UserCodeError:
    """The map call at ``record`` (words naming it) yielded ``found`` (``(what, item, key)``), which the shuffle
    cannot encode (or, a key holding a float NaN, refuses): the error to report, without a traceback (no frame of
    the user's raised it)."""
    what, item, key = found
    problem: Exception = UnencodableRecordError(what, item, key, "map")
    if what == "key" and _packs(item) and is_key(item) and holds_nan(item):
        problem = NanKeyError(item)
    return UserCodeError("map", problem, record).without_traceback()


def unencodable_combine_call(error: UnencodableRecordError) -> UserCodeError:
    """The combine call by its key (no record to name: a combiner's input is the map's output) whose output the
    shuffle cannot encode: the error to report, without a traceback."""
    return UserCodeError("combine", error, shown_key(error.key)).without_traceback()


def _packs(item: Any) -> bool:
    try:
        codec.packb(item)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _describe_record(split: Split, record: tuple[Any, Any] | None, spec: JobSpec) -> str:
    """Where a failing record is: file and byte offset (the line, for text input), or for a later step's map (it
    reads the step before's output: streamed, or its ``output`` lines) the record's key; a file read whole
    (:attr:`JobSpec.reads_whole_files`) is its one record."""
    if spec.reads_whole_files:
        return f"{split.path} (the whole file)"
    return describe_record(split.path, record, spec.input_format == "output" or split.path.startswith("pipe:"))


def _split_bytes(split: Split) -> int:
    if split.length >= 0:
        return split.length
    try:
        return compressed_text_bytes(split.path, os.path.getsize(split.path))  # (as hop.planning weighs it)
    except OSError:
        return 0


def _fraction(split: Split, position: Any) -> float:
    """How much of ``split`` a map reading its record at byte ``position`` has read; 0.5 ("running") where that is
    not known: a record without an offset, a compressed file whose text's length is not known."""
    if not isinstance(position, int):
        return 0.5
    if split.length >= 0:
        return max(0.0, min(1.0, (position - split.start) / max(1, split.length)))
    # A compressed file, read whole: the offsets are in its text, whose length a gzip file's trailer gives
    # (compressed_text_bytes, when it is more than the file's size; else it is the file's). Short of 1 while it
    # runs: the trailer's is its last member's (a file of several, concatenated, holds more).
    try:
        size = os.path.getsize(split.path)
    except OSError:
        return 0.5
    text = compressed_text_bytes(split.path, size)
    return 0.5 if text <= size else max(0.0, min(0.99, position / text))


def run_reduce(
    spec: JobSpec,
    index: int,
    attempt: int,
    num_maps: int,
    work_dir: Path,
    channel: TaskChannel,
    host: str = "127.0.0.1",
    committed: list[tuple[int, int, int, list[list[int]]]] = (),  # type: ignore[assignment]
    chunk_strata: list[str] | None = None,
    pipe_to: str | None = None,
    chunk_sizes: list[int] | None = None,
    derived_snapshots: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """Run one reduce attempt: receive runs until every map has committed, merge, reduce, write the output.

    While receiving it answers ``snapshot`` requests (``hop.online.reducer``); ``chunk_strata`` (the stratum of
    every input chunk, by chunk id) is given for online jobs, whose snapshots carry estimates, with ``chunk_sizes``
    (their bytes, which Sum and Count estimates scale by). ``derived_snapshots``: the requests (``seq``, ``label``,
    ``source``) of snapshots recomputed from the job before's (a pipeline's later job) its partition owes as it
    starts; every one it was asked is answered before its output is committed.

    In a pipeline (``options["pipe_output"]``) the output is also streamed, as it is written, to the next job's map
    for this partition (``hop.pipe``): at ``pipe_to``, or wherever a ``pipe_at`` message points.
    """
    cpu_began = time.process_time()
    memory = PeakMemory()
    # OUT as the attempt finds it at its start: one replaced by then is caught by the coordinator, which looks at it
    # every turn of its loop. The part is written relative to it, held open: one replaced later (even between a
    # check and a write) gets neither OUT/_temporary nor this attempt's output, which another run's _temporary
    # there took by name.
    out_dir = OutputGuard(spec.output)
    job, functions = instantiate(spec)
    job.task_identity = TaskIdentity("reduce", index, attempt, spec.job_id)
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    pull = context.socket(zmq.ROUTER)  # workers' DEALERs push runs; each run is acknowledged (credit flow)
    port = pull.bind_to_random_port(f"tcp://{host}")
    store_dir = Path(tempfile.mkdtemp(prefix=f"reduce-{index:05d}-{attempt}-", dir=work_dir))
    store: RunStore
    if functions.reduce_aggregate is not None:
        store = FoldingRunStore(store_dir, functions.reduce_aggregate, memory_limit=spec.reduce_memory)
    else:
        store = RunStore(store_dir, memory_limit=spec.reduce_memory)
    for map_index, map_attempt, spills, segments in committed:
        store.commit(map_index, map_attempt, spills, segments)
    online = bool(spec.options.get("online"))
    # A snapshot calls the job's reduce (and a later step's map) on the data so far, before the final reduce: on an
    # instance of its own, as a task attempt of its own would (setup() before, teardown() after, reducer_init and
    # reducer_final around the reduce calls, their pairs among the snapshot's rows; made as the
    # snapshot starts: most attempts take none, and a job's __init__ may be costly), so that neither what its calls
    # count (increment_counter) nor the state they leave in self (a reducer_final yielding what the reduce counted)
    # reaches the attempt's counters and output, or the next snapshot's calls, and a reduce reading what setup()
    # made works in it too (it failed every snapshot).
    for_snapshots: list[tuple[Job, _StepFunctions]] = []

    def set_up_for_snapshot() -> None:
        snapshot_job, snapshot_functions = instantiate(spec)
        snapshot_job.task_identity = job.task_identity
        for_snapshots[:] = [(snapshot_job, snapshot_functions)]  # (a failed snapshot's is dropped: not torn down)
        call_user("setup", snapshot_job.setup)

    def tear_down_for_snapshot() -> None:
        snapshot_job, _ = for_snapshots.pop()
        call_user("teardown", snapshot_job.teardown)

    def snapshot_hook(name: str) -> list[tuple[Any, Any]]:
        # (a reduce task's reducer_init and reducer_final, around the snapshot's reduce calls, on its instance)
        return _hook_output(for_snapshots[0][1].step, name)

    snapshots = ReducerSnapshots(
        spec.output,
        index,
        store,
        lambda key, values: for_snapshots[0][1].reducer(key, values),
        functions.reduce_aggregate,
        chunk_strata if online else None,
        job.key_stratum if type(job).key_stratum is not Job.key_stratum else None,
        float(spec.options.get("confidence", 0.95)),
        map_task=functools.partial(snapshot_map_task, spec),
        chunk_sizes=chunk_sizes if online else None,
        attempt=attempt,
        held=out_dir,
        prepare=set_up_for_snapshot,
        finish=tear_down_for_snapshot,
        hook=snapshot_hook,
    )
    if snapshots.coverage is not None:
        for map_index, map_attempt, _, segments in committed:
            snapshots.coverage.commit(map_index, map_attempt, segments)
    output = Path(spec.output) / "_temporary" / f"part-{index:05d}.attempt-{attempt}"
    sender: PipeSender | None = None
    if spec.options.get("pipe_output"):
        sender = PipeSender(output, attempt, flush=lambda: None, opener=out_dir.opener)
        if pipe_to:
            sender.connect(pipe_to)
    try:
        channel.send("reducer_ready", index=index, attempt=attempt, address=f"tcp://{host}:{port}")
        first_run_at = _receive_runs(
            spec,
            index,
            attempt,
            num_maps,
            store,
            pull,
            channel,
            snapshots,
            sender,
            sent_before=[(map_index, map_attempt) for map_index, map_attempt, _, _ in committed],
            owed=derived_snapshots,
        )
        input_complete_at = time.time()  # every map committed and its runs are in: the shuffle's end for us
        # The shuffle half done (reported every PROGRESS_SECONDS while it runs: a short one never was).
        channel.send("task_progress", kind="reduce", index=index, attempt=attempt, fraction=0.5, records=0)
        faults.inject("reduce", "received", index, attempt)
        call_user("setup", job.setup)
        init_pairs = _hook_output(functions.step, "reducer_init")
        out_dir.folder(output.parent)  # (an output removed or replaced meanwhile is not written: it fails)
        bad_records: list[dict[str, Any]] = []
        skip_limit = int(spec.options.get("skip_bad_records", 0))
        follow: Callable[[], None] | None = None
        tick: Callable[[IO[str] | None], None] | None = None
        if sender is not None:
            follow = _pipe_follower(sender, channel, spec.job_id)
            tick = _pipe_ticker(sender, follow)
        columns = None
        if isinstance(store, FoldingRunStore) and not init_pairs and not skip_limit:
            # An aggregate's output needs no reduce call per key: format and write it column by column.
            columns = _finished_columns(store)
        if columns is not None:
            lines = len(columns[0])
            report = _reduce_progress(channel, index, attempt, lambda written: written / max(1, lines))
            fault = None
            if faults.wanted("reduce", "merging", index, attempt):
                fault = functools.partial(faults.inject, "reduce", "merging", index, attempt)
            batches = itertools.count(1)

            def after_batch(file: IO[str]) -> None:
                if tick is not None:
                    tick(file)
                report(next(batches) * WRITE_BATCH)

            with writing_output(output):
                output_records = _write_columns(output, *columns, fault, after_batch, opener=out_dir.opener)
        else:
            groups = store.grouped()
            report = _reduce_progress(channel, index, attempt, store.input_fraction)
            if faults.wanted("reduce", "merging", index, attempt):
                groups = _fault_after_first(groups, index, attempt)
            with writing_output(output):  # (closing the file writes its last lines: outside reduce_to_file's loop)
                output_records = reduce_to_file(
                    groups,
                    functions.reducer,
                    output,
                    skip_limit,
                    bad_records,
                    tick,
                    first_pairs=init_pairs,
                    progress=report,
                    show_key=functions.step.show_key if functions.step else repr,
                    opener=out_dir.opener,
                )
        final_pairs = _hook_output(functions.step, "reducer_final")
        if final_pairs:
            with writing_output(output):
                output_records += _append_pairs(output, final_pairs, "reducer_final", out_dir.opener)
        call_user("teardown", job.teardown)
        piped = None
        if sender is not None:
            # Its output is whole: the downstream map reading it shows how much of it it took (map_task_fraction).
            written = out_dir.size(output)
            channel.send(
                "task_progress", kind="reduce", index=index, attempt=attempt, fraction=1.0, records=0, written=written
            )
            # Follows a pipe_at that came during the last groups, or while it waits for acknowledgements (the
            # downstream attempt it streamed to was replaced); never longer than finish's timeout.
            piped = {"address": sender.address, "complete": sender.finish(follow=follow)}
        faults.inject("reduce", "commit", index, attempt)
        return {
            "path": str(output),
            "first_run_at": first_run_at,
            "input_complete_at": input_complete_at,
            "memory": memory.report(),
            "counters": {
                # Records that reached the reduce side (whether or not the reduce read them all); a folding store
                # merged most before the reduce ran.
                "reduce_input_records": (
                    store.folded_records if isinstance(store, FoldingRunStore) else store.committed_records()
                ),
                "reduce_output_records": output_records,
                "spills_pushed": store.received_runs,
                "shuffle_bytes": store.received_bytes,
                "reduce_runs_dropped": store.dropped_runs,
                "reduce_disk_bytes_peak": store.disk_bytes_peak,
                "bad_records_skipped": len(bad_records),
                "reduce_cpu_seconds": round(time.process_time() - cpu_began, 3),
            },
            "user_counters": job.take_counters(),
            "bad_records": bad_records,
            "piped": piped,
        }
    finally:
        if sender is not None:
            sender.close()
        snapshots.close()
        store.close()
        shutil.rmtree(store_dir, ignore_errors=True)
        pull.close(linger=0)
        out_dir.close()


def snapshot_map_task(
    spec: JobSpec, records: Iterable[tuple[Any, Any]], input_file: str | None = None
) -> Iterator[tuple[int, Any, Any]]:
    """One map task of a pipeline's later step over ``records`` (one partition of the step before, read from the
    part file ``input_file`` of its snapshot: the job's ``input_file``, as a map reading the pipe has its part
    file's), for a snapshot recomputed from that step's (``hop.online.reducer``): on a job instance of its own, the
    map's hooks run as :func:`run_map` runs them (``setup()``, ``mapper_init``, the map per record,
    ``mapper_final``, ``teardown()``), so that a map using what its ``mapper_init`` made works in a snapshot too (it
    failed them all), and neither what the calls count nor the state they leave reaches the reduce attempt's job.
    Gives ``(partition, key, value)`` of the output, partitioned as the map task would (by its instance's
    ``partition``; every key to 0 with one reducer, where ``partition`` is not called)."""
    job, functions = instantiate(spec)
    job.input_file = input_file
    step = functions.step
    num_reduces = spec.num_reduces

    def partition(key: Any) -> int:
        return 0 if num_reduces == 1 else job.partition(key, num_reduces)

    call_user("setup", job.setup)
    for key, value in _hook_output(step, "mapper_init"):
        yield partition(key), key, value
    mapper = functions.mapper
    for record in records:
        for key, value in checked_pairs(mapper(*record) or ()):
            yield partition(key), key, value
    for key, value in _hook_output(step, "mapper_final"):
        yield partition(key), key, value
    call_user("teardown", job.teardown)


def _receive_runs(
    spec: JobSpec,
    index: int,
    attempt: int,
    num_maps: int,
    store: RunStore,
    pull: zmq.Socket,
    channel: TaskChannel,
    snapshots: ReducerSnapshots,
    pipe_sender: PipeSender | None = None,
    sent_before: list[tuple[int, int]] = (),  # type: ignore[assignment]
    owed: Sequence[dict[str, Any]] = (),
) -> float | None:
    """Take runs, commit/failure notices and snapshot requests until the store holds every committed map's runs.

    ``sent_before`` are the map attempts committed before this attempt started (a retry, or a reducer that waited
    for a slot): their runs were sent to an earlier attempt, or held for this one, and come again now. Snapshot
    requests wait until those are all here (or the attempt is no longer the map's committed one): answered at once,
    a restarted reducer's snapshot held none of them, as little as nothing, where the one before it held a quarter
    of the input. A threshold's request (``fraction``) also waits until the attempt holds that fraction of the
    input (``ReducerSnapshots.holds``). A plain request still waiting when every run is here is answered by the
    partition's final output (it holds all such a snapshot would); a derived one (``source``: recomputed from the
    job before's snapshot, not from the runs) is answered here then. ``owed``: the derived requests the attempt
    starts with (``run_reduce``)."""
    poller = zmq.Poller()
    poller.register(pull, zmq.POLLIN)
    poller.register(channel.control_socket, zmq.POLLIN)
    first_run_at: float | None = None
    last_report = time.monotonic()
    # Test-only: slow this reducer down per received run, to exercise the maps' flow control.
    test_delay = float(os.environ.get("HOP_TEST_SLOW_REDUCE_SECONDS", "0"))
    # A run larger than the store holds in memory is written to its file piece by piece as it arrives.
    pieces = RunPieces(store.held_limit, store.new_run_path)

    def take_runs(limit: int | None, held: list[list[bytes]] | None = None) -> None:
        """Receive the runs already queued (at most ``limit``, and none once a control message waits), crediting
        each back to its worker; with ``held``, all that are queued, their credits kept in ``held`` to be given back
        later."""
        nonlocal first_run_at
        taken = 0

        def credit(sender: bytes, seq: int) -> None:
            if held is None:
                pull.send_multipart([sender, b"%d" % seq])  # one credit back to that worker
            else:
                held.append([sender, b"%d" % seq])

        while limit is None or taken < limit:
            # A reducer slower than the maps always has another run queued: it took up to ``limit`` of them (the
            # whole input of a small job) before it saw a snapshot request, so the snapshot came at the end.
            if limit is not None and int(channel.control_socket.get(zmq.EVENTS)) & zmq.POLLIN:
                return
            try:
                frames = pull.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            taken += 1
            received = run_message(frames)
            if received is None:
                continue  # not a run piece (something else connected to this port): nobody to answer
            sender, header, data = received
            if (header["job_id"], header["partition"]) != (spec.job_id, index):
                # A worker's connection to a dead reduce attempt, reconnected by ZeroMQ to whoever bound its port
                # next: the run is not ours. Acknowledged all the same, so that connection's credits come back.
                credit(sender, header["seq"])
                continue
            if first_run_at is None:
                first_run_at = time.time()
                channel.send("first_run", index=index, attempt=attempt, at=first_run_at)
            key = (header["map"], header["attempt"], header["seq"])
            run = pieces.add(key, header.get("offset", 0), header.get("size", len(data)), data.bytes)
            if run is not None:
                snapshots.receive(header, run)
            if test_delay:
                time.sleep(test_delay)
            credit(sender, header["seq"])

    # Snapshot requests held until the runs of ``sent_before`` are here.
    waiting: list[dict[str, Any]] = list(owed)
    # Each snapshot is taken once: one requested as this attempt started reaches it twice, broadcast to the job's
    # reducers and asked again as its reducer_ready (crossing the request) shows it unanswered. Taken again, its
    # files were rewritten as the coordinator published the first answer's: a snapshot folder of OUT/_snapshots got
    # the second writer's temporaries (renamed out from under it), and one published later its files, not those
    # its _snapshot.json describes.
    asked: set[int] = {request["seq"] for request in owed}

    def caught_up() -> bool:
        return all(
            store.settled(task) is not None or store.committed.get(task) != task_attempt
            for task, task_attempt in sent_before
        )

    def answer(requests: list[dict[str, Any]]) -> None:
        for request, fields in zip(requests, snapshots.answer(requests), strict=True):
            channel.send("snapshot_done", index=index, attempt=attempt, seq=request["seq"], **fields)

    while store.missing(num_maps):
        events = dict(poller.poll(1000))
        if pull in events:
            # (One at a time while a threshold's request waits: it is answered as soon as this attempt holds enough,
            # not up to 256 runs later.)
            take_runs(1 if any(request.get("fraction") for request in waiting) else 256)
        if channel.control_socket in events:
            requests = []
            while (control := channel.receive(0)) is not None:
                if control.get("job_id") != spec.job_id:
                    continue
                if control["type"] in ("map_committed", "map_failed", "map_lost"):
                    snapshots.notice(control)
                elif control["type"] == "maps_added":  # the rest of a map's input made a map of its own
                    num_maps = max(num_maps, int(control["num_maps"]))
                elif control["type"] == "pipe_at":
                    if pipe_sender is not None:
                        pipe_sender.connect(control["address"])
                elif control["type"] == "snapshot" and control["seq"] not in asked:
                    asked.add(control["seq"])
                    requests.append(control)
            if requests:
                faults.inject("reduce", "snapshot", index, attempt)
            if any(request.get("fraction") is None for request in requests):
                # A snapshot asked for now holds what the maps have sent by now, not what this reducer got round to
                # reading: the runs queued, their credits held meanwhile so that no worker sends more (at most
                # CREDITS messages each are in flight). Crediting each as it was taken made a reducer slower than
                # the maps take run after run until the maps ended: every snapshot held the whole input. (Not for a
                # threshold's, which waits for its fraction below, run by run: taking every run queued first, the
                # 0.100 of a reducer holding 7% of the input held 18%.)
                held: list[list[bytes]] = []
                take_runs(None, held)
                for acknowledgement in held:
                    pull.send_multipart(acknowledgement)
            waiting += requests
        if waiting and caught_up():
            # A threshold's request waits until this attempt holds that much of the input: answered as it came, a
            # reducer behind the maps answered 0.900 with 51% of the input.
            ready = [request for request in waiting if snapshots.holds(request.get("fraction"))]
            if ready:
                answer(ready)
                waiting = [request for request in waiting if request not in ready]
        now = time.monotonic()
        if now - last_report >= PROGRESS_SECONDS:
            last_report = now
            done = num_maps - store.missing(num_maps)
            channel.send(
                "task_progress",
                kind="reduce",
                index=index,
                attempt=attempt,
                fraction=0.5 * done / max(1, num_maps),
                records=0,
            )
    pieces.close()  # (pieces of runs no committed attempt holds)
    # The partition's final output, which answers the plain requests still waiting, is not what a derived one asks
    # for: that is recomputed from the job before's snapshot, whatever this attempt received.
    derived = [request for request in waiting if request.get("source")]
    if derived:
        answer(derived)
    return first_run_at


def _reduce_progress(
    channel: TaskChannel, index: int, attempt: int, done: Callable[[int], float]
) -> Callable[[int], int]:
    """``report(groups)``: a reduce attempt's progress once its input is in, every ``PROGRESS_SECONDS`` at most:
    the groups it has reduced (or lines written) so far, at fraction 0.5 (the shuffle) plus half of ``done(groups)``,
    the fraction of its input reduced (it stayed at 0.5 until the commit, however long the reduce took). Without it a
    reduce sent nothing from its merge's start to its end, so one stuck in the user's reduce could not be told from
    one working.

    It returns how many groups to go before the next call: more while calls come faster than every 10 ms (reading
    the clock per group made a trivial reduce 30% slower), fewer down to 1 while they come slower than every 100 ms
    (a slow reduce still reports twice a second)."""
    last_report = last_call = time.monotonic()
    stride = 1

    def report(groups: int) -> int:
        nonlocal last_report, last_call, stride
        now = time.monotonic()
        elapsed, last_call = now - last_call, now
        if elapsed < 0.01:
            stride = min(stride * 2, 4096)
        elif elapsed > 0.1:
            stride = max(1, stride // 2)
        if now - last_report >= PROGRESS_SECONDS:
            last_report = now
            fraction = 0.5 + 0.5 * min(1.0, done(groups))
            channel.send(
                "task_progress", kind="reduce", index=index, attempt=attempt, fraction=fraction, records=groups
            )
        return stride

    return report


TICK_GROUPS = 256
WRITE_BATCH = 8192
"""Output lines formatted and written at a time by the bulk writer (bounds the memory of the text)."""


def _pipe_follower(sender: PipeSender, channel: TaskChannel, job_id: str) -> Callable[[], None]:
    """Read the worker's messages and stream to wherever the latest ``pipe_at`` points (a new downstream attempt),
    until a ``pipe_release`` (a task waits for this attempt's slot) ends the stream: ``PipeSender.finish`` then
    returns at once, and the downstream map reads the rest from the committed file."""
    released = False

    def follow() -> None:
        nonlocal released
        while (control := channel.receive(0)) is not None:
            if control.get("job_id") != job_id:
                continue
            if control.get("type") == "pipe_release":
                released = True
                sender.close()
            elif control.get("type") == "pipe_at" and not released:
                sender.connect(control["address"])

    return follow


def _pipe_ticker(sender: PipeSender, follow: Callable[[], None]) -> Callable[[IO[str] | None], None]:
    """What a pipelined reduce does between groups: follow ``pipe_at`` and send the lines written so far."""

    def tick(file: IO[str] | None) -> None:
        follow()
        if file is not None:
            file.flush()
        sender.pump()

    return tick


def _wait_until_pushed(unsent: Callable[[], int], mode: str) -> None:
    """Test-only (``hop.faults``): wait, 30 s at most, until every spill registered so far was pushed to every reducer.
    A blocking job pushes nothing before its maps commit: there is nothing to wait for (the wait ran out its 30 s)."""
    if mode != "pipelined":
        return
    deadline = time.monotonic() + 30
    while unsent() and time.monotonic() < deadline:
        time.sleep(0.01)


def _fault_after_first(pairs: Iterator[tuple[Any, Any]], index: int, attempt: int) -> Iterator[tuple[Any, Any]]:
    """Test-only: pass groups on, and kill this task once some output has been written (``hop.faults``)."""
    for number, pair in enumerate(pairs):
        if number == 1:
            sys.stdout.flush()
            faults.inject("reduce", "merging", index, attempt)
        yield pair


def _finished_columns(store: FoldingRunStore) -> tuple[list[Any], list[Any]] | None:
    """A folding store's output as key and value columns, or ``None`` for the general path (state on disk). A
    ``finish`` that raises is reported with the first key it fails on."""
    try:
        return store.finished_columns()
    except Exception as error:
        finish = store.aggregate.finish
        for key, state in store.state.items():
            try:
                finish(state)
            except Exception:
                raise UserCodeError("reduce", error, shown_key(key)) from error
        raise


def _write_columns(
    output: Path,
    keys: list[Any],
    values: list[Any],
    after_first_batch: Callable[[], None] | None = None,
    after_batch: Callable[[IO[str]], None] | None = None,
    opener: Callable[[str, int], int] | None = None,
) -> int:
    """Write ``json(key) TAB json(value)`` lines in bulk (formatting per column, not per line); returns the
    number of lines. ``after_first_batch`` is called once the first lines are in the file (fault tests),
    ``after_batch`` with the file after every batch (a pipelined reduce streams what is written: ``_pipe_ticker``).
    ``opener`` is ``open``'s (:func:`reduce_to_file`'s)."""
    with open(output, "w", encoding="utf-8", newline="\n", opener=opener) as file:
        for start in range(0, len(keys), WRITE_BATCH):
            stop = start + WRITE_BATCH
            try:
                key_texts, value_texts = to_json_column(keys[start:stop], keys=True), to_json_column(values[start:stop])
            except NotJSONError as error:  # (named with its key, without the encoder's frames, as reduce_to_file)
                key = next(k for k, v in zip(keys[start:stop], values[start:stop], strict=True) if not _json_pair(k, v))
                raise UserCodeError("reduce", error, shown_key(key)).without_traceback() from error
            lines = "\n".join(map("\t".join, zip(key_texts, value_texts, strict=True))) + "\n"
            try:
                file.write(lines)  # (encoded whole before any of it is written)
            except UnicodeEncodeError as error:
                bad = next(i for i, text in enumerate(key_texts + value_texts) if not _encodes(text)) % len(key_texts)
                raise UserCodeError("reduce", not_utf8_output(error), shown_key(keys[start + bad])) from error
            if after_first_batch is not None:
                file.flush()
                after_first_batch()
                after_first_batch = None
            if after_batch is not None:
                after_batch(file)
    return len(keys)


def _json_pair(key: Any, value: Any) -> bool:
    """Whether JSON can hold the output pair ``key``, ``value``."""
    try:
        to_json_key(key), to_json(value)
    except NotJSONError:
        return False
    return True


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def reduce_to_file(
    groups: Iterator[tuple[Any, Iterable[Any]]],
    reducer: Callable[[Any, Iterable[Any]], Iterable[tuple[Any, Any]] | None],
    output: Path,
    skip_limit: int = 0,
    bad_records: list[dict[str, Any]] | None = None,
    tick: Callable[[IO[str] | None], None] | None = None,
    first_pairs: list[tuple[Any, Any]] = (),  # type: ignore[assignment]
    progress: Callable[[int], int] | None = None,
    show_key: Callable[[Any], str] = repr,
    opener: Callable[[str, int], int] | None = None,
) -> int:
    """Call the reducer per key group with an iterator of its values, write ``json(key) TAB json(value)`` lines
    and return how many; ``tick(file)`` is called every ``TICK_GROUPS`` groups (a pipeline streams what was
    written), ``progress(groups)`` with the number of groups reduced so far before the first group and then as many
    groups later as each call returns. A failing call is named by its key as ``show_key`` shows it
    (:attr:`hop.job.Step.show_key`).

    With ``skip_limit``, a key whose reduce raises is skipped (none of its output is written) and recorded in
    ``bad_records``, up to ``skip_limit`` keys; one more fails the task with the list. ``opener`` is ``open``'s (a
    continuous job's reducer writes relative to its output directory: ``hop.outputs.OutputGuard.opener``).
    """
    output_records = 0
    next_progress = 0
    dumps, dumps_key = to_json, to_json_key

    with open(output, "w", encoding="utf-8", newline="\n", opener=opener) as file:
        write = file.write
        _write_pairs(file, first_pairs, "reducer_init")
        output_records += len(first_pairs)
        for number, (key, values) in enumerate(groups):
            if tick is not None and number % TICK_GROUPS == 0:
                tick(file)
            if progress is not None and number >= next_progress:
                next_progress = number + progress(number)
            results = None
            try:
                results = reducer(key, iter(values))
                lines = [
                    f"{dumps_key(out_key)}\t{dumps(out_value)}\n" for out_key, out_value in checked_pairs(results or ())
                ]
                try:
                    write("".join(lines))  # (encoded whole before any of it is written: all or nothing of a key)
                except UnicodeEncodeError as unwritable:
                    raise not_utf8_output(unwritable) from None  # (skipped below as a failing reduce is)
                except OSError as unwritten:  # (a full disk: was blamed on this key, and skipped as its fault)
                    raise output_write_error(output, unwritten) from unwritten
            except OutputWriteError:
                raise
            except SystemExit as exiting:  # (never skipped: a map's is not either)
                raise UserCodeError("reduce", exiting, shown_key(key, show_key)) from exiting
            except TASK_FAILURES as raised:
                error = not_pairs("reduce", raised, results)
                # (output JSON cannot hold: the message names it and the key, the encoder's frames say no more)
                unwriteable_output = isinstance(error, NotJSONError | NotUTF8OutputError)
                importing = raised_importing(raised)  # (no key is to blame: every key would fail so)
                if not skip_limit or bad_records is None or importing:
                    failure = UserCodeError("reduce", error, shown_key(key, show_key))
                    failure.skippable = bad_records is not None and not importing  # (a batch reduce lists them)
                    raise failure.without_traceback() if unwriteable_output else failure from raised
                entry = {
                    "key": show_key(key)[:1000],
                    "error": error_text(error),
                    # (skipped, as failing: no traceback rather than json/encoder.py's frames or the engine's)
                    "traceback": None if unwriteable_output else user_traceback(error),
                }
                _note_bad_record(bad_records, skip_limit, entry, error, kind="reduce")
                continue
            output_records += len(lines)
    return output_records
