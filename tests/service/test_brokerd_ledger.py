"""Once (I8), and the ledger through brokerd's real sockets (SPEC §7, §13).

A call named by (session, call) is decided once and run at most once: sent again, at once or
later, or after a crash, it gets its recorded answer. The admin socket explains without
recording, verifies the chain and tails it by session; broker-events carries the head after
each group commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.home import report
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.wire import codec as wire
from bxcore.wire.messages import (
    ApprovalState,
    AuditAccept,
    AuditRecords,
    AuditReport,
    AuditTail,
    AuditVerify,
    AwaitApproval,
    Denied,
    Done,
    Explain,
    Explanation,
    Failed,
    LedgerHead,
    Pending,
    PendingList,
    PendingQuery,
    Scope,
    Settled,
    ToolRequest,
    Verdict,
    VerdictRequest,
)
from tests.support.brokerd import (
    Events,
    RawClient,
    args,
    call,
    call_raw,
    denial,
    ledger_lines,
    ledger_records,
    records_of,
    short_folder,
    state_file,
    write_grant,
)
from tests.support.daemons import Daemon, init_home, running, start, tool_owned

ALREADY_RAN = "this call already ran; its output is no longer held"
UNKNOWN = "the outcome of this call is unknown after a restart"
M5B = '{"action":"note","file":"notes.md","text":"x"}'
PUBLIC = Label(DataClass.PUBLIC, False)
PRIVATE = Label(DataClass.PRIVATE, False)


def add_run_grant(home: Path) -> Path:
    """A folder where shell runs without asking (more specific than the starter's ask)."""
    run = home / "workspace" / "run"
    run.mkdir()
    tool_owned(run)  # the shell writes there
    write_grant(home, "run", tool="shell", mode="allow", path=str(run))
    return run


@pytest.fixture(scope="module")
def brokerd() -> Iterator[Daemon]:
    with short_folder() as tmp:
        home = init_home(tmp / "h")
        add_run_grant(home)
        with running("brokerd", home) as daemon:
            yield daemon


def kinds(home: Path, session: str, call_id: str) -> list[str]:
    return [str(r["kind"]) for r in records_of(home, session, call_id)]


def processes_mentioning(marker: str) -> list[int]:
    """Live processes whose command line holds `marker` (sandboxes left behind)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# --- once (I8) -------------------------------------------------------------------------------


def test_a_call_sent_again_gets_the_same_answer_and_its_tool_does_not_run_again(
    brokerd: Daemon,
) -> None:
    home, session = brokerd.home, "once-1"
    target = home / "workspace" / "once.txt"
    write = args(path=str(target), content="once")
    first = call(brokerd, session, "c1", "write_file", write)
    assert first == Done(True, f"wrote 4 bytes to {target}", PUBLIC)
    target.unlink()
    assert call(brokerd, session, "c1", "write_file", write, rid="r2") == first
    # The call is named by its session and id: other arguments under the same id change nothing.
    other = args(path=str(target), content="something else")
    assert call(brokerd, session, "c1", "write_file", other, rid="r3") == first
    assert call(brokerd, session, "c1", "read_file", "{}", rid="r4") == first
    assert not target.exists()
    assert kinds(home, session, "c1") == ["decision", "executed"]
    # The same call id in another session is another call.
    assert call(brokerd, "once-2", "c1", "write_file", write) == first
    assert target.read_text() == "once"


def test_a_denied_call_sent_again_gets_the_same_denial_with_its_detail(brokerd: Daemon) -> None:
    home, session = brokerd.home, "once-denied"
    with RawClient(home, "broker") as raw:
        answers = [
            raw.ask(wire.encode(ToolRequest(f"r{n}", session, "c1", "memory", M5B)))
            for n in range(2)
        ]
    assert answers[0] == answers[1].replace(b'"id":"r1"', b'"id":"r0"')
    assert b'"detail":"invalid argument shape: unknown field `file`, expected `text`"' in answers[0]
    assert kinds(home, session, "c1") == ["decision"]


def test_a_call_sent_twice_at_once_runs_once_and_both_get_its_answer(brokerd: Daemon) -> None:
    home, session = brokerd.home, "once-together"
    runs = home / "workspace" / "run" / "together.txt"
    command = args(command=f"echo run >> {runs}; sleep 0.3; echo done", cwd=str(runs.parent))
    answers: list[object] = []

    def send(rid: str) -> None:
        answers.append(call(brokerd, session, "c1", "shell", command, rid=rid))

    threads = [threading.Thread(target=send, args=(f"r{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [Done(True, "done\n[exit status 0]", PRIVATE)] * 3
    assert runs.read_text() == "run\n"
    assert kinds(home, session, "c1") == ["decision", "executed"]


def test_after_a_crash_every_call_gets_its_recorded_answer_and_none_runs_twice(
    short_tmp: Path,
) -> None:
    home = init_home(short_tmp / "h", "[broker]\nresults_kept = 2\n")
    run = add_run_grant(home)
    # The sleep's own command line carries the marker, so a sandbox left behind is found.
    marker = f"29.{uuid.uuid4().int % 10**9:09d}"
    written = home / "workspace" / "written.txt"
    write = args(path=str(written), content="x")
    ask = args(command="echo asked", cwd=f"{home}/workspace")
    slow = args(command=f"echo {marker} >> runs.txt; sleep {marker}", cwd=str(run))
    brokerd = start("brokerd", home)
    try:
        brokerd.wait_ready()
        done = call(brokerd, "s", "c1", "write_file", write)
        assert isinstance(done, Done) and done.ok
        denied = call(brokerd, "s", "c2", "memory", M5B)
        approval = call(brokerd, "s", "c3", "shell", ask)
        assert isinstance(approval, Pending)
        # Two more answers push the first out of the answers kept (results_kept = 2):
        # it is then rebuilt from the ledger.
        for n in (5, 6):
            call(brokerd, "s", f"c{n}", "write_file", args(path=f"{written}{n}", content=""))
        written.unlink()
        assert call(brokerd, "s", "c1", "write_file", write, rid="r2") == Failed(ALREADY_RAN)
        assert not written.exists()
        # A call that is running when brokerd dies.
        with RawClient(home, "broker") as raw:
            raw.send(wire.encode(ToolRequest("r4", "s", "c4", "shell", slow)))
            wait_until(lambda: (run / "runs.txt").exists())
            brokerd.kill()
            assert raw.recv(0) is None
        wait_until(lambda: not processes_mentioning(marker))

        brokerd = start("brokerd", home)
        brokerd.wait_ready()
        assert call(brokerd, "s", "c1", "write_file", write, rid="r5") == Failed(ALREADY_RAN)
        assert call(brokerd, "s", "c2", "memory", M5B, rid="r6") == denied
        assert denied == Denied(
            DenyReason.INVALID_ARGUMENTS,
            "invalid argument shape: unknown field `file`, expected `text`",
        )
        assert call(brokerd, "s", "c3", "shell", ask, rid="r7") == approval
        assert call(brokerd, "s", "c4", "shell", slow, rid="r8") == Failed(UNKNOWN)
        time.sleep(0.3)  # a sandbox started again would have written by now
        assert (run / "runs.txt").read_text() == f"{marker}\n"
        assert not written.exists()
        assert kinds(home, "s", "c4") == ["decision"]
        report = brokerd.ask(AuditVerify("a1"), socket="admin")
        assert isinstance(report, AuditReport) and report.ok, report
        assert [json.loads(line)["kind"] for line in ledger_lines(home)].count("started") == 2
        # The approval waiting at the crash is still the owner's to give.
        assert brokerd.ask(
            VerdictRequest("v1", approval.approval, True, Scope.ONCE, "owner"), socket="admin"
        ) == Settled("v1", approval.approval, ApprovalState.APPROVED)
        answer = brokerd.ask(AwaitApproval("w1", "s", approval.approval, 10_000))
        assert answer.outcome == Done(True, "asked\n[exit status 0]", PRIVATE)
    finally:
        brokerd.stop()
    assert not processes_mentioning(marker)


# --- the admin socket's view of the ledger -------------------------------------------------------


def test_explain_gives_the_verdict_and_its_steps_and_records_nothing(brokerd: Daemon) -> None:
    home = brokerd.home
    before = (home / "audit" / "ledger.jsonl").read_bytes()
    pending_before = brokerd.ask(PendingQuery("q1"), socket="admin")
    cases = [
        (
            "read_file",
            args(path=f"{home}/workspace/a.md"),
            Verdict.ALLOWED,
            None,
            "workspace-read",
            "workspace-read allows it",
        ),
        (
            "shell",
            args(command="rm -rf /", cwd=f"{home}/workspace"),
            Verdict.ASK,
            None,
            "workspace-shell",
            "workspace-shell asks the owner",
        ),
        (
            "read_file",
            args(path="/etc/shadow"),
            Verdict.DENIED,
            DenyReason.NO_GRANT,
            None,
            "no grant of read_file matches",
        ),
        (
            "memory",
            M5B,
            Verdict.DENIED,
            DenyReason.INVALID_ARGUMENTS,
            None,
            "the arguments are not valid: invalid argument shape: unknown field `file`",
        ),
        (
            "format_disk",
            "{}",
            Verdict.DENIED,
            DenyReason.UNKNOWN_TOOL,
            None,
            "'format_disk' is not a tool",
        ),
    ]
    for tool, arguments, verdict, reason, winner, step in cases:
        answer = brokerd.ask(Explain("e1", "explained", tool, arguments), socket="admin")
        assert isinstance(answer, Explanation), answer
        assert (answer.verdict, answer.reason, answer.winner) == (verdict, reason, winner)
        assert answer.label == PRIVATE
        assert answer.steps[0] == "session explained: private, trusted"
        assert any(s.startswith(step) for s in answer.steps), answer.steps
    assert (home / "audit" / "ledger.jsonl").read_bytes() == before
    assert brokerd.ask(PendingQuery("q2"), socket="admin") == PendingList(
        "q2", pending_before.approvals
    )
    assert not state_file(home, "explained").exists()


def test_audit_verify_says_ok_with_the_record_count_and_the_head(brokerd: Daemon) -> None:
    call(brokerd, "verify-1", "c1", "read_file", args(path="/etc/hostname"))
    report = brokerd.ask(AuditVerify("a1"), socket="admin")
    lines = ledger_lines(brokerd.home)
    assert report == AuditReport(
        "a1", True, len(lines), len(lines), hashlib.sha256(lines[-1]).hexdigest()
    )


def test_audit_tail_gives_the_newest_lines_and_filters_by_session(brokerd: Daemon) -> None:
    home = brokerd.home
    write = args(path=f"{home}/workspace/tail.txt", content="x")
    call(brokerd, "tail-1", "c1", "write_file", write)
    call(brokerd, "tail-2", "c1", "write_file", write)
    asked = call(brokerd, "tail-1", "c2", "shell", args(command="true", cwd=f"{home}/workspace"))
    assert isinstance(asked, Pending)
    brokerd.ask(VerdictRequest("v1", asked.approval, False, Scope.ONCE, "owner"), socket="admin")
    call(brokerd, "tail-2", "c2", "read_file", "not json")
    lines = [line.decode() for line in ledger_lines(home)]

    tail = brokerd.ask(AuditTail("t1", 3), socket="admin")
    assert tail == AuditRecords("t1", tuple(lines[-3:]))
    mine = brokerd.ask(AuditTail("t2", 100, "tail-1"), socket="admin")
    assert isinstance(mine, AuditRecords)
    records = [json.loads(r) for r in mine.records]
    assert [r["kind"] for r in records] == ["decision", "executed", "decision", "verdict"]
    assert all(r.get("session", "tail-1") == "tail-1" for r in records)
    assert records[-1]["approval"] == asked.approval
    assert all(line in lines for line in mine.records)  # each exactly its ledger line
    last = brokerd.ask(AuditTail("t3", 1, "tail-2"), socket="admin")
    assert [json.loads(r)["call"] for r in last.records] == ["c2"]
    assert brokerd.ask(AuditTail("t4", 5, "nobody"), socket="admin") == AuditRecords("t4", ())


def test_the_ledger_head_is_published_after_each_group_commit(brokerd: Daemon) -> None:
    home = brokerd.home
    with Events(home) as events:
        events.join(brokerd)
        start_seq = len(ledger_lines(home))
        call(brokerd, "head-1", "c1", "write_file", args(path=f"{home}/workspace/h", content=""))
        call(brokerd, "head-1", "c2", "read_file", args(path="/nowhere"))
        lines = ledger_lines(home)
        heads: list[LedgerHead] = []
        while not heads or heads[-1].seq < len(lines):
            heads.append(events.wait_for(lambda e: isinstance(e, LedgerHead)))
    # decision, executed, decision: three group commits, three heads, each a real line's hash.
    assert [h.seq for h in heads] == [start_seq + 1, start_seq + 2, start_seq + 3]
    for head in heads:
        assert head.hash == hashlib.sha256(lines[head.seq - 1]).hexdigest()


def test_a_torn_last_line_is_cut_at_start_and_a_break_before_it_denies_every_call(
    short_tmp: Path,
) -> None:
    home = init_home(short_tmp / "h")
    ledger = home / "audit" / "ledger.jsonl"
    target = home / "workspace" / "t.txt"
    write = args(path=str(target), content="x")
    with running("brokerd", home) as brokerd:
        assert isinstance(call(brokerd, "torn", "c1", "write_file", write), Done)
    torn = b'{"seq":4,"at":"2026-'
    ledger.write_bytes(ledger.read_bytes() + torn)  # a write cut short by a crash

    with running("brokerd", home) as brokerd:
        records = [json.loads(line) for line in ledger_lines(home)]
        assert [r["kind"] for r in records] == [
            "started", "decision", "executed", "recovered", "started"
        ]  # fmt: skip
        assert records[3]["cut_bytes"] == len(torn)
        assert "no newline" in records[3]["why"]
        report = brokerd.ask(AuditVerify("a1"), socket="admin")
        assert report.ok and report.records == 5
        assert isinstance(call(brokerd, "torn", "c2", "write_file", write), Done)

    # A change before the last line is damage: brokerd starts, but nothing is decided. (A
    # start reads again only what its index does not hold: here the index and the head file
    # are gone too, as for a ledger of before issue 10, so it reads the whole file.)
    lines = ledger.read_bytes().split(b"\n")
    assert b'"call":"c1"' in lines[1]
    lines[1] = lines[1].replace(b'"call":"c1"', b'"call":"c9"')
    ledger.write_bytes(b"\n".join(lines))
    for derived in ("head.json", "index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (ledger.parent / derived).unlink(missing_ok=True)
    damaged = ledger.read_bytes()
    target.unlink()
    with running("brokerd", home) as brokerd:
        assert call_raw(home, "torn", "c3", "write_file", write) == denial("audit_unavailable")
        assert call_raw(home, "other", "c1", "read_file", "{}") == denial("audit_unavailable")
        report = brokerd.ask(AuditVerify("a2"), socket="admin")
        assert isinstance(report, AuditReport) and not report.ok
        assert report.records == 2
        assert report.problem == "line 3: prev does not match the hash of line 2"
    assert ledger.read_bytes() == damaged
    assert not target.exists()


def test_a_ledger_cut_to_half_lets_no_call_run_again_until_the_owner_accepts_it(
    short_tmp: Path,
) -> None:
    home = init_home(short_tmp / "h")
    ledger = home / "audit" / "ledger.jsonl"
    folder = home / "workspace"
    writes = {f"c{n}": args(path=f"{folder}/f{n}", content=str(n)) for n in range(20)}
    with running("brokerd", home) as brokerd:
        for call_id, arguments in writes.items():
            assert isinstance(call(brokerd, "cut", call_id, "write_file", arguments), Done)
    for n in range(20):
        (folder / f"f{n}").unlink()
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(lines[: len(lines) // 2]))  # cut at a line: nothing torn
    cut = ledger.read_bytes()

    with running("brokerd", home) as brokerd:
        for call_id, arguments in writes.items():
            answer = call_raw(home, "cut", call_id, "write_file", arguments, rid=f"again-{call_id}")
            assert answer == denial("audit_unavailable", rid=f"again-{call_id}")
        assert not any(folder.glob("f*"))
        assert ledger.read_bytes() == cut  # the evidence is kept as it is
        said = report.read(Home(home))["ledger"]
        assert said["state"] == "broken"
        assert said["problem"].startswith(f"the ledger ends at byte {len(cut)}, before the head")
        assert "the ledger is broken, so every call is denied audit_unavailable" in (
            brokerd.output()
        )
        verified = brokerd.ask(AuditVerify("v1"), socket="admin")
        assert isinstance(verified, AuditReport) and not verified.ok

        accepted = brokerd.ask(AuditAccept("a1"), socket="admin")
        assert isinstance(accepted, AuditReport) and accepted.ok
        assert accepted.problem is not None and "may run again" in accepted.problem
        assert report.read(Home(home))["ledger"]["state"] == "ok"
        # What the kept half recorded is still answered from it; the lost half is decided anew.
        kept = ledger_records(home)
        ran = {r["call"] for r in kept if r["kind"] == "executed"}
        decided = {r["call"] for r in kept if r["kind"] == "decision"}
        assert ran and len(decided) < 20
        for call_id in writes:
            answer = call(brokerd, "cut", call_id, "write_file", writes[call_id], rid="r3")
            if call_id in ran:
                assert answer == Failed(ALREADY_RAN)
            elif call_id in decided:  # its execution was lost with the cut
                assert answer == Failed(UNKNOWN)
            else:
                assert isinstance(answer, Done)
        assert len(list(folder.glob("f*"))) == 20 - len(decided)
        assert brokerd.ask(AuditVerify("v2"), socket="admin").ok
