"""``hop coordinator``: the coordinator process's command line, and :func:`run`, which the embedded cluster's
launcher (``hop.cluster_launch``) calls too."""

from __future__ import annotations

import contextlib
import errno
import re
import sys
import urllib.parse
from collections.abc import Callable, Collection

import zmq

from hop.coordinator.jobs import KEEP_JOBS
from hop.coordinator.server import Coordinator
from hop.coordinator.workers import HEARTBEAT_TIMEOUT
from hop.gen.cli import DEFAULT_BIND, DEFAULT_BIND_HELP
from hop.lifetime import embedded, ignore_stop_signals, stop_signals_noted, stop_signals_taken
from monitoring.events import advertised_host


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="hop coordinator")
    parser.add_argument("--bind", default=DEFAULT_BIND, help=f"ZeroMQ address to bind ({DEFAULT_BIND_HELP})")
    parser.add_argument("--heartbeat-timeout", type=float, default=HEARTBEAT_TIMEOUT)
    parser.add_argument("--keep-jobs", type=int, default=KEEP_JOBS, help="finished jobs kept in memory (at least 1)")
    args = parser.parse_args(argv)
    return run(args.bind, args.heartbeat_timeout, lambda address: print(address, flush=True), args.keep_jobs)


def _name_the_reachable_address(address: str) -> None:
    """A coordinator bound on every interface (``tcp://0.0.0.0:PORT``) announces that address, which other hosts
    cannot connect to: say on stderr the one they use, by this host's name, as its workers' samples name it."""
    parsed = urllib.parse.urlsplit(address)
    if parsed.scheme != "tcp" or parsed.hostname not in ("0.0.0.0", "::", "*"):
        return
    reachable = f"tcp://{advertised_host('*')}:{parsed.port}"
    print(
        f"hop coordinator: listening on every interface; workers and clients connect to {reachable} (this host's "
        f"name), e.g. hop worker --coordinator {reachable}",
        file=sys.stderr,
        flush=True,
    )


def _bind_failure(error: zmq.ZMQError) -> str:
    """Why a bind failed and what to do: ZeroMQ's message alone ("Address already in use (addr=...)") named the
    cause, not the fix."""
    what = re.sub(r" \(addr='[^']*'\)$", "", str(error.strerror)).rstrip(".")  # (the address is named already)
    if error.errno == errno.EADDRINUSE:
        return (
            f"{what}: another process listens there (a coordinator already running?); stop it, or give another port "
            "(tcp://HOST:* picks a free one)"
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{what}: the host is not an address of this machine; give one of its own, or 0.0.0.0 for every one"
    if error.errno in (errno.ENOENT, errno.EACCES, errno.ENOTDIR):
        return f"{what}; give an ipc:// path in an existing directory this user can write"
    return what


def run(
    bind: str,
    heartbeat_timeout: float,
    announce: Callable[[str], None],
    keep_jobs: int = KEEP_JOBS,
    ended_workers: Callable[[], Collection[int]] = tuple,
) -> int:
    """Bind, tell ``announce`` the address clients and workers reach, and serve until shut down (or orphaned).
    ``ended_workers``: the pids of this process's forked workers that have ended (an embedded cluster's launcher
    knows them), each lost at once rather than after the heartbeat timeout."""
    # A standalone coordinator stopped (Ctrl-C, SIGTERM) while it starts ends as one stopped while it serves: exit 0,
    # its ipc:// socket file removed. The signal interrupted its start-up before: exit 143 and, once bound, the socket
    # file left behind. So signals that come until it serves are noted, and it stops as soon as it has started.
    stops = () if ignore_stop_signals() else stop_signals_taken()
    came: list[int] = []
    with stop_signals_noted(came, stops):
        try:
            coordinator = Coordinator(bind, heartbeat_timeout, keep_jobs, ended_workers)
        except zmq.ZMQError as error:  # the port is taken, the host is not this machine's, the ipc path not writable
            print(
                f"hop coordinator: error: cannot listen on {bind}: {_bind_failure(error)}", file=sys.stderr, flush=True
            )
            return 2
        announce(coordinator.address)
        if not embedded():
            _name_the_reachable_address(coordinator.address)
        if came:
            coordinator.running = False  # (serve only cleans up)
    with contextlib.suppress(KeyboardInterrupt):
        coordinator.serve()
    return 0
