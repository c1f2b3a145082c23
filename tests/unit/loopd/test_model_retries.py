"""What the model port does when the server fails (SPEC §10.2, §16 "Faults"): timeouts,
broken connections, 429 and 5xx are tried three times in all, then one line says what to do;
anything else fails at once. Over real HTTP against the fake server; the backoff only recorded."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import anyio
import pytest

from services.loopd import http_client
from services.loopd.http_client import retry_after_s
from services.loopd.model import ModelError, Reply, User
from tests.fakes.model_server import FakeModel
from tests.unit.loopd.conftest import Connect, Sleeps

pytestmark = pytest.mark.anyio

Fail = Callable[[FakeModel], None]

ONCE: dict[str, Fail] = {
    "500": lambda fake: fake.fail(500),
    "502": lambda fake: fake.fail(502),
    "503": lambda fake: fake.fail(503),
    "429": lambda fake: fake.fail(429),
    "closed connection": lambda fake: fake.hang_up(),
    "timeout": lambda fake: fake.stall(5.0),
}


@pytest.mark.parametrize("fail", ONCE.values(), ids=ONCE.keys())
async def test_a_failure_worth_retrying_is_tried_again_after_half_a_second(
    fake: FakeModel, connect: Connect, sleeps: Sleeps, fail: Fail
) -> None:
    fail(fake)
    fake.reply(text="back")
    reply = await connect(timeout_s=0.3).complete("s", [User("x")], [])
    assert reply == Reply("back")
    assert len(fake.received) == 2
    assert sleeps == [0.5]


async def test_two_failures_then_an_answer_wait_half_a_second_then_one(
    fake: FakeModel, connect: Connect, sleeps: Sleeps
) -> None:
    fake.fail(503)
    fake.hang_up()
    fake.reply(text="third time")
    assert (await connect().complete("s", [User("x")], [])).text == "third time"
    assert sleeps == [0.5, 1.0]
    assert fake.requests[0] == fake.requests[2]


@pytest.mark.parametrize(
    ("retry_after", "waited"),
    [("3", 3.0), ("0.25", 0.5), ("3600", 20.0), ("soon", 0.5), ("-5", 0.5)],
)
async def test_retry_after_is_honoured_up_to_a_cap(
    fake: FakeModel, connect: Connect, sleeps: Sleeps, retry_after: str, waited: float
) -> None:
    fake.fail(429, "slow down", retry_after=retry_after)
    fake.reply(text="ok")
    await connect().complete("s", [User("x")], [])
    assert sleeps == [waited]


def test_retry_after_may_be_an_http_date() -> None:
    assert retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", now=lambda: 1445412480.0) == 10.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: 1445412490.0) == 0.0
    assert retry_after_s(None) is None


EXHAUSTED: dict[str, tuple[Fail, str]] = {
    "500": (
        lambda fake: fake.fail(500, times=3),
        "failed (500 Internal Server Error, 3 tries): the fake model server failed on purpose; "
        "check the server's log",
    ),
    "429": (
        lambda fake: fake.fail(429, "Rate limit reached", times=3),
        "is limiting requests (429 Too Many Requests, 3 tries): Rate limit reached; "
        "wait and try again, or check the account's limits",
    ),
    "closed connection": (
        lambda fake: fake.hang_up(times=3),
        "did not answer (it closed the connection without answering, 3 tries); "
        "start it, or set [model] base_url in config.toml",
    ),
    "timeout": (
        lambda fake: fake.stall(5.0, times=3),
        "did not answer within 0.2 s (3 tries); "
        "raise [model] timeout_s in config.toml, or use a smaller model",
    ),
}


@pytest.mark.parametrize(("fail", "said"), EXHAUSTED.values(), ids=EXHAUSTED.keys())
async def test_three_failures_end_in_one_line_that_says_what_to_do(
    fake: FakeModel, connect: Connect, sleeps: Sleeps, fail: Fail, said: str
) -> None:
    fail(fake)
    fake.reply(text="too late")
    with pytest.raises(ModelError) as caught:
        await connect(timeout_s=0.2).complete("s", [User("x")], [])
    assert str(caught.value) == f"the model server at {fake.base_url} {said}"
    assert len(fake.received) == 3
    assert sleeps == [0.5, 1.0]
    assert fake.queued == 1


async def test_a_slow_server_ends_the_wait_after_timeout_s_each_try(
    fake: FakeModel, connect: Connect
) -> None:
    fake.stall(30.0, times=3)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"did not answer within 0\.1 s"):
        await connect(timeout_s=0.1).complete("s", [User("x")], [])
    assert time.monotonic() - started < 3.0


async def test_a_server_that_is_down_is_named_with_what_to_configure(
    connect: Connect, sleeps: Sleeps
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(ModelError) as caught:
        await connect(base_url=base_url).complete("s", [User("x")], [])
    assert str(caught.value) == (
        f"the model server at {base_url} did not answer (connection refused, 3 tries); "
        "start it, or set [model] base_url in config.toml"
    )
    assert sleeps == [0.5, 1.0]


# -- failures that are not tried again --------------------------------------------------------


async def test_a_400_fails_at_once_with_the_servers_message(
    fake: FakeModel, connect: Connect, sleeps: Sleeps
) -> None:
    fake.fail(400, "'messages' must contain the word 'json'")
    with pytest.raises(ModelError) as caught:
        await connect().complete("s", [User("x")], [])
    assert str(caught.value) == (
        f"the model server at {fake.base_url} refused the request (400 Bad Request): "
        "'messages' must contain the word 'json'"
    )
    assert len(fake.received) == 1
    assert sleeps == []


async def test_a_404_points_at_the_model_name_and_the_base_url(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw(json.dumps({"error": "model 'llama9' not found"}), status=404)
    with pytest.raises(ModelError) as caught:
        await connect().complete("s", [User("x")], [])
    assert str(caught.value) == (
        f"the model server at {fake.base_url} has no such model or path (404 Not Found): "
        "model 'llama9' not found; check [model] model and [model] base_url in config.toml"
    )


async def test_a_401_without_a_configured_key_says_to_name_one(
    fake: FakeModel, connect: Connect
) -> None:
    fake.fail(401, "Missing bearer authentication in header")
    with pytest.raises(ModelError, match="set \\[model\\] api_key_env to the variable that holds"):
        await connect().complete("s", [User("x")], [])
    assert len(fake.received) == 1


async def test_a_redirect_is_not_followed(fake: FakeModel, connect: Connect) -> None:
    fake.raw(b"moved", status=301, content_type="text/plain")
    with pytest.raises(ModelError, match=r"301 Moved Permanently.*check \[model\] base_url"):
        await connect().complete("s", [User("x")], [])


async def test_a_long_many_line_server_message_is_cut_to_one_short_line(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw("<html>\n<body>\n" + "x" * 5000 + "\n</body></html>", status=422)
    with pytest.raises(ModelError) as caught:
        await connect().complete("s", [User("x")], [])
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("…")
    assert "(422 Unprocessable Entity): <html> <body> xxx" in message
    assert len(message) < 350


async def test_malformed_json_is_not_valid_and_not_tried_again(
    fake: FakeModel, connect: Connect, sleeps: Sleeps
) -> None:
    fake.malformed()
    with pytest.raises(ModelError, match=r"^the model server's answer is not valid: not JSON"):
        await connect().complete("s", [User("x")], [])
    assert len(fake.received) == 1
    assert sleeps == []


WRONG: dict[str, tuple[object, str]] = {
    "an array": ([], "expected a JSON object, got an array"),
    "null": (None, "expected a JSON object, got null"),
    "no choices": ({}, "`choices` is missing or empty"),
    "empty choices": ({"choices": []}, "`choices` is missing or empty"),
    "choices a string": ({"choices": "x"}, "`choices` is missing or empty"),
    "a choice not an object": ({"choices": [1]}, "`choices[0].message` is not an object"),
    "no message": ({"choices": [{}]}, "`choices[0].message` is not an object"),
    "content a number": (
        {"choices": [{"message": {"content": 3}}]},
        "`choices[0].message.content` is not a string",
    ),
    "content parts not text": (
        {"choices": [{"message": {"content": [{"text": 1}]}}]},
        "`choices[0].message.content` has a part that is not text",
    ),
    "tool_calls an object": (
        {"choices": [{"message": {"tool_calls": {}}}]},
        "`choices[0].message.tool_calls` is not a list",
    ),
    "a call not an object": (
        {"choices": [{"message": {"tool_calls": [1]}}]},
        "`choices[0].message.tool_calls[0].function` is not an object",
    ),
    "a name not a string": (
        {"choices": [{"message": {"tool_calls": [{"function": {"name": 5}}]}}]},
        "`choices[0].message.tool_calls[0].function.name` is not a string",
    ),
}


@pytest.mark.parametrize(("body", "why"), WRONG.values(), ids=WRONG.keys())
async def test_an_answer_of_the_wrong_shape_is_not_valid(
    fake: FakeModel, connect: Connect, body: object, why: str
) -> None:
    fake.raw(json.dumps(body))
    with pytest.raises(ModelError) as caught:
        await connect().complete("s", [User("x")], [])
    assert str(caught.value) == f"the model server's answer is not valid: {why}"


async def test_an_error_body_with_status_200_is_a_model_error(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw(json.dumps({"error": {"message": "context length exceeded"}}))
    with pytest.raises(ModelError, match="answered with an error: context length exceeded"):
        await connect().complete("s", [User("x")], [])


async def test_deeply_nested_json_is_not_valid_rather_than_a_crash(
    fake: FakeModel, connect: Connect
) -> None:
    fake.raw("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelError, match="not valid"):
        await connect().complete("s", [User("x")], [])


async def test_an_answer_larger_than_the_cap_is_not_valid(
    fake: FakeModel, connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(http_client, "MAX_ANSWER_BYTES", 1000)
    fake.raw(json.dumps({"choices": [{"message": {"content": "x" * 2000}}]}))
    with pytest.raises(ModelError, match="not valid: it is larger than 1000 bytes"):
        await connect().complete("s", [User("x")], [])


async def test_one_model_serves_several_turns_at_once(fake: FakeModel, connect: Connect) -> None:
    for n in range(5):
        fake.reply(text=f"answer {n}", delay_s=0.05)
    model = connect()
    texts: list[str] = []

    async def ask() -> None:
        texts.append((await model.complete("s", [User("x")], [])).text)

    async with anyio.create_task_group() as tasks:
        for _ in range(5):
            tasks.start_soon(ask)
    assert sorted(texts) == [f"answer {n}" for n in range(5)]


async def test_the_http_client_is_made_by_the_first_request_not_at_start() -> None:
    client = http_client.HttpClient("http://127.0.0.1:9/v1", 1.0, "OPENAI_API_KEY")
    assert "not used yet" in repr(client)  # its TLS trust store would slow loopd's start
    await client.aclose()
