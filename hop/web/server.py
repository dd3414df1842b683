"""Running the web view: in a background thread of ``hop run --web``, or in the foreground for ``hop web``.

The server binds 127.0.0.1 only; port 0 picks a free port. ``WebServer.url`` is the address to open. With
``monitor`` (``hop monitor``: a list that holds the ``monitoring.feed.MonitorFeed`` once the monitoring job runs) it
also serves the cluster monitor's dashboard at ``/monitor`` and ``/metrics`` (see ``hop.web.app``).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hop.web.app import make_app
from hop.web.source import CoordinatorSource

__all__ = ["WebServer", "WebViewError", "serve_forever"]

START_TIMEOUT = 10.0


class WebViewError(ValueError):
    """The web view could not start (its port is taken, or not allowed): the message says which and what to do."""


class WebServer:
    """The web view for the coordinator at ``address``, served from a thread with its own event loop."""

    def __init__(
        self,
        address: str,
        port: int = 0,
        host: str = "127.0.0.1",
        monitor: list[Any] | None = None,
        on_gone: Callable[[str | None], None] | None = None,
    ) -> None:
        """``on_gone``: as ``CoordinatorSource`` takes it (told when the coordinator is found gone, and back)."""
        self.address = address
        self.on_gone = on_gone
        self.host = host
        self.port = port
        self.monitor = monitor
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hop-web", daemon=True)
        self._runner: web.AppRunner | None = None
        self._source: CoordinatorSource | None = None

    async def _start(self) -> None:
        self._source = CoordinatorSource(self.address, on_gone=self.on_gone)
        # handler_cancellation: a page closed ends its event stream (else a stream that had nothing new to send
        # never noticed and kept asking the coordinator every half second).
        self._runner = web.AppRunner(
            make_app(self._source, monitor=self.monitor), shutdown_timeout=1.0, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self.port
        self.url = f"http://{self.host}:{self.port}/"

    def start(self) -> str:
        """Start serving; returns the URL."""
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=START_TIMEOUT)
        except OSError as error:
            self.stop()
            raise WebViewError(
                f"cannot serve the web view on {self.host}:{self.port}: {error.strerror or error}; "
                "pick another --port, or 0 for a free one"
            ) from None
        return self.url

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        # (The event streams of pages still open ended as the runner stopped: make_app's on_shutdown.) Anything left
        # running, such as a handler still waiting on the coordinator past the shutdown timeout: ended before the loop
        # stops.
        others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def stop(self) -> None:
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=START_TIMEOUT)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=START_TIMEOUT)
        if self._source is not None:
            self._source.close()
        self._loop.close()

    def __enter__(self) -> WebServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _say_gone(address: str, gone: str | None) -> None:
    """``hop web``'s note on stderr when its coordinator is found gone (the page says so too), and when it answers
    again (one started again at its address)."""
    if gone is None:
        print(f"hop web: the coordinator at {address} answers again", file=sys.stderr, flush=True)
    else:
        print(f"hop web: {gone} (the view says so, and follows one started there again)", file=sys.stderr, flush=True)


def serve_forever(address: str, port: int = 0) -> None:
    """``hop web``: serve until interrupted."""
    server = WebServer(address, port, on_gone=lambda gone: _say_gone(address, gone))
    url = server.start()
    print(f"hop web: {url} (Ctrl-C to stop)", flush=True)
    try:
        threading.Event().wait()
    finally:
        server.stop()
