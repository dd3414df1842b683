"""The ``serial`` contender: the job's own functions in one plain Python process, the ideal serial cost.

    python -m bench.runners.serial --job JOB.py --out OUT INPUT...

Reads every input file line by line, calls ``job.map``, folds values the way the job would (an aggregate's
lift/merge into a dict of states, with an in-place ``+`` for ``Sum``; otherwise a list per key and one
``reduce`` call per key), then writes the result sorted in hop's output format.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from bench.runners.common import (
    Plan,
    emit_result,
    finished,
    fold_into,
    group,
    input_files,
    load_plan,
    map_records,
    read_lines,
    reduce_group,
    runner_arguments,
    write_output,
)


def fold(plan: Plan, files: list[str]) -> Iterator[tuple[Any, Any]]:
    """All the job's output pairs for ``files``."""
    aggregate = plan.aggregate
    if aggregate is None:
        groups = group(pair for path in files for pair in map_records(plan, path, read_lines(path)))
        for key, values in groups.items():
            yield from reduce_group(plan, key, values)
        return
    states: dict[Any, Any] = {}
    for path in files:
        fold_into(states, aggregate, map_records(plan, path, read_lines(path)))
    yield from finished(plan, states)


def main() -> None:
    args = runner_arguments(__doc__)
    began = time.perf_counter()
    plan = load_plan(args.job)
    records = write_output(args.out, fold(plan, input_files(args.inputs)))
    emit_result(job_s=time.perf_counter() - began, records=records)


if __name__ == "__main__":
    main()
