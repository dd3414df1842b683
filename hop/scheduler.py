"""The coordinator's bookkeeping for one job, as a state machine with no I/O.

Events go in (a task attempt started, a map attempt finished, a worker was lost, ...); actions come out as small
dataclasses that the coordinator process carries out (send a message, rename an output file, finish the job). Tests
drive this class directly, without processes.

Rules:

- A task is *pending* until an attempt is assigned; the first attempt of a map to finish commits, later ones are
  superseded. Every commit is announced to all workers (``map_committed``), so reducers can move that attempt's runs
  from tentative to committed; superseded or failed attempts are announced as ``map_failed``.
- A reduce attempt's output is committed (renamed to ``part-NNNNN``) by the first attempt of that partition to finish.
- A failed attempt is retried while ``max_attempts`` allows and the failure is retryable (its task process
  died); an error in user code fails the job at once, since running the same code on the same record fails again.
  Only ``failed`` attempts count against ``max_attempts``: an attempt ended for a reason outside the task (``lost``
  with its worker, which stopped or went silent; ``killed`` by the coordinator) is retried, as Hadoop counts
  killed attempts apart from failed ones. So workers coming and going never give up a task (a continuous job's
  source, a batch map), while one that crashes ``max_attempts`` times still fails its job (gives its source up).
  But a task's code can end the worker it runs under (a signal to its parent, memory the system kills for): on a
  cluster whose workers are restarted, or that new workers keep joining, it was retried for ever. So a batch job's
  attempts lost with a worker that died under them (went silent, or was replaced by a new process under its name:
  not one that said it stops) are counted too, apart from failures and against a larger limit,
  ``DEATHS_PER_ATTEMPT`` times ``max_attempts``: an outside cause seldom kills a worker under the same task twice.
- Counters are summed over committed attempts only, so retries never count twice.
- Tail splitting: when map slots idle and no map waits for one (a pipeline's later step's map waits, without counting,
  while the step before may still split one: ``JobState.map_may_start``), the running maps expected to run longest (at
  least ``TAIL_SPLIT_SECONDS`` more) are asked to hand the rest of their input over (``split_off``): the rest of the
  chunk being read, cut half-way through what is left of it, and the chunks after it. A map that agrees has already
  ended its input where it says (``hop.inputs.ReadLimit``), so its answer (``on_map_split``) is always taken while that
  attempt is live: the map's input is shortened (a retry reads only that) and the rest becomes a new map task, announced
  to reducers (``maps_added``) before the map can commit. An answer of an attempt no longer live is dropped with that
  attempt's output (a retry reads the whole split); a map with another live attempt (speculation) is never asked, and
  none is started for a map while it is being asked. A map run again because its committed output was lost is never
  split: reducers holding every run of the lost attempt keep it.
"""

from __future__ import annotations

import collections
import itertools
import math
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hop.counters import total_user_counters
from hop.inputs import Split
from hop.jobspec import JobSpec
from hop.online.tracker import SnapshotTracker
from hop.outputs import OutputGuard
from hop.planning import Chunk
from hop.stdin_input import inputs_as_given
from hop.stream.tracker import WindowTracker

TAIL_SPLIT_SECONDS = 1.0
"""A running map is split for an idle slot only if it looks at least this far from its end (by the time it took for
the fraction it last reported). Both parts still end with a final spill and a commit, which a split does not
shorten and the new map adds (with its start-up): 0.3-0.4 s for a word count's 100,000 words, measured; at 0.5 s
a word count's splits cost more than they saved (``bench.tail_split``)."""
DEATHS_PER_ATTEMPT = 2
"""A batch job fails once one of its tasks had this many times ``max_attempts`` attempts lost with a worker that died
under them (see the module docstring): never after one death, even with ``max_attempts`` 1, since a worker killed
from outside is not the task's fault; soon enough that a task killing every worker it runs on ends its job."""
TAIL_SPLIT_RETRY_SECONDS = 1.0
"""How long after a map declined to split (it was between inputs, or its rest was short) it may be asked again."""

STATUS_LOG = 1000
"""Task status messages a job keeps for clients following it (``JobState.status_log``): each attempt sends at most
about one a second (``hop.task_status``), and a client asks every 0.1 s, so only a thousand attempts' messages
within a tenth of a second would push out one it has not had; a job holds at most this many messages of at most
``hop.task_status.STATUS_CHARS`` characters."""

BUILTIN_COUNTERS = (
    "map_input_records",
    "map_output_records",
    "combine_input_records",
    "combine_output_records",
    "spill_files",
    "spills_pushed",
    "shuffle_bytes",
    "reduce_input_records",
    "reduce_output_records",
)


@dataclass
class Attempt:
    """One attempt of a task, as reported in ``_job.json``."""

    kind: str
    index: int
    attempt: int
    worker: str
    pool: str = ""
    """The worker's slots it runs in: ``kind``'s, or ``"stream"`` for a continuous job's task in a stream slot."""
    pid: int | None = None
    start: float | None = None
    end: float | None = None
    status: str = "assigned"
    error: str | None = None
    to_silent_worker: bool = False
    """Assigned to a worker already silent past a few heartbeats (killed, it had not been found lost yet): lost
    with it before it started, such an attempt cannot have ended it."""
    counters: dict[str, int] = field(default_factory=dict)
    user_counters: dict[str, dict[str, int]] = field(default_factory=dict)
    bad_records: list[dict[str, Any]] = field(default_factory=list)
    """Records a map skipped (``--skip-bad-records``), with their errors."""
    checkpoint: dict[str, Any] | None = None
    """The latest map checkpoint of this attempt (spills registered, records covered, counters)."""
    resumed_from: dict[str, Any] | None = None
    input_complete: float | None = None
    """A reduce attempt's: when every map had committed and all their runs had reached it (its merge began)."""
    memory: dict[str, int] | None = None
    """A reduce attempt's: bytes its task process held resident as it began (``start_bytes``) and at most while it
    ran (``peak_bytes``), where the platform tells (``hop.peak_memory``)."""
    progress: tuple[float, int] | None = None
    """The attempt's latest reported (fraction, records)."""
    progress_at: float | None = None
    """When the attempt last advanced: started, or reported a fraction or record count other than its previous one
    (the cluster monitor's stuck-task alert measures from it)."""
    status_message: dict[str, Any] | None = None
    """The last status message (a job's ``set_status``) the attempt sent while live, as ``JobState.task_statuses``
    gives it; its ``message`` is in the attempt's report (``status_message``): a failed attempt's last word is what
    a user debugging it wants."""

    @property
    def live(self) -> bool:
        """Assigned to a worker or running: not settled (committed, failed, lost, killed) yet."""
        return self.status in ("assigned", "running")

    @property
    def died_with_worker(self) -> bool:
        """Lost with a worker that died under it (went silent, or a new process registered under its name): not one
        that said it stops, nor only the spills it built on lost with another worker, nor one sent to a worker
        already silent that never reported it started (``to_silent_worker``: a worker killed from outside, not yet
        found lost, got the tasks of one found lost before it, which then seemed to have run on both as they died).
        An attempt sent to a live worker counts even unstarted: its task may end the worker before the worker
        relays its start."""
        if self.to_silent_worker and self.start is None:
            return False
        return self.status == "lost" and self.error == worker_died(self.worker)

    def report(self) -> dict[str, Any]:
        return {
            "task_id": f"{self.kind}-{self.index:05d}",
            "attempt": self.attempt,
            "kind": self.kind,
            "worker": self.worker,
            **({"resumed_after_records": self.resumed_from["records"]} if self.resumed_from else {}),
            "pid": self.pid,
            "start": self.start,
            "end": self.end,
            "status": self.status,
            **({"input_complete": self.input_complete} if self.input_complete is not None else {}),
            **({"memory": self.memory} if self.memory is not None else {}),
            **({"error": self.error} if self.error else {}),
            **({"status_message": self.status_message["message"]} if self.status_message else {}),
        }


@dataclass
class TaskState:
    kind: str
    index: int
    attempts: list[Attempt] = field(default_factory=list)
    committed: int | None = None
    fraction: float = 0.0
    records: int = 0
    bad: int = 0
    """A stream map's bad records dropped, as its latest attempt last reported (or committed)."""
    written: int | None = None
    """A pipelined reduce: the size of its output, once its live attempt wrote all of it (it waits for the next
    job's map to take it)."""
    taken: int = 0
    """A map reading a pipe: the bytes of its partition it took, as its live attempt last reported."""
    from_file: bool = False
    """A map reading a pipe: it reads the committed file (its ``fraction`` is of the whole partition)."""
    output_lost: bool = False
    """A map whose committed output was lost with its worker: it runs again on the same input, never split (reducers
    that hold every run of the lost attempt keep it and ignore the new one, so a split-off rest would count twice)."""
    resume: dict[str, Any] | None = None
    """Where the next attempt of a map starts: kept spill segments ``[attempt, first_seq, end_seq]`` of failed
    attempts, the spill count and records they cover, and their counters (see ``hop.tasks.run_map``)."""

    @property
    def pending(self) -> bool:
        """Waiting for a slot: not committed and no attempt assigned or running."""
        return self.committed is None and not any(a.live for a in self.attempts)

    @property
    def failures(self) -> int:
        """Attempts that failed (their task process died): what ``max_attempts`` limits. Attempts lost with their
        worker or killed by the coordinator are not the task's doing and do not count."""
        return sum(a.status == "failed" for a in self.attempts)

    @property
    def deaths(self) -> int:
        """Attempts lost with a worker that died under them, which ``DEATHS_PER_ATTEMPT * max_attempts`` limits in a
        batch job."""
        return sum(a.died_with_worker for a in self.attempts)


def worker_died(worker: str) -> str:
    """The error of an attempt lost with ``worker``, which went silent or was replaced (not one that stopped)."""
    return f"worker {worker} was lost"


# Actions ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Broadcast:
    """Send ``message`` (type and fields) to every live worker."""

    kind: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class CommitOutput:
    """Rename a reduce attempt's temporary output to its final part file."""

    temporary: str
    final: str


@dataclass(frozen=True)
class DiscardOutput:
    path: str


@dataclass(frozen=True)
class KillAttempt:
    """Stop an attempt settled here (it lost a speculative race, its input went away, its slot is needed
    upstream, it passed ``--task-timeout``): its worker ends the task process (the slot restarts) and reports the
    slot free, nothing else."""

    worker: str
    kind: str
    index: int
    attempt: int


@dataclass(frozen=True)
class FinishJob:
    status: str
    error: str | None = None


Action = Broadcast | CommitOutput | DiscardOutput | FinishJob | KillAttempt


class JobState:
    """Tasks, attempts, commits and counters of one job."""

    def __init__(
        self,
        spec: JobSpec,
        splits: Sequence[Split | list[Chunk]],
        max_attempts: int = 4,
        status_numbers: Iterator[int] | None = None,
    ) -> None:
        """``status_numbers``: the numbers of task status messages (``on_task_status``), shared by the coordinator's
        jobs, so that one ``status_after`` says which messages of several jobs a client has (a pipeline's steps)."""
        self.spec = spec
        self.splits = list(splits)
        """Per map task its input: a split, or its chunks (``hop.planning``); tail splitting shortens a map's last
        chunk and appends a map task for the rest."""
        self.max_attempts = max_attempts
        self.task_timeout = task_timeout(spec.options, spec.step)
        """``--task-timeout``: seconds a running attempt may go without advancing before it fails
        (:meth:`time_out_stalled`); None: it may for ever."""
        self.maps = [TaskState("map", i) for i in range(len(splits))]
        self.reduces = [TaskState("reduce", i) for i in range(spec.num_reduces)]
        self.state = "running"
        self.error: str | None = None
        self.error_traceback: str | None = None
        self.coordinator_stopped = False
        """Whether it failed because its coordinator was stopped (a client then exits as for a coordinator gone)."""
        self.failed_by: str | None = None
        """The pipeline step after this one (``hop.pipe``) whose failure failed this one, which did not fail itself:
        the step a client names as the one that failed."""
        self.submitted_at = time.time()
        self.finished_at: float | None = None
        self.first_shuffle_at: float | None = None
        self.last_map_commit_at: float | None = None
        self.last_reduce_input_at: float | None = None
        """When the last committed reduce attempt had all its input: minus ``last_map_commit_at``, how long the
        shuffle ran on after the maps (blocking mode sends every map's output only after it commits)."""
        self.reducer_addresses: dict[int, tuple[int, str]] = {}
        self.snapshots: SnapshotTracker | None = None
        """Online aggregation: snapshot requests and answers (set by the coordinator)."""
        self.approximate: dict[str, Any] | None = None
        """Set when ``--stop-when-accurate`` ended the job with a snapshot as its result."""
        self.stop_held_back: dict[str, Any] | None = None
        """``--stop-when-accurate``: the latest snapshot that could have ended the job and why it did not."""
        self.windows: WindowTracker | None = None
        """Continuous jobs (``options["stream"]``): the windows written so far (set by the coordinator)."""
        self.upstream: JobState | None = None
        """Pipelines: the job whose reduce output this job's maps read through pipes (set by the coordinator)."""
        self.stopping = False
        """A continuous job was asked to stop: its maps drain and end."""
        self.workers_lost: list[tuple[str, bool]] = []
        """The workers lost while the job ran, in order, each with whether it said it stops (else it went silent or
        was replaced): a name twice for a worker lost twice (restarted under its name)."""
        self.sources_gone: set[int] = set()
        self.sources_unstarted: set[int] = set()
        """Sources of a stopping continuous job that had no slot to drain in (``end_sources_without_slot``)."""
        self.sources_told_gone: set[int] = set()
        """Sources the reducers were told are gone for good (``stream_source_gone``): given up, unstarted, or ended
        with the spills their worker kept lost with it. A reduce attempt started later is told at its start."""
        self._waiting_for_slot: dict[int, float] = {}
        """Per source of a stopping continuous job waiting for a slot, when ``end_sources_without_slot`` first found
        it waiting (the coordinator's clock)."""
        self.sources_listening: dict[int, str] = {}
        """map index -> the address its source listens at, as its live attempt bound it (``tcp:HOST:0`` and
        ``zmq:tcp://HOST:*`` pick a port: producers learn it from here)."""
        self.split_asked: dict[int, int] = {}
        """Tail splitting: map index -> the attempt asked to split off its rest, until it answers or ends."""
        self.split_declined: dict[tuple[int, int], float] = {}
        """(map index, attempt) -> when it last declined to split."""
        self.tail_splits = 0
        """Map tasks made from the rest of a running map's input."""
        self.map_spills: dict[int, tuple[int, int, list[list[int]]]] = {}
        """map index -> (committed attempt, spills, kept segments of earlier attempts it resumed from)."""
        self.output_held: OutputGuard | None = None
        """The coordinator's hold on the output directory it accepted the job with (open, ``O_DIRECTORY``), until
        the job ends: its part files are renamed, its snapshots published and its ``_temporary`` removed relative
        to it, never in another directory given the name."""
        self.output_identity: tuple[int, int] | None = None
        """The output directory's (device, inode) when the job was accepted (``hop.outputs.output_identity``; set by
        the coordinator): another one, or none, means the user removed or moved it while the job ran."""
        self.status_log: collections.deque[dict[str, Any]] = collections.deque(maxlen=STATUS_LOG)
        """The latest task status messages live attempts sent (``hop.task_status``), oldest first: ``{job_id, kind,
        index, attempt, message, seq}``, ``seq`` from ``status_numbers``. Every one, not each task's latest: a
        client polling every 0.1 s still gets two messages of a task that came between two polls (the one an
        attempt sets as it ends, after one sent just before)."""
        self._status_numbers = itertools.count(1) if status_numbers is None else status_numbers

    @property
    def continuous(self) -> bool:
        return bool(self.spec.options.get("stream"))

    # Queries -----------------------------------------------------------------------------------------------
    def tasks(self, kind: str) -> list[TaskState]:
        return self.maps if kind == "map" else self.reduces

    def pending(self, kind: str) -> list[TaskState]:
        if self.state != "running":
            return []
        return [t for t in self.tasks(kind) if t.pending and not (kind == "map" and t.index in self.sources_unstarted)]

    def speculation_candidates(self, now: float, slowdown: float = 2.0, minimum: float = 1.0) -> list[TaskState]:
        """Running maps that look like stragglers and have no backup attempt yet.

        A map is a straggler when it has run longer than ``slowdown`` times the median duration of the maps that
        already committed (and at least ``minimum`` seconds), and its progress says it will not finish soon: its
        projected total time (elapsed / fraction done) also exceeds that bound. Slowest first.
        """
        if self.state != "running":
            return []
        durations = sorted(
            a.end - a.start
            for t in self.maps
            if t.committed is not None
            for a in [t.attempts[t.committed]]
            if a.start is not None and a.end is not None
        )
        if not durations:
            return []
        bound = max(minimum, slowdown * durations[len(durations) // 2])
        candidates = []
        for task in self.maps:
            running = [a for a in task.attempts if a.live]
            if task.committed is not None or len(running) != 1 or running[0].start is None:
                continue
            if self.split_asked.get(task.index) == running[0].attempt:
                continue  # a backup would read the whole split the map may be ending early right now
            elapsed = now - running[0].start
            fraction = self.map_task_fraction(task)  # (a pipe's share of what it got would say "nearly done")
            projected = elapsed / fraction if fraction > 0 else float("inf")
            if elapsed > bound and projected > bound:
                candidates.append((projected, task))
        return [task for _, task in sorted(candidates, key=lambda pair: -pair[0])]

    @property
    def splits_tails(self) -> bool:
        """Whether this job's running maps may be split for idle slots: a batch job reading files (not a pipe, not
        a stream), not online (an online job's chunks are its sampling units and snapshots count them), not a later
        step run ``--blocking`` (``map_per_part``: a map per partition of the step before, as when pipelined, so
        that its hooks run as often in either mode), unless ``--no-tail-split``."""
        options = self.spec.options
        return (
            self.state == "running"
            and bool(options.get("tail_split", True))
            and not options.get("online")
            and not options.get("map_per_part")
            and not self.continuous
            and self.upstream is None
            and not options.get("upstream")
        )

    def tail_split_candidates(self, now: float, count: int) -> list[Attempt]:
        """Up to ``count`` live map attempts to ask to split off their rest, the furthest from their end first:
        the only live attempt of their map, not being asked already (nor declined in the last
        ``TAIL_SPLIT_RETRY_SECONDS``), and at least ``TAIL_SPLIT_SECONDS`` from their end by their progress (elapsed
        / fraction done)."""
        for index, asked in list(self.split_asked.items()):
            if not self.maps[index].attempts[asked].live:
                del self.split_asked[index]  # it ended (committed, failed, lost) before it answered
        if count <= 0 or not self.splits_tails or any(task.pending for task in self.maps):
            return []
        candidates = []
        for task in self.maps:
            attempt = self._splittable_attempt(task)
            if (
                attempt is None
                or task.index in self.split_asked
                or attempt.status != "running"
                or attempt.start is None
            ):
                continue
            declined = self.split_declined.get((task.index, attempt.attempt))
            if declined is not None and now - declined < TAIL_SPLIT_RETRY_SECONDS:
                continue
            left = self._seconds_left(task, attempt, now)
            if left is not None and left >= TAIL_SPLIT_SECONDS:
                candidates.append((left, attempt))
        candidates.sort(key=lambda pair: -pair[0])
        return [attempt for _, attempt in candidates[:count]]

    def _splittable_attempt(self, task: TaskState) -> Attempt | None:
        """Map ``task``'s attempt that tail splitting may ask: the only live attempt of a map reading chunks of files,
        not committed, nor run again because its committed output was lost (see the module docstring)."""
        if task.committed is not None or task.output_lost or not isinstance(self.splits[task.index], list):
            return None
        live = [a for a in task.attempts if a.live]
        return live[0] if len(live) == 1 else None

    @staticmethod
    def _seconds_left(task: TaskState, attempt: Attempt, now: float) -> float | None:
        """How far a running map attempt looks from its end, by the time it took for the fraction it last reported
        (up to half a second old); None before it reported a fraction below 1."""
        fraction = task.fraction
        if attempt.start is None or not 0.0 < fraction < 1.0:
            return None
        reported = min(now, attempt.progress_at or now)
        return (reported - attempt.start) * (1.0 - fraction) / fraction - (now - reported)

    def on_split_asked(self, index: int, attempt: int) -> None:
        self.split_asked[index] = attempt

    def on_map_split(
        self, index: int, attempt: int, chunk: int | None, cut: int | None, at: float, never: bool = False
    ) -> list[Action]:
        """A map attempt's answer to ``split_off``: it hands over its chunks after chunk number ``chunk`` and, if
        ``cut`` is given, the rest of that chunk from byte ``cut`` on (it reads up to there); ``chunk`` ``None``: it
        declined, for good with ``never`` (a map with ``mapper_init``/``mapper_final``: it is not asked again). See
        the module docstring."""
        if self.split_asked.get(index) == attempt:
            del self.split_asked[index]
        task = self.maps[index]
        record = task.attempts[attempt]
        if chunk is None:
            self.split_declined[(index, attempt)] = math.inf if never else at
            return []
        if not record.live or task.committed is not None or self.state != "running":
            return []  # that attempt's output is not taken: whoever reads the map again reads all of its input
        chunks = self.splits[index]
        assert isinstance(chunks, list), "only a map reading chunks of files is asked to split"
        kept, rest = chunks[: chunk + 1], chunks[chunk + 1 :]
        if cut is not None:
            last = kept[-1]
            split = last.split
            if not split.start <= cut < split.end:
                raise ValueError(f"map {index} attempt {attempt} cut {split.describe()} at byte {cut}")
            head = Split(split.path, split.start, cut - split.start, split.stamp)
            tail = Split(split.path, cut, split.end - cut, split.stamp)
            new_id = 1 + max(c.id for task_chunks in self.splits for c in task_chunks)  # type: ignore[union-attr]
            kept[-1] = Chunk(last.id, head, head.length, last.stratum)
            rest.insert(0, Chunk(new_id, tail, tail.length, last.stratum))
        if not rest:
            raise ValueError(f"map {index} attempt {attempt} split off nothing after chunk {chunk}")
        self.splits[index] = kept
        self.splits.append(rest)
        self.maps.append(TaskState("map", len(self.maps)))
        self.tail_splits += 1
        return [Broadcast("maps_added", {"job_id": self.spec.job_id, "num_maps": len(self.maps)})]

    def attempt(self, kind: str, index: int, attempt: int) -> Attempt:
        return self.tasks(kind)[index].attempts[attempt]

    @property
    def map_bytes(self) -> list[int]:
        """Input bytes of every map task."""
        sizes = []
        for task_input in self.splits:
            if isinstance(task_input, Split):
                sizes.append(max(1, task_input.length))
            else:
                sizes.append(max(1, sum(chunk.size for chunk in task_input)))
        return sizes

    def map_may_start(self, index: int, now: float) -> bool:
        """Whether pending map ``index`` may take a free slot. A pipeline's later step's map reads partition ``index``
        of the step before, which is written once every map of that step has committed (a reduce runs once it has all
        its input). Until then it waits while a map of the step before waits for a slot or may still be split
        (``may_split_a_map``): in a slot, it would hold it idle and keep it from that work. Then it takes a slot that
        frees, to listen before the upstream reduce writes, and gets its partition streamed as it is written; once
        the partition committed it starts at once, and reads the file. (An upstream map that fails later gets a slot
        back by preemption.)"""
        upstream = self.upstream
        if upstream is None or upstream.reduces[index].committed is not None:
            return True
        return not any(m.pending for m in upstream.maps) and not upstream.may_split_a_map(now)

    def may_split_a_map(self, now: float) -> bool:
        """Whether a running map of this job may yet be asked to split off its rest for a free slot: being asked; or
        one that could be a ``tail_split_candidates`` answer now or later, as it reported no fraction yet or looks at
        least ``TAIL_SPLIT_SECONDS`` from its end (even one that declined lately: it is asked again)."""
        if not self.splits_tails:
            return False
        for task in self.maps:
            if task.index in self.split_asked:
                return True
            live = self._splittable_attempt(task)
            if live is None:
                continue
            if live.status != "running" or task.fraction <= 0.0:
                return True
            left = self._seconds_left(task, live, now)
            if left is not None and left >= TAIL_SPLIT_SECONDS:
                return True
        return False

    def maps_committed(self) -> bool:
        """Whether every map task has committed its output (it may still be on its way to the reducers); a
        stopping continuous job's source that got no slot to drain in has nothing to commit."""
        return all(t.committed is not None or t.index in self.sources_unstarted for t in self.maps)

    def input_fraction(self) -> float:
        """The fraction of map input bytes processed (committed maps count whole)."""
        sizes = self.map_bytes
        done = sum(size * self.map_task_fraction(t) for size, t in zip(sizes, self.maps, strict=True))
        return done / max(1, sum(sizes))

    def processed_fraction(self) -> float:
        """The fraction of the input processed as the job's description says it (``Client.job``, ``hop status``,
        the web view): :meth:`input_fraction`, but no less than the latest snapshot's reducers held. A map reports
        its progress every ``PROGRESS_SECONDS`` while its chunks' runs go to the reducers as each chunk ends, so a
        snapshot may hold input the maps' last reports do not count yet: the web view showed "62% of the input
        processed" beside "snapshot 0.600: 63% of the input seen". (The thresholds stay on the maps' reports.)"""
        fraction = self.input_fraction()
        if self.snapshots is not None:
            fraction = max(fraction, self.snapshots.held_input())
        return fraction

    def map_task_fraction(self, task: TaskState) -> float:
        """How far map ``task`` got: 1.0 once committed, else what its live attempt reported. A map reading its
        partition through a pipe (``upstream``) knows the partition's size only when it reads the committed file;
        before, the bytes it took are divided by the size the upstream reduce reports once its output is whole,
        and until then its share of what it got so far is weighed by that reduce's progress (0.5 once it has its
        input, rising as it reduces it)."""
        if task.committed is not None:
            return 1.0
        if self.upstream is None or task.from_file or task.index >= len(self.upstream.reduces):
            return task.fraction
        feeding = self.upstream.reduces[task.index]
        if feeding.written:
            return min(1.0, task.taken / feeding.written)
        return task.fraction * (1.0 if feeding.committed is not None else feeding.fraction)

    def no_live_workers(self, last: str) -> str:
        """Why the job fails when the cluster has no live worker left, ``last`` the one lost last: the workers it
        lost as it ran and how (gone silent: killed or crashed, by whom the coordinator cannot tell; or stopped),
        how many times, and the tasks running on them as they were lost (``Attempt.died_with_worker``).

        It said "check whether its code ends the process it runs under" of every task that had run on two of them
        (a map or reduce moved to a worker killed a moment later included), though a cluster whose workers someone
        killed looks the same. Now a task that ran on each worker that went silent, as it did, is named so, and the
        check is asked for only if it is the one such task and nothing outside the job ended them; a task whose code
        kills its workers is blamed outright once it has killed ``DEATHS_PER_ATTEMPT * max_attempts`` of them
        (:meth:`_kills_its_workers`)."""
        died = Counter(name for name, left in self.workers_lost if not left)
        stopped = Counter(name for name, left in self.workers_lost if left)

        def listed(counts: Counter[str]) -> str:
            return ", ".join(name if times == 1 else f"{name} {times} times" for name, times in counts.items())

        losses = (
            [f"{listed(died)} went silent (killed or crashed: the coordinator cannot tell by whom)"] if died else []
        )
        losses += [f"{listed(stopped)} stopped"] if stopped else []
        lost = len(self.workers_lost)
        why = f"no live workers: the last one ({last}) was lost"
        if losses:
            why += f"; the job lost workers {lost} {'time' if lost == 1 else 'times'} as it ran: {'; '.join(losses)}"
        running = [f"{name} (on {', '.join(workers)})" for name, workers in self._died_with_workers().items()]
        if running:
            them = "it as it was" if lost == 1 else "them as they were"
            why += f"; running on {them} lost: {', '.join(running)}"
        suspects = [
            name for name, workers in self._died_with_workers().items() if len(died) >= 2 and set(died) <= set(workers)
        ]
        if len(suspects) == 1:
            why += (
                f"; {suspects[0]} ran on each of those workers as it was lost: if nothing outside the job ended them, "
                "check whether its code ends the process it runs under (a signal to its parent, memory the system "
                "kills for)"
            )
        elif suspects:
            why += (
                f"; {' and '.join(suspects)} ran on each of those workers as it was lost, so no one task stands out "
                "as ending them"
            )
        return why

    def _died_with_workers(self) -> dict[str, list[str]]:
        """Each task that had an attempt die with its worker (``Attempt.died_with_worker``), by task id
        (``map-00000``), with those workers in order."""
        tasks = {}
        for task in (*self.maps, *self.reduces):
            workers = [a.worker for a in task.attempts if a.died_with_worker]
            if workers:
                tasks[f"{task.kind}-{task.index:05d}"] = list(dict.fromkeys(workers))
        return tasks

    def failed_attempts(self) -> int:
        """Attempts that failed or were lost with their worker (the monitor's job perspective)."""
        return sum(
            a.status in ("failed", "lost") for tasks in (self.maps, self.reduces) for t in tasks for a in t.attempts
        )

    def running_attempts(
        self, now: float, upstream_running: bool = False, upstream_ended_at: float | None = None
    ) -> list[dict[str, Any]]:
        """The running attempts of a batch job that should be advancing, each with the seconds since it last did
        (``stalled_s``, for the cluster monitor's stuck-task alert, ``hop run``'s note and ``--task-timeout``).
        Left out: a continuous job's (a quiet source is no fault), a reduce's while some map has not committed (it
        waits for the maps, which are listed), a pipelined reduce's whose output is whole (it waits, for at most
        ``hop.pipe.PipeSender.finish``'s minute, for the next step's map to take it: that map is the one to
        watch), and all of them while ``upstream_running``: the previous step of a pipeline, whose reduces feed this
        job's maps as they go, still runs (its attempts are listed); its maps' wait ended at ``upstream_ended_at``."""
        running = []
        for task, record, since in self._advancing(upstream_running, upstream_ended_at):
            fraction, records = record.progress or (0.0, 0)
            running.append(
                {
                    "task": f"{task.kind}-{task.index:05d}",
                    "attempt": record.attempt,
                    "worker": record.worker,
                    "fraction": fraction,
                    "records": records,
                    "stalled_s": max(0.0, now - since),
                }
            )
        return running

    def _advancing(
        self, upstream_running: bool, upstream_ended_at: float | None
    ) -> Iterator[tuple[TaskState, Attempt, float]]:
        """The attempts :meth:`running_attempts` lists, each with its task and when it last advanced."""
        if self.state != "running" or self.continuous or upstream_running:
            return
        maps_committed = self.maps_committed()
        for task in (*self.maps, *self.reduces):
            if task.committed is not None or (
                task.kind == "reduce" and (not maps_committed or task.written is not None)
            ):
                continue
            for record in task.attempts:
                if record.status != "running" or record.progress_at is None:
                    continue
                since = record.progress_at
                if task.kind == "reduce" and self.last_map_commit_at is not None:
                    since = max(since, self.last_map_commit_at)  # (its wait for the maps ended then)
                if task.kind == "map" and upstream_ended_at is not None:
                    since = max(since, upstream_ended_at)  # (its wait for the step before ended then)
                yield task, record, since

    def time_out_stalled(
        self,
        now: float,
        counted_from: float = 0.0,
        upstream_running: bool = False,
        upstream_ended_at: float | None = None,
        heard_since: Mapping[str, float] | None = None,
    ) -> list[Action]:
        """``--task-timeout`` (``options["task_timeout"]``, seconds; none: off): fail every attempt that has not
        advanced for that long by :meth:`running_attempts`' measure, counting from ``counted_from`` at the earliest
        (when the coordinator last ran again after a pause of its own) and from ``heard_since[worker]`` (when its
        worker was last heard again after a silence; ``now`` while it is silent): progress cannot be heard from a
        worker that is not, whose silence the heartbeat timeout judges (its attempts are then lost, not failed).
        Such an attempt is killed (its worker ends its task process) and fails as a task process that died does: it
        is retried, and counts against ``max_attempts`` (Hadoop's ``mapreduce.task.timeout``)."""
        timeout = self.task_timeout
        if timeout is None:
            return []
        heard = heard_since or {}
        actions: list[Action] = []
        for task, record, since in list(self._advancing(upstream_running, upstream_ended_at)):
            if self.state != "running":
                break  # (it failed as one of them gave up: the others end with it, killed)
            if now - max(since, counted_from, heard.get(record.worker, 0.0)) < timeout or not record.live:
                continue
            fraction = (record.progress or (0.0, 0))[0]
            limit = _seconds_text(timeout)
            reason = (
                f"{task.kind}-{task.index:05d} did not advance for {limit}s "
                f"({task_timeout_setting(self.spec.options, timeout)}), at {fraction:.0%}: killed"
            )
            actions.append(KillAttempt(record.worker, task.kind, task.index, record.attempt))
            actions += self.on_task_failed(task.kind, task.index, record.attempt, reason, None, True, now)
        return actions

    def task_table(self) -> list[dict[str, Any]]:
        """Every task with its state and progress, for the web view and ``Client.job``. ``state``: ``running`` (an
        attempt assigned or running), ``pending`` (waiting for a slot: not started yet, or again after its last
        attempt ended, ``last_attempt`` saying how: ``failed``, ``lost`` with its worker, ``killed``), ``committed``,
        ``given_up`` (a continuous job's source that failed ``max_attempts`` times: the query goes on without it),
        ``unstarted`` (a stopping continuous job's source that got no slot to drain in);
        once the job ended, a task that never committed is ``failed`` if its last attempt failed, else ``killed``."""
        table = []
        settled = ("running", "committed")
        for task in (*self.maps, *self.reduces):
            live = [a for a in task.attempts if a.live]
            last = task.attempts[-1] if task.attempts else None
            if task.kind == "map" and task.index in self.sources_gone:
                state = "given_up"
            elif task.kind == "map" and task.index in self.sources_unstarted:
                state = "unstarted"  # (a stopping job's source that got no slot: end_sources_without_slot)
            elif task.committed is not None:
                state = "committed"
            elif live:
                state = "running"
            elif self.state == "running" or last is None:
                state = "pending"
            else:
                state = "failed" if last.status == "failed" else "killed"
            table.append(
                {
                    "kind": task.kind,
                    "index": task.index,
                    "state": state,
                    **({"last_attempt": last.status, "error": last.error} if last and state not in settled else {}),
                    "fraction": self.map_task_fraction(task)
                    if task.kind == "map"
                    else 1.0
                    if task.committed is not None
                    else task.fraction,
                    "attempts": len(task.attempts),
                    "worker": task.attempts[-1].worker if task.attempts else None,
                    "pid": task.attempts[-1].pid if task.attempts else None,
                }
            )
        return table

    def progress(self) -> dict[str, Any]:
        def fraction(tasks: list[TaskState]) -> float:
            if not tasks:
                return 1.0
            return sum(1.0 if t.committed is not None else t.fraction for t in tasks) / len(tasks)

        return {
            "job_id": self.spec.job_id,
            "state": self.state,
            "error": self.error,
            "traceback": self.error_traceback,
            **({"failed_by": self.failed_by} if self.failed_by else {}),
            **({"coordinator_stopped": True} if self.coordinator_stopped else {}),
            **self.run_step,
            "maps_total": len(self.maps),
            "maps_done": sum(t.committed is not None for t in self.maps),
            "reduces_total": len(self.reduces),
            "reduces_done": sum(t.committed is not None for t in self.reduces),
            "map_fraction": sum(map(self.map_task_fraction, self.maps)) / len(self.maps) if self.maps else 1.0,
            "reduce_fraction": fraction(self.reduces),
            "input_records": sum(t.records for t in self.maps),
            "elapsed": (self.finished_at or time.time()) - self.submitted_at,  # (not counting on once it ended)
            "map_seconds": self._map_seconds(),
            **(
                {
                    "sources_gone": self.gone_sources(),
                    "sources_unstarted": self.unstarted_sources(),
                    "sources_listening": self.listening_sources(),
                }
                if self.continuous
                else {}
            ),
        }

    def _map_seconds(self) -> float:
        """Seconds the maps have run: from submission to now, or to the last map commit once every map committed
        (the input records stop growing then, while the job goes on: the maps' records/s divides by this)."""
        if self.maps and self.maps_committed() and self.last_map_commit_at is not None:
            return self.last_map_commit_at - self.submitted_at
        return (self.finished_at or time.time()) - self.submitted_at

    def listening_sources(self) -> list[dict[str, Any]]:
        """The sources that listen for producers (``zmq:``, ``tcp:``), each with its URL and the address its live
        attempt bound, in the URL's own form: the port a URL left to the system is in it."""
        urls = (self.spec.options.get("stream") or {}).get("sources", [])
        return [
            {"index": index, "url": urls[index] if index < len(urls) else None, "address": address}
            for index, address in sorted(self.sources_listening.items())
        ]

    def unstarted_sources(self) -> list[dict[str, Any]]:
        """The sources ``end_sources_without_slot`` ended, each with its URL."""
        urls = (self.spec.options.get("stream") or {}).get("sources", [])
        return [{"index": i, "url": urls[i] if i < len(urls) else None} for i in sorted(self.sources_unstarted)]

    def end_sources_without_slot(self, now: float, grace: float) -> list[Action]:
        """A stopping continuous job's sources that have waited ``grace`` seconds for a slot (none came: too few for
        its sources, or their workers left) end without running: a stop drains what runs, and the job waited for
        ever for a slot that would not come (``hop stop`` never finished). Its reducers stop waiting for them, as for
        a source given up, and the report lists them (``sources_unstarted``). Called every turn of the coordinator
        while the job stops, with ``now`` on its clock.

        A source waits from when a call first finds it waiting, so from the stop or from the loss of its last attempt,
        whichever came later: one whose worker was found lost only after the grace (a heartbeat timeout longer than
        it, or a stalled coordinator) has not waited at all and gets a free slot to drain in. Ended unstarted in the
        turn that found it lost, it left the reducer retried on the same loss waiting for ever for a source it was
        told of (``stream_source_gone``) before it started."""
        if self.state != "running" or not self.stopping or not self.continuous:
            return []
        actions: list[Action] = []
        for task in self.maps:
            if not task.pending or task.index in self.sources_gone or task.index in self.sources_unstarted:
                self._waiting_for_slot.pop(task.index, None)
                continue
            if now - self._waiting_for_slot.setdefault(task.index, now) >= grace:
                self.sources_unstarted.add(task.index)
                actions.append(self._source_gone(task.index))
        return [*actions, *self._finish_if_done()] if actions else []

    def _source_gone(self, index: int) -> Action:
        """Tell the reducers that source ``index`` is gone for good (and every reduce attempt started later)."""
        self.sources_told_gone.add(index)
        return Broadcast("stream_source_gone", {"job_id": self.spec.job_id, "index": index})

    def gone_sources(self) -> list[dict[str, Any]]:
        """The sources of a continuous job given up after failing ``max_attempts`` times, each with its URL, how
        many attempts it failed and the last one's error: the query goes on without them, so the client says so."""
        urls = (self.spec.options.get("stream") or {}).get("sources", [])
        gone = []
        for index in sorted(self.sources_gone):
            attempts = self.maps[index].attempts
            failed = [a for a in attempts if a.status == "failed"]  # (what gave it up: lost ones do not count)
            url = urls[index] if index < len(urls) else None
            gone.append(
                {"index": index, "url": url, "attempts": len(failed), "error": failed[-1].error if failed else None}
            )
        return gone

    # Events ------------------------------------------------------------------------------------------------
    def assign(self, kind: str, index: int, worker: str, pool: str | None = None, *, silent: bool = False) -> Attempt:
        """A new attempt of task ``index`` of ``kind`` on ``worker``, in its ``pool`` slots (default ``kind``'s);
        ``silent``: the worker has not been heard from for a few heartbeats (``Attempt.to_silent_worker``)."""
        task = self.tasks(kind)[index]
        attempt = Attempt(kind, index, len(task.attempts), worker, pool or kind, resumed_from=task.resume)
        attempt.to_silent_worker = silent
        task.attempts.append(attempt)
        return attempt

    def on_checkpoint(self, index: int, attempt: int, checkpoint: dict[str, Any]) -> None:
        """A running map attempt's registered spills now cover ``checkpoint["records"]`` input records."""
        record = self.maps[index].attempts[attempt]
        if record.live:
            record.checkpoint = checkpoint

    def on_started(self, kind: str, index: int, attempt: int, pid: int, at: float) -> None:
        record = self.attempt(kind, index, attempt)
        record.pid, record.start = pid, at
        record.progress_at = time.time()  # (the coordinator's clock, as every later advance: ``at`` is the worker's)
        # Only an attempt still waiting to start may become running: one settled meanwhile (killed when its
        # upstream attempt went, lost with its worker) must stay settled, or its task would wait for it forever.
        if record.status == "assigned":
            record.status = "running"

    def on_progress(self, kind: str, index: int, attempt: int, fraction: float, records: int, **more: Any) -> None:
        """A live attempt's progress; ``more``: ``bad``, the bad records a stream map dropped so far (it reports
        once more as it fails, so a failed job's report gives what was read and dropped); for pipelines (see
        :class:`TaskState`) ``written``, ``taken`` and ``from_file``."""
        task = self.tasks(kind)[index]
        record = task.attempts[attempt]
        if record.live and record.progress != (fraction, records):
            record.progress, record.progress_at = (fraction, records), time.time()
        if task.committed is None and record.live:
            task.fraction, task.records, task.bad = fraction, records, int(more.get("bad", 0))
            task.written, task.taken = more.get("written"), int(more.get("taken", 0))
            task.from_file = bool(more.get("from_file"))

    def on_task_status(self, kind: str, index: int, attempt: int, text: str) -> None:
        """A live attempt's status message (a job's ``set_status``): numbered, logged, and its attempt's latest. An
        attempt no longer live is not heard: its retry's word is the task's (a task process sends its attempt's last
        message before it reports the attempt's end, ``hop.task_status.flush``)."""
        if self.attempt_live(kind, index, attempt):
            seq = next(self._status_numbers)
            entry = {"job_id": self.spec.job_id, "kind": kind, "index": index, "attempt": attempt, "message": text}
            entry["seq"] = seq
            self.status_log.append(entry)
            self.tasks(kind)[index].attempts[attempt].status_message = entry

    def task_statuses(self, after: int | None = None) -> list[dict[str, Any]]:
        """Task status messages, oldest first. With ``after``: every one numbered after it (of :data:`STATUS_LOG`
        kept), of any attempt (the last words of one that just ended too), for a client that printed every one up to
        there. Without: the latest of each attempt running now and of each failed attempt (``"failed": true``) of a
        task not done yet (what a retried task last said before it failed: ``hop status JOB_ID``)."""
        if after is not None:
            return [entry for entry in self.status_log if entry["seq"] > after]
        entries = [
            attempt.status_message if attempt.live else {**attempt.status_message, "failed": True}
            for kind in ("map", "reduce")
            for task in self.tasks(kind)
            if task.committed is None
            for attempt in task.attempts
            if attempt.status_message is not None and (attempt.live or attempt.status == "failed")
        ]
        return sorted(entries, key=lambda entry: entry["seq"])

    def on_source_listening(self, index: int, attempt: int, address: str) -> None:
        """A stream map attempt's source listens at ``address`` (a retry may bind another port)."""
        task = self.maps[index]
        if task.committed is None and task.attempts[attempt].live:
            self.sources_listening[index] = address

    def attempt_live(self, kind: str, index: int, attempt: int) -> bool:
        """Whether ``attempt`` of task ``index`` of ``kind`` is live (assigned or running), so that what it reports
        (where it listens, a memory pause, a checkpoint, a snapshot's answer, its end) is its task's. An attempt
        that ended (failed, lost, killed) may still be heard from: its worker relays its last words after reporting
        its end when they come late, a kill crosses its report on the wire, a worker replaced under its name had
        queued them. Taken, they undid what its retry said (pushes to a dead address, a pause lifted)."""
        attempts = self.tasks(kind)[index].attempts
        return 0 <= attempt < len(attempts) and attempts[attempt].live

    def on_reducer_ready(self, index: int, attempt: int, address: str) -> list[Action]:
        """A reduce attempt listens for runs at ``address``: every worker points the partition at it (its pusher
        sends it every eligible spill again). Ignored from an attempt no longer live: its retry may have spoken
        already, and workers pointed at the dead address would push nothing more to the retry, which then waited
        for ever for the committed maps' runs."""
        if not self.attempt_live("reduce", index, attempt):
            return []
        self.reducer_addresses[index] = (attempt, address)
        return [
            Broadcast(
                "reducer_at", {"job_id": self.spec.job_id, "index": index, "attempt": attempt, "address": address}
            )
        ]

    def on_first_run(self, at: float) -> None:
        if self.first_shuffle_at is None or at < self.first_shuffle_at:
            self.first_shuffle_at = at

    def on_map_done(
        self,
        index: int,
        attempt: int,
        spills: int,
        counters: dict[str, int],
        user_counters: dict[str, dict[str, int]],
        at: float,
        bad_records: list[dict[str, Any]] | None = None,
    ) -> list[Action]:
        task = self.maps[index]
        record = task.attempts[attempt]
        if record.status in ("failed", "lost", "killed"):
            # Declared failed or lost (with its worker) or killed (it lost a speculative race) before this report
            # arrived: its runs are already dropped.
            return [Broadcast("map_failed", {"job_id": self.spec.job_id, "index": index, "attempt": attempt})]
        record.end = at
        if task.committed is not None or self.state != "running":
            record.status = "superseded"
            return [Broadcast("map_failed", {"job_id": self.spec.job_id, "index": index, "attempt": attempt})]
        record.status = "succeeded"
        task.committed, task.fraction, task.records = attempt, 1.0, counters.get("map_input_records", 0)
        task.bad = counters.get("bad_records_skipped", 0)
        kills: list[Action] = []
        for other in task.attempts:  # a speculative race is over: the first to finish wins
            if other is not record and other.live:
                other.status, other.end, other.error = "killed", at, f"attempt {attempt} finished first"
                kills.append(KillAttempt(other.worker, "map", index, other.attempt))
                kills.append(
                    Broadcast("map_failed", {"job_id": self.spec.job_id, "index": index, "attempt": other.attempt})
                )
        record.counters, record.user_counters = counters, user_counters
        record.bad_records = bad_records or []
        segments = record.resumed_from["segments"] if record.resumed_from else []
        self.map_spills[index] = (attempt, spills, segments)
        self.last_map_commit_at = at
        actions: list[Action] = [
            Broadcast(
                "map_committed",
                {
                    "job_id": self.spec.job_id,
                    "index": index,
                    "attempt": attempt,
                    "spills": spills,
                    "segments": segments,
                },
            )
        ]
        # Reducers may all be done already: a map re-run after its output was lost with a worker commits last.
        return actions + kills + self._finish_if_done()

    def on_reduce_done(
        self,
        index: int,
        attempt: int,
        path: str | None,
        counters: dict[str, int],
        user_counters: dict[str, dict[str, int]],
        first_run_at: float | None,
        at: float,
        bad_records: list[dict[str, Any]] | None = None,
        input_complete_at: float | None = None,
        memory: dict[str, int] | None = None,
    ) -> list[Action]:
        task = self.reduces[index]
        record = task.attempts[attempt]
        if record.status in ("failed", "lost", "killed"):
            # Declared failed or lost, or killed (its slot went to an upstream task), before this report arrived:
            # the partition is its retry's, as a map's is (``on_map_done``); the output is not taken.
            return [DiscardOutput(path)] if path is not None else []
        record.end, record.input_complete, record.memory = at, input_complete_at, memory
        if task.committed is not None or self.state != "running":
            record.status = "superseded"
            return [DiscardOutput(path)] if path is not None else []
        record.status = "succeeded"
        task.committed, task.fraction = attempt, 1.0
        record.counters, record.user_counters = counters, user_counters
        record.bad_records = bad_records or []
        if first_run_at is not None:
            self.on_first_run(first_run_at)
        if input_complete_at is not None and (self.last_reduce_input_at or 0.0) < input_complete_at:
            self.last_reduce_input_at = input_complete_at
        if path is None:  # a stream reducer: its output is the windows it wrote as it went
            return self._finish_if_done()
        return [CommitOutput(path, f"{self.spec.output}/part-{index:05d}"), *self._finish_if_done()]

    def _finish_if_done(self) -> list[Action]:
        if all(t.committed is not None for t in self.reduces) and self.maps_committed():
            self.state, self.finished_at = "succeeded", time.time()
            return [FinishJob("succeeded")]
        return []

    def on_task_failed(
        self,
        kind: str,
        index: int,
        attempt: int,
        error: str,
        traceback: str | None,
        retryable: bool,
        at: float,
        keep_checkpoint: bool = True,
        lost: bool = False,
    ) -> list[Action]:
        """Attempt ``attempt`` of a task ended without success: retried while ``retryable`` and the task's
        ``failures`` allow, else the job fails (a continuous job's map: its source is given up). ``lost``: it ended
        for a reason outside the task (its worker stopped or went silent, the spills it built on went with one): the
        attempt is ``lost``, not ``failed``, and is always retried (see the module docstring)."""
        task = self.tasks(kind)[index]
        record = task.attempts[attempt]
        if record.status in ("succeeded", "superseded", "failed", "lost", "killed"):
            # A late report about an attempt that already ended: nothing to undo. (One failed here, timed out by
            # ``--task-timeout``, may yet report its own end before its kill reaches it: it failed once.)
            return []
        record.status, record.end, record.error = "lost" if lost else "failed", at, error
        actions: list[Action] = []
        if kind == "map":
            failed = {"job_id": self.spec.job_id, "index": index, "attempt": attempt}
            checkpoint = record.checkpoint
            first_seq = task.resume["spills"] if task.resume else 0
            if retryable and checkpoint and keep_checkpoint and checkpoint["spills"] > first_seq:
                # Resume the next attempt after this checkpoint: its spills below ``spills`` stay registered.
                earlier = task.resume["segments"] if task.resume else []
                segments = [*earlier, [attempt, first_seq, checkpoint["spills"]]]
                task.resume = {**checkpoint, "segments": segments}
                failed["keep_below"] = checkpoint["spills"]
            elif not keep_checkpoint and task.resume:
                # The kept spills may have died with the worker: start over, and let everyone forget them.
                for segment_attempt, _, _ in task.resume["segments"]:
                    actions.append(
                        Broadcast(
                            "map_failed", {"job_id": self.spec.job_id, "index": index, "attempt": segment_attempt}
                        )
                    )
                task.resume = None
            actions.append(Broadcast("map_failed", failed))
        if self.state != "running" or task.committed is not None or lost:
            return actions
        if retryable and kind == "map" and self.continuous and task.failures >= self.max_attempts:
            # A source that keeps failing is given up, not the query: windows stop waiting for it and report
            # its missing panes (C2's failure eviction).
            self.sources_gone.add(index)
            task.committed = attempt
            return [
                *actions,
                self._source_gone(index),
                *self._finish_if_done(),
            ]
        if not retryable or task.failures >= self.max_attempts:
            tried = task.failures
            reason = error if not retryable else f"{error} (gave up after {tried} failed attempts)"
            if retryable and kind == "map":
                # (a task process that died names no record: its input is where to look, as _job.json's attempts
                # do not say it)
                reason += f"; map-{index:05d} read {self._task_input(task)}"
            return actions + self.fail(reason, traceback)
        return actions  # the task is pending again; the coordinator assigns a new attempt

    def restart(self, kind: str, index: int, attempt: int, reason: str) -> list[Action]:
        """End a live attempt that cannot succeed any more (its pipeline input went away, or its slot is needed
        upstream) without counting it as a failure: it is killed and the task is pending again."""
        task = self.tasks(kind)[index]
        record = task.attempts[attempt]
        if not record.live or task.committed is not None:
            return []
        record.status, record.end, record.error = "killed", time.time(), reason
        task.fraction = 0.0
        actions: list[Action] = [KillAttempt(record.worker, kind, index, attempt)]
        if kind == "map":
            actions.append(Broadcast("map_failed", {"job_id": self.spec.job_id, "index": index, "attempt": attempt}))
        return actions

    def live_attempts(self, kind: str, index: int) -> list[Attempt]:
        return [a for a in self.tasks(kind)[index].attempts if a.live]

    def on_worker_lost(self, worker: str, at: float, left: bool = False) -> list[Action]:
        """The attempts running on a lost worker (``left``: one that said it stops) are ``lost`` and run again (not
        the tasks' fault: they do not count against ``max_attempts``), unless a batch task's worker has died under it
        ``DEATHS_PER_ATTEMPT * max_attempts`` times now: the job fails naming it; its committed maps' output is gone
        too."""
        actions: list[Action] = []
        self.workers_lost.append((worker, left))
        why = f"worker {worker} stopped" if left else worker_died(worker)
        doomed: list[TaskState] = []
        for kind in ("map", "reduce"):
            for task in self.tasks(kind):
                for record in task.attempts:
                    if record.worker == worker and record.live:
                        actions += self.on_task_failed(
                            kind, task.index, record.attempt, why, None, True, at, keep_checkpoint=False, lost=True
                        )
                        if not left and not self.continuous and task.deaths >= DEATHS_PER_ATTEMPT * self.max_attempts:
                            doomed.append(task)
        if doomed:
            actions += self.fail(self._kills_its_workers(doomed[0]))
        for task in self.maps:  # kept spills of a resumed map lived on the lost worker: the map starts over
            if task.committed is None and task.resume and worker in self._segment_workers(task):
                running = [a for a in task.attempts if a.live]
                for record in running:
                    actions += self.on_task_failed(
                        "map",
                        task.index,
                        record.attempt,
                        f"its kept spills were lost with worker {worker}",
                        None,
                        True,
                        at,
                        keep_checkpoint=False,
                        lost=True,
                    )
                if task.resume:
                    for segment_attempt, _, _ in task.resume["segments"]:
                        actions.append(
                            Broadcast(
                                "map_failed",
                                {"job_id": self.spec.job_id, "index": task.index, "attempt": segment_attempt},
                            )
                        )
                    task.resume = None
        if self.state != "running" or all(r.committed is not None for r in self.reduces):
            return actions
        if self.continuous:
            # A stream map that ended had sent everything; its retained spills only served reducer restarts
            # after its last checkpoint, and a re-run could not end (its source is unbounded): reducers that miss
            # its last panes treat it as gone and report them lost.
            for task in self.maps:
                if task.committed is not None and task.attempts[task.committed].worker == worker:
                    actions.append(self._source_gone(task.index))
            return actions
        # Committed map output lived on the lost worker's disk: a reduce attempt that has not received all of it
        # (or a future reduce attempt) needs it again, so the map runs again. Reducers that already hold every run
        # of the lost attempt keep it and ignore the new attempt (``map_lost``), so nothing is counted twice.
        for task in self.maps:
            if task.committed is None or (
                task.attempts[task.committed].worker != worker and worker not in self._segment_workers(task)
            ):
                continue
            record = task.attempts[task.committed]
            record.status, record.error = "lost", f"output lost with worker {worker}"
            task.committed, task.fraction, task.resume = None, 0.0, None
            task.output_lost = True
            self.map_spills.pop(task.index, None)
            actions.append(
                Broadcast("map_lost", {"job_id": self.spec.job_id, "index": task.index, "attempt": record.attempt})
            )
        return actions

    def _task_input(self, task: TaskState) -> str:
        """What ``task`` reads: a map's byte ranges (``in.txt[0:1048576]``) or the step before's part, a reduce's
        partition."""
        if task.kind == "reduce":
            return f"partition {task.index}"
        if self.upstream is not None:
            return f"{self.upstream.spec.output}/part-{task.index:05d}"
        return describe_chunks(self.splits[task.index])

    def _kills_its_workers(self, task: TaskState) -> str:
        """Why the job fails when ``task``'s worker died under it ``task.deaths`` times: its task id, its input (a
        map's byte ranges, or its partition) and the workers, each with how often it died under it."""
        reads = self._task_input(task)
        died = Counter(a.worker for a in task.attempts if a.died_with_worker)
        workers = ", ".join(name if times == 1 else f"{name} {times} times" for name, times in died.items())
        return (
            f"{task.kind}-{task.index:05d} ({reads}) was running each of the {task.deaths} times its worker died "
            f"({workers}): check whether its code ends the process it runs under (a signal to its parent, memory the "
            f"system kills for); gave up after {task.deaths} attempts lost with their worker "
            f"({DEATHS_PER_ATTEMPT} x --max-attempts {self.max_attempts})"
        )

    def _segment_workers(self, task: TaskState) -> set[str]:
        """Workers holding the kept spills a resumed map builds on."""
        segments = task.resume["segments"] if task.resume else []
        return {task.attempts[attempt].worker for attempt, _, _ in segments}

    def failed_workers(self, kind: str, index: int) -> set[str]:
        """Workers on which attempts of this task failed or were lost: a retry should go elsewhere."""
        return {a.worker for a in self.tasks(kind)[index].attempts if a.status in ("failed", "lost")}

    def fail(
        self, reason: str, traceback: str | None = None, *, over_success: bool = False, failed_by: str | None = None
    ) -> list[Action]:
        """Fail the running job. ``over_success``: also one whose last report completed it, while its ``FinishJob``
        has not run yet (a reduce's output could not be committed: that success is not final, and the output it
        would announce is not all there). ``failed_by``: the downstream job whose failure fails this one."""
        if self.state != "running" and not (over_success and self.state == "succeeded"):
            return []
        self.state, self.error, self.error_traceback = "failed", reason, traceback
        self.failed_by = failed_by
        self.finished_at = time.time()
        return [FinishJob("failed", reason)]

    def interrupt(self, reason: str) -> list[Action]:
        """End a running continuous job at once, without draining its open panes (a second Ctrl-C on ``hop run``):
        its state becomes ``interrupted``, the windows written so far stay, and its report (``_job.json``) is written
        by the ``FinishJob`` while its tasks are ended."""
        if self.state != "running":
            return []
        self.state, self.error = "interrupted", reason
        self.finished_at = time.time()
        return [FinishJob("interrupted", reason)]

    def end_live_attempts(self, reason: str) -> None:
        """Mark the attempts still assigned or running as killed, for a job that ended without them (it failed, was
        cancelled or stopped early): the report must not list them as running. Their workers are told to stop them
        by the ``job_done`` broadcast."""
        now = time.time()
        for task in (*self.maps, *self.reduces):
            for record in task.attempts:
                if record.live:
                    record.status, record.end, record.error = "killed", now, reason

    def bad_records(self) -> dict[str, list[dict[str, Any]]]:
        """Skipped records (maps) and keys (reduces) of committed attempts, by task id (``map-00003``)."""
        return {
            f"{t.kind}-{t.index:05d}": t.attempts[t.committed].bad_records
            for t in (*self.maps, *self.reduces)
            if t.committed is not None and t.attempts[t.committed].bad_records
        }

    def _committed_attempts(self) -> list[Attempt]:
        return [t.attempts[t.committed] for t in (*self.maps, *self.reduces) if t.committed is not None]

    @property
    def counters(self) -> dict[str, int]:
        """Built-in counters summed over committed attempts only (``max_*`` counters: the maximum)."""
        totals: dict[str, int] = dict.fromkeys(BUILTIN_COUNTERS, 0)
        for record in self._committed_attempts():
            for name, value in record.counters.items():
                old = totals.get(name, 0)
                totals[name] = max(old, value) if name.startswith("max_") else old + value
        return totals

    @property
    def user_counters(self) -> dict[str, dict[str, int]]:
        """User counters summed over committed attempts only."""
        return total_user_counters(record.user_counters for record in self._committed_attempts())

    # Report ------------------------------------------------------------------------------------------------
    @property
    def run_step(self) -> dict[str, int]:
        """``run_step`` and ``run_steps``: this job's place in the run of several steps that submitted it, from 1
        over the whole run as the run's messages number its steps (``hop.runner``); empty for a job run alone."""
        options = self.spec.options
        if not options.get("run_steps"):
            return {}
        return {"run_step": int(options["run_step"]), "run_steps": int(options["run_steps"])}

    def report(self) -> dict[str, Any]:
        """The ``_job.json`` document."""
        counters = self.counters
        # (Thresholds passed after the last snapshot was asked, the job ending first: listed by no snapshot. While
        # it runs, such thresholds may still be asked for.)
        unsaid = (
            self.snapshots.passed_without_snapshot(self.input_fraction())
            if self.snapshots is not None and self.state != "running"
            else []
        )
        return {
            "job_id": self.spec.job_id,
            "name": self.spec.name,
            "status": self.state,
            "error": self.error,
            "traceback": self.error_traceback,
            **({"failed_by": self.failed_by} if self.failed_by else {}),
            "mode": self.spec.mode,
            "step": self.spec.step,
            "num_steps": self.spec.num_steps,
            **self.run_step,
            "inputs": inputs_as_given(self.spec.inputs, self.spec.options),
            "start": self.submitted_at,
            "end": self.finished_at,
            "num_maps": len(self.maps),
            "num_reduces": len(self.reduces),
            "tail_splits": self.tail_splits,
            "first_shuffle_at": self.first_shuffle_at,
            "last_map_commit_at": self.last_map_commit_at,
            "last_reduce_input_at": self.last_reduce_input_at,
            "counters": {**counters, "user": self.user_counters},
            "ratios": {
                "combine_ratio": _ratio(counters.get("combine_output_records"), counters.get("combine_input_records")),
                "map_merge_ratio": _ratio(counters.get("map_merge_records_out"), counters.get("map_merge_records_in")),
            },
            "attempts": [a.report() for tasks in (self.maps, self.reduces) for t in tasks for a in t.attempts],
            **({"approximate": self.approximate} if self.approximate else {}),
            **({"stop_held_back": self.stop_held_back} if self.stop_held_back and not self.approximate else {}),
            **(
                {
                    "continuous": {
                        "window": self.windows.window,
                        "windows_written": self.windows.total,
                        # Read by the maps as they last reported (the counters above are of committed attempts:
                        # none, for a job interrupted before its maps drained).
                        "records_read": sum(t.records for t in self.maps),
                        "stopped": self.stopping,
                        "sources_gone": self.gone_sources(),  # (as the status reply gives them)
                        "sources_unstarted": self.unstarted_sources(),
                        "bad_records": self._stream_bad_records(),
                        "options": self.spec.options.get("stream"),
                    }
                }
                if self.windows is not None
                else {}
            ),
            **(
                {"snapshots": [self.snapshots.describe(s, with_rows=False) for s in self.snapshots.snapshots]}
                if self.snapshots is not None and self.snapshots.snapshots
                else {}
            ),
            **({"thresholds_without_snapshot": unsaid} if unsaid else {}),
        }

    def _stream_bad_records(self) -> dict[str, int]:
        """Continuous jobs: the bad records each source's map dropped, by source URL, as its committed attempt
        counted them or, for one that failed or was ended, as its latest attempt last reported."""
        sources = self.spec.options["stream"]["sources"]
        return {sources[t.index]: t.bad for t in self.maps}


def tail_splits_to_ask(jobs: Sequence[JobState], free_map_slots: int, now: float) -> list[tuple[JobState, Attempt]]:
    """The running map attempts to ask to split off their rest (tail splitting, see the module docstring), with their
    jobs: ``jobs`` are the running jobs in the order they take slots, ``free_map_slots`` the map slots free on live
    workers. None is asked while a map waits for a slot it may take, nor for a slot an earlier answer makes a map for
    (a pipeline's later step's maps waiting while the step before may split a map wait for that: ``map_may_start``)."""
    if any(job.map_may_start(task.index, now) for job in jobs for task in job.pending("map")):
        return []
    slots = free_map_slots - sum(len(job.split_asked) for job in jobs)
    asks: list[tuple[JobState, Attempt]] = []
    for job in jobs:
        if slots <= 0:
            break
        for attempt in job.tail_split_candidates(now, slots):
            asks.append((job, attempt))
            slots -= 1
    return asks


def task_timeout(options: dict[str, Any], step: int = 0) -> float | None:
    """A job's ``task_timeout`` option (``--task-timeout``), else step ``step``'s of ``step_task_timeouts`` (an
    mrjob job's jobconf, per step): seconds above zero, or None when it has none. Raises ``ValueError`` for another
    value, and for a continuous job, whose quiet source is no fault (``running_attempts`` leaves its attempts out:
    the option would do nothing)."""
    value = options.get("task_timeout")
    per_step = options.get("step_task_timeouts") or ()
    if value is None and step < len(per_step):
        value = per_step[step]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"task_timeout must be a number of seconds above zero, got {value!r}")
    if options.get("stream"):
        raise ValueError("task_timeout applies to a batch job, not to a continuous job (its sources may be quiet)")
    return float(value)


def task_timeout_setting(options: dict[str, Any], seconds: float) -> str:
    """The setting that gave a job its task timeout of ``seconds``, as its errors name it: ``--task-timeout 1.5``,
    or an mrjob job's ``mapreduce.task.timeout=1500 (jobconf)``."""
    if options.get("task_timeout") is not None:
        return f"--task-timeout {_seconds_text(seconds)}"
    return f"mapreduce.task.timeout={round(seconds * 1000)} (jobconf)"


def _seconds_text(seconds: float) -> str:
    """``30.0`` as ``30``, ``1.5`` as ``1.5``: seconds as an option gives them."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def describe_chunks(task_input: Split | list[Chunk], most: int = 3) -> str:
    """A map's input as byte ranges, ``in.txt[0:1048576]``, adjacent chunks of a file joined: the first ``most``,
    then how many more."""
    splits = [task_input] if isinstance(task_input, Split) else [chunk.split for chunk in task_input]
    ranges: list[Split] = []
    for split in splits:
        last = ranges[-1] if ranges else None
        if (
            last is not None
            and last.path == split.path
            and min(last.length, split.length) >= 0
            and last.end == split.start
        ):
            ranges[-1] = Split(last.path, last.start, last.length + split.length)
        else:
            ranges.append(split)
    named = ", ".join(split.describe() for split in ranges[:most])
    return named + (f" and {len(ranges) - most} more" if len(ranges) > most else "") if ranges else "no input"


def _ratio(part: int | None, whole: int | None) -> float | None:
    return round(part / whole, 6) if part is not None and whole else None
