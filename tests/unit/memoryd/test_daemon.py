"""memoryd's request handling (SPEC §11), driven directly with a stand-in for brokerd's answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.labels import CLEAN, DataClass, Label
from bxcore.wire.messages import (
    Done,
    Error,
    ErrorCode,
    Failed,
    LedgerHead,
    Ping,
    StateQuery,
    ToolRequest,
    ToolResponse,
)
from services.memoryd.daemon import MAX_MESSAGE, LabelUnknown, Memory
from services.memoryd.store import Store

SECRET = Label(DataClass.SECRET, False)
PRIVATE = Label(DataClass.PRIVATE, False)

pytestmark = pytest.mark.anyio


class Labels:
    """What brokerd would say a session's label is; `None` plays a brokerd that is down."""

    def __init__(self) -> None:
        self.label: Label | None = PRIVATE
        self.asked: list[str] = []

    async def __call__(self, session: str) -> Label:
        self.asked.append(session)
        if self.label is None:
            raise LabelUnknown("brokerd did not answer")
        return self.label


@pytest.fixture
def labels() -> Labels:
    return Labels()


@pytest.fixture
def memory(tmp_path: Path, labels: Labels) -> Iterator[Memory]:
    store = Store.open(tmp_path / "memory" / "memory.sqlite3")
    try:
        yield Memory(store, labels, now=lambda: 0)
    finally:
        store.close()


def request(arguments: str, call: str = "call_1", session: str = "chat-1") -> ToolRequest:
    return ToolRequest("r1", session, call, "memory", arguments)


async def outcome(memory: Memory, arguments: str, call: str = "call_1") -> object:
    answer = await memory.routes.dispatch(request(arguments, call))
    assert isinstance(answer, ToolResponse) and answer.id == "r1"
    return answer.outcome


async def test_a_note_takes_the_label_brokerd_gives_for_the_session(
    memory: Memory, labels: Labels
) -> None:
    labels.label = SECRET
    assert await outcome(memory, '{"action":"note","text":"x"}') == Done(True, "noted #1", CLEAN)
    assert labels.asked == ["chat-1"]
    assert memory.store.notes()[0].label == SECRET


async def test_recall_answers_with_the_join_of_the_notes_labels(
    memory: Memory, labels: Labels
) -> None:
    labels.label = SECRET
    await outcome(memory, '{"action":"note","text":"launch code"}')
    answer = await outcome(memory, '{"action":"recall","query":"launch"}', "call_2")
    assert answer == Done(True, "#1 launch code", SECRET)
    assert labels.asked == ["chat-1"]  # recall never asks


async def test_forget_answers_forgot_or_no_note(memory: Memory) -> None:
    await outcome(memory, '{"action":"note","text":"x"}')
    assert await outcome(memory, '{"action":"forget","id":1}', "c2") == Done(
        True, "forgot #1", CLEAN
    )
    assert await outcome(memory, '{"action":"forget","id":1}', "c3") == Done(
        False, "no note #1", CLEAN
    )


async def test_forget_asks_brokerd_the_label_and_a_note_above_it_is_no_note(
    memory: Memory, labels: Labels
) -> None:
    labels.label = SECRET
    await outcome(memory, '{"action":"note","text":"launch code"}')
    labels.label = PRIVATE
    labels.asked.clear()
    assert await outcome(memory, '{"action":"forget","id":1}', "c2") == Done(
        False, "no note #1", CLEAN
    )
    assert labels.asked == ["chat-1"]
    assert [n.text for n in memory.store.notes()] == ["launch code"]


async def test_when_brokerd_does_not_say_the_label_nothing_is_forgotten(
    memory: Memory, labels: Labels
) -> None:
    await outcome(memory, '{"action":"note","text":"x"}')
    labels.label = None
    answer = await outcome(memory, '{"action":"forget","id":1}', "c2")
    assert answer == Failed("cannot learn the session's label from brokerd: brokerd did not answer")
    assert len(memory.store.notes()) == 1
    assert memory.store.remembered("chat-1", "c2") is None


async def test_a_retried_note_is_answered_again_without_asking_brokerd(
    memory: Memory, labels: Labels
) -> None:
    first = await outcome(memory, '{"action":"note","text":"x"}')
    labels.label = None
    assert await outcome(memory, '{"action":"note","text":"x"}') == first
    assert len(memory.store.notes()) == 1


async def test_a_call_id_reused_with_other_arguments_fails_and_does_nothing(
    memory: Memory,
) -> None:
    await outcome(memory, '{"action":"note","text":"x"}')
    answer = await outcome(memory, '{"action":"forget","id":1}')
    assert answer == Failed(
        "memory: call call_1 of session chat-1 already ran with other arguments"
    )
    assert len(memory.store.notes()) == 1


async def test_when_brokerd_does_not_say_the_label_nothing_is_stored(
    memory: Memory, labels: Labels
) -> None:
    labels.label = None
    answer = await outcome(memory, '{"action":"note","text":"x"}')
    assert answer == Failed("cannot learn the session's label from brokerd: brokerd did not answer")
    assert memory.store.notes() == []
    assert memory.store.remembered("chat-1", "call_1") is None
    labels.label = PRIVATE
    assert await outcome(memory, '{"action":"note","text":"x"}') == Done(True, "noted #1", CLEAN)


async def test_an_empty_note_is_not_kept_and_brokerd_is_not_asked(
    memory: Memory, labels: Labels
) -> None:
    answer = await outcome(memory, '{"action":"note","text":" \\n "}')
    assert answer == Done(False, "nothing noted: the text is empty", CLEAN)
    assert labels.asked == [] and memory.store.notes() == []


@pytest.mark.parametrize(
    "arguments",
    [
        '{"action":"note","text":"x","file":"y"}',
        '{"action":"remember","text":"x"}',
        '{"action":"forget","id":"3"}',
        '{"action":"forget","id":99999999999999999999}',
        '{"action": "note", "text": "x"}',
        "not json\nat all",
    ],
)
async def test_arguments_that_do_not_parse_fail_and_change_nothing(
    memory: Memory, labels: Labels, arguments: str
) -> None:
    answer = await outcome(memory, arguments)
    assert isinstance(answer, Failed)
    assert answer.message.startswith("memory: the arguments do not parse: ")
    assert "\n" not in answer.message
    assert labels.asked == [] and memory.store.notes() == []


async def test_a_failure_message_is_one_bounded_line(memory: Memory) -> None:
    answer = await outcome(memory, '{"action":"' + "x" * 10_000 + '"}')
    assert isinstance(answer, Failed) and len(answer.message) <= MAX_MESSAGE


@pytest.mark.parametrize(
    "message",
    [
        ToolRequest("r1", "chat-1", "c1", "read_file", '{"path":"/etc/passwd"}'),
        StateQuery("r1", "chat-1"),
        Error("r1", ErrorCode.INTERNAL, "x"),
    ],
)
async def test_any_other_message_is_a_bad_message(memory: Memory, message: object) -> None:
    assert await memory.routes.dispatch(message) == Error(
        "r1", ErrorCode.BAD_MESSAGE, "memoryd takes only memory tool_request and notes_query"
    )


async def test_a_message_without_an_id_gets_no_answer(memory: Memory) -> None:
    assert await memory.routes.dispatch(LedgerHead(1, "0" * 64)) is None


async def test_the_repr_counts_what_was_served(memory: Memory) -> None:
    await memory.routes.dispatch(Ping("p"))
    await outcome(memory, '{"action":"recall","query":""}')
    assert repr(memory).endswith("served 1)")
