"""What `bxctl model check` concludes from what a server did (issue 14), case by case."""

from __future__ import annotations

import pytest

from bxctl.model_verdict import (
    Failure,
    Listing,
    Outcome,
    Probe,
    Reach,
    Setup,
    judge_error,
    judge_reply,
    reach_line,
    report,
)

LOCAL = Setup("openai", "http://127.0.0.1:8080/v1", "qwen3", "", False, False)
CLOUD = Setup("openai", "https://api.example.com/v1", "m", "EXAMPLE_KEY", True, True)
OK = Reach(0.01)


@pytest.mark.parametrize(
    "text, calls, outcome",
    [
        ("", [("get_weather", '{"city":"Paris"}')], Outcome.TOOL_CALL),
        ("", [("get_weather", "{}")], Outcome.TOOL_CALL),
        ("", [("weather", '{"city":"Paris"}')], Outcome.BAD_CALL),
        ("", [("get_weather", '"Paris"')], Outcome.BAD_CALL),
        ("", [("get_weather", '{"city":')], Outcome.BAD_CALL),
        ('<tool_call>{"name": "get_weather"}</tool_call>', [], Outcome.CALL_AS_TEXT),
        ('<|python_tag|>get_weather.call(city="Paris")', [], Outcome.CALL_AS_TEXT),
        ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {}}]', [], Outcome.CALL_AS_TEXT),
        ('```json\n{"function": "get_weather", "city": "Paris"}\n```', [], Outcome.CALL_AS_TEXT),
        ('get_weather({"city": "Paris"})', [], Outcome.CALL_AS_TEXT),
        ("It is sunny in Paris.", [], Outcome.WORDS),
        ("", [], Outcome.WORDS),
    ],
)
def test_an_answer_is_judged_by_its_calls_and_then_its_text(
    text: str, calls: list[tuple[str, str]], outcome: Outcome
) -> None:
    assert judge_reply(text, calls)[0] is outcome


@pytest.mark.parametrize(
    "message, outcome",
    [
        ("refused the request (400): gemma:2b does not support tools", Outcome.NO_TOOLS),
        ("refused the request (400): tools are unsupported by this model", Outcome.NO_TOOLS),
        ("has no such model or path (404 Not Found): x", Outcome.NO_MODEL),
        ("refused the request (400): model 'llama3' not found", Outcome.NO_MODEL),
        (
            "failed (500 Internal Server Error, 1 try): tools param requires --jinja flag",
            Outcome.NEEDS_FLAG,
        ),
        (
            'refused the request (400): "auto" tool choice requires --enable-auto-tool-choice '
            "and --tool-call-parser to be set",
            Outcome.NEEDS_FLAG,
        ),
        ("did not answer within 60 s (1 try)", Outcome.FAILED),
    ],
)
def test_an_error_is_judged_by_what_the_server_said(message: str, outcome: Outcome) -> None:
    assert judge_error(message) is outcome


def test_a_server_out_of_reach_is_not_usable_and_says_what_to_change() -> None:
    result = report(LOCAL, Reach(0.0, Failure.REFUSED, "connection refused"), None, [])
    assert not result.usable
    assert [(c.name, c.ok) for c in result.checks] == [("reach", False)]
    assert result.advice == ("start the model server, or set [model] base_url to where it listens",)


@pytest.mark.parametrize(
    "setup, expected",
    [
        (CLOUD, "the key read from $EXAMPLE_KEY was sent: bad key"),
        (LOCAL, "wants a key (401), and none is sent: [model] api_key_env is empty: bad key"),
    ],
)
def test_a_refused_key_names_where_the_key_comes_from(setup: Setup, expected: str) -> None:
    assert expected in reach_line(setup, Reach(0.0, Failure.KEY, "bad key", 401))


def test_the_configured_way_decides_and_the_other_only_advises() -> None:
    whole = Probe(False, Outcome.TOOL_CALL, 1.0)
    streamed = Probe(True, Outcome.CALL_AS_TEXT, 1.0, "<tool_call>")
    assert report(LOCAL, OK, Listing(("qwen3",)), [whole, streamed]).usable
    on = Setup("openai", LOCAL.base_url, "qwen3", "", True, False)
    result = report(on, OK, Listing(("qwen3",)), [streamed, whole])
    assert not result.usable
    assert result.advice[0] == (
        "set [model] stream = false: tool calls come back whole, not streamed"
    )
    assert "--jinja" in result.advice[1]


def test_a_model_not_listed_is_only_a_note_when_the_call_works() -> None:
    works = report(LOCAL, OK, Listing(("a", "b")), [Probe(False, Outcome.TOOL_CALL, 0.1)])
    assert works.usable and works.advice == ()
    assert [(c.name, c.ok) for c in works.checks][1] == ("models", None)
    fails = report(LOCAL, OK, Listing(("a", "b")), [Probe(False, Outcome.NO_MODEL, 0.1, "404")])
    assert fails.advice == ("set [model] model to one the server offers: a, b",)


def test_gemini_lists_its_models_under_models_slash() -> None:
    listed = Listing(("models/gemini-2.5-flash",))
    setup = Setup("openai", "https://g.example/v1beta/openai", "gemini-2.5-flash", "", False, False)
    result = report(setup, OK, listed, [Probe(False, Outcome.TOOL_CALL, 0.1)])
    assert result.checks[1].ok is True


def test_the_json_report_says_everything_the_table_does() -> None:
    result = report(CLOUD, OK, Listing(None), [Probe(True, Outcome.TOOL_CALL, 0.5, "call")])
    data = result.as_json()
    assert data["usable"] is True and data["models"] is None
    assert [c["name"] for c in data["checks"]] == ["reach", "models", "streamed (configured)"]
    assert data["api_key_env"] == "EXAMPLE_KEY" and data["stream"] is True
