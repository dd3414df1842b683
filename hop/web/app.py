"""The web view: an aiohttp application serving the page, a JSON API and server-sent events.

Routes (every error is a JSON ``{"error": message}`` with a 4xx/5xx status, never a traceback page; NaN and
infinities are ``null`` in every reply, since a browser's ``JSON.parse`` rejects them, but in a row of a ``rows`` list
(a job's value or estimate, which its files write ``NaN``/``Infinity``/``-Infinity``) where they are that text, and
the row lists where in ``non_finite`` (paths as ``big_ints``'s, below), so that a page shows them as the files do
rather than as no value at all; and an int beyond
``±MAX_SAFE_INTEGER`` (2**53 - 1: a window or pane number of a stamp far in the future, a large sum) is its decimal
string, since ``JSON.parse`` would round it to the nearest double; a row of a ``rows`` list that holds such ints, in
its key or value or anywhere inside them, lists where in ``big_ints``: each a path of keys and list indexes from the
row, e.g. ``[["value"], ["key", 1]]``, so that a page tells them from strings; a path no route serves gets a 404
naming every API route; a query parameter a route does not take, given twice or with a value it does not accept gets a
``400`` naming it and what the route takes: ``QUERY_PARAMETERS``):

- ``GET /``: the page (``static/index.html``, its link to the monitor's dashboard shown when there is one;
  scripts and the vendored chart library under ``/static/``; a file not there is a JSON 404 naming it).
- ``GET /api/workers``: the cluster's workers, by name (name, host and host label, rack, alive, slots and free
  slots per pool), as ``hop status`` lists them.
- ``GET /api/jobs``: every job (id, name, ``step`` from 0 of ``num_steps``, a step of a run of several its
  ``run_step`` from 1 of ``run_steps``, state, progress, output directory,
  ``output_deleted`` and ``output_kept`` for an earlier step's output the run deleted, as ``hop status``; the
  number of complete snapshots, those written out; for a continuous job ``continuous: true``, the number of
  ``windows`` written so far and ``stopping``).
- ``GET /api/jobs/{job_id}``: one job with the state and progress of every task.
- ``GET /api/jobs/{job_id}/snapshots?after=N``: its snapshots with ``seq > N`` (``N >= -1``; default -1: all), with
  their rows: the largest estimates, all kept ones for the latest, a hundred per partition of earlier ones
  (``hop.online.tracker``).
- ``GET /api/jobs/{job_id}/results``: the final output's largest rows (``source.RESULT_ROWS``, ranked as a
  snapshot's: numbers first, largest first; of a job stopped early, ``approximate``, the rows of the snapshot it
  stopped at, with their estimates and intervals), ``total`` and ``truncated`` (``409`` while the job runs, once it
  failed, and for a continuous job, whose results are its windows; ``410`` once its output directory is gone: a
  pipeline's earlier step, unless run with ``--keep-intermediate``, whose kept copy is read).
- ``GET /api/jobs/{job_id}/windows?after=N&limit=M``: a continuous job's windows with ``seq > N`` (``N >= 0``), at
  most ``M`` (default 100: the newest, or the first after ``N``; ``0``: all the coordinator keeps), oldest first:
  bounds, reason, records, fidelity, C2 scoreboard, per-partition reports and the first rows as ``{"key", "value"}``
  (``truncated`` when the window has more); ``404`` for a batch job.
- ``POST /api/jobs/{job_id}/stop``: as ``hop stop``: ask a continuous job to stop (it drains and writes its last
  windows), cancel a batch job (it fails, its error saying it was cancelled from the web view; no ``part-*``, no
  ``_SUCCESS``; its snapshots so far stay in ``OUT/_snapshots/``); ``404`` for an
  unknown job, ``409`` for one that already ended; ``403`` when another site's page sends it.
- ``GET /api/events?job=ID&after=SEQ``: server-sent events pushing ``workers`` and ``jobs`` (each list, when it
  changes), and for ``job``: ``job`` (tasks and progress), ``snapshot`` (each new complete snapshot, in order) and
  ``results`` (once it succeeded: as the route above, or ``{"job_id", "gone": why}`` for an output deleted since);
  for a continuous job ``window`` (each window as it closes, the newest ``WINDOW_BACKLOG`` first) instead of
  snapshots and results. A snapshot's or window's event id is its ``seq``, so a reconnecting page
  (``Last-Event-ID``, or ``after``: the page's own reconnection) resumes after the last one it got: nothing twice,
  nothing skipped. An ``error`` event
  (``{"error"}``) ends the stream when the coordinator stops answering, is gone (it stopped: said at once, as every
  route's ``503`` then says it, ``hop.client.CoordinatorGone``) or no longer knows the job (retired by
  ``--keep-jobs``, or the coordinator was restarted); a stream asked for then is refused (``503``, ``404``).

With the cluster monitor (``make_app(source, monitor=box)``, ``hop monitor``; ``box`` is a list that holds the
``monitoring.feed.MonitorFeed`` once the monitoring job is submitted, empty until then; every route but the page
answers ``503`` while it is empty):

- ``GET /monitor``: the dashboard (``static/monitor.html``, ``monitor.js``, ``monitor.css``).
- ``GET /api/monitor/state``: the dashboard's state, ``MonitorFeed.snapshot()`` (latest window as a cluster/rack/host
  tree, jobs, alerts, faults, scoreboard, the latest raw sample per worker). Hosts are named by host label
  throughout: ``missing_hosts`` lists the labels of the hosts silent in the latest window, ``missing_workers`` their
  workers (``[{"worker", "host"}]``; the scoreboard's rows are by worker, ``scoreboard.hosts`` their labels), and
  ``host_labels`` maps every worker to its label (``monitoring.state``); ``alert_rule`` is the rule the monitoring job
  runs (``ClusterMonitor.alert_rule()``; null when the feed was not told it); ``unwatched_workers`` names the live
  workers that registered after the monitoring query started, which none of its windows has (the page says so);
  ``waiting_tasks`` the query's tasks that have no slot (``[{"task", "stream"}]``, ``monitoring.waiting``).
- ``GET /api/monitor/series?level=host|rack|cluster&name=NAME&metric=METRIC``: one metric's series over the last
  windows, ``{"level", "name", "metric", "points": [{"t", "mean", "max", "p95"}]}`` (``t`` = the window's end; the
  cluster's name is ``""``); ``400`` for a bad level, no metric or no name of a rack or host, ``404`` for a series
  the monitor does not have.
- ``GET /api/monitor/events``: server-sent events: ``state`` (the whole state, on connect and after every new
  window, fault or unwatched worker; the event id is the feed's version) and ``waiting`` (while the monitoring job
  is not submitted yet).
- ``GET /metrics``: Prometheus text exposition (``monitoring.prometheus.render``) of the latest raw samples, the
  latest window's statistics, the alerts and stuck tasks, running jobs' progress and failed attempts, faults per
  kind, missing hosts and the coordinator's view of every worker; a worker whose latest sample is stale is
  ``hop_worker_up 0`` with no metric gauges, and is left out once it is older still.

Without the monitor these routes do not exist (``404``).

When the server stops (``on_shutdown``: ``hop web`` interrupted, ``hop run --web`` done), every open event stream
ends at once (or, in a round of questions to the coordinator, once they are answered and its events sent), cleanly:
its events whole, then the response's end, which a page's reconnection sees as before; a request in flight is
answered in full.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from hop.client import CoordinatorUnavailable
from hop.spilldirs import kept_step_output
from hop.web.source import CoordinatorSource, UnknownJob, read_results

if TYPE_CHECKING:
    from monitoring.feed import MonitorFeed

__all__ = ["EVENT_SECONDS", "MONITOR_EVENT_SECONDS", "WINDOW_BACKLOG", "make_app"]

STATIC = Path(__file__).parent / "static"
EVENT_SECONDS = 0.5
"""How often the event stream looks for changes."""
WINDOW_BACKLOG = 60
"""Windows a newly connected page gets at once (the newest); later ones are pushed as they close."""

MONITOR_EVENT_SECONDS = 0.25
"""How often the monitor's event stream looks for a new window."""
MONITOR_KEEPALIVE_SECONDS = 10.0
"""A comment line this often on a quiet monitor event stream, so a page that went away is noticed."""
MONITOR_LEVELS = ("host", "rack", "cluster")

SOURCE_KEY: web.AppKey[CoordinatorSource] = web.AppKey("source", CoordinatorSource)
RESULTS_KEY: web.AppKey[OrderedDict[tuple[str, str], dict[str, Any]]] = web.AppKey("results", OrderedDict)
RESULTS_KEPT = 8
"""Succeeded jobs whose final results (``read_results``) the server keeps, the most recently asked for."""
MONITOR_KEY: web.AppKey[list[Any]] = web.AppKey("monitor", list)
STOPPING_KEY: web.AppKey[asyncio.Event] = web.AppKey("stopping", asyncio.Event)
"""Set as the server stops: the event streams end on it."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as JSON with a message: unknown routes, unknown jobs, a coordinator that does not answer, query
    parameters a route does not take."""
    try:
        _check_query(request)
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        if error.status == 404 and request.match_info.route.resource is None:  # no route (a handler's has a reason)
            return _error(404, f"no page {request.path}; the JSON API: {', '.join(_api_routes(request.app))}")
        return _error(error.status, error.reason or "error")
    except UnknownJob as error:
        return _error(404, str(error))
    except CoordinatorUnavailable as error:
        return _error(503, str(error))
    except Exception as error:  # a bug must not show a traceback page
        return _error(500, f"internal error: {type(error).__name__}")


def _api_routes(app: web.Application) -> list[str]:
    """``METHOD /api/...`` for every API route of ``app``, in the order they were added."""
    return [
        f"{route.method} {route.resource.canonical}"
        for route in app.router.routes()
        if route.resource is not None and route.resource.canonical.startswith("/api/") and route.method != "HEAD"
    ]


def _source(request: web.Request) -> CoordinatorSource:
    return request.app[SOURCE_KEY]


MONITOR_LINK = '<a id="monitor-link" href="/monitor" hidden>'
"""The page's link to the monitor's dashboard, hidden unless the server has one (``hop monitor``)."""


async def index(request: web.Request) -> web.Response:
    """The page, linking the monitor's dashboard when there is one. Said in the page itself: the page asked
    ``/api/monitor/state`` instead, whose ``404`` without a monitor every browser logs as an error in its console."""
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    if MONITOR_KEY in request.app:
        page = page.replace(MONITOR_LINK, MONITOR_LINK.replace(" hidden", ""))
    return web.Response(text=page, content_type="text/html")


def _json_response(data: Any) -> web.Response:
    """``data`` as JSON a browser parses: NaN and infinities (a job's values, an estimate's unbounded interval)
    as ``null``, since JSON has no such numbers and ``JSON.parse`` rejects the whole reply over one."""
    return web.json_response(text=_strict_json(data))


async def workers(request: web.Request) -> web.Response:
    return _json_response(await _source(request).workers())


async def jobs(request: web.Request) -> web.Response:
    return _json_response(await _source(request).jobs())


async def job(request: web.Request) -> web.Response:
    return _json_response(await _source(request).job(request.match_info["job_id"]))


QUERY_PARAMETERS = {
    "/api/jobs/{job_id}/snapshots": ("after",),
    "/api/jobs/{job_id}/windows": ("after", "limit"),
    "/api/events": ("job", "after"),
    "/api/monitor/series": ("level", "name", "metric"),
}
"""The query parameters each API route takes; any other (on any ``/api/`` route) is a ``400``, not ignored."""


def _check_query(request: web.Request) -> None:
    """400 for a query parameter the matched API route does not take (a misspelt one must not be ignored), or one
    given twice."""
    route = request.match_info.route.resource
    if route is None or not route.canonical.startswith("/api/"):
        return
    taken = QUERY_PARAMETERS.get(route.canonical, ())
    for name in request.query:
        if name not in taken:
            takes = f"takes only {', '.join(taken)}" if taken else "takes no query parameters"
            raise web.HTTPBadRequest(reason=f"unknown query parameter {name!r}: {route.canonical} {takes}")
        if len(request.query.getall(name)) > 1:
            raise web.HTTPBadRequest(reason=f"query parameter {name!r} is given more than once: give it once")


def _int_query(request: web.Request, name: str, default: int, least: int, accepted: str) -> int:
    """Query parameter ``name`` as an int of at least ``least`` (``default`` when absent); else a 400 naming the
    parameter and ``accepted``, what it takes."""
    text = request.query.get(name)
    if text is None:
        return default
    # Decimal digits only: int() also takes "1_0" and " 7", which no other API of hop's accepts as a number.
    value = int(text) if re.fullmatch(r"-?[0-9]+", text) else least - 1
    if value < least:
        raise web.HTTPBadRequest(reason=f"{name} must be {accepted}, got {text!r}")
    return value


async def _continuous_job(request: web.Request) -> dict[str, Any]:
    """The job's summary; 404 unless it is a continuous job."""
    detail = await _source(request).job(request.match_info["job_id"])
    if not detail.get("continuous"):
        raise web.HTTPNotFound(reason=f"job {detail['job_id']} is not a continuous job: it has no windows")
    return detail


async def snapshots(request: web.Request) -> web.Response:
    after = _int_query(request, "after", -1, -1, "a snapshot's seq, an integer, -1 or more (-1: all)")
    return _json_response(await _source(request).snapshots(request.match_info["job_id"], after))


async def windows(request: web.Request) -> web.Response:
    after = _int_query(request, "after", 0, 0, "a window's seq, an integer, 0 or more (0: the newest)")
    limit = _int_query(request, "limit", 100, 0, "an integer number of windows, 0 or more (0: all kept)")
    detail = await _continuous_job(request)
    return _json_response(await _source(request).windows(detail["job_id"], after, limit))


def _same_origin(request: web.Request) -> bool:
    """A browser names the page that sends a POST in ``Origin``: only this server's own page may stop jobs (a
    script with no ``Origin``, such as curl, is the user at the keyboard)."""
    origin = request.headers.get("Origin")
    return origin is None or origin == f"{request.scheme}://{request.host}"


async def stop(request: web.Request) -> web.Response:
    if not _same_origin(request):
        raise web.HTTPForbidden(reason="only the hop page itself may stop a job")
    detail = await _source(request).job(request.match_info["job_id"])
    if detail["state"] != "running":
        raise web.HTTPConflict(reason=f"job {detail['job_id']} already ended ({detail['state']})")
    # A batch job is cancelled: its error (and _job.json) names where from, not hop stop or an interrupted run.
    reason = f"cancelled from the web view (POST /api/jobs/{detail['job_id']}/stop)"
    reply = await _source(request).stop(detail["job_id"], reason)
    state = reply.get("state", detail["state"])
    if not detail.get("continuous"):  # as `hop stop` does: a batch job has no last windows to write
        return _json_response({"job_id": detail["job_id"], "state": state, "cancelled": True})
    return _json_response({"job_id": detail["job_id"], "state": state, "stopping": True})


async def results(request: web.Request) -> web.Response:
    detail = await _source(request).job(request.match_info["job_id"])
    if detail.get("continuous"):
        raise web.HTTPConflict(
            reason=f"job {detail['job_id']} is continuous: its results are its windows, "
            f"GET /api/jobs/{detail['job_id']}/windows"
        )
    if detail["state"] == "running":
        raise web.HTTPConflict(reason=f"job {detail['job_id']} has no final results yet: it is running")
    if detail["state"] != "succeeded":
        reason = f"job {detail['job_id']} {detail['state']}: it has no results ({detail['error']})"
        raise web.HTTPConflict(reason=reason)
    gone = _output_gone(detail)
    if gone is not None:
        raise web.HTTPGone(reason=gone)
    return _json_response(await _final_results(request.app, detail))


def _results_folder(detail: dict[str, Any]) -> str | None:
    """Where a succeeded job's final output is: its output directory, or for a pipeline's earlier step run with
    ``--keep-intermediate``, where the run kept it once it removed the step's (``OUT/_steps/step-N``); ``None`` when
    it is gone."""
    if Path(detail["output"]).is_dir():
        return str(detail["output"])
    kept = kept_step_output(detail["output"])
    return None if kept is None else str(kept)


def _output_gone(detail: dict[str, Any]) -> str | None:
    """Why a succeeded job's final output cannot be read (its output directory was deleted since), or ``None``."""
    if _results_folder(detail) is not None:
        return None
    return (
        f"job {detail['job_id']}'s output {detail['output']} no longer exists (a pipeline deletes its earlier steps' "
        "outputs when it ends unless run with --keep-intermediate)"
    )


async def _final_results(app: web.Application, detail: dict[str, Any]) -> dict[str, Any]:
    """A succeeded job's results as the route and the ``results`` event send them: ``read_results``, off the loop,
    once per job (its output no longer changes; ranking a large one takes seconds, and every page that opens the
    job asks for them)."""
    cache = app[RESULTS_KEY]
    folder = _results_folder(detail) or detail["output"]
    key = (detail["job_id"], folder)
    if key not in cache:
        loaded = await asyncio.get_running_loop().run_in_executor(
            None, lambda: read_results(folder, approximate=bool(detail["approximate"]))
        )
        cache[key] = {"job_id": detail["job_id"], "approximate": detail["approximate"], **loaded}
        while len(cache) > RESULTS_KEPT:
            cache.popitem(last=False)
    cache.move_to_end(key)
    return cache[key]


async def _stopping_within(request: web.Request, seconds: float) -> bool:
    """Wait ``seconds``, less if the server stops meanwhile; whether it stops. An event stream waits so between
    rounds: aiohttp's graceful stop waits for every handler still running (its shutdown timeout), then cancels it and
    waits again, so a stream that only slept held a stop up twice that long (2 s)."""
    try:
        await asyncio.wait_for(request.app[STOPPING_KEY].wait(), seconds)
    except TimeoutError:
        return False
    return True


async def _stop_streams(app: web.Application) -> None:
    """``on_shutdown``: the event streams end (they return their response, whole); other handlers run on."""
    app[STOPPING_KEY].set()


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: what changed, every ``EVENT_SECONDS`` (see the module docstring)."""
    source = _source(request)
    job_id = request.query.get("job")
    # A bad after (400), an unknown job (404), or a coordinator gone (503), is refused before the stream starts: once
    # it has started, its 200 is sent and an error can only break it off (a bad after= was a 200 and a dropped stream).
    after = _int_query(request, "after", -1, -1, "the seq of the last snapshot or window the page has (-1: none)")
    await (source.job(job_id) if job_id else source.workers())
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(event: str, data: Any, event_id: int | None = None) -> None:
        head = "" if event_id is None else f"id: {event_id}\n"
        await response.write(f"{head}event: {event}\ndata: {_strict_json(data)}\n\n".encode())

    last_workers: Any = None
    last_jobs: Any = None
    last_job: Any = None
    results_sent = False
    # A page that reconnects names the last window or snapshot it got (its event id, the seq): go on from there. The
    # browser's own reconnection says it in Last-Event-ID; a page that opens the stream again itself (after its own
    # waits: static/common.js) in ?after=.
    resume = request.headers.get("Last-Event-ID", "")
    if not resume.isdigit() and after >= 0:
        resume = str(after)
    last_window: int | None = int(resume) if resume.isdigit() else None
    last_seq = int(resume) if resume.isdigit() else -1

    async def send_windows(job_id: str, detail: dict[str, Any]) -> None:
        nonlocal last_window
        if last_window is None:  # a new page: the newest windows only (seq counts the windows written)
            after = max(0, int(detail.get("windows", 0)) - WINDOW_BACKLOG)
            closed, last_window = (await source.windows(job_id, after))[-WINDOW_BACKLOG:], 0
        else:
            closed = await source.windows(job_id, last_window)
        for window in closed:
            await send("window", window, event_id=window["seq"])
            last_window = window["seq"]

    async def send_snapshots_and_results(job_id: str, detail: dict[str, Any], snapshots: list[Any]) -> None:
        nonlocal last_seq, results_sent
        for snapshot in snapshots:
            if not snapshot["complete"]:
                break
            await send("snapshot", snapshot, event_id=snapshot["seq"])
            last_seq = snapshot["seq"]
        if detail["state"] == "succeeded" and not results_sent:
            # An output deleted since (a pipeline's earlier step) is said so, not sent as a final output of no rows.
            gone = _output_gone(detail)
            gone_or_rows = {"job_id": job_id, "gone": gone} if gone else await _final_results(request.app, detail)
            await send("results", gone_or_rows)
            results_sent = True

    try:
        while True:
            cluster = await source.workers()
            if cluster != last_workers:
                await send("workers", cluster)
                last_workers = cluster
            listing = await source.jobs()
            if listing != last_jobs:
                await send("jobs", listing)
                last_jobs = listing
            if job_id:
                # A batch job's snapshots are asked for before its progress, so the progress sent with them is as
                # new as they are: asked for after, a snapshot completed in between came with the progress before
                # it, and the page said "62% of the input processed" beside "63% of the input seen".
                batch = last_job is None or not last_job.get("continuous")
                snapshots = await source.snapshots(job_id, last_seq) if batch else None
                detail = await source.job(job_id)
                if detail != last_job:
                    await send("job", detail)
                    last_job = detail
                if detail.get("continuous"):
                    await send_windows(job_id, detail)
                else:
                    if snapshots is None:
                        snapshots = await source.snapshots(job_id, last_seq)
                    await send_snapshots_and_results(job_id, detail, snapshots)
            else:
                await send("ping", {})
            if await _stopping_within(request, EVENT_SECONDS):
                break
    except ConnectionResetError:
        pass  # (a closed page's stream is cancelled: aiohttp's handler_cancellation)
    except (CoordinatorUnavailable, UnknownJob) as error:  # (unknown: retired, or the coordinator was restarted)
        await send("error", {"error": str(error)})
    return response


# The cluster monitor's dashboard (hop monitor) -----------------------------------------------------------------
def _feed(request: web.Request) -> MonitorFeed:
    """The monitor's feed; 503 while the monitoring job is not submitted yet."""
    box = request.app[MONITOR_KEY]
    if not box:
        raise web.HTTPServiceUnavailable(reason="the monitoring job has not started yet: no monitor state so far")
    feed: MonitorFeed = box[0]
    return feed


MAX_SAFE_INTEGER = 2**53 - 1
"""JavaScript's ``Number.MAX_SAFE_INTEGER``: ints beyond it lose digits in a browser's ``JSON.parse``."""


def _finite(data: Any, rows: bool = True, in_row: bool = False) -> Any:
    """``data`` as a browser reads it right: NaN and infinities as ``None`` (JSON has no such numbers; a browser
    rejects them), an int beyond ``±MAX_SAFE_INTEGER`` as its decimal string (a browser would round it); each row (a
    dict in a list under ``rows``) that holds such ints names them in ``big_ints`` (:func:`_paths`), and
    holds its NaN and infinities as their JSON text, named in ``non_finite``.
    ``rows=False`` inside a row: a ``rows`` there is the job's data, sent as it is; ``in_row``: inside a row dict,
    whose NaN and infinities are sent as their text (the row names where)."""
    if isinstance(data, float):
        # (in a row: the text Python's json writes, as the job's files have it)
        return data if math.isfinite(data) else json.dumps(data) if in_row else None
    if _is_big_int(data):
        return str(data)
    if isinstance(data, dict):
        return {
            key: _finite_rows(value) if rows and key == "rows" else _finite(value, rows, in_row)
            for key, value in data.items()
        }
    if isinstance(data, list | tuple):
        return [_finite(value, rows, in_row) for value in data]
    return data


def _is_big_int(data: Any) -> bool:
    return isinstance(data, int) and not -MAX_SAFE_INTEGER <= data <= MAX_SAFE_INTEGER  # (a bool is in range)


def _finite_rows(rows: Any) -> Any:
    """A ``rows`` list as :func:`_finite` gives it, each row dict with ``big_ints`` and ``non_finite`` added where
    it holds ints or NaN and infinities sent as strings: a value that really is a string stays one, and the page
    shows them as numbers."""
    if not isinstance(rows, list):
        return _finite(rows)
    finite = []
    for row in rows:
        if not isinstance(row, dict):
            finite.append(_finite(row, rows=False))
            continue
        named = {"big_ints": list(_paths(row, _is_big_int)), "non_finite": list(_paths(row, _is_non_finite))}
        sent = _finite(row, rows=False, in_row=True)
        finite.append({**sent, **{field: paths for field, paths in named.items() if paths}})
    return finite


def _is_non_finite(data: Any) -> bool:
    return isinstance(data, float) and not math.isfinite(data)


def _paths(data: Any, sent_as_text: Callable[[Any], bool], path: tuple[Any, ...] = ()) -> Iterator[list[Any]]:
    """Where ``data`` holds numbers :func:`_finite` sends as strings (``sent_as_text``: :func:`_is_big_int`,
    :func:`_is_non_finite`): each a list of the dict keys (as JSON writes them: strings) and list indexes leading
    to it from ``data``."""
    if sent_as_text(data):
        yield list(path)
    elif isinstance(data, dict):
        for key, value in data.items():
            yield from _paths(value, sent_as_text, (*path, key if isinstance(key, str) else json.dumps(key)))
    elif isinstance(data, list | tuple):
        for index, value in enumerate(data):
            yield from _paths(value, sent_as_text, (*path, index))


def _strict_json(data: Any) -> str:
    return json.dumps(_finite(data), default=str)


async def _monitor_snapshot(feed: MonitorFeed) -> dict[str, Any]:
    """``feed.snapshot()`` off the event loop (it waits for the feed's lock while a window is folded in)."""
    return await asyncio.get_running_loop().run_in_executor(None, feed.snapshot)


async def monitor_page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "monitor.html")


async def monitor_state(request: web.Request) -> web.Response:
    snapshot = await _monitor_snapshot(_feed(request))
    return web.json_response(text=_strict_json(snapshot))


async def monitor_series(request: web.Request) -> web.Response:
    level = request.query.get("level", "")
    if level not in MONITOR_LEVELS:
        raise web.HTTPBadRequest(reason=f"level must be one of {', '.join(MONITOR_LEVELS)}, got {level!r}")
    metric = request.query.get("metric", "")
    if not metric:
        raise web.HTTPBadRequest(reason="metric is required, e.g. metric=cpu_percent")
    name = request.query.get("name", "")
    if name and level == "cluster":
        raise web.HTTPBadRequest(reason=f"name is for levels host and rack: level cluster takes none, got {name!r}")
    if not name and level != "cluster":
        raise web.HTTPBadRequest(reason=f"name is required for level {level} (a {level} name)")
    feed = _feed(request)

    def read() -> tuple[bool, list[dict[str, float]]]:
        with feed.lock:  # the feed's thread appends to the series
            return (level, name, metric) in feed.state.series, feed.state.series_of(level, name, metric)

    known, points = await asyncio.get_running_loop().run_in_executor(None, read)
    if not known:
        raise web.HTTPNotFound(reason=f"no series for {level} {name!r} metric {metric!r} (yet)")
    body = {"level": level, "name": name, "metric": metric, "points": points}
    return web.json_response(text=_strict_json(body))


def prometheus_windows(latest: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The latest window's statistics as ``monitoring.prometheus.render`` takes them."""
    if not latest:
        return []
    rows: list[dict[str, Any]] = []

    def add(level: str, name: str, metrics: dict[str, Any]) -> None:
        for metric, stats in metrics.items():
            rows.append({**stats, "level": level, "name": name, "metric": metric})

    add("cluster", "", latest.get("cluster") or {})
    for rack, entry in (latest.get("racks") or {}).items():
        add("rack", rack, entry.get("metrics") or {})
    for host, entry in (latest.get("hosts") or {}).items():
        add("host", host, entry.get("metrics") or {})
    return rows


async def metrics(request: web.Request) -> web.Response:
    from monitoring.prometheus import render

    snapshot = await _monitor_snapshot(_feed(request))
    latest = snapshot.get("latest") or {}
    body, content_type = render(
        snapshot.get("samples") or {},
        prometheus_windows(snapshot.get("latest")),
        snapshot["alerts"],
        jobs=snapshot.get("jobs") or [],
        fault_counts=snapshot.get("fault_counts") or {},
        stuck_tasks=snapshot.get("stuck_tasks") or [],
        missing_hosts=latest.get("missing_hosts") or [],
        workers=snapshot.get("workers") or [],
    )
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type  # with its version parameter, which content_type= refuses
    return response


async def monitor_events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: ``state`` on connect and after every new state of the feed (its version), ``waiting``
    until the feed exists."""
    box = request.app[MONITOR_KEY]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    sent: tuple[int, int] | None = None  # (which feed, its version) last sent
    waiting_sent = False
    quiet_since = loop.time()

    async def send(event: str, text: str, event_id: int | None = None) -> None:
        nonlocal quiet_since
        head = "" if event_id is None else f"id: {event_id}\n"
        await response.write(f"{head}event: {event}\ndata: {text}\n\n".encode())
        quiet_since = loop.time()

    try:
        while True:
            if not box:
                if not waiting_sent:
                    await send("waiting", json.dumps({"message": "waiting for the monitoring job to start"}))
                    waiting_sent = True
            else:
                feed = box[0]
                if sent != (id(feed), feed.version):
                    snapshot = await _monitor_snapshot(feed)
                    await send("state", _strict_json(snapshot), event_id=snapshot["version"])
                    sent = (id(feed), snapshot["version"])
            if loop.time() - quiet_since > MONITOR_KEEPALIVE_SECONDS:
                await response.write(b": keepalive\n\n")
                quiet_since = loop.time()
            if await _stopping_within(request, MONITOR_EVENT_SECONDS):
                break
    except ConnectionResetError:
        pass  # (a closed page's stream is cancelled: aiohttp's handler_cancellation)
    return response


async def static_file(request: web.Request) -> web.StreamResponse:
    """A file of the pages' (``static/``: scripts, styles, the vendored chart library), or a JSON 404 naming it.
    aiohttp's own static route found a missing file only as it sent it, after every middleware: an empty 404."""
    name = request.match_info["name"]
    path = (STATIC / name).resolve()
    if not path.is_relative_to(STATIC.resolve()) or not path.is_file():
        raise web.HTTPNotFound(reason=f"no file /static/{name}: the pages' files are those they name (open /)")
    return web.FileResponse(path)


def make_app(source: CoordinatorSource, monitor: list[Any] | None = None) -> web.Application:
    """The web view for ``source``'s coordinator; with ``monitor`` (a list holding the ``MonitorFeed`` once it
    exists) also the cluster monitor's dashboard, its API and ``/metrics``."""
    app = web.Application(middlewares=[json_errors])
    app[SOURCE_KEY] = source
    app[RESULTS_KEY] = OrderedDict()
    app[STOPPING_KEY] = asyncio.Event()
    app.on_shutdown.append(_stop_streams)
    if monitor is not None:
        app[MONITOR_KEY] = monitor
        app.router.add_get("/monitor", monitor_page)
        app.router.add_get("/api/monitor/state", monitor_state)
        app.router.add_get("/api/monitor/series", monitor_series)
        app.router.add_get("/api/monitor/events", monitor_events)
        app.router.add_get("/metrics", metrics)
    app.router.add_get("/", index)
    app.router.add_get("/api/workers", workers)
    app.router.add_get("/api/jobs", jobs)
    app.router.add_get("/api/jobs/{job_id}", job)
    app.router.add_get("/api/jobs/{job_id}/snapshots", snapshots)
    app.router.add_get("/api/jobs/{job_id}/results", results)
    app.router.add_get("/api/jobs/{job_id}/windows", windows)
    app.router.add_post("/api/jobs/{job_id}/stop", stop)
    app.router.add_get("/api/events", events)
    app.router.add_get("/static/{name:.+}", static_file)
    return app
