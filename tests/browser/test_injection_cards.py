"""Standing injection tests of the approval card (SPEC §16, issue 23 items 1 and 2), through
the real box and real Chromium: the red team's calls, made by the fake model under the starter
`workspace-shell` grant, which asks.

- A bidi-disguised `rm`: the console's card and `bxctl pending` both show the command escaped
  in its logical order, with the words naming each control; what runs after Approve is exactly
  what the card showed (the ledger's canonical arguments are the card's text read back).
- A tail hidden past 400 spaces: the card shows it in view, marked, and what runs is what it
  showed.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.console import Console, approval_card, view
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args
from tests.support.shown import as_json

pytestmark = pytest.mark.browser

BIDI = "ls . \u202e\u2066; rm -rf victim \u2069 \u2066#\u2069\u202c"  # drawn as `ls . # ; rm …`
BIDI_SHOWN = "ls . \\u202e\\u2066; rm -rf victim \\u2069 \\u2066#\\u2069\\u202c"
BIDI_WORDS = (
    "These arguments hold characters that change or hide how text is drawn, shown escaped: "
    "right-to-left override (U+202E), left-to-right isolate (U+2066), pop directional "
    "isolate (U+2069), pop directional formatting (U+202C)."
)


def ask(console: Console, session: str, message: str, command: str) -> dict[str, object]:
    """The model's shell call of `command` in the workspace, pending for the owner."""
    box = console.box
    call = args(command=command, cwd=str(box.home / "workspace"))
    box.model.script(message, box.model.calls(("shell", call)), Answer(text="Done."))
    console.api("POST", f"/api/sessions/{session}/messages", {"text": message})

    def waiting() -> dict[str, object] | None:
        return next((a for a in console.pending() if a["session"] == session), None)

    found: dict[str, object] = wait_until(waiting, 30, f"the pending call of {session}")
    return found


def approve_on_the_card(page: Page, approval: str) -> str:
    """The card's arguments as the owner reads them; then **Approve**."""
    view(page, "Approvals")
    card = approval_card(page, approval)
    shown = card.get_by_label(re.compile(r"^Every argument of ")).inner_text()
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(card).to_have_count(0)
    return shown


def ran_as_shown(console: Console, session: str, shown: str) -> None:
    """The call that ran is the one the card showed: its canonical arguments, read back."""

    def executed() -> list[dict[str, object]] | None:
        return console.ledger(session, "executed") or None

    wait_until(executed, 30, "the call to run")
    (decided,) = console.ledger(session, "decision")
    canonical = str(decided["arguments"])
    assert json.loads(canonical) == json.loads(as_json(shown))
    assert canonical == json.dumps(json.loads(as_json(shown)), separators=(",", ":"),
                                   ensure_ascii=False)  # fmt: skip


def test_a_bidi_disguised_rm_is_shown_in_logical_order_and_runs_exactly_as_shown(
    page: Page, console: Console
) -> None:
    box = console.box
    victim = box.home / "workspace" / "victim"
    victim.mkdir(mode=0o777)  # the sandbox's user may empty it (the test runs as root)
    victim.chmod(0o777)
    (victim / "precious.txt").write_text("keep")
    session = "web-inject-bidi"
    pending = ask(console, session, "list the folder, nicely", BIDI)

    printed = box.bxctl("pending")
    assert printed.returncode == 0, printed.stderr
    assert f'"command": "{BIDI_SHOWN}"' in printed.stdout
    assert f"  warning: {BIDI_WORDS}" in printed.stdout
    assert "\u202e" not in printed.stdout and "\u2066" not in printed.stdout

    view(page, "Approvals")
    card = approval_card(page, str(pending["approval"]))
    expect(card.get_by_role("note")).to_have_text(BIDI_WORDS)
    arguments = card.get_by_label(re.compile(r"^Every argument of "))
    expect(arguments).to_contain_text(f'"command": "{BIDI_SHOWN}"')
    shown = approve_on_the_card(page, str(pending["approval"]))
    ran_as_shown(console, session, shown)
    assert not victim.exists(), "the rm the card showed plainly ran"


def test_a_tail_past_400_spaces_is_in_view_and_runs_exactly_as_shown(
    page: Page, console: Console
) -> None:
    box = console.box
    command = "echo cleaning-cache" + " " * 400 + "; echo padded > padded.txt"
    session = "web-inject-padded"
    pending = ask(console, session, "clean the cache", command)
    view(page, "Approvals")
    card = approval_card(page, str(pending["approval"]))
    arguments = card.get_by_label(re.compile(r"^Every argument of "))
    tail = arguments.get_by_text(re.compile(r"; echo padded > padded\.txt"))
    expect(tail).to_be_in_viewport()
    expect(arguments).to_contain_text("echo cleaning-cache⟨400 spaces⟩; echo padded > padded.txt")
    wide, room = arguments.evaluate("node => [node.scrollWidth, node.clientWidth]")
    assert wide <= room
    expect(card.get_by_role("note")).to_contain_text("⟨400 spaces⟩")
    shown = approve_on_the_card(page, str(pending["approval"]))
    ran_as_shown(console, session, shown)
    assert (box.home / "workspace" / "padded.txt").read_text() == "padded\n"
