"""The coordinator's side of snapshots for one job, with no I/O: when to ask, what came back, when it is complete.

- With ``every`` set (``--snapshot-every 0.1``) a snapshot is due each time the fraction of map input processed
  (bytes, weighted by task) passes a multiple of ``every`` below 1 (a *threshold*); several passed at once make one
  request, labelled with the highest. The reducers answer it once each holds at least that fraction of the input
  (``Snapshot.awaits``), so a snapshot labelled ``0.500`` holds at least half of it. One threshold snapshot is
  asked at a time: those passed while one is being answered wait for it; then the soonest of them the reducers can
  answer is asked for, the others ``skipped``. A snapshot that holds more than
  it waited for (answered late) stands for the thresholds above its own that it holds and takes the highest's
  label. Asking at each threshold as it passed, a reducer behind the maps answered the requests queued while it
  took a snapshot with one snapshot: seven labels, 0.200 to 0.800, held the same 37% of the input, 0.900 51%. An
  input of no bytes has no thresholds: nothing of it is read before all of it.
  ``request_now`` is ``hop snapshot`` (answered at once, with what the reducers hold).
- Each reduce partition answers with ``snapshot_done``; a snapshot is *complete* once every partition answered.
  The snapshot's progress is measured from the answers: for online jobs the fraction of input chunks (and bytes)
  the reducers' data covers (the smallest over partitions), else the map progress at the request.
- A partition that commits before answering a snapshot answers with its final output (``final``: every row exact).
- ``accurate(snapshot)``: with ``stop_when_accurate`` set, every group of every partition has an interval no
  wider (half-width) than that fraction of its estimate, the snapshot has groups, and every stratum of the input
  has been sampled with at least ``MIN_CHUNKS_PER_STRATUM`` chunks (or all of its chunks, if it has fewer): an
  interval computed from one or two chunks can be narrow by chance (two equal chunks give a zero-width interval),
  and a group none of whose records was read yet is absent from the snapshot, not estimated.
- Rows kept (what ``hop.client.Client.snapshots`` and the web view get): each partition sends its
  ``ROWS_ON_THE_WIRE`` largest estimates; the latest complete snapshot keeps them all, every earlier one (and the
  latest too once the job ended: ``release``) only its ``HISTORY_ROWS`` largest per partition, enough for the web
  view's chart of a large group's estimate over time. So a job's rows take at most one snapshot's worth plus
  ``HISTORY_ROWS`` per partition and snapshot, however long it runs (all rows are in the snapshot files).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hop.jsonline import to_json
from hop.online.snapshots import ROWS_ON_THE_WIRE, held_fraction, label_digits, snapshot_label, top_positions
from hop.wording import percent, percent_like

__all__ = ["HISTORY_ROWS", "MIN_CHUNKS_PER_STRATUM", "UNBOUNDED_EXAMPLES", "Snapshot", "SnapshotTracker"]

MIN_CHUNKS_PER_STRATUM = 5
"""The chunks of a stratum a snapshot must have read before ``--stop-when-accurate`` may end the job on it."""

UNBOUNDED_EXAMPLES = 3
"""Groups without an interval named in why a snapshot could not end a job (of however many there are)."""

HISTORY_ROWS = 100
"""Rows per partition kept of a snapshot that is no longer the latest (its largest estimates: the web view's
history of the large groups)."""


@dataclass
class Snapshot:
    seq: int
    label: str
    progress: float
    requested_at: float
    partitions: dict[int, dict[str, Any]] = field(default_factory=dict)
    completed_at: float | None = None
    upstream: dict[str, Any] | None = None
    """A pipeline's later job: the upstream snapshot this one was recomputed from (its job, label, progress)."""
    rows_limit: int = ROWS_ON_THE_WIRE
    """The most rows per partition it keeps (``HISTORY_ROWS`` once thinned)."""
    source: str | None = None
    """A derived snapshot's input: the folder of the upstream snapshot the reducers recompute it from."""
    awaits: float | None = None
    """A threshold's snapshot: the fraction of the input (bytes) every reducer waits to hold before it answers
    (``None``: answered at once, with what the reducers hold: ``hop snapshot``, a pipeline's later job's)."""
    skipped: list[str] = field(default_factory=list)
    """The labels of thresholds the maps passed that no snapshot was taken at, this one standing for them: passed
    at once with its own, or while the threshold snapshot before it was being answered."""
    staged_as: str | None = None
    """The label it was asked for, which its files are written under until it is published (``None``: its label)."""
    flows_down: tuple[dict[str, Any], str] | None = None
    """A pipeline's job: the description and folder of this snapshot, published, that the next job is still to
    recompute one from (``hop.coordinator.snapshots``: in this job's order)."""

    @property
    def complete(self) -> bool:
        return self.completed_at is not None


class SnapshotTracker:
    """Snapshot requests and answers of one job (see the module docstring)."""

    def __init__(
        self,
        num_partitions: int,
        chunk_sizes: list[int],
        every: float | None = None,
        stop_when_accurate: float | None = None,
        started_at: float | None = None,
        stratum_chunks: dict[str, int] | None = None,
        confidence: float | None = None,
        order: str | None = None,
    ) -> None:
        if every is not None and not 0 < every < 1:
            raise ValueError(f"--snapshot-every must be between 0 and 1 (a fraction of the input), got {every}")
        self.num_partitions = num_partitions
        self.chunk_sizes = chunk_sizes
        self.empty_input = bool(chunk_sizes) and not any(chunk_sizes)
        """Input chunks of no bytes (empty files): map progress goes from nothing to all at once, no threshold is
        passed on the way (a zero-byte input had a snapshot labelled 0.900, of nothing, saying it held 0.0 of
        its input and 1.0 of its chunks)."""
        self.every = every
        self.stop_when_accurate = stop_when_accurate
        self.stratum_chunks = stratum_chunks
        """How many input chunks each stratum has (``None``: no online input order, nothing to require)."""
        self.confidence = confidence
        """The confidence level of the job's intervals (``--confidence``; ``None``: the job gives no intervals)."""
        self.order = order
        """The order input chunks are read in (``"random"``, ``"sequential"``; ``None``: no chunks): the intervals
        assume a random one, and a snapshot says which it had."""
        self.started_at = started_at if started_at is not None else time.time()
        self.snapshots: list[Snapshot] = []
        self._next = every or 0.0
        self._held: list[float] = []
        """Thresholds passed while a threshold snapshot was being answered, not asked for yet."""
        self._asked: Snapshot | None = None
        """The latest threshold snapshot asked for (the next waits until it is complete)."""

    def due(self, input_fraction: float, now: float | None = None) -> Snapshot | None:
        """The snapshot to request now that ``input_fraction`` of the map input is processed, if one is due (see
        the module docstring: one threshold snapshot at a time)."""
        if not self.every or self.empty_input:
            return None
        passed = []
        while self._next < 1 - 1e-9 and input_fraction + 1e-9 >= self._next:
            passed.append(self._next)
            self._next = round(self._next + self.every, 9)
        if self._asked is not None and not self._asked.complete:
            self._held += passed
            return None
        if self._held:
            # Passed while the reducers were busy: the soonest of these they can answer, the others skipped, so a
            # reducer behind the maps takes no more snapshots than it did when it answered the requests it found
            # waiting with one. (Asking for the last of them too, after it, took a snapshot more: a word count's
            # reducer spent 15% more CPU.)
            candidates = [*self._held, *passed]
            position = self._nearest_held(candidates)
            at, skipped = candidates[position], [*candidates[:position], *candidates[position + 1 :]]
            self._held = []
        elif passed:
            at, skipped = passed[-1], passed[:-1]
        else:
            return None
        snapshot = self._asked = self._new(at, False, now)
        snapshot.awaits = at
        snapshot.skipped = [self._label(threshold) for threshold in skipped]
        return snapshot

    def passed_without_snapshot(self, input_fraction: float) -> list[str]:
        """The labels of the thresholds up to ``input_fraction`` (the maps' progress as the job ended) that have
        no snapshot and that no snapshot lists as ``skipped``: those the maps passed after the last snapshot was
        asked, the job ending before it was answered (a job's report lists them, else they were missing unsaid)."""
        if not self.every or self.empty_input:
            return []
        said = {snapshot.label for snapshot in self.snapshots}
        said.update(label for snapshot in self.snapshots for label in snapshot.skipped)
        labels = []
        threshold = self.every
        while threshold < 1 - 1e-9 and threshold <= input_fraction + 1e-9:
            if (label := self._label(threshold)) not in said:
                labels.append(label)
            threshold = round(threshold + self.every, 9)
        return labels

    def _label(self, threshold: float) -> str:
        return snapshot_label(threshold, None, label_digits(self.every))

    def _nearest_held(self, held: list[float]) -> int:
        """Which of the thresholds ``held`` back to ask for: the highest the reducers held as they answered the
        snapshot just completed (a reducer receives nothing while it takes one, so that is about what it holds
        now), else the lowest. Asked for the lowest, reducers that held more answered at once, a snapshot labelled
        0.200 holding 60% of the input."""
        coverage = None if self._asked is None else self.coverage(self._asked)  # (complete: the one just answered)
        held_so_far = 0.0 if coverage is None else coverage[1]
        below = [position for position, threshold in enumerate(held) if threshold <= held_so_far + 1e-9]
        return below[-1] if below else 0

    def request_now(self, input_fraction: float, now: float | None = None) -> Snapshot:
        return self._new(input_fraction, True, now)

    def request_derived(self, label: str, progress: float, upstream: dict[str, Any], source: str) -> Snapshot:
        """A snapshot recomputed from the upstream job's snapshot ``label`` (keeps its label and progress), whose
        files are in ``source``."""
        snapshot = Snapshot(len(self.snapshots), label, progress, time.time(), upstream=upstream, source=source)
        self.snapshots.append(snapshot)
        return snapshot

    def _new(self, progress: float, on_demand: bool, now: float | None) -> Snapshot:
        seq = len(self.snapshots)
        label = snapshot_label(progress, seq if on_demand else None, label_digits(self.every))
        number = seq
        taken = {snapshot.label for snapshot in self.snapshots}
        while on_demand and label in taken:  # (a pipeline's later job holds the labels of the job before's too)
            number += 1
            label = snapshot_label(progress, number, label_digits(self.every))
        snapshot = Snapshot(seq, label, progress, now if now is not None else time.time())
        self.snapshots.append(snapshot)
        return snapshot

    def on_done(self, seq: int, index: int, fields: dict[str, Any], now: float | None = None) -> Snapshot | None:
        """Record one partition's answer; returns the snapshot if this answer completed it."""
        if not 0 <= seq < len(self.snapshots):
            return None
        snapshot = self.snapshots[seq]
        if snapshot.complete:
            return None
        if snapshot.rows_limit < ROWS_ON_THE_WIRE:  # a newer snapshot completed first: this one is history only
            fields = {**fields, "rows": (fields.get("rows") or [])[: snapshot.rows_limit]}
        snapshot.partitions[index] = fields
        if len(snapshot.partitions) == self.num_partitions:
            snapshot.completed_at = now if now is not None else time.time()
            self._relabel(snapshot)
            for earlier in self.snapshots[:seq]:
                self._thin(earlier)
            return snapshot
        return None

    def _relabel(self, snapshot: Snapshot) -> None:
        """A threshold's snapshot, complete, stands for the thresholds above its own that it holds (those it skipped,
        those passed since and not asked for yet, which are then not asked for) and takes the label of the highest:
        a reducer that held more than it waited for (it answered late) said 0.200 of a snapshot of a third of the
        input, with 0.300 skipped."""
        coverage = self.coverage(snapshot)
        if snapshot.awaits is None or coverage is None:
            return
        held = coverage[1] + 1e-9
        covered = [float(label) for label in snapshot.skipped if snapshot.awaits < float(label) <= held]
        covered += [threshold for threshold in self._held if threshold <= held]
        self._held = [threshold for threshold in self._held if threshold > held]
        if not covered:
            return
        highest = max(covered)
        old, new = snapshot.label, self._label(highest)
        snapshot.staged_as, snapshot.label, snapshot.progress = old, new, highest
        others = {*snapshot.skipped, *(self._label(threshold) for threshold in covered), old} - {new}
        snapshot.skipped = sorted(others, key=float)

    def unanswered(self, index: int) -> list[Snapshot]:
        """The snapshots still waiting for partition ``index`` (a new attempt of it must be asked again)."""
        return [s for s in self.snapshots if not s.complete and index not in s.partitions]

    def release(self) -> None:
        """The job ended: no snapshot is the live one any more; keep only history rows of each."""
        for snapshot in self.snapshots:
            self._thin(snapshot)

    @staticmethod
    def _thin(snapshot: Snapshot) -> None:
        if snapshot.rows_limit <= HISTORY_ROWS:
            return
        snapshot.rows_limit = HISTORY_ROWS
        for fields in snapshot.partitions.values():
            if fields.get("rows"):
                fields["rows"] = fields["rows"][:HISTORY_ROWS]  # sent largest first

    def held_input(self) -> float:
        """The fraction of the input (bytes) the latest complete snapshot's reducers held, as its ``input_fraction``
        says of this job's own chunks (0.0 without one, or one that does not say: ``hop snapshot`` of a job reading
        no chunks, a pipeline's later step, whose chunks are its upstream's): input its maps had processed, though
        their last progress report may not count it yet (:meth:`hop.scheduler.JobState.processed_fraction`)."""
        for snapshot in reversed(self.snapshots):
            if snapshot.complete and snapshot.upstream is None:
                coverage = self.coverage(snapshot)
                return coverage[1] if coverage is not None else 0.0
        return 0.0

    def coverage(self, snapshot: Snapshot) -> tuple[float, float] | None:
        """(fraction of chunks, fraction of bytes) the reducers' data covered: each the least over partitions (the
        least pair, compared chunks first, gave the bytes of a partition holding few large chunks: 40% of the input
        where another partition held 30%)."""
        fractions = []
        for fields in snapshot.partitions.values():
            if fields.get("final"):
                fractions.append((1.0, 1.0))  # answered with its final output: it had seen everything
                continue
            chunks = fields.get("chunks_seen")
            if chunks is None:
                return None
            fractions.append((len(chunks) / max(1, len(self.chunk_sizes)), held_fraction(chunks, self.chunk_sizes)))
        if not fractions:
            return None
        return min(chunks for chunks, _ in fractions), min(held for _, held in fractions)

    def accurate(self, snapshot: Snapshot) -> bool:
        return self.stop_when_accurate is not None and snapshot.complete and self.held_back(snapshot) is None

    def ends_exactly(self, snapshot: Snapshot) -> bool:
        """Every partition answered with its final output, or the reducers had every chunk, or every byte (the
        chunks unread are empty files, which hold no record: the snapshot's values are all final): the job's exact
        end is at hand, and no early stop is due (it would call an exact result approximate)."""
        if all(fields.get("final") for fields in snapshot.partitions.values()):
            return True
        coverage = self.coverage(snapshot)
        return coverage is not None and max(coverage) >= 1

    def held_back(self, snapshot: Snapshot) -> str | None:
        """Why ``snapshot`` cannot end the job under ``--stop-when-accurate`` (``None``: it can), in a line that names
        at most ``UNBOUNDED_EXAMPLES`` groups per partition: a job that ran to the end said only that no snapshot met
        the bound, never which groups kept it from stopping (a NaN estimate, a group seen in one chunk)."""
        if self.stop_when_accurate is None:
            return "the job was not run with --stop-when-accurate"
        if not snapshot.complete:
            return "not every partition answered"
        failed = [index for index, fields in sorted(snapshot.partitions.items()) if fields.get("error")]
        if failed:
            return f"partition {failed[0]} could not take it: {snapshot.partitions[failed[0]]['error']}"
        if self.ends_exactly(snapshot):
            return "all of the input was read"  # the job ends exactly on its own (an early stop: called approximate)
        estimated = {index: f for index, f in snapshot.partitions.items() if not f.get("final")}
        if not any(fields.get("groups") for fields in snapshot.partitions.values()):
            return "no group was read yet"  # an empty result is no estimate
        # Every reason that applies, the chunks read first: a run held back by too few chunks read and by a group
        # with a NaN estimate said only the first, and the user learnt of the NaN once more chunks were read.
        reasons: list[str] = []
        for fields in estimated.values():
            seen = fields.get("strata_seen") or {}
            unseen = [stratum for stratum, count in sorted(seen.items()) if not count]
            if unseen:
                # Its groups are missing altogether, not estimated, so no interval speaks for them and stopping now
                # would drop them from the result.
                # (An input without strata is one stratum, named "": "no chunk of stratum '' was read yet" said it.)
                where = f"stratum {unseen[0]!r}" if len(seen) > 1 else "the input"
                reasons.append(f"no chunk of {where} was read yet")
                break
            short = [
                (stratum, seen.get(stratum, 0), min(MIN_CHUNKS_PER_STRATUM, chunks))
                for stratum, chunks in sorted((self.stratum_chunks or {}).items())
                if seen.get(stratum, 0) < min(MIN_CHUNKS_PER_STRATUM, chunks)
            ]
            if short:
                stratum, read, needed = short[0]
                where = f"stratum {stratum!r}" if len(self.stratum_chunks or {}) > 1 else "the input"
                reasons.append(f"{read} of the {needed} chunks needed of {where} were read")
                break
        unbounded = {index: f for index, f in sorted(estimated.items()) if f.get("max_relative_half_width") is None}
        if unbounded:
            count = sum(int(f.get("unbounded") or 0) for f in unbounded.values())
            examples = [e for f in unbounded.values() for e in f.get("unbounded_examples") or ()]
            examples.sort(key=lambda example: bool(example.get("waiting")))  # those that never get one first
            named = "; ".join(f"{_short(e.get('key'))}: {e.get('why')}" for e in examples[:UNBOUNDED_EXAMPLES])
            reasons.append(
                f"{count:,} group{'s' if count != 1 else ''} without an interval" + (f" ({named})" if named else "")
            )
        else:
            index, fields = max(estimated.items(), key=lambda item: float(item[1]["max_relative_half_width"]))
            widest = float(fields["max_relative_half_width"])
            if widest > self.stop_when_accurate:
                bound = self.stop_when_accurate  # (0.0005: "0.06%, over 0.05%", not "0.1%, over 0.1%")
                reasons.append(
                    f"the widest interval is {percent_like(widest, bound)} of its estimate, over {percent(bound)} "
                    f"({_short(fields.get('widest'))})"
                )
        return "; ".join(reasons) or None

    def describe(self, snapshot: Snapshot, with_rows: bool = True) -> dict[str, Any]:
        """The snapshot as the API and ``_snapshot.json`` show it."""
        coverage = self.coverage(snapshot)
        partitions = []
        rows: list[dict[str, Any]] = []
        for index in sorted(snapshot.partitions):
            fields = snapshot.partitions[index]
            entry = {
                "index": index,
                "groups": fields.get("groups"),
                "seconds": fields.get("seconds"),
                **({"error": fields["error"]} if fields.get("error") else {}),
                **({"final": True, "chunks_fraction": 1.0, "input_fraction": 1.0} if fields.get("final") else {}),
            }
            chunks = fields.get("chunks_seen")
            if chunks is not None and not fields.get("final"):
                entry["chunks_fraction"] = len(chunks) / max(1, len(self.chunk_sizes))
                entry["input_fraction"] = held_fraction(chunks, self.chunk_sizes)
            if chunks is not None:
                # (A final partition has seen everything, 1.0 above: a pipeline's later step reads no chunks of its
                # own, and its final partitions' 0 chunks seen of 0 said 0.0 there.)
                entry["strata_seen"] = fields.get("strata_seen")
            partitions.append(entry)
            if with_rows:
                rows.extend(fields.get("rows") or [])
        if rows:  # each partition's are largest first: so are all of them
            rows = [rows[i] for i in top_positions([_shown(row) for row in rows], len(rows))]
        result: dict[str, Any] = {
            "seq": snapshot.seq,
            "label": snapshot.label,
            "progress": snapshot.progress,
            "requested_at": snapshot.requested_at,
            "time": snapshot.completed_at,
            "seconds_since_start": (snapshot.completed_at or snapshot.requested_at) - self.started_at,
            "complete": snapshot.complete,
            # Unknown (None) when a partition does not say which chunks its data covers: a job run without
            # --snapshot-every or --order random reads no chunks (hop snapshot on it said the maps' progress, 22%
            # of the input seen, for reducers holding nothing yet).
            "input_fraction": coverage[1] if coverage else None,
            "chunks_fraction": coverage[0] if coverage else None,
            "partitions": partitions,
            "groups": sum(p.get("groups") or 0 for p in partitions),
            # Strata with no chunk seen yet: every group drawing from them is still unseen.
            "strata_unseen": sorted(
                {s for p in partitions for s, seen in (p.get("strata_seen") or {}).items() if not seen}
            ),
            # Rows left out of what is kept (by a partition, or by thinning): per partition, not by the limit alone.
            "truncated": any(
                (fields.get("groups") or 0) > len(fields.get("rows") or ()) for fields in snapshot.partitions.values()
            ),
            "rows_limit": snapshot.rows_limit,
            # Thresholds no snapshot was taken at, this one standing for them (the module docstring).
            **({"skipped": snapshot.skipped} if snapshot.awaits is not None else {}),
            "confidence": self.confidence,
            # The intervals assume chunks read in random order; in file order they hold only if the order of the
            # input is unrelated to its values (a file sorted by key or value gives narrow intervals that miss).
            "order": self.order,
        }
        if self.stop_when_accurate is not None and snapshot.complete and snapshot.upstream is None:
            result["stop_held_back"] = self.held_back(snapshot)  # null: it met --stop-when-accurate
        if snapshot.upstream is not None:
            upstream = snapshot.upstream
            result["upstream"] = {k: upstream.get(k) for k in ("job_id", "label", "input_fraction", "chunks_fraction")}
            # Its reducers read no chunks of their own: how much of the run's input it holds is the upstream's, in
            # chunks as in bytes (the chunks' was null, and a third step's upstream said null too).
            result["input_fraction"] = upstream.get("input_fraction", snapshot.progress)
            result["chunks_fraction"] = upstream.get("chunks_fraction")
        if with_rows:
            result["rows"] = rows
        return result


def _shown(row: dict[str, Any]) -> Any:
    estimate = row.get("estimate")
    return row.get("value") if estimate is None else estimate


def _short(key: Any) -> str:
    """A group's key as JSON, cut to 60 characters."""
    text = to_json(key)
    return text if len(text) <= 60 else text[:57] + "..."
