"""The console in a real browser (SPEC §12.2, issue 12): Playwright for Python driving Debian's
chromium (`/usr/bin/chromium`; never a downloaded browser) against a whole box that `bxctl up`
started, its model the fake one. One browser and one box per test process, a fresh browser
context (cookies, storage) per test, logged in through the link `bxctl up` printed.

These tests never skip by themselves: without chromium they fail, saying so, unless
`BX_BROWSER_TESTS=0` asks to skip them (a machine that cannot have a browser).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright  # the `test` extra's

from tests.browser.console import DESKTOP, Console, open_page
from tests.support.e2e import UpBox, box_up

CHROMIUM = Path("/usr/bin/chromium")
# No sandbox: the tests may run as root, where chromium's own sandbox refuses to start. The
# rest keeps it from reaching out (there is no network) or doing work nobody looks at.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def unavailable(why: str) -> None:
    """Skip when the environment says browser tests cannot run here; otherwise fail."""
    if os.environ.get("BX_BROWSER_TESTS") == "0":
        pytest.skip(f"{why} (BX_BROWSER_TESTS=0)")
    pytest.fail(
        f"{why}: the console's browser tests need it (./install.sh installs chromium); "
        "set BX_BROWSER_TESTS=0 to skip them on a machine that cannot have it",
        pytrace=False,
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium for one module's tests. Not for the whole session: Playwright's synchronous
    API runs an asyncio loop in this thread while it is open, and the other tests this
    worker runs after a browser module (`anyio.run`, `asyncio.run`) need the thread free."""
    if not CHROMIUM.exists():
        unavailable(f"there is no {CHROMIUM}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def box() -> Iterator[UpBox]:
    """The box of this test process (`bxctl up` costs seconds, more on a busy machine). Tests
    share it and keep out of each other's way: each talks
    in sessions of its own, with owner messages no other test says (the fake model answers by
    message), and leaves nothing pending."""
    with box_up() as box:
        yield box


@pytest.fixture(scope="session")
def shared_console(box: UpBox) -> Iterator[Console]:
    console = Console.of(box)
    try:
        yield console
    finally:
        console.close()


@pytest.fixture
def console(shared_console: Console) -> Iterator[Console]:
    """The box's console; whatever approval the test left pending (a failure halfway) is
    refused after it, so the next test's tab title counts from zero."""
    yield shared_console
    shared_console.deny_all_pending()


@pytest.fixture
def page(browser: Browser, console: Console) -> Iterator[Page]:
    """A logged-in page at 1280×800 in a browser context of its own (see `open_page`)."""
    with open_page(browser, console, DESKTOP) as page:
        yield page
