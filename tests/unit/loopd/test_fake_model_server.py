"""The fake model server itself: it answers as scripted, records, and always shuts down."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.fakes.model_server import Answer, FakeModel, Request

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_request_with_nothing_queued_gets_a_400_that_says_so() -> None:
    with FakeModel() as fake:
        answer = httpx.post(f"{fake.base_url}/chat/completions", json=BODY)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "the fake model server has no answer queued for request 1"
    )


def test_respond_with_answers_from_the_request_when_the_queue_is_empty() -> None:
    def echo(request: Request) -> Answer:
        return Answer(text=f"you said {request.body['messages'][-1]['content']}")

    with FakeModel() as fake:
        fake.reply(text="queued first")
        fake.respond_with(echo)
        first = httpx.post(f"{fake.base_url}/chat/completions", json=BODY).json()
        second = httpx.post(f"{fake.base_url}/chat/completions", json=BODY).json()
    assert first["choices"][0]["message"]["content"] == "queued first"
    assert second["choices"][0]["message"]["content"] == "you said hi"


def test_every_request_is_recorded_with_its_path_headers_and_body() -> None:
    with FakeModel() as fake:
        fake.reply(text="a")
        httpx.post(f"{fake.base_url}/chat/completions", json=BODY, headers={"X-Test": "1"})
        httpx.post(f"{fake.root_url}/elsewhere", json={"n": 2})
        [first, second] = fake.received
    assert first.path == "/v1/chat/completions"
    assert first.headers["x-test"] == "1"
    assert fake.requests == [BODY, {"n": 2}]
    assert second.path == "/elsewhere"


def test_closing_does_not_wait_for_a_delayed_answer_and_leaves_no_thread() -> None:
    before = threading.active_count()
    fake = FakeModel()
    fake.reply(text="late", delay_s=30.0)
    failed: list[BaseException] = []

    def ask() -> None:
        try:
            httpx.post(f"{fake.base_url}/messages")
        except httpx.HTTPError as error:
            failed.append(error)

    client = threading.Thread(target=ask)
    client.start()
    fake.wait_for(1)
    started = time.monotonic()
    fake.close()
    client.join(5.0)
    assert time.monotonic() - started < 2.0
    assert threading.active_count() == before
    assert isinstance(failed[0], httpx.RemoteProtocolError)
    fake.close()  # twice is fine


def test_closing_ends_kept_alive_connections() -> None:
    fake = FakeModel()
    fake.reply(text="a")
    with httpx.Client() as client:
        client.post(f"{fake.base_url}/chat/completions", json=BODY)
        started = time.monotonic()
        fake.close()
    assert time.monotonic() - started < 2.0
    assert "stopped" in repr(fake)


def test_wait_for_gives_up_at_its_deadline() -> None:
    with FakeModel() as fake, pytest.raises(TimeoutError, match="for 1 requests"):
        fake.wait_for(1, timeout_s=0.05)


def test_the_model_list_answers_for_health_checks() -> None:
    with FakeModel() as fake:
        assert httpx.get(f"{fake.base_url}/models").json()["data"][0]["id"] == "fake"
