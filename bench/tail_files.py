"""What a ``tail:`` source over a directory of many files costs: its backlog, its idle CPU, its latency.

    python -m bench.tail_files [--files 200,2000] [--idle 4] [--against REV]

For each count, a fresh directory of that many one-line files (about 50 bytes each) is tailed in a process of its
own, polled as the stream map polls it (``poll(4096, 0.05)``). Printed: the time to read the backlog (every line
once); the CPU share of a core while idle, measured over ``--idle`` seconds from 2 s after the backlog (the files
have backed off then); and how long after a line is appended to one of the idle files it is read. ``--against
REV`` runs the same with the code of that git revision (exported to a temporary directory), interleaved, for a
side-by-side comparison on the same machine state.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.environment import REPO_ROOT

SETTLE = 2.0  # seconds idle before the idle CPU is measured


def measure(count: int, idle: float) -> str:
    """One run, in this process, with the ``hop`` this process imports; a line of figures."""
    from hop.stream.sources import open_source

    directory = Path(tempfile.mkdtemp(prefix="bench-tail-"))
    try:
        for i in range(count):
            (directory / f"f{i:05d}.log").write_text(f"2026-11-27T15:00:00 host{i} started worker {i}\n")
        source = open_source(f"tail:{directory}")
        started, read = time.monotonic(), 0
        while read < count and time.monotonic() - started < 300:
            read += len(source.poll(4096, 0.05))
        backlog = time.monotonic() - started
        assert read == count, f"{read} lines of {count}"
        while time.monotonic() - started < backlog + SETTLE:
            assert source.poll(4096, 0.05) == []
        wall, cpu = time.monotonic(), time.process_time()
        while time.monotonic() - wall < idle:
            assert source.poll(4096, 0.05) == []
        share = (time.process_time() - cpu) / (time.monotonic() - wall)
        with open(directory / f"f{count // 2:05d}.log", "a", encoding="utf-8") as file:
            file.write("late line\n")
        appended = time.monotonic()
        while not source.poll(4096, 0.05) and time.monotonic() - appended < 10:
            pass
        latency = time.monotonic() - appended
        source.close()
    finally:
        shutil.rmtree(directory)
    late = f"late_line_read_after={latency * 1000:5.0f}ms"
    return f"files={count:5d} backlog={backlog:6.2f}s idle_cpu={share:6.1%} {late}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", default="200,2000", help="comma-separated file counts")
    parser.add_argument("--idle", type=float, default=4.0, help="seconds of idle polling measured")
    parser.add_argument("--against", help="a git revision to measure beside the working tree")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # one run, in this process
    args = parser.parse_args()
    if args.measure is not None:
        print(measure(args.measure, args.idle), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="bench-tail-code-") as exported, tempfile.TemporaryDirectory() as empty:
        versions = {"this tree": REPO_ROOT}
        if args.against:
            archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", args.against, "hop", "shuffle"],
                                     check=True, capture_output=True).stdout  # fmt: skip
            subprocess.run(["tar", "-x", "-C", exported], input=archive, check=True)
            versions = {args.against: Path(exported), **versions}
        for count in (int(n) for n in args.files.split(",")):
            for label, code in versions.items():
                # The child runs in an empty directory (``-m`` puts it first on the path): its hop is the version's.
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(code), str(REPO_ROOT)]))}
                command = [sys.executable, "-m", "bench.tail_files", "--measure", str(count), "--idle", str(args.idle)]
                result = subprocess.run(command, env=env, cwd=empty, check=True, capture_output=True, text=True,
                                        timeout=600)  # fmt: skip
                print(f"{label:>12}  {result.stdout.strip()}", flush=True)


if __name__ == "__main__":
    main()
