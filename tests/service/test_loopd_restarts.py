"""Restarts (SPEC §10.6, I8): loopd killed with SIGKILL mid-turn resumes the turn from its
history when it starts again; a tool call in flight is sent again with the same call id and
brokerd answers it once, so the command it runs has run once.

Each test has its own home: it kills loopd.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    PendingList,
    PendingQuery,
    Scope,
    Settled,
    ToolCalled,
    ToolDone,
    ToolPending,
    TurnEnd,
    TurnError,
    VerdictRequest,
)
from services.loopd.tools import too_many_calls, too_many_calls_said
from tests.fakes.model_server import Answer, FakeModel
from tests.fakes.model_server import Call as ModelCall
from tests.support.brokerd import ledger_records, records_of, short_folder, write_grant
from tests.support.daemons import init_home, sync_request, tool_owned
from tests.support.loopd import Conversations, Loop, answer, call, stack, tool_results


@pytest.fixture
def loop() -> Iterator[Loop]:
    with short_folder() as root, FakeModel() as model:
        home = init_home(root / "h", f'[model]\nbase_url = "{model.base_url}"\n')
        (root / "box").mkdir()  # beside the home: no tool reaches into it
        tool_owned(root / "box")  # the shell writes there
        write_grant(home, "box", tool="shell", mode="allow", path=f"{root}/box")
        with stack(home, model, Conversations()) as running:
            yield running


def wait_until_exists(path: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_a_turn_cut_off_during_a_tool_call_resumes_and_the_call_runs_once(loop: Loop) -> None:
    words = "run the slow command"
    box = loop.home.parent / "box"
    arguments = json.dumps({"command": "echo run >> runs.txt; sleep 2", "cwd": str(box)})
    loop.script(words, [call("shell", arguments), answer("It ran.")])
    turn = loop.say("cut", words)
    runs = box / "runs.txt"
    wait_until_exists(runs)  # the command has started, and sleeps

    loop.restart_loopd()
    events = loop.wait_end("cut", turn, timeout=30)

    assert runs.read_text() == "run\n"
    assert events[-2:] == [AssistantText("It ran."), TurnEnd(EndReason.DONE)]
    (decision,) = [r for r in records_of(loop.home, "cut") if r["kind"] == "decision"]
    assert (decision["tool"], decision["outcome"]) == ("shell", "allowed")
    executed = [r for r in records_of(loop.home, "cut") if r["kind"] == "executed"]
    assert [r["call"] for r in executed] == [decision["call"]]
    assert events.count(ToolCalled("shell", arguments)) == 1  # not shown again on resume
    requests = loop.conversations.requests(words)
    assert len(requests) == 2
    (output,) = tool_results(requests[1])
    assert output == "[exit status 0]"
    assert [e for e in events if isinstance(e, ToolDone)] == [
        ToolDone("shell", True, len(output.encode()), output)
    ]


def test_a_turn_cut_off_while_waiting_for_the_model_resumes_and_completes(loop: Loop) -> None:
    words = "think slowly"
    loop.script(words, [answer("Never read.", delay_s=30), answer("Thought it over.")])
    turn = loop.say("waiting", words)
    loop.conversations.wait_requests(words, 1)

    loop.restart_loopd()
    events = loop.wait_end("waiting", turn)

    assert events[-2:] == [AssistantText("Thought it over."), TurnEnd(EndReason.DONE)]
    assert AssistantText("Never read.") not in events
    first, second = loop.conversations.requests(words)
    assert first["messages"] == second["messages"]  # asked again, the same question


def test_a_sub_agent_cut_off_during_a_tool_call_resumes_under_its_parent(loop: Loop) -> None:
    words = "have a helper run the slow command"
    task = "run the slow command in the box"
    box = loop.home.parent / "box"
    arguments = json.dumps({"command": "echo child >> runs.txt; sleep 2", "cwd": str(box)})
    loop.script(words, [call("spawn", task=task), answer("My helper ran it.")])
    loop.script(task, [call("shell", arguments), answer("Ran it once.")])
    turn = loop.say("nest", words)
    runs = box / "runs.txt"
    wait_until_exists(runs)

    loop.restart_loopd()
    events = loop.wait_end("nest", turn, timeout=30)

    assert events[-2:] == [AssistantText("My helper ran it."), TurnEnd(EndReason.DONE)]
    assert loop.wait_end("sub-nest-1")[-2:] == [
        AssistantText("Ran it once."),
        TurnEnd(EndReason.DONE),
    ]
    assert runs.read_text() == "child\n"
    decided = [r for r in records_of(loop.home, "sub-nest-1") if r["kind"] == "decision"]
    assert [r["tool"] for r in decided] == ["shell"]
    assert [r["child"] for r in ledger_records(loop.home) if r["kind"] == "absorbed"] == [
        "sub-nest-1"
    ]
    assert tool_results(loop.conversations.requests(words)[1]) == ["Ran it once."]
    assert not (loop.home / "sessions" / "sub-nest-2.jsonl").exists()


def test_a_turn_cut_off_while_waiting_for_the_owner_resumes_on_the_same_approval(
    loop: Loop,
) -> None:
    words = "run a command the owner must approve"
    arguments = json.dumps({"command": "echo approved >> ok.txt", "cwd": f"{loop.home}/workspace"})
    loop.script(words, [call("shell", arguments), answer("Approved and ran.")])
    turn = loop.say("approve", words)
    first = loop.wait_for("approve", lambda e: isinstance(e.event, ToolPending)).event
    assert isinstance(first, ToolPending)

    loop.restart_loopd()
    second = loop.wait_for(
        "approve", lambda e: isinstance(e.event, ToolPending) and e.seq > 3
    ).event
    assert second == first  # sent again, answered from the record: the same approval
    listed = sync_request(loop.home, "admin", PendingQuery("p1"))
    assert isinstance(listed, PendingList)
    assert [a.approval for a in listed.approvals if a.session == "approve"] == [first.approval]

    settled = sync_request(
        loop.home, "admin", VerdictRequest("v1", first.approval, True, Scope.ONCE, "the owner")
    )
    assert isinstance(settled, Settled), settled
    events = loop.wait_end("approve", turn)
    assert events[-2:] == [AssistantText("Approved and ran."), TurnEnd(EndReason.DONE)]
    assert (loop.home / "workspace" / "ok.txt").read_text() == "approved\n"
    decided = [r for r in records_of(loop.home, "approve") if r["kind"] == "decision"]
    assert len(decided) == 1


@pytest.mark.parametrize("lost", [1, 2], ids=["turn-end-lost", "text-and-turn-end-lost"])
def test_a_turn_cut_off_after_the_models_last_answer_ends_without_asking_again(
    loop: Loop, lost: int
) -> None:
    """loopd died after writing the model's answer, before the events that end the turn (as
    if the last `lost` lines had never been written)."""
    words = "answer once"
    loop.script(words, [answer("Final words.")])
    turn = loop.say("last", words)
    done = loop.wait_end("last", turn)
    assert done[-2:] == [AssistantText("Final words."), TurnEnd(EndReason.DONE)]

    loop.loopd.kill()
    history = loop.home / "sessions" / "last.jsonl"
    lines = history.read_bytes().splitlines(keepends=True)
    assert b'"model_reply"' in lines[-3]
    history.write_bytes(b"".join(lines[:-lost]))
    loop.restart_loopd()

    assert loop.wait_end("last", turn) == done
    assert len(loop.conversations.requests(words)) == 1


@pytest.fixture
def capped() -> Iterator[Loop]:
    """A home whose model answers may run one tool call each (`max_calls_per_reply = 1`)."""
    with short_folder() as root, FakeModel() as model:
        config = f'[model]\nbase_url = "{model.base_url}"\n[loop]\nmax_calls_per_reply = 1\n'
        with stack(init_home(root / "h", config), model, Conversations()) as running:
            yield running


def test_a_resumed_turn_still_sends_no_call_past_max_calls_per_reply(capped: Loop) -> None:
    """Issue 9: the cut holds across a restart; the refused call never reaches brokerd."""
    loop = capped
    words = "run one command and recall too"
    shell = json.dumps({"command": "echo capped >> capped.txt", "cwd": f"{loop.home}/workspace"})
    recall = json.dumps({"action": "recall", "query": "anything"})
    both = Answer("", (ModelCall("shell", shell), ModelCall("memory", recall)))
    loop.script(words, [both, answer("One ran.")])
    turn = loop.say("capped", words)
    first = loop.wait_for("capped", lambda e: isinstance(e.event, ToolPending))
    assert isinstance(first.event, ToolPending)

    loop.restart_loopd()
    loop.wait_for("capped", lambda e: isinstance(e.event, ToolPending) and e.seq > first.seq)
    settled = sync_request(
        loop.home, "admin", VerdictRequest("v1", first.event.approval, True, Scope.ONCE, "owner")
    )
    assert isinstance(settled, Settled), settled
    events = loop.wait_end("capped", turn)

    assert events[-2:] == [AssistantText("One ran."), TurnEnd(EndReason.DONE)]
    decided = [r for r in records_of(loop.home, "capped") if r["kind"] == "decision"]
    assert [r["tool"] for r in decided] == ["shell"]
    results = tool_results(loop.conversations.requests(words)[-1])
    assert results == ["[exit status 0]", too_many_calls(1).content]
    assert [e for e in events if isinstance(e, TurnError)] == [TurnError(too_many_calls_said(2, 1))]
