"""``hop monitor``: run the cluster-monitoring query continuously and serve its live dashboard.

    hop monitor [--coordinator tcp://HOST:PORT] [--workers N --racks R] [--window 10s --slide 2s] [-o OUT [--overwrite]]
                [--alert-average 20s --alert-baseline 120s --alert-after 10 --alert-stuck 120s]

Without ``--coordinator`` it starts an embedded cluster of ``--workers`` worker processes on this machine (each
shown as a host: it samples its own process tree) and prints the coordinator's address, so jobs can be submitted to
it (``hop submit ... --coordinator ADDRESS``) and watched. The monitoring job (``jobs/cluster_monitor.py``) gets one
source per worker's sample stream plus the coordinator's; its windows go to ``OUT/windows/``, alerts to
``OUT/_alerts.jsonl``, faults to ``OUT/_faults.jsonl`` (without ``-o``, OUT is a temporary directory, removed when
the monitor stops). The dashboard URL is printed; Ctrl-C stops everything. ``--quiet`` prints only the addresses
(the embedded cluster's coordinator, the dashboard), errors and warnings, as ``hop run --quiet`` drops its progress
lines. ``--duration`` is one deadline for the whole command (:class:`~monitoring.budget.Budget`): the waits
before the query starts take from it (given ``--coordinator``, the wait for that coordinator's first answer,
:func:`first_answer_within`, the client's 30 s without it; the wait for a first worker that publishes samples), and
the query runs for the rest. A second Ctrl-C ends the query at once; if the embedded cluster's coordinator does not
end it within 5 s (hung), the cluster is killed and ``OUT/_job.json`` written here, as ``hop run --source`` does.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hop.client import Client, CoordinatorGone, CoordinatorUnavailable, JobLost, JobRejected
from hop.gen.cli import coordinator_address, port_number, positive_int
from monitoring.budget import Budget

ROOT = Path(__file__).resolve().parent.parent
MONITOR_JOB = ROOT / "jobs" / "cluster_monitor.py"


STOP_TIMEOUT = 30.0
"""How long the stopped query may take to drain (its maps flush their open panes, its reducer writes the last
windows, 0.2 s as a rule) before it is ended at once: ``hop run``'s 120 s, after a ``--duration`` that promises an
end, was no bounded shut-down."""

WAITS_SAID_SECONDS = 1.0
"""Past this much of ``--duration`` spent before the query starts (waiting for the coordinator, for a worker), the
monitor says how long the query runs: the rest of the duration, not all of it."""

TEMPORARY_KEEP_WINDOWS = 1_800
"""Windows kept in the temporary output (no ``-o``), which nobody reads after the monitor stops: it grew by some
20 KB a window, 860 MB a day at the default 2 s slide."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from hop.given_options import Given
    from hop.stream.cli import _seconds, positive_seconds

    parser.add_argument(
        "--coordinator", type=coordinator_address, default=None, help="monitor this cluster instead of starting one"
    )
    # (Given: noted when given, so that --coordinator, whose cluster has workers of its own, refuses them)
    parser.add_argument(
        "--workers", action=Given, type=positive_int, default=2, help="workers of the embedded cluster (default 2)"
    )
    parser.add_argument(
        "--racks", action=Given, type=positive_int, default=2, help="rack labels to spread embedded workers over (2)"
    )
    parser.add_argument("--window", default="10s", help="window range of the monitoring query (10s)")
    parser.add_argument("--slide", default="2s", help="window slide (2s)")
    parser.add_argument(
        "--max-latency",
        type=positive_seconds,  # (0 was refused only once the embedded cluster had started)
        default=3.0,
        help="emit a window this long after its end even if a host is silent",
    )
    parser.add_argument(
        "--alert-average",
        metavar="DURATION",
        type=_seconds,
        default=None,
        help="the alert rule: the span of a host's moving average, compared to the others' (default 20s)",
    )
    parser.add_argument(
        "--alert-baseline",
        metavar="DURATION",
        type=_seconds,
        default=None,
        help="the alert rule: the span of the other hosts' moving average a host's is compared to (default 120s)",
    )
    parser.add_argument(
        "--alert-after",
        metavar="N",
        type=positive_int,
        default=None,
        help="the alert rule: windows in a row a host's average must be more than 2 standard deviations above the "
        "others' (a tentative alert in each) before it alerts (default 10, 20 s at the default slide)",
    )
    parser.add_argument(
        "--alert-stuck",
        metavar="DURATION",
        type=_seconds,
        default=None,
        help="the stuck-task alert: a running map or reduce attempt of a batch job that has not advanced (no records "
        "read, no groups reduced) for this long while its worker heartbeats (default 120s)",
    )
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        help="output directory, kept (default: a temporary one, removed when the monitor stops)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty -o directory (a previous monitor's output)"
    )
    parser.add_argument(
        "--keep-windows",
        type=positive_int,
        default=None,
        metavar="N",
        help="keep the folders of the newest N windows in OUT/windows, removing older ones as the query runs "
        f"(default: all with -o; {TEMPORARY_KEEP_WINDOWS:,} in the temporary output, an hour of the default slide)",
    )
    parser.add_argument("--port", type=port_number, default=0, help="dashboard port on 127.0.0.1 (default: a free one)")
    parser.add_argument(
        "--duration",
        type=positive_seconds,
        default=None,
        help="stop after this long from the command's start (default: Ctrl-C): the waits for the coordinator's "
        "first answer (else 30 s) and a first worker that publishes samples count, the query runs the rest",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print only the addresses (the embedded cluster's coordinator, the dashboard), errors and warnings: no "
        "output folder, window lines or summary",
    )


def wait_for_workers(client: Client, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The live workers with a sample stream, once at least ``count`` registered."""
    deadline = time.monotonic() + timeout
    while True:
        workers = [w for w in client.workers() if w["alive"] and w.get("samples")]
        if len(workers) >= count or time.monotonic() > deadline:
            return sorted(workers, key=lambda w: w["name"])
        time.sleep(0.1)


def first_answer_within(client: Client, budget: Budget) -> None:
    """The monitor's first request to a coordinator it was given, waiting at most what is left of ``budget`` (its
    ``--duration``, counted from the command's start) where that is shorter than the client's timeout, which it
    waited whatever the duration (``hop monitor --duration 3s`` at an address where nothing listens ended after
    30 s), as ``hop run --timeout`` bounds its own first request; later requests wait the client's timeout, as without
    a duration. Where no connection was made within it, :class:`CoordinatorUnavailable` names the address, what to
    check, and that the wait was the duration's."""
    waits = client.timeout
    # (rounded: the client's error says how long it waited, "within 2.9s", not "within 2.93712s")
    client.timeout = max(0.1, round(budget.left(waits), 1))
    deadline = time.monotonic() + client.timeout
    try:
        client.workers()  # (a read, answered at once by a coordinator that is there)
    except CoordinatorUnavailable as error:
        if client.connected or client.timeout >= waits or time.monotonic() < deadline:
            raise  # (an answer that did not come, the client's own wait, or an error at once: said as it is)
        raise CoordinatorUnavailable(
            f"{error}; hop monitor waits for it no longer than its --duration ({budget.duration:g}s): start the "
            "coordinator first, or give one that is starting a longer --duration"
        ) from None
    finally:
        client.timeout = waits


def monitoring_job(
    short_window: float | None = None,
    long_window: float | None = None,
    tentative_to_alert: int | None = None,
    stuck_after: float | None = None,
) -> type[Any]:
    """The monitoring job (``jobs/cluster_monitor.py``), with the alert rule's values that are given in place of its
    own (``hop monitor --alert-average/--alert-baseline/--alert-after/--alert-stuck``). Raises ValueError, saying
    why, for a rule that cannot hold (a host average longer than the baseline)."""
    from hop.loader import load_job_file

    job = load_job_file(str(MONITOR_JOB))
    with_alert_rule = sys.modules[job.__module__].with_alert_rule
    return with_alert_rule(job, short_window, long_window, tentative_to_alert, stuck_after)


def monitor_spec(
    client: Client,
    output: str,
    window: str,
    slide: str,
    max_latency: float,
    overwrite: bool = False,
    job: type[Any] | None = None,
    workers_wait: float = 30.0,
    duration: float | None = None,
    keep_windows: int | None = None,
) -> tuple[Any, list[str], list[str]]:
    """The monitoring job's spec for the workers the cluster has now, the names of its sources, and those workers'
    sample endpoints (for ``MonitorFeed``: the same workers, asked once). ``job``: the monitoring job to run
    (:func:`monitoring_job`; default its own alert rule). Waits up to ``workers_wait`` seconds for a first worker
    that publishes samples, then raises ``RuntimeError`` saying what to start; ``duration``: the ``--duration`` that
    ``workers_wait`` is what is left of (:class:`~monitoring.budget.Budget`), which the error then names;
    ``keep_windows``: the window folders the coordinator keeps (``hop run --keep-windows``), which the query's last
    line then names."""
    from hop.runner import build_spec
    from hop.stream.options import stream_options

    workers = wait_for_workers(client, 1, workers_wait)
    if not workers:
        # (a wait cut short by the duration's end said "waited 3s" of a 2.4 s wait: the rest went to other waits)
        why = f", until the end of its --duration {duration:g}s" if duration is not None else ""
        raise RuntimeError(
            f"the cluster has no live worker that publishes samples (waited {workers_wait:.2g}s{why}): start one "
            "(hop worker --coordinator ADDRESS, with a --sample-interval above 0, the default)"
        )
    events = client.cluster()["events"]
    sources = [f"zmq+sub:{w['samples']}" for w in workers] + [f"zmq+sub:{events}"]
    names = [w["name"] for w in workers] + ["coordinator"]
    options = stream_options(
        sources,
        window,
        slide,
        max_latency=max_latency,
        checkpoint_seconds=10.0,
        deltas=False,
        # (the feed alone pruned them, so the last line said "40 windows in OUT/windows" of a folder holding 2)
        keep_windows=keep_windows,
    )
    spec = build_spec(
        job or monitoring_job(),
        [],
        output,
        num_reduces=1,
        overwrite=overwrite,
        options={"stream": options, "max_attempts": 4},
    )
    return spec, names, [w["samples"] for w in workers]


def _query_options(args: argparse.Namespace) -> list[str]:
    """The options of ``args`` that shape the monitoring query (its windows, when it emits, its alert rules, the
    windows it keeps), as a command line gives them: what a monitor started again needs to watch as this one did.
    Durations are given as parsed (``20s``: ``--alert-average 0.3m`` comes back as ``18s``)."""
    options = ["--window", str(args.window), "--slide", str(args.slide)]
    durations = {
        "--max-latency": (args.max_latency, 3.0),
        "--alert-average": (args.alert_average, None),
        "--alert-baseline": (args.alert_baseline, None),
        "--alert-stuck": (args.alert_stuck, None),
    }
    for flag, (seconds, default) in durations.items():
        if seconds is not None and seconds != default:
            options += [flag, f"{seconds:g}s"]
    for flag, count in (("--alert-after", args.alert_after), ("--keep-windows", args.keep_windows)):
        if count is not None:
            options += [flag, str(count)]
    return options


def lost_with_its_coordinator(gone: CoordinatorGone, output: str, args: argparse.Namespace) -> str:
    """What to say when the coordinator of ``hop monitor --coordinator`` is gone (killed or crashed: nothing listens
    at its address; the monitor waited 30 s per request, then failed "did not answer"): the query went with it, what
    is kept, and the command that watches the cluster again once a coordinator runs there."""
    again = " ".join(["hop monitor --coordinator", gone.address, *_query_options(args)])
    return (
        f"the coordinator at {gone.address} is gone: its connection broke, and {gone.why}; the monitoring query "
        f"went with it. The windows so far stay in {Path(output) / 'windows'}, the alerts and faults in "
        f"{output}/_alerts.jsonl and _faults.jsonl. To watch the cluster again, start its coordinator again (hop "
        f"coordinator --bind {gone.address}; its workers register again), then `{again}` (with -o {output} "
        "--overwrite it starts that directory afresh)"
    )


def lost_to_a_restart(address: str, output: str, args: argparse.Namespace, stopped: bool = False) -> str:
    """What to say when the coordinator was restarted under the monitor (it dropped the monitoring query, as every
    job), or ``stopped`` by a signal (it ended the query as it stopped): what is kept, and the command that watches
    the restarted coordinator with the same query."""
    again = " ".join(["hop monitor --coordinator", address, *_query_options(args)])
    if stopped:
        what = f"the coordinator at {address} was stopped (Ctrl-C or SIGTERM) and ended the monitoring query"
        where = "once a coordinator runs there again"
    else:
        what = (
            f"the coordinator at {address} was restarted and no longer runs the monitoring query (a restarted "
            "coordinator gets its workers back, not its jobs)"
        )
        where = "on the restarted coordinator"
    return (
        f"{what}; the windows so far stay in {Path(output) / 'windows'}, the alerts and faults in "
        f"{output}/_alerts.jsonl and _faults.jsonl. To watch the cluster again, start the monitor {where}: "
        f"`{again}` (with -o {output} --overwrite it starts that directory afresh)"
    )


def run_monitor(args: argparse.Namespace) -> int:
    from hop.given_options import flags_given
    from hop.outputs import OutputError, check_output, claim_output
    from hop.stream.cli import warn_about_windows
    from hop.stream.options import window_spec

    budget = Budget(args.duration)  # (from the start: --duration bounds the whole command, its waits too)
    if args.coordinator is not None and (given := flags_given(args, ["workers", "racks"])):
        # (they were ignored: the cluster at --coordinator has its own workers and racks)
        one = len(given) == 1
        print(
            f"hop: error: {', '.join(given)} {'sizes' if one else 'size'} the embedded cluster; with --coordinator "
            f"the monitor watches that cluster's own workers: drop {'it' if one else 'them'}",
            file=sys.stderr,
        )
        return 2
    if args.overwrite and args.output is None:
        # (accepted and ignored: the default output is a new temporary directory, with nothing to replace)
        print(
            "hop: error: --overwrite replaces a non-empty -o directory, and without -o the monitor writes into a new "
            "temporary one: drop it, or give -o DIR",
            file=sys.stderr,
        )
        return 2
    try:
        # (bad windows failed the query only once its cluster had started)
        window = window_spec(args.window, args.slide)
    except ValueError as error:
        print(f"hop: error: --window {args.window} --slide {args.slide}: {error}", file=sys.stderr)
        return 2
    warn_about_windows(window, args.window, args.slide)  # as hop run --source does for the same windows
    try:
        job = monitoring_job(args.alert_average, args.alert_baseline, args.alert_after, args.alert_stuck)
    except ValueError as error:
        print(f"hop: error: {error}", file=sys.stderr)
        return 2
    release = None
    if args.output is not None:
        # Before a cluster starts, as for hop run: a non-empty -o needs --overwrite (every file in it was deleted
        # without a word, whatever it held), and another run writing it is refused.
        try:
            release = claim_output(args.output)
            check_output(args.output, args.overwrite)
        except OutputError as error:
            if release is not None:
                release()
            print(f"hop: error: {error}", file=sys.stderr)
            return 2
    output = args.output or tempfile.mkdtemp(prefix="hop-monitor-")
    code = 1
    try:
        code = _monitor(args, output, job, budget)
        return code
    finally:
        if release is not None:
            release()
        # The default output is a temporary directory: removed once the monitor stopped (it was left in /tmp after
        # every run, growing by some 10 KB a second of monitoring), kept after a failure once it holds something.
        stopped = code == 0 or code > 128  # (ended as asked: by its duration or a signal)
        if args.output is None and (stopped or not any(Path(output).glob("*"))):
            shutil.rmtree(output, ignore_errors=True)
            if stopped and not args.quiet:
                print(f"hop: removed the temporary monitoring output {output}", file=sys.stderr)


def _monitor(args: argparse.Namespace, output: str, job: type[Any], budget: Budget) -> int:
    """``run_monitor`` writing into ``output``; returns the exit code. ``budget``: ``--duration`` from the command's
    start, which every wait before the query takes from and the query runs the rest of."""
    from hop.local_cluster import ClusterStartError, LocalCluster
    from hop.outputs import output_identity
    from hop.stream.runner import EndedNow, end_now, report_unanswered, run_stream
    from monitoring.feed import MonitorFeed

    cluster = None
    submitted: list[str] = []
    accepted: list[tuple[Any, tuple[int, int] | None]] = []
    """The query's spec and OUT's identity once the coordinator accepted it, for a report written here
    (``report_unanswered``)."""
    try:
        address = args.coordinator
        if address is None:
            # The monitoring job's tasks run for as long as it does: a source per worker plus the coordinator's, and
            # its reducer. They get stream slots of their own, so the jobs being watched keep every map and reduce
            # slot (one map slot per worker, as ``hop run`` has).
            stream_slots = -(-(args.workers + 2) // args.workers)
            cluster = LocalCluster(
                workers=args.workers, map_slots=1, reduce_slots=2, racks=args.racks, stream_slots=stream_slots
            )
            cluster.start()
            address = cluster.address
            print(f"hop: embedded cluster's coordinator at {address}", file=sys.stderr, flush=True)
        client = Client(address)
        try:
            if cluster is not None:
                wait_for_workers(client, args.workers, budget.left(30.0))
            elif args.duration is not None:
                first_answer_within(client, budget)
            keep = args.keep_windows or (None if args.output else TEMPORARY_KEEP_WINDOWS)
            workers_wait = budget.left(30.0)  # (a monitor asked to run 3 s waits no longer, all waits counted)
            spec, names, endpoints = monitor_spec(
                client,
                output,
                args.window,
                args.slide,
                args.max_latency,
                overwrite=args.overwrite,
                job=job,
                workers_wait=workers_wait,
                keep_windows=keep,
                duration=args.duration if budget.bounds(30.0) else None,
            )
            feeds: list[MonitorFeed] = []

            def follow(job_id: str) -> None:
                submitted.append(job_id)
                accepted.append((spec, output_identity(output)))
                feed = MonitorFeed(
                    address, job_id, output, names, endpoints, keep_windows=keep, alert_rule=job.alert_rule()
                )
                feeds.append(feed)
                feed.start()

            with _dashboard(address, args.port, feeds):
                if not args.quiet:  # (--quiet prints the addresses alone: it printed this line too)
                    kept = "" if args.output else " (temporary, removed when the monitor stops: -o DIR keeps it)"
                    print(f"hop: monitoring output in {output}{kept}", file=sys.stderr, flush=True)
                    waited = budget.spent()
                    if args.duration is not None and waited >= WAITS_SAID_SECONDS:
                        print(
                            f"hop: the monitoring query runs for the {budget.left():.1f}s left of --duration "
                            f"{args.duration:g}s: starting took {waited:.1f}s of it",
                            file=sys.stderr,
                            flush=True,
                        )
                ending = False
                try:
                    run_stream(
                        client,
                        spec,
                        progress=not args.quiet,
                        timeout=None if args.duration is None else budget.left(),
                        view_interval=None,
                        on_submitted=follow,
                        left_out_when_quiet=False,  # (its own samples: nothing a user's output misses)
                        stop_timeout=STOP_TIMEOUT,
                    )
                except BaseException:
                    # (a second Ctrl-C, a coordinator that does not answer: nothing waits for a feed that may be
                    # stuck on it, 5 s each)
                    ending = True
                    raise
                finally:
                    for feed in feeds:
                        feed.stop(timeout=0.5 if ending else 5.0)
        finally:
            client.close()
    except JobRejected as error:
        if error.reason != "unknown_job" or args.coordinator is None:
            print(f"hop: error: {error}", file=sys.stderr)
            return 2
        # (a window request that reached the restarted coordinator before the status poll did)
        print(f"hop: error: {lost_to_a_restart(args.coordinator, output, args)}", file=sys.stderr)
        return 3
    except JobLost as error:
        stopped = bool(error.status and error.status.get("coordinator_stopped"))
        lost = error if args.coordinator is None else lost_to_a_restart(args.coordinator, output, args, stopped)
        print(f"hop: error: {lost}", file=sys.stderr)
        return 3
    except CoordinatorGone as error:  # (said at once, not after a 30 s timeout)
        gone = error if args.coordinator is None else lost_with_its_coordinator(error, output, args)
        print(f"hop: error: {gone}", file=sys.stderr)
        return error.exit_code
    except (CoordinatorUnavailable, ClusterStartError, TimeoutError) as error:
        said = str(error)
        if cluster is not None and isinstance(error, CoordinatorUnavailable):
            # The embedded coordinator did not answer for the client's 30 s (hung: stopped, swapping): asking it to
            # shut the cluster down waited 5 s and 10 s more for nothing (a --duration 6s monitor ended after 49 s).
            cluster.stop(grace=0)
            said += (
                f"; the embedded cluster was killed, and the windows written so far stay in {Path(output) / 'windows'}"
            )
        print(f"hop: error: {said}", file=sys.stderr)
        return 3
    except (RuntimeError, ValueError) as error:
        print(f"hop: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interruption:
        from hop.cli import _defer_interrupts, _interrupted_code

        _defer_interrupts()  # (what is left, ending the query and stopping the cluster, is bounded)
        if not submitted:
            # (it exited 130 without a word, 130 for SIGTERM too, where hop run says so and exits 143)
            print("hop: error: interrupted before the monitoring query started", file=sys.stderr)
        else:
            # A second Ctrl-C (run_stream took the first, to drain): the query ends now, and OUT/_job.json says so,
            # as for hop run --source (stopping the embedded cluster alone left no report). run_stream ended it
            # itself (EndedNow) unless the Ctrl-C came as it asked for the stop.
            if isinstance(interruption, EndedNow):
                ended, answered = interruption.line, interruption.answered
            else:
                ended, answered = end_now(address, submitted[0], Path(output))
            if cluster is not None and not answered:
                # The coordinator did not end the query (hung: stopped, swapping). Asking it to shut the cluster down
                # waited for nothing, 5 s and 10 s more, and said the query "may still run there" of a cluster then
                # killed: its processes are killed at once, and the report, which can come from nowhere else now,
                # is written here, as hop run --source does.
                cluster.stop(grace=0)
                spec_accepted, identity = accepted[0]
                ended = "interrupted while stopping" + report_unanswered(
                    spec_accepted, submitted[0], address, identity, command="hop monitor"
                )
            print(f"hop: error: {ended}", file=sys.stderr)
        return _interrupted_code()  # (130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP, as hop run)
    finally:
        if cluster is not None:
            cluster.stop()
    return 0


class _dashboard:
    """Serve the web view, with the monitor's pages fed by ``feed_box[0]`` once it exists."""

    def __init__(self, address: str, port: int, feed_box: list[Any]) -> None:
        from hop.web.server import WebServer

        self.server = WebServer(address, port, monitor=feed_box)

    def __enter__(self) -> Any:
        url = self.server.start()
        print(f"hop: cluster monitor dashboard at {url}monitor", file=sys.stderr, flush=True)
        return self.server

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def register(commands: Any) -> None:
    monitor = commands.add_parser("monitor", help="run the cluster monitor and serve its live dashboard")
    add_arguments(monitor)
    monitor.set_defaults(func=run_monitor)
