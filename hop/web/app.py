"""The web view: an aiohttp application serving the page, a JSON API and server-sent events.

Routes (every error is a JSON ``{"error": message}`` with a 4xx/5xx status, never a traceback page):

- ``GET /``: the page (``static/index.html``; scripts and the vendored chart library under ``/static/``).
- ``GET /api/jobs``: every job (id, name, state, progress, output directory, snapshot count).
- ``GET /api/jobs/{job_id}``: one job with the state and progress of every task.
- ``GET /api/jobs/{job_id}/snapshots?after=N``: its snapshots with ``seq > N`` (default all), with their rows.
- ``GET /api/jobs/{job_id}/results``: the final output (``409`` while the job runs).
- ``GET /api/events?job=ID``: server-sent events pushing ``jobs`` (the list, when it changes), and for ``job``:
  ``job`` (tasks and progress), ``snapshot`` (each new snapshot) and ``results`` (once it succeeded).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from hop.client import CoordinatorUnavailable
from hop.web.source import CoordinatorSource, UnknownJob, read_results

__all__ = ["EVENT_SECONDS", "make_app"]

STATIC = Path(__file__).parent / "static"
EVENT_SECONDS = 0.5
"""How often the event stream looks for changes."""

SOURCE_KEY: web.AppKey[CoordinatorSource] = web.AppKey("source", CoordinatorSource)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure as JSON with a message: unknown routes, unknown jobs, a coordinator that does not answer."""
    try:
        return await handler(request)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return _error(error.status, error.reason or "error")
    except UnknownJob as error:
        return _error(404, str(error))
    except CoordinatorUnavailable as error:
        return _error(503, str(error))
    except Exception as error:  # a bug must not show a traceback page
        return _error(500, f"internal error: {type(error).__name__}")


def _source(request: web.Request) -> CoordinatorSource:
    return request.app[SOURCE_KEY]


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def jobs(request: web.Request) -> web.Response:
    return web.json_response(await _source(request).jobs())


async def job(request: web.Request) -> web.Response:
    return web.json_response(await _source(request).job(request.match_info["job_id"]))


def _after(request: web.Request) -> int:
    text = request.query.get("after", "-1")
    try:
        return int(text)
    except ValueError:
        raise web.HTTPBadRequest(reason=f"after must be an integer snapshot number, got {text!r}") from None


async def snapshots(request: web.Request) -> web.Response:
    after = _after(request)
    return web.json_response(await _source(request).snapshots(request.match_info["job_id"], after))


async def results(request: web.Request) -> web.Response:
    detail = await _source(request).job(request.match_info["job_id"])
    if detail["state"] != "succeeded":
        raise web.HTTPConflict(reason=f"job {detail['job_id']} has no final results yet (it is {detail['state']})")
    loaded = await asyncio.get_running_loop().run_in_executor(None, read_results, detail["output"])
    return web.json_response({"job_id": detail["job_id"], "approximate": detail["approximate"], **loaded})


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: what changed, every ``EVENT_SECONDS`` (see the module docstring)."""
    source = _source(request)
    job_id = request.query.get("job")
    if job_id:
        await source.job(job_id)  # 404 before the stream starts
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(event: str, data: Any) -> None:
        await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

    last_jobs: Any = None
    last_job: Any = None
    last_seq = -1
    results_sent = False
    try:
        while True:
            listing = await source.jobs()
            if listing != last_jobs:
                await send("jobs", listing)
                last_jobs = listing
            if job_id:
                detail = await source.job(job_id)
                if detail != last_job:
                    await send("job", detail)
                    last_job = detail
                for snapshot in await source.snapshots(job_id, last_seq):
                    if not snapshot["complete"]:
                        break
                    await send("snapshot", snapshot)
                    last_seq = snapshot["seq"]
                if detail["state"] == "succeeded" and not results_sent:
                    loaded = await asyncio.get_running_loop().run_in_executor(None, read_results, detail["output"])
                    await send("results", {"job_id": job_id, "approximate": detail["approximate"], **loaded})
                    results_sent = True
            else:
                await send("ping", {})
            await asyncio.sleep(EVENT_SECONDS)
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    except CoordinatorUnavailable as error:
        await send("error", {"error": str(error)})
    return response


def make_app(source: CoordinatorSource) -> web.Application:
    app = web.Application(middlewares=[json_errors])
    app[SOURCE_KEY] = source
    app.router.add_get("/", index)
    app.router.add_get("/api/jobs", jobs)
    app.router.add_get("/api/jobs/{job_id}", job)
    app.router.add_get("/api/jobs/{job_id}/snapshots", snapshots)
    app.router.add_get("/api/jobs/{job_id}/results", results)
    app.router.add_get("/api/events", events)
    app.router.add_static("/static/", STATIC)
    return app
