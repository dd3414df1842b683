"""Peak memory of reduce tasks against their budget, on a large input with no combiner (every record shuffled).

    python -m bench.reducer_memory [--size 1GB] [--reduce-memory 256MB] [--reducers 2] [--json PATH]
        [--vocabulary N] [--job PATH] [--snapshot-every F] [--no-check]

Runs a word count without combiner (tests/jobs/wordcount_nocombine.py, or ``--job``) on generated Zipf text on the
embedded cluster (2 workers), sampling every 50 ms the resident memory of each reduce slot's task process (identified
by its process name, its slot's ``.../rN``). Reports each reducer's peak, the budget, and the process's idle size
before the job (the fixed overhead of a task process), and checks the output against the counts of a plain Python
pass. ``--snapshot-every F`` runs it online (``--order random``) with snapshots every F of the input and reports how
long the reducers took to answer them (``seconds`` of each partition in ``_snapshot.json``): a snapshot must keep to
the budget as the final reduce does. ``--job jobs/wordcount.py`` measures an aggregate's reduce (``Sum``); ``--job
bench/jobs/next_words.py --no-check`` one with large states (``CountDistinct``; its output is not a word count).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import tempfile
import threading
import time
from pathlib import Path

import psutil

from bench.environment import REPO_ROOT, slot_kind
from hop.client import Client
from hop.gen.cli import parse_size
from hop.gen.text import generate_text
from hop.loader import load_job_file
from hop.local_cluster import LocalCluster
from hop.runner import build_spec, online_options, run_steps


def reduce_processes() -> list[psutil.Process]:
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            kind = slot_kind(process)
        except psutil.Error:
            continue
        if kind == "r":
            found.append(process)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("1GB"))
    parser.add_argument("--reduce-memory", type=parse_size, default=parse_size("256MB"))
    parser.add_argument("--reducers", type=int, default=2)
    parser.add_argument("--json", default=str(REPO_ROOT / "bench" / "results" / "reducer-memory.json"))
    parser.add_argument("--vocabulary", type=int, default=100_000, help="distinct words of the generated text")
    parser.add_argument("--job", default=str(REPO_ROOT / "tests" / "jobs" / "wordcount_nocombine.py"))
    parser.add_argument("--snapshot-every", type=float, default=None, help="online, with snapshots every F")
    parser.add_argument("--no-check", action="store_true", help="a job other than a word count: output not checked")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hop-reducer-memory-") as scratch:
        source = Path(scratch) / "words.txt"
        generate_text(source, args.size, seed=5, vocabulary=args.vocabulary)
        with LocalCluster(workers=2, map_slots=1, reduce_slots=-(-args.reducers // 2)) as cluster:
            reducers = reduce_processes()
            idle = {p.pid: p.memory_info().rss for p in reducers}
            peaks = dict(idle)
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    for process in reducers:
                        with contextlib.suppress(psutil.Error):
                            peaks[process.pid] = max(peaks[process.pid], process.memory_info().rss)
                    time.sleep(0.05)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            client = Client(cluster.address)
            job = load_job_file(args.job)
            online = (
                {}
                if args.snapshot_every is None
                else online_options(job, [str(source)], snapshot_every=args.snapshot_every, order="random")
            )
            spec = build_spec(
                job,
                [str(source)],
                str(Path(scratch) / "out"),
                num_reduces=args.reducers,
                reduce_memory=args.reduce_memory,
                options=online,
            )
            started = time.perf_counter()
            report = run_steps(client, spec, progress=False, timeout=3600)
            wall = time.perf_counter() - started
            stop.set()
            sampler.join(timeout=5)
            client.close()
        exact: bool | None = None
        if not args.no_check:
            expected: collections.Counter[str] = collections.Counter()
            with open(source, encoding="utf-8") as file:
                for line in file:
                    expected.update(line.split())
            got = {}
            for part in sorted((Path(scratch) / "out").glob("part-*")):
                for line in part.read_text(encoding="utf-8").splitlines():
                    key, value = line.split("\t")
                    got[json.loads(key)] = json.loads(value)
            exact = got == dict(expected)
        snapshot_seconds = [
            partition.get("seconds")
            for described in sorted((Path(scratch) / "out" / "_snapshots").glob("*/_snapshot.json"))
            for partition in json.loads(described.read_text(encoding="utf-8"))["partitions"]
        ]
    mb = 1 << 20
    summary = {
        "command": f"python -m bench.reducer_memory --size {args.size} --reduce-memory {args.reduce_memory} "
        f"--reducers {args.reducers} --vocabulary {args.vocabulary} --job {args.job}"
        + (f" --snapshot-every {args.snapshot_every}" if args.snapshot_every is not None else "")
        + (" --no-check" if args.no_check else ""),
        "input_bytes": args.size,
        "reduce_memory_budget": args.reduce_memory,
        "wall_s": round(wall, 2),
        "output_exact": exact,
        "reduce_input_records": report["counters"]["reduce_input_records"],
        "reduce_disk_bytes": report["counters"]["reduce_disk_bytes_peak"],
        "snapshot_seconds": snapshot_seconds,
        "reducers": [
            {"idle_rss_mb": round(idle[pid] / mb, 1), "peak_rss_mb": round(peaks[pid] / mb, 1)} for pid in sorted(peaks)
        ],
    }
    for number, reducer in enumerate(summary["reducers"]):
        print(
            f"reducer process {number}: idle {reducer['idle_rss_mb']} MB, peak {reducer['peak_rss_mb']} MB "
            f"(budget {args.reduce_memory / mb:.0f} MB)"
        )
    print(
        f"{args.size / 1e9:.2f} GB input, {summary['reduce_input_records']:,} records shuffled, "
        f"{wall:.1f} s, output {'not checked' if exact is None else 'exact' if exact else 'WRONG'}"
        + (f", snapshots answered in {snapshot_seconds} s" if snapshot_seconds else "")
    )
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
