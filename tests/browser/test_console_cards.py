"""The approval card tells the truth (issue 23 items 1 and 2, SPEC §12.2), in real Chromium on
the shared box: two real pending calls of the fake model hold a table of hostile strings (each
bidi control, zero-width characters, soft hyphen, U+2028, combining marks after `;` and after
`e`, 400 spaces, a newline inside a JSON string; a 10,000-character argument and its diff).
At 1280 and 390 px each card's text, as the owner reads it, holds every character of the
arguments in logical order, escaped where invisible; its words name them; nothing is wider
than its box; "Show all" reveals the rest. Then the same rule in every other view.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, ViewportSize, expect

from bxcore.shown_arguments import shown_arguments, shown_text
from bxcore.visible import visible
from tests.browser.console import (
    DESKTOP,
    PHONE,
    Console,
    approval_card,
    conversation,
    open_page,
    screenshot,
    view,
)
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args
from tests.support.shown import as_json

pytestmark = pytest.mark.browser

BIDI = [chr(code) for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]]
INVISIBLE = [chr(code) for code in range(0x200B, 0x2010)] + ["\u2060", "\ufeff", "\u00ad"]
# Each hostile character between < and >, so the test finds each where it belongs.
TABLE = " ".join(f"<{char}>" for char in [*BIDI, *INVISIBLE, "\u2028"])
COMMAND = (
    f"echo {TABLE} ;\u0338 cafe\u0301 && echo cleaning-cache"
    + " " * 400
    + "; echo tail > padded.txt\necho second line"
)
LONG = "start " + "0123456789" * 1000 + " \u2067end"  # the RLI is in the part cut away
CUT_WORDS = (
    "An argument is longer than 2,000 characters: press Show all to read the rest before "
    "you answer."
)


def box_of(card: Locator) -> Locator:
    return card.get_by_label(re.compile(r"^Every argument of "))


def shown_whole(box: Locator) -> str:
    """The box's text as the owner reads it, once every "Show all" in it is pressed."""
    more = box.get_by_role("button", name=re.compile(r"^Show all: "))
    while more.count():
        more.first.click()
    return box.inner_text()


def fits(page: Page, box: Locator, size: ViewportSize) -> None:
    wide, room = box.evaluate("node => [node.scrollWidth, node.clientWidth]")
    assert wide <= room, f"at {size['width']} px the box is {wide} px wide in {room}"
    assert page.evaluate("document.documentElement.scrollWidth") <= size["width"]


def words(card: Locator) -> str:
    return " ".join(note.inner_text() for note in card.get_by_role("note").all())


def make_pending(console: Console) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two pending calls: a shell holding the table, and a write_file of LONG under a
    grant that asks, over a file that exists."""
    box = console.box
    asked = box.home / "workspace" / "asked"
    asked.mkdir(exist_ok=True)
    (asked / "long.txt").write_text("old\n")
    grant = {"id": "cards-ask", "tool": "write_file", "mode": "ask", "path": str(asked)}
    console.api("POST", "/api/grants", grant)
    shell = args(command=COMMAND, cwd=str(box.home / "workspace"))
    write = args(path=str(asked / "long.txt"), content=LONG)
    box.model.script("cards: the table", box.model.calls(("shell", shell)), Answer("shown"))
    box.model.script("cards: a long one", box.model.calls(("write_file", write)), Answer("ok"))
    console.api("POST", "/api/sessions/web-cards-table/messages", {"text": "cards: the table"})
    console.api("POST", "/api/sessions/web-cards-long/messages", {"text": "cards: a long one"})

    def ready() -> dict[str, dict[str, Any]] | None:
        found = {a["tool"]: a for a in console.pending() if a["session"].startswith("web-cards-")}
        return found if len(found) == 2 else None

    found: dict[str, dict[str, Any]] = wait_until(ready, 30, "the two pending calls")
    return found["shell"], found["write_file"]


def test_each_card_shows_every_character_in_order_escaped_where_invisible_at_both_sizes(
    browser: Browser, console: Console
) -> None:
    shell, write = make_pending(console)
    try:
        for size in (DESKTOP, PHONE):
            with open_page(browser, console, size) as page:
                view(page, "Approvals")
                shell_card(page, shell, size)
                write_card(page, write, size)
                screenshot(page, "approvals-hostile")
                if size is DESKTOP:
                    chat_line(page, console, shell)
    finally:
        console.deny_all_pending()
        console.api("DELETE", "/api/grants/cards-ask")


def shell_card(page: Page, shell: dict[str, Any], size: ViewportSize) -> None:
    card = approval_card(page, shell["approval"])
    box = box_of(card)
    expect(box).to_be_visible()
    text = box.inner_text()
    assert text == shown_arguments(shell["arguments"]).text  # as bxctl draws it
    assert json.loads(as_json(text)) == json.loads(shell["arguments"]), "nothing lost"
    assert visible(text, newlines=True) == text, "nothing invisible drawn raw"
    for char in [*BIDI, *INVISIBLE, "\u2028"]:
        assert f"<\\u{ord(char):04x}>" in text or f"<\\x{ord(char):02x}>" in text
    assert ";\\u0338 cafe\u0301 " in text  # no base: escaped; on a letter: kept
    assert "cleaning-cache⟨400 spaces⟩; echo tail > padded.txt\\necho second line" in text
    said = words(card)
    assert said == " ".join(shown_arguments(shell["arguments"]).warnings())
    for name in ("right-to-left override (U+202E)", "zero width space (U+200B)",
                 "soft hyphen (U+00AD)", "line separator (U+2028)",
                 "combining mark without a base (U+0338)", "⟨400 spaces⟩"):  # fmt: skip
        assert name in said
    fits(page, box, size)
    expect(card.get_by_role("button", name="Approve", exact=True)).to_be_visible()


def write_card(page: Page, write: dict[str, Any], size: ViewportSize) -> None:
    card = approval_card(page, write["approval"])
    box = box_of(card)
    more = box.get_by_role("button", name=f"Show all: {len(LONG) - 2000:,} more characters")
    expect(more).to_be_visible()
    assert "\u2067" not in box.inner_text() and "end" not in box.inner_text()
    said = words(card)
    assert "right-to-left isolate (U+2067)" in said, "the part cut away is named too"
    assert CUT_WORDS in said
    fits(page, box, size)
    diff = card.get_by_label("What would change in the file")
    fits(page, diff, size)
    expect(diff.get_by_role("button", name=re.compile("^Show all: "))).to_have_count(1)
    more.focus()
    page.keyboard.press("Enter")  # the keyboard alone reveals it
    expect(more).to_have_count(0)
    expect(box).to_be_focused()
    text = box.inner_text()
    assert json.loads(as_json(text)) == json.loads(write["arguments"])
    assert "0123456789 \\u2067end" in text
    fits(page, box, size)
    whole = shown_whole(diff)
    assert whole == shown_text(write["preview"]).text
    assert "+start 0123" in whole and "9 \\u2067end" in whole
    fits(page, diff, size)


def chat_line(page: Page, console: Console, shell: dict[str, Any]) -> None:
    """The Chat view draws the tool_called line's arguments as the card does, with its words."""
    page.goto(f"{console.origin}/#chat/web-cards-table")
    log = conversation(page)
    box = log.get_by_label("Arguments of shell")
    expect(box).to_be_visible()
    assert box.inner_text() == shown_arguments(shell["arguments"]).text
    call = log.get_by_role("listitem").filter(has=page.get_by_label("Arguments of shell"))
    assert call.get_by_role("note").inner_text() == " ".join(
        shown_arguments(shell["arguments"]).warnings()
    )
    fits(page, box, DESKTOP)


def no_raw_hidden_text(page: Page) -> None:
    text = page.locator("main").inner_text()
    assert visible(text, newlines=True) == text, [c for c in text if visible(c) != c]


HOSTILE = "tidy \u202eup\u202c \u200bnow\u2066#\u2069 ;\u0338"
SHOWN = visible(HOSTILE)


def test_every_other_view_shows_foreign_text_through_the_same_rule(
    page: Page, console: Console
) -> None:
    box = console.box
    note = f"a note {HOSTILE}"
    grant = {"id": "cards-note", "tool": "read_file", "mode": "deny", "path": "/nonexistent",
             "note": note}  # fmt: skip
    console.api("POST", "/api/grants", grant)
    jobs = box.home / "jobs"
    jobs.mkdir(mode=0o700, exist_ok=True)
    (jobs / "cards-job.toml").write_text(f'every = "366d"\nprompt = {json.dumps(HOSTILE)}\n')
    box.model.script(HOSTILE, Answer(f"done: {HOSTILE}"))
    box.model.script(
        "cards: remember",
        box.model.calls(("memory", args(action="note", text=f"note {HOSTILE}"))),
        Answer(f"said {HOSTILE}"),
    )
    with (box.home / "logs" / "memoryd.log").open("a") as log:
        log.write(f"a log line {HOSTILE}\n")
    console.api("POST", "/api/sessions/web-cards-views/messages", {"text": "cards: remember"})

    page.goto(f"{console.origin}/#chat/web-cards-views")
    talk = conversation(page)
    expect(talk).to_contain_text(f"said {SHOWN}")  # an assistant's text
    expect(talk.get_by_label("Arguments of memory")).to_contain_text(f"note {SHOWN}")
    no_raw_hidden_text(page)

    view(page, "Memory")
    expect(page.get_by_role("table", name="Notes")).to_contain_text(f"note {SHOWN}")
    no_raw_hidden_text(page)

    view(page, "Ledger")
    ledger = page.get_by_role("table", name="The newest ledger records")
    expect(ledger).to_contain_text(f"note {SHOWN}")  # a record's field
    no_raw_hidden_text(page)

    view(page, "Grants")
    grants = page.get_by_role("table", name="Every grant")
    expect(grants).to_contain_text(visible(note))  # a grant's note
    no_raw_hidden_text(page)

    view(page, "Services")
    page.locator("#log-service").select_option("memoryd")
    expect(page.locator("#log-lines")).to_contain_text(f"a log line {SHOWN}")  # a log line
    no_raw_hidden_text(page)

    view(page, "Jobs")
    row = (
        page.get_by_role("table", name="Every job")
        .get_by_role("row")
        .filter(has=page.get_by_role("rowheader", name="cards-job", exact=True))
    )
    row.get_by_role("button", name="Run now", exact=True).click()
    page.locator("#jobs-started").get_by_role("link").click()
    talk = conversation(page)
    expect(talk).to_contain_text(SHOWN)  # the job's prompt, as the run's owner message
    expect(talk).to_contain_text(f"done: {SHOWN}")
    no_raw_hidden_text(page)
    (jobs / "cards-job.toml").unlink()
    console.api("DELETE", "/api/grants/cards-note")
