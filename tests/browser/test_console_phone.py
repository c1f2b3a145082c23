"""The console at phone width, 390 px (SPEC §12.2; issue 27 item 5), in Chromium: in the
Ledger, Grants, Services and Jobs views, each row's key columns and actions are inside the
viewport, and no table box scrolls sideways (each row is a card there); a fresh page while a
turn runs shows that turn's session, not "No session chosen"; the session list is never a
box that hides some of itself; the navigation keeps each link whole, and the pending count
beside its link.

This module has a box of its own: it needs a job, and a turn left running.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser.console import (
    PHONE,
    VIEWS,
    Console,
    console_of,
    new_session,
    open_page,
    send,
    view,
)
from tests.browser.test_console_approvals import shell, waiting_approval
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args
from tests.support.e2e import box_up

pytestmark = pytest.mark.browser

WIDTH = PHONE["width"]


def with_a_job(home: Path) -> None:
    jobs = home / "jobs"
    jobs.mkdir(mode=0o700, exist_ok=True)
    (jobs / "phone-tick.toml").write_text('every = "366d"\nprompt = "phone job tick"\n')


@pytest.fixture(scope="module")
def phone_console() -> Iterator[Console]:
    with box_up(before_up=with_a_job) as box:
        workspace = box.home / "workspace"
        (workspace / "phone.md").write_text("a note for the phone\n")
        box.model.script(
            "read my phone note",
            box.model.calls(
                ("read_file", args(path=str(workspace / "phone.md"))),
                ("read_file", args(path="/etc/hostname")),
            ),
            Answer(text="Read it."),
        )
        with console_of(box) as console:
            console.api(
                "POST", "/api/sessions/phone-first/messages", {"text": "read my phone note"}
            )
            yield console


@pytest.fixture
def phone(browser: Browser, phone_console: Console) -> Iterator[Page]:
    with open_page(browser, phone_console, PHONE) as page:
        yield page


def inside(page: Page, locator: Locator, what: str) -> None:
    """`locator` is drawn whole within the viewport's width. A list that live events redraw
    may replace the element between the two looks: it is looked at again, for up to 5 s."""
    expect(locator).to_be_visible()
    box = locator.bounding_box()
    for _ in range(50):
        if box is not None:
            break
        page.wait_for_timeout(100)
        box = locator.bounding_box()
    assert box is not None, what
    assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH + 0.5, f"{what} at {box}"


def no_sideways_scroll(page: Page, name: str) -> None:
    """Neither the page nor any box of the view scrolls sideways."""
    found: list[dict[str, Any]] = page.evaluate(
        """() => [document.documentElement, ...document.querySelectorAll(
             ".view:not([hidden]) *")].filter((node) => {
           const style = getComputedStyle(node);
           return node === document.documentElement || /(auto|scroll)/.test(style.overflowX);
         }).map((node) => ({id: node.id || node.className || node.tagName,
                           scroll: node.scrollWidth, client: node.clientWidth}))"""
    )
    wide = [box for box in found if box["scroll"] > box["client"]]
    assert not wide, f"{name}: these scroll sideways at {WIDTH} px: {wide}"


def column(table: Locator, row: Locator, header: str) -> Locator:
    """`row`'s cell under the column header `header` (a card's line at this width)."""
    headers = [text.strip() for text in table.locator("thead th").all_inner_texts()]
    index = next(i for i, text in enumerate(headers) if text.lower() == header.lower())
    return row.locator("> td, > th").nth(index)


def test_the_ledger_keeps_what_and_outcome_in_view(phone: Page, phone_console: Console) -> None:
    wait_for_the_turn(phone_console, "phone-first")
    view(phone, "Ledger")
    table = phone.get_by_role("table", name="The newest ledger records")
    denied = table.get_by_role("row").filter(has_text="/etc/hostname").filter(has_text="decision")
    expect(denied.first).to_be_visible()
    for header in ("What", "Outcome", "Kind", "Seq"):
        inside(phone, column(table, denied.first, header), f"the ledger's {header}")
    expect(column(table, denied.first, "Outcome")).to_contain_text("no_grant")
    no_sideways_scroll(phone, "Ledger")


def test_grants_keep_class_and_remove_in_view(phone: Page) -> None:
    view(phone, "Grants")
    table = phone.get_by_role("table", name="Every grant")
    rows = table.get_by_role("row").filter(has=phone.get_by_role("button", name="Remove"))
    expect(rows.first).to_be_visible()
    assert rows.count() >= 2
    for row in rows.all():
        inside(phone, column(table, row, "Class"), "a grant's class")
        inside(phone, column(table, row, "Id"), "a grant's id")
        inside(phone, row.get_by_role("button", name="Remove"), "a grant's Remove")
    no_sideways_scroll(phone, "Grants")


def test_services_keep_restart_in_view(phone: Page) -> None:
    view(phone, "Services")
    table = phone.get_by_role("table", name="The box's services")
    restarts = table.get_by_role("button", name=re.compile("^Restart "))
    expect(restarts).to_have_count(4)
    for button in restarts.all():
        inside(phone, button, "a service's Restart")
    for row in table.get_by_role("row").filter(has=restarts).all():
        inside(phone, column(table, row, "State"), "a service's state")
    no_sideways_scroll(phone, "Services")


def test_jobs_keep_run_now_and_disable_in_view(phone: Page) -> None:
    view(phone, "Jobs")
    table = phone.get_by_role("table", name="Every job")
    row = table.get_by_role("row").filter(has=phone.get_by_role("rowheader", name="phone-tick"))
    inside(phone, row.get_by_role("button", name="Run now", exact=True), "Run now")
    inside(phone, row.get_by_role("button", name="Disable", exact=True), "Disable")
    inside(phone, column(table, row, "Next runs"), "the next runs")
    no_sideways_scroll(phone, "Jobs")


def test_no_view_scrolls_sideways_and_the_nav_keeps_its_links_whole(phone: Page) -> None:
    nav = phone.get_by_role("navigation", name="Views")
    for name in VIEWS:
        link = nav.get_by_role("link", name=name, exact=True)
        inside(phone, link, f"the link {name}")
        box = link.bounding_box()
        assert box is not None and box["height"] < 40, f"{name} wraps inside itself: {box}"
        view(phone, name)
        no_sideways_scroll(phone, name)


def test_the_pending_count_stays_on_its_link_and_covers_no_word(
    browser: Browser, phone_console: Console
) -> None:
    box = phone_console.box
    box.model.script(
        "phone waits for a shell",
        box.model.calls(("shell", shell(phone_console, "echo phone"))),
        Answer(text="done"),
    )
    with open_page(browser, phone_console, PHONE) as page:
        new_session(page)
        send(page, "phone waits for a shell")
        waiting_approval(page)
        nav = page.get_by_role("navigation", name="Views")
        link = nav.get_by_role("link", name="Approvals", exact=True)
        count = page.locator("#pending-count")
        expect(count).to_have_text("1")
        inside(page, count, "the pending count")
        here, badge = link.bounding_box(), count.bounding_box()
        assert here is not None and badge is not None
        assert overlaps(here, badge), f"the count is not on its link's corner: {here}, {badge}"
        words: Any = link.evaluate(
            """node => { const range = document.createRange(); range.selectNodeContents(node);
                       const box = range.getBoundingClientRect();
                       return {x: box.x, y: box.y, width: box.width, height: box.height}; }"""
        )
        assert not overlaps(words, badge), f"the count covers the word Approvals: {words}"
        for other in VIEWS:  # nothing drawn over the badge, nor the badge over another link
            if other != "Approvals":
                near = nav.get_by_role("link", name=other, exact=True).bounding_box()
                assert near is not None and not overlaps(near, badge), (other, near, badge)
    phone_console.deny_all_pending()


def overlaps(a: Any, b: Any) -> bool:
    return bool(
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


def test_a_fresh_page_shows_the_session_whose_turn_runs(
    browser: Browser, phone_console: Console
) -> None:
    box = phone_console.box
    box.model.script(
        "phone turn that waits",
        box.model.calls(("shell", shell(phone_console, "echo waiting"))),
        Answer(text="done waiting"),
    )

    def idle() -> bool:  # no other turn runs: the one started here is the page's to show
        return not any(s["busy"] for s in phone_console.api("GET", "/api/sessions")["sessions"])

    wait_until(idle, 30, "the other turns to end")
    phone_console.api(
        "POST", "/api/sessions/phone-running/messages", {"text": "phone turn that waits"}
    )
    wait_for_pending(phone_console, "phone-running")
    with open_page(browser, phone_console, PHONE) as page:
        expect(page.locator("#session-title")).to_have_text("phone-running")
        expect(page.get_by_role("button", name="Stop", exact=True)).to_be_enabled()
        sessions = page.get_by_role("complementary", name="Sessions")
        chosen = sessions.get_by_role("button", name=re.compile("phone-running"))
        expect(chosen).to_have_attribute("aria-current", "true")
    phone_console.deny_all_pending()


def test_the_session_list_is_never_a_box_that_hides_part_of_itself(
    phone: Page, phone_console: Console
) -> None:
    for n in range(9):  # more sessions than a phone's screen shows at once
        phone_console.api(
            "POST", f"/api/sessions/phone-many-{n}/messages", {"text": f"phone many {n}"}
        )
    phone.reload()
    expect(phone.get_by_role("link", name="Chat", exact=True)).to_be_visible()
    sessions = phone.get_by_role("complementary", name="Sessions")
    expect(sessions.get_by_role("button", name=re.compile("phone-many-8"))).to_be_visible()
    clipped = sessions.evaluate("node => node.scrollHeight - node.clientHeight")
    assert clipped <= 1, f"the session list hides {clipped} px of itself"
    show_all = sessions.get_by_role("button", name=re.compile(r"^Show all \d+ sessions$"))
    if show_all.count():
        show_all.click()
    for n in range(9):
        inside(
            phone,
            sessions.get_by_role("button", name=re.compile(f"phone-many-{n}\\b")),
            "a session",
        )
    assert sessions.evaluate("node => node.scrollHeight - node.clientHeight") <= 1
    no_sideways_scroll(phone, "Chat")


def wait_for_the_turn(console: Console, session: str) -> None:
    def ended() -> bool:
        history = console.api("GET", f"/api/sessions/{session}/history?after=0")["events"]
        return any(event["event"]["kind"] == "turn_end" for event in history)

    wait_until(ended, 30, f"{session}'s turn to end")


def wait_for_pending(console: Console, session: str) -> None:
    wait_until(
        lambda: any(a["session"] == session for a in console.pending()), 30, f"{session} waits"
    )
