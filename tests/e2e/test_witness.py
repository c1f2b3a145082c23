"""The witness at work in a whole box (SPEC §7): gatewayd keeps the ledger heads brokerd
publishes, out of brokerd's reach, so a ledger cut back after the box stopped (a chain that
is still whole, and would verify on its own) is reported as tampered.
"""

from __future__ import annotations

import hashlib
import json

from services.brokerd.ledger import verify
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args, ledger_lines
from tests.support.e2e import box_up


def test_audit_verify_reports_a_ledger_cut_below_the_head_gatewayd_witnessed() -> None:
    with box_up() as box:
        ledger = box.home / "audit" / "ledger.jsonl"
        witness = box.home / "witness" / "gatewayd.json"
        (box.home / "workspace" / "a.md").write_text("hello")
        reads = [("read_file", args(path=str(box.home / "workspace" / name))) for name in "ab"]
        box.model.script("read both", box.model.calls(*reads), Answer(text="One was missing."))
        result = box.bxctl("chat", "--session", "witnessed", "read both")
        assert result.returncode == 0, result.stderr

        def head() -> dict[str, object]:
            last = ledger_lines(box.home)[-1]
            return {"seq": json.loads(last)["seq"], "hash": hashlib.sha256(last).hexdigest()}

        def witnessed() -> bool:
            return witness.exists() and json.loads(witness.read_text()) == head()

        wait_until(witnessed, 10, "gatewayd's witness of the ledger's head")
        stopped = box.bxctl("down")
        assert stopped.returncode == 0, stopped.stderr
        seen = json.loads(witness.read_text())
        assert seen["seq"] >= 5  # started, and each read's decision and execution
        assert not (box.home / "witness" / "bxctl.json").exists(), "only gatewayd saw the head"

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
