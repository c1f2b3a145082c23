"""Argument roles through the whole box (SPEC §18.3, §20): the owner trusts the mailbox with
`bxctl mcp trust --role`, the role is pinned and brokerd decides by it, and a call that asks
says in `bxctl pending --json` which value did not come from the owner and which call's
result (of which tool) it was first seen in.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.model_server import Answer
from tests.support.brokerd import args, ledger_records
from tests.support.e2e import UpBox, box_up, decisions
from tests.support.mcp import fake, grant, wait_listed
from tests.support.owner import Reader

READ = "mcp__mailbox__read_inbox"
SEND = "mcp__mailbox__send_email"


def with_mailbox(home: Path) -> None:
    with (home / "config.toml").open("a") as config:
        config.write("\n" + fake("mailbox", "mailbox", home.parent / "mail"))
    grant(home, "mail-read", READ, kind="source", class_="private")
    grant(
        home, "mail-send", SEND, kind="sink", class_="private", match={"to": "glob:*@example.com"}
    )


@pytest.fixture(scope="module")
def box() -> Iterator[UpBox]:
    with box_up(before_up=with_mailbox) as box:
        wait_listed(box.home, "mailbox")
        yield box


def test_a_role_the_owner_gives_is_pinned_and_a_call_it_makes_ask_names_where_its_value_came_from(
    box: UpBox,
) -> None:
    trusted = box.bxctl(
        "mcp", "trust", "mailbox", "--yes", "--json", "--role", "send_email.body=target"
    )
    assert trusted.returncode == 0, trusted.stderr
    send = next(t for t in json.loads(trusted.stdout)["tools"] if t["name"] == "send_email")
    assert {r["argument"]: (r["role"], r["source"]) for r in send["roles"]} == {
        "to": ("target", "proposed"),
        "body": ("target", "yours"),
    }
    listed = json.loads(box.bxctl("mcp", "list", "--json").stdout)
    assert listed[0]["roles"]["send_email"] == {"body": "target", "to": "target"}

    # The owner named the address; the body the model sends is the mail's own words.
    message = "read my inbox and send boss@example.com what it says"
    mail = args(to="boss@example.com", body="Numbers attached.")
    box.model.script(
        message,
        box.model.calls((READ, args(folder="in"))),
        box.model.calls((SEND, mail)),
        Answer(text="asked"),
    )
    with box.bxctl_process("chat", "--session", "roles-1", message) as chat:
        assert chat.stdout is not None
        out = Reader(chat.stdout.fileno(), chat)
        approval = out.expect(r"approval ([a-z2-9]{8}): ").group(1)
        out.expect(r"/body = \"Numbers attached.\": NOT FROM YOU: first seen in the result of")
        pending = box.bxctl("pending", "--json")
        assert pending.returncode == 0, pending.stderr
        denied = box.bxctl("deny", approval)
        assert denied.returncode == 0, denied.stderr
        assert out.drain() == 0, out.everything
    (card,) = [a for a in json.loads(pending.stdout) if a["approval"] == approval]
    (read,) = [
        r["call"]
        for r in ledger_records(box.home)
        if r["kind"] == "decision" and r["session"] == "roles-1" and r["tool"] == READ
    ]
    assert card["why"] == "the session holds untrusted content"
    assert card["targets"] == [
        {"at": "/body", "value": '"Numbers attached."', "origin": f"untrusted: call {read}",
         "tool": READ},
        {"at": "/to", "value": '"boss@example.com"', "origin": "owner"},
    ]  # fmt: skip
    assert decisions(box, "roles-1") == [(READ, "allowed", None), (SEND, "pending", None)]
    pretty = box.bxctl("pending")  # nothing waits now
    assert "no approvals pending" in pretty.stdout
