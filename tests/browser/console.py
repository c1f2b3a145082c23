"""The owner's side of the console for the browser tests: the link `bxctl up` printed, a page
logged in through it, the few gestures every test repeats (a new session, a message sent), and
a plain HTTP client of the API to check what the page did without the page's help.

Controls are found as the owner and a screen reader find them: by role and accessible name
(SPEC §12.2's bold names), never by CSS class.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Browser, Locator, Page, Request, ViewportSize, expect

from tests.support.e2e import UpBox

DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
VIEWS = ("Chat", "Approvals", "Ledger", "Grants", "Memory", "Services", "Jobs")
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"


class Console:
    """A box's console: its printed link, and an API client logged in with the same token."""

    def __init__(self, box: UpBox, link: str) -> None:
        self.box = box
        self.link = link
        self.origin, self.token = link.split("/#token=")
        self._http: httpx.Client | None = None

    def __repr__(self) -> str:
        return f"<Console {self.origin} of {self.box.home}>"

    @classmethod
    def of(cls, box: UpBox) -> Console:
        """The link from `bxctl up`'s output, which prints it once."""
        assert box.started is not None
        links = re.findall(r"^console: (http://127\.0\.0\.1:\d+/#token=\S+)$", box.started.stdout,
                           re.MULTILINE)  # fmt: skip
        assert len(links) == 1, box.started.stdout
        return cls(box, links[0])

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One API request with the owner's cookie and the key its login paired with it (as
        the page sends them); its JSON answer (a 2xx is required)."""
        if self._http is None:
            self._http = httpx.Client(base_url=self.origin, timeout=15)
            login = self._http.post("/api/login", json={"token": self.token})
            assert login.status_code == 200, login.text
            self._http.headers["X-BX-Console"] = login.json()["key"]
        headers = {"Content-Type": "application/json"} if method != "GET" else {}
        answer = self._http.request(method, path, json=body, headers=headers)
        assert answer.is_success, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json()

    def pending(self) -> list[dict[str, Any]]:
        approvals: list[dict[str, Any]] = self.api("GET", "/api/pending")["approvals"]
        return approvals

    def deny_all_pending(self) -> None:
        """Whatever a test left waiting (a failure halfway), refused: the next test's tab
        title counts from zero."""
        for approval in self.pending():
            self.api("POST", f"/api/approvals/{approval['approval']}", {"approve": False})

    def ledger(self, session: str, kind: str | None = None) -> list[dict[str, Any]]:
        query = f"/api/ledger?session={session}" + (f"&kind={kind}" if kind else "")
        records: list[dict[str, Any]] = self.api("GET", query)["records"]
        return records

    def close(self) -> None:
        if self._http is not None:
            self._http.close()


@contextlib.contextmanager
def console_of(box: UpBox) -> Iterator[Console]:
    """`box`'s console for a module's tests: what they left pending is refused after them."""
    console = Console.of(box)
    try:
        yield console
    finally:
        console.deny_all_pending()
        console.close()


@contextlib.contextmanager
def open_page(browser: Browser, console: Console, viewport: ViewportSize) -> Iterator[Page]:
    """The printed link opened in a fresh context (no cookie yet), once the page is logged in
    and its live stream connected. Fails the test if the page's script threw meanwhile, or if
    the token was ever in a URL or header the browser sent (only the login's body has it)."""
    context = browser.new_context(viewport=viewport)
    context.set_default_timeout(10_000)
    thrown: list[str] = []
    leaked: list[str] = []

    def sent(request: Request) -> None:
        if console.token in request.url or console.token in str(request.headers):
            leaked.append(f"{request.method} {request.url} {request.headers}")

    context.on("request", sent)
    try:
        page = context.new_page()
        page.on("pageerror", lambda error: thrown.append(str(error)))
        page.goto(console.link)
        expect(page.get_by_role("link", name="Chat", exact=True)).to_be_visible()
        expect(page.locator("#link-state")).to_have_text("live")
        yield page
    finally:
        context.close()
    assert not thrown, f"the page's script threw: {thrown}"
    assert not leaked, f"the token left the page outside the login's body: {leaked}"


def conversation(page: Page) -> Locator:
    return page.get_by_role("log", name="Conversation")


def new_session(page: Page) -> str:
    """**New session**; the id the page made up for it."""
    page.get_by_role("button", name="New session", exact=True).click()
    title = page.locator("#session-title")
    expect(title).to_have_text(re.compile(r"^web-"))
    return title.inner_text()


def send(page: Page, text: str) -> None:
    """Write `text` in **Message** and press **Send**."""
    page.get_by_role("textbox", name="Message", exact=True).fill(text)
    page.get_by_role("button", name="Send", exact=True).click()
    expect(page.get_by_role("textbox", name="Message", exact=True)).to_have_value("")


def view(page: Page, name: str) -> None:
    """Follow the navigation link `name` and wait for its view."""
    page.get_by_role("navigation", name="Views").get_by_role("link", name=name, exact=True).click()
    expect(page.locator(f"#view-{name.lower()}")).to_be_visible()


def approval_card(page: Page, approval: str) -> Locator:
    return page.get_by_role("listitem").filter(has=page.get_by_text(approval, exact=True))


def screenshot(page: Page, name: str) -> Path:
    """A full-page picture under tests/browser/screenshots/ (ignored by git) for review."""
    size = page.viewport_size
    assert size is not None
    path = SCREENSHOTS / f"{name}-{size['width']}x{size['height']}.png"
    SCREENSHOTS.mkdir(exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path), full_page=True)
    return path
