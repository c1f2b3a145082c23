"""A tool call cut off by the token limit (issue 14): never given back as if whole; one more
try with `[model] retry_max_tokens` when the owner set it, else an error naming the limit."""

from __future__ import annotations

import re

import pytest

from bxcore.config.file import ModelConfig
from bxcore.tools import BROKERED
from services.loopd.ask import ask_model
from services.loopd.model import Finish, ModelError, ToolCall, User
from tests.fakes.model_server import FakeModel
from tests.unit.loopd.conftest import Connect

pytestmark = pytest.mark.anyio

TOOLS = list(BROKERED.values())
CUT = {"openai": "length", "anthropic": "max_tokens"}
HALF = ("write_file", '{"path": "/a", "content": "the first ha')


def config_of(provider: str, **keys: object) -> ModelConfig:
    return ModelConfig(provider=provider, **keys)  # type: ignore[arg-type]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_cut_off_call_without_a_retry_limit_is_an_error_naming_the_limit(
    fake: FakeModel, connect: Connect, provider: str
) -> None:
    fake.reply(tool_calls=[HALF], finish=CUT[provider])
    config = config_of(provider, max_tokens=1000)
    with pytest.raises(ModelError) as raised:
        await ask_model(connect(provider, max_tokens=1000), config, "s", [User("hi")], TOOLS)
    assert str(raised.value) == (
        "the model's answer was cut off by its token limit in the middle of a tool call, "
        "at [model] max_tokens = 1000, so the call was not run; raise [model] max_tokens in "
        "config.toml, or set [model] retry_max_tokens to let the model try once more with a "
        "higher limit"
    )
    assert [r["max_tokens"] for r in fake.requests] == [1000]


@pytest.mark.parametrize(
    ("provider", "says"),
    [
        ("openai", "at the server's own limit ([model] max_tokens = 0 sends none),"),
        ("anthropic", "at the default [model] max_tokens = 4096,"),
    ],
)
async def test_the_limit_named_is_the_one_that_was_sent(
    fake: FakeModel, connect: Connect, provider: str, says: str
) -> None:
    fake.reply(tool_calls=[HALF], finish=CUT[provider])
    with pytest.raises(ModelError, match=re.escape(says)):
        await ask_model(connect(provider), config_of(provider), "s", [User("hi")], TOOLS)
    assert fake.requests[0].get("max_tokens") == (None if provider == "openai" else 4096)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_model_answers_once_more_with_the_retry_limit_and_that_answer_counts(
    fake: FakeModel, connect: Connect, provider: str
) -> None:
    fake.reply(tool_calls=[HALF], finish=CUT[provider])
    fake.reply(tool_calls=[("read_file", '{"path":"/a"}', "call_2")])
    config = config_of(provider, retry_max_tokens=8192)
    model = connect(provider, retry_max_tokens=8192)
    reply = await ask_model(model, config, "s", [User("hi")], TOOLS)
    assert reply.tool_calls == (ToolCall("call_2", "read_file", '{"path":"/a"}'),)
    assert reply.finish is Finish.DONE
    assert [r.get("max_tokens") for r in fake.requests][1] == 8192
    assert fake.requests[0]["messages"] == fake.requests[1]["messages"]


async def test_a_second_answer_cut_off_too_is_an_error_naming_the_retry_limit(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(tool_calls=[HALF], finish="length")
    fake.reply(tool_calls=[HALF], finish="length")
    config = config_of("openai", retry_max_tokens=8192)
    with pytest.raises(ModelError, match=r"also on a second try with \[model\] retry_max_tokens"):
        await ask_model(connect(retry_max_tokens=8192), config, "s", [User("hi")], TOOLS)
    assert len(fake.requests) == 2


async def test_words_cut_off_without_a_call_are_given_as_they_are(
    fake: FakeModel, connect: Connect
) -> None:
    fake.reply(text="The answer is lo", finish="length")
    config = config_of("openai", retry_max_tokens=8192)
    reply = await ask_model(connect(), config, "s", [User("hi")], TOOLS)
    assert (reply.text, reply.cut_off) == ("The answer is lo", True)
    assert len(fake.requests) == 1
