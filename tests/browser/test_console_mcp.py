"""MCP tools in the browser (SPEC §12.2, §18): a box with the fake mailbox and rug-pull servers,
trusted with `bxctl mcp trust --yes`. An MCP sink asked in a session the inbox made untrusted
is answered from its card, which names the tool and its grant and shows every argument, and
runs exactly as shown; a server whose tools changed after the owner trusted them is flagged in
**Services** with the command that trusts it again.

This module has a box of its own (the shared one has no `[[mcp]]`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.console import (
    DESKTOP,
    Console,
    approval_card,
    console_of,
    conversation,
    new_session,
    open_page,
    send,
    view,
)
from tests.browser.test_console_approvals import shown_arguments, waiting_approval
from tests.fakes.model_server import Answer
from tests.support.e2e import UpBox, box_up
from tests.support.mcp import fake, grant, wait_listed

pytestmark = pytest.mark.browser

READ = "mcp__mailbox__read_inbox"
SEND = "mcp__mailbox__send_email"
RUG = "mcp__rug__list_notes"


def with_servers(home: Path) -> None:
    with (home / "config.toml").open("a") as config:
        config.write("\n" + fake("mailbox", "mailbox", home.parent / "mail"))
        config.write(fake("rug", "rugpull", home.parent / "rug"))
        config.write(fake("poison", "poisoned"))
    grant(home, "mail-read", READ, kind="source", class_="private")
    to_example = {"to": "glob:*@example.com"}
    grant(home, "mail-send", SEND, kind="sink", class_="private", match=to_example)
    grant(home, "rug", "mcp__rug__*", kind="source", untrusted=False)


@pytest.fixture(scope="module")
def mcp_console() -> Iterator[Console]:
    with box_up(before_up=with_servers) as box:
        for name in ("mailbox", "rug", "poison"):
            wait_listed(box.home, name)
            trusted = box.bxctl("mcp", "trust", name, "--yes")
            assert trusted.returncode == 0, trusted.stderr
        with console_of(box) as console:
            yield console


@pytest.fixture
def mcp_page(browser: Browser, mcp_console: Console) -> Iterator[Page]:
    with open_page(browser, mcp_console, DESKTOP) as page:
        yield page


def sent(box: UpBox) -> list[dict[str, Any]]:
    path = box.home.parent / "mail" / "sent.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [{k: v for k, v in json.loads(line).items() if k != "pid"} for line in lines]


def test_an_mcp_sink_is_answered_on_its_card_and_runs_exactly_as_shown(
    mcp_page: Page, mcp_console: Console
) -> None:
    box, page = mcp_console.box, mcp_page
    mail = {"to": "bob@example.com", "body": "Lunch at noon?\nBring the notes."}
    call = json.dumps(mail)
    box.model.script(  # the inbox (untrusted) first: then a sink waits for the owner
        "mail bob",
        box.model.calls((READ, json.dumps({"folder": "in"}))),
        box.model.calls((SEND, call)),
        Answer(text="Sent."),
    )
    session = new_session(page)
    send(page, "mail bob")

    approval, link = waiting_approval(page)
    link.click()
    card = approval_card(page, approval)
    expect(card).to_be_visible()
    for shown in (session, SEND, "mail-send"):
        expect(card).to_contain_text(shown)
    assert shown_arguments(card) == mail  # every argument, the body's newline kept
    assert sent(box) == []  # nothing runs while the owner looks
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_have_count(0)

    view(page, "Chat")
    expect(conversation(page).get_by_text("Sent.", exact=True)).to_be_visible()
    assert sent(box) == [mail]
    decided = mcp_console.ledger(session, "decision")
    assert [(r["tool"], r["outcome"]) for r in decided] == [(READ, "allowed"), (SEND, "pending")]
    assert json.loads(decided[1]["arguments"]) == mail


def test_a_server_whose_tools_changed_is_flagged_with_how_to_trust_it_again(
    mcp_page: Page, mcp_console: Console
) -> None:
    box, page = mcp_console.box, mcp_page
    view(page, "Services")
    servers = page.locator("#mcp-table")
    expect(servers.get_by_role("row").filter(has_text="rug")).to_contain_text("ok")
    expect(servers.get_by_role("img", name="flagged")).to_have_count(0)

    # The session's own server starts with a changed description (the rug pull).
    box.model.script("list my notes", box.model.calls((RUG, "{}")), Answer(text="hm"))
    view(page, "Chat")
    new_session(page)
    send(page, "list my notes")
    expect(conversation(page).get_by_text("hm", exact=True)).to_be_visible()

    view(page, "Services")
    row = servers.get_by_role("row").filter(has_text="rug")
    expect(row.get_by_role("img", name="flagged")).to_be_visible()
    expect(row).to_contain_text("changed")
    expect(row).to_contain_text("list_notes")
    expect(page.locator("#mcp-flags")).to_contain_text(re.compile(r"rug.*bxctl mcp trust rug"))


def test_a_card_says_which_target_was_not_the_owners_and_which_result_it_came_from(
    mcp_page: Page, mcp_console: Console
) -> None:
    box, page = mcp_console.box, mcp_page
    reply = {"to": "boss@example.com", "body": "Got it."}  # the address is the mail's, not yours
    box.model.script(
        "answer the mail about Q3",
        box.model.calls((READ, json.dumps({"folder": "in"}))),
        box.model.calls((SEND, json.dumps(reply))),
        Answer(text="Answered."),
    )
    session = new_session(page)
    send(page, "answer the mail about Q3")
    approval, link = waiting_approval(page)
    (read,) = [r["call"] for r in mcp_console.ledger(session, "decision") if r["tool"] == READ]
    said = (
        f'/to = "boss@example.com": NOT FROM YOU: first seen in the result of call {read} ({READ})'
    )
    in_chat = conversation(page).get_by_role("list", name=f"Where each target of {SEND} came from")
    expect(in_chat).to_have_text(said)

    link.click()
    card = approval_card(page, approval)
    targets = card.get_by_role("list", name=re.compile(r"^Where each target of "))
    expect(targets).to_have_text(said)
    expect(card.get_by_role("heading", name="Where each target came from")).to_be_visible()
    (info,) = [a for a in mcp_console.pending() if a["approval"] == approval]
    assert info["targets"] == [
        {"at": "/to", "value": '"boss@example.com"', "origin": f"untrusted: call {read}",
         "tool": READ}
    ]  # fmt: skip
    card.get_by_role("button", name="Deny", exact=True).click()
    expect(card).to_have_count(0)
    assert reply not in sent(box)


def roles_pinned(box: UpBox, tool: str) -> dict[str, str]:
    pins = json.loads((box.home / "mcp" / "mailbox.pins.json").read_text())
    roles: dict[str, str] = pins["tools"][tool]["roles"]
    return roles


def test_services_shows_each_arguments_role_and_trusts_with_the_ones_the_owner_chose(
    mcp_page: Page, mcp_console: Console
) -> None:
    box, page = mcp_console.box, mcp_page
    view(page, "Services")
    roles = page.get_by_role("list", name="Roles pinned")
    expect(roles).to_contain_text("mailbox/send_email: body content, to target")
    expect(roles).to_contain_text("mailbox/read_inbox: folder target")

    page.get_by_role("button", name="Review mailbox", exact=True).click()
    review = page.get_by_role("region", name="Tools of mailbox")
    expect(review).to_be_visible()
    tool = review.get_by_role("article", name="Tool send_email")
    expect(tool).to_contain_text("pinned, unchanged")
    expect(tool.get_by_label("The definition of send_email")).to_contain_text("Send one mail.")
    arguments = tool.get_by_role("table", name="Arguments of send_email")
    expect(arguments.get_by_role("row").filter(has_text="to")).to_contain_text(
        "as you confirmed it: where it goes or what it affects"
    )
    body = tool.get_by_role("combobox", name="Role of send_email.body")
    expect(body).to_have_value("content")

    body.select_option("target")
    review.get_by_role("button", name="Trust mailbox", exact=True).click()
    expect(review.get_by_role("alert")).to_have_text("Pinned 2 tools of mailbox.")
    assert roles_pinned(box, "send_email") == {"body": "target", "to": "target"}
    expect(roles).to_contain_text("mailbox/send_email: body target, to target")
    expect(tool.get_by_role("combobox", name="Role of send_email.body")).to_have_value("target")

    # Back as it was, for the other tests of this box: the same path, the other way.
    tool.get_by_role("combobox", name="Role of send_email.body").select_option("content")
    review.get_by_role("button", name="Trust mailbox", exact=True).click()
    expect(roles).to_contain_text("mailbox/send_email: body content, to target")
    assert roles_pinned(box, "send_email") == {"body": "content", "to": "target"}


def test_review_shows_a_poisoned_description_escaped_and_names_what_it_hides(
    mcp_page: Page,
) -> None:
    page = mcp_page
    view(page, "Services")
    page.get_by_role("button", name="Review poison", exact=True).click()
    tool = page.get_by_role("region", name="Tools of poison").get_by_role(
        "article", name="Tool add"
    )
    definition = tool.get_by_label("The definition of add")
    expect(definition).to_contain_text("\\u202e <IMPORTANT>")
    assert "\u202e" not in definition.inner_text()
    expect(tool.get_by_role("note")).to_contain_text("right-to-left override (U+202E)")
    expect(tool.get_by_role("combobox", name="Role of add.sidenote")).to_have_value("target")
