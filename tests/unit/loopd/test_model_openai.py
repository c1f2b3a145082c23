"""The openai provider over real HTTP against the fake server: what it sends, what it reads."""

from __future__ import annotations

import json

import pytest

from bxcore.tools import BROKERED, SPAWN
from services.loopd.model import (
    Assistant,
    Message,
    ModelError,
    Reply,
    ToolCall,
    ToolResult,
    User,
)
from services.loopd.openai import tool_list
from tests.fakes.model_server import Call, FakeModel
from tests.unit.loopd.conftest import Connect

pytestmark = pytest.mark.anyio

TOOLS = [*BROKERED.values(), SPAWN]


async def test_a_text_answer_is_a_reply_without_tool_calls(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="Hello.")
    reply = await connect().complete("system", [User("hi")], TOOLS)
    assert reply == Reply("Hello.", ())


async def test_the_request_has_the_model_the_system_prompt_first_the_tools_and_no_streaming(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="ok")
    await connect(model="qwen2.5:7b").complete("Be careful.", [User("hi")], TOOLS)
    [request] = fake.received
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "qwen2.5:7b",
        "messages": [
            {"role": "system", "content": "Be careful."},
            {"role": "user", "content": "hi"},
        ],
        "tools": tool_list(TOOLS),
        "stream": False,
    }
    assert request.headers["content-type"] == "application/json"


async def test_tool_calls_and_their_results_are_sent_back_in_the_chat_completions_shape(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="done")
    calls = (
        ToolCall("call_a", "read_file", '{"path":"/a"}'),
        ToolCall("call_b", "shell", '{"command":"ls"}'),
    )
    conversation: list[Message] = [
        User("look"),
        Assistant("Let me look.", calls),
        ToolResult("call_a", "read_file", "alpha"),
        ToolResult("call_b", "shell", "Denied: no grant allows this call."),
        Assistant("Found it.", ()),
        User("thanks"),
    ]
    await connect().complete("s", conversation, TOOLS)
    assert fake.requests[0]["messages"][1:] == [
        {"role": "user", "content": "look"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"/a"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"command":"ls"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "alpha"},
        {"role": "tool", "tool_call_id": "call_b", "content": "Denied: no grant allows this call."},
        {"role": "assistant", "content": "Found it."},
        {"role": "user", "content": "thanks"},
    ]


async def test_an_assistant_turn_of_only_tool_calls_has_null_content(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="ok")
    call = ToolCall("c1", "read_file", "{}")
    await connect().complete(
        "s", [User("x"), Assistant("", (call,)), ToolResult("c1", "r", "")], []
    )
    assert fake.requests[0]["messages"][2]["content"] is None


async def test_without_tools_the_request_has_no_tools_key(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="ok")
    await connect().complete("s", [User("x")], [])
    assert "tools" not in fake.requests[0]


async def test_tool_calls_keep_the_models_ids_and_arguments_as_written(
    fake: FakeModel, connect: Connect
) -> None:
    written = '{ "path" : "/home/me/a.md" }'
    fake.reply(tool_calls=[("read_file", written, "call_xyz"), ("shell", "not json", "call_2")])
    reply = await connect().complete("s", [User("x")], TOOLS)
    assert reply == Reply(
        "",
        (
            ToolCall("call_xyz", "read_file", written),
            ToolCall("call_2", "shell", "not json"),
        ),
    )


async def test_arguments_sent_as_an_object_are_passed_on_as_a_json_string(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(tool_calls=[Call("memory", {"action": "note", "text": "café"}, "c1")])
    fake.reply(tool_calls=[Call("read_file", ["/a"], "c2")])
    model = connect()
    first = await model.complete("s", [User("x")], TOOLS)
    second = await model.complete("s", [User("x")], TOOLS)
    assert first.tool_calls[0].arguments == '{"action":"note","text":"café"}'
    assert second.tool_calls[0].arguments == '["/a"]'


async def test_missing_or_null_arguments_are_an_empty_object(
    fake: FakeModel, connect: Connect
) -> None:
    answer = {
        "choices": [
            {
                "message": {
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "function": {"name": "read_file"}},
                        {"id": "b", "function": {"name": "read_file", "arguments": None}},
                    ],
                }
            }
        ]
    }
    fake.raw(json.dumps(answer))
    reply = await connect().complete("s", [User("x")], TOOLS)
    assert [call.arguments for call in reply.tool_calls] == ["{}", "{}"]


async def test_a_tool_call_without_an_id_gets_call_n_not_used_in_the_conversation(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(tool_calls=[("read_file", "{}", None), ("read_file", "{}", None)])
    earlier: list[Message] = [
        User("x"),
        Assistant("", (ToolCall("call_1", "read_file", "{}"),)),
        ToolResult("call_1", "read_file", "a"),
    ]
    reply = await connect().complete("s", earlier, TOOLS)
    assert [call.id for call in reply.tool_calls] == ["call_2", "call_3"]


async def test_an_id_used_before_in_the_conversation_or_twice_in_the_reply_is_replaced(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(tool_calls=[("read_file", "{}", "old"), ("shell", "{}", "x"), ("shell", "{}", "x")])
    earlier: list[Message] = [User("x"), Assistant("", (ToolCall("old", "read_file", "{}"),))]
    reply = await connect().complete("s", earlier, TOOLS)
    assert [call.id for call in reply.tool_calls] == ["call_1", "x", "call_2"]


async def test_an_id_that_cannot_be_sent_to_the_broker_is_replaced(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(tool_calls=[("read_file", "{}", "x" * 129), ("read_file", "{}", "")])
    fake.raw(
        json.dumps(
            {"choices": [{"message": {"tool_calls": [{"id": 7, "function": {"name": "a"}}]}}]}
        )
    )
    model = connect()
    first = await model.complete("s", [User("x")], TOOLS)
    second = await model.complete("s", [User("x")], TOOLS)
    assert [call.id for call in first.tool_calls] == ["call_1", "call_2"]
    assert [call.id for call in second.tool_calls] == ["call_1"]


async def test_null_content_is_empty_text_and_content_parts_are_joined(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw(json.dumps({"choices": [{"message": {"content": None}}]}))
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    fake.raw(json.dumps({"choices": [{"message": {"content": parts}}]}))
    model = connect()
    assert (await model.complete("s", [User("x")], [])).text == ""
    assert (await model.complete("s", [User("x")], [])).text == "ab"


async def test_a_lone_surrogate_in_the_answer_becomes_a_replacement_character(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw('{"choices":[{"message":{"content":"a\\ud800b","tool_calls":[{"id":"c",'
             '"function":{"name":"read_file","arguments":"\\udfff"}}]}}]}')  # fmt: skip
    reply = await connect().complete("s", [User("x")], [])
    assert reply.text == "a\ufffdb"
    assert reply.tool_calls[0].arguments == "\ufffd"


async def test_the_key_comes_from_the_variable_api_key_env_names(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="ok")
    await connect(api_key_env="MY_KEY", environ={"MY_KEY": "sk-123"}).complete("s", [User("x")], [])
    assert fake.headers[0]["authorization"] == "Bearer sk-123"


async def test_no_key_is_sent_when_api_key_env_is_empty(fake: FakeModel, connect: Connect) -> None:
    fake.reply(text="ok")
    await connect(api_key_env="", environ={"OPENAI_API_KEY": "sk-123"}).complete("s", [], [])
    assert "authorization" not in fake.headers[0]


async def test_a_named_variable_that_is_not_set_fails_before_any_request(
    fake: FakeModel, connect: Connect
) -> None:
    model = connect(api_key_env="OPENAI_API_KEY", environ={})
    with pytest.raises(ModelError) as caught:
        await model.complete("s", [User("x")], [])
    assert str(caught.value) == (
        "the environment variable OPENAI_API_KEY, named by [model] api_key_env, is not set; "
        'set it in loopd\'s environment, or set api_key_env = "" if the server needs no key'
    )
    assert fake.received == []


async def test_the_key_never_shows_in_the_models_repr_or_its_errors(
    fake: FakeModel, connect: Connect
) -> None:
    fake.fail(401, "Incorrect API key provided")
    model = connect(api_key_env="K", environ={"K": "sk-secret-value"})
    with pytest.raises(ModelError) as caught:
        await model.complete("s", [User("x")], [])
    assert "sk-secret-value" not in repr(model)
    assert "$K" in repr(model)
    assert "check the key in K (named by [model] api_key_env)" in str(caught.value)


# -- streaming ------------------------------------------------------------------------------


async def test_a_streamed_answer_is_assembled_into_the_same_reply(
    fake: FakeModel, connect: Connect
) -> None:
    written = '{"path": "/home/me/notes/a.md"}'
    fake.reply(text="Reading the file now.", tool_calls=[("read_file", written, "call_s1")])
    reply = await connect(stream=True).complete("s", [User("x")], TOOLS)
    assert reply == Reply("Reading the file now.", (ToolCall("call_s1", "read_file", written),))
    assert fake.requests[0]["stream"] is True
    assert fake.headers[0]["accept"] == "text/event-stream"


async def test_a_streamed_answer_with_several_calls_keeps_them_apart_and_in_order(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(
        tool_calls=[
            ("read_file", '{"path":"/a"}'),
            ("memory", {"action": "recall", "query": "bees"}, None),
            ("shell", '{"command":"ls -la"}'),
        ]
    )
    reply = await connect(stream=True).complete("s", [User("x")], TOOLS)
    assert [(call.name, call.arguments) for call in reply.tool_calls] == [
        ("read_file", '{"path":"/a"}'),
        ("memory", '{"action":"recall","query":"bees"}'),
        ("shell", '{"command":"ls -la"}'),
    ]
    assert reply.tool_calls[1].id == "call_1"


async def test_a_server_that_ignores_stream_and_answers_whole_is_understood(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw(json.dumps({"choices": [{"message": {"content": "whole"}}]}))
    reply = await connect(stream=True).complete("s", [User("x")], [])
    assert reply.text == "whole"


async def test_an_error_in_the_stream_is_a_model_error(fake: FakeModel, connect: Connect) -> None:
    fake.raw(
        'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
        'data: {"error":{"message":"model crashed"}}\n\n',
        content_type="text/event-stream",
    )
    with pytest.raises(ModelError, match="answered with an error: model crashed"):
        await connect(stream=True).complete("s", [User("x")], [])


async def test_a_stream_of_broken_json_is_not_valid(fake: FakeModel, connect: Connect) -> None:
    fake.raw("data: {nope\n\n", content_type="text/event-stream")
    with pytest.raises(ModelError, match=r"^the model server's answer is not valid: not JSON"):
        await connect(stream=True).complete("s", [User("x")], [])


async def test_a_stream_that_ends_without_done_or_a_finish_reason_is_an_error_not_an_answer(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw(
        ': keep-alive\n\ndata: {"choices":[{"delta":{"content":"par"}}]}\n\n'
        'data: {"choices":[]}\n\ndata: {"choices":[{"delta":{"content":"tial"}}]}\n\n',
        content_type="text/event-stream",
    )
    with pytest.raises(ModelError, match="the stream ended before the answer did"):
        await connect(stream=True).complete("s", [User("x")], [])
