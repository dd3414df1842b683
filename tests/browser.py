"""Headless Chromium for the browser tests: one browser per test process, a fresh context per test.

Each test's page lives in a context of its own (its own cookies, storage and cache), closed after it, as a new
browser would give. Launching Playwright's driver and Chromium for each of the 33 browser tests cost about a second
of CPU and up to 5 s of wall under load each. The browser is started by the first test that asks for a page
(started again if it died) and closed by :func:`close_shared_browser`, which ``conftest.py`` calls at the end of
the session, before its check for leaked processes.

While the driver runs, Playwright's sync API leaves its event loop marked as the main thread's running loop (its own
calls need it so; clearing it breaks the next one): in a test process that has run a browser test, ``asyncio.run``
in the main thread raises. Run an event loop in a thread of its own, as ``hop.web.server`` does.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs Chromium (Debian package 'chromium'; .ci/run installs it)"
)

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

VIEWPORT = {"width": 1400, "height": 1000}

_shared: dict[str, Any] = {}
"""``playwright`` (the driver) and ``browser``, once started."""


def _browser() -> Any:
    browser = _shared.get("browser")
    if browser is None or not browser.is_connected():
        if "playwright" not in _shared:
            from playwright.sync_api import sync_playwright

            _shared["playwright"] = sync_playwright().start()
        browser = _shared["browser"] = _shared["playwright"].chromium.launch(executable_path=CHROMIUM, args=FLAGS)
    return browser


def close_shared_browser() -> None:
    """Close the browser and stop the driver, if a test started them."""
    browser, playwright = _shared.pop("browser", None), _shared.pop("playwright", None)
    if browser is not None:
        with contextlib.suppress(Exception):  # (already gone with a crash)
            browser.close()
    if playwright is not None:
        playwright.stop()


@contextmanager
def browser_page() -> Iterator[tuple[Any, list[str]]]:
    """A page in a fresh browser context and the page errors (uncaught exceptions) it reports; the context, and
    with it the page, is closed at the end."""
    context = _browser().new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(error.stack or str(error)))  # (the stack names the line)
        yield page, errors
    finally:
        context.close()
