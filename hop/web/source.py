"""Where the web view's data comes from: the coordinator, over ``hop.client.Client``, off the event loop.

A ZeroMQ socket must not be used from two threads at once, so every request runs in one worker thread, one at a
time. Final results are read from the job's output directory (``OUT/part-*``), which the web server sees when it
runs where the job ran (``hop run --web``) or on a shared file system. A continuous job's windows come from the
coordinator (it keeps the newest ones with the first rows of each); their ``rows`` arrive as pairs of JSON texts
and are decoded here into ``{"key", "value"}`` like snapshot and result rows.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hop.client import Client, CoordinatorGone, CoordinatorUnavailable, JobRejected
from hop.online.snapshots import LargestFirst

__all__ = ["CoordinatorSource", "UnknownJob", "decode_window", "read_results"]

RESULT_ROWS = 2000
"""Rows of final results sent to the page, the largest (the rest stay in the output files)."""


class UnknownJob(LookupError):
    """The coordinator does not know the job (never did, or no longer: retired by ``--keep-jobs``)."""


class CoordinatorSource:
    """Async access to a coordinator's workers, jobs, tasks and snapshots."""

    def __init__(self, address: str, timeout: float = 5.0, on_gone: Callable[[str | None], None] | None = None) -> None:
        """``on_gone``: told once when a call finds the coordinator gone (``hop.client.CoordinatorGone``: its error)
        and once, with ``None``, when a call is answered again (``hop web`` says both on stderr)."""
        self.address = address
        self._on_gone = on_gone
        self._gone: str | None = None
        # running: the coordinator answered before the view was served; once it is gone (stopped, shut down),
        # every call fails at once saying so (hop.client.CoordinatorGone), not after ``timeout`` with a page stalled.
        self._client = Client(address, timeout=timeout, running=True)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hop-web-client")

    async def _call(self, method: str, *args: Any, **options: Any) -> Any:
        loop = asyncio.get_running_loop()
        try:
            reply = await loop.run_in_executor(self._executor, lambda: getattr(self._client, method)(*args, **options))
        except CoordinatorGone as error:
            self._say_gone(str(error))
            raise
        except JobRejected as error:
            self._say_gone(None)  # (it answered)
            # (a job retired by --keep-jobs is one the coordinator no longer knows: its message names its report)
            if error.reason == "retired_job" or str(error).startswith(("no job", "no continuous job")):
                raise UnknownJob(str(error)) from error
            raise
        self._say_gone(None)
        return reply

    def _say_gone(self, gone: str | None) -> None:
        """Tell ``on_gone`` when the coordinator went (``gone``: why) or answers again (``None``), once each time."""
        if self._on_gone is not None and (gone is None) != (self._gone is None):
            self._on_gone(gone)
        self._gone = gone

    async def jobs(self) -> list[dict[str, Any]]:
        return list(await self._call("jobs"))

    async def workers(self) -> list[dict[str, Any]]:
        """The cluster's workers as ``hop status`` lists them, by name, without ``last_seen`` (it changes with
        every heartbeat; whether a worker is ``alive`` is what the page shows)."""
        workers = [{k: v for k, v in worker.items() if k != "last_seen"} for worker in await self._call("workers")]
        return sorted(workers, key=lambda worker: str(worker["name"]))

    async def job(self, job_id: str) -> dict[str, Any]:
        return dict(await self._call("job", job_id))

    async def snapshots(self, job_id: str, after: int = -1) -> list[dict[str, Any]]:
        return list(await self._call("snapshots", job_id, after))

    async def windows(self, job_id: str, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """A continuous job's windows with ``seq > after``, oldest first, at most ``limit`` (0: all the coordinator
        keeps; ``Client.windows``), rows decoded (see ``decode_window``)."""
        return [decode_window(window) for window in await self._call("windows", job_id, after, limit=limit)]

    async def stop(self, job_id: str, reason: str | None = None) -> dict[str, Any]:
        """As ``hop stop``: a continuous job drains, a batch job is cancelled with ``reason`` as its error."""
        return dict(await self._call("stop", job_id, reason))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._client.close()


def decode_window(window: dict[str, Any]) -> dict[str, Any]:
    """A window as the coordinator reports it, with ``rows`` (``[key_json, value_json]`` texts) decoded to
    ``{"key", "value"}`` and ``truncated`` telling whether they are fewer than the window's output rows."""
    rows = [{"key": json.loads(key), "value": json.loads(value)} for key, value in window.get("rows", [])]
    return {**window, "rows": rows, "truncated": len(rows) < int(window.get("output_records", len(rows)))}


def read_results(output: str, limit: int = RESULT_ROWS, approximate: bool = False) -> dict[str, Any]:
    """The final output's ``limit`` largest rows, ranked as a snapshot's rows are (numbers first, largest first,
    ties in ``OUT/part-*`` order: ``hop.online.snapshots.LargestFirst``), and how many rows there are in all. Not
    the first rows: the page's table of the largest estimates must not lose its top groups to the final output's
    first ``limit`` lines, in key order per part.

    ``approximate``: the job stopped early (``--stop-when-accurate``) and its output is a snapshot's estimates, so
    its rows are that snapshot's (``_approximate_results``): each with its estimate, interval and ``final`` as the
    snapshot has them, where the part files' rows were all marked final and came without their intervals."""
    if approximate:
        estimates = _approximate_results(Path(output), limit)
        if estimates is not None:
            return estimates
    ranked = LargestFirst[tuple[str, Any]](limit)
    total = 0
    for part in sorted(Path(output).glob("part-*")):
        with open(part, encoding="utf-8") as lines:
            for line in lines:
                total += 1
                key, _, text = line.rstrip("\n").partition("\t")
                value = json.loads(text)
                ranked.add(value, (key, value))
    rows = [{"key": json.loads(key), "value": value, "final": True} for key, value in ranked.items()]
    return {"rows": rows, "total": total, "truncated": total > len(rows)}


__all__ += ["CoordinatorUnavailable"]


def _approximate_results(output: Path, limit: int) -> dict[str, Any] | None:
    """The rows of the snapshot a job stopped early at (``OUT/_job.json``'s ``approximate.snapshot``), read from its
    ``estimates-*.jsonl``, ranked by estimate as ``read_results`` ranks; ``None`` where they cannot be read."""
    try:
        report = json.loads((output / "_job.json").read_text(encoding="utf-8"))
        folder = output / "_snapshots" / str(report["approximate"]["snapshot"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    parts = sorted(folder.glob("estimates-*.jsonl"))
    if not parts:
        return None
    ranked = LargestFirst[dict[str, Any]](limit)
    total = 0
    for part in parts:
        with open(part, encoding="utf-8") as lines:
            for line in lines:
                total += 1
                row = json.loads(line)
                ranked.add(row["value"] if row.get("estimate") is None else row["estimate"], row)
    return {"rows": ranked.items(), "total": total, "truncated": total > limit}
