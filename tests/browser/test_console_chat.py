"""Chat in the browser (SPEC §12.2): a whole turn sent from the page and watched live, the
agent's text shown as text however much it looks like HTML, and **Stop** ending a turn whose
model is slow. Each test talks in a new session of its own, in the shared box (`conftest.py`).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from playwright.sync_api import Dialog, Page, expect

from tests.browser.console import Console, conversation, new_session, screenshot, send
from tests.fakes.model_server import Answer
from tests.support.brokerd import args

pytestmark = pytest.mark.browser


def test_a_whole_turn_sent_from_the_page_shows_each_tool_call_live_then_the_answer(
    page: Page, console: Console
) -> None:
    box = console.box
    workspace = box.home / "workspace"
    (workspace / "todo.md").write_text("buy milk\n")
    todo = args(path=str(workspace / "todo.md"))
    note = args(action="note", text="the owner needs milk")
    # The answer waits (5 s: a busy machine checks slowly): the calls' outcomes must be on
    # the page while the turn still runs.
    box.model.script(
        "what is on my list?",
        box.model.calls(("read_file", todo), ("memory", note)),
        Answer(text="Your list says: buy milk.", delay_s=5.0),
    )
    session = new_session(page)
    send(page, "what is on my list?")

    log = conversation(page)
    expect(log.get_by_text("what is on my list?", exact=True)).to_be_visible()
    read = log.get_by_role("listitem").filter(has=page.get_by_label("Arguments of read_file"))
    expect(read.get_by_label("Arguments of read_file")).to_have_text(
        json.dumps(json.loads(todo), indent=2)
    )
    expect(read).to_contain_text("done, 9 B")
    noted = log.get_by_role("listitem").filter(has=page.get_by_label("Arguments of memory"))
    expect(noted).to_contain_text('"action": "note"')
    expect(noted).to_contain_text("done,")
    # live: both outcomes shown while the model is still writing its answer
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_enabled()
    expect(log.get_by_text("Your list says: buy milk.")).to_have_count(0)
    expect(log.get_by_text("turn ended", exact=True)).to_have_count(0)

    expect(log.get_by_text("Your list says: buy milk.", exact=True)).to_be_visible(timeout=15_000)
    expect(log.get_by_text("turn ended", exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_disabled()
    sessions = page.get_by_role("complementary", name="Sessions")
    expect(sessions.get_by_role("button", name=re.compile(re.escape(session)))).to_contain_text(
        "private"
    )  # it read a private file: the session's label says so, in the list and over the talk
    expect(page.locator("#session-label")).to_have_text("private")
    screenshot(page, "chat-turn")


def test_an_agent_message_that_looks_like_html_is_shown_as_text_and_runs_nothing(
    page: Page, console: Console
) -> None:
    box = console.box
    evil = '<img src=x onerror="alert(1)"> and <script>alert(2)</script> <b>bold</b>'
    path = "/tmp/<img src=y onerror=alert(3)>"
    box.model.script(
        "say something odd",
        box.model.calls(("read_file", args(path=path))),
        Answer(text=evil),
    )
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    new_session(page)
    send(page, "say something odd")

    log = conversation(page)
    expect(log.get_by_text(evil, exact=True)).to_be_visible()
    expect(log.get_by_text("turn ended", exact=True)).to_be_visible()
    expect(log.get_by_label("Arguments of read_file")).to_contain_text(path)
    expect(log).to_contain_text("denied: no grant allows this call")
    assert log.locator("img, script, b").count() == 0, "text became elements"
    page.wait_for_timeout(300)  # an image's onerror would have fired by now
    assert dialogs == []


def test_stop_ends_a_turn_whose_model_is_slow_at_once(page: Page, console: Console) -> None:
    box = console.box
    box.model.script("think for a long time", Answer(text="too late", delay_s=30))
    session = new_session(page)
    send(page, "think for a long time")
    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_enabled()
    box.model.fake.wait_for(1)  # the model has the request in hand

    pressed = time.monotonic()
    stop.click()
    log = conversation(page)
    expect(log.get_by_text("turn stopped by you", exact=True)).to_be_visible(timeout=3_000)
    took = time.monotonic() - pressed
    expect(stop).to_be_disabled()
    assert took < 3, f"Stop took {took:.1f} s"

    history = console.api("GET", f"/api/sessions/{session}/history")["events"]
    assert history[-1]["event"] == {"kind": "turn_end", "reason": "cancelled"}
    expect(log.get_by_text("too late")).to_have_count(0)
