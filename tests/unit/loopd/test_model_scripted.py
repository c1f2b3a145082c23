"""The scripted provider plays a JSON file of answers in order, and `make_model` picks providers."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bxcore.config.file import ModelConfig
from services.loopd.anthropic import AnthropicModel
from services.loopd.model import (
    Assistant,
    Message,
    Model,
    ModelError,
    Reply,
    ToolCall,
    ToolResult,
    User,
)
from services.loopd.openai import OpenAIModel
from services.loopd.providers import make_model
from services.loopd.scripted import ScriptedModel

pytestmark = pytest.mark.anyio


def scripted(tmp_path: Path, script: object) -> Model:
    path = tmp_path / "script.json"
    path.write_text(script if isinstance(script, str) else json.dumps(script))
    return make_model(replace(ModelConfig(), provider="scripted", script=str(path)), {})


async def test_answers_are_played_in_order_with_ids_made_up_unless_given(tmp_path: Path) -> None:
    model = scripted(
        tmp_path,
        [
            {"tool_calls": [{"name": "read_file", "arguments": '{"path":"/w/a.md"}'}]},
            {
                "text": "Two at once.",
                "tool_calls": [
                    {"name": "shell", "arguments": {"command": "ls"}},
                    {"name": "memory", "arguments": '{"action":"recall"}', "id": "mine"},
                ],
            },
            {"text": "Done."},
        ],
    )
    first = await model.complete("s", [User("go")], [])
    assert first == Reply("", (ToolCall("call_1", "read_file", '{"path":"/w/a.md"}'),))
    history: list[Message] = [
        User("go"),
        Assistant("", first.tool_calls),
        ToolResult("call_1", "read_file", ""),
    ]
    second = await model.complete("s", history, [])
    assert second == Reply(
        "Two at once.",
        (
            ToolCall("call_2", "shell", '{"command":"ls"}'),
            ToolCall("mine", "memory", '{"action":"recall"}'),
        ),
    )
    assert await model.complete("s", history, []) == Reply("Done.")


async def test_past_the_last_answer_the_scripted_model_says_so(tmp_path: Path) -> None:
    model = scripted(tmp_path, [{"text": "only one"}])
    await model.complete("s", [User("x")], [])
    with pytest.raises(ModelError) as caught:
        await model.complete("s", [User("x")], [])
    assert str(caught.value) == (
        "the scripted model has no more answers (it plays its script once; "
        "`bxctl restart loopd` plays it again)"
    )


async def test_match_picks_the_next_answer_whose_substring_is_in_the_last_message(
    tmp_path: Path,
) -> None:
    model = scripted(
        tmp_path,
        [
            {"text": "read"},
            {"match": "Denied: the owner refused", "text": "I will not write it."},
            {"match": "wrote", "text": "Written."},
            {"text": "Anything else?"},
        ],
    )
    assert (await model.complete("s", [User("x")], [])).text == "read"
    said = [ToolResult("c", "write_file", "wrote 5 bytes")]
    assert (await model.complete("s", said, [])).text == "Written."
    assert (await model.complete("s", [User("more")], [])).text == "Anything else?"


async def test_when_no_answer_left_matches_nothing_is_played(tmp_path: Path) -> None:
    model = scripted(tmp_path, [{"match": "yes", "text": "a"}])
    with pytest.raises(ModelError, match="no answer left whose match is in the last message"):
        await model.complete("s", [User("no")], [])
    assert (await model.complete("s", [User("yes")], [])).text == "a"


async def test_the_file_is_read_once_when_the_model_is_made(tmp_path: Path) -> None:
    model = scripted(tmp_path, [{"text": "first version"}])
    (tmp_path / "script.json").write_text(json.dumps([{"text": "second version"}]))
    assert (await model.complete("s", [User("x")], [])).text == "first version"


BROKEN: dict[str, tuple[str, str]] = {
    "not json": ("[{", "not JSON"),
    "not a list": ('{"text": "x"}', "expected a list of answers"),
    "an answer not an object": ('["x"]', "answer 1: expected an object"),
    "an unknown key": ('[{"txt": "x"}]', "answer 1: unknown key 'txt'"),
    "text not a string": ('[{"text": 1}]', "answer 1: text: expected a string"),
    "match not a string": ('[{"match": 1}]', "answer 1: match: expected a string"),
    "tool_calls not a list": ('[{"tool_calls": {}}]', "answer 1: tool_calls: expected a list"),
    "a call without a name": (
        '[{}, {"tool_calls": [{"arguments": "{}"}]}]',
        "answer 2: tool call 1: name: expected a string",
    ),
    "an id not a string": (
        '[{"tool_calls": [{"name": "a", "id": 1}]}]',
        "answer 1: tool call 1: id: expected a string",
    ),
}


@pytest.mark.parametrize(("text", "why"), BROKEN.values(), ids=BROKEN.keys())
async def test_a_broken_script_fails_every_turn_with_one_line_naming_the_file(
    tmp_path: Path, text: str, why: str
) -> None:
    model = scripted(tmp_path, text)
    for _ in range(2):
        with pytest.raises(ModelError) as caught:
            await model.complete("s", [User("x")], [])
        message = str(caught.value)
        assert message.startswith(f"the scripted model's file {tmp_path / 'script.json'}: ")
        assert why in message
        assert "\n" not in message


async def test_a_missing_script_does_not_stop_make_model_and_fails_the_turn(tmp_path: Path) -> None:
    config = replace(ModelConfig(), provider="scripted", script=str(tmp_path / "none.json"))
    model = make_model(config, {})
    with pytest.raises(ModelError, match="cannot be read \\(No such file or directory\\)"):
        await model.complete("s", [User("x")], [])
    assert "unusable" in repr(model)


async def test_make_model_picks_the_provider_config_names() -> None:
    openai = make_model(ModelConfig(), {})
    anthropic = make_model(replace(ModelConfig(), provider="anthropic"), {})
    try:
        assert isinstance(openai, OpenAIModel)
        assert isinstance(anthropic, AnthropicModel)
        assert "http://127.0.0.1:11434/v1/chat/completions" in repr(openai)
    finally:
        await openai.aclose()
        await anthropic.aclose()
    assert isinstance(make_model(replace(ModelConfig(), provider="scripted"), {}), ScriptedModel)


def test_an_unknown_provider_is_a_model_error() -> None:
    with pytest.raises(ModelError, match='provider = "gemini" is not known'):
        make_model(replace(ModelConfig(), provider="gemini"), {})


def test_a_model_error_is_always_one_line() -> None:
    assert str(ModelError("a\nb\t c  ")) == "a b c"
