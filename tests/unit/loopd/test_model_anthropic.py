"""The anthropic provider over real HTTP against the fake server: the Messages API's shapes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bxcore.tools import BROKERED, SPAWN
from services.loopd.anthropic import messages_url, tool_list
from services.loopd.model import (
    Assistant,
    Message,
    ModelError,
    Reply,
    ToolCall,
    ToolResult,
    User,
)
from tests.fakes.model_server import Call, FakeModel
from tests.unit.loopd.conftest import Connect, Sleeps

pytestmark = pytest.mark.anyio

TOOLS = [*BROKERED.values(), SPAWN]
KEY = {"api_key_env": "ANTHROPIC_API_KEY", "environ": {"ANTHROPIC_API_KEY": "sk-ant-1"}}


async def test_the_request_goes_to_v1_messages_with_the_key_version_system_and_tools(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="Hi.")
    model = connect("anthropic", model="claude-sonnet-4-5", **KEY)
    reply = await model.complete("Be careful.", [User("hello")], TOOLS)
    assert reply == Reply("Hi.")
    [request] = fake.received
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-1"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": "Be careful.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
        "tools": tool_list(TOOLS),
        "stream": False,
    }


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
        ("https://api.anthropic.com/", "https://api.anthropic.com/v1/messages"),
        ("https://api.anthropic.com/v1", "https://api.anthropic.com/v1/messages"),
        ("http://proxy.local:8080/claude", "http://proxy.local:8080/claude/v1/messages"),
    ],
)
def test_base_url_is_the_servers_root_and_a_trailing_v1_is_not_doubled(
    base_url: str, url: str
) -> None:
    assert messages_url(base_url) == url


async def test_the_servers_root_works_as_base_url_too(fake: FakeModel, connect: Connect) -> None:
    fake.reply(text="ok")
    await connect("anthropic", base_url=fake.root_url).complete("s", [User("x")], [])
    assert fake.received[0].path == "/v1/messages"


async def test_tool_use_and_tool_results_are_sent_as_blocks_with_results_in_one_user_turn(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="done")
    calls = (
        ToolCall("toolu_1", "read_file", '{"path":"/a"}'),
        ToolCall("toolu_2", "memory", '{"action":"forget","id":3}'),
    )
    conversation: list[Message] = [
        User("look"),
        Assistant("Looking.", calls),
        ToolResult("toolu_1", "read_file", "alpha"),
        ToolResult("toolu_2", "memory", ""),
        User("and then?"),
    ]
    await connect("anthropic").complete("s", conversation, TOOLS)
    assert fake.requests[0]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "/a"}},
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "memory",
                    "input": {"action": "forget", "id": 3},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "alpha"},
                {"type": "tool_result", "tool_use_id": "toolu_2"},
                {"type": "text", "text": "and then?"},
            ],
        },
    ]


async def test_empty_turns_are_left_out_so_that_roles_still_alternate(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="ok")
    conversation: list[Message] = [User("a"), Assistant("", ()), User("b")]
    await connect("anthropic").complete("", conversation, [])
    body = fake.requests[0]
    assert "system" not in body
    assert "tools" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


async def test_arguments_that_are_not_an_object_are_sent_as_empty_input(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="ok")
    call = ToolCall("c1", "read_file", "not json")
    conversation: list[Message] = [
        User("x"),
        Assistant("", (call,)),
        ToolResult("c1", "read_file", "Denied"),
    ]
    await connect("anthropic").complete("s", conversation, [])
    assert fake.requests[0]["messages"][1]["content"][0]["input"] == {}


async def test_tool_use_blocks_become_tool_calls_with_compact_json_arguments(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(
        text="Let me check.",
        tool_calls=[
            Call("read_file", {"path": "/home/me/é.md"}, "toolu_a"),
            Call("memory", '{"action": "recall", "query": "bees"}', "toolu_b"),
        ],
    )
    reply = await connect("anthropic").complete("s", [User("x")], TOOLS)
    assert reply == Reply(
        "Let me check.",
        (
            ToolCall("toolu_a", "read_file", '{"path":"/home/me/é.md"}'),
            ToolCall("toolu_b", "memory", '{"action":"recall","query":"bees"}'),
        ),
    )


async def test_text_blocks_are_joined_and_other_blocks_ignored(
    fake: FakeModel, connect: Connect
) -> None:
    content = [
        {"type": "thinking", "thinking": "hmm", "signature": "x"},
        {"type": "text", "text": "One. "},
        {"type": "text", "text": "Two."},
    ]
    fake.raw(json.dumps({"type": "message", "content": content}))
    assert (await connect("anthropic").complete("s", [User("x")], [])).text == "One. Two."


async def test_a_tool_use_without_an_id_gets_one_made_up(fake: FakeModel, connect: Connect) -> None:
    fake.reply(tool_calls=[("read_file", '{"path":"/a"}', None)])
    reply = await connect("anthropic").complete("s", [User("x")], TOOLS)
    assert reply.tool_calls[0].id == "call_1"


WRONG: dict[str, tuple[object, str]] = {
    "an array": ([], "expected a JSON object"),
    "no content": ({"type": "message"}, "`content` is missing or not a list"),
    "a block not an object": ({"content": ["x"]}, "`content[0]` is not a block"),
    "text not a string": (
        {"content": [{"type": "text", "text": 1}]},
        "`content[0].text` is not a string",
    ),
    "a name not a string": (
        {"content": [{"type": "tool_use", "id": "a", "name": None, "input": {}}]},
        "`content[0].name` is not a string",
    ),
    "no input": (
        {"content": [{"type": "tool_use", "id": "a", "name": "read_file"}]},
        "`content[0].input` is missing",
    ),
}


@pytest.mark.parametrize(("body", "why"), WRONG.values(), ids=WRONG.keys())
async def test_an_answer_of_the_wrong_shape_is_not_valid(
    fake: FakeModel, connect: Connect, body: object, why: str
) -> None:
    fake.raw(json.dumps(body))
    with pytest.raises(ModelError) as caught:
        await connect("anthropic").complete("s", [User("x")], [])
    assert str(caught.value) == f"the model server's answer is not valid: {why}"


async def test_overloaded_529_is_tried_again(
    fake: FakeModel, connect: Connect, sleeps: Sleeps
) -> None:
    fake.fail(529, "Overloaded")
    fake.reply(text="ok")
    assert (await connect("anthropic").complete("s", [User("x")], [])).text == "ok"
    assert sleeps == [0.5]


async def test_a_400_carries_anthropics_error_message(fake: FakeModel, connect: Connect) -> None:
    fake.fail(400, "messages.0.content: text content blocks must be non-empty")
    with pytest.raises(ModelError) as caught:
        await connect("anthropic").complete("s", [User("x")], [])
    assert str(caught.value).endswith(
        "refused the request (400 Bad Request): "
        "messages.0.content: text content blocks must be non-empty"
    )


async def test_a_missing_key_fails_before_any_request(fake: FakeModel, connect: Connect) -> None:
    model = connect("anthropic", api_key_env="ANTHROPIC_API_KEY", environ={"OTHER": "x"})
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY, named by \\[model\\] api_key_env"):
        await model.complete("s", [User("x")], [])
    assert fake.received == []


# -- streaming ------------------------------------------------------------------------------


async def test_a_streamed_answer_is_assembled_into_the_same_reply(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(
        text="I will read it and take a note.",
        tool_calls=[
            Call("read_file", '{"path": "/home/me/a.md"}', "toolu_s1"),
            Call("memory", {"action": "note", "text": "read a.md"}, "toolu_s2"),
        ],
    )
    reply = await connect("anthropic", stream=True).complete("s", [User("x")], TOOLS)
    assert reply == Reply(
        "I will read it and take a note.",
        (
            ToolCall("toolu_s1", "read_file", '{"path":"/home/me/a.md"}'),
            ToolCall("toolu_s2", "memory", '{"action":"note","text":"read a.md"}'),
        ),
    )
    assert fake.requests[0]["stream"] is True


async def test_streamed_input_that_is_not_json_is_passed_on_as_written(
    fake: FakeModel, connect: Connect
) -> None:
    events: list[dict[str, Any]] = [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use",
         "id": "t1", "name": "read_file", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta",
         "partial_json": '{"path": '}},
        {"type": "message_stop"},
    ]  # fmt: skip
    fake.raw(
        "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events),
        content_type="text/event-stream",
    )
    reply = await connect("anthropic", stream=True).complete("s", [User("x")], [])
    assert reply.tool_calls == (ToolCall("t1", "read_file", '{"path": '),)


async def test_an_error_event_in_the_stream_is_a_model_error(
    fake: FakeModel, connect: Connect
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    fake.raw(f"event: error\ndata: {json.dumps(error)}\n\n", content_type="text/event-stream")
    with pytest.raises(ModelError, match="answered with an error: Overloaded"):
        await connect("anthropic", stream=True).complete("s", [User("x")], [])
