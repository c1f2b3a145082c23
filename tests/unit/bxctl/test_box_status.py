"""What `bxctl status` says of the ledger (issue 10), from brokerd's report and the
supervisor's word on brokerd: a line, a JSON part, and exit 3 unless it is ok; the seq read
from the ledger's end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bxcore.messages import ServiceInfo, ServiceState
from bxctl.box_view import LedgerView, ledger_view
from bxctl.status_cmd import newest_seq
from tests.support.ledger_file import GrowingLedger


def brokerd(state: ServiceState = ServiceState.RUNNING) -> ServiceInfo:
    return ServiceInfo("brokerd", state, 0, "2026-12-01T00:00:00.000Z", 4100)


@pytest.mark.parametrize(
    ("part", "line", "style", "bad"),
    [
        ({"state": "ok", "problem": None, "seq": 41}, "ledger ok (seq 41)", "green", False),
        (
            {"state": "loading", "problem": None, "seq": 0},
            "ledger loading: calls wait until it is read",
            "yellow",
            True,
        ),
        (
            {"state": "failed", "problem": "cannot fsync: Input/output error", "seq": 9},
            "ledger failed: cannot fsync: Input/output error: every call is denied "
            "audit_unavailable; see `bxctl logs brokerd`",
            "red",
            True,
        ),
        (
            {"state": "broken", "problem": "it ends at seq 5, before the head 9", "seq": 5},
            "ledger broken: it ends at seq 5, before the head 9: every call is denied "
            "audit_unavailable until the owner decides: `bxctl audit verify` shows it, "
            "`bxctl audit accept` takes it as it is",
            "red",
            True,
        ),
        ({"state": "closed", "problem": None, "seq": 3}, "ledger closed", "red", True),
    ],
)
def test_each_state_brokerd_reports_has_its_line_and_only_ok_is_not_bad(
    part: dict[str, Any], line: str, style: str, bad: bool
) -> None:
    view = ledger_view(part, brokerd(), fresh=True)
    assert view is not None
    assert view.line() == (line, style)
    assert view.bad is bad
    assert view.json() == part


@pytest.mark.parametrize(
    ("part", "info", "fresh", "problem"),
    [
        (None, brokerd(), True, "brokerd has not reported it since it started"),
        ({"state": "ok", "problem": None, "seq": 1}, brokerd(), False,
         "brokerd has not reported it since it started"),
        ({"state": "ok", "problem": None, "seq": 1}, brokerd(ServiceState.FAILED), True,
         "brokerd is not running"),
        ("ok", brokerd(), True, "brokerd's report cannot be read"),
        ({"state": 3}, brokerd(), True, "brokerd's report cannot be read"),
        ({"state": "ok", "problem": 7}, brokerd(), True, "brokerd's report cannot be read"),
    ],
)  # fmt: skip
def test_what_brokerd_did_not_say_is_unknown_and_not_bad_by_itself(
    part: Any, info: ServiceInfo, fresh: bool, problem: str
) -> None:
    view = ledger_view(part, info, fresh=fresh)
    assert view == LedgerView("unknown", problem)
    assert not view.bad
    assert view.line() == (f"ledger state unknown: {problem}", "yellow")


def test_a_box_without_brokerd_has_no_ledger_line() -> None:
    assert ledger_view({"state": "ok", "seq": 1}, None, fresh=True) is None


def test_a_seq_that_is_not_a_number_is_left_out() -> None:
    view = ledger_view({"state": "ok", "problem": None, "seq": True}, brokerd(), fresh=True)
    assert view == LedgerView("ok", None, None)


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
