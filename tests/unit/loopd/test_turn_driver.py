"""`Turns` as the turn machine's driver, in-process: an approval's long polls are carried out on
the call's one client until it settles, the owner shown it pending once (the machine's
`wait_for_owner`, then `wait_again`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bxcore.wire.messages import (
    AssistantText,
    AwaitApproval,
    EndReason,
    OwnerSaid,
    Pending,
    ToolCalled,
    ToolDone,
    ToolPending,
    ToolRequest,
    ToolResponse,
    TurnEnd,
)
from tests.unit.loopd.test_turn_cancel import READ, Box, Broker

pytestmark = pytest.mark.anyio


class SettledOnTheSecondPoll(Broker):
    """brokerd holds the read_file for the owner, who answers during the second long poll."""

    def __init__(self) -> None:
        super().__init__("done")
        self.polls = 0

    async def ask(self, message: Any, **options: Any) -> Any:
        if isinstance(message, ToolRequest) or (
            isinstance(message, AwaitApproval) and self.polls == 0
        ):
            self.polls += isinstance(message, AwaitApproval)
            self.sent.append(message)
            return ToolResponse(message.id, Pending("k3v9qz2m"))
        return await super().ask(message, **options)


async def test_an_approval_is_polled_until_it_settles_shown_pending_once(tmp_path: Path) -> None:
    broker = SettledOnTheSecondPoll()
    box = Box(tmp_path, broker)
    with box.sessions.held("s") as session:
        turn = await box.say(session, "read")
        assert await box.turns.run(session, turn) == "read: the file's text"
    assert [type(m) for m in broker.sent if isinstance(m, ToolRequest | AwaitApproval)] == [
        ToolRequest,
        AwaitApproval,
        AwaitApproval,
    ]
    assert broker.closed == 1  # one client for the call and its polls
    assert [event for _, event in box.events("s")] == [
        OwnerSaid("read"),
        ToolCalled("read_file", READ),
        ToolPending("read_file", "k3v9qz2m"),
        ToolDone("read_file", True, len("the file's text"), "the file's text"),
        AssistantText("read: the file's text"),
        TurnEnd(EndReason.DONE),
    ]
