"""Stop in gatewayd, in process (SPEC §12.2): after a turn is stopped, an approval brokerd
announces late for it (a call that was on its way) is denied as it comes, `by` "owner (turn
cancelled)"; once the owner speaks in the session again, its calls are asked as usual."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from bxcore.client import Client
from bxcore.labels import CLEAN
from bxcore.wire.messages import (
    Accepted,
    ApprovalInfo,
    ApprovalRequested,
    ApprovalState,
    AskWhy,
    Cancel,
    Cancelled,
    OwnerMessage,
    PendingList,
    PendingQuery,
    Settled,
    VerdictRequest,
)
from services.gatewayd.gateway import CANCELLED_BY, Gateway
from services.gatewayd.heads import HeadKeeper

pytestmark = pytest.mark.anyio


class Loop:
    async def ask(self, message: Any, **_: Any) -> Any:
        if isinstance(message, Cancel):
            return Cancelled(message.id, message.session, 1)
        assert isinstance(message, OwnerMessage)
        return Accepted(message.id, message.session, 2, 5)


class Admin:
    def __init__(self) -> None:
        self.verdicts: list[VerdictRequest] = []

    async def ask(self, message: Any, **_: Any) -> Any:
        if isinstance(message, PendingQuery):
            return PendingList(message.id, ())
        assert isinstance(message, VerdictRequest)
        self.verdicts.append(message)
        return Settled(message.id, message.approval, ApprovalState.REFUSED)


def asked(approval: str, session: str) -> ApprovalRequested:
    info = ApprovalInfo(approval, session, "c1", "shell", "{}", "g", CLEAN, AskWhy.GRANT_ASKS,
                        "2026-12-01T00:00:00Z", "2026-12-01T00:10:00Z")  # fmt: skip
    return ApprovalRequested(info)


async def test_a_late_approval_of_a_stopped_turn_is_denied_until_the_owner_speaks_again(
    tmp_path: Path,
) -> None:
    admin = Admin()
    heads = HeadKeeper(tmp_path / "witness.json", tmp_path / "ledger.jsonl")
    loop = cast(Client, Loop())
    gateway = Gateway(loop, loop, cast(Client, admin), heads)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(gateway.run)
            await anyio.sleep(0)
            assert isinstance(await gateway.cancel(Cancel("c", "chat")), Cancelled)
            gateway.on_broker_event(asked("aaaaaaaa", "chat"))
            gateway.on_broker_event(asked("bbbbbbbb", "sub-chat-1"))  # its sub-agent's
            gateway.on_broker_event(asked("cccccccc", "other"))  # another session's
            while len(admin.verdicts) < 2:
                await anyio.sleep(0.01)
            assert {(v.approval, v.approve, v.by) for v in admin.verdicts} == {
                ("aaaaaaaa", False, CANCELLED_BY),
                ("bbbbbbbb", False, CANCELLED_BY),
            }
            assert set(gateway.pending) == {"cccccccc"}

            await gateway.owner_message(OwnerMessage("m", "chat", "go on"))
            gateway.on_broker_event(asked("dddddddd", "chat"))
            await anyio.sleep(0.05)
            assert len(admin.verdicts) == 2 and "dddddddd" in gateway.pending
            tasks.cancel_scope.cancel()
