"""``hop shutdown``: stop a standalone cluster, its coordinator and every worker registered with it.

A coordinator stopped by a signal leaves its workers up (they register again with a coordinator restarted at its
address), so this is how a whole cluster is stopped. A cluster running jobs is not shut down unless ``--force``,
which first stops them as ``hop stop`` does (a batch job is cancelled, a continuous one writes its last windows)
and waits for them to end, so each leaves its ``_job.json``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from hop.client import Client, CoordinatorUnavailable, JobRejected
from hop.gen.cli import COORDINATOR_HELP, coordinator_address, positive_float
from hop.wording import counted

__all__ = ["register"]


def _shutdown(args: argparse.Namespace) -> int:
    client = Client(args.coordinator, timeout=10, running=True)
    try:
        running = [job for job in client.jobs() if job["state"] == "running"]
        if running and not args.force:
            them = "it" if len(running) == 1 else "them"
            listed = ", ".join(f"{job['job_id']} ({job['name']})" for job in running)
            print(
                f"hop: error: the cluster at {args.coordinator} is running {counted(len(running), 'job')}: {listed}; "
                f"stop {them} first (hop stop JOB_ID --coordinator ...), or add --force to stop {them}, wait for "
                f"{them} to end and then shut down",
                file=sys.stderr,
            )
            return 2
        for job in running:  # (a batch job fails with this reason; a continuous one drains and succeeds)
            client.stop(
                job["job_id"],
                reason=f"cancelled by hop shutdown --force: the cluster at {args.coordinator} was shut down",
            )
        for job in running:
            try:
                client.wait(job["job_id"], timeout=args.wait)
            except TimeoutError:
                print(
                    f"hop: error: {job['job_id']} was still ending after {args.wait:g}s (--wait); the cluster is "
                    "left up: try again, or stop the processes",
                    file=sys.stderr,
                )
                return 3
        workers = sum(worker["alive"] for worker in client.workers())
        client.shutdown()
    except (CoordinatorUnavailable, JobRejected) as error:
        print(f"hop: error: {error}", file=sys.stderr)
        return error.exit_code
    finally:
        client.close()
    stopped = f"; {counted(len(running), 'job')} stopped first" if running else ""
    print(f"hop: the coordinator at {args.coordinator} and its {counted(workers, 'worker')} are shutting down{stopped}")
    return 0


def register(commands: Any) -> None:
    shutdown = commands.add_parser(
        "shutdown", help="stop a standalone cluster: its coordinator and every worker registered with it"
    )
    shutdown.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)
    shutdown.add_argument(
        "--force", action="store_true", help="stop the jobs the cluster runs (as hop stop does) and wait for them"
    )
    shutdown.add_argument(
        "--wait",
        type=positive_float,
        default=120.0,
        help="with --force, seconds to wait for the stopped jobs to end (default 120)",
    )
    shutdown.set_defaults(func=_shutdown)
