"""The embedded cluster's processes from one interpreter: a coordinator that forks its workers before it starts.

    python -m hop.cluster_launch --report-fd FD --bind ADDRESS [--heartbeat-timeout S] --workers N [worker options]
    python -m hop.cluster_launch --report-fd FD --config-fd FD2     (the options arrive later, as JSON on FD2)

Imports the coordinator's and the worker's code once, forks workers ``local-0`` ... ``local-{N-1}`` (each runs
``hop.worker.main``, the program ``hop worker`` runs), writes ``worker NAME PID`` for each and then
``coordinator ADDRESS`` to file descriptor FD, closes it, and runs the coordinator (``hop.coordinator.run``) in
this process. Three interpreters starting side by side took ~0.2 s of wall time and ~0.33 s of CPU on a 2-core
machine before the first job could start (interpreter, site and imports, three times); forks take milliseconds.
With ``--config-fd`` it imports first and then waits for the rest of its options (a JSON list of arguments, sent
by ``hop.prelaunch.Prelaunch.configure``), so its start-up overlaps the ``hop`` command's own; it exits quietly if
the pipe closes empty or the process that started it is gone.

Contract: this process reaps each worker as it ends (on SIGCHLD), so none lingers as a zombie that
``hop.forking.DescendantProcess`` would take for alive, and waits up to ``WORKERS_EXIT_TIMEOUT`` for the workers
once the coordinator stops (killing those still running): their CPU time then counts in this process's children's
usage, and so in the usage of whoever runs ``hop`` (``hop compare``, the benchmarks), as it did when they were
their own processes. Ignoring SIGCHLD instead would let the kernel reap them and drop that time. Each worker
restores the default SIGCHLD handling at once, since it waits for its own task processes. A worker's
``HOP_EMBEDDED_PARENT_PID`` is the coordinator's pid: it ends when the coordinator is gone, and the coordinator
when the process that launched it is (``hop.lifetime.orphaned``). Only ``hop.local_cluster`` runs this.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import time
from typing import Any

from hop import coordinator, worker
from hop.forking import ForkedProcess, fork_call, wait_or_kill
from hop.lifetime import PARENT_VARIABLE, ignore_terminal_interrupts, name_process, orphaned

__all__ = ["main"]

WORKERS_EXIT_TIMEOUT = 10.0
"""Seconds the coordinator's process waits for its workers after it told them to shut down."""

LIVENESS_CHECK_SECONDS = 1.0
"""How often a launcher waiting for its options checks that the process that started it is still there."""


def _run_worker(name: str, arguments: list[str], report_fd: int) -> int:
    """A forked worker: its own signal disposition, parent variable and process name, then the worker program."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.close(report_fd)  # else the launcher's reader would not see end-of-file if the coordinator died
    os.environ[PARENT_VARIABLE] = str(os.getppid())
    name_process(name)
    return worker.main(arguments)


def _wait_for_options(config_fd: int) -> list[str] | None:
    """The arguments sent on ``config_fd`` (read to end-of-file), or ``None`` when none came: the pipe closed empty
    or the process that started this one ended."""
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([config_fd], [], [], LIVENESS_CHECK_SECONDS)
            if not ready:
                if orphaned():
                    return None
                continue
            chunk = os.read(config_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(config_fd)
    if not chunks:
        return None
    arguments = json.loads(b"".join(chunks))
    if not isinstance(arguments, list) or not all(isinstance(argument, str) for argument in arguments):
        raise ValueError(f"expected a JSON list of strings on --config-fd, got {arguments!r:.200}")
    return arguments


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--config-fd", type=int)
    known, argv = early.parse_known_args(argv)
    if known.config_fd is not None:
        ignore_terminal_interrupts()  # Ctrl-C while waiting: the command that started this one ends it
        options = _wait_for_options(known.config_fd)
        if options is None:
            return 0
        argv += options
    parser = argparse.ArgumentParser(prog="python -m hop.cluster_launch", description=__doc__.splitlines()[0])
    parser.add_argument("--report-fd", type=int, required=True, help="where the workers' pids and the address go")
    parser.add_argument("--bind", required=True, help="the coordinator's address (the workers connect to it)")
    parser.add_argument("--heartbeat-timeout", type=float, default=coordinator.HEARTBEAT_TIMEOUT)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--map-slots", type=int, default=1)
    parser.add_argument("--reduce-slots", type=int, default=1)
    parser.add_argument("--stream-slots", type=int, default=0)
    parser.add_argument("--spill-dir", required=True)
    parser.add_argument("--racks", type=int, default=1, help="workers get rack labels rack-0... round robin")
    parser.add_argument("--sample-interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    report = os.fdopen(args.report_fd, "w")
    workers: list[ForkedProcess] = []

    def reap(_signal: int, _frame: Any) -> None:
        for process in workers:
            process.poll()  # waits for it if it ended

    signal.signal(signal.SIGCHLD, reap)  # before the first fork: a worker that dies at once is reaped too
    for i in range(args.workers):
        name = f"local-{i}"
        arguments = [
            "--coordinator",
            args.bind,
            "--name",
            name,
            "--map-slots",
            str(args.map_slots),
            "--reduce-slots",
            str(args.reduce_slots),
            "--stream-slots",
            str(args.stream_slots),
            "--spill-dir",
            args.spill_dir,
            "--rack",
            f"rack-{i % max(1, args.racks)}",
            "--sample-interval",
            str(args.sample_interval),
            "--sample-scope",
            "process",  # every worker shares this machine: each samples its own processes
        ]
        process = fork_call(_run_worker, name, arguments, args.report_fd)
        workers.append(process)
        report.write(f"worker {name} {process.pid}\n")
    report.flush()

    def announce(address: str) -> None:
        report.write(f"coordinator {address}\n")
        report.close()

    try:
        return coordinator.run(args.bind, args.heartbeat_timeout, announce)
    finally:
        wait_or_kill(workers, time.monotonic() + WORKERS_EXIT_TIMEOUT)


if __name__ == "__main__":
    code = main()
    # Once the coordinator has stopped and the workers are reaped, nothing here needs the interpreter's teardown
    # (no user code runs in this process, its sockets are closed, its files were written and closed), which took
    # ~15 ms that every `hop run` waited for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
