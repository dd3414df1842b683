"""The Spark side of :mod:`hop.spark_engine`: the functions that run inside Spark's Python workers.

Each function here is shipped to executors (pickled by reference, so ``hop`` must be importable there; the engine
puts this project on the executors' ``PYTHONPATH``) with a :class:`StepPlan` that carries the user's job class as
cloudpickle bytes. Per step of a job:

- :func:`map_task` runs over one Spark partition: one input split (first step) or one reducer's output lines of the
  previous step. It creates a fresh job object (``setup``/``teardown`` once per task, counters per task), reads
  records with ``hop.inputs.iter_records`` and calls the map (``mapper_init``'s pairs first, ``mapper_final``'s
  last, as hop's map buffer takes them). The combiner (hand-written, or an aggregate: the reduce's own when it is
  one) runs here, per key, over a buffer that is cut where hop's map buffer spills with the same ``--spill-records``
  (:attr:`StepPlan.spill_records`, :func:`_combined`); it must keep its key, and an aggregate refuses a value
  (``None`` to ``Sum``...) naming itself, the key and the record, as in hop. So a hand-written reduce gets what it
  gets on hop: per key, the combiner's output of every map spill, not one value merged across the maps (the number
  of spills is not part of the contract, and hop's flow control may merge them: see ``hop.compare``). Values that
  will cross the shuffle as they are get hop's wire types (:func:`wire_value`: lists become tuples), and keys theirs
  (:func:`wire_key`: an ``IntEnum`` member its int) before a combiner sees them; an aggregate's ``lift`` sees the
  raw value, as in hop. Both are refused as hop's shuffle refuses them (a set, a str with a lone surrogate, which
  Spark's pickle would carry), with hop's error naming the map's record or the combine's key.
- ``combineByKey`` then merges the map tasks' states with :class:`AggregateFold` when the reduce is an aggregate
  (one state per key, whose finished value does not depend on how it was folded) or gathers lists with
  :class:`ListFold`, partitioned by :func:`partition_function` (hop's choice of reducer).
- :func:`reduce_task` gets a partition's ``(key, state or values)`` pairs in hop's key order and yields the output
  lines, encoded as hop's reduce encodes them (``reducer_init``'s first, ``reducer_final``'s last);
  :func:`write_task` writes the last step's lines to a part file.

Errors in user code (and undecodable input) raise :class:`TaskFailure`, whose message carries the reason and the
user's traceback; Spark only ships the worker's traceback text to the driver, where :func:`failure_of` gets them back.
Counters go to the step's :class:`StepCounters` accumulators at the end of each successful task.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hop import task_status
from hop.aggregates import Aggregate, as_aggregate
from hop.inputs import InputError, iter_records, parse_output_line
from hop.job import Job, Step, identity_map, identity_reduce
from hop.jobspec import load_job_class
from hop.jsonline import NotJSONError, to_json, to_json_key
from hop.outputs import output_removed
from hop.usercode import TASK_FAILURES, NoStandardInput, UserCodeError, describe_record, fold_error, sendable
from hop.usertrace import not_pairs
from shuffle import codec
from shuffle.buffer import (
    DEFAULT_SPILL_BYTES,
    DEFAULT_SPILL_KEYS,
    DEFAULT_SPILL_RECORDS,
    FIRST_SPILL_DIVISOR,
    SIZE_CHECK_EVERY,
    CombinerKeyError,
    KeySampler,
    PartitionError,
    combined_values,
    folded_spill_records,
    map_or_combine,
    none_state_error,
    unhashable_key_error,
    unorderable_key_error,
)
from shuffle.keys import NanKeyError, holds_nan, partition_hash, plain_key, total_order_key
from shuffle.pairs import checked_pairs
from shuffle.runs import UnencodableRecordError

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator

FAILURE_OPEN = "<<hop-task-failure "
"""What a :class:`TaskFailure`'s message starts with (Spark's log lines quoting one are the driver's to report)."""
_FAILURE_CLOSE = " hop-task-failure>>"
_FAILURE_PAYLOAD = re.compile(re.escape(FAILURE_OPEN) + r"(.*?)" + re.escape(_FAILURE_CLOSE), re.S)


class TaskFailure(RuntimeError):
    """Raised inside a Spark task for an error in user code or input; its message carries a JSON payload that the
    driver extracts from Spark's error (Spark only ships the worker's traceback text back). A task that reads the
    lines of the step before in the same Spark task lets that step's failure through as it is, so that one is
    reported, not wrapped into the reading map's. ``step`` is the job's step that failed (from 0), once the task
    of that step has said so (:meth:`in_step`)."""

    def __init__(self, reason: str, traceback: str | None, step: int | None = None) -> None:
        # (escaped as hop's engine escapes them: a lone surrogate in the user's message failed the driver's report)
        self.reason, self.traceback, self.step = sendable(reason), traceback and sendable(traceback), step
        payload = {"reason": self.reason, "traceback": self.traceback, "step": step}
        super().__init__(FAILURE_OPEN + json.dumps(payload) + _FAILURE_CLOSE)

    def in_step(self, step: int | None) -> TaskFailure:
        """This failure, said of ``step`` unless a step (an earlier one, whose lines this task read) already is."""
        return self if self.step is not None or step is None else TaskFailure(self.reason, self.traceback, step)

    @classmethod
    def of(cls, where: str, error: BaseException, record: str | None) -> TaskFailure:
        """A failure of user code (``where``: map, combine, reduce, setup...) at ``record``, with its traceback,
        worded as hop's engine words it (:class:`hop.usercode.UserCodeError`: ``sys.exit()`` too)."""
        failure = UserCodeError(where, error, record)
        return cls(str(failure), failure.user_traceback)

    @classmethod
    def of_output(cls, where: str, error: BaseException, record: str | None) -> TaskFailure:
        """What user code (``where``) yielded at ``record`` that the engine refuses, named as :meth:`of` names a
        failure but without a traceback, as hop's tasks report it (``hop.tasks.unencodable_map_call``): no frame of
        the user's raised it."""
        return cls(str(UserCodeError(where, error, record)), None)

    @classmethod
    def of_task(cls, kind: str, error: BaseException) -> TaskFailure:
        """What the engine found wrong in a task's input or in what user code gave it (an undecodable line, a
        combiner that changed its key, a partition out of range): named by the task, as hop's tasks name it
        (``map task 3: input file ...``), without a traceback: its message says what and where, and no frame of
        the user's raised it."""
        from pyspark import TaskContext

        context = TaskContext.get()
        index = context.partitionId() if context is not None else 0
        return cls(f"{kind} task {index}: {error}", None)


def _payload(error: BaseException) -> dict[str, Any] | None:
    """The payload of the first :class:`TaskFailure` quoted in a failed Spark action's error, or None."""
    match = _FAILURE_PAYLOAD.search(str(error))
    if match is None:
        return None
    try:
        payload: dict[str, Any] = json.loads(match.group(1))
    except ValueError:
        return None
    return payload


def failure_of(error: BaseException) -> tuple[str, str | None] | None:
    """The reason and user traceback (None when there is none to show) of the first :class:`TaskFailure` quoted in
    a failed Spark action's error; None if it quotes none."""
    payload = _payload(error)
    if payload is None:
        return None
    traceback = payload["traceback"]
    return str(payload["reason"]), None if traceback is None else str(traceback)


def failed_step(error: BaseException) -> int | None:
    """The step (from 0) whose task failed, of the first :class:`TaskFailure` quoted in ``error``; None if unknown."""
    payload = _payload(error)
    step = None if payload is None else payload.get("step")
    return step if isinstance(step, int) else None


# Resolving a step's functions (executor side, mirrors hop.tasks.instantiate). -------------------------------------
@dataclass(frozen=True)
class StepFunctions:
    """The functions of one step as the Spark plan runs them."""

    mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]] | None]
    combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]] | None] | None
    """The combiner the map task runs (hand-written, or an aggregate before a hand-written reduce); ``None`` when
    there is none or the reduce is an aggregate."""
    aggregate: Aggregate | None
    """The reduce's aggregate, which ``combineByKey`` folds with; the reduce then gets one state per key."""
    reducer: Callable[[Any, Iterable[Any]], Iterable[tuple[Any, Any]] | None]
    step: Step
    """The step itself, for its init/final hooks."""


def resolve_step(job: Job, number: int) -> StepFunctions:
    """The map, combine and reduce of step ``number``, resolved as ``hop.tasks.instantiate`` resolves them."""
    step = job.resolved_steps()[number]
    # A combiner with init/final hooks is not run, as in hop (hop.job.Step): combining is optional.
    combiner: Any = None if step.combiner_init or step.combiner_final else step.combiner
    reducer: Any = step.reducer or identity_reduce
    aggregate = as_aggregate(reducer)
    if aggregate is not None:
        # The finished value of a key's states is the same however they were folded: fold across the maps. (A
        # combine other than this aggregate is refused by Job.resolved_steps.)
        return StepFunctions(step.mapper or identity_map, None, aggregate, aggregate.as_reducer(), step)
    # A hand-written reduce sees the combiner's output per map spill, as on hop: combining across maps as well
    # would hand it one state per key (a reduce counting its values gave 1 on Spark and the number of maps on hop).
    return StepFunctions(step.mapper or identity_map, combiner, None, reducer, step)


@dataclass(frozen=True)
class StepPlan:
    """What the tasks of one step need; shipped to executors inside the task closures."""

    job_code: bytes
    step: int
    num_reduces: int
    input_format: str
    """``text``/``jsonl``/``csv`` for the first step (items are splits), ``lines`` for later ones (items are the
    previous step's output lines)."""
    spill_records: int = DEFAULT_SPILL_RECORDS
    """hop's ``--spill-records``: a map task's combiner runs where hop's map buffer would spill with it (hop's first
    spill holds ``1 / FIRST_SPILL_DIVISOR`` of it, an aggregate's later ones more, as ``shuffle.buffer`` says), so
    a reduce gets as many combined values per key as on hop."""


def _new_job(job_code: bytes) -> Job:
    """The job for a task in a Spark Python worker. Ints of any size are keys and values, as on hop's engine
    (``hop.taskproc``): the worker's default limit on int <-> str conversion (4,300 digits) failed a map reading a
    larger one from a JSON line, and a reduce writing one."""
    sys.set_int_max_str_digits(0)
    # A map reading sys.stdin (a streaming mapper's loop) read the worker's /dev/null: nothing, and the job
    # succeeded without its records' output. It fails as on hop's engine, saying where the records are.
    sys.stdin = NoStandardInput()
    return load_job_class(job_code)()


def _guard(where: str, function: Callable[[], Any]) -> Any:
    try:
        return function()
    except TASK_FAILURES as error:
        raise TaskFailure.of(where, error, None) from None


def wire(value: Any) -> Any:
    """A value as it comes out of hop's msgpack shuffle: lists (also nested) become tuples. (Not checked: see
    :func:`wire_value`.)"""
    kind = type(value)
    if kind is list or kind is tuple:
        return tuple(map(wire, value))
    if kind is dict:
        return {key: wire(item) for key, item in value.items()}
    return value


_FLAT_VALUE_TYPES = frozenset({int, float, bool, bytes, type(None)})
_FLAT_KEY_TYPES = _FLAT_VALUE_TYPES | {str}


def wire_value(key: Any, value: Any) -> Any:
    """``value`` (of ``key``) as it comes out of hop's msgpack shuffle (:func:`wire`), or
    ``shuffle.runs.UnencodableRecordError`` (said of the map) for one that hop's shuffle cannot encode: a set, a str
    holding a lone surrogate, a date... Spark's pickle carries those, so the job went on with output hop never
    writes (or lost them: a set counted as one value). A flat value and an ASCII str cost a type check (and
    ``isascii``, O(1)); anything else is encoded by hop's codec to find out, as hop's shuffle would."""
    kind = type(value)
    if kind in _FLAT_VALUE_TYPES or (kind is str and value.isascii()):
        return value
    if not _packs(value):
        raise UnencodableRecordError("value", value, key, "map")
    return wire(value)


_packer = codec.packer()
"""The task's packer (one per Python worker: ``codec.packb`` makes one per call, which cost a microsecond)."""


def _packs(item: Any) -> bool:
    """Whether hop's shuffle can encode ``item`` (msgpack with hop's codec: a lone surrogate fails UTF-8)."""
    try:
        _packer.pack(item)  # (a failed pack leaves the packer empty)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def wire_key(key: Any) -> Any:
    """A key as it comes out of hop's msgpack shuffle (``shuffle.keys.plain_key``): an ``IntEnum`` member as its
    int, a namedtuple as a tuple..., so that combine, partition and reduce get what they get on hop. A key of the
    key types costs a type check (a flat tuple's, one per element; an ASCII str's ``isascii`` too); one that is no
    key (a ``datetime.date``...) or that hop's shuffle cannot encode (a str holding a lone surrogate) raises
    ``shuffle.runs.UnencodableRecordError``, hop's error for it (:func:`_checked_key` names its record)."""
    kind = type(key)
    if kind is str:
        if key.isascii():
            return key
    elif kind in _FLAT_VALUE_TYPES or (kind is tuple and _FLAT_VALUE_TYPES.issuperset(map(type, key))):
        return key
    elif kind is tuple and _FLAT_KEY_TYPES.issuperset(map(type, key)):
        if _packs(key):  # (one of its str may hold a lone surrogate)
            return key
        raise UnencodableRecordError("key", key, key, "map")
    try:
        plain = plain_key(key)
    except TypeError:
        raise unorderable_key_error([key]) from None
    if not _packs(plain):
        raise UnencodableRecordError("key", key, key, "map")
    return plain


def _add_counts(target: dict[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """Add nested ``{name: int}`` or ``{group: {name: int}}`` counts into ``target``."""
    for name, value in source.items():
        if isinstance(value, Mapping):
            _add_counts(target.setdefault(name, {}), value)
        else:
            target[name] = target.get(name, 0) + value
    return target


class CounterParam:
    """A Spark ``AccumulatorParam`` for counter dicts: ``{}`` is zero, adding merges nested counts."""

    def zero(self, value: dict[str, Any]) -> dict[str, Any]:
        return {}

    def addInPlace(self, value1: dict[str, Any], value2: dict[str, Any]) -> dict[str, Any]:  # noqa: N802 (Spark's name)
        return _add_counts(value1, value2)


@dataclass(frozen=True)
class StepCounters:
    """The accumulators of one step: the engine's counters and the user's."""

    builtin: Accumulator[dict[str, Any]]
    user: Accumulator[dict[str, Any]]


# Map side. ----------------------------------------------------------------------------------------------------
_Records = Iterator[tuple[Any, Any]]


def _record_sources(plan: StepPlan, items: Iterable[Any]) -> Iterator[tuple[str | None, str, _Records]]:
    """``(input_file, source, records)`` per input of a map task: splits for the first step (``source`` their
    file), the last step's lines later (no input file; ``source`` says which step and reducer wrote them)."""
    if plan.input_format == "lines":
        source = _previous_step(plan)
        yield None, source, _previous_output(source, items)
        return
    for split in items:
        yield split.path, split.path, iter_records(split, plan.input_format)


def _previous_step(plan: StepPlan) -> str:
    """The output lines a later step's map task reads, in words."""
    from pyspark import TaskContext

    context = TaskContext.get()
    reducer = f"reducer {context.partitionId()}" if context is not None else "a reducer"
    return f"the output of step {plan.step} ({reducer})"  # (``plan.step`` counts from 0: the previous one's number)


def _previous_output(source: str, lines: Iterable[str]) -> Iterator[tuple[Any, Any]]:
    """The previous step's output lines of this task's partition, read as hop reads a step's part files."""
    for number, line in enumerate(lines, 1):
        yield parse_output_line(line.rstrip("\n"), source, number, numbered=True)


def map_task(plan: StepPlan, counters: StepCounters, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    """One map task: the user's map over the task's records; with a hand-written combiner, combined per key. Its
    failure is said of its step (a failure of the step before's, whose lines it read, stays that step's)."""
    try:
        yield from _map_task(plan, counters, items)
    except TaskFailure as failure:
        raise failure.in_step(plan.step) from None
    finally:
        # The task's last status, held back by the once-a-second limit: Spark's Python workers outlive their tasks
        # (their exit would have printed it), so it was never printed. Failed or not, as hop's tasks say theirs.
        task_status.flush()


def _map_task(plan: StepPlan, counters: StepCounters, items: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    job = _new_job(plan.job_code)
    functions = resolve_step(job, plan.step)
    if plan.input_format != "lines":
        items = list(items)  # (a few splits, read again to find the record of an output hop's shuffle cannot encode)
    _guard("setup", job.setup)
    counts = {"map_input_records": 0, "map_output_records": 0}
    position = _Position(keyed=plan.input_format in ("output", "lines"))
    step = functions.step
    outputs = _with_hooks(
        _hook_pairs("mapper_init", step.mapper_init),
        _mapped(job, functions.mapper, _record_sources(plan, items), counts, position),
        lambda: _hook_pairs("mapper_final", step.mapper_final),
        counts,
        position,
    )
    combiner = functions.combiner or functions.aggregate
    if combiner is not None:
        # An aggregate reduce's states too are folded here, where a value it refuses can be named with its key and
        # record as hop names it (combineByKey's functions see neither).
        try:
            yield from _combined(combiner, outputs, position, plan.spill_records)
        except _MapOutputUnencodable as unencodable:
            raise _unencodable_map_output(plan, items, unencodable.error) from None
    else:
        for pairs in outputs:
            for key, value in pairs:
                _check_hashable(key, position)  # (else Spark's own grouping fails, in its frames, without the record)
                yield _checked_pair(key, value, position)
    _guard("teardown", job.teardown)
    counters.builtin.add(counts)
    counters.user.add(job.take_counters())


@dataclass
class _Position:
    """The input record a map task's latest output came from (for errors raised while that output is folded), and
    whether its records are keyed (a hop job's output: named by key, not by byte offset)."""

    keyed: bool
    source: str = ""
    record: tuple[Any, Any] | None = None
    hook: str | None = None
    """``mapper_init`` or ``mapper_final`` while the output is that hook's (no record yielded it)."""

    def describe(self) -> str:
        return describe_record(self.source, self.record, self.keyed)


def _hook_pairs(where: str, hook: Callable[[], Iterable[tuple[Any, Any]] | None] | None) -> list[tuple[Any, Any]]:
    """What a step's init or final hook (user code, no arguments) returned or yielded, as pairs."""
    if hook is None:
        return []
    output = None
    try:
        output = hook()
        return [(key, value) for key, value in checked_pairs(output or ())]
    except TASK_FAILURES as error:
        raise TaskFailure.of(where, not_pairs(where, error, output), None) from None


def _with_hooks(
    first: list[tuple[Any, Any]],
    outputs: Iterator[list[tuple[Any, Any]]],
    last: Callable[[], list[tuple[Any, Any]]],
    counts: dict[str, int],
    position: _Position,
) -> Iterator[list[tuple[Any, Any]]]:
    """A map's output with its ``mapper_init`` pairs before and its ``mapper_final`` pairs after (run once the
    records are done), counted as map output as hop counts them; ``position.hook`` says which hook's pairs are
    being taken."""
    if first:
        counts["map_output_records"] += len(first)
        position.hook = "mapper_init"
        yield first
        position.hook = None
    yield from outputs
    final = last()
    if final:
        counts["map_output_records"] += len(final)
        position.hook = "mapper_final"
        yield final


def _mapped(
    job: Job,
    mapper: Callable[[Any, Any], Iterable[tuple[Any, Any]] | None],
    sources: Iterator[tuple[str | None, str, _Records]],
    counts: dict[str, int],
    position: _Position,
) -> Iterator[list[tuple[Any, Any]]]:
    """The map's output pairs, a list per input record (``position`` says which); errors name the record (file and
    byte offset) the map was working on."""
    input_records = output_records = 0
    for path, source, records in sources:
        job.input_file, position.source, position.record = path, source, None
        output = None
        try:
            for record in records:
                position.record = record
                output = mapper(*record)
                input_records += 1
                if output is not None:
                    # A map yielding something other than pairs fails here, as in hop; a str, dict or set that
                    # would unpack as one is looked for on the first record and every 4,096th, as hop does.
                    if input_records & 4095 == 1:
                        output = checked_pairs(output)
                    pairs = [(key, value) for key, value in output]
                    output_records += len(pairs)
                    yield pairs
        except TaskFailure:  # the step before's, whose lines this task was reading
            raise
        except InputError as error:
            raise TaskFailure.of_task("map", error) from None
        except TASK_FAILURES as error:
            if isinstance(error, GeneratorExit):
                raise  # (closed at its yield by Spark: the map did not fail)
            raise TaskFailure.of("map", not_pairs("map", error, output), position.describe()) from None
    counts["map_input_records"] += input_records
    counts["map_output_records"] += output_records


def _combined(
    combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]] | None],
    outputs: Iterator[list[tuple[Any, Any]]],
    position: _Position,
    spill_records: int,
    spill_bytes: int = DEFAULT_SPILL_BYTES,
) -> Iterator[tuple[Any, Any]]:
    """Buffer the map's pairs per key and combine each key's values when the buffer is full (checked after each
    record, where hop's map buffer with ``spill_records`` spills) and at the end; an aggregate folds its states as
    pairs arrive (a value it refuses fails the task naming the aggregate, key and record, as in hop), and its
    states, measured as hop's map buffer measures them (``shuffle.buffer.KeySampler``; a sum's are numbers), are
    combined once they take about ``spill_bytes``."""
    aggregate = as_aggregate(combiner)
    # An accumulating aggregate's groups hold accumulators (updated in place), made states as they are yielded.
    state_of: Callable[[Any], Any] = aggregate.state_of if aggregate is not None and aggregate.accumulates else _same
    groups: dict[Any, Any] = {}
    pending = 0
    limit = max(1, spill_records // FIRST_SPILL_DIVISOR)
    sampler = KeySampler() if aggregate is not None and not aggregate.inline_sum else None
    key_limit = DEFAULT_SPILL_KEYS
    records = size_step = next_size = 1
    for pairs in outputs:
        for key, value in pairs:
            try:
                old = groups.get(key)
            except TypeError:
                _check_hashable(key, position)
                raise
            if old is None:  # (checked as it is first buffered, while its record is known: it is combined later)
                _checked_key(key, position)
            if aggregate is not None:
                groups[key] = _fold(aggregate, old, key, value, position)
            elif old is None:
                groups[key] = [value]
            else:
                old.append(value)
        pending += len(pairs)
        if sampler is not None and records >= next_size:  # (gaps doubling after a flush, then every 4096)
            key_limit = sampler.limit(groups, DEFAULT_SPILL_KEYS, spill_bytes)
            size_step = min(2 * size_step, SIZE_CHECK_EVERY)
            next_size = records + size_step
        records += 1
        if pending >= limit or len(groups) >= key_limit:
            if aggregate is not None:
                yield from _states(groups, state_of)
                limit = folded_spill_records(spill_records, pending, len(groups))
            else:
                yield from _combine(combiner, groups)
                limit = spill_records
            groups, pending = {}, 0
            if sampler is not None:
                sampler.reset()
                key_limit, size_step, next_size = DEFAULT_SPILL_KEYS, 1, records
    if aggregate is not None:
        yield from _states(groups, state_of)
    else:
        yield from _combine(combiner, groups)


def _combine(
    combiner: Callable[[Any, list[Any]], Iterable[tuple[Any, Any]] | None], groups: dict[Any, list[Any]]
) -> Iterator[tuple[Any, Any]]:
    for key, values in ((wire_key(key), values) for key, values in groups.items()):
        output = None
        try:
            output = combiner(key, values)
            combined = [(out_key, out_value) for out_key, out_value in checked_pairs(output or ())]
        except TASK_FAILURES as error:
            raise TaskFailure.of("combine", not_pairs("combine", error, output), f"key {key!r}") from None
        for value in _kept_key_values(key, combined):
            try:
                yield key, wire_value(key, value)
            except UnencodableRecordError as error:
                raise _unencodable_combined(map_or_combine(error, values)) from None


def _states(groups: dict[Any, Any], state_of: Callable[[Any], Any]) -> Iterator[tuple[Any, Any]]:
    """The folded states of a spill's ``groups``, as they cross the shuffle. A state hop's shuffle cannot encode
    (an aggregate's over values it cannot: ``Max`` of sets) is the map's, as on hop's engine: :func:`map_task`
    looks for its record."""
    for key, state in groups.items():
        try:
            yield wire_key(key), wire_value(key, state_of(state))
        except UnencodableRecordError as error:
            raise _MapOutputUnencodable(error) from None


def _unencodable_combined(error: UnencodableRecordError) -> Exception:
    """The failure for a combiner's output value hop's shuffle cannot encode: the combine call by its key, as
    ``hop.tasks.unencodable_combine_call`` names it; a value the map yielded and the combiner passed on is the
    map's (``shuffle.buffer.map_or_combine``), whose record :func:`map_task` looks for."""
    if error.source == "combine":
        return TaskFailure.of_output("combine", error, f"key {error.key!r:.200}")
    return _MapOutputUnencodable(error)


class _MapOutputUnencodable(Exception):
    """A map output hop's shuffle cannot encode, found where the map task combines (its record no longer known):
    :func:`map_task` looks for the record (:func:`_unencodable_map_output`)."""

    def __init__(self, error: UnencodableRecordError) -> None:
        super().__init__(str(error))
        self.error = error


def _unencodable_map_output(plan: StepPlan, items: Iterable[Any], error: UnencodableRecordError) -> TaskFailure:
    """The failure for ``error``, an output of the map hop's shuffle cannot encode found as the task combined:
    named by the map call and its record, found as hop finds it (``hop.tasks.first_unencodable_call``: the task's
    splits mapped again, every pair encoded); by the task where there is none (the step before's lines, read once;
    a state of an aggregate over values that all encode), said of the map or, if the step has them, of its
    ``mapper_init`` and ``mapper_final``, as hop says it."""
    from hop.tasks import first_unencodable_call

    job = _new_job(plan.job_code)
    functions = resolve_step(job, plan.step)
    if plan.input_format != "lines":

        def calls() -> Iterator[tuple[tuple[Any, Any], tuple[str, tuple[Any, Any]]]]:
            job.setup()
            for split in items:
                job.input_file = split.path
                for record in iter_records(split, plan.input_format):
                    yield record, (split.path, record)

        found = first_unencodable_call(functions.mapper, calls())
        if found is not None:
            (path, record), (what, item, key) = found
            where = describe_record(path, record, plan.input_format == "output")
            return TaskFailure.of_output("map", UnencodableRecordError(what, item, key, "map"), where)
    hooked = functions.step.mapper_init or functions.step.mapper_final
    return TaskFailure.of_task("map", error.by("mapper_init/mapper_final" if hooked else "map"))


def _kept_key_values(key: Any, pairs: list[tuple[Any, Any]]) -> list[Any]:
    """The values of what ``combine(key, ...)`` yielded, checked as hop's map buffer checks them (it must keep its
    key: else the task fails as hop's does)."""
    try:
        return combined_values(lambda _key, _values: pairs, key, [])
    except CombinerKeyError as error:
        raise TaskFailure.of_task("map", error) from None


def _check_hashable(key: Any, position: _Position) -> None:
    """Fail the task as hop's map buffer does for a key that cannot be a dict key, naming the record."""
    try:
        hash(key)
    except TypeError:
        raise TaskFailure.of("map", unhashable_key_error(key), position.describe()) from None


def _checked_key(key: Any, position: _Position) -> Any:
    """:func:`wire_key` of a map output ``key``; one that is no key, or is or holds a float NaN, fails the task as
    hop's does, naming the record that yielded it (else the reduce side's sort failed, naming none: "shuffle raised
    TypeError"; a NaN, equal to nothing, made a group per record), or the hook, by the task, as hop names its
    ``mapper_init/mapper_final`` (which hop cannot tell apart)."""
    try:
        return _not_nan(wire_key(key))
    except (UnencodableRecordError, NanKeyError) as error:
        raise _refused_output(error, position) from None


def _checked_pair(key: Any, value: Any, position: _Position) -> tuple[Any, Any]:
    """:func:`wire_key` and :func:`wire_value` of a map output pair; one hop's shuffle cannot encode (or a NaN key)
    fails the task as :func:`_checked_key` says."""
    try:
        return _not_nan(wire_key(key)), wire_value(key, value)
    except (UnencodableRecordError, NanKeyError) as error:
        raise _refused_output(error, position) from None


def _not_nan(key: Any) -> Any:
    """``key``, unless it is or holds a float NaN (``shuffle.keys.NanKeyError``, as hop's map buffer refuses it): a
    type check for other keys, an element scan for tuples."""
    kind = type(key)
    if (kind is float and key != key) or (kind is tuple and holds_nan(key)):
        raise NanKeyError(key)
    return key


def _refused_output(error: UnencodableRecordError | NanKeyError, position: _Position) -> TaskFailure:
    if position.hook is None:
        return TaskFailure.of_output("map", error, position.describe())
    return TaskFailure.of_task("map", error.by(position.hook) if isinstance(error, UnencodableRecordError) else error)


def _same(state: Any) -> Any:
    return state


def _fold(aggregate: Aggregate, state: Any, key: Any, value: Any, position: _Position) -> Any:
    """``state`` (``None``: none yet) with ``value`` folded in: an accumulator, added to in place, for an aggregate
    that ``accumulates`` (as hop's map buffer folds it)."""
    try:
        if aggregate.accumulates:
            if state is None:
                return aggregate.start(value)
            aggregate.add(state, value)
            return state
        if state is None:
            state = aggregate.lift(value)
            if state is None:
                raise none_state_error(aggregate, key, value)
            return state
        return aggregate.merge(state, aggregate.lift(value))
    except TASK_FAILURES as error:
        raise TaskFailure.of("map", fold_error(aggregate, (key, value), error), position.describe()) from None


# combineByKey functions. -------------------------------------------------------------------------------------
class AggregateFold:
    """``combineByKey``'s createCombiner/mergeValue/mergeCombiners for a built-in aggregate, over the states the
    map tasks folded; its failure is said of ``step``."""

    def __init__(self, aggregate: Aggregate, step: int | None = None) -> None:
        self.aggregate = aggregate
        self.step = step

    @staticmethod
    def create(state: Any) -> Any:
        return state

    def add(self, state: Any, other: Any) -> Any:
        return self.merge(state, other)

    def merge(self, state: Any, other: Any) -> Any:
        try:
            return self.aggregate.merge(state, other)
        except TASK_FAILURES as error:
            raise TaskFailure.of("combine", error, None).in_step(self.step) from None


class ListFold:
    """``combineByKey``'s functions that gather a key's values into one list."""

    @staticmethod
    def create(value: Any) -> list[Any]:
        return [value]

    @staticmethod
    def add(values: list[Any], value: Any) -> list[Any]:
        values.append(value)
        return values

    @staticmethod
    def merge(values: list[Any], others: list[Any]) -> list[Any]:
        values.extend(others)
        return values


# Partitioning. -----------------------------------------------------------------------------------------------
def _partition_zero(key: Any) -> int:
    return 0


_partition_jobs: dict[bytes, Job] = {}


class UserPartition:
    """The job's own ``partition(key, R)``, on one job object per Python worker, checked like hop checks it; its
    failure is said of ``step``."""

    def __init__(self, job_code: bytes, num_reduces: int, step: int | None = None) -> None:
        self.job_code = job_code
        self.num_reduces = num_reduces
        self.step = step

    def __call__(self, key: Any) -> int:
        job = _partition_jobs.get(self.job_code)
        if job is None:
            job = _partition_jobs[self.job_code] = _new_job(self.job_code)
        try:
            partition = job.partition(key, self.num_reduces)
        except TASK_FAILURES as error:
            raise TaskFailure.of("partition", error, f"key {key!r}").in_step(self.step) from None
        if type(partition) is not int or not 0 <= partition < self.num_reduces:
            problem = PartitionError(
                f"partition({key!r}) returned {partition!r}; expected an int in range({self.num_reduces})"
            )
            raise TaskFailure.of_task("map", problem).in_step(self.step)
        return partition


def partition_function(job_class: type[Job], job_code: bytes, num_reduces: int, step: int) -> Callable[[Any], int]:
    """What Spark calls (modulo ``num_reduces``) to pick a key's reducer in ``step``: hop's choice for every key."""
    if num_reduces == 1:
        return _partition_zero
    if job_class.partition is Job.partition:
        return partition_hash  # Job.partition is partition_hash(key) % R; PYTHONHASHSEED=0 in every worker
    return UserPartition(job_code, num_reduces, step)


def total_order(key: Any, step: int | None = None) -> tuple[Any, ...]:
    """hop's sort key of ``key``, a key of ``step``."""
    try:
        return total_order_key(key)
    except TypeError as error:
        raise TaskFailure.of("shuffle", error, None).in_step(step) from None


# Reduce side. ------------------------------------------------------------------------------------------------
def reduce_task(plan: StepPlan, counters: StepCounters, items: Iterable[tuple[Any, Any]]) -> Iterator[str]:
    """One reduce task over a partition's ``(key, combined)`` pairs in key order: output lines ending in ``\\n``.
    Its failure is said of its step."""
    try:
        yield from _reduce_task(plan, counters, items)
    except TaskFailure as failure:
        raise failure.in_step(plan.step) from None
    finally:
        # The task's last status, held back by the once-a-second limit: Spark's Python workers outlive their tasks
        # (their exit would have printed it), so it was never printed. Failed or not, as hop's tasks say theirs.
        task_status.flush()


def _reduce_task(plan: StepPlan, counters: StepCounters, items: Iterable[tuple[Any, Any]]) -> Iterator[str]:
    job = _new_job(plan.job_code)
    functions = resolve_step(job, plan.step)
    reducer, one_state = functions.reducer, functions.aggregate is not None
    _guard("setup", job.setup)
    first = _hook_pairs("reducer_init", functions.step.reducer_init)
    output_records = len(first)
    yield from _hook_lines("reducer_init", first)
    for key, combined in items:
        values = (combined,) if one_state else combined
        output = None
        try:
            output = reducer(key, iter(values))
            lines = [f"{to_json_key(k)}\t{to_json(v)}\n" for k, v in checked_pairs(output or ())]
        except TASK_FAILURES as error:
            failure = not_pairs("reduce", error, output)
            if isinstance(failure, NotJSONError):  # (the message names what to yield: no frame of the user's raised it)
                raise TaskFailure.of_output("reduce", failure, f"key {key!r}") from None
            raise TaskFailure.of("reduce", failure, f"key {key!r}") from None
        if not all(map(str.isascii, lines)):  # (isascii costs nothing: only other text is encoded twice)
            _check_utf8("reduce", key, lines)
        output_records += len(lines)
        yield from lines
    last = _hook_pairs("reducer_final", functions.step.reducer_final)
    output_records += len(last)
    yield from _hook_lines("reducer_final", last)
    _guard("teardown", job.teardown)
    counters.builtin.add({"reduce_output_records": output_records})
    counters.user.add(job.take_counters())


def _hook_lines(where: str, pairs: list[tuple[Any, Any]]) -> list[str]:
    """The output lines of what a reduce's init or final hook yielded; one JSON or UTF-8 cannot hold fails the task
    naming the hook and the pair's key, as hop's reduce names it."""
    lines = []
    for key, value in pairs:
        try:
            lines.append(f"{to_json_key(key)}\t{to_json(value)}\n")
        except NotJSONError as error:
            raise TaskFailure.of_output(where, error, f"key {key!r}") from None
        _check_utf8(where, key, lines[-1:])
    return lines


def _check_utf8(where: str, key: Any, lines: list[str]) -> None:
    """Fail the task as hop's reduce fails it when one of ``lines`` (what ``where`` wrote for ``key``) cannot be
    written as UTF-8 (a str holding a lone surrogate): else the part file's write failed, outside the reduce, with
    Spark's "An exception was thrown from the Python worker" and PySpark's frames."""
    from hop.tasks import not_utf8_output

    for line in lines:
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as error:
            raise TaskFailure.of_output(where, not_utf8_output(error), f"key {key!r}") from None


def write_task(output: str, index: int, lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    """Write one reducer's lines to a per-attempt file in ``OUT/_temporary``, which the driver made; yield
    ``(index, path)``. It makes no folder: made with its parents, ``_temporary`` brought back an ``OUT`` removed
    while the job ran (or went into a folder made under its name since), and the run succeeded there without the
    output written before. A ``_temporary`` that is gone fails the task, saying ``OUT`` was removed or moved."""
    from pyspark import TaskContext

    context = TaskContext.get()
    attempt = context.taskAttemptId() if context is not None else 0
    path = Path(output) / "_temporary" / f"part-{index:05d}.attempt-{attempt}"
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except FileNotFoundError:
        raise TaskFailure(output_removed(output), None) from None
    with open(descriptor, "w", encoding="utf-8", newline="\n") as file:
        file.writelines(lines)
    yield index, str(path)
