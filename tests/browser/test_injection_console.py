"""Standing injection tests of the console's login (SPEC §16, issue 23 item 3), through the
real box and real Chromium:

- The cookie the owner's page holds, replayed from another client (as a server on another
  port of 127.0.0.1 receives it): with no key, with `X-BX-Console: 1`, with a key from another
  login, it opens no route, the event stream and `POST /api/grants` included, and changes
  nothing; the page's key lives in its tab's sessionStorage only (no cookie, no localStorage)
  and rides on every request it sends.
- The page still does everything with its key: a turn, an approval, Stop, and its live stream
  (read with fetch) comes back after gatewayd restarts, with what happened meanwhile.
- A browser with the cookie but no key is told to run `bxctl console`.
- The page's stream parser reads events however the text is cut (CR, LF, CRLF split apart).

The same over plain HTTP, and failed logins, are tests/e2e/test_injection_console.py.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, Request, expect

from tests.browser.console import (
    DESKTOP,
    Console,
    approval_card,
    conversation,
    new_session,
    send,
    view,
)
from tests.e2e.test_console_http import ROUTES
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args

pytestmark = pytest.mark.browser

STORED = "bx_console_key"


def the_pages_pair(page: Page) -> tuple[str, str]:
    """The cookie the page's browser holds and the key its tab keeps; where each lives."""
    cookies = page.context.cookies()
    assert [(c["name"], c["httpOnly"]) for c in cookies] == [("bx_console", True)]
    key = page.evaluate(f"sessionStorage.getItem({STORED!r})")
    assert isinstance(key, str) and re.fullmatch(r"[A-Za-z0-9_-]{43}", key)
    assert page.evaluate("localStorage.length") == 0
    assert page.evaluate("document.cookie") == ""  # HttpOnly: no script reads the cookie
    assert key != cookies[0]["value"]
    return cookies[0]["value"], key


def another_login(console: Console) -> str:
    with httpx.Client(base_url=console.origin, timeout=15) as client:
        login = client.post("/api/login", json={"token": console.token})
        assert login.status_code == 200, login.text
        key: str = login.json()["key"]
        return key


def test_the_pages_cookie_replayed_elsewhere_opens_no_route_and_the_key_rides_on_each_request(
    page: Page, console: Console
) -> None:
    sent: list[Request] = []
    page.on("request", lambda request: sent.append(request))
    cookie, key = the_pages_pair(page)
    grants = sorted(path.name for path in (console.box.home / "grants").iterdir())
    pending = console.pending()
    asked = len(console.box.model.fake.requests)
    jar = {"cookie": f"bx_console={cookie}", "content-type": "application/json"}
    tried = [
        ("no key", jar),
        ("X-BX-Console: 1", {**jar, "X-BX-Console": "1"}),
        ("a key from another login", {**jar, "X-BX-Console": another_login(console)}),
    ]
    with httpx.Client(base_url=console.origin, timeout=15) as thief:
        for how, headers in tried:
            for method, path, body in ROUTES:
                answer = thief.request(method, path, json=body, headers=headers)
                assert answer.status_code == 401, (how, method, path, answer.text)
                assert "run `bxctl console`" in answer.json()["error"]
            stolen = {"id": "stolen", "tool": "shell", "mode": "allow", "path": "/"}
            assert thief.post("/api/grants", json=stolen, headers=headers).status_code == 401
    assert sorted(path.name for path in (console.box.home / "grants").iterdir()) == grants
    assert console.pending() == pending
    assert len(console.box.model.fake.requests) == asked

    # The page, meanwhile, works: a turn, and every request it sent carried its key.
    console.box.model.script("hello from the keyed page", Answer(text="Keyed and well."))
    new_session(page)
    send(page, "hello from the keyed page")
    expect(conversation(page).get_by_text("Keyed and well.", exact=True)).to_be_visible()
    page.reload()  # the tab keeps its key: still logged in
    expect(page.locator("#link-state")).to_have_text("live")
    view(page, "Ledger")
    expect(page.get_by_role("heading", name="Log in to the console")).to_be_hidden()
    api = [request for request in sent if "/api/" in request.url]
    assert {re.sub(r"\?.*", "", r.url.split("/api/")[1]).split("/")[0] for r in api} >= {
        "events",
        "sessions",
        "pending",
        "ledger",
    }
    for request in api:
        assert request.headers.get("x-bx-console") == key, request.url


def test_the_page_does_everything_with_its_key_and_its_stream_comes_back_after_gatewayd_restarts(
    page: Page, console: Console
) -> None:
    box = console.box
    workspace = box.home / "workspace"
    call = args(command="printf keyed > keyed.txt", cwd=str(workspace))
    box.model.script("write with the key", box.model.calls(("shell", call)), Answer("Written."))
    session = new_session(page)
    send(page, "write with the key")
    view(page, "Approvals")
    expect(page).to_have_title("(1) boxmaker")
    (waiting,) = [a for a in console.pending() if a["session"] == session]
    card = approval_card(page, waiting["approval"])
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_have_count(0)
    view(page, "Chat")
    log = conversation(page)
    expect(log.get_by_text("Written.", exact=True)).to_be_visible()
    assert (workspace / "keyed.txt").read_text() == "keyed"

    box.model.script("think slowly with the key", Answer(text="too late", delay_s=30))
    send(page, "think slowly with the key")
    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_enabled()
    box.model.fake.wait_for(1)
    stop.click()
    expect(log.get_by_text("turn stopped by you", exact=True).last).to_be_visible()

    restarted = box.bxctl("restart", "gatewayd")
    assert restarted.returncode == 0, restarted.stderr
    link = page.locator("#link-state")
    expect(link).to_have_text("live", timeout=20_000)  # reconnected, with the same key

    def answers() -> Any:
        with contextlib.suppress(httpx.TransportError, AssertionError):
            return console.api("GET", "/api/sessions")
        return None

    wait_until(answers, 15, "gatewayd back")
    # Live after the restart: a turn the page did not send arrives on its stream.
    box.model.script("said elsewhere after the restart", Answer(text="Heard live."))
    console.api("POST", f"/api/sessions/{session}/messages",
                {"text": "said elsewhere after the restart"})  # fmt: skip
    expect(log.get_by_text("Heard live.", exact=True)).to_be_visible(timeout=15_000)
    box.model.script("ask after the restart", box.model.calls(("shell", call)), Answer("Again."))
    console.api("POST", f"/api/sessions/{session}/messages", {"text": "ask after the restart"})
    expect(page).to_have_title("(1) boxmaker", timeout=15_000)  # approval_requested, live
    console.deny_all_pending()
    expect(page).to_have_title("boxmaker", timeout=15_000)


def test_a_browser_with_the_cookie_but_no_key_is_told_to_run_bxctl_console(
    browser: Browser, page: Page, console: Console
) -> None:
    cookie, _ = the_pages_pair(page)
    context = browser.new_context(viewport=DESKTOP)
    try:
        context.add_cookies([{"name": "bx_console", "value": cookie, "url": console.origin}])
        stranger = context.new_page()
        stranger.goto(console.origin + "/#chat")
        expect(stranger.get_by_role("heading", name="Log in to the console")).to_be_visible()
        expect(stranger.get_by_text("bxctl console", exact=True)).to_be_visible()
        expect(stranger.get_by_role("textbox", name="Message")).to_be_hidden()
        # A key made up, or one from another login, is no better: 401, and the same words.
        stranger.evaluate(f"sessionStorage.setItem({STORED!r}, {another_login(console)!r})")
        stranger.reload()
        expect(stranger.get_by_role("heading", name="Log in to the console")).to_be_visible()
        assert stranger.evaluate(f"sessionStorage.getItem({STORED!r})") is None  # forgotten
    finally:
        context.close()


PARSER = """async ([text, cuts]) => {
  const { parser } = await import("/static/js/events.js");
  const found = [];
  const parse = parser((name, data) => found.push([name, data]));
  let at = 0;
  for (const cut of [...cuts, text.length]) {
    parse.feed(text.slice(at, cut));
    at = cut;
  }
  return { found, lastId: parse.lastId(), retry: parse.retry() };
}"""

STREAM = (
    "retry: 1000\r\nid: b-1\r\nevent: hello\r\ndata: {}\r\n\r\n"
    ": keepalive\n\n"
    "id: b-2\revent: turn\rdata: one\rdata:two\r\r"
    "id: b-3\nevent: ledger\ndata\ndata:  spaced\nunknown: x\n\n"
    "data: no name\n\n"
    "id: b-4\n\n"
    "event: cut\ndata: never ended"
)
EVENTS = [["hello", "{}"], ["turn", "one\ntwo"], ["ledger", "\n spaced"], ["message", "no name"]]


@pytest.mark.parametrize(
    "cuts",
    [[], [1], [len("retry: 1000\r")], [STREAM.index("\r\r") + 1], list(range(1, len(STREAM)))],
    ids=["whole", "first character", "between CR and LF", "between two CRs", "every character"],
)
def test_the_pages_stream_parser_reads_events_however_the_text_is_cut(
    page: Page, cuts: list[int]
) -> None:
    result = page.evaluate(PARSER, [STREAM, cuts])
    assert result == {"found": EVENTS, "lastId": "b-4", "retry": 1000}
