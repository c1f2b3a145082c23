"""Stop (`cancel`, SPEC §12.2) through gatewayd's real `gateway` socket, with real brokerd,
memoryd and loopd and a fake model: a turn whose model is slow ends `cancelled` at once; a turn
waiting on an approval ends `cancelled` and the approval is denied, recorded `by` "owner (turn
cancelled)"; a call already running finishes and is recorded, and the model never reads its
result; the next owner message runs a turn as usual.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from bxcore.wire.messages import (
    Accepted,
    ApprovalInfo,
    AssistantText,
    Cancel,
    Cancelled,
    EndReason,
    Events,
    EventsQuery,
    OwnerMessage,
    PendingList,
    PendingQuery,
    Scope,
    Settled,
    ToolDenied,
    ToolDone,
    TurnEnd,
    VerdictRequest,
)
from services.loopd.tools import CANCELLED_RESULT
from tests.fakes.model_server import Answer
from tests.support.brokerd import args, ledger_records
from tests.support.e2e import results_read
from tests.support.owner import Box, running_box, wait_until

QUICKLY_S = 5.0  # a stopped turn's end comes well within this (the model would take 60 s)


@pytest.fixture(scope="module")
def box() -> Iterator[Box]:
    with running_box() as box:
        yield box


def shell(box: Box, command: str) -> Answer:
    return box.model.calls(("shell", args(command=command, cwd=str(box.home / "workspace"))))


def say(box: Box, session: str, text: str) -> Accepted:
    accepted = box.ask(OwnerMessage(f"m-{time.monotonic_ns()}", session, text))
    assert isinstance(accepted, Accepted), accepted
    return accepted


def pending_in(box: Box, session: str) -> ApprovalInfo:
    def found() -> ApprovalInfo | None:
        answer = box.ask(EventsQuery("p", session, 0, 1000))
        assert isinstance(answer, Events), answer
        return answer.pending[0] if answer.pending else None

    info: ApprovalInfo = wait_until(found, 15, f"an approval pending in {session}")
    return info


def verdicts_on(box: Box, approval: str) -> list[dict[str, Any]]:
    return [
        r for r in ledger_records(box.home) if r["kind"] == "verdict" and r["approval"] == approval
    ]


def test_a_turn_whose_model_is_slow_ends_cancelled_at_once_and_the_next_turn_runs(
    box: Box,
) -> None:
    box.model.script("think it over slowly", Answer(text="too late", delay_s=60))
    box.model.script("and now?", Answer(text="here I am"))
    assert say(box, "slow", "think it over slowly").turn == 1
    wait_until(lambda: box.model.requests_for("think it over slowly"), 10, "the model asked")

    started = time.monotonic()
    assert box.ask(Cancel("c1", "slow"), timeout=30) == Cancelled("c1", "slow", 1)
    events = box.turn("slow", 1)
    assert time.monotonic() - started < QUICKLY_S
    assert [e.event for e in events][-1] == TurnEnd(EndReason.CANCELLED)
    assert not any(isinstance(e.event, AssistantText) for e in events)
    # A retry gets the first answer; a new cancel finds nothing running.
    assert box.ask(Cancel("c1", "slow"), timeout=30) == Cancelled("c1", "slow", 1)
    assert box.ask(Cancel("c2", "slow"), timeout=30) == Cancelled("c2", "slow", None)

    after = say(box, "slow", "and now?")
    assert after.turn == 2
    ended = box.turn("slow", 2, after.seq - 1)
    assert [e.event for e in ended][-2:] == [
        AssistantText("here I am"),
        TurnEnd(EndReason.DONE),
    ]
    (request,) = box.model.requests_for("and now?")
    assert [(m["role"], m["content"]) for m in request if m["role"] == "user"] == [
        ("user", "think it over slowly"),
        ("user", "and now?"),
    ]


def test_a_turn_waiting_on_an_approval_ends_cancelled_and_the_approval_is_denied(
    box: Box,
) -> None:
    box.model.script("clean the workspace", shell(box, "rm -rf ./*"), Answer(text="cleaned"))
    box.model.script("what happened?", Answer(text="you stopped me"))
    say(box, "asks", "clean the workspace")
    info = pending_in(box, "asks")

    started = time.monotonic()
    assert box.ask(Cancel("c1", "asks"), timeout=30) == Cancelled("c1", "asks", 1)
    events = [e.event for e in box.turn("asks", 1)]
    assert time.monotonic() - started < QUICKLY_S
    assert events[-1] == TurnEnd(EndReason.CANCELLED)
    assert not any(isinstance(e, ToolDenied | ToolDone) for e in events)

    listed = box.ask(PendingQuery("q"))
    assert isinstance(listed, PendingList)
    assert info.approval not in {a.approval for a in listed.approvals}
    (verdict,) = verdicts_on(box, info.approval)
    assert (verdict["approve"], verdict["by"], verdict["reason"]) == (
        False,
        "owner (turn cancelled)",
        "owner_denied",
    )
    again = box.bxctl("approve", info.approval)
    assert again.returncode == 1 and "already settled" in again.stderr

    after = say(box, "asks", "what happened?")
    assert [e.event for e in box.turn("asks", 2, after.seq - 1)][-1] == TurnEnd(EndReason.DONE)
    (request,) = box.model.requests_for("what happened?")
    assert results_read(request) == [CANCELLED_RESULT]  # the call was never run


def test_a_call_already_running_finishes_and_is_recorded_but_the_model_never_reads_it(
    box: Box,
) -> None:
    marker = box.home / "workspace" / "ran-anyway"
    box.model.script("take your time", shell(box, "sleep 2; echo $((6 * 7)) | tee ran-anyway"))
    box.model.script("so?", Answer(text="ok"))
    say(box, "runs", "take your time")
    info = pending_in(box, "runs")
    verdict = VerdictRequest("v1", info.approval, True, Scope.ONCE, "the test")
    assert isinstance(box.ask(verdict, timeout=20), Settled)

    time.sleep(0.5)  # the sandbox is running the command
    assert box.ask(Cancel("c1", "runs"), timeout=30) == Cancelled("c1", "runs", 1)
    assert [e.event for e in box.turn("runs", 1)][-1] == TurnEnd(EndReason.CANCELLED)
    assert not marker.exists(), "stopped before the command ended"

    executed = wait_until(
        lambda: [
            r
            for r in ledger_records(box.home)
            if r["kind"] == "executed" and r.get("session") == "runs"
        ],
        20,
        "the execution recorded",
    )
    assert [r["call"] for r in executed] == [info.call]
    assert marker.read_text() == "42\n"
    after = say(box, "runs", "so?")
    assert [e.event for e in box.turn("runs", 2, after.seq - 1)][-1] == TurnEnd(EndReason.DONE)
    (request,) = box.model.requests_for("so?")
    assert results_read(request) == [CANCELLED_RESULT]  # not its output, 42
