"""`bxctl explain` for MCP tools (SPEC §13, §18.5), against a real brokerd running the fake
mailbox: what it would decide and why — unpinned, matched or not by `[match]`, a sink asked in
an untrusted session, invalid arguments with the validator's detail — running nothing and
recording nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.brokerd import args, call
from tests.support.cli import bxctl
from tests.support.daemons import init_home, running
from tests.support.mcp import fake, trust, wait_listed


@pytest.fixture
def mailbox(short_tmp: Path) -> Iterator[tuple[Path, Any]]:
    """A home with the fake mailbox and two grants written by `bxctl grant add`; brokerd up."""
    home = init_home(short_tmp / "h", fake("mail", "mailbox", short_tmp / "mail"))
    for extra in (
        ["mail-read", "--tool", "mcp__mail__read_inbox", "--kind", "source", "--class", "public"],
        ["mail-send", "--tool", "mcp__mail__send_email", "--kind", "sink", "--class", "private",
         "--match", "to=glob:*@example.org"],
    ):  # fmt: skip
        added = bxctl(home, "grant", "add", *extra)
        assert added.returncode == 0, added.stderr
    with running("brokerd", home) as brokerd:
        yield home, brokerd


def explain(home: Path, session: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = bxctl(home, "explain", "--session", session, tool, json.dumps(arguments), "--json")
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


def test_explain_decides_mcp_calls_as_brokerd_would_and_runs_nothing(
    mailbox: tuple[Path, Any], short_tmp: Path
) -> None:
    home, brokerd = mailbox
    wait_listed(home, "mail", timeout=60)  # a loaded CI machine starts the probe slowly
    unpinned = explain(home, "s1", "mcp__mail__read_inbox", {"folder": "in"})
    assert unpinned["verdict"] == "denied" and unpinned["reason"] == "unknown_tool"
    trust(home, "mail")

    read = explain(home, "s1", "mcp__mail__read_inbox", {"folder": "in"})
    assert (read["verdict"], read["winner"]) == ("allowed", "mail-read")
    assert "winner: mail-read (allow, class public, kind source)" in read["steps"]

    send = {"to": "kyle@example.org", "body": "hi"}
    clean = explain(home, "s1", "mcp__mail__send_email", send)
    assert (clean["verdict"], clean["winner"]) == ("allowed", "mail-send")
    elsewhere = explain(home, "s1", "mcp__mail__send_email", send | {"to": "x@evil.example"})
    assert (elsewhere["verdict"], elsewhere["reason"]) == ("denied", "no_grant")
    invalid = explain(home, "s1", "mcp__mail__send_email", {"to": "kyle@example.org"})
    assert (invalid["verdict"], invalid["reason"]) == ("denied", "invalid_arguments")
    assert any("'body' is a required property" in step for step in invalid["steps"]), invalid

    before = (home / "audit" / "ledger.jsonl").read_bytes()
    assert not (short_tmp / "mail" / "sent.jsonl").exists()  # explain ran nothing

    done = call(brokerd, "s1", "c1", "mcp__mail__read_inbox", args(folder="in"))
    assert done.ok, done  # the session is now untrusted: a sink asks the owner
    asked = explain(home, "s1", "mcp__mail__send_email", send)
    assert (asked["verdict"], asked["winner"]) == ("ask", "mail-send")
    text = bxctl(home, "explain", "--session", "s1", "mcp__mail__send_email", json.dumps(send))
    assert text.stdout.splitlines()[0] == "mcp__mail__send_email: ask"
    assert len((home / "audit" / "ledger.jsonl").read_bytes()) > len(before)  # the call's only
    recorded = (home / "audit" / "ledger.jsonl").read_text().splitlines()
    assert all(json.loads(line).get("tool") != "mcp__mail__send_email" for line in recorded)
