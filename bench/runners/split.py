"""The ``bare-split`` contender: the ``serial`` loop split over N plain processes, with no engine around it.

    python -m bench.runners.split --job JOB.py --out OUT --parallelism N INPUT...

The input is cut into N byte ranges of about equal size at line starts (a compressed file is never cut); N forked
processes each fold their range exactly as ``serial`` folds the whole input and send their states back; the
parent merges them with the aggregate, finishes and writes the output as ``serial`` does. There is no scheduling,
shuffle, spill, progress or fault tolerance. hop's parallel-efficiency target (<= 0.55x one process) was set
against such a split measured alone (0.44-0.57x one process on this machine); run beside hop, it shows what the
day's machine gives two plain processes, and what hop with N workers costs against them. It is no lower bound:
hop reads lines in bulk (``hop.inputs.iter_lines``) where this loop reads them one by one, as ``serial`` does.

Only jobs whose combiner or reducer is an aggregate: their partial states are all the processes need to send.
The map's key is the line's number within its range (``serial``: within its file).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

from bench.runners.common import (
    emit_result,
    finished,
    fold_into,
    input_files,
    load_plan,
    map_records,
    read_lines,
    read_range_lines,
    runner_arguments,
    write_output,
)
from hop.inputs import is_compressed

Range = tuple[str, int, int]
"""A file and the bytes ``start`` to ``end`` of it one process reads; ``end`` -1: the whole (compressed) file."""


def line_ranges(files: list[str], parts: int) -> list[list[Range]]:
    """The ``files`` cut into ``parts`` lists of ranges of about equal bytes, in order, every line in exactly one:
    each cut moves to the start of the line after the one holding the byte before it (to the end of a compressed
    file). A list may be empty (a compressed file larger than a part)."""
    sizes = [os.path.getsize(path) for path in files]
    total = sum(sizes)
    cuts = [0]
    base = 0
    wanted = [total * part // parts for part in range(1, parts)]
    for path, size in zip(files, sizes, strict=True):
        for cut in wanted:
            if base <= cut < base + size:
                local = cut - base
                if local and is_compressed(path):
                    local = size
                elif local:
                    local = _next_line_start(path, local - 1, size)
                cuts.append(max(cuts[-1], base + local))
        base += size
    cuts.append(total)
    result: list[list[Range]] = []
    for low, high in zip(cuts, cuts[1:], strict=False):
        ranges: list[Range] = []
        base = 0
        for path, size in zip(files, sizes, strict=True):
            start, end = max(low, base) - base, min(high, base + size) - base
            if start < end:
                ranges.append((path, 0, -1) if is_compressed(path) else (path, start, end))
            base += size
        result.append(ranges)
    return result


def _next_line_start(path: str, position: int, size: int) -> int:
    """Where the line after the one holding byte ``position`` starts (``size`` if that line is the last)."""
    with open(path, "rb") as file:
        file.seek(position)
        line = file.readline()
    return min(size, position + len(line))


def partial_states(job_path: str, ranges: list[Range]) -> dict[Any, Any]:
    """One process's work: the job's map over its ranges, folded into states by key."""
    plan = load_plan(job_path)
    assert plan.aggregate is not None
    states: dict[Any, Any] = {}
    for path, start, end in ranges:
        lines = read_lines(path) if end < 0 else read_range_lines(path, start, end)
        fold_into(states, plan.aggregate, map_records(plan, path, lines))
    return states


def main() -> None:
    args = runner_arguments(__doc__, parallelism=True)
    began = time.perf_counter()
    plan = load_plan(args.job)
    if plan.aggregate is None:
        raise SystemExit(f"{args.job}: the bare split needs a job whose combiner or reducer is an aggregate")
    parts = line_ranges(input_files(args.inputs), args.parallelism)
    # Forked, so each process starts with the job loaded and pays no interpreter start-up, as a bare split would.
    with multiprocessing.get_context("fork").Pool(len(parts)) as pool:
        partials = pool.starmap(partial_states, [(args.job, ranges) for ranges in parts])
        pool.close()
        pool.join()
    states: dict[Any, Any] = {}
    for partial in partials:
        fold_into(states, plan.aggregate, partial.items())
    records = write_output(args.out, finished(plan, states))
    emit_result(job_s=time.perf_counter() - began, records=records)


if __name__ == "__main__":
    main()
