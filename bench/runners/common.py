"""What the non-hop contender scripts share: a hop job as plain functions, input reading, output writing.

A :class:`Plan` is a one-step hop job as the engine sees it (rules from ``hop.aggregates``): when ``reduce``
is an aggregate, values are lifted, merged and finished; when only ``combine`` is one, the reducer gets merged
states; otherwise ``combine`` (optional) and ``reduce`` are the user's generators. The module-level functions
take the job file's path rather than the job, so Spark can ship them by reference (its workers re-load the job
file).

Output is hop's own format: ``OUT/part-NNNNN`` files of ``json(key) TAB json(value)`` lines.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

from hop.aggregates import Aggregate
from hop.inputs import expand_inputs
from hop.job import Job
from hop.loader import load_job_file

RESULT_MARK = "BENCH-RESULT "
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@dataclass
class Plan:
    """A loaded job: its instance, the map function and how values are folded."""

    job: Job
    map: Any
    aggregate: Aggregate | None
    combine: Any
    reduce: Any

    @property
    def reduce_is_aggregate(self) -> bool:
        return isinstance(self.reduce, Aggregate)

    @property
    def lift_is_identity(self) -> bool:
        return self.aggregate is not None and (self.aggregate.inline_sum or type(self.aggregate).lift is Aggregate.lift)

    @property
    def finish_is_identity(self) -> bool:
        return self.aggregate is not None and type(self.aggregate).finish is Aggregate.finish


@cache
def load_plan(job_path: str) -> Plan:
    """Load the job file (once per process) and resolve its single step."""
    job = load_job_file(job_path)()
    steps = job.resolved_steps()
    if len(steps) != 1:
        raise SystemExit(f"{job_path}: multi-step jobs are not supported by the benchmark contenders")
    step = steps[0]
    reduce = step.reducer
    combine = step.combiner
    if isinstance(reduce, Aggregate):
        aggregate: Aggregate | None = reduce
        combine = reduce
    else:
        aggregate = combine if isinstance(combine, Aggregate) else None
    return Plan(job=job, map=step.mapper, aggregate=aggregate, combine=combine, reduce=reduce)


def runner_arguments(doc: str | None, *, parallelism: bool = False) -> argparse.Namespace:
    """The command line every runner script takes: ``--job JOB --out OUT INPUT...``, with ``--parallelism N``
    (default 2) for those that run in parallel; ``doc``: the script's docstring, whose first line describes it."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--job", required=True)
    parser.add_argument("--out", required=True)
    if parallelism:
        parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("inputs", nargs="+")
    return parser.parse_args()


def input_files(paths: Iterable[str]) -> list[str]:
    """Files, directories and globs expanded the way hop does it."""
    return expand_inputs(list(paths))


def _open_text(path: str) -> IO[str]:
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", newline="\n")
    return open(path, encoding="utf-8", newline="\n")


def read_lines(path: str) -> Iterator[str]:
    """The lines of a text file (or .gz) without their line break; lines end at ``\\n`` only, as in hop."""
    with _open_text(path) as handle:
        yield from _stripped(handle)


def read_range_lines(path: str, start: int, end: int) -> Iterator[str]:
    """The lines of bytes ``start`` to ``end`` of an uncompressed text file, read as :func:`read_lines` reads a
    whole file; both ends must be line starts (or the file's end)."""
    raw = io.BufferedReader(_ByteRange(path, start, end))
    with io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as handle:
        yield from _stripped(handle)


def _stripped(handle: IO[str]) -> Iterator[str]:
    for line in handle:
        if line.endswith("\n"):
            line = line[:-2] if line.endswith("\r\n") else line[:-1]
        yield line


class _ByteRange(io.RawIOBase):
    """Bytes ``start`` to ``end`` of a file, as a file of its own."""

    def __init__(self, path: str, start: int, end: int) -> None:
        super().__init__()
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 (closed by close())
        self._file.seek(start)
        self._left = end - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            return 0
        count = self._file.readinto(memoryview(buffer)[: self._left]) or 0
        self._left -= count
        return count

    def close(self) -> None:
        self._file.close()
        super().close()


def map_records(plan: Plan, path: str, lines: Iterable[str]) -> Iterator[tuple[Any, Any]]:
    """Run the job's map over the lines of one file, between ``setup`` and ``teardown``; values lifted."""
    job = plan.job
    job.input_file = path
    job.setup()
    mapper = plan.map
    lift = None if plan.aggregate is None or plan.lift_is_identity else plan.aggregate.lift
    for number, line in enumerate(lines):
        pairs = mapper(number, line)
        if pairs is None:
            continue
        if lift is None:
            yield from pairs
        else:
            for key, value in pairs:
                yield key, lift(value)
    job.teardown()


def fold_into(states: dict[Any, Any], aggregate: Aggregate, pairs: Iterable[tuple[Any, Any]]) -> None:
    """Fold ``pairs`` of lifted values (or states) into ``states``, key -> state: ``+`` for ``Sum``, otherwise the
    aggregate's ``merge``."""
    if aggregate.inline_sum:
        get = states.get
        for key, value in pairs:
            states[key] = get(key, 0) + value
    else:
        merge = aggregate.merge
        for key, state in pairs:
            states[key] = merge(states[key], state) if key in states else state


def finished(plan: Plan, states: dict[Any, Any]) -> Iterator[tuple[Any, Any]]:
    """The job's output from each key's folded state: the aggregate's ``finish``, or the user's ``reduce``."""
    assert plan.aggregate is not None
    if plan.reduce_is_aggregate:
        finish = plan.aggregate.finish
        for key, state in states.items():
            yield key, finish(state)
    else:
        for key, state in states.items():
            yield from reduce_group(plan, key, [state])


def freeze(value: Any) -> Any:
    """Lists to tuples, recursively (keys that went through JSON become hashable again)."""
    if isinstance(value, list):
        return tuple(freeze(item) for item in value)
    return value


def group(pairs: Iterable[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    groups: dict[Any, list[Any]] = defaultdict(list)
    for key, value in pairs:
        groups[key].append(value)
    return groups


def combine_groups(plan: Plan, groups: dict[Any, list[Any]]) -> Iterator[tuple[Any, Any]]:
    """Apply the user's generic combiner to each group (identity when there is none)."""
    for key, values in groups.items():
        if plan.combine is None:
            for value in values:
                yield key, value
        else:
            yield from plan.combine(key, values) or ()


def reduce_group(plan: Plan, key: Any, values: Iterable[Any]) -> Iterator[tuple[Any, Any]]:
    """The final value(s) of one key from its (lifted) values or states."""
    if plan.reduce_is_aggregate:
        assert plan.aggregate is not None
        yield key, plan.aggregate.finish(plan.aggregate.fold_values(values))
    else:
        yield from plan.reduce(key, values) or ()


# Spark-friendly entry points: picklable by reference, the job re-loaded from its path on each worker. ---
def spark_map_partition(job_path: str, path: str, lines: Iterable[str]) -> Iterator[tuple[Any, Any]]:
    return map_records(load_plan(job_path), path, lines)


def spark_map_combine_partition(job_path: str, path: str, lines: Iterable[str]) -> Iterator[tuple[Any, Any]]:
    plan = load_plan(job_path)
    return combine_groups(plan, group(map_records(plan, path, lines)))


def spark_merge(job_path: str, a: Any, b: Any) -> Any:
    aggregate = load_plan(job_path).aggregate
    assert aggregate is not None
    return aggregate.merge(a, b)


def spark_finish(job_path: str, state: Any) -> Any:
    aggregate = load_plan(job_path).aggregate
    assert aggregate is not None
    return aggregate.finish(state)


def spark_reduce(job_path: str, item: tuple[Any, Iterable[Any]]) -> Iterator[tuple[Any, Any]]:
    return reduce_group(load_plan(job_path), item[0], item[1])


def format_line(pair: tuple[Any, Any]) -> str:
    return f"{_dumps(pair[0])}\t{_dumps(pair[1])}"


def write_output(out_dir: str, pairs: Iterable[tuple[Any, Any]]) -> int:
    """Write ``OUT/part-00000`` sorted by key, then ``OUT/_SUCCESS``; returns the number of records."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = list(pairs)
    try:
        records.sort(key=lambda pair: pair[0])
    except TypeError:  # keys of mixed types: any stable order will do for the comparison
        records.sort(key=lambda pair: repr(pair[0]))
    with open(out / "part-00000", "w", encoding="utf-8") as handle:
        for pair in records:
            handle.write(format_line(pair))
            handle.write("\n")
    (out / "_SUCCESS").touch()
    return len(records)


def emit_result(**figures: Any) -> None:
    """Print the script's own figures as the last stdout line, for the benchmark to pick up."""
    sys.stdout.flush()
    print(RESULT_MARK + json.dumps(figures), flush=True)
