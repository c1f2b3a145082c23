"""Approvals in the browser (SPEC §9, §12.2): a shell call the starter grant `workspace-shell`
asks about, answered from its card, where every argument is shown in full. **Approve** runs
exactly the call shown, **Deny** refuses it, **Approve for session** also lets the next call
of that grant run; a card settled by `bxctl approve` leaves an open page within a second; and
the whole flow once more at phone size with the keyboard alone. Last, pictures of each view.

Each test works in its own session of the shared box (`conftest.py`) and leaves nothing
pending: the tab title counts every pending approval of the box.
"""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.browser.console import (
    DESKTOP,
    PHONE,
    VIEWS,
    Console,
    approval_card,
    conversation,
    new_session,
    open_page,
    screenshot,
    send,
    view,
)
from tests.fakes.model_server import Answer
from tests.support.brokerd import args
from tests.support.shown import as_json

pytestmark = pytest.mark.browser

APPROVAL_LINK = re.compile(r"^approval ([a-z2-9]{8})$")


def shell(console: Console, command: str) -> str:
    """A shell call's arguments in the workspace, as the model writes them."""
    return args(command=command, cwd=str(console.box.home / "workspace"))


def waiting_approval(page: Page) -> tuple[str, Locator]:
    """The approval a pending call in the conversation waits for, and its link."""
    log = conversation(page)
    expect(log).to_contain_text("waiting for your answer")
    link = log.get_by_role("link", name=APPROVAL_LINK)
    expect(link).to_have_count(1)
    found = APPROVAL_LINK.match(link.inner_text())
    assert found is not None
    return found.group(1), link


def shown_arguments(card: Locator) -> object:
    return json.loads(as_json(card.get_by_label(re.compile(r"^Every argument of ")).inner_text()))


def test_approve_runs_exactly_the_call_its_card_shows_in_full(page: Page, console: Console) -> None:
    box = console.box
    long = "milk, " * 150  # 900 characters: wider than any screen, wrapped, never cut
    call = shell(console, f"printf '%s' '{long}' > approved.txt")
    box.model.script(
        "write the long list", box.model.calls(("shell", call)), Answer(text="Written.")
    )
    session = new_session(page)
    send(page, "write the long list")

    approval, link = waiting_approval(page)
    expect(page).to_have_title("(1) boxmaker")
    link.click()
    card = approval_card(page, approval)
    expect(card).to_be_visible()
    assert shown_arguments(card) == json.loads(call)
    arguments = card.get_by_label(re.compile(r"^Every argument of "))
    assert arguments.evaluate("node => node.scrollWidth <= node.clientWidth"), "it wraps"
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280, "the page too"
    for shown in (session, "workspace-shell", "read-write", "the grant asks", "Time left"):
        expect(card).to_contain_text(shown)
    approve = card.get_by_role("button", name="Approve", exact=True)
    expect(approve).to_be_focused()  # followed from the chat: the card is where to answer

    approve.click()
    expect(card).to_have_count(0)
    expect(page).to_have_title("boxmaker")

    view(page, "Chat")
    log = conversation(page)
    expect(log.get_by_text("Written.", exact=True)).to_be_visible()
    ran = log.get_by_role("listitem").filter(has=page.get_by_label("Arguments of shell"))
    expect(ran).to_contain_text("done, 15 B")
    assert (box.home / "workspace" / "approved.txt").read_text() == long
    decided = console.ledger(session, "decision")
    assert [(r["tool"], r["outcome"]) for r in decided] == [("shell", "pending")]
    assert json.loads(decided[0]["arguments"]) == json.loads(call), "what ran is what was shown"
    executed = console.ledger(session, "executed")
    assert [(r["call"], r["ok"]) for r in executed] == [(decided[0]["call"], True)]
    verdicts = console.ledger(session, "verdict")
    assert [(v["approval"], v["approve"]) for v in verdicts] == [(approval, True)]
    assert verdicts[0]["by"].startswith("owner (console)")


def test_deny_refuses_the_call_and_the_chat_says_why(page: Page, console: Console) -> None:
    box = console.box
    (box.home / "workspace" / "keep.txt").write_text("keep me")
    box.model.script(
        "clean up",
        box.model.calls(("shell", shell(console, "rm keep.txt"))),
        Answer(text="I did not remove it."),
    )
    new_session(page)
    send(page, "clean up")
    approval, link = waiting_approval(page)
    expect(page).to_have_title("(1) boxmaker")
    link.click()
    card = approval_card(page, approval)
    card.get_by_role("button", name="Deny", exact=True).click()
    expect(card).to_have_count(0)
    expect(page).to_have_title("boxmaker")

    view(page, "Chat")
    log = conversation(page)
    expect(log).to_contain_text("denied: the owner refused this call")
    expect(log.get_by_text("I did not remove it.", exact=True)).to_be_visible()
    assert (box.home / "workspace" / "keep.txt").read_text() == "keep me"


def test_approve_for_session_lets_the_next_call_of_that_grant_run_unasked(
    page: Page, console: Console
) -> None:
    box = console.box
    box.model.script(
        "write two files",
        box.model.calls(("shell", shell(console, "echo one > one.txt"))),
        box.model.calls(("shell", shell(console, "echo two > two.txt"))),
        Answer(text="Both written."),
    )
    session = new_session(page)
    send(page, "write two files")
    approval, link = waiting_approval(page)
    link.click()
    card = approval_card(page, approval)
    card.get_by_role("button", name="Approve for session", exact=True).click()
    expect(card).to_have_count(0)

    view(page, "Chat")
    log = conversation(page)
    expect(log.get_by_text("Both written.", exact=True)).to_be_visible()
    calls = log.get_by_role("listitem").filter(has=page.get_by_label("Arguments of shell"))
    expect(calls).to_have_count(2)
    expect(calls.nth(0)).to_contain_text("done, 15 B")
    expect(calls.nth(1)).to_contain_text("done, 15 B")
    assert (box.home / "workspace" / "two.txt").read_text() == "two\n"
    verdicts = console.ledger(session, "verdict")
    assert [(v["approval"], v["scope"]) for v in verdicts] == [(approval, "session")]
    decided = [(r["outcome"], r.get("approval")) for r in console.ledger(session, "decision")]
    assert decided[0] == ("pending", approval)
    assert decided[1][0] == "allowed", "the second call was not asked about"
    expect(page).to_have_title("boxmaker")


def test_an_approval_settled_by_bxctl_leaves_an_open_page_within_a_second(
    page: Page, console: Console
) -> None:
    box = console.box
    box.model.script(
        "touch a file",
        box.model.calls(("shell", shell(console, "touch touched.txt"))),
        Answer(text="Touched."),
    )
    session = "web-cli-settles"
    console.api("POST", f"/api/sessions/{session}/messages", {"text": "touch a file"})
    view(page, "Approvals")
    expect(page).to_have_title("(1) boxmaker")
    (pending,) = console.pending()
    card = approval_card(page, pending["approval"])
    expect(card).to_be_visible()

    approved = box.bxctl("approve", pending["approval"])
    settled = time.monotonic()
    assert approved.returncode == 0, approved.stderr
    expect(card).to_have_count(0, timeout=1_000)
    expect(page).to_have_title("boxmaker", timeout=1_000)
    took = time.monotonic() - settled
    assert took < 1.5, f"the card left {took:.2f} s after `bxctl approve` returned"
    expect(page.get_by_text("Nothing waits for you.", exact=True)).to_be_visible()
    verdicts = console.ledger(session, "verdict")
    assert [v["by"].startswith("bxctl (") for v in verdicts] == [True]


def focus_by_keys(page: Page, target: Locator, key: str = "Tab", most: int = 40) -> None:
    """Press `key` until `target` has the focus, as a person tabbing through the page."""
    for _ in range(most):
        page.keyboard.press(key)
        if target.evaluate("node => node === document.activeElement"):
            return
    raise AssertionError(f"{most} presses of {key} never reached {target}")


def test_the_whole_flow_with_the_keyboard_alone_on_a_phone(
    browser: Browser, console: Console
) -> None:
    box = console.box
    box.model.script(
        "make a note file",
        box.model.calls(("shell", shell(console, "echo noted > note.txt"))),
        Answer(text="The note file is there."),
    )
    with open_page(browser, console, PHONE) as page:
        new = page.get_by_role("button", name="New session", exact=True)
        focus_by_keys(page, new)
        page.keyboard.press("Enter")
        message = page.get_by_role("textbox", name="Message", exact=True)
        expect(message).to_be_focused()
        page.keyboard.type("make a note file")
        page.keyboard.press("Enter")

        approval, link = waiting_approval(page)
        focus_by_keys(page, link, "Shift+Tab")
        page.keyboard.press("Enter")
        card = approval_card(page, approval)
        approve = card.get_by_role("button", name="Approve", exact=True)
        expect(approve).to_be_focused()
        assert shown_arguments(card) == json.loads(shell(console, "echo noted > note.txt"))
        page.keyboard.press("Space")
        expect(card).to_have_count(0)
        expect(page).to_have_title("boxmaker")
        # the last card gone, reading goes on at the view's heading (not lost to the page)
        expect(page.get_by_role("heading", name="Approvals", level=1)).to_be_focused()

        chat = page.get_by_role("link", name="Chat", exact=True)
        focus_by_keys(page, chat, "Shift+Tab")
        page.keyboard.press("Enter")
        log = conversation(page)
        expect(log.get_by_text("The note file is there.", exact=True)).to_be_visible()
        expect(log.get_by_text("turn ended", exact=True)).to_be_visible()
        assert (box.home / "workspace" / "note.txt").read_text() == "noted\n"


def shown_whole(page: Page, name: str, session: str, approval: str) -> None:
    """Wait until the view `name` shows what it was opened for."""
    if name == "Chat":
        sessions = page.get_by_role("complementary", name="Sessions")
        chosen = sessions.get_by_role("button", name=re.compile(re.escape(session)))
        expect(chosen).to_contain_text("private")
        expect(page.locator("#session-label")).to_contain_text("private")
    elif name == "Approvals":
        expect(approval_card(page, approval)).to_be_visible()
    elif name == "Ledger":
        page.get_by_role("button", name="Verify", exact=True).click()
        expect(page.locator("#verify-report")).to_contain_text(re.compile("^ok"))
        table = page.get_by_role("table", name="The newest ledger records")
        expect(table).to_contain_text("sort plan.md")
    elif name == "Grants":
        expect(page.get_by_role("table", name="Every grant")).to_contain_text("workspace-shell")
    elif name == "Memory":
        expect(page.get_by_role("table", name="Notes")).to_contain_text("the plumber comes")
    elif name == "Services":
        services = page.get_by_role("table", name="The box's services")
        expect(services.get_by_role("row").filter(has_text="loopd")).to_contain_text("running")
        expect(page.locator("#log-lines")).to_contain_text("INFO")


def test_pictures_of_every_view_at_desktop_and_phone_size(
    browser: Browser, console: Console
) -> None:
    box = console.box
    workspace = box.home / "workspace"
    (workspace / "plan.md").write_text("1. buy milk\n2. call the plumber\n")
    box.model.script(
        "tidy my plans",
        box.model.calls(
            ("read_file", args(path=str(workspace / "plan.md"))),
            ("memory", args(action="note", text="the plumber comes on Tuesday")),
            ("read_file", args(path="/etc/hostname")),
        ),
        box.model.calls(("shell", shell(console, "sort plan.md > sorted.md"))),
        Answer(text="Your plans are sorted."),
    )
    session = ""
    for size in (DESKTOP, PHONE):
        with open_page(browser, console, size) as page:
            if not session:
                session = new_session(page)
                send(page, "tidy my plans")
            else:  # a new context: the session is chosen from the list
                sessions = page.get_by_role("complementary", name="Sessions")
                sessions.get_by_role("button", name=re.compile(re.escape(session))).click()
            approval, _ = waiting_approval(page)
            for name in VIEWS:
                view(page, name)
                shown_whole(page, name, session, approval)
                wide = page.evaluate("document.documentElement.scrollWidth")
                assert wide <= size["width"], f"{name} at {size}: the page scrolls sideways"
                screenshot(page, name.lower())
    console.deny_all_pending()
