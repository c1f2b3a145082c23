"""brokerd runs MCP servers (SPEC §18.2, §18.6) as a real process: in their sandbox, per
session, decided, recorded, labelled; crashes, hangs and rug pulls."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.mcp_tools import CHANGED
from bxcore.wire.messages import Denied, Done, Failed, Pending, StateQuery
from tests.support.brokerd import args, call
from tests.support.daemons import init_home, running
from tests.support.mcp import fake, grant, trust, wait_listed


def ledger(home: Path) -> list[dict[str, object]]:
    lines = (home / "audit" / "ledger.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_source_runs_in_its_sandbox_labelled_and_recorded(short_tmp: Path) -> None:
    mail = short_tmp / "mail"
    home = init_home(short_tmp / "h", fake("mail", "mailbox", mail))
    grant(home, "mail-read", "mcp__mail__read_inbox", kind="source", class_="private")
    with running("brokerd", home) as brokerd:
        trust(home, "mail")
        done = call(brokerd, "s1", "c1", "mcp__mail__read_inbox", args(folder="in"))
        assert isinstance(done, Done) and done.ok, done
        assert "attacker@evil.example" in done.output
        assert done.label == Label(DataClass.PRIVATE, True)
        state = brokerd.ask(StateQuery("q", "s1"))
        assert state.label == Label(DataClass.PRIVATE, True)
    kinds = [(r["kind"], r.get("outcome")) for r in ledger(home) if r.get("call") == "c1"]
    assert kinds == [("decision", "allowed"), ("executed", None)]
    decision = next(r for r in ledger(home) if r.get("call") == "c1")
    assert decision["arguments"] == '{"folder":"in"}'


def test_a_sink_in_an_untrusted_session_waits_for_the_owner(short_tmp: Path) -> None:
    mail = short_tmp / "mail"
    home = init_home(short_tmp / "h", fake("mail", "mailbox", mail))
    grant(home, "mail-read", "mcp__mail__read_inbox", kind="source")
    grant(home, "mail-send", "mcp__mail__send_email", kind="sink")
    with running("brokerd", home) as brokerd:
        trust(home, "mail")
        call(brokerd, "s1", "c1", "mcp__mail__read_inbox", args(folder="in"))
        sent = call(brokerd, "s1", "c2", "mcp__mail__send_email", args(to="a@b.c", body="x"))
        assert isinstance(sent, Pending)
        clean = call(brokerd, "s2", "c1", "mcp__mail__send_email", args(to="a@b.c", body="y"))
        assert isinstance(clean, Done) and clean.ok and clean.output == "sent to a@b.c"
    lines = (mail / "sent.jsonl").read_text().splitlines()
    assert [json.loads(line)["body"] for line in lines] == ["y"]


def test_invalid_arguments_and_unpinned_tools_are_denied_and_nothing_runs(
    short_tmp: Path,
) -> None:
    mail = short_tmp / "mail"
    home = init_home(short_tmp / "h", fake("mail", "mailbox", mail))
    grant(home, "mail-all", "mcp__mail__*", kind="both")
    with running("brokerd", home) as brokerd:
        wait_listed(home, "mail")
        unpinned = call(brokerd, "s1", "c1", "mcp__mail__send_email", args(to="a", body="b"))
        assert unpinned == Denied(DenyReason.UNKNOWN_TOOL, CHANGED)
        trust(home, "mail")
        invalid = call(brokerd, "s1", "c2", "mcp__mail__send_email", args(to="a"))
        assert invalid == Denied(
            DenyReason.INVALID_ARGUMENTS, "invalid argument shape: 'body' is a required property"
        )
    assert not (mail / "sent.jsonl").exists()


def test_a_rug_pull_is_refused_until_the_owner_trusts_again(short_tmp: Path) -> None:
    state = short_tmp / "rug"
    home = init_home(short_tmp / "h", fake("rug", "rugpull", state))
    grant(home, "rug", "mcp__rug__*", kind="source")
    with running("brokerd", home) as brokerd:
        trust(home, "rug")  # what the first start listed
        first = call(brokerd, "s1", "c1", "mcp__rug__list_notes", "{}")
        assert isinstance(first, Failed) and first.message == CHANGED  # its own start changed
        again = call(brokerd, "s1", "c2", "mcp__rug__list_notes", "{}")
        assert again == Denied(DenyReason.UNKNOWN_TOOL, CHANGED)
        trust(home, "rug")
        trusted = call(brokerd, "s2", "c3", "mcp__rug__list_notes", "{}")
        assert isinstance(trusted, Done) and trusted.output == "a.md\nb.md"


def test_a_crash_is_an_error_and_the_next_call_starts_the_server_again(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h", fake("crash", "crashing"))
    grant(home, "crash", "mcp__crash__*", kind="source", untrusted=False)
    with running("brokerd", home) as brokerd:
        trust(home, "crash")
        before = call(brokerd, "s1", "c1", "mcp__crash__echo", args(text="a"))
        assert isinstance(before, Done)
        crashed = call(brokerd, "s1", "c2", "mcp__crash__crash", "{}")
        assert isinstance(crashed, Failed) and "failed during the call" in crashed.message
        after = call(brokerd, "s1", "c3", "mcp__crash__echo", args(text="b"))
        assert isinstance(after, Done) and after.ok and after.output.startswith("b ")
        failed = call(brokerd, "s1", "c4", "mcp__crash__fail", args(why="no disk"))
        assert isinstance(failed, Done) and not failed.ok and "no disk" in failed.output


def test_a_hanging_call_times_out_and_a_hanging_start_is_an_error(short_tmp: Path) -> None:
    config = fake("hang", "hanging", timeout_s=1) + fake("mute", "hanging-start")
    home = init_home(short_tmp / "h", config)
    grant(home, "hang", "mcp__hang__*", kind="source")
    with running("brokerd", home) as brokerd:
        trust(home, "hang")
        hung = call(brokerd, "s1", "c1", "mcp__hang__hang", "{}")
        assert isinstance(hung, Failed) and "timed out after 1 s" in hung.message
        echo = call(brokerd, "s1", "c2", "mcp__hang__echo", args(text="still here"))
        assert isinstance(echo, Done) and echo.output == "still here"


def test_per_session_servers_never_share_memory(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h", fake("mem", "memory"))
    grant(home, "mem", "mcp__mem__*", kind="both", untrusted=False)
    with running("brokerd", home) as brokerd:
        trust(home, "mem")
        call(brokerd, "s1", "c1", "mcp__mem__remember", args(text="secret of s1"))
        mine = call(brokerd, "s1", "c2", "mcp__mem__recall", "{}")
        theirs = call(brokerd, "s2", "c1", "mcp__mem__recall", "{}")
    assert isinstance(mine, Done) and isinstance(theirs, Done)
    assert json.loads(mine.output)["held"] == ["secret of s1"]
    assert json.loads(theirs.output)["held"] == []
    assert json.loads(mine.output)["pid"] == json.loads(theirs.output)["pid"]  # both pid 2 inside
    assert servers_left(home) == []  # brokerd stopped: no server process outlives it


def servers_left(home: Path) -> list[int]:
    """Processes whose command line names this test's home (a server bound a path in it)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(process.info["cmdline"] or [])
        if str(home) in line:
            found.append(process.info["pid"])
    return found


def test_a_server_cannot_read_outside_its_paths_or_reach_the_network(short_tmp: Path) -> None:
    secret = short_tmp / "secret.txt"
    secret.write_text("the owner's secret")
    home = init_home(short_tmp / "h", fake("probe", "prober"))
    # results trusted: the session's label stays clean, so a tool given a host runs unasked
    # (§20 asks for it in an untrusted session) and only the sandbox stands in its way
    grant(home, "probe", "mcp__probe__*", kind="source", untrusted=False)
    with running("brokerd", home) as brokerd:
        trust(home, "probe")
        read = call(brokerd, "s1", "c1", "mcp__probe__read_path", args(path=str(secret)))
        assert isinstance(read, Done) and not read.ok and "No such file" in read.output
        net = call(brokerd, "s1", "c2", "mcp__probe__connect", args(host="1.1.1.1", port=443))
        assert isinstance(net, Done) and not net.ok and "cannot connect" in net.output
        suid = call(brokerd, "s1", "c3", "mcp__probe__setuid_file", "{}")
        assert isinstance(suid, Done) and not suid.ok, suid  # the seccomp filter (§8.2)
        assert "Operation not permitted" in suid.output
        if os.geteuid() == 0:  # and a root brokerd's server is the tool user, not root
            assert f"uid {pwd.getpwnam('nobody').pw_uid}:" in suid.output
