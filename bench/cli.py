"""The ``python -m bench`` command line: generate inputs, run the suite, print and save the results.

    python -m bench [--workloads wordcount-zipf,wordcount-uniform,pageviews,heavy-reduce,scaling]
                    [--size 150MB] [--repeats 3]
                    [--contenders hop-pipelined,hop-blocking,serial,bare-split,pyspark-rdd,spark-sql,mrjob]
                    [--json PATH] [--data-dir bench/data] [--scaling-base 50MB] [--mrjob-slice 5MB]

Exit status: 0 when every run succeeded and every output matched hop's (targets missed do not change it), 1
when a run failed or an output mismatched, 2 on bad options.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import contenders as contender_defs
from bench import report, targets, workloads
from bench.environment import BENCH_DIR, compile_project
from bench.stats import Row, summarize
from bench.suite import Options, Suite
from bench.targets import Target
from bench.workloads import Workload
from hop.gen.cli import ArgumentParser, size_argument
from hop.lifetime import become_subreaper


def _size(text: str) -> int:
    """argparse type for sizes: above zero (``hop gen`` refuses 0, which the first generation failed on)."""
    return size_argument(text)


def _names(text: str) -> list[str]:
    """A comma-separated list with at least one name, each once (an empty one ran nothing, after generating every
    workload's input, and exited 0; a name given twice ran twice per repeat, both under one row)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"no name in {text!r}")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{', '.join(twice)} given more than once")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="python -m bench", description="Benchmark hop against others.")
    add = parser.add_argument
    add(
        "--workloads",
        type=_names,
        default=list(workloads.WORKLOADS),
        help=f"comma-separated, from {','.join(workloads.WORKLOADS)} (default: all)",
    )
    add(
        "--contenders",
        type=_names,
        default=list(workloads.CONTENDERS),
        help=f"comma-separated, from {','.join(workloads.CONTENDERS)} (default: all)",
    )
    add("--size", type=_size, default=_size("150MB"), help="input size (default 150MB)")
    add("--repeats", type=int, default=3, help="runs per contender and case (default 3)")
    add(
        "--scaling-base",
        type=_size,
        default=_size("50MB"),
        help="the 1x size of the scaling workload (default 50MB; also 2x and 4x)",
    )
    add(
        "--mrjob-slice",
        type=_size,
        default=_size("5MB"),
        help="mrjob runs on this much of the input, its time scaled to the full size (default 5MB)",
    )
    add("--parallelism", type=int, default=2, help="hop --workers and Spark local[N] (default 2)")
    add(
        "--json",
        type=Path,
        default=None,
        help="where to write the JSON results (default bench/results/bench-YYYYMMDD-HHMMSS.json); a .txt with the "
        "printed table is written beside it",
    )
    add(
        "--data-dir",
        type=Path,
        default=BENCH_DIR / "data",
        help="cache of generated inputs, and scratch space for outputs (default bench/data)",
    )
    add("--timeout", type=float, default=3600.0, help="seconds before a run is killed (default 3600)")
    add("--keep-outputs", action="store_true", help="keep every run's output directory")
    return parser


def _render(
    args: argparse.Namespace, planned: list[Workload], suite: Suite, rows: list[Row], verdicts: list[Target]
) -> str:
    """The text printed at the end: inputs, table, notes, targets."""
    inputs = [
        f"  {case.label}: {case.dataset.description}, {case.dataset.bytes / 1e6:.1f} MB ({case.dataset.path})"
        for workload in planned
        for case in workload.cases
    ]
    notes = [f"  {name}: UNAVAILABLE: {reason}" for name, reason in suite.unavailable.items()]
    if any(run.scale != 1.0 for run in suite.runs):
        notes.append(
            "  SCALED rows ran on a slice of the input: their job time is multiplied by "
            "(input bytes / slice bytes),\n  start-up kept as measured; their output is checked "
            "against hop on the same slice"
        )
    return "\n".join(
        [
            f"hop benchmark, {time.strftime('%Y-%m-%d %H:%M')}, {args.repeats} repeat(s), medians; 'x hop' = "
            "wall / hop-pipelined's median wall on the same case (scaling: / scaling-1x)",
            "Inputs:",
            *inputs,
            "",
            report.table(rows, suite.skipped),
            *([""] + notes if notes else []),
            "",
            report.targets_block(verdicts, targets.split_lines(rows)),
        ]
    )


def _document(
    args: argparse.Namespace,
    argv: list[str] | None,
    planned: list[Workload],
    suite: Suite,
    rows: list[Row],
    verdicts: list[Target],
    extra: dict[str, Any],
) -> dict[str, Any]:
    """The JSON results: machine, command line, options, inputs, summary, targets and every raw run."""
    cases = [case for workload in planned for case in workload.cases]
    return {
        "machine": report.machine_info(),
        "command": [sys.executable, "-m", "bench", *(sys.argv[1:] if argv is None else argv)],
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        **extra,
        "inputs": [
            {
                "case": case.label,
                "workload": case.workload,
                "job": case.job,
                "path": str(case.dataset.path),
                "bytes": case.dataset.bytes,
                "description": case.dataset.description,
            }
            for case in cases
        ],
        "unavailable": suite.unavailable,
        "skipped": suite.skipped,
        "summary": [row.summary() for row in rows],
        "targets": [asdict(target) for target in verdicts],
        "beside_bare_split": targets.split_lines(rows),
        "runs": [
            {**asdict(run), "scaled_wall_s": run.scaled_wall_s, "scaled_cpu_s": run.scaled_cpu_s, "ok": run.ok}
            for run in suite.runs
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        chosen = contender_defs.build(args.contenders, args.mrjob_slice)
        for name in args.workloads:
            if name not in workloads.WORKLOADS:
                raise ValueError(f"unknown workload {name!r}; choose from {', '.join(workloads.WORKLOADS)}")
    except ValueError as error:
        parser.error(str(error))
    if args.repeats < 1 or args.parallelism < 1:
        parser.error("--repeats and --parallelism must be at least 1")
    began = time.time()
    compile_project()
    data_dir = args.data_dir.resolve()
    settings = workloads.Settings(data_dir=data_dir, size=args.size, scaling_base=args.scaling_base)
    planned = [workloads.build(name, settings) for name in args.workloads]  # generates every input first
    subreaper = become_subreaper()
    suite = Suite(
        chosen,
        Options(
            repeats=args.repeats,
            parallelism=args.parallelism,
            timeout=args.timeout,
            runs_dir=data_dir / "runs",
            keep_outputs=args.keep_outputs,
        ),
    )
    for name, reason in suite.unavailable.items():
        print(f"bench: contender {name} is UNAVAILABLE: {reason}", file=sys.stderr)
    for workload in planned:
        suite.run_workload(workload)

    rows = summarize(suite.runs)
    verdicts = targets.evaluate(rows)
    text = _render(args, planned, suite, rows, verdicts)
    bad = [row for row in rows if row.status != "ok"]
    if bad:
        text += "\n\n!! " + "; ".join(f"{row.case}/{row.contender}: {row.status}" for row in bad)
    print(text)
    extra = {"subreaper": subreaper, "elapsed_s": time.time() - began}
    path = args.json or BENCH_DIR / "results" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}.json"
    report.write_json(path, _document(args, argv, planned, suite, rows, verdicts, extra))
    path.with_suffix(".txt").write_text(text + "\n")
    print(
        f"\nbench: results in {path} and {path.with_suffix('.txt').name}; took {time.time() - began:.0f} s",
        file=sys.stderr,
    )
    return 1 if bad else 0
