"""A long-lived standalone cluster under many jobs: does anything grow with the number of jobs it ran?

    python -m bench.soak [--jobs 300] [--every 50] [--lanes 2] [--keep-jobs 100]

Starts ``hop coordinator`` (ipc, in a temporary directory) and two ``hop worker``s (two map and two reduce slots,
spill directories of their own), then runs ``--jobs`` jobs with ``hop submit``, ``--lanes`` at a time, cycling
through a mix: small word counts (pipelined and ``--blocking``), online ones (``--snapshot-every``), a two-step
job, a two-job pipeline, jobs failing in the map and in the reduce, jobs cancelled with ``hop stop`` and jobs whose
``hop submit`` is killed (SIGKILL) or interrupted (SIGINT). Every ``--every`` jobs it prints a row, taken once the
jobs in flight end: for the coordinator and each worker the resident memory (MiB), open file descriptors and
threads; the workers' task processes (count and summed MiB); files under the spill directories; the jobs the
coordinator holds (at most ``--keep-jobs`` ended ones, plus the running); output directories left with a
``_temporary``. Whatever keeps growing row after row, past the first ``--keep-jobs`` jobs, is a leak. Everything it
started is stopped and its directory removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from bench.environment import REPO_ROOT

JOB_ID = re.compile(r"job-\d{8}-\d{6}-\d{4,}")
MIX = ("wc", "online", "steps", "pipeline", "wc", "fail_map", "blocking", "stop", "fail_reduce", "kill", "interrupt")


def _hop(*args: str) -> list[str]:
    return [sys.executable, "-m", "hop", *args]


def _data(root: Path) -> None:
    rng = random.Random(1)
    words = [f"w{i}" for i in range(3000)]
    (root / "small").mkdir()
    for i in range(2):
        lines = (" ".join(rng.choices(words, k=12)) for _ in range(2000))
        (root / "small" / f"part{i}.txt").write_text("\n".join(lines) + "\n")
    (root / "big.txt").write_text("\n".join(" ".join(rng.choices(words, k=12)) for _ in range(40000)) + "\n")
    (root / "slow.txt").write_text("\n".join(" ".join(rng.choices(words, k=4)) for _ in range(12000)) + "\n")
    (root / "boom.txt").write_text("a b c\nd boom e\n" * 200 + "badword x\n")


def _job(kind: str, root: Path, number: int, address: str) -> None:
    """Run one job of ``kind`` to its end (or its client's)."""
    jobs, tests = REPO_ROOT / "jobs", REPO_ROOT / "tests" / "jobs"
    wordcount = str(jobs / "wordcount.py")
    args = {
        "wc": [wordcount, "small"],
        "blocking": [wordcount, "small", "--blocking"],
        "online": [wordcount, "big.txt", "--snapshot-every", "0.25", "--chunk-size", "64KB"],
        "steps": [str(tests / "two_steps.py"), "small"],
        "pipeline": [wordcount, str(jobs / "topk.py"), "small"],
        "fail_map": [str(tests / "failing_map.py"), "boom.txt"],
        "fail_reduce": [str(tests / "failing_reduce.py"), "boom.txt"],
    }.get(kind, [str(tests / "slow_map.py"), "slow.txt"])
    command = _hop("submit", *args, "-o", f"out/{number:05d}-{kind}", "--coordinator", address)
    log = root / f"client-{number}.err"
    with open(log, "wb") as err:
        client = subprocess.Popen(command, cwd=root, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    if kind in ("stop", "kill", "interrupt"):
        job_id, deadline = None, time.monotonic() + 30
        while job_id is None and client.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            found = JOB_ID.search(log.read_text(errors="replace"))
            job_id = found.group(0) if found else None
        time.sleep(random.uniform(0.5, 2.0))  # (a map or two under way)
        if kind == "stop" and job_id is not None:
            subprocess.run(_hop("stop", job_id, "--coordinator", address), capture_output=True, timeout=60)
        elif kind == "kill":
            client.kill()
        elif kind == "interrupt":
            client.send_signal(signal.SIGINT)
    try:
        client.wait(timeout=300)
    except subprocess.TimeoutExpired:
        client.kill()
        client.wait()
    log.unlink()


def _process(pid: int) -> tuple[int, int, int, int, int]:
    """(RSS MiB, fds, threads, task processes, their RSS MiB) of ``pid``."""
    process = psutil.Process(pid)
    children = process.children(recursive=True)
    rss = 0
    for child in children:
        with contextlib.suppress(psutil.Error):  # (a task process restarting)
            rss += child.memory_info().rss
    return process.memory_info().rss >> 20, process.num_fds(), process.num_threads(), len(children), rss >> 20


def _row(done: int, root: Path, pids: dict[str, int], address: str) -> str:
    status = subprocess.run(_hop("status", "--coordinator", address), capture_output=True, text=True, timeout=60)
    held = len(json.loads(status.stdout).get("jobs", [])) if status.returncode == 0 else -1
    cells = [f"{done:5d} {held:5d}"]
    for pid in pids.values():
        rss, fds, threads, children, children_rss = _process(pid)
        cells.append(f"{rss:4d}/{fds:3d}/{threads:2d}" + (f"/{children}/{children_rss:4d}" if children else ""))
    spills = sum(len(files) + len(dirs) for name in ("spill0", "spill1") for _, dirs, files in os.walk(root / name))
    # (a job whose client was killed may still run: only ended jobs, which wrote their report, count)
    leftovers = sum((out / "_temporary").exists() and (out / "_job.json").exists() for out in (root / "out").iterdir())
    return " | ".join([*cells, f"{spills:5d}", f"{leftovers:3d}"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--every", type=int, default=50, help="jobs between rows")
    parser.add_argument("--lanes", type=int, default=2, help="jobs run at once")
    parser.add_argument("--keep-jobs", type=int, default=100, help="the coordinator's --keep-jobs")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="hop-soak-"))
    started: list[subprocess.Popen[bytes]] = []
    try:
        _data(root)
        for name in ("out", "spill0", "spill1"):
            (root / name).mkdir()
        bind = f"ipc://{root}/coordinator"
        coordinator = subprocess.Popen(
            _hop("coordinator", "--bind", bind, "--keep-jobs", str(args.keep_jobs)), stdout=subprocess.PIPE
        )
        started.append(coordinator)
        assert coordinator.stdout is not None
        address = coordinator.stdout.readline().decode().strip()
        for i in range(2):
            worker = ["--name", f"soak-{i}", "--spill-dir", str(root / f"spill{i}"), "--sample-scope", "process"]
            started.append(
                subprocess.Popen(
                    _hop("worker", "--coordinator", address, *worker, "--map-slots", "2", "--reduce-slots", "2"),
                    stderr=subprocess.DEVNULL,
                )
            )
        pids = {"coordinator": coordinator.pid, "worker0": started[1].pid, "worker1": started[2].pid}
        print(
            "jobs  held | coordinator MiB/fds/threads | worker0 MiB/fds/threads/tasks/tasks MiB | worker1 ... "
            "| spill files | _temporary left",
            flush=True,
        )
        time.sleep(2)  # (the workers register)
        print(_row(0, root, pids, address), flush=True)
        numbers = itertools.count()
        kinds = itertools.cycle(MIX)
        lock = threading.Lock()

        def lane(left: Iterator[int]) -> None:
            while True:
                with lock:
                    if next(left, None) is None:
                        return
                    number, kind = next(numbers), next(kinds)
                _job(kind, root, number, address)

        for first in range(0, args.jobs, args.every):
            batch = min(args.every, args.jobs - first)
            left = iter(range(batch))
            lanes = [threading.Thread(target=lane, args=(left,)) for _ in range(args.lanes)]
            for thread in lanes:
                thread.start()
            for thread in lanes:
                thread.join()
            time.sleep(3)  # (the jobs of killed clients end)
            print(_row(first + batch, root, pids, address), flush=True)
        subprocess.run(_hop("shutdown", "--coordinator", address, "--force"), capture_output=True, timeout=60)
    finally:
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
