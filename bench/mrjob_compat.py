"""An unmodified mrjob job on hop against mrjob's own local runner, on the same input.

    python -m bench.mrjob_compat [--size 20MB] [--repeats 3] [--workers 2] [--json PATH] [--note PATH]

Generates Zipf text (``hop gen text FILE --size N``), then runs mrjob's shipped ``mr_word_freq_count.py`` with
``hop run --mrjob`` (an embedded cluster of ``--workers``, ``--split-size`` N / workers so that every worker maps, as
mrjob's local runner spreads its map tasks over the cores) and with mrjob's local runner (``-r local``, which runs
its tasks in subprocesses), alternating which goes first, and checks that both wrote the same lines. Prints the wall
times and the ratio; writes them as JSON (default ``bench/results/mrjob_compat.json``) and appends a line to a
markdown note (default ``bench/results/mrjob_compat.md``) with the command and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.environment import REPO_ROOT, subprocess_env
from hop.gen.cli import parse_size

RESULTS = REPO_ROOT / "bench" / "results"
HOP = "hop run --mrjob"
MRJOB = "mrjob -r local"
MRJOB_LOCKS = Path("/tmp/wrapper.lock.*")  # what mrjob's local runner leaves, one per run


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=subprocess_env(), timeout=3600)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command[:5])} ... failed:\n{result.stderr[-2000:]}")
    return time.perf_counter() - started, result.stdout


def run_once(name: str, job: Path, source: Path, folder: Path, hop_options: list[str]) -> tuple[float, list[str]]:
    """One timed run; returns its wall time and its output lines, sorted."""
    if name == HOP:
        out = folder / "hop-out"
        command = [sys.executable, "-m", "hop", "run", "--mrjob", str(job), str(source), "-o", str(out)]
        seconds, _ = timed([*command, "--overwrite", "--quiet", *hop_options], folder)
        return seconds, sorted(line for part in sorted(out.glob("part-*")) for line in part.read_text().splitlines())
    locks_before = set(MRJOB_LOCKS.parent.glob(MRJOB_LOCKS.name))
    try:
        seconds, stdout = timed([sys.executable, str(job), "-r", "local", "--no-conf", str(source)], folder)
    finally:
        # mrjob's setup wrapper locks a file of its own naming in /tmp whatever TMPDIR says, and never removes it.
        for lock in set(MRJOB_LOCKS.parent.glob(MRJOB_LOCKS.name)) - locks_before:
            lock.unlink(missing_ok=True)
    return seconds, sorted(line for line in stdout.splitlines() if line.strip())


def machine() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in _cpuinfo() if line.startswith("model name")),
        platform.processor() or "unknown",
    )
    return {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version(), "platform": platform.platform()}


def _cpuinfo() -> list[str]:
    try:
        return Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return []


def main(argv: list[str] | None = None) -> None:
    import mrjob

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--size", default="20MB", help="input size, as hop gen text takes it (default 20MB)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="hop's embedded cluster (default 2)")
    parser.add_argument("--json", type=Path, default=RESULTS / "mrjob_compat.json")
    parser.add_argument("--note", type=Path, default=RESULTS / "mrjob_compat.md")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    job = Path(mrjob.__file__).parent / "examples" / "mr_word_freq_count.py"
    runs: dict[str, list[float]] = {HOP: [], MRJOB: []}
    hop_options = ["--workers", str(args.workers), "--split-size", str(-(-size // args.workers))]
    with tempfile.TemporaryDirectory(prefix="hop-mrjob-bench-") as scratch:
        folder = Path(scratch)
        source = folder / "words.txt"
        timed([sys.executable, "-m", "hop", "gen", "text", str(source), "--size", str(size), "--seed", "1"], folder)
        outputs: dict[str, list[str]] = {}
        for repeat in range(args.repeats):
            for name in list(runs) if repeat % 2 == 0 else list(reversed(runs)):
                seconds, outputs[name] = run_once(name, job, source, folder, hop_options)
                runs[name].append(round(seconds, 3))
                print(f"{name:>16}: {seconds:6.2f} s", flush=True)
            if outputs[HOP] != outputs[MRJOB]:
                raise SystemExit("hop and mrjob wrote different lines")
        lines = len(outputs[HOP])
    medians = {name: statistics.median(times) for name, times in runs.items()}
    ratio = round(medians[MRJOB] / medians[HOP], 2)
    command = f"python -m bench.mrjob_compat --size {args.size} --repeats {args.repeats} --workers {args.workers}"
    print(f"median wall: hop {medians[HOP]:.2f} s, mrjob -r local {medians[MRJOB]:.2f} s: mrjob / hop = {ratio}x")
    document = {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "job": "mrjob/examples/mr_word_freq_count.py (unmodified)",
        "input": {"generator": f"hop gen text FILE --size {size} --seed 1", "bytes": size},
        "hop_options": hop_options,
        "output_lines": lines,
        "outputs_identical": True,
        "runs_wall_s": runs,
        "median_wall_s": medians,
        "mrjob_local_over_hop": ratio,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    _append_note(args.note, command, document)
    print(f"results in {args.json} and {args.note}")


def _append_note(note: Path, command: str, document: dict[str, Any]) -> None:
    if not note.exists():
        note.write_text(
            "# mrjob compatibility benchmark\n\n"
            "mrjob's own `mr_word_freq_count.py`, unmodified, on the same generated Zipf text: `hop run --mrjob` "
            "(embedded cluster) against mrjob's local runner (`-r local`); outputs checked identical. One line per "
            "run of `bench.mrjob_compat` (medians of interleaved repeats).\n\n"
        )
    box = document["machine"]
    medians = document["median_wall_s"]
    with note.open("a") as file:
        file.write(
            f"- {document['date']}: `{command}` on {box['cores']} cores ({box['cpu']}, Python {box['python']}): "
            f"hop --mrjob {medians[HOP]:.2f} s, mrjob -r local {medians[MRJOB]:.2f} s, "
            f"mrjob / hop = {document['mrjob_local_over_hop']}x, {document['output_lines']:,} identical lines\n"
        )


if __name__ == "__main__":
    main()
