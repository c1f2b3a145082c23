"""Answers as real servers write them (tests/fixtures/models/, issue 14), replayed through the
real client over real HTTP on 127.0.0.1: byte for byte, and in small chunks that split lines,
JSON and UTF-8 characters. Each must read as the server meant it: the text, and each tool
call's id, name and arguments; an answer cut by the token limit must not come out as a whole
call.

`cases.json` lists every fixture with what it means (and `usage`, the tokens it says it cost,
where it says); README.md says where each comes from.
A reply cut by the token limit comes out marked `cut_off`: `ask_model` never lets such a
call reach brokerd (tests/unit/loopd/test_ask.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from services.loopd.model import Reply, User
from tests.fakes.model_server import FakeModel
from tests.unit.loopd.conftest import Connect

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parents[2] / "fixtures" / "models"
CASES: list[dict[str, Any]] = json.loads((FIXTURES / "cases.json").read_text(encoding="utf-8"))
CHUNKS = {"whole": 0, "7 bytes": 7, "1 byte": 1}  # 0: byte for byte, with a content-length


def params() -> list[Any]:
    return [
        pytest.param(case, size, id=f"{case['file']}-{name}")
        for case in CASES
        for name, size in CHUNKS.items()
    ]


def test_every_fixture_is_listed_once_and_every_family_has_streamed_and_whole_answers() -> None:
    listed = [case["file"] for case in CASES]
    on_disk = sorted(
        str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.suffix in (".sse", ".json")
    )
    assert sorted(listed) == [f for f in on_disk if f != "cases.json"]
    assert len(set(listed)) == len(listed)
    families = {f.split("/")[0] for f in listed}
    assert len(families) >= 8
    streamed = {f.split("/")[0] for f in listed if f.endswith(".sse")}
    assert streamed == families


KINDS = {
    ("whole", "tool call"),
    ("whole", "text only"),
    ("streamed", "tool call"),
    ("streamed", "text only"),
}


def kind(case: dict[str, Any]) -> tuple[str, str] | None:
    """What a case shows, from cases.json: whole or streamed, and a tool call or text only
    (an answer cut by the token limit is neither)."""
    way = "streamed" if case["file"].endswith(".sse") else "whole"
    if case["cut"]:
        return None
    if case["calls"]:
        return way, "tool call"
    return (way, "text only") if case["text"] else None


def test_every_family_has_whole_and_streamed_answers_with_and_without_a_tool_call() -> None:
    kinds: dict[str, set[tuple[str, str]]] = {}
    for case in CASES:
        shown = kind(case)
        kinds.setdefault(case["file"].split("/")[0], set())
        if shown:
            kinds[case["file"].split("/")[0]].add(shown)
    missing = {family: sorted(KINDS - shown) for family, shown in kinds.items() if shown != KINDS}
    assert not missing, f"families without every kind of answer: {missing}"


def test_some_answers_split_utf8_characters_of_every_width() -> None:
    """The 1-byte and 7-byte replays split characters only where the answers hold them."""
    text = "".join(
        json.dumps(c["text"], ensure_ascii=False) + json.dumps(c["calls"], ensure_ascii=False)
        for c in CASES
    )
    widths = {len(ch.encode()) for ch in text}
    assert widths >= {1, 2, 3, 4}


@pytest.mark.parametrize("case, chunk", params())
async def test_a_recorded_answer_reads_as_the_server_meant_it(
    fake: FakeModel, connect: Connect, case: dict[str, Any], chunk: int
) -> None:
    body = (FIXTURES / case["file"]).read_bytes()
    streamed = case["file"].endswith(".sse")
    content_type = "text/event-stream" if streamed else "application/json"
    fake.raw(body, content_type=content_type, chunk=chunk)
    model = connect(case["provider"], stream=streamed)
    if case["cut"]:  # said to be cut off, so the turn never sends the call as if whole
        cut = await model.complete("system", [User("go")], [])
        assert cut.cut_off, cut
        assert figures(cut) == case.get("usage")
        return
    reply = await model.complete("system", [User("go")], [])
    assert read(reply) == (
        case["text"],
        [(c["id"], c["name"], c["arguments"]) for c in case["calls"]],
    )
    assert figures(reply) == case.get("usage")


def test_most_families_say_what_an_answer_cost_whole_and_streamed() -> None:
    """The corpus has figures to check: in every family's whole answers, and in the streams of
    all but the servers that send them only when asked (`stream_options`) or never."""
    counted = {(c["file"].split("/")[0], c["file"].endswith(".sse")) for c in CASES if "usage" in c}
    families = {c["file"].split("/")[0] for c in CASES}
    assert {family for family, streamed in counted if not streamed} == families
    assert len({family for family, streamed in counted if streamed}) >= 7


def read(reply: Reply) -> tuple[str, list[tuple[str, str, Any]]]:
    return reply.text, [(c.id, c.name, json.loads(c.arguments)) for c in reply.tool_calls]


def figures(reply: Reply) -> dict[str, int] | None:
    """The reply's usage as cases.json writes it; None when the answer gave none."""
    if reply.usage is None:
        return None
    return {"input": reply.usage.input, "output": reply.usage.output}
