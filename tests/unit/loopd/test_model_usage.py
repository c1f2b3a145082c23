"""What each answer cost (issue 16): the usage figures of both providers, whole and streamed,
read through the real client from the fake server; an answer without figures is still an
answer, and a server that refuses `stream_options` is asked again without it, once for all."""

from __future__ import annotations

import pytest

from bxcore.config.file import ModelConfig
from bxcore.tools import BROKERED
from services.loopd.anthropic import StreamedReply as AnthropicStream
from services.loopd.anthropic import usage_of as anthropic_usage
from services.loopd.ask import ask_model
from services.loopd.model import Usage, User
from services.loopd.openai import usage_of as openai_usage
from tests.fakes.model_server import FakeModel
from tests.unit.loopd.conftest import Connect

pytestmark = pytest.mark.anyio

WAYS = [
    pytest.param(provider, stream, id=f"{provider}-{'streamed' if stream else 'whole'}")
    for provider in ("openai", "anthropic")
    for stream in (False, True)
]


@pytest.mark.parametrize("provider, stream", WAYS)
async def test_an_answer_carries_the_tokens_its_server_says_it_cost(
    fake: FakeModel, connect: Connect, provider: str, stream: bool
) -> None:
    fake.reply("hello", usage=(1234, 56))
    reply = await connect(provider, stream=stream).complete("s", [User("hi")], [])
    assert reply.text == "hello"
    assert reply.usage == Usage(1234, 56)
    assert reply.usage.total == 1290


@pytest.mark.parametrize("provider, stream", WAYS)
async def test_an_answer_without_figures_is_an_answer_with_no_usage(
    fake: FakeModel, connect: Connect, provider: str, stream: bool
) -> None:
    fake.reply("hello", usage=None)
    reply = await connect(provider, stream=stream).complete("s", [User("hi")], [])
    assert (reply.text, reply.usage) == ("hello", None)


async def test_a_streamed_request_asks_for_the_figures_and_a_whole_one_does_not(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply("a")
    fake.reply("b")
    await connect("openai", stream=True).complete("s", [User("hi")], [])
    await connect("openai", stream=False).complete("s", [User("hi")], [])
    streamed, whole = fake.requests
    assert streamed["stream_options"] == {"include_usage": True}
    assert "stream_options" not in whole


async def test_a_server_that_refuses_stream_options_is_asked_again_without_them_for_good(
    fake: FakeModel, connect: Connect
) -> None:
    fake.refuse_stream_options = True
    fake.reply("first")
    fake.reply("second")
    model = connect("openai", stream=True)
    first = await model.complete("s", [User("hi")], [])
    second = await model.complete("s", [User("hi")], [])
    assert (first.text, first.usage, second.text, second.usage) == ("first", None, "second", None)
    asked = ["stream_options" in body for body in fake.requests]
    assert asked == [True, False, False]


async def test_another_refusal_is_not_taken_for_one_of_stream_options(
    fake: FakeModel, connect: Connect
) -> None:
    fake.fail(400, "model not loaded")
    with pytest.raises(Exception, match="model not loaded"):
        await connect("openai", stream=True).complete("s", [User("hi")], [])
    assert len(fake.requests) == 1


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_cut_off_call_asked_again_counts_the_tokens_of_both_answers(
    fake: FakeModel, connect: Connect, provider: str
) -> None:
    cut = {"openai": "length", "anthropic": "max_tokens"}[provider]
    fake.reply(tool_calls=[("write_file", '{"path": "/a", "con')], finish=cut, usage=(100, 10))
    fake.reply("done", usage=(100, 20))
    config = ModelConfig(provider=provider, retry_max_tokens=8192)  # type: ignore[arg-type]
    model = connect(provider, retry_max_tokens=8192)
    reply = await ask_model(model, config, "s", [User("hi")], list(BROKERED.values()))
    assert reply.usage == Usage(200, 30)


@pytest.mark.parametrize(
    "answer, usage",
    [
        ({"usage": {"prompt_tokens": 7, "completion_tokens": 3}}, Usage(7, 3)),
        ({"usage": {"prompt_tokens": 7}}, Usage(7, 0)),
        ({"x_groq": {"usage": {"prompt_tokens": 7, "completion_tokens": 3}}}, Usage(7, 3)),
        ({"usage": None}, None),
        ({"usage": "lots"}, None),
        ({"usage": {"prompt_tokens": -1, "completion_tokens": True}}, None),
        ({"usage": {"prompt_tokens": 1.5, "completion_tokens": 2}}, Usage(0, 2)),
        ({}, None),
    ],
)
def test_openai_figures_are_read_leniently(answer: dict[str, object], usage: Usage | None) -> None:
    assert openai_usage(answer) == usage


def test_anthropic_input_counts_its_cache_and_a_stream_keeps_the_last_running_totals() -> None:
    fields = {"input_tokens": 5, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 20}
    assert anthropic_usage({**fields, "output_tokens": 1}) == Usage(125, 1)
    stream = AnthropicStream()
    stream.take('{"type":"message_start","message":{"usage":{"input_tokens":9,"output_tokens":1}}}')
    stream.take(
        '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":40}}'
    )
    stream.take('{"type":"message_stop"}')
    assert stream.reply([User("hi")]).usage == Usage(9, 40)
