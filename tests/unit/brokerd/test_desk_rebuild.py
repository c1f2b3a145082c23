"""The pending approvals rebuilt from the ledger at start (§9.4): a decision brokerd could
not have written is said in the log and passed over; it never stops the start."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from bxcore.labels import DataClass, Label
from services.brokerd.core import records
from services.brokerd.core.records import CallRecords
from services.brokerd.desk import Desk

PRIVATE = Label(DataClass.PRIVATE, False)


def pending(call: str, **fields: Any) -> CallRecords:
    _, decision = records.decision(
        session="s", call=call, tool="read_file", arguments="{}", label=PRIVATE,
        outcome="pending", grant="notes", grant_sha256="5f" * 32, approval=f"ap-{call}",
        why="the grant asks",
    )  # fmt: skip
    as_read = {**decision, "label": {"class": "private", "untrusted": False}}
    return CallRecords({"at": "2026-11-30T02:34:30.123Z", **as_read, **fields})


def test_a_pending_decision_without_its_grant_is_logged_and_the_others_are_rebuilt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = pending("c1")
    del broken.decision["grant"]

    async def rebuilt() -> list[str]:
        nothing = SimpleNamespace()
        book = SimpleNamespace(tool_of=lambda key: None)  # the ledger names no call's tool
        judge = SimpleNamespace(scope=lambda session: None)  # no job's run
        desk = Desk(book=book, driver=nothing, judge=judge, publish=print, ttl_s=60.0)  # type: ignore[arg-type]
        desk.rebuild([broken, pending("c2")], [])
        return [approval.call for approval in desk.approvals.pending()]

    assert anyio.run(rebuilt) == ["c2"]
    assert "the ledger's decision for call 'c1' holds no approval brokerd can rebuild" in (
        caplog.text
    )
