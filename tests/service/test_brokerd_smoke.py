"""brokerd as a real process: it starts, answers, decides, runs confined, and stops."""

from __future__ import annotations

import json
from pathlib import Path

from bxcore.wire.messages import (
    ApprovalState,
    Done,
    Pending,
    PendingList,
    PendingQuery,
    Scope,
    Settled,
    ToolRequest,
    ToolResponse,
    VerdictRequest,
)
from tests.support.daemons import init_home, running


def test_a_granted_read_runs_confined_and_an_approved_shell_runs_what_was_shown(
    short_tmp: Path,
) -> None:
    home = init_home(short_tmp / "h")
    (home / "workspace" / "a.md").write_text("hello")
    with running("brokerd", home) as brokerd:
        read = brokerd.ask(
            ToolRequest(
                "r1", "chat-1", "c1", "read_file", json.dumps({"path": f"{home}/workspace/a.md"})
            )
        )
        assert isinstance(read, ToolResponse) and read.outcome == Done(
            True, "hello", read.outcome.label
        )
        asked = brokerd.ask(
            ToolRequest(
                "r2",
                "chat-1",
                "c2",
                "shell",
                json.dumps({"command": "echo hi", "cwd": f"{home}/workspace"}),
            )
        )
        assert isinstance(asked.outcome, Pending)
        listed = brokerd.ask(PendingQuery("p1"), socket="admin")
        assert isinstance(listed, PendingList)
        assert [a.arguments for a in listed.approvals] == [
            json.dumps({"command": "echo hi", "cwd": f"{home}/workspace"}, separators=(",", ":"))
        ]
        settled = brokerd.ask(
            VerdictRequest("v1", asked.outcome.approval, True, Scope.ONCE, "test"), socket="admin"
        )
        assert settled == Settled("v1", asked.outcome.approval, ApprovalState.APPROVED)
        from bxcore.wire.messages import AwaitApproval

        ran = brokerd.ask(AwaitApproval("w1", "chat-1", asked.outcome.approval, 10_000))
        assert isinstance(ran.outcome, Done)
        assert ran.outcome.output == "hi\n[exit status 0]"
