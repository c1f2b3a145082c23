"""The witness at work in a whole box (SPEC §7): gatewayd keeps the ledger heads brokerd
publishes, out of brokerd's reach, so a ledger cut back after the box stopped (a chain that
is still whole, and would verify on its own) is reported as tampered, and so is a witnessed
record replaced by a torn stub (which would otherwise pass for an unanswered torn write).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from services.brokerd.ledger.verify import verify
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args, ledger_lines
from tests.support.e2e import UpBox, box_up


def witnessed_and_stopped(box: UpBox) -> dict[str, object]:
    """Run one turn of two reads, wait until gatewayd's witness holds the ledger's head, stop
    the box; the head gatewayd saw."""
    witness = box.home / "witness" / "gatewayd.json"
    (box.home / "workspace" / "a.md").write_text("hello")
    reads = [("read_file", args(path=str(box.home / "workspace" / name))) for name in "ab"]
    box.model.script("read both", box.model.calls(*reads), Answer(text="One was missing."))
    result = box.bxctl("chat", "--session", "witnessed", "read both")
    assert result.returncode == 0, result.stderr

    def head() -> dict[str, object]:
        last = ledger_lines(box.home)[-1]
        size = ledger_of(box).stat().st_size  # where that line ends (issue 10)
        return {"seq": json.loads(last)["seq"], "hash": hashlib.sha256(last).hexdigest(),
                "size": size}  # fmt: skip

    def witnessed() -> bool:
        return witness.exists() and json.loads(witness.read_text()) == head()

    wait_until(witnessed, 10, "gatewayd's witness of the ledger's head")
    stopped = box.bxctl("down")
    assert stopped.returncode == 0, stopped.stderr
    seen: dict[str, object] = json.loads(witness.read_text())
    assert isinstance(seen["seq"], int) and seen["seq"] >= 5  # started, each read's records
    assert not (box.home / "witness" / "bxctl.json").exists(), "only gatewayd saw the head"
    return seen


def ledger_of(box: UpBox) -> Path:
    return box.home / "audit" / "ledger.jsonl"


def test_audit_verify_reports_a_ledger_cut_below_the_head_gatewayd_witnessed() -> None:
    with box_up() as box:
        seen = witnessed_and_stopped(box)
        ledger = ledger_of(box)
        whole = ledger.read_bytes()
        ledger.write_bytes(b"".join(whole.splitlines(keepends=True)[:2]))
        assert verify(ledger).ok, "the cut chain is whole: only the witness can tell"
        cut = box.bxctl("audit", "verify")
        assert cut.returncode == 1
        assert cut.stdout == (
            f"bad: the ledger ends at seq 2, before the head seen (seq {seen['seq']}): "
            "cut or rewritten\n"
        )
        assert not (box.home / "witness" / "bxctl.json").exists(), "the cut head is not kept"
        again = box.bxctl("audit", "verify")
        assert (again.returncode, again.stdout) == (1, cut.stdout)


def test_audit_verify_reports_a_witnessed_last_record_replaced_by_a_torn_stub() -> None:
    """Issue 9 (9): the stub looks like a write brokerd never answered, which alone would be
    benign; but the owner saw that record whole, so the ledger falls short of the witness."""
    with box_up() as box:
        seen = witnessed_and_stopped(box)
        ledger = ledger_of(box)
        lines = ledger.read_bytes().splitlines(keepends=True)
        ledger.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])  # no newline, not JSON
        assert verify(ledger).torn, "alone, the stub passes for a torn write"
        stub = box.bxctl("audit", "verify")
        assert stub.returncode == 1, stub.stdout
        last = len(lines)
        assert stub.stdout == (
            f"bad: line {last}: the last line has no newline (a torn write); the ledger ends "
            f"at seq {last - 1}, before the head seen (seq {seen['seq']}): cut or rewritten\n"
        )
        assert not (box.home / "witness" / "bxctl.json").exists(), "no head is kept"
        as_json = json.loads(box.bxctl("audit", "verify", "--json").stdout)
        assert (as_json["ok"], as_json["torn"], as_json["bad_line"]) == (False, False, last)
