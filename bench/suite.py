"""Running the benchmark: every contender on every case of a workload, repeats interleaved, outputs verified.

For each workload, repeat ``r`` runs case 1 with contender A, B, C, then case 2 with A, B, C, ... before
repeat ``r + 1`` starts, so slow drifts in machine load touch every contender alike. Each run writes into its
own output directory under ``DATA/runs``; once the reference output of the case is known (the first successful
hop-pipelined run, else hop-blocking, else an extra untimed hop run) every run's output is compared with it
and deleted. A contender on a slice is compared with an untimed hop-pipelined run on the same slice.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import datasets, verify
from bench.contenders import Contender, Hop, RunSpec
from bench.environment import REPO_ROOT, subprocess_env
from bench.measure import measure
from bench.stats import Run
from bench.workloads import Case, Workload

REFERENCE_ORDER = ("hop-pipelined", "hop-blocking")


@dataclass
class Options:
    repeats: int
    parallelism: int
    timeout: float
    runs_dir: Path
    keep_outputs: bool = False


@dataclass
class CaseState:
    """The reference output of a case (or its slice) and the runs waiting for it."""

    reference: dict[Any, Any] | None = None
    reference_source: str = ""
    pending: list[tuple[Run, Path, str]] = field(default_factory=list)


class Suite:
    def __init__(self, contenders: list[Contender], options: Options) -> None:
        self.contenders = contenders
        self.options = options
        self.runs: list[Run] = []
        self.skipped: list[dict[str, str]] = []
        self.unavailable = {c.name: reason for c in contenders if (reason := c.unavailable())}
        self._seq = 0

    # Planning -----------------------------------------------------------------------------------------------
    def _spec(self, case: Case, contender: Contender, out: Path) -> RunSpec:
        dataset = case.dataset
        if contender.slice_bytes is not None:
            dataset = datasets.slice_of(dataset, contender.slice_bytes)
        return RunSpec(
            job=case.job,
            inputs=dataset.inputs,
            out=out,
            hop_args=case.hop_args,
            sql_query=case.sql_query,
            parallelism=self.options.parallelism,
        )

    def _runnable(self, case: Case) -> list[Contender]:
        chosen = []
        for contender in self.contenders:
            reason = (
                case.skip.get(contender.name)
                or self.unavailable.get(contender.name)
                or contender.skip_reason(self._spec(case, contender, Path()))
            )
            if reason:
                self.skipped.append(
                    {"workload": case.workload, "case": case.label, "contender": contender.name, "reason": reason}
                )
            else:
                chosen.append(contender)
        return chosen

    # Running ------------------------------------------------------------------------------------------------
    def run_workload(self, workload: Workload) -> None:
        plan = [(case, self._runnable(case)) for case in workload.cases]
        states = {key: CaseState() for case, _ in plan for key in (case.label, case.label + "/slice")}
        for repeat in range(1, self.options.repeats + 1):
            for case, contenders in plan:
                for contender in contenders:
                    run, out = self._run_one(case, contender, repeat)
                    sliced = contender.slice_bytes is not None and run.scale != 1.0
                    state = states[case.label + ("/slice" if sliced else "")]
                    state.pending.append((run, out, contender.output_format))
                    candidate = run.ok and not sliced and contender.name in REFERENCE_ORDER
                    if candidate and state.reference is None:
                        self._adopt_reference(state, run, out)
                    self._check_pending(state)
        for case, contenders in plan:
            for suffix in ("", "/slice"):
                state = states[case.label + suffix]
                if state.pending and state.reference is None:
                    slicer = next((c for c in contenders if c.slice_bytes is not None), None)
                    self._reference_run(case, state, slicer if suffix else None)
                self._check_pending(state)

    def _run_one(self, case: Case, contender: Contender, repeat: int) -> tuple[Run, Path]:
        self._seq += 1
        base = self.options.runs_dir / case.label / contender.name
        out = base / f"r{repeat}"
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        spec = self._spec(case, contender, out)
        input_bytes = sum(datasets.Dataset(Path(path), "").bytes for path in spec.inputs)
        stdout, stderr = base / f"r{repeat}.stdout", base / f"r{repeat}.stderr"
        measured = measure(
            contender.command(spec),
            stdout=stdout,
            stderr=stderr,
            env=subprocess_env(),
            cwd=str(REPO_ROOT),
            timeout=self.options.timeout,
        )
        run = Run(
            seq=self._seq,
            workload=case.workload,
            case=case.label,
            contender=contender.name,
            repeat=repeat,
            input_bytes=input_bytes,
            wall_s=measured.wall_s,
            cpu_s=max(measured.cpu_s, measured.cpu_sampled_s),
            cpu_sampled_s=measured.cpu_sampled_s,
            peak_rss_mb=measured.peak_rss_bytes / 1e6,
            returncode=measured.returncode,
            timed_out=measured.timed_out,
            scale=case.dataset.bytes / input_bytes if input_bytes else 1.0,
        )
        run.extras = {**contender.extras(spec, stdout.read_text(errors="replace")), "cpu_rusage_s": measured.cpu_s}
        if measured.orphans_killed:
            run.extras["orphans_killed"] = measured.orphans_killed
        if measured.timed_out:
            run.error = f"timed out after {self.options.timeout:g} s"
        elif measured.returncode != 0:
            tail = stderr.read_text(errors="replace").strip().splitlines()[-3:]
            run.error = f"exit {measured.returncode}: " + " | ".join(tail)
        self.runs.append(run)
        status = "ok" if run.ok else f"FAILED ({run.error})"
        scaled = f" (scaled x{run.scale:.1f}: {run.scaled_wall_s:.2f} s)" if run.scale != 1.0 else ""
        print(
            f"bench: [{case.label}] r{repeat} {contender.name}: {run.wall_s:.2f} s wall{scaled}, "
            f"{run.cpu_s:.2f} s CPU, {run.peak_rss_mb:.0f} MB peak: {status}",
            file=sys.stderr,
            flush=True,
        )
        return run, out

    # Verification -------------------------------------------------------------------------------------------
    def _adopt_reference(self, state: CaseState, run: Run, out: Path) -> None:
        try:
            state.reference = verify.read_output(out)
        except (OSError, ValueError) as error:
            run.verification = f"MISMATCH: unreadable output: {error}"
            return
        state.reference_source = f"{run.contender} run {run.repeat}"

    def _reference_run(self, case: Case, state: CaseState, slicer: Contender | None) -> None:
        """An untimed hop-pipelined run on the case's input (or on the slice ``slicer`` runs on), given the runs'
        ``--timeout``: past it (a hung run would hold the whole benchmark), the runs waiting for it are not checked."""
        out = self.options.runs_dir / case.label / ("reference-slice" if slicer else "reference")
        hop = Hop("reference", blocking=False)
        command = hop.command(self._spec(case, slicer or hop, out))
        reason = None
        try:
            result = subprocess.run(
                command,
                capture_output=True,
                text=True,
                env=subprocess_env(),
                cwd=REPO_ROOT,
                timeout=self.options.timeout,
            )
            if result.returncode != 0:
                reason = f"failed ({result.stderr.strip()[-200:]})"
        except subprocess.TimeoutExpired:
            reason = f"took over the --timeout of {self.options.timeout:g} s"
        if reason is not None:
            for run, _, _ in state.pending:
                run.verification = f"not checked: the reference hop run {reason}"
            state.pending.clear()
            return
        state.reference = verify.read_output(out)
        state.reference_source = "untimed hop-pipelined run" + (" on the same slice" if slicer else "")
        self._discard(out)

    def _check_pending(self, state: CaseState) -> None:
        if state.reference is None:
            return
        for run, out, output_format in state.pending:
            if not run.ok:
                run.verification = "not checked: the run failed"
            else:
                try:
                    result = verify.compare(state.reference, verify.read_output(out, output_format))
                    run.verification = result.summary()
                except (OSError, ValueError) as error:
                    run.verification = f"MISMATCH: unreadable output: {error}"
                is_reference = state.reference_source == f"{run.contender} run {run.repeat}"
                if run.verification.startswith("ok") and is_reference:
                    run.verification = "reference" + run.verification[2:]
            run.extras["reference"] = state.reference_source
            if run.mismatch:
                print(
                    f"bench: !! [{run.case}] {run.contender} r{run.repeat} output {run.verification}",
                    file=sys.stderr,
                    flush=True,
                )
            self._discard(out)
        state.pending.clear()

    def _discard(self, out: Path) -> None:
        if not self.options.keep_outputs:
            shutil.rmtree(out, ignore_errors=True)
