"""Real servers' answers through the whole box (issue 14): `bxctl up` with the fake model server
replaying recorded answers (tests/fixtures/models/) byte for byte, streamed, and `bxctl chat`.

What reaches brokerd is what the server meant: DashScope's continuation chunks with `"id": ""`
keep the call's real id (the model is sent its result under that id); Ollama's parallel calls
all at index 0 are two calls; Anthropic's tool with no arguments is called with `{}`; and a
call cut off by the token limit never reaches brokerd: the turn ends with an error naming the
limit and what to raise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.model_server import Answer, Raw
from tests.support.brokerd import ledger_records
from tests.support.e2e import UpBox, box_up
from tests.support.owner import Reader

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"


def streamed(provider: str) -> Any:
    def before_up(home: Path) -> None:
        config = home / "config.toml"
        text = config.read_text()
        assert text.count("[model]\n") == 1, text
        model = f'[model]\nprovider = "{provider}"\nstream = true\n'
        config.write_text(text.replace("[model]\n", model))

    return before_up


@pytest.fixture(scope="module")
def openai_box() -> Iterator[UpBox]:
    with box_up(before_up=streamed("openai")) as box:
        yield box


@pytest.fixture(scope="module")
def anthropic_box() -> Iterator[UpBox]:
    with box_up(before_up=streamed("anthropic")) as box:
        yield box


def replayed(box: UpBox, session: str, message: str, fixture: str) -> str:
    """The owner says `message`; the model answers with the recorded `fixture`, then in words.
    What `bxctl chat` printed."""
    body = (FIXTURES / fixture).read_bytes()
    box.model.script(message, Raw(body, content_type="text/event-stream"), Answer(text="Done."))
    with box.bxctl_process("chat", "--session", session, message) as chat:
        assert chat.stdout is not None
        out = Reader(chat.stdout.fileno(), chat)
        code = out.drain()
    assert code in (0, 1), out.everything
    return out.everything


def decided(box: UpBox, session: str) -> list[tuple[str, Any]]:
    return [
        (r["tool"], json.loads(r["arguments"]))
        for r in ledger_records(box.home)
        if r.get("session") == session and r["kind"] == "decision"
    ]


def test_dashscope_calls_keep_their_id_though_later_chunks_send_an_empty_one(
    openai_box: UpBox,
) -> None:
    fixture = "dashscope/stream-tool-empty-ids.sse"
    replayed(openai_box, "dashscope-1", "weather in zurich, dashscope", fixture)
    (call,) = case_of(fixture)["calls"]
    assert decided(openai_box, "dashscope-1") == [(call["name"], call["arguments"])]
    second = openai_box.model.requests_for("weather in zurich, dashscope")[-1]
    assistant = next(m for m in second if m["role"] == "assistant")
    result = next(m for m in second if m["role"] == "tool")
    assert [c["id"] for c in assistant["tool_calls"]] == [call["id"]]
    assert result["tool_call_id"] == call["id"]


def test_ollama_parallel_calls_at_one_index_are_two_calls(openai_box: UpBox) -> None:
    fixture = "ollama/stream-parallel-index-0.sse"
    replayed(openai_box, "ollama-1", "two cities, ollama", fixture)
    calls = case_of(fixture)["calls"]
    assert len(calls) == 2
    assert decided(openai_box, "ollama-1") == [(c["name"], c["arguments"]) for c in calls]


def test_a_call_cut_off_by_the_token_limit_never_reaches_brokerd(openai_box: UpBox) -> None:
    fixture = "openai/stream-tool-cut-by-length.sse"
    printed = replayed(openai_box, "cut-1", "long letter, cut", fixture)
    assert decided(openai_box, "cut-1") == []
    assert "token limit" in printed and "max_tokens" in printed, printed


def test_an_anthropic_tool_without_arguments_is_called_with_an_empty_object(
    anthropic_box: UpBox,
) -> None:
    fixture = "anthropic/stream-tool-no-arguments.sse"
    replayed(anthropic_box, "claude-1", "what time is it, claude", fixture)
    (call,) = case_of(fixture)["calls"]
    assert call["arguments"] == {}
    assert decided(anthropic_box, "claude-1") == [(call["name"], {})]


def case_of(fixture: str) -> dict[str, Any]:
    cases: list[dict[str, Any]] = json.loads((FIXTURES / "cases.json").read_text("utf-8"))
    return next(case for case in cases if case["file"] == fixture)
