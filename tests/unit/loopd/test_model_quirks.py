"""Real servers' quirks, read as each server meant them (issue 14): tool-call ids, indexes and
argument streams as DashScope, Ollama, Gemini and Anthropic send them; the finish reason; a
stream that never finished. The pure readers first, then a few through the real client."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.loopd import anthropic, openai
from services.loopd.model import Finish, ModelError, Reply, ToolCall, User
from tests.fakes.model_server import FakeModel
from tests.support.streams import decode_events, reply_of_events
from tests.unit.loopd.conftest import Connect

ASKED = [User("hi")]


def openai_sse(
    *deltas: dict[str, Any], finish: str | None = "tool_calls", done: bool = True
) -> bytes:
    chunks = [
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]} for delta in deltas
    ]
    if finish is not None:
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    data = b"".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n".encode() for c in chunks)
    return data + (b"data: [DONE]\n\n" if done else b"")


def calls(*pieces: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(pieces)}


def fn(name: str | None = None, arguments: str | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    return {"function": function}


def read_openai(data: bytes) -> Reply:
    return reply_of_events(openai.StreamedReply(), decode_events([data], 1 << 24), ASKED)


# -- openai: whose piece is it ---------------------------------------------------------------


def test_an_id_sent_first_is_kept_when_later_chunks_send_an_empty_one_dashscope() -> None:
    reply = read_openai(
        openai_sse(
            calls({"index": 0, "id": "call_abc", "type": "function", **fn("read_file", "")}),
            calls({"index": 0, "id": "", "type": "function", **fn(None, '{"path":')}),
            calls({"index": 0, "id": "", "type": "function", **fn(None, '"/a"}')}),
        )
    )
    assert reply.tool_calls == (ToolCall("call_abc", "read_file", '{"path":"/a"}'),)


def test_calls_under_one_index_with_different_ids_are_different_calls_ollama() -> None:
    reply = read_openai(
        openai_sse(
            calls({"index": 0, "id": "call_1x", **fn("read_file", '{"path":"/a"}')}),
            calls({"index": 0, "id": "call_2y", **fn("shell", '{"command":"ls"}')}),
        )
    )
    assert reply.tool_calls == (
        ToolCall("call_1x", "read_file", '{"path":"/a"}'),
        ToolCall("call_2y", "shell", '{"command":"ls"}'),
    )


def test_pieces_without_index_or_id_continue_the_call_opened_last_gemini() -> None:
    reply = read_openai(
        openai_sse(
            calls({"id": "g-1", "type": "function", **fn("read_file", '{"pa')}),
            calls(fn(None, 'th":"/a"}')),
            calls({"id": "g-2", "type": "function", **fn("shell", "")}),
            calls(fn(None, '{"command":"ls"}')),
        )
    )
    assert reply.tool_calls == (
        ToolCall("g-1", "read_file", '{"path":"/a"}'),
        ToolCall("g-2", "shell", '{"command":"ls"}'),
    )


def test_the_usual_stream_of_an_id_first_then_index_only_pieces_is_read_as_before() -> None:
    reply = read_openai(
        openai_sse(
            calls({"index": 0, "id": "a", **fn("read_file", "")}),
            calls({"index": 1, "id": "b", **fn("shell", "")}),
            calls({"index": 0, **fn(None, '{"path":"/a"}')}),
            calls({"index": 1, **fn(None, '{"command":"ls"}')}),
        )
    )
    assert [(c.id, c.arguments) for c in reply.tool_calls] == [
        ("a", '{"path":"/a"}'),
        ("b", '{"command":"ls"}'),
    ]


def test_an_id_repeated_on_every_piece_is_one_call() -> None:
    reply = read_openai(
        openai_sse(
            calls({"index": 0, "id": "same", **fn("read_file", '{"path":')}),
            calls({"index": 0, "id": "same", **fn(None, '"/a"}')}),
        )
    )
    assert reply.tool_calls == (ToolCall("same", "read_file", '{"path":"/a"}'),)


# -- openai: the finish reason and a stream's end --------------------------------------------


@pytest.mark.parametrize(
    ("reason", "finish"),
    [
        ("stop", Finish.DONE),
        ("tool_calls", Finish.DONE),
        ("length", Finish.LENGTH),
        ("content_filter", Finish.OTHER),
    ],
)
def test_a_streamed_answer_carries_its_finish_reason(reason: str, finish: Finish) -> None:
    reply = read_openai(openai_sse({"content": "hi"}, finish=reason))
    assert (reply.finish, reply.finish_reason) == (finish, reason)


def test_a_whole_answer_carries_its_finish_reason_and_none_given_is_unsaid() -> None:
    body: dict[str, Any] = {"choices": [{"message": {"content": "x"}, "finish_reason": "length"}]}
    assert openai.reply_of(body, ASKED).finish is Finish.LENGTH
    del body["choices"][0]["finish_reason"]
    reply = openai.reply_of(body, ASKED)
    assert (reply.finish, reply.finish_reason) == (Finish.UNSAID, "")


def test_a_stream_is_complete_at_done_or_at_a_finish_reason_and_not_otherwise() -> None:
    assert read_openai(openai_sse({"content": "a"}, finish=None)).text == "a"
    assert read_openai(openai_sse({"content": "a"}, finish="stop", done=False)).text == "a"
    with pytest.raises(ModelError, match="the stream ended before the answer did"):
        read_openai(openai_sse({"content": "a"}, finish=None, done=False))


# -- anthropic -------------------------------------------------------------------------------


def anthropic_sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n".encode()
        for e in events
    )


def tool_use(*partials: str, stop: str | None = "tool_use", end: bool = True) -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"content": []}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "memory", "input": {}},
        },
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": p},
            }
            for p in partials
        ),
        {"type": "content_block_stop", "index": 0},
    ]
    if stop is not None:
        events.append({"type": "message_delta", "delta": {"stop_reason": stop}})
    if end:
        events.append({"type": "message_stop"})
    return anthropic_sse(*events)


def read_anthropic(data: bytes) -> Reply:
    return reply_of_events(anthropic.StreamedReply(), decode_events([data], 1 << 24), ASKED)


@pytest.mark.parametrize("partials", [(), ("",), ("", "")], ids=["none", "one-empty", "two"])
def test_a_tool_streamed_with_no_arguments_is_called_with_an_empty_object(
    partials: tuple[str, ...],
) -> None:
    (call,) = read_anthropic(tool_use(*partials)).tool_calls
    assert call == ToolCall("toolu_1", "memory", "{}")


def test_an_anthropic_stream_cut_off_by_max_tokens_says_so() -> None:
    reply = read_anthropic(tool_use('{"text": "a lo', stop="max_tokens"))
    assert (reply.finish, reply.finish_reason, reply.cut_off) == (Finish.LENGTH, "max_tokens", True)
    assert reply.tool_calls[0].arguments == '{"text": "a lo'


def test_an_anthropic_stream_without_message_stop_or_a_stop_reason_is_an_error() -> None:
    assert read_anthropic(tool_use("{}", end=False)).finish is Finish.DONE
    with pytest.raises(ModelError, match="the stream ended before the answer did"):
        read_anthropic(tool_use("{}", stop=None, end=False))


def test_a_whole_anthropic_answer_carries_its_stop_reason() -> None:
    body = {"content": [{"type": "text", "text": "x"}], "stop_reason": "max_tokens"}
    assert anthropic.reply_of(body, ASKED).cut_off


# -- any chunking, through both readers ------------------------------------------------------

_TEXT = "naïve €, 😀 and U+2028 \u2028 U+0085 \u0085 inside"
_STREAMS = {
    "openai": (
        openai_sse(
            {"content": _TEXT},
            calls({"index": 0, "id": "c1", **fn("read_file", '{"path":"/é')}),
            calls({"index": 0, "id": "", **fn(None, '"}')}),
        ),
        read_openai,
    ),
    "anthropic": (tool_use('{"text":', f'"{_TEXT}"}}'), read_anthropic),
}


@given(st.sampled_from(sorted(_STREAMS)), st.lists(st.integers(0, 2000), max_size=10))
def test_any_chunking_of_a_streamed_answer_gives_the_same_reply(
    provider: str, cuts: list[int]
) -> None:
    data, read = _STREAMS[provider]
    whole = read(data)
    bounds = [0, *sorted(c % (len(data) + 1) for c in cuts), len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    streamed = openai.StreamedReply() if provider == "openai" else anthropic.StreamedReply()
    assert reply_of_events(streamed, decode_events(chunks, 1 << 24), ASKED) == whole
    assert _TEXT in whole.text + whole.tool_calls[0].arguments


# -- through the real client -----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_streamed_text_with_unicode_line_breaks_reads_as_it_does_whole(
    fake: FakeModel, connect: Connect, provider: str
) -> None:
    fake.reply(text=_TEXT)
    fake.reply(text=_TEXT)
    whole = await connect(provider).complete("s", ASKED, [])
    streamed = await connect(provider, stream=True).complete("s", ASKED, [])
    assert whole.text == streamed.text == _TEXT


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("provider", "reason"), [("openai", "length"), ("anthropic", "max_tokens")]
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_the_client_gives_the_finish_reason_whole_and_streamed(
    fake: FakeModel, connect: Connect, provider: str, reason: str, stream: bool
) -> None:
    fake.reply(text="cut", finish=reason)
    reply = await connect(provider, stream=stream).complete("s", ASKED, [])
    assert (reply.text, reply.finish, reply.finish_reason) == ("cut", Finish.LENGTH, reason)


@pytest.mark.anyio
async def test_a_dashscope_stream_through_the_client_keeps_the_id(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw(
        openai_sse(
            calls({"index": 0, "id": "call_q", **fn("read_file", "")}),
            calls({"index": 0, "id": "", **fn(None, '{"path":"/a"}')}),
        ),
        content_type="text/event-stream",
    )
    reply = await connect(stream=True).complete("s", ASKED, [])
    assert reply.tool_calls == (ToolCall("call_q", "read_file", '{"path":"/a"}'),)
