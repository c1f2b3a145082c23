"""What `bxctl status` says of the ledger (issues 10, 28), from brokerd's answer and the
supervisor's word on brokerd: a line, a JSON part, and exit 3 unless it is ok on a disk with
room; a line for each full disk; the seq read from the ledger's end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bxcore.home import disk
from bxcore.wire.messages import LedgerHealth, LedgerStatus, ServiceInfo, ServiceState
from bxctl.ledger_view import FREE_SOME_SPACE, LedgerView, disk_json, disk_lines, ledger_view
from bxctl.status_cmd import newest_seq
from tests.support.ledger_file import GrowingLedger


def brokerd(state: ServiceState = ServiceState.RUNNING) -> ServiceInfo:
    return ServiceInfo("brokerd", state, 0, "2026-12-01T00:00:00.000Z", 4100)


AUDIT = Path("/h/audit")
ROOM = 10 * 2**30  # a disk with room


def said(state: str, seq: int, problem: str | None = None, free: int | None = ROOM) -> Any:
    return LedgerStatus("a1", LedgerHealth(state), seq, problem, free)


@pytest.mark.parametrize(
    ("answer", "line", "style", "bad"),
    [
        (said("ok", 41), "ledger ok (seq 41)", "green", False),
        (said("ok", 41, free=None), "ledger ok (seq 41)", "green", False),
        (
            said("loading", 0),
            "ledger loading: calls wait until it is read",
            "yellow",
            True,
        ),
        (
            said("failed", 9, "cannot fsync: Input/output error"),
            "ledger failed: cannot fsync: Input/output error: every call is denied "
            "audit_unavailable; see `bxctl logs brokerd`",
            "red",
            True,
        ),
        (
            said("broken", 5, "it ends at seq 5, before the head 9"),
            "ledger broken: it ends at seq 5, before the head 9: every call is denied "
            "audit_unavailable until the owner decides: `bxctl audit verify` shows it, "
            "`bxctl audit accept` takes it as it is",
            "red",
            True,
        ),
        (said("closed", 3), "ledger closed", "red", True),
    ],
)
def test_each_state_brokerd_says_has_its_line_and_only_ok_is_not_bad(
    answer: LedgerStatus, line: str, style: str, bad: bool
) -> None:
    view = ledger_view(answer, brokerd(), AUDIT)
    assert view is not None
    assert view.line() == (line, style)
    assert view.bad is bad
    assert view.json() == {
        "state": answer.state.value,
        "problem": answer.problem,
        "seq": answer.seq,
        "free": answer.free,
        "full": False,
    }
    assert (view.up_problem() is not None) is (answer.state.value in ("failed", "broken"))


def test_a_ledger_ok_on_a_full_disk_is_never_said_ok() -> None:
    view = ledger_view(said("ok", 41, free=12 * 1024), brokerd(), AUDIT)
    assert view is not None and view.bad and view.full
    line, style = view.line()
    assert line.startswith("ledger at risk (seq 41): disk full: the disk holding /h/audit is full")
    assert "(12 KB free)" in line and "ledger ok" not in line and style == "red"
    assert view.up_problem() == line


def test_a_ledger_failed_for_want_of_room_says_to_free_some_space() -> None:
    problem = "cannot write /h/audit/ledger.jsonl: the disk holding /h/audit is full (0 bytes free)"
    view = ledger_view(said("failed", 9, problem, free=0), brokerd(), AUDIT)
    assert view is not None
    line, _ = view.line()
    assert line == (
        f"ledger failed: {problem}: every call is denied audit_unavailable; {FREE_SOME_SPACE}: "
        "brokerd writes again by itself"
    )


@pytest.mark.parametrize(
    ("answer", "info", "problem"),
    [
        ("brokerd did not answer in 3 s", brokerd(), "brokerd did not answer in 3 s"),
        (None, brokerd(), "brokerd did not say"),
        (said("ok", 1), brokerd(ServiceState.FAILED), "brokerd is not running"),
    ],
)
def test_what_brokerd_did_not_say_is_unknown_and_not_bad_by_itself(
    answer: Any, info: ServiceInfo, problem: str
) -> None:
    view = ledger_view(answer, info, AUDIT)
    assert view == LedgerView("unknown", problem)
    assert not view.bad and view.up_problem() is None
    assert view.line() == (f"ledger state unknown: {problem}", "yellow")


def test_a_box_without_brokerd_has_no_ledger_line() -> None:
    assert ledger_view(said("ok", 1), None, AUDIT) is None


def test_each_full_disk_of_the_home_has_a_line_naming_it_its_room_and_what_it_holds() -> None:
    disks = [
        disk.Disk(Path("/h/audit"), ("the ledger", "the histories"), 12 * 1024),
        disk.Disk(Path("/logs"), ("the logs",), ROOM),
    ]
    assert disk_lines(disks) == [
        "disk full: the disk holding /h/audit is full (12 KB free): the ledger and the "
        f"histories cannot be written; {FREE_SOME_SPACE}"
    ]
    assert [d["full"] for d in disk_json(disks)] == [True, False]


def test_the_newest_seq_is_the_ledgers_last_whole_record(tmp_path: Path) -> None:
    """`status` says the ledger's head now, not the seq brokerd reported when it started."""
    ledger = GrowingLedger(tmp_path / "ledger.jsonl")
    assert newest_seq(ledger.path) is None  # no record yet
    ledger.grow(3)
    assert newest_seq(ledger.path) == 3
    with open(ledger.path, "ab") as torn:
        torn.write(b'{"seq":4,"at":"2026-')  # a record being written
    assert newest_seq(ledger.path) == 3
    assert newest_seq(tmp_path / "missing.jsonl") is None
