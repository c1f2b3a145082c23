"""Bounded model answers (issue 14): a streamed answer lives on complete events, not bytes;
every request ends within `[model] deadline_s`; a body is capped while it is read."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import pytest

from services.loopd.http_client import MAX_ANSWER_BYTES
from services.loopd.model import ModelError, User
from tests.fakes.model_server import Drip, FakeModel
from tests.unit.loopd.conftest import Connect

pytestmark = pytest.mark.anyio

QUICK = {"timeout_s": 0.3, "deadline_s": 30.0, "stream": True}


def endless(piece: bytes) -> Iterator[bytes]:
    return itertools.repeat(piece)


def chunk(text: str) -> bytes:
    return f"data: {json.dumps({'choices': [{'delta': {'content': text}}]})}\n\n".encode()


async def failing(connect: Connect, **keys: object) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(ModelError) as raised:
        await connect(**{**QUICK, **keys}).complete("s", [User("hi")], [])
    return str(raised.value), time.monotonic() - started


@pytest.mark.parametrize(
    ("case", "drip"),
    [
        ("comments", Drip(lambda: endless(b": keep-alive\n"), every_s=0.01)),
        ("a byte at a time", Drip(lambda: (bytes([b]) for b in chunk("never ends")), every_s=0.1)),
        ("events without data", Drip(lambda: endless(b"event: ping\n\n"), every_s=0.01)),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
async def test_a_stream_that_gives_bytes_but_no_complete_event_is_timed_out(
    fake: FakeModel, connect: Connect, case: str, drip: Drip
) -> None:
    fake.respond_with(lambda request: drip)
    said, took = await failing(connect)
    assert said == (
        f"the model server at {fake.base_url} sent no complete event for 0.3 s of a streamed "
        "answer (3 tries); raise [model] timeout_s in config.toml, or set stream = false"
    )
    assert took < 3


async def test_a_stream_of_events_that_never_ends_stops_at_the_deadline(
    fake: FakeModel, connect: Connect
) -> None:
    fake.respond_with(lambda request: Drip(lambda: endless(chunk("more ")), every_s=0.05))
    said, took = await failing(connect, deadline_s=1.0)
    assert said == (
        f"the model server at {fake.base_url} did not finish its answer within 1 s "
        "([model] deadline_s); raise it in config.toml, or use a faster model"
    )
    assert 1.0 <= took < 2.0
    assert len(fake.received) == 1  # the deadline is for all tries


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_whole_answer_sent_slowly_is_timed_out_streamed_or_not(
    fake: FakeModel, connect: Connect, stream: bool
) -> None:
    body = json.dumps({"choices": [{"message": {"content": "slow"}}]}).encode()
    drip = Drip(lambda: (bytes([b]) for b in body), every_s=0.05, content_type="application/json")
    fake.respond_with(lambda request: drip)
    said, took = await failing(connect, stream=stream)
    assert said.startswith(f"the model server at {fake.base_url} did not answer within 0.3 s")
    assert took < 3


async def test_a_line_without_an_end_is_refused_at_the_cap_not_after_it(
    fake: FakeModel, connect: Connect
) -> None:
    megabyte = b"x" * (1 << 20)
    pieces = lambda: itertools.chain([b"data: "], itertools.repeat(megabyte, 200))  # noqa: E731
    fake.respond_with(lambda request: Drip(pieces))
    said, _ = await failing(connect, timeout_s=10.0)
    assert said == (
        f"the model server's answer is not valid: the stream is larger than "
        f"{MAX_ANSWER_BYTES} bytes"
    )
    assert len(fake.received) == 1  # not worth another try


async def test_answers_are_asked_for_uncompressed(fake: FakeModel, connect: Connect) -> None:
    """A compressed body could unpack to gigabytes in one piece, past any cap."""
    fake.reply(text="plain")
    await connect().complete("s", [User("hi")], [])
    assert fake.received[0].headers["accept-encoding"] == "identity"
