"""The web view's command-line parts: ``hop web`` and the ``--web`` options of ``hop run``."""

from __future__ import annotations

import argparse
import sys
import threading
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import TYPE_CHECKING, Any

from hop.gen.cli import COORDINATOR_HELP, coordinator_address, port_number
from hop.given_options import Given, GivenFlag, flags_given

if TYPE_CHECKING:
    from hop.web.server import WebServer

__all__ = ["add_web_arguments", "register", "unused_port", "web_view"]


def add_web_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("web view")
    group.add_argument("--web", action=GivenFlag, help="serve the live web view on 127.0.0.1 while the job runs")
    group.add_argument(
        "--port", action=Given, type=port_number, default=0, help="port of the web view (default: a free one, printed)"
    )
    group.add_argument(
        "--web-wait",
        action=GivenFlag,
        help="serve the web view and keep serving after the job ended (results, or why it failed) until Ctrl-C",
    )


class _RunningView:
    def __init__(self, address: str, port: int, wait: bool) -> None:
        from hop.web.server import WebServer  # the web framework costs every `hop` command ~0.15 s to import

        self.server = WebServer(address, port)
        self.wait = wait

    def __enter__(self) -> WebServer:
        url = self.server.start()
        print(f"hop: web view at {url}", file=sys.stderr, flush=True)
        return self.server

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        from hop.runner import JobFailed

        try:
            if self.wait and (kind is None or issubclass(kind, JobFailed)):
                # A failed job is worth a look too (its tasks, which attempt failed and why). Ctrl-C ends the wait,
                # not the run: its exit status stays the job's.
                ended = "done; results stay" if kind is None else f"failed ({error}); the view stays"
                # (said inside the suppress: a Ctrl-C right after the line is read, before the wait began, ended
                # the run as interrupted, exit 130, and not with the job's status)
                with suppress(KeyboardInterrupt):
                    print(f"hop: job {ended} at {self.server.url} until Ctrl-C", file=sys.stderr, flush=True)
                    threading.Event().wait()
        finally:
            self.server.stop()


def unused_port(args: argparse.Namespace) -> str | None:
    """Why ``--port`` was given to a run that serves no web view (no ``--web``/``--web-wait``): it was ignored."""
    if flags_given(args, ["port"]) and not (args.web or args.web_wait):
        return "--port sets the port of the web view, which this run does not serve: add --web (or --web-wait)"
    return None


def web_view(args: argparse.Namespace, address: str) -> AbstractContextManager[Any]:
    """A context serving the web view for ``address`` when ``--web`` was given, else nothing."""
    if not (getattr(args, "web", False) or getattr(args, "web_wait", False)):  # (--web-wait implies --web)
        return nullcontext()
    return _RunningView(address, args.port, args.web_wait)


def _web(args: argparse.Namespace) -> int:
    from hop.client import Client, CoordinatorUnavailable, JobRejected
    from hop.web.server import serve_forever

    # The coordinator must answer before the view is served: a wrong address or a stopped cluster otherwise gave a
    # page with nothing on it and not a word on stderr, for as long as the server ran. Asked as `hop status` asks
    # (a note after 2 s, at most 10 s; a stale or missing ipc:// socket file at once), with its exit code 3.
    try:
        client = Client(args.coordinator, timeout=10, running=True)
        try:
            client.workers()
        finally:
            client.close()
    except (CoordinatorUnavailable, JobRejected) as error:
        print(f"hop: error: {error}", file=sys.stderr)
        return error.exit_code
    try:
        with suppress(KeyboardInterrupt):
            serve_forever(args.coordinator, args.port)
    except ValueError as error:  # WebViewError: the port is taken
        print(f"hop web: error: {error}", file=sys.stderr)
        return 2
    return 0


def register(commands: Any) -> None:
    web = commands.add_parser("web", help="serve the live web view for a running coordinator")
    web.add_argument("--coordinator", type=coordinator_address, required=True, help=COORDINATOR_HELP)
    web.add_argument("--port", type=port_number, default=0, help="port on 127.0.0.1 (default: a free one, printed)")
    web.set_defaults(func=_web)
