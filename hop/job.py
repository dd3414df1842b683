"""The user's job: a subclass of :class:`Job` with ``map``, optional ``combine`` and ``reduce``.

A job file is an ordinary Python file that defines one subclass of ``hop.Job``::

    class WordCount(hop.Job):
        def map(self, key, line):
            for word in line.split():
                yield word, 1

        def combine(self, word, counts):
            yield word, sum(counts)

        reduce = combine

Contracts the engine relies on:

- ``map(key, value)`` yields (or returns an iterable of) ``(key, value)`` pairs. For text input ``key`` is the byte
  offset of the line and ``value`` the line without its line break; ``self.input_file`` names the file being read.
  The map buffer spills between records, never inside one call: a call's pairs are held in memory until it
  returns (a record whose map yields millions of pairs, all pairs of a long list, needs memory for all of them).
- ``combine(key, values)`` and ``reduce(key, values)`` get one key and an iterable of its values and yield pairs.
  ``combine`` must keep the key it was given and may run zero, one or several times on any subset of a key's values.
- Keys and values are msgpack-able: ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, lists/tuples and
  dicts of them. Lists arrive as tuples. Keys must also be hashable (a tuple, not a list or a dict). Keys are grouped
  as a dict groups them: keys equal in Python are one key (``1``, ``1.0`` and ``True``; which one is written is not
  defined). Keys of mixed types are ordered as ``shuffle.keys`` defines. The final output is JSON lines, so what the
  last reduce yields must have a JSON form (decode ``bytes`` first).
- ``partition(key, num_partitions)`` returns an int in ``range(num_partitions)``; the default hashes the key with
  Python's ``hash`` (the engine pins ``PYTHONHASHSEED`` in every task process so all processes agree; ``None``, whose
  ``hash`` differs between interpreters before Python 3.12, hashes by value). With one reducer it is not called
  (every key goes to reducer 0, as in Hadoop), so a ``partition`` that checks keys must not be the only check.
- ``setup()`` and ``teardown()`` run once per task attempt around its records.
- ``increment_counter(group, name, amount)`` adds an int to a user counter; only committed attempts' counters are
  reported.
- ``set_status(message)`` says what the running task is doing (``hop run`` prints it above its progress bars), at
  most about once a second per task attempt, the last one as the attempt ends: see :meth:`Job.set_status`.
- ``steps()`` returns a list of :class:`Step` for a multi-step job; each step's reduce output feeds the next step's map.
  It travels as the output lines do, as JSON: a step's reduce yields JSON types (no bytes, dicts with str keys) and
  the next map gets JSON arrays as tuples.
  A step may also set init/final hooks (mrjob's ``mapper_init``, ``reducer_final`` ...), see :class:`Step`; a job
  without ``steps()`` takes the hooks it defines as methods of those names.
- Class attributes configure input: ``input_format`` is ``"text"`` (default), ``"jsonl"``, ``"csv"`` or
  ``"output"``: the part files a hop job wrote (``json(key) TAB json(value)`` per line), so the map gets each
  ``(key, value)`` as that job's reduce yielded it (JSON arrays as tuples), as a later step of a pipeline does.
- Continuous jobs (``hop run JOB --source URL --window ...``, ``hop.stream``) run the same class over a stream: the
  map's ``key`` is the record's event time (``time_field`` or arrival), windows are reduced as they close, and an
  optional ``uncombine`` builds sliding windows differentially.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from hop.aggregates import Aggregate, Mean, Sum
from hop.inputs import Split
from hop.task_status import set_status_of
from shuffle.keys import partition_hash

Pair = tuple[Any, Any]
MapFunction = Callable[[Any, Any], Iterable[Pair] | None]
GroupFunction = Callable[[Any, Iterable[Any]], Iterable[Pair] | None]
HookFunction = Callable[[], Iterable[Pair] | None]

INPUT_FORMATS = ("text", "jsonl", "csv", "output")


@dataclass(frozen=True)
class Step:
    """One MapReduce step of a multi-step job. ``mapper=None`` passes records through unchanged.

    The hooks take no arguments and may return (or yield) pairs, as mrjob's hooks of the same names do:

    - ``mapper_init``/``reducer_init`` run once per task attempt before its first record or group, and
      ``mapper_final``/``reducer_final`` after its last; their pairs join the map's output (partitioned, combined
      and shuffled like the mapper's) or the reduce's output (written before, or after, the groups' output).
      A map with either hook keeps state across the whole attempt, so a retry starts over rather than resuming
      from a checkpoint.
    - ``combiner_init``/``combiner_final``: hop does not run a combiner that has them. A combiner is an
      optimisation that may run zero times (the reducer then sees the map's pairs), so the result is the same;
      hop's combiner runs per spill, where hooks' extra pairs would have no sorted place.
    """

    mapper: MapFunction | None = None
    combiner: GroupFunction | None = None
    reducer: GroupFunction | None = None
    mapper_init: HookFunction | None = None
    mapper_final: HookFunction | None = None
    combiner_init: HookFunction | None = None
    combiner_final: HookFunction | None = None
    reducer_init: HookFunction | None = None
    reducer_final: HookFunction | None = None
    show_key: Callable[[Any], str] = repr
    """How errors name a key of this step's combine or reduce: ``repr``, unless the keys travel in another form
    than the job's code yields them (an mrjob job's encoded lines, ``hop.mrjob_adapter``)."""

    @property
    def hooks(self) -> list[str]:
        """The names of the init/final hooks this step sets."""
        return [name for name in HOOKS if getattr(self, name) is not None]


class JobDefinitionError(ValueError):
    """A job's steps cannot run as defined (an aggregate reduce with a different combine, no steps)."""


_MRJOB_NAMES = {"mapper": "map", "combiner": "combine", "reducer": "reduce"}
"""mrjob's names of the step functions, and hop's."""

HOOKS = ("mapper_init", "mapper_final", "combiner_init", "combiner_final", "reducer_init", "reducer_final")
"""mrjob's init/final hooks, the names of a :class:`Step`'s hook fields (each called without arguments)."""


def _same_combine(combiner: object, aggregate: Aggregate) -> bool:
    """Whether ``combiner`` may combine for the reduce ``aggregate``: unset, or an aggregate of the same class and
    settings (``combine = Sum(); reduce = Sum()`` is two instances of one aggregate, as ``TopK(3)`` twice is, where
    ``TopK(5)`` is another). A ``Sum``'s or ``Mean``'s ``nonnegative`` is no setting of its combining: it tells the
    reduce's snapshots what they may assume of the values, so ``combine = Sum(); reduce = Sum(nonnegative=True)``
    combines alike."""
    if combiner is None or combiner is aggregate:
        return True
    if type(combiner) is not type(aggregate):
        return False
    ours, theirs = dict(vars(combiner)), dict(vars(aggregate))
    if isinstance(aggregate, Sum | Mean):
        ours.pop("nonnegative", None)
        theirs.pop("nonnegative", None)
    return ours == theirs


def identity_map(key: Any, value: Any) -> Iterator[Pair]:
    """The map of a step without a mapper: pass the record on."""
    yield key, value


def identity_reduce(key: Any, values: Iterable[Any]) -> Iterator[Pair]:
    """The reduce of a step without a reducer: every value of every key, in order."""
    for value in values:
        yield key, value


@dataclass(frozen=True)
class TaskIdentity:
    """Which task attempt a job instance runs (:attr:`Job.task_identity`): ``kind`` ``"map"`` or ``"reduce"``, the
    task's ``index`` (a reduce's is its partition), its ``attempt`` (from 0) and the ``job_id`` of its step."""

    kind: str
    index: int
    attempt: int
    job_id: str


class Job:
    """Base class of user jobs. Override ``map`` and usually ``reduce``; see the module docstring."""

    input_format: ClassVar[str] = "text"
    time_field: ClassVar[str | None] = None
    """Continuous jobs: the field of a dict record (JSON line, msgpack map) holding its event time in seconds since
    the epoch; ``None`` (the default) stamps each record with its arrival time. Either way a record gets its event
    time once, when it enters, and the map sees it as ``key``."""

    uncombine: Callable[[Any, Any, Any], Any] | None = None
    """Continuous jobs, optional: a method ``uncombine(self, key, current, old)`` returning ``current`` without
    ``old`` (the inverse of combining two values, e.g. ``current - old`` for a sum). With it, each sliding window
    is built from the previous one differentially (W1 = W0 - P0 + P2) instead of merging all its panes."""

    def __init__(self) -> None:
        self.input_file: str | None = None
        self.input_split: Split | None = None
        """The byte range of :attr:`input_file` a batch map of hop's engine reads (``hop.inputs.Split``: ``path``,
        ``start``, ``length``, -1 for a file read whole), set before ``setup()`` to its first and replaced (never
        changed in place) as the map goes on to its next: a map may read several (small files packed into one
        task, ``--order random``'s chunks), and a tail split (``hop.scheduler``) ends the one being read earlier,
        from the map's next record on. ``None`` where the map reads no byte range of a file (a pipelined later
        step's, fed as the step before's reduce writes) and elsewhere (Spark, a continuous job)."""
        self.step_number = 0
        """The step (from 0, in :meth:`resolved_steps`) a batch task of hop's engine runs, set before ``setup()``."""
        self.task_identity: TaskIdentity | None = None
        """The map or reduce attempt a batch task of hop's engine runs, set before ``setup()`` (``None`` elsewhere:
        a snapshot's later-step map, Spark, a continuous job)."""
        self._counters: dict[str, dict[str, int]] = {}

    # The user's functions. -------------------------------------------------------------------------------
    def map(self, key: Any, value: Any) -> Iterable[Pair] | None:
        """Yield pairs for one input record. The default passes the record through."""
        return identity_map(key, value)

    combine: GroupFunction | None = None
    """Optional: a method ``combine(self, key, values)``; ``None`` means no combiner."""

    def reduce(self, key: Any, values: Iterable[Any]) -> Iterable[Pair] | None:
        """Yield output pairs for one key. The default writes every value."""
        return identity_reduce(key, values)

    def partition(self, key: Any, num_partitions: int) -> int:
        """Which reducer gets ``key``: a deterministic hash modulo the number of reducers (``hash(key)``, with
        ``None`` hashed by value: ``shuffle.keys.partition_hash``). Not called when there is one reducer."""
        return partition_hash(key) % num_partitions

    def setup(self) -> None:
        """Called once per task attempt before the first record."""

    def teardown(self) -> None:
        """Called once per task attempt after the last record (not after a failure)."""

    def input_stratum(self, path: str) -> str | None:
        """Online aggregation: the stratum an input file belongs to (e.g. the hour in its name); ``None`` (the
        default) puts the whole input in one stratum. Runs on the submitting machine, once per file."""
        return None

    def key_stratum(self, key: Any) -> str | None:
        """Online aggregation: the stratum a reduce group draws from (e.g. the hour in the key), so its estimate
        scales by the fraction of *that* stratum seen; must name a stratum ``input_stratum`` gives (both are
        compared as ``str()``: the hour as an int from both is fine). A group whose stratum is ``None`` or no input
        file's is estimated as if the whole input were one stratum."""
        return None

    def steps(self) -> list[Step] | None:
        """A multi-step job returns its steps; ``None`` (the default) means one step of map/combine/reduce."""
        return None

    # Services for user code. -----------------------------------------------------------------------------
    def increment_counter(self, group: str, name: str, amount: int = 1) -> None:
        """Add ``amount``, an int, to the user counter ``group``/``name``. Another amount raises ``TypeError``, as
        under mrjob: ``int()`` would have counted 0.5 as 0 and 2.9 as 2 without a word."""
        if not isinstance(amount, int):
            raise TypeError(
                f"increment_counter({group!r}, {name!r}, {amount!r}): the amount must be an int, not "
                f"{type(amount).__name__} (counters count whole units: round it, or count in smaller units)"
            )
        group_counters = self._counters.setdefault(str(group), {})
        group_counters[str(name)] = group_counters.get(str(name), 0) + int(amount)

    def set_status(self, message: Any) -> None:
        """Set ``message`` (any object, said as ``str`` says it) as the status of the task attempt running this code:
        from ``map``, ``combine``, ``reduce``, ``setup``/``teardown`` and the init/final hooks, in batch, online and
        continuous jobs and every step of a pipeline (``hop.task_status`` carries it).

        - ``hop run`` and ``hop submit`` print it above their progress bars, as one line (control characters
          escaped): ``hop: WordCount status (task map 3): MESSAGE``, ``hop: step 2/2 TopK status (task reduce 0):
          ...`` in a run of several steps, ``(task map 3 attempt 1)`` for a retry. ``hop status JOB_ID`` gives each
          running task's latest (and a failed attempt's last), ``OUT/_job.json`` each attempt's last as its
          ``status_message``.
        - A message is sent when it differs from the last one sent and a second has passed since, and the last one
          set is sent as the attempt ends (before its end: a failed attempt's too), so calling it on every record
          costs a call and a comparison (a clock read for a new message), and the coordinator hears at most about
          one a second per attempt. A message longer than 1,000 characters is cut there.
        - A continuous job's tasks run until it stops: ``hop run --source`` prints their messages as they come,
          among its windows' lines, and ``hop status JOB_ID`` gives each task's latest.
        - Called outside hop's engine (the job's methods called by hand, in a unit test), the message is printed on
          standard error, ``hop: WordCount status (task pid 1234): MESSAGE``, under the same limit per process; the
          last one held back is printed as the process exits. ``--engine spark`` runs the job's methods so too, in
          Spark's Python workers (whose standard error the run prints), under the same limit per worker process,
          and prints a task's last message as the task ends, failed too.
        """
        set_status_of(self, message)

    # Engine side. ------------------------------------------------------------------------------------------
    def resolved_steps(self) -> list[Step]:
        """The job as a list of steps, whether or not it overrides ``steps()``."""
        steps = self.steps()
        if steps is None:
            self._check_mrjob_names()
            # Hooks defined as methods, as mrjob jobs define them, belong to the one step (ignoring them would drop
            # their output without a word).
            hooks = {name: getattr(self, name) for name in HOOKS if callable(getattr(self, name, None))}
            steps = [Step(self.map, self.combine, self.reduce, **hooks)]
        if not isinstance(steps, (list, tuple)) or not all(isinstance(step, Step) for step in steps):
            raise JobDefinitionError(
                f"{type(self).__name__}.steps() returned {steps!r:.200}: return a list of hop.Step(mapper=..., "
                "combiner=..., reducer=...), or None for one step of the class's map/combine/reduce"
            )
        if not steps:
            raise JobDefinitionError(f"{type(self).__name__}.steps() returned no steps")
        for number, step in enumerate(steps, 1):
            if isinstance(step.reducer, Aggregate) and not _same_combine(step.combiner, step.reducer):
                where = f" step {number}" if len(steps) > 1 else ""  # (from 1, as hop run's messages number steps)
                raise JobDefinitionError(
                    f"{type(self).__name__}{where}: reduce is the aggregate {step.reducer!r}, so combine "
                    "must be the same aggregate or unset (the shuffle carries the aggregate's states)"
                )
        return list(steps)

    def _check_mrjob_names(self) -> None:
        """Refuse a one-step job that defines mrjob's ``mapper``, ``combiner`` or ``reducer`` instead of hop's
        ``map``, ``combine`` or ``reduce``: hop would not call it, and run the default in its place (the input
        lines passed through as the output) without a word."""
        for theirs, ours in _MRJOB_NAMES.items():
            defined = callable(getattr(self, theirs, None))
            if defined and getattr(type(self), ours, None) is getattr(Job, ours, None):
                raise JobDefinitionError(
                    f"{type(self).__name__} defines {theirs}(), which hop does not call: name it {ours} (hop's "
                    "methods are map, combine and reduce; mrjob's names are the arguments of hop.Step in steps(), "
                    "and hop run --mrjob runs an mrjob job as it is)"
                )

    def counters_so_far(self) -> dict[str, dict[str, int]]:
        """A copy of the user counters gathered so far (for a map checkpoint)."""
        return {group: dict(names) for group, names in self._counters.items()}

    def take_counters(self) -> dict[str, dict[str, int]]:
        """Return the user counters gathered so far and reset them."""
        counters, self._counters = self._counters, {}
        return counters
