"""The ledger's file (SPEC §7, I1, I8): group commit, recovery, failing closed, the index."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bxcore.labels import DataClass, Label
from services.brokerd.core import records as r
from services.brokerd.core.records import Head, line_hash
from services.brokerd.ledger import scan as ledger_scan
from services.brokerd.ledger.file import INDEX_FILE, Ledger, LedgerState, LedgerUnavailable
from services.brokerd.ledger.index import Index
from services.brokerd.ledger.verify import LedgerUnreadable, verify

PRIVATE = Label(DataClass.PRIVATE, False)
TAINTED = Label(DataClass.PRIVATE, True)
T0 = 1_796_006_070_123  # 2026-11-30T02:34:30.123Z


class Disk:
    """The seams: counts writes and fsyncs, and fails them on demand."""

    def __init__(self) -> None:
        self.writes = 0
        self.fsyncs = 0
        self.fail_fsync: OSError | None = None
        self.fail_write: OSError | None = None
        self.short_write: int | None = None  # write this many bytes, then fail the next write

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        if self.fail_fsync is not None:
            raise self.fail_fsync
        os.fsync(fd)

    def write(self, fd: int, data: bytes) -> int:
        self.writes += 1
        if self.short_write is not None:
            n, self.short_write = self.short_write, None
            self.fail_write = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return os.write(fd, data[:n])
        if self.fail_write is not None:
            raise self.fail_write
        return os.write(fd, data)


class Clock:
    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> int:
        self.ms += 1
        return self.ms


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "home" / "audit" / "ledger.jsonl"


@pytest.fixture
def disk() -> Disk:
    return Disk()


@pytest.fixture
def opened(path: Path, disk: Disk) -> Iterator[Ledger]:
    with Ledger.open(path, now_ms=Clock(), fsync=disk.fsync, write=disk.write) as ledger:
        yield ledger


def open_again(path: Path, disk: Disk | None = None) -> Ledger:
    disk = disk or Disk()
    return Ledger.open(path, now_ms=Clock(), fsync=disk.fsync, write=disk.write)


def decision(call: str, session: str = "chat-1", **over: object) -> r.Entry:
    kind, fields = r.decision(
        session=session,
        call=call,
        tool="read_file",
        arguments='{"path":"/a"}',
        label=PRIVATE,
        outcome="allowed",
    )
    return kind, {**fields, **over}


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


def records_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in lines_of(path)]


def fill(path: Path, calls: int = 5) -> None:
    with open_again(path) as ledger:
        ledger.append_batch([decision(f"c{i}") for i in range(1, calls + 1)])


def forget_what_brokerd_derived(path: Path) -> None:
    """As before issue 10, or after the index and head file are lost: the next start reads
    the whole ledger again."""
    for name in ("head.json", "index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"):
        (path.parent / name).unlink(missing_ok=True)


def unconfirmed(path: Path, call: str) -> bytes:
    """The line a crashed brokerd would have written next, never confirmed."""
    last = lines_of(path)[-1]
    seq = json.loads(last)["seq"] + 1
    kind, fields = decision(call)
    return r.build(seq, "2026-11-30T02:34:31.000Z", line_hash(last), kind, fields)


# --- opening, appending, group commit -------------------------------------------------------


def test_open_creates_the_folder_and_an_empty_private_file(opened: Ledger, path: Path) -> None:
    assert path.is_file() and path.read_bytes() == b""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert opened.state is LedgerState.OK and opened.problem is None
    assert opened.head == Head(0, r.GENESIS)


def test_the_index_beside_the_ledger_is_as_private_as_the_ledger(path: Path) -> None:
    """SQLite alone would make it 0644 under the usual umask (issue 23); its -wal copies it."""
    old = os.umask(0o022)
    try:
        with open_again(path) as ledger:
            ledger.append_batch([("started", {"pid": 1, "version": "0"})])
            ledger.persist()
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in path.parent.glob("index*")}
    finally:
        os.umask(old)
    assert modes and set(modes.values()) == {0o600}, modes


def test_open_with_started_appends_a_started_record(path: Path) -> None:
    with Ledger.open(path, now_ms=Clock(), started={"pid": 4242, "version": "0.1.0"}) as ledger:
        assert ledger.head.seq == 1
    (only,) = records_of(path)
    assert only["kind"] == "started" and only["pid"] == 4242 and only["version"] == "0.1.0"
    assert only["at"] == "2026-11-30T02:34:30.124Z"


def test_appends_survive_a_reopen_and_the_chain_verifies(opened: Ledger, path: Path) -> None:
    heads = [opened.append(*decision(f"c{i}")) for i in range(1, 4)]
    assert [h.seq for h in heads] == [1, 2, 3]
    assert heads[-1] == Head(3, line_hash(lines_of(path)[-1]))
    opened.reopen()
    assert opened.head == heads[-1] and opened.state is LedgerState.OK
    opened.append(*r.started(pid=1, version="v"))
    opened.close()
    with open_again(path) as again:
        assert again.head.seq == 4
    report = verify(path)
    assert report.ok and str(report) == "ok: 4 records" and report.head.seq == 4


def test_a_batch_of_32_costs_one_write_and_one_fsync(opened: Ledger, disk: Disk) -> None:
    writes, fsyncs = disk.writes, disk.fsyncs
    heads = opened.append_batch([decision(f"c{i}") for i in range(32)])
    assert (disk.writes - writes, disk.fsyncs - fsyncs) == (1, 1)
    assert [h.seq for h in heads] == list(range(1, 33))
    assert opened.head == heads[-1]


def test_a_batch_shares_one_at_and_each_batch_reads_the_clock_once(
    opened: Ledger, path: Path
) -> None:
    opened.append_batch([decision("a"), decision("b")])
    opened.append_batch([decision("c")])
    ats = [rec["at"] for rec in records_of(path)]
    assert ats == ["2026-11-30T02:34:30.124Z"] * 2 + ["2026-11-30T02:34:30.125Z"]


def test_an_entry_no_record_can_hold_raises_valueerror_and_writes_nothing(
    opened: Ledger, path: Path, disk: Disk
) -> None:
    opened.append(*decision("ok"))
    before, writes = path.read_bytes(), disk.writes
    with pytest.raises(ValueError, match="unknown kind"):
        opened.append_batch([decision("fine"), ("nonsense", {})])
    assert path.read_bytes() == before and disk.writes == writes
    assert opened.state is LedgerState.OK and opened.head.seq == 1


def test_repr_says_path_head_and_state(opened: Ledger, path: Path) -> None:
    opened.append(*decision("c1"))
    text = repr(opened)
    assert str(path) in text and "head=1:" in text and "state=ok" in text


def test_a_second_open_of_the_same_ledger_is_refused(opened: Ledger, path: Path) -> None:
    with open_again(path) as second:
        assert second.state is LedgerState.FAILED
        assert second.problem is not None and "another process" in second.problem
        with pytest.raises(LedgerUnavailable):
            second.append(*decision("c1"))


def test_a_ledger_that_cannot_be_created_opens_failed_and_refuses(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("a file, not a folder")
    with open_again(tmp_path / "home" / "audit" / "ledger.jsonl") as ledger:
        assert ledger.state is LedgerState.FAILED and ledger.problem
        with pytest.raises(LedgerUnavailable, match="cannot open"):
            ledger.append(*decision("c1"))


# --- recovery of a torn last line -----------------------------------------------------------


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        (b'{"seq":6,"at":"2026-11-', "no newline"),
        (b"\x00\x00\x00\x00", "no newline"),
        (b'{"seq":6,"at":\n', "line 6: not JSON"),
        (b"\n", "line 6: not JSON"),
    ],
)
def test_a_torn_last_line_is_cut_at_open_and_a_recovered_record_says_so(
    path: Path, tail: bytes, why: str
) -> None:
    fill(path)
    answered = path.read_bytes()
    with path.open("ab") as f:
        f.write(tail)
    with open_again(path) as ledger:
        assert ledger.state is LedgerState.OK and ledger.head.seq == 6
        assert ledger.lookup("chat-1", "c5") is not None
    assert path.read_bytes().startswith(answered)
    note = records_of(path)[-1]
    assert note["kind"] == "recovered" and note["cut_bytes"] == len(tail)
    assert why in str(note["why"]) and str(note["why"]).startswith("line 6: ")
    assert verify(path).ok


def test_a_whole_record_without_its_newline_was_never_answered_and_is_cut(path: Path) -> None:
    fill(path, 2)
    with path.open("ab") as f:
        f.write(unconfirmed(path, "c3"))  # a crash before its newline
    with open_again(path) as ledger:
        assert ledger.head.seq == 3
    assert [rec["kind"] for rec in records_of(path)] == ["decision", "decision", "recovered"]


def test_a_confirmed_record_that_lost_its_newline_is_a_cut_ledger_not_a_torn_write(
    path: Path,
) -> None:
    fill(path, 2)
    whole = path.read_bytes()
    path.write_bytes(whole[:-1])
    with open_again(path) as ledger:
        assert ledger.state is LedgerState.BROKEN and ledger.cut_short
        assert ledger.problem is not None and "before the head brokerd confirmed" in ledger.problem
    assert path.read_bytes() == whole[:-1]  # nothing cut


def test_verify_reports_a_torn_last_line_without_cutting_it(path: Path) -> None:
    fill(path, 3)
    with path.open("ab") as f:
        f.write(b'{"seq":4')
    before = path.read_bytes()
    report = verify(path)
    assert not report.ok and report.torn and report.bad_line == 4 and report.records == 3
    assert path.read_bytes() == before


# --- damage in the middle -------------------------------------------------------------------


def damage(path: Path, change: str) -> None:
    lines = lines_of(path)
    if change == "flip-structure":
        lines[2] = lines[2].replace(b'"kind":', b'"kind";', 1)
    elif change == "flip-value":
        lines[2] = lines[2].replace(b'"c3"', b'"c8"', 1)
    elif change == "delete":
        del lines[2]
    elif change == "swap":
        lines[1], lines[2] = lines[2], lines[1]
    elif change == "invalid-utf8":
        lines[2] = lines[2][:40] + b"\xc3\x28" + lines[2][42:]
    elif change == "nul":
        lines[2] = b"\x00" * 50
    elif change == "array":
        lines[2] = b"[1,2,3]"
    elif change == "huge":
        lines[2] = b'{"seq":3,"x":"' + b"A" * 3_000_000 + b'"}'
    path.write_bytes(b"".join(line + b"\n" for line in lines))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("flip-structure", "line 3: not JSON"),
        ("flip-value", "line 4: prev does not match the hash of line 3"),
        ("delete", "line 3: seq is 4, expected 3"),
        ("swap", "line 2: seq is 3, expected 2"),
        ("invalid-utf8", "line 3: not UTF-8"),
        ("nul", "line 3: not JSON"),
        ("array", "line 3: not a JSON object (a JSON array)"),
        ("huge", "line 3: does not start with seq, at, prev, kind"),
    ],
)
def test_damage_before_the_last_line_is_named_and_the_ledger_refuses_every_append(
    path: Path, change: str, problem: str
) -> None:
    """A start reads again only what its index does not hold: with neither index nor head
    file (a ledger of before issue 10, or one whose derived files were lost), all of it."""
    fill(path)
    forget_what_brokerd_derived(path)
    damage(path, change)
    before = path.read_bytes()
    with open_again(path) as ledger:
        assert ledger.state is LedgerState.BROKEN
        assert ledger.problem is not None and ledger.problem.startswith(problem)
        with pytest.raises(LedgerUnavailable, match="broken"):
            ledger.append(*decision("c9"))
        ledger.reopen()
        assert ledger.state is LedgerState.BROKEN
    assert path.read_bytes() == before  # nothing cut, nothing added
    report = verify(path)
    assert not report.ok and not report.torn and str(report).startswith(problem)


def test_a_start_reads_again_only_what_its_index_does_not_hold_and_verify_reads_all(
    path: Path,
) -> None:
    fill(path)
    damage(path, "flip-value")  # line 3 now names c8; line 4's prev no longer matches it
    with open_again(path) as ledger:
        assert ledger.state is LedgerState.OK  # the sealed part was not read again
        assert ledger.lookup("chat-1", "c5") is not None
        with pytest.raises(LedgerUnavailable, match="not the decision the index names"):
            ledger.lookup("chat-1", "c3")  # read back, the record is not that call's
        assert ledger.state is LedgerState.BROKEN
    assert str(verify(path)).startswith("line 4: prev does not match the hash of line 3")


def test_an_overlong_line_is_named_without_reading_all_of_it(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(path)
    forget_what_brokerd_derived(path)
    monkeypatch.setattr(r, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(ledger_scan, "MAX_LINE_BYTES", 1000)
    lines = lines_of(path)
    lines[1] = b"B" * 50_000
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    with open_again(path) as ledger:
        assert ledger.state is LedgerState.BROKEN
        assert ledger.problem == "line 2: longer than 1000 bytes"


def test_verify_checks_against_a_head_the_owner_saw(path: Path) -> None:
    fill(path, 4)
    seen = Head(4, line_hash(lines_of(path)[-1]))
    assert verify(path, witness=seen).ok
    path.write_bytes(b"".join(line + b"\n" for line in lines_of(path)[:3]))
    assert "before the head seen (seq 4)" in str(verify(path, witness=seen))


@pytest.mark.parametrize(
    "stub",
    [b'{"seq":4,"at":"2026-11-', b"\x00\x00\x00", b'{"seq":4,"at":\n', b"\n"],
    ids=["no-newline", "nul-bytes", "not-json", "empty-line"],
)
def test_a_witnessed_record_replaced_by_a_torn_stub_is_tampering_not_a_torn_write(
    path: Path, stub: bytes
) -> None:
    """Issue 9 (9): the owner saw seq 4 whole, so a torn line at seq 4 is no unanswered write."""
    fill(path, 4)
    seen = Head(4, line_hash(lines_of(path)[-1]))
    path.write_bytes(b"".join(line + b"\n" for line in lines_of(path)[:3]) + stub)
    before = path.read_bytes()
    report = verify(path, witness=seen)
    assert not report.ok and not report.torn
    assert (report.records, report.bad_line) == (3, 4)
    assert str(report).startswith("line 4: ")
    assert str(report).endswith(
        "; the ledger ends at seq 3, before the head seen (seq 4): cut or rewritten"
    )
    assert "\n" not in str(report)
    assert path.read_bytes() == before


def test_a_torn_stub_that_hides_more_witnessed_records_is_tampering_too(path: Path) -> None:
    fill(path, 5)
    seen = Head(5, line_hash(lines_of(path)[-1]))
    path.write_bytes(b"".join(line + b"\n" for line in lines_of(path)[:2]) + b'{"seq":3')
    report = verify(path, witness=seen)
    assert not report.ok and not report.torn and report.bad_line == 3
    assert "before the head seen (seq 5)" in str(report)


@pytest.mark.parametrize("witnessed", [0, 3, 4])
def test_a_torn_line_newer_than_the_witnessed_head_is_still_only_a_torn_write(
    path: Path, witnessed: int
) -> None:
    fill(path, 4)
    lines = lines_of(path)
    seen = None if witnessed == 0 else Head(witnessed, line_hash(lines[witnessed - 1]))
    with path.open("ab") as f:
        f.write(b'{"seq":5,"at":')
    report = verify(path, witness=seen)
    assert not report.ok and report.torn and report.bad_line == 5 and report.records == 4
    assert str(report) == "line 5: the last line has no newline (a torn write)"


def test_a_torn_write_that_brokerd_recovered_after_the_witness_verifies(path: Path) -> None:
    fill(path, 4)
    seen = Head(4, line_hash(lines_of(path)[-1]))
    with path.open("ab") as f:
        f.write(b'{"seq":5')
    with open_again(path) as ledger:  # brokerd's start: cut, and a `recovered` record
        assert ledger.head.seq == 5
    assert verify(path, witness=seen).ok


def test_verify_of_a_missing_file_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LedgerUnreadable, match="cannot read the ledger"):
        verify(tmp_path / "nothing.jsonl")


# --- failing closed -------------------------------------------------------------------------


def test_a_failed_fsync_fails_closed_until_reopen_re_verifies(
    opened: Ledger, path: Path, disk: Disk
) -> None:
    opened.append_batch([decision("c1"), decision("c2")])
    confirmed = opened.head
    disk.fail_fsync = OSError(errno.EIO, os.strerror(errno.EIO))
    with pytest.raises(LedgerUnavailable, match=r"fsync .*Input/output error"):
        opened.append(*decision("c3"))
    assert opened.state is LedgerState.FAILED and opened.head == confirmed
    assert opened.lookup("chat-1", "c3") is None
    disk.fail_fsync = None
    writes, fsyncs, size = disk.writes, disk.fsyncs, path.stat().st_size
    for _ in range(3):
        with pytest.raises(LedgerUnavailable, match="failed"):
            opened.append(*decision("c4"))
    assert (disk.writes, disk.fsyncs, path.stat().st_size) == (writes, fsyncs, size)
    opened.reopen()
    assert opened.state is LedgerState.OK
    # c3 reached the page cache but was never confirmed (nor answered): it is cut.
    kinds = [(rec["kind"], rec.get("call")) for rec in records_of(path)]
    assert kinds == [("decision", "c1"), ("decision", "c2"), ("recovered", None)]
    assert "after the last confirmed record (seq 2)" in str(records_of(path)[-1]["why"])
    opened.append(*decision("c3"))
    assert opened.head.seq == 4 and verify(path).ok


def test_a_short_write_then_a_failed_write_leaves_no_half_line_to_glue_onto(
    opened: Ledger, path: Path, disk: Disk
) -> None:
    opened.append(*decision("c1"))
    disk.short_write = 25
    with pytest.raises(
        LedgerUnavailable, match=r"cannot write .*: the disk holding .*audit is full \("
    ):
        opened.append_batch([decision("c2"), decision("c3")])
    assert not path.read_bytes().endswith(b"\n")  # half a line is on disk
    disk.fail_write = None
    with pytest.raises(LedgerUnavailable):
        opened.append(*decision("c2"))
    opened.reopen()
    opened.append(*decision("c2"))
    assert verify(path).ok
    assert [rec["kind"] for rec in records_of(path)] == ["decision", "recovered", "decision"]
    assert records_of(path)[1]["cut_bytes"] == 25


def test_a_closed_descriptor_fails_closed_and_reopen_mends_it(opened: Ledger, path: Path) -> None:
    opened.append(*decision("c1"))
    fd = opened._fd
    assert fd is not None
    os.close(fd)
    with pytest.raises(LedgerUnavailable, match="Bad file descriptor"):
        opened.append(*decision("c2"))
    assert opened.state is LedgerState.FAILED
    opened.reopen()
    opened.append(*decision("c2"))
    assert opened.head.seq == 2 and verify(path).ok


def test_a_reopen_that_fails_keeps_the_ledger_failed_and_its_confirmed_head(
    opened: Ledger, path: Path, disk: Disk
) -> None:
    opened.append(*decision("c1"))
    disk.fail_fsync = OSError(errno.EIO, "Input/output error")
    with pytest.raises(LedgerUnavailable):
        opened.append(*decision("c2"))
    opened.reopen()  # the cut's fsync fails too
    assert opened.state is LedgerState.FAILED and opened.head.seq == 1
    disk.fail_fsync = None
    opened.reopen()
    assert opened.state is LedgerState.OK and opened.head.seq == 2  # c1, recovered
    note = records_of(path)[-1]
    assert note["kind"] == "recovered"
    assert note["why"] == "line 2: written after the last confirmed record (seq 1)"
    assert verify(path).ok


def test_a_closed_ledger_refuses_appends_and_a_reopen_keeps_what_others_wrote(
    opened: Ledger, path: Path
) -> None:
    opened.append(*decision("c1"))
    opened.close()
    assert opened.state is LedgerState.CLOSED
    with pytest.raises(LedgerUnavailable, match="closed"):
        opened.append(*decision("c2"))
    with open_again(path) as other:
        other.append(*decision("c2"))
    opened.reopen()
    assert opened.state is LedgerState.OK and opened.head.seq == 2
    assert opened.lookup("chat-1", "c2") is not None


# --- the index (I8) and tail ----------------------------------------------------------------


def a_call_with_an_approval(ledger: Ledger) -> None:
    ledger.append_batch(
        [
            decision("c1", outcome="pending", approval="k3v9qz2m", tool="shell"),
            decision("c2"),
            r.raised(session="chat-1", from_=PRIVATE, to=TAINTED),
        ]
    )
    ledger.append(*r.executed(session="chat-1", call="c2", ok=True, exit_code=0, label=PRIVATE))
    ledger.append(
        *r.verdict(approval="k3v9qz2m", approve=True, by="console", scope="once", outcome="allowed")
    )
    ledger.append(*r.executed(session="chat-1", call="c1", ok=False, exit_code=1))


def test_the_index_links_decision_verdict_and_execution_and_survives_reopen(
    opened: Ledger,
) -> None:
    a_call_with_an_approval(opened)
    for _ in range(2):
        held = opened.lookup("chat-1", "c1")
        assert held is not None
        assert held.decision["outcome"] == "pending" and held.decision["seq"] == 1
        assert held.verdict is not None and held.verdict["approve"] is True
        assert held.executed is not None and held.executed["exit"] == 1
        plain = opened.lookup("chat-1", "c2")
        assert plain is not None and plain.verdict is None
        assert plain.executed is not None and plain.executed["ok"] is True
        assert opened.approval("k3v9qz2m") == ("chat-1", "c1")
        assert opened.approval("nope") is None and opened.lookup("chat-2", "c1") is None
        opened.reopen()


def test_a_call_is_indexed_by_its_first_decision_only(opened: Ledger, path: Path) -> None:
    opened.append(*decision("c1"))
    opened.append(*decision("c1", outcome="denied", reason="no_grant"))
    held = opened.lookup("chat-1", "c1")
    assert held is not None and held.decision["outcome"] == "allowed"
    opened.close()
    with open_again(path) as again:
        held = again.lookup("chat-1", "c1")
        assert held is not None and held.decision["seq"] == 1


def test_the_index_is_written_after_the_answer_yet_every_use_and_its_mark_hold_each_call(
    opened: Ledger, path: Path
) -> None:
    """The index's rows are written once a batch's answers are out (`index_appended`), or
    before the index is next used, whichever comes first: a lookup, and the mark that tells
    a later start where to read from, never miss a call appended before them."""
    opened.append(*decision("c1"))
    opened.persist()  # marks the index as holding seq 1: so it must hold c1
    opened.append(*decision("c2"))
    opened.index_appended()
    opened.append(*decision("c3"))
    assert opened.approval("none") is None  # any use of the index takes c3 in first
    index = Index(path.with_name(INDEX_FILE))  # what a start after a crash would find
    try:
        assert index.covered.head.seq == 1 and index.lookup("chat-1", "c1") is not None
    finally:
        index.close()
    for call in ("c1", "c2", "c3"):
        held = opened.lookup("chat-1", call)
        assert held is not None and held.decision["call"] == call


def test_an_index_that_cannot_be_written_refuses_the_lookup_until_a_reopen_rebuilds_it(
    opened: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(index: Index, added: list[tuple[r.Record, int]]) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    with monkeypatch.context() as patched:
        patched.setattr(Index, "add_all", fail)
        (head,) = opened.append_batch([decision("c1")])  # durable: the call is answered
        assert head.seq == 1
        with pytest.raises(LedgerUnavailable, match="cannot write the ledger's index"):
            opened.lookup("chat-1", "c1")
        assert opened.state is LedgerState.FAILED
    opened.reopen()
    assert opened.state is LedgerState.OK
    held = opened.lookup("chat-1", "c1")
    assert held is not None and held.decision["seq"] == 1


def test_tail_gives_the_last_records_oldest_first_and_filters_by_session(
    opened: Ledger,
) -> None:
    a_call_with_an_approval(opened)
    opened.append(*decision("x1", session="other"))
    opened.append(*r.absorbed(parent="other", child="chat-1", to=TAINTED))
    assert [rec["seq"] for rec in opened.tail(3)] == [6, 7, 8]
    assert [rec["seq"] for rec in opened.tail(100)] == list(range(1, 9))
    mine = opened.tail(100, session="chat-1")
    assert [rec["kind"] for rec in mine] == [
        "decision",
        "decision",
        "raised",
        "executed",
        "verdict",
        "executed",
        "absorbed",
    ]
    assert [rec["seq"] for rec in opened.tail(2, session="other")] == [7, 8]
    assert opened.tail(0) == [] and opened.tail(5, session="nobody") == []


def test_tail_reads_long_lines_across_blocks(opened: Ledger) -> None:
    big = "x" * 200_000
    opened.append_batch([decision("a"), decision("b", arguments=big), decision("c")])
    got = opened.tail(3)
    assert [rec["call"] for rec in got] == ["a", "b", "c"] and got[1]["arguments"] == big


# --- hostile files, at random ---------------------------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=st.integers(0, 10_000), junk=st.binary(min_size=1, max_size=64))
def test_junk_anywhere_in_the_file_opens_ok_or_broken_never_raises(
    tmp_path: Path, where: int, junk: bytes
) -> None:
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "ledger.jsonl"
    fill(path, 4)
    data = path.read_bytes()
    at = where % (len(data) + 1)
    path.write_bytes(data[:at] + junk + data[at:])
    with open_again(path) as ledger:  # with its index and head: never raises either
        assert ledger.state in (LedgerState.OK, LedgerState.BROKEN)
    forget_what_brokerd_derived(path)  # so that the start reads every line, as verify does
    with open_again(path) as ledger:
        assert ledger.state in (LedgerState.OK, LedgerState.BROKEN)
        assert (ledger.problem is None) == (ledger.state is LedgerState.OK)
        ok = ledger.state is LedgerState.OK
    report = verify(path)
    assert report.ok == ok
    if report.ok:  # at most the damaged last line was cut; every line before it is intact
        assert path.read_bytes().startswith(data[: data.rfind(b"\n", 0, at) + 1])
