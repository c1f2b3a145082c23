"""A model that fails (SPEC §10.2, §14, §16 "Faults"): down, slow, failing, malformed, or
calling tools oddly. The turn ends with an `error` event that says what went wrong and what to
configure, or goes on with a clear tool result; and loopd keeps serving other sessions.

The fake model answers over real HTTP; loopd's `[model] timeout_s` is 1 s here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from itertools import count

import pytest

from bxcore.deny import DenyReason, denial_text
from bxcore.home.layout import Home
from bxcore.wire.messages import (
    AssistantText,
    EndReason,
    OwnerSaid,
    ToolCalled,
    ToolDenied,
    ToolDone,
    TurnEnd,
    TurnError,
)
from services.loopd.tools import cap_result
from tests.fakes.model_server import Action, Answer, Call, Failure, FakeModel, HangUp, Raw
from tests.support.brokerd import records_of, short_folder
from tests.support.daemons import init_home
from tests.support.loopd import (
    Conversations,
    LatePort,
    Loop,
    answer,
    call,
    stack,
    tool_results,
)

TIMEOUT_S = 1


@pytest.fixture(scope="module")
def loop() -> Iterator[Loop]:
    with short_folder() as root, FakeModel() as model:
        home = init_home(
            root / "h", f'[model]\nbase_url = "{model.base_url}"\ntimeout_s = {TIMEOUT_S}\n'
        )
        with stack(home, model, Conversations()) as running:
            yield running


_sessions = count(1)


def assert_serving(loop: Loop) -> None:
    """A new session's turn still runs to its end."""
    n = next(_sessions)
    words = f"are you still there? ({n})"
    loop.script(words, [answer("Still here.")])
    session = f"after-{n}"
    turn = loop.say(session, words)
    assert loop.wait_end(session, turn)[-2:] == [
        AssistantText("Still here."),
        TurnEnd(EndReason.DONE),
    ]
    assert loop.loopd.process.poll() is None


@pytest.mark.parametrize(
    ("case", "actions", "says"),
    [
        (
            "failing",
            [Failure(500, "out of memory")] * 3,
            "the model server at {url} failed (500 Internal Server Error, 3 tries): "
            "out of memory; check the server's log",
        ),
        (
            "hanging-up",
            [HangUp()] * 3,
            "the model server at {url} did not answer "
            "(it closed the connection without answering, 3 tries); "
            "start it, or set [model] base_url in config.toml",
        ),
        (
            "slow",
            [Answer("too late", delay_s=TIMEOUT_S + 2)] * 3,
            f"the model server at {{url}} did not answer within {TIMEOUT_S} s (3 tries); "
            "raise [model] timeout_s in config.toml, or use a smaller model",
        ),
        (
            "malformed",
            [Raw(b'{"choices": [{"message": ')],
            "the model server's answer is not valid: not JSON (",
        ),
    ],
    ids=["failing", "hanging-up", "slow", "malformed"],
)
def test_a_failing_model_ends_the_turn_with_an_error_that_says_why_and_loopd_serves_on(
    loop: Loop, case: str, actions: list[Action], says: str
) -> None:
    words = f"a question for a {case} model"
    loop.script(words, actions)
    session = f"trouble-{case}"
    turn = loop.say(session, words)

    # Meanwhile, another session's turn is not held up by this one.
    other = f"meanwhile {case}"
    loop.script(other, [answer("Quick.")])
    started = time.monotonic()
    loop.say(f"{session}-b", other)
    assert loop.wait_end(f"{session}-b")[-1] == TurnEnd(EndReason.DONE)
    if case == "slow":
        assert time.monotonic() - started < 3 * TIMEOUT_S  # A fails after 3 tries and 1.5 s
        assert all(
            e.turn != turn or not isinstance(e.event, TurnEnd) for e in loop.history(session)
        )

    events = loop.wait_end(session, turn)
    assert events[0] == OwnerSaid(words)
    assert events[-1] == TurnEnd(EndReason.ERROR)
    (error,) = [e for e in events if isinstance(e, TurnError)]
    assert events[-2] == error
    assert error.message.startswith(says.format(url=loop.model.base_url)), error
    assert len(loop.conversations.requests(words)) == len(actions)  # 3 tries, or 1 if not worth it
    assert_serving(loop)


@pytest.mark.parametrize(
    ("name", "sent"),
    [("launch_missiles", True), ("x" * 65, False), ("", False)],
    ids=["unknown", "too-long", "empty"],
)
def test_a_call_to_no_such_tool_reads_back_there_is_no_such_tool_and_the_turn_goes_on(
    loop: Loop, name: str, sent: bool
) -> None:
    words = f"call the tool named {name!r}"
    loop.script(words, [Answer("", (Call(name, "{}"),)), answer("Never mind.")])
    session = f"no-tool-{len(name)}"
    turn = loop.say(session, words)
    events = loop.wait_end(session, turn)

    shown = name if sent else "?"
    assert events == [
        OwnerSaid(words),
        ToolCalled(shown, "{}"),
        ToolDenied(shown, DenyReason.UNKNOWN_TOOL),
        AssistantText("Never mind."),
        TurnEnd(EndReason.DONE),
    ]
    model_read = loop.conversations.requests(words)
    assert tool_results(model_read[1]) == ["Denied: there is no such tool."]
    assert tool_results(model_read[1]) == [denial_text(DenyReason.UNKNOWN_TOOL)]
    decided = [r for r in records_of(loop.home, session) if r["kind"] == "decision"]
    if sent:
        assert [(r["tool"], r["reason"]) for r in decided] == [(name, "unknown_tool")]
    else:  # a name the wire cannot carry never reaches brokerd: nothing ran
        assert decided == []
    assert_serving(loop)


def test_arguments_sent_as_an_object_are_judged_as_their_json_and_the_call_runs(
    loop: Loop,
) -> None:
    text = "written by the owner"
    path = f"{loop.home}/workspace/object.md"
    (loop.home / "workspace" / "object.md").write_text(text)
    words = "read object.md, with arguments as an object"
    loop.script(words, [Answer("", (Call("read_file", {"path": path}),)), answer("Read it.")])
    turn = loop.say("object-args", words)
    events = loop.wait_end("object-args", turn)

    compact = json.dumps({"path": path}, separators=(",", ":"))
    assert events == [
        OwnerSaid(words),
        ToolCalled("read_file", compact),
        ToolDone("read_file", True, len(text), text),
        AssistantText("Read it."),
        TurnEnd(EndReason.DONE),
    ]
    assert tool_results(loop.conversations.requests(words)[1]) == [text]
    (decision,) = [r for r in records_of(loop.home, "object-args") if r["kind"] == "decision"]
    assert (decision["arguments"], decision["outcome"]) == (compact, "allowed")


def test_a_model_server_that_is_down_ends_the_turn_naming_the_url_and_what_to_configure() -> None:
    with short_folder() as root, FakeModel() as model, LatePort() as port:
        base_url = f"http://127.0.0.1:{port.port}/v1"
        home = init_home(root / "h", f'[model]\nbase_url = "{base_url}"\n')
        with stack(home, model, Conversations()) as loop:
            words = "is anybody there?"
            loop.script(words, [answer("Now I am.")])
            turn = loop.say("down", words)
            events = loop.wait_end("down", turn)
            assert events[0] == OwnerSaid(words)
            assert events[-1] == TurnEnd(EndReason.ERROR)
            assert events[-2] == TurnError(
                f"the model server at {base_url} did not answer (connection refused, 3 tries); "
                "start it, or set [model] base_url in config.toml"
            )
            assert model.requests == []

            port.forward_to(model.port)  # the owner starts the server
            turn = loop.say("up", words)
            assert loop.wait_end("up", turn)[-2:] == [
                AssistantText("Now I am."),
                TurnEnd(EndReason.DONE),
            ]


@pytest.mark.parametrize(
    ("size", "reads", "to_brokerd"),
    [(3_000_000, "the arguments are larger than 2097152 bytes", True)],
    ids=["over-2-MiB"],
)
def test_huge_arguments_are_refused_at_once_and_the_owners_view_of_them_is_cut(
    loop: Loop, size: int, reads: str, to_brokerd: bool
) -> None:
    words = f"write {size} bytes of arguments"
    arguments = json.dumps({"path": f"{loop.home}/workspace/x", "content": "y" * size})
    loop.script(words, [call("write_file", arguments), answer("Too big, then.")])
    session = f"huge-{size}"
    started = time.monotonic()
    turn = loop.say(session, words)
    events = loop.wait_end(session, turn)  # pages through the history one event at a time

    assert time.monotonic() - started < 10  # not the broker client's retries
    (called,) = [e for e in events if isinstance(e, ToolCalled)]
    assert called.arguments == cap_result(arguments) != arguments
    assert events[2:] == [
        ToolDenied("write_file", DenyReason.INVALID_ARGUMENTS),
        AssistantText("Too big, then."),
        TurnEnd(EndReason.DONE),
    ]
    model_read = loop.conversations.requests(words)
    assert tool_results(model_read[1]) == [
        f"Denied: the arguments are not valid for this tool: invalid argument shape: {reads}."
    ]
    decided = [r for r in records_of(loop.home, session) if r["kind"] == "decision"]
    assert [r["reason"] for r in decided] == (["invalid_arguments"] if to_brokerd else [])
    assert not (loop.home / "workspace" / "x").exists()
    assert_serving(loop)


def test_arguments_too_large_for_the_history_end_the_turn_with_an_error_and_reach_nothing(
    loop: Loop,
) -> None:
    """A reply whose record could not be read back from the history (issue 14) is never
    written: the turn ends at once, and a restart has nothing to run again."""
    words = "write 5000000 bytes of arguments"
    arguments = json.dumps({"path": f"{loop.home}/workspace/x", "content": "y" * 5_000_000})
    loop.script(words, [call("write_file", arguments)])
    turn = loop.say("huge-reply", words)
    events = loop.wait_end("huge-reply", turn)

    assert events[0] == OwnerSaid(words) and events[-1] == TurnEnd(EndReason.ERROR)
    (error,) = [e for e in events if isinstance(e, TurnError)]
    assert error.message.startswith(
        "the model's answer is too large to keep in the session's history"
    ), error
    assert not any(isinstance(e, ToolCalled) for e in events)
    assert [r for r in records_of(loop.home, "huge-reply") if r["kind"] == "decision"] == []
    with Home(loop.home).session_history("huge-reply").open("rb") as history:
        assert max(map(len, history)) < 2**22
    assert_serving(loop)


def test_a_sub_agent_whose_model_fails_is_a_failed_spawn_the_parent_reads(loop: Loop) -> None:
    words = "ask a helper, whose model will fail"
    task = "a task for a failing model"
    loop.script(words, [call("spawn", task=task), answer("My helper failed.")])
    loop.script(task, [Failure(500, "out of memory")] * 3)
    turn = loop.say("failed-helper", words)
    events = loop.wait_end("failed-helper", turn)

    child = loop.wait_end("sub-failed-helper-1")
    assert child[-1] == TurnEnd(EndReason.ERROR)
    (error,) = [e for e in child if isinstance(e, TurnError)]
    (read,) = tool_results(loop.conversations.requests(words)[1])
    assert read == f"Error: the sub-agent stopped with an error: {error.message}"
    assert ToolDone("spawn", False, len(read.encode()), read) in events
    assert events[-2:] == [AssistantText("My helper failed."), TurnEnd(EndReason.DONE)]
