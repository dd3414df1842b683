"""An unmodified mrjob job on hop against mrjob's own local runner, on the same input.

    python -m bench.mrjob_compat [--size 20MB] [--repeats 3] [--json PATH]

Runs mrjob's shipped ``mr_word_freq_count.py`` with ``hop run --mrjob`` (2 workers) and with mrjob's local runner
(``-r local``, which runs its tasks in subprocesses), alternating, and checks the outputs are the same lines.
Prints median wall times and the ratio.
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
from hop.gen.text import generate_text


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=subprocess_env(), timeout=3600)
    if result.returncode:
        raise RuntimeError(f"{command[:4]} failed:\n{result.stderr[-2000:]}")
    return time.perf_counter() - started, result.stdout


def main() -> None:
    import mrjob

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("20MB"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(REPO_ROOT / "bench" / "results" / "mrjob-compat.json"))
    args = parser.parse_args()
    job = Path(mrjob.__file__).parent / "examples" / "mr_word_freq_count.py"
    runs: dict[str, list[float]] = {"hop --mrjob": [], "mrjob -r local": []}
    with tempfile.TemporaryDirectory(prefix="hop-mrjob-bench-") as scratch:
        folder = Path(scratch)
        source = folder / "words.txt"
        generate_text(source, args.size, seed=1)
        outputs: dict[str, list[str]] = {}
        for repeat in range(args.repeats):
            order = list(runs) if repeat % 2 == 0 else list(reversed(runs))
            for name in order:
                if name == "hop --mrjob":
                    out = folder / "hop-out"
                    seconds, _ = timed(
                        [sys.executable, "-m", "hop", "run", "--mrjob", str(job), str(source), "-o", str(out)]
                        + ["--overwrite", "--quiet", "--workers", "2"],
                        folder,
                    )
                    lines = sorted(line for p in sorted(out.glob("part-*")) for line in p.read_text().splitlines())
                else:
                    seconds, stdout = timed([sys.executable, str(job), "-r", "local", "--no-conf", str(source)], folder)
                    lines = sorted(line for line in stdout.splitlines() if line.strip())
                runs[name].append(round(seconds, 3))
                outputs[name] = lines
                print(f"{name:>15}: {seconds:.2f}s", flush=True)
        assert outputs["hop --mrjob"] == outputs["mrjob -r local"], "hop and mrjob disagree"
    summary: dict[str, Any] = {name: statistics.median(times) for name, times in runs.items()}
    summary["mrjob_local_over_hop"] = round(summary["mrjob -r local"] / summary["hop --mrjob"], 2)
    print(json.dumps(summary, indent=2))
    document = {
        "command": f"python -m bench.mrjob_compat --size {args.size >> 20}MB --repeats {args.repeats}",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "runs": runs,
        "summary": summary,
    }
    Path(args.json).write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
