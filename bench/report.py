"""Reporting: the machine description, the results table, the targets block and the JSON document."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from bench.environment import REPO_ROOT
from bench.stats import Row
from bench.targets import Target


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _command_output(command: list[str]) -> str | None:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=30, cwd=REPO_ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (result.stdout or result.stderr).strip()
    return text if result.returncode == 0 and text else None


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on."""
    java = _command_output(["java", "-version"])
    status = _command_output(["git", "status", "--porcelain", "--untracked-files=no"])
    return {
        "date": dt.datetime.now(dt.UTC).astimezone().isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "java": java.splitlines()[0] if java else None,
        "versions": {name: _version(name) for name in ("hop", "pyspark", "mrjob", "psutil", "pyzmq")},
        "git_commit": _command_output(["git", "rev-parse", "HEAD"]),
        "git_dirty_files": len(status.splitlines()) if status else 0,
    }


def _notes(row: Row) -> str:
    notes = []
    startup, job = row.median_extra("startup_s"), row.median_extra("job_s")
    if startup is not None and job is not None:
        notes.append(f"start-up {startup:.1f} s + job {job:.1f} s")
    first, fraction = row.median_extra("first_shuffle_s"), row.median_extra("first_shuffle_fraction")
    job_wall = row.median_extra("job_wall_s")
    if first is not None and fraction is not None and job_wall is not None:
        notes.append(f"1st shuffle {first:.2f} s ({fraction:.0%} of job {job_wall:.1f} s)")
    after_maps = row.median_extra("shuffle_after_maps_s")
    if after_maps is not None:
        notes.append(f"shuffle after maps {after_maps:.2f} s")
    map_cpu, reduce_cpu = row.median_extra("map_cpu_s"), row.median_extra("reduce_cpu_s")
    if map_cpu is not None and reduce_cpu is not None:
        notes.append(f"task CPU: maps {map_cpu:.1f} s, reduces {reduce_cpu:.1f} s")
    scaled = [run for run in row.runs if run.scale != 1.0]
    if scaled:
        raw = sorted(run.wall_s for run in scaled)[len(scaled) // 2]
        notes.append(
            f"SCALED x{scaled[0].scale:.1f} from a {scaled[0].input_bytes / 1e6:.1f} MB slice (raw {raw:.2f} s)"
        )
    mismatches = [run.verification for run in row.runs if run.mismatch]
    if mismatches:
        notes.append(mismatches[0][:160])
    errors = [run.error for run in row.runs if run.error]
    if errors:
        notes.append(f"error: {errors[0][:100]}")
    return "; ".join(notes)


def _fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else format(value, pattern)


def table(rows: list[Row], skipped: list[dict[str, str]]) -> str:
    """The results table: one row per case x contender, then the contenders that did not run."""
    header = ("case", "contender", "wall s (min-max)", "CPU s", "peak RSS MB", "x hop", "output", "notes")
    lines = []
    for row in rows:
        wall = row.wall
        spread = f"{wall[1]:.2f} ({wall[0]:.2f}-{wall[2]:.2f})" if wall else "-"
        lines.append(
            (
                row.case,
                row.contender,
                spread,
                _fmt(row.median_cpu, ".2f"),
                _fmt(row.median_rss_mb, ".0f"),
                _fmt(row.ratio, ".2f"),
                row.status,
                _notes(row),
            )
        )
    widths = [max(len(str(line[i])) for line in [header, *lines]) for i in range(len(header) - 1)]
    out = []
    for line in [header, *lines]:
        out.append(
            "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=False)) + "  " + line[-1]
        )
        if line is header:
            out.append("-" * (sum(widths) + 2 * len(widths) + len(header[-1])))
    shown: dict[tuple[str, str, str], list[str]] = {}
    for skip in skipped:  # one line per workload, contender and reason
        shown.setdefault((skip["workload"], skip["contender"], skip["reason"]), []).append(skip["case"])
    for (workload, contender, reason), cases in shown.items():
        where = cases[0] if len(cases) == 1 else f"{workload} ({len(cases)} cases)"
        out.append(f"{where:<{widths[0]}}  {contender:<{widths[1]}}  not run: {reason}")
    return "\n".join(line.rstrip() for line in out)


def targets_block(targets: list[Target], beside_split: list[str]) -> str:
    """The verdicts, then the lines setting hop beside the bare split (none when it did not run)."""
    lines = ["Targets (medians of this run):", *("  " + target.line() for target in targets)]
    if beside_split:
        lines += [
            "",
            "Beside the same loop split over the workers with no engine (medians):",
            *("  " + line for line in beside_split),
        ]
    return "\n".join(lines)


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
