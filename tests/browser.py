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
import re
import shutil
import time
from collections.abc import Callable, Iterator
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


# A page's retries of its event stream (common.js: retrier), on the page's clock --------------------------------------
# Its waits (1 s, 2 s, 4 s, ... up to 30 s) are asserted on the page's own clock, installed before it opened
# (page.clock.install()) and paused once it is live (pause_clock): the test runs that clock through each wait, to 1 ms
# before it is up and then to its end, instead of waiting it out (a minute of the suite's time for two tests).

RETRY_WAIT = re.compile(r"trying again in (\d+) s$")
"""The end of what a page says of its connection while it waits to try again (common.js: retryText)."""


def pause_clock(page: Any) -> None:
    """Pause the clock of ``page``'s context (installed before the page opened) a second on from where it is: from
    then on the page's timers fire only as the test runs that clock (``page.clock.run_for``)."""
    page.clock.pause_at(page.evaluate("Date.now()") / 1000 + 1)  # (its time flows meanwhile: never into the past)


def wait_until(page: Any, condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """Wait, in real time (the page's clock is not run), up to ``timeout`` seconds for ``condition`` to hold, taking in
    the page's events meanwhile (Playwright delivers them only during its own calls); fail saying ``what`` did not."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        page.wait_for_timeout(20)


def retry_wait(page: Any, selector: str = "#connection") -> int:
    """The whole seconds ``page`` says (its ``selector``) it waits before its next attempt at its event stream, once
    it says it waits (an attempt under way, "trying again…", waited out)."""
    wait_until(page, lambda: RETRY_WAIT.search(page.inner_text(selector)) is not None, "a wait before an attempt")
    said = RETRY_WAIT.search(page.inner_text(selector))
    assert said is not None  # (as it was: nothing the page does changes it while its clock is paused)
    return int(said[1])


def assert_backs_off(page: Any, refused: list[Any], waits: list[int], selector: str = "#connection") -> None:
    """Step ``page``, its clock paused and its server gone, through its next attempts at its event stream, asserting
    them: before each it says it waits the next of ``waits`` (seconds); 1 ms before that wait is up it has made no
    attempt (it still says "trying again in 1 s", none refused); once it is up, it makes one, which the server's
    absence refuses (``refused``, the refused requests the test hears of, gets exactly one more)."""
    for wait in waits:
        heard = len(refused)
        waits_now = retry_wait(page, selector)
        assert waits_now == wait, f"waits {waits_now} s, not {wait} s: {page.inner_text(selector)!r}"
        page.clock.run_for(wait * 1000 - 1)
        said = page.inner_text(selector)
        assert said.endswith("trying again in 1 s") and len(refused) == heard, f"before {wait} s: {said!r}, {refused}"
        page.clock.run_for(1)
        # (The condition is called in this iteration only: the loop's `heard` is the one meant.)
        wait_until(page, lambda: len(refused) > heard, f"an attempt once {wait} s were up")  # noqa: B023
        assert len(refused) == heard + 1, f"attempts once {wait} s were up: {refused[heard:]}"


def assert_follows_a_restart_at_its_next_attempt(
    page: Any, refused: list[Any], stop: Callable[[], None], start: Callable[[], None], live: str
) -> None:
    """``page``, live, its clock paused: its server stopped (``stop``), its waits start over from 1 s; started again
    (``start``) after that first attempt, the page is ``live`` (a JavaScript condition) at its next attempt, 2 s
    on, by itself and not a millisecond before."""
    stop()
    assert_backs_off(page, refused, [1])
    start()
    assert retry_wait(page) == 2
    page.clock.run_for(1_999)
    assert page.inner_text("#connection").endswith("trying again in 1 s")
    page.clock.run_for(1)
    page.wait_for_function(live, timeout=10_000)
