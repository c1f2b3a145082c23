"""brokerd's decisions over its real broker socket (SPEC §3.5, §5, §7, I1, I4).

Each deny reason that a single call can reach is reached through the socket, with the exact
bytes the caller reads and the decision the ledger keeps; a failing ledger denies every call
and runs nothing; grant files are seen at the next decision, and an invalid one never matches.
(`owner_denied` and `approval_expired` are reached in test_brokerd_approvals.py.)
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import (
    Absorb,
    Denied,
    Done,
    Explain,
    GrantList,
    GrantsReload,
    PendingList,
    PendingQuery,
    Ping,
    Pong,
    State,
    StateQuery,
)
from tests.support.brokerd import (
    args,
    call,
    call_raw,
    denial,
    ledger_records,
    records_of,
    short_folder,
    state_file,
    write_grant,
)
from tests.support.daemons import Daemon, init_home, running, tool_owned

M5B_DETAIL = "invalid argument shape: unknown field `file`, expected `text`"


@pytest.fixture(scope="module")
def brokerd() -> Iterator[Daemon]:
    with short_folder() as tmp:
        home = init_home(tmp / "h")  # the data folders are beside it: no tool reaches into it
        (tmp / "vault").mkdir()
        (tmp / "vault" / "key.txt").write_text("the launch code")
        write_grant(
            home,
            "vault-read",
            tool="read_file",
            mode="allow",
            path=f"{tmp}/vault",
            class_="secret",
        )
        # An explicit deny wins over a more specific allow (§5.2 step 4).
        (tmp / "locked" / "inner").mkdir(parents=True)
        tool_owned(tmp / "locked")  # writable by the tools: only the deny keeps it empty
        write_grant(home, "locked", tool="write_file", mode="deny", path=f"{tmp}/locked")
        write_grant(
            home, "locked-inner", tool="write_file", mode="allow", path=f"{tmp}/locked/inner"
        )
        with running("brokerd", home) as daemon:
            yield daemon


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def only_decision(home: Path, session: str, call_id: str) -> dict[str, object]:
    """The call's one record: a decision (a denied call is never executed)."""
    found = records_of(home, session, call_id)
    assert [r["kind"] for r in found] == ["decision"], found
    return found[0]


# --- every deny reason one call can reach --------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "tool", "arguments", "detail"),
    [
        ("unknown_tool", "launch_missiles", '{"at":"dawn"}', None),
        ("unknown_tool", "spawn", '{"task":"x"}', None),  # loopd's alone: brokerd never runs it
        (
            "invalid_arguments",
            "memory",
            '{"action":"note","file":"notes.md","text":"x"}',
            M5B_DETAIL,
        ),
        (
            "invalid_arguments",
            "read_file",
            "[1]",
            "invalid argument shape: invalid type: array, expected an object",
        ),
        (
            "invalid_arguments",
            "write_file",
            '{"path":"/a/../b","content":""}',
            'invalid path: "/a/../b"',
        ),
        (
            "invalid_arguments",
            "shell",
            '{"command":"id","cwd":3}',
            "invalid argument shape: invalid type: integer `3`, expected a string",
        ),
        (
            "invalid_arguments",
            "http_fetch",
            '{"url":"http://example.com/"}',
            'invalid url: "http://example.com/"',
        ),
        (
            "invalid_arguments",
            "write_file",
            '{"path":"/a","content":"\\ud800"}',
            "invalid argument shape: lone surrogate in hex escape",
        ),
        ("no_grant", "read_file", '{"path":"/etc/passwd"}', None),
        ("no_grant", "http_fetch", '{"url":"https://example.com/"}', None),
        ("no_grant", "write_file", '{"path":"/tmp/elsewhere.txt","content":"x"}', None),
    ],
)
def test_a_denied_call_reads_exactly_its_reason_and_the_ledger_keeps_the_decision(
    brokerd: Daemon, reason: str, tool: str, arguments: str, detail: str | None
) -> None:
    session = f"deny-{uuid.uuid4().hex}"
    answer = call_raw(brokerd.home, session, "c1", tool, arguments)
    expected = {"type": "tool_response", "id": "r1", "outcome": "denied", "reason": reason}
    if detail is not None:
        expected["detail"] = detail
    assert answer == json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode()
    record = only_decision(brokerd.home, session, "c1")
    assert record["outcome"] == "denied" and record["reason"] == reason
    assert record["tool"] == tool
    assert record["label"] == {"class": "private", "untrusted": False}
    assert "detail" not in record and "grant" not in record
    # Canonical when they parse (these are), what the model wrote when they do not.
    assert record["arguments"] == arguments


def test_the_arguments_the_ledger_keeps_are_canonical_when_they_parse(brokerd: Daemon) -> None:
    raw_arguments = '{ "path" : "\\u002fetc/shadow" }'
    assert call(brokerd, "deny-canonical", "c1", "read_file", raw_arguments) == Denied(
        DenyReason.NO_GRANT
    )
    record = only_decision(brokerd.home, "deny-canonical", "c1")
    assert record["arguments"] == '{"path":"/etc/shadow"}'


def test_a_detail_is_cleaned_of_control_characters_and_cut_to_300_characters(
    brokerd: Daemon,
) -> None:
    hostile = json.dumps({"path": "/x", "\x1bfi\u2028eld\x85" + "y" * 400: 1})
    outcome = call(brokerd, "deny-detail", "c1", "read_file", hostile)
    assert outcome == Denied(
        DenyReason.INVALID_ARGUMENTS,
        ("invalid argument shape: unknown field ` fi eld " + "y" * 300)[:300],
    )
    # The ledger keeps the model's own string (cut to 4096 characters), never the detail.
    assert only_decision(brokerd.home, "deny-detail", "c1")["arguments"] == hostile


def test_an_explicit_deny_grant_beats_a_more_specific_allow_and_nothing_is_written(
    brokerd: Daemon,
) -> None:
    home = brokerd.home
    target = home.parent / "locked" / "inner" / "x.txt"
    write = args(path=str(target), content="x")
    assert call_raw(home, "deny-grant", "c1", "write_file", write) == denial("denied_by_grant")
    assert not target.exists()
    record = only_decision(home, "deny-grant", "c1")
    assert record["reason"] == "denied_by_grant"
    assert record["grant"] == "locked"
    assert record["grant_sha256"] == sha256_of(home / "grants" / "locked.toml")


def test_a_secret_session_may_not_write_to_a_private_folder(brokerd: Daemon) -> None:
    home = brokerd.home
    session = "flow-1"
    key = args(path=f"{home.parent}/vault/key.txt")
    read = call(brokerd, session, "c1", "read_file", key)
    assert read == Done(True, "the launch code", Label(DataClass.SECRET, False))
    target = home / "workspace" / "leak.txt"
    write = args(path=str(target), content="the launch code")
    assert call_raw(home, session, "c2", "write_file", write) == denial("flow_violation")
    assert not target.exists()
    record = only_decision(home, session, "c2")
    assert record["reason"] == "flow_violation"
    assert record["grant"] == "workspace-write"
    assert record["label"] == {"class": "secret", "untrusted": False}
    # The same session may still write where secrets may go: nowhere here; but a read is fine.
    assert call(brokerd, session, "c3", "read_file", key) == read


def test_an_allowed_call_is_recorded_allowed_then_executed(brokerd: Daemon) -> None:
    home = brokerd.home
    target = home / "workspace" / "allowed.txt"
    outcome = call(brokerd, "allow-1", "c1", "write_file", args(path=str(target), content="héllo"))
    assert outcome == Done(True, f"wrote 6 bytes to {target}", Label(DataClass.PUBLIC, False))
    assert target.read_text() == "héllo"
    decision, executed = records_of(home, "allow-1", "c1")
    assert decision["kind"] == "decision" and decision["outcome"] == "allowed"
    assert decision["grant"] == "workspace-write"
    assert decision["grant_sha256"] == sha256_of(home / "grants" / "workspace-write.toml")
    assert decision["seq"] < executed["seq"]
    assert executed["kind"] == "executed" and executed["ok"] is True
    output = f"wrote 6 bytes to {target}".encode()
    assert executed["output_sha256"] == hashlib.sha256(output).hexdigest()
    assert executed["output_bytes"] == len(output)


# --- grants are seen at the next decision --------------------------------------------------


def test_a_grant_added_changed_or_removed_is_seen_at_the_next_decision(brokerd: Daemon) -> None:
    home = brokerd.home
    docs = home.parent / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("docs")
    read = args(path=f"{docs}/a.txt")
    assert call(brokerd, "grants-1", "c1", "read_file", read) == Denied(DenyReason.NO_GRANT)
    grant = write_grant(
        home, "docs", tool="read_file", mode="allow", path=str(docs), class_="public"
    )
    assert call(brokerd, "grants-1", "c2", "read_file", read) == Done(
        True, "docs", Label(DataClass.PUBLIC, False)
    )
    write_grant(home, "docs", tool="read_file", mode="deny", path=str(docs))
    assert call(brokerd, "grants-1", "c3", "read_file", read) == Denied(DenyReason.DENIED_BY_GRANT)
    assert only_decision(home, "grants-1", "c3")["grant_sha256"] == sha256_of(grant)
    grant.unlink()
    assert call(brokerd, "grants-1", "c4", "read_file", read) == Denied(DenyReason.NO_GRANT)


def test_an_invalid_grant_never_matches_and_grants_reload_says_why(brokerd: Daemon) -> None:
    home = brokerd.home
    notes = home.parent / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("notes")
    write_grant(home, "notes-slash", tool="read_file", mode="allow", path=f"{notes}/")
    write_grant(home, "notes-typo", tool="read_file", mode="allow", path=str(notes), clas="public")
    write_grant(home, "notes-mode", tool="read_file", mode="always", path=str(notes))
    (home / "grants" / "Notes_Caps.toml").write_text(
        f'tool = "read_file"\nmode = "allow"\npath = "{notes}"\n'
    )
    (home / "grants" / "notes-broken.toml").write_bytes(b'tool = "read_file\n\xff')
    read = args(path=f"{notes}/a.txt")
    assert call(brokerd, "grants-2", "c1", "read_file", read) == Denied(DenyReason.NO_GRANT)
    listed = brokerd.ask(GrantsReload("g1"), socket="admin")
    assert isinstance(listed, GrantList)
    by_id = {g.id: g for g in listed.grants}
    problems = {
        "notes-slash": "path:",
        "notes-typo": "unknown key 'clas'",
        "notes-mode": "mode:",
        "Notes_Caps": "not a grant id",
        "notes-broken": "not UTF-8",
    }
    for grant_id, why in problems.items():
        info = by_id[grant_id]
        assert info.valid is False and info.problem is not None and why in info.problem, info
        assert "\n" not in info.problem
        assert info.tool is None and info.mode is None
    assert by_id["workspace-read"].valid and by_id["workspace-read"].problem is None
    explained = brokerd.ask(Explain("e1", "grants-2", "read_file", read), socket="admin")
    assert explained.reason is DenyReason.NO_GRANT
    assert any(
        "invalid grants, never matching" in step and "notes-slash" in step
        for step in explained.steps
    )
    for path in (home / "grants").glob("notes*.toml"):
        path.unlink()
    (home / "grants" / "Notes_Caps.toml").unlink()


# --- the ledger cannot be written: fail closed (I1) ------------------------------------------


def test_when_fsync_fails_every_call_is_audit_unavailable_nothing_runs_and_brokerd_serves_on(
    short_tmp: Path,
) -> None:
    home = init_home(short_tmp / "h")
    target = home / "workspace" / "out.txt"
    # Opening a fresh ledger fsyncs its folder and its `started` record; every later fsync fails.
    with running("brokerd", home, env={"BX_TEST_FAULTS": "fsync-after:2"}) as brokerd:
        assert [r["kind"] for r in ledger_records(home)] == ["started"]
        calls = [
            ("write_file", args(path=str(target), content="x")),
            ("shell", args(command=f"touch {home}/workspace/ran", cwd=f"{home}/workspace")),
            ("read_file", args(path=f"{home}/workspace/nothing")),
            ("launch_missiles", "{}"),
            ("memory", "not json"),
        ]
        unavailable = denial("audit_unavailable")
        for n, (tool, arguments) in enumerate(calls):
            assert call_raw(home, "faulty", f"c{n}", tool, arguments) == unavailable
        assert isinstance(brokerd.ask(Ping("p1")), Pong)
        # brokerd tried to reopen the ledger at the next call (it cut the unconfirmed decision
        # and wrote why), and the fsync failed again: still nothing is decided or run.
        kinds = [r["kind"] for r in ledger_records(home)]
        assert kinds == ["started", "recovered"], kinds
        again = args(path=str(target), content="y")
        assert call_raw(home, "faulty", "c9", "write_file", again) == unavailable
        # The same call sent again is not run either.
        assert call_raw(home, "faulty", "c0", *calls[0], rid="r2") == denial(
            "audit_unavailable", rid="r2"
        )
        assert not target.exists() and not (home / "workspace" / "ran").exists()
        assert brokerd.ask(StateQuery("s1", "faulty")) == State(
            "s1", "faulty", Label(DataClass.PRIVATE, False)
        )
        assert not state_file(home, "faulty").exists()
        assert brokerd.ask(PendingQuery("q1"), socket="admin") == PendingList("q1", ())
        assert isinstance(brokerd.ask(Ping("p2")), Pong)
        assert brokerd.ask(Absorb("a1", "faulty", "other")).code == "unavailable"
        assert brokerd.process.poll() is None
