"""The embedded cluster's processes from one interpreter: a coordinator that forks its workers before it starts.

    python -P -m hop.cluster_launch --config-fd FD1 --report-fd FD2   (hop.interpreter: hop's root on PYTHONPATH)

Imports the coordinator's and the worker's code once, then reads one line of JSON from FD1 (sent by
``hop.prelaunch.Prelaunch.configure``): ``{"arguments": [...], "environment": {...}}``, the arguments being
``--bind ADDRESS --workers N [--heartbeat-timeout S] [worker options]``. It takes that environment as its own (its
parent variable and hash seed stay), forks workers ``local-0`` ... ``local-{N-1}`` (each runs
``hop.worker.main``, the program ``hop worker`` runs), writes ``worker NAME PID`` for each and then
``coordinator ADDRESS`` to file descriptor FD, closes it, and runs the coordinator (``hop.coordinator.run``) in
this process. Three interpreters starting side by side took ~0.2 s of wall time and ~0.33 s of CPU on a 2-core
machine before the first job could start (interpreter, site and imports, three times); forks take milliseconds.
Waiting for its options after the imports lets the ``hop`` command start it before its own imports; it exits
quietly (status 0, nothing created) if FD1 ends before a line or the process that started it is gone.

Contract: this process reaps each worker as it ends (on SIGCHLD), so none lingers as a zombie that
``hop.forking.DescendantProcess`` would take for alive (and the coordinator loses an ended worker at once, not
after the heartbeat timeout), and waits up to ``WORKERS_EXIT_TIMEOUT`` for the workers
once the coordinator stops (killing those still running): their CPU time then counts in this process's children's
usage, and so in the usage of whoever runs ``hop`` (``hop compare``, the benchmarks), as it did when they were
their own processes. Ignoring SIGCHLD instead would let the kernel reap them and drop that time. Each worker
restores the default SIGCHLD handling at once, since it waits for its own task processes. A worker's
``HOP_EMBEDDED_PARENT_PID`` is the coordinator's pid: it ends when the coordinator is gone, and the coordinator
when the process that launched it is (``hop.lifetime.orphaned``), and then removes ``--spill-dir``, the directory
``hop.local_cluster`` made for this cluster, as its stop would have. Only ``hop.prelaunch`` starts this.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import signal
import sys
import time
from typing import Any

from hop.forking import ForkedProcess, fork_call, wait_or_kill
from hop.lifetime import PARENT_VARIABLE, STOP_SIGNALS, ignore_stop_signals, name_process, orphaned

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
    from hop import worker  # imported already, by main

    return worker.main(arguments)


def _wait_for_config(config_fd: int) -> dict[str, Any] | None:
    """The configuration line sent on ``config_fd``, decoded, or ``None`` if none will come: the pipe ended before
    a whole line or the process that started this one is gone. Reads up to the first newline only: a copy of the
    pipe's write end (in a process forked from the command meanwhile) must not keep this waiting."""
    chunks: list[bytes] = []
    try:
        while not chunks or b"\n" not in chunks[-1]:
            ready, _, _ = select.select([config_fd], [], [], LIVENESS_CHECK_SECONDS)
            if not ready:
                if orphaned():
                    return None
                continue
            chunk = os.read(config_fd, 65536)
            if not chunk:
                return None
            chunks.append(chunk)
    finally:
        os.close(config_fd)
    config = json.loads(b"".join(chunks).split(b"\n", 1)[0])
    arguments = config.get("arguments") if isinstance(config, dict) else None
    environment = config.get("environment") if isinstance(config, dict) else None
    if not (
        isinstance(arguments, list)
        and all(isinstance(argument, str) for argument in arguments)
        and isinstance(environment, dict)
        and all(isinstance(name, str) and isinstance(value, str) for name, value in environment.items())
    ):
        expected = "{'arguments': [str], 'environment': {str: str}}"
        raise ValueError(f"expected {expected} on --config-fd, got {config!r:.200}")
    return config


def _take_environment(environment: dict[str, str]) -> None:
    """Make ``environment`` this process's (what its workers and their task processes inherit), keeping the
    variables it was started with for the cluster: its parent's pid and the hash seed."""
    kept = {name: os.environ[name] for name in (PARENT_VARIABLE, "PYTHONHASHSEED") if name in os.environ}
    os.environ.clear()
    os.environ.update({**environment, **kept})


def main(argv: list[str] | None = None) -> int:
    # Ctrl-C or a SIGTERM to the command's process group reaches this process too: the command handles it and ends
    # this one (the workers forked below inherit this).
    ignore_stop_signals()
    # Started with them blocked as well as ignored (hop.prelaunch): unblocked for this process and its workers, whose
    # task processes would otherwise pass the blocked mask on to any command a job runs.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    early = argparse.ArgumentParser(prog="python -m hop.cluster_launch", description=__doc__.splitlines()[0])
    early.add_argument("--config-fd", type=int, required=True, help="where the options come from, one JSON line")
    early.add_argument("--report-fd", type=int, required=True, help="where the workers' pids and the address go")
    fds = early.parse_args(argv)
    from hop import coordinator, worker  # noqa: F401  (the imports the command's own start-up overlaps)

    config = _wait_for_config(fds.config_fd)
    if config is None:
        return 0
    _take_environment(config["environment"])
    parser = argparse.ArgumentParser(prog="python -m hop.cluster_launch (options on --config-fd)")
    parser.add_argument("--bind", required=True, help="the coordinator's address (the workers connect to it)")
    parser.add_argument("--heartbeat-timeout", type=float, default=coordinator.HEARTBEAT_TIMEOUT)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--map-slots", type=int, default=1)
    parser.add_argument("--reduce-slots", type=int, default=1)
    parser.add_argument("--stream-slots", type=int, default=0)
    parser.add_argument("--spill-dir", required=True)
    parser.add_argument("--racks", type=int, default=1, help="workers get rack labels rack-0... round robin")
    parser.add_argument("--sample-interval", type=float, default=1.0)
    args = parser.parse_args(config["arguments"])
    report = os.fdopen(fds.report_fd, "w")
    workers: list[ForkedProcess] = []
    lines: list[str] = []  # the report: each worker's name and pid

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
        workers.append(fork_call(_run_worker, name, arguments, fds.report_fd))
        lines.append(f"worker {name} {workers[-1].pid}\n")
    try:
        report.writelines(lines)
        report.flush()
    except BrokenPipeError:
        # The command that started this launcher is gone (interrupted as the cluster started): nobody will use
        # these workers. End them, quietly (closing the report would flush into the broken pipe again).
        with contextlib.suppress(BrokenPipeError):
            report.close()
        wait_or_kill(workers, time.monotonic())
        return 0

    def announce(address: str) -> None:
        with contextlib.suppress(BrokenPipeError):  # the command is gone: the coordinator notices it is orphaned
            report.write(f"coordinator {address}\n")
            report.close()

    try:

        def ended() -> set[int]:
            """The workers that have ended: ``reap`` set their return codes as they did."""
            return {process.pid for process in workers if process.returncode is not None}

        return coordinator.run(args.bind, args.heartbeat_timeout, announce, ended_workers=ended)
    finally:
        wait_or_kill(workers, time.monotonic() + WORKERS_EXIT_TIMEOUT)
        if orphaned():
            # The command died without stopping the cluster (SIGKILL): nobody else will remove the directory it
            # made for this cluster's socket and spill files (hop.local_cluster.LocalCluster.stop would have).
            shutil.rmtree(args.spill_dir, ignore_errors=True)


if __name__ == "__main__":
    code = main()
    # Once the coordinator has stopped and the workers are reaped, nothing here needs the interpreter's teardown
    # (no user code runs in this process, its sockets are closed, its files were written and closed), which took
    # ~15 ms that every `hop run` waited for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
