"""Running a continuous job from the client: submit it, show windows as they close, stop it cleanly.

``run_stream`` returns when the job ends: its sources ended (a replay source), or it was stopped. Ctrl-C (or SIGTERM,
which the CLI turns into the same ``KeyboardInterrupt``; sent to the whole process group, the embedded cluster's
processes ignore it, ``hop.lifetime.ignore_stop_signals``) does not abandon the job: it asks the coordinator to stop
it (``hop stop`` does the same from elsewhere), so maps drain their open panes, reducers write the last windows and
checkpoint, and the run exits 0. A second Ctrl-C gives up waiting: the job is ended at once (:func:`end_now`), its
``_job.json`` saying it was interrupted, and :class:`EndedNow` raised, unless the job had ended meanwhile. Once the job
has ended, a Ctrl-C cuts nothing short: its last windows and summary are printed whole and the run ends as the job
did (only the materialized view's update, if any, is skipped).

While it runs, a :class:`hop.stream.compactor.Compactor` compacts the checkpoint deltas into the Parquet materialized
view in the background (``--view-interval``; off with ``--no-view``); the last compaction runs after the job ends.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hop.client import Client, CoordinatorUnavailable, JobLost, JobRejected
from hop.counters import print_user_counters
from hop.jobspec import JobSpec
from hop.lifetime import stop_signals_held, stop_signals_noted, stop_signals_taken
from hop.outputs import output_identity, output_removed, prepare_output, write_job_report
from hop.spark_gateway import java_problem
from hop.spark_master import unreachable_master
from hop.stream.sources import source_paths
from hop.stream.tracker import KEEP_WINDOWS
from hop.task_status import StatusFeed
from hop.wording import counted, share

WINDOWS_PER_REQUEST = 100
"""Windows ``hop run`` asks its coordinator for at a time (their rows come too); it asks again for the rest. It
asked once per status, so a stop writing more windows at once than this printed only the first of them."""

STOP_TIMEOUT = 120.0
"""How long a stopped job may take to drain before the client gives up waiting and ends it at once."""


def run_stream(
    client: Client,
    spec: JobSpec,
    *,
    progress: bool = True,
    timeout: float | None = None,
    view_interval: float | None = 30.0,
    spark_master: str = "local[1]",
    on_submitted: Callable[[str], None] | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    left_out_when_quiet: bool = True,
) -> dict[str, Any]:
    """Run a continuous job until it ends or is stopped; returns its final status (with ``report``).
    ``on_submitted(job_id)`` is called once the coordinator accepted it. A job stopped (Ctrl-C, ``timeout``) that
    has not drained within ``stop_timeout`` seconds is ended at once, as a second Ctrl-C ends it (its ``_job.json``
    says ``interrupted``), and ``TimeoutError`` raised. A job its coordinator failed as it was stopped (Ctrl-C,
    SIGTERM) raises :class:`~hop.client.JobLost`, as one lost to a restart does; another failure ``JobFailed``. A
    second Ctrl-C while it drains ends it at once and raises :class:`EndedNow` (a ``KeyboardInterrupt``), saying how;
    a ``KeyboardInterrupt`` raised otherwise (before it was stopped) has not ended the job. Without ``progress``
    (``--quiet``) it prints no window and no summary, but for the records its windows left out (late, bad), unless
    ``left_out_when_quiet`` is false, as ``hop run --quiet`` of a batch job still says its skipped records."""
    from hop.runner import JobFailed, LostWorkerNote  # hop.runner imports this module's neighbours; import late

    sources = (spec.options.get("stream") or {}).get("sources", [])
    # (Never clears those; nor anything yet: the coordinator clears it as it accepts the job, hop.runner._claiming.)
    prepare_output(spec.output, spec.overwrite, [*spec.inputs, *source_paths(sources)], clear=False)
    job_id = client.submit(spec)
    compactor = None
    no_java = None if view_interval is None else java_problem()
    if no_java is not None:
        # Said now, not after the job: every compaction would fail on it, and the run said so only as it ended.
        print(
            f"hop: warning: no materialized view will be made ({no_java}); --no-view runs without one, and "
            f"`hop view {spec.output} --compact` makes it later from the job's checkpoints",
            file=sys.stderr,
            flush=True,
        )
    elif view_interval is not None:  # (started once the old output is gone: it could compact that one's deltas)
        from hop.stream.compactor import Compactor

        unreachable = unreachable_master(spark_master)
        if unreachable is not None:
            # Said now too: every compaction fails on it, and the run said so only as it ended, a job of days
            # later. Not refused: the master may be started meanwhile, and the next compaction then runs.
            print(
                f"hop: warning: the materialized view is not updated while its master does not answer ({unreachable});"
                f" the job runs on, and compacts its checkpoints every --view-interval ({view_interval:g}s) once the "
                "master answers",
                file=sys.stderr,
                flush=True,
            )
        compactor = Compactor(spec.output, interval=view_interval, spark_master=spark_master)
        compactor.start()
    if on_submitted is not None:
        on_submitted(job_id)
    if progress:
        # The whole command, as it can be pasted: `hop stop` needs the coordinator (it printed one without it, which
        # `hop stop` refused as bad usage).
        print(
            f"hop: continuous job {job_id} running; stop it with Ctrl-C or "
            f"`hop stop {job_id} --coordinator {client.address}`",
            file=sys.stderr,
        )
    seen = 0
    told_gone: set[int | tuple[str, int]] = set()
    told_listening: dict[int, str] = {}
    lost_workers = LostWorkerNote("continuous job ", client.address)  # (its tasks restart elsewhere: say so)
    # Its tasks' status messages (Job.set_status), each once as it comes, as a batch run says them (--quiet too):
    # they run until the job stops, so these are what they say as they go.
    messages = StatusFeed()

    def show(status: dict[str, Any]) -> None:
        nonlocal seen
        for line in messages.lines(status):
            _say(line)
        if not progress:
            return
        for source in status.get("sources_listening", ()):
            if told_listening.get(source["index"]) != source["address"]:  # (a retry may have bound another port)
                told_listening[source["index"]] = source["address"]
                # (not of a URL that said it all: "source tcp:127.0.0.1:5600 listens at tcp:127.0.0.1:5600")
                if source["address"] != source["url"].split("?", 1)[0]:
                    _say(f"hop: source {source['url']} listens at {source['address']}")
        if (lost := lost_workers.line(status)) is not None:
            _say(lost)
        for gone in status.get("sources_gone", ()):
            if gone["index"] not in told_gone:
                told_gone.add(gone["index"])
                _say(_gone_warning(gone))
        for unstarted in status.get("sources_unstarted", ()):
            if ("unstarted", unstarted["index"]) not in told_gone:
                told_gone.add(("unstarted", unstarted["index"]))
                _say(
                    f"hop: warning: source {unstarted['index']} ({unstarted['url']}) had no slot when the job was "
                    "stopped and read nothing more (a cluster with fewer slots than the job's sources and "
                    "reducers, or workers that left): the job ended without draining it"
                )
        while True:  # (page by page: a stop writes a window per slide at once, thousands for a long window)
            listing = client.window_listing(job_id, after=seen, limit=WINDOWS_PER_REQUEST, rows=False)
            windows = listing["windows"]
            if not windows:
                return
            # Windows are numbered from 1 with no gap, so a first one past seen + 1 says the coordinator no longer
            # keeps those between (a stop of a long sliding window writes more than it keeps at once).
            dropped = windows[0]["seq"] - seen - 1
            if dropped > 0:
                seen = windows[0]["seq"] - 1
                _say(
                    f"hop: {counted(dropped, 'window')} written before these no longer listed (the coordinator keeps "
                    f"the newest {KEEP_WINDOWS:,}): each has its _window.json in {Path(spec.output) / 'windows'}"
                )
            for window in windows:
                seen = max(seen, window["seq"])
                _say(window_line(window))
            if listing["omitted"] <= max(dropped, 0):  # (the rest, past this answer's limit: ask again)
                return

    deadline = None if timeout is None else time.monotonic() + timeout
    status: dict[str, Any] | None = None
    ended_signals: list[int] = []
    """Ctrl-C or SIGTERM that came once the job had ended: they cut nothing short (its last lines are printed, the
    run exits as the job ended) but skip the view's update, as one during it does."""
    ended_now = False
    try:
        try:
            status = _wait(client, job_id, show, deadline, messages, ended_signals)
        except (KeyboardInterrupt, TimeoutError) as interrupted:
            if progress:
                print(f"hop: stopping {job_id}: draining open panes and writing the last windows", file=sys.stderr)
            client.stop(job_id)
            try:
                status = _wait(client, job_id, show, time.monotonic() + stop_timeout, messages, ended_signals)
            except TimeoutError:
                # Left draining, a job on the embedded cluster was killed with it and wrote no _job.json at all.
                ended, _, _ = _end_now(client, job_id, Path(spec.output))
                raise TimeoutError(
                    f"{job_id} did not drain within {stop_timeout:g}s, so it was ended{ended}"
                ) from interrupted
            except KeyboardInterrupt as second:
                # A second one: end the job now, unless it ended meanwhile (its end not seen yet here): it exited 130
                # saying the job "had ended (succeeded)", the windows since the last poll never printed.
                with stop_signals_noted([], stop_signals_taken()):  # (a third one changes nothing: it ends now)
                    ended, answered, had_ended = _end_now(
                        Client(client.address, timeout=END_NOW_TIMEOUT), job_id, Path(spec.output), close=True
                    )
                    if not had_ended:
                        ended_now = True
                        raise EndedNow(f"interrupted while stopping{ended}", answered) from second
                    ended_signals.append(getattr(second, "signum", signal.SIGINT))
                    status = _wait(client, job_id, show, None, messages, ended_signals)
    finally:
        if compactor is not None and status is not None and status.get("output_removed"):
            # The deltas went with OUT: there is nothing to update (what is under its name now is not the job's).
            compactor.abandon()
        elif compactor is not None and (ended_now or ended_signals):
            # Ended at once by a second Ctrl-C, or one came once it had ended: the view's update, which takes a
            # JVM's start and seconds of Spark, is skipped as a Ctrl-C during it skips it (a second Ctrl-C ran it
            # before ending the job, which drained meanwhile).
            compactor.abandon()
            if progress:
                print(
                    f"hop: the materialized view was not updated: interrupted; `hop view {spec.output} --compact` "
                    "updates it later",
                    file=sys.stderr,
                )
        elif compactor is not None:
            try:
                if progress:
                    print(
                        "hop: updating the materialized view with the last checkpoints (Spark; Ctrl-C skips it: "
                        f"`hop view {spec.output} --compact` does it later)",
                        file=sys.stderr,
                        flush=True,
                    )
                compactor.stop(final=True, timeout=300)
            except KeyboardInterrupt:
                # The job has ended: this Ctrl-C skips the view's update, as the line above offers (the compaction
                # and its JVM are ended, the deltas stay for the next one). It was reported as an interrupted run,
                # "error: interrupted while stopping", exit 130, though every window had been written. (Taken as
                # soon as the line is out, before stop() runs, too.)
                compactor.abandon()
                compactor.last_error = f"interrupted; `hop view {spec.output} --compact` updates it later"
            if compactor.last_error and progress:
                print(f"hop: the materialized view was not updated: {compactor.last_error}", file=sys.stderr)
    if status["state"] != "succeeded":
        if status.get("coordinator_stopped"):  # the cluster went, not the query: as for a restart (exit code 3)
            raise JobLost(f"job {job_id} failed: {status.get('error')}", status)
        raise JobFailed(status)
    report = status["report"]
    with stop_signals_noted(ended_signals, stop_signals_taken()):  # (the job has ended: its summary is said whole)
        _summarize(spec, job_id, report, progress, left_out_when_quiet)
    return dict(status)


def _summarize(spec: JobSpec, job_id: str, report: dict[str, Any], progress: bool, left_out_when_quiet: bool) -> None:
    """The run's last lines, for a continuous job that succeeded: the windows it wrote, what it left out of them,
    its user counters; without ``progress``, what it left out alone (if asked and any)."""
    if not progress:
        # (a quiet run said nothing of the records missing from its windows, where a batch run's --quiet says its
        # skipped ones: a script running quietly would never learn of them)
        left_out = _left_out(report, Path(spec.output))
        if left_out and left_out_when_quiet:
            print(f"hop: {job_id} ended{left_out}", file=sys.stderr)
        return
    folder, written = Path(spec.output) / "windows", report["continuous"]["windows_written"]
    # (it said "1 windows", and "0 windows in OUT/windows" of a folder that was not there)
    where = f"{counted(written, 'window')} in {folder}" if written else "no window written"
    keep = spec.options.get("stream", {}).get("keep_windows")
    if keep is not None and written > keep:  # (--keep-windows removed the older ones' folders)
        where = f"{counted(written, 'window')}, the newest {keep:,} kept in {folder}"
    print(f"hop: {job_id} ended: {where}{_left_out(report, Path(spec.output))}", file=sys.stderr)
    print_user_counters(report["counters"].get("user", {}))  # (under the summary, as a batch run prints them)


def _say(line: str) -> None:
    """Print ``line`` on stderr whole: a Ctrl-C or SIGTERM that comes as it is written (blocked on a terminal or a
    pipe that is not read) acts once it is out, a second one at once. One that cut a write short lost the line's end,
    and the next line ran into it."""
    with stop_signals_held(repeat_acts=True):
        print(line, file=sys.stderr, flush=True)


def window_line(window: dict[str, Any]) -> str:
    """The line ``hop run`` prints of a window as it is written (a row of ``Client.windows``). Its fidelity, the
    share of its cells present, reads 100% only when every cell is (0.999 read "100%", taken for complete)."""
    return (
        f"hop: window {window['label']}: {_records(window['records'])}, "
        f"{counted(window['output_records'], 'row')}, {window['reason']} (fidelity {share(window['fidelity'])})"
    )


END_NOW_TIMEOUT = 5.0
"""How long a second Ctrl-C waits for the coordinator to end the job and write its ``_job.json``."""


class EndedNow(KeyboardInterrupt):
    """A second Ctrl-C or SIGTERM ended the continuous job at once (:func:`run_stream` asked its coordinator, as
    :func:`end_now` does): ``line`` is the run's last line, ``answered`` whether the coordinator answered (if not,
    the job may run on, and an embedded cluster's own report is still to write)."""

    def __init__(self, line: str, answered: bool) -> None:
        super().__init__()
        self.line = line
        self.answered = answered


def end_now(address: str, job_id: str, output: Path) -> tuple[str, bool]:
    """End a continuous job at once, without draining (a second Ctrl-C): its coordinator writes ``_job.json`` with
    status ``interrupted``, the windows written so far and the counters known, before replying (unless ``OUT`` was
    removed or replaced meanwhile: then no report). Waits at most ``END_NOW_TIMEOUT`` seconds; returns the run's last
    line, which says what became of the report, and whether the coordinator answered (if not, the job may run on)."""
    ended, answered, _ = _end_now(Client(address, timeout=END_NOW_TIMEOUT), job_id, output, close=True)
    return f"interrupted while stopping{ended}", answered


def _end_now(client: Client, job_id: str, output: Path, close: bool = False) -> tuple[str, bool, bool]:
    """End a continuous job at once over ``client`` (see :func:`end_now`; ``close``: then close the client): what
    became of it and of its report, as the end of a sentence, whether the coordinator answered, and whether the job
    had ended already (it was not running when asked)."""
    try:
        reply = client.stop(job_id, now=True)
    except (CoordinatorUnavailable, JobRejected) as error:
        # A hung coordinator (stopped, swapping) that comes back may still act on the request it left unanswered,
        # or not (the job goes on, draining if the first stop reached it): either way it writes the report when
        # the job ends, and not before.
        return (
            (
                f"; {job_id} was not ended ({error}): it may still run there (`hop status {job_id} --coordinator "
                f"{client.address}`), and {output / '_job.json'} is written only once it ends"
            ),
            False,
            False,
        )
    finally:
        if close:
            client.close()
    if reply.get("output_removed"):  # (the coordinator wrote no report: what has OUT's name now is not the job's)
        how = "ended without draining its open panes" if reply.get("interrupted") else f"had ended ({reply['state']})"
        return (
            f": {job_id} {how}, and no {output / '_job.json'} was written: {output_removed(output)}",
            True,
            not reply.get("interrupted"),
        )
    if reply.get("interrupted"):
        return (
            (
                f": {job_id} ended without draining its open panes; "
                f"{output / '_job.json'} says so and counts the windows written"
            ),
            True,
            False,
        )
    return f"; {job_id} had ended ({reply['state']}): see {output / '_job.json'}", True, True


def report_unanswered(
    spec: JobSpec, job_id: str, address: str, accepted: tuple[int, int] | None = None, command: str = "hop run"
) -> str:
    """Write ``OUT/_job.json`` for a continuous job that its coordinator (at ``address``) did not end when
    :func:`end_now` asked (hung: stopped, swapping) and that can no longer end: every process of its embedded cluster
    was killed since, so no other report will come. Status ``interrupted``, with what this process knows (the windows in
    ``OUT/windows``, the options; no counters). A report the coordinator wrote before it was killed is kept.
    ``accepted``: the identity of ``OUT`` once the job was accepted (``hop.outputs.output_identity``); an ``OUT``
    removed or replaced since gets no report (what has its name now is not the job's). ``command``: the command
    writing it (``hop monitor`` ends its query so too), which the report names. Returns what became of the job, as
    the end of the run's last line."""
    output = Path(spec.output)
    unanswered = f"coordinator {address} did not end it within {END_NOW_TIMEOUT:g}s"
    if accepted is not None and output_identity(output) != accepted:
        return f"; its {unanswered}, so the embedded cluster was killed, and {output_removed(output)}"
    windows = sorted(path.parent.name for path in (output / "windows").glob("*/_window.json"))
    report = {
        "job_id": job_id,
        "name": spec.name,
        "status": "interrupted",
        "error": f"interrupted before it drained (a second Ctrl-C or SIGTERM on {command}); its {unanswered} and was "
        f"killed with the embedded cluster, so this report is {command}'s: no counters",
        "end": time.time(),
        "written_by": command,
        "continuous": {
            "windows_written": len(windows),
            "last_window": windows[-1] if windows else None,
            "stopped": True,
            "options": spec.options.get("stream"),
        },
    }
    try:
        if not write_job_report(output, report, replace=False):  # (the coordinator's own report wins)
            return f"; {job_id} had ended: see {output / '_job.json'}"
    except OSError as error:
        return f"; its {unanswered}, and {output / '_job.json'} could not be written: {error}"
    return (
        f"; its {unanswered}, so the embedded cluster was killed: {output / '_job.json'} says {job_id} was "
        f"interrupted and counts the {counted(len(windows), 'window')} written"
    )


def _left_out(report: dict[str, Any], output: Path) -> str:
    """What the run kept out of its windows, for its last line: late records (listed in ``OUT/_late/``, which a
    user would not otherwise know to look at), records shed under ``--max-latency`` (only counted: a run that shed
    half its input said nothing of it at the end) and bad records dropped; "" when none."""
    parts = []
    options = report["continuous"].get("options") or {}
    late = int(report["counters"].get("late_records", 0))
    if late:
        lateness = options.get("lateness", 0)
        parts.append(f"{_records(late)} late (past --lateness {lateness:g}s), listed in {output / '_late'}")
    shed = int(report["counters"].get("shed_records", 0))
    if shed:
        max_latency = options.get("max_latency")
        bound = f" (--max-latency {max_latency:g}s)" if isinstance(max_latency, (int, float)) else ""
        parts.append(f"{_records(shed)} shed to keep up{bound}, counted in no window (their panes show S)")
    bad = sum(report["continuous"].get("bad_records", {}).values())
    if bad:
        parts.append(f"{_records(bad)} dropped as bad (per source in _job.json: continuous.bad_records)")
    return "".join(f"; {part}" for part in parts)


def _records(count: int) -> str:
    return counted(count, "record")


def _gone_warning(gone: dict[str, Any]) -> str:
    """The line that says a source was given up (``JobState.gone_sources``): the query goes on without it."""
    return (
        f"hop: warning: source {gone['index']} ({gone['url']}) was given up after {gone['attempts']} failed "
        f"attempts (--max-attempts); the query goes on without it, and windows that wait for its panes report them "
        f"lost ('source failure'). Last error: {gone['error']}"
    )


def _wait(
    client: Client, job_id: str, show: Any, deadline: float | None, messages: StatusFeed, ended_signals: list[int]
) -> dict[str, Any]:
    """Follow the job until it ends (``deadline``: ``TimeoutError``), each status to ``show``: its ``task_status``
    brings the task status messages after those ``messages`` said. Once the job has ended, a Ctrl-C or SIGTERM is
    noted in ``ended_signals`` rather than cutting its last lines short."""
    while True:
        status = client.follow(job_id, status_after=messages.seen)
        if status["state"] != "running":
            # (a second Ctrl-C there printed part of the last windows and exited 130 as if it had ended the job)
            with stop_signals_noted(ended_signals, stop_signals_taken()):
                show(status)
            return status
        show(status)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still running")
        time.sleep(0.2)
