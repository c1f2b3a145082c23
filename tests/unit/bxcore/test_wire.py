"""The wire codec: canonical fixtures round-trip byte for byte; anything else is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.wire import codec as wire
from bxcore.wire.messages import Denied, Done, ToolResponse

FIXTURES = Path(__file__).parents[2] / "fixtures" / "wire"
FILES = sorted(FIXTURES.glob("*.json"))
NAMES = [f.stem for f in FILES]


def load(path: Path) -> Any:
    return json.loads(path.read_bytes())


def dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def objects(value: Any, trail: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every object inside a parsed JSON value, the value itself first."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        found.append(trail)
        for key, item in value.items():
            found += objects(item, (*trail, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += objects(item, (*trail, index))
    return found


def leaves(value: Any, trail: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every scalar inside a parsed JSON value."""
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in leaves(item, (*trail, key))]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in leaves(item, (*trail, index))]
    return [trail]


def at(value: Any, trail: tuple[Any, ...]) -> Any:
    for step in trail:
        value = value[step]
    return value


def test_there_is_a_fixture_for_every_message_type() -> None:
    seen = {load(f)["type"] for f in FILES}
    assert seen == set(wire.TYPES)


def test_there_is_a_fixture_for_every_outcome_and_every_event_kind() -> None:
    outcomes = {load(f)["outcome"] for f in FILES if load(f)["type"] == "tool_response"}
    kinds = {load(f)["event"]["kind"] for f in FILES if load(f)["type"] == "turn_event"}
    assert outcomes == {"done", "denied", "pending", "error"}
    assert kinds == {
        "owner_message",
        "assistant_text",
        "tool_called",
        "tool_done",
        "tool_denied",
        "tool_pending",
        "turn_end",
        "error",
    }


@pytest.mark.parametrize("path", FILES, ids=NAMES)
def test_each_fixture_round_trips_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    assert wire.encode(wire.decode(data)) == data


@pytest.mark.parametrize("path", FILES, ids=NAMES)
def test_an_unknown_key_at_any_depth_fails_to_decode(path: Path) -> None:
    value = load(path)
    for trail in objects(value):
        spoiled = load(path)
        at(spoiled, trail)["surprise"] = 1
        with pytest.raises(wire.DecodeError, match="surprise"):
            wire.decode(dump(spoiled))


@pytest.mark.parametrize("path", FILES, ids=NAMES)
def test_a_wrong_type_at_any_leaf_fails_to_decode(path: Path) -> None:
    value = load(path)
    for trail in leaves(value):
        if trail in (("type",), ("outcome",)) or trail[-1] == "kind":
            continue
        for wrong in ([], {}, 1.5, None if at(value, trail) is not None else 0):
            spoiled = load(path)
            at(spoiled, trail[:-1])[trail[-1]] = wrong
            with pytest.raises(wire.DecodeError):
                wire.decode(dump(spoiled))


@pytest.mark.parametrize("path", FILES, ids=NAMES)
def test_a_missing_required_key_fails_to_decode(path: Path) -> None:
    value = load(path)
    message = wire.decode(path.read_bytes())
    for trail in objects(value):
        for key in list(at(value, trail)):
            spoiled = load(path)
            del at(spoiled, trail)[key]
            try:
                decoded = wire.decode(dump(spoiled))
            except wire.DecodeError:
                continue
            # Only optional keys may go; what is left is another canonical message.
            assert decoded != message
            assert wire.encode(decoded) == dump(spoiled)


@pytest.mark.parametrize("path", FILES, ids=NAMES)
def test_a_key_given_twice_fails_to_decode(path: Path) -> None:
    data = path.read_bytes()
    twice = data[:-1] + b',"type":' + json.dumps(load(path)["type"]).encode() + b"}"
    with pytest.raises(wire.DecodeError, match="given twice"):
        wire.decode(twice)


@pytest.mark.parametrize(
    "data, why",
    [
        (b'{"type":"ping","id":"r1"} ', "Extra data"),
        (b'{"type":"ping","id":"r1"}{}', "Extra data"),
        (b'{"type":"ping","id":"r\xff"}', "not UTF-8"),
        (b'{"type":"ping","id":"\\ud800"}', "lone surrogate"),
        (b'{"type":"ping","id":NaN}', "NaN"),
        (b'{"type":"ping","id":Infinity}', "Infinity"),
        (b"[" * 100_000, "nested too deeply|not JSON"),
        (b'{"type":"ping","id":"' + b"x" * (4 * 1024 * 1024) + b'"}', "larger than"),
        (b'{"type":"ping","id":""}', "at least 1"),
        (b'{"type":"ping","id":"' + b"x" * 65 + b'"}', "at most 64"),
        (b'{"type":"ping"}', "missing key 'id'"),
        (b'{"id":"r1"}', 'no "type"'),
        (b'{"type":"launch","id":"r1"}', "unknown message type"),
        (b'{"type":7,"id":"r1"}', "unknown message type"),
        (b"[]", "not a JSON object"),
        (b"null", "not a JSON object"),
        (b"", "not JSON"),
        (b"\x00", "not JSON"),
        (
            b'{"type":"tool_request","id":"r1","session":"-x","call":"c","tool":"t",'
            b'"arguments":""}',
            "session id",
        ),
        (
            b'{"type":"tool_request","id":"r1","session":"a b","call":"c","tool":"t",'
            b'"arguments":""}',
            "session id",
        ),
        (
            b'{"type":"tool_request","id":"r1","session":"s","call":"","tool":"t","arguments":""}',
            "call id",
        ),
        (
            b'{"type":"await_approval","id":"r","session":"s","approval":"k3v9qz2m","wait_ms":30001}',
            "from 0 to 30000",
        ),
        (
            b'{"type":"await_approval","id":"r","session":"s","approval":"K3V9QZ2M","wait_ms":1}',
            "approval id",
        ),
        (
            b'{"type":"await_approval","id":"r","session":"s","approval":"k3v9qz2m","wait_ms":true}',
            "integer",
        ),
        (
            b'{"type":"await_approval","id":"r","session":"s","approval":"k3v9qz2m","wait_ms":1.0}',
            "integer",
        ),
        (
            b'{"type":"tool_response","id":"r1","outcome":"done","ok":1,"output":"",'
            b'"label":{"class":"public","untrusted":false}}',
            "true or false",
        ),
        (
            b'{"type":"tool_response","id":"r1","outcome":"done","ok":true,"output":"",'
            b'"label":{"class":"top","untrusted":false}}',
            "one of",
        ),
        (b'{"type":"tool_response","id":"r1","outcome":"maybe"}', "outcome"),
        (b'{"type":"tool_response","id":"r1"}', "missing key 'outcome'"),
        (
            b'{"type":"tool_response","id":"r1","outcome":"denied","reason":"no_grant",'
            b'"approval":"k3v9qz2m"}',
            "does not belong",
        ),
        (
            b'{"type":"turn_event","session":"s","turn":1,"seq":1,"event":{"text":"x"}}',
            "missing key 'kind'",
        ),
    ],
)
def test_hostile_frames_get_one_line_errors(data: bytes, why: str) -> None:
    with pytest.raises(wire.DecodeError, match=why) as caught:
        wire.decode(data)
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300


def test_a_decode_error_carries_the_request_id_when_it_can_be_read() -> None:
    with pytest.raises(wire.DecodeError) as caught:
        wire.decode(b'{"type":"tool_request","id":"r9","session":"s"}')
    assert caught.value.id == "r9"
    with pytest.raises(wire.DecodeError) as caught:
        wire.decode(b'{"type":"tool_request","id":9}')
    assert caught.value.id is None


def test_a_denial_without_detail_has_no_detail_key() -> None:
    data = wire.encode(ToolResponse("r1", Denied(DenyReason.NO_GRANT)))
    assert data == b'{"type":"tool_response","id":"r1","outcome":"denied","reason":"no_grant"}'


def test_encoding_is_canonical_for_decoded_non_canonical_input() -> None:
    loose = (
        b'{ "id" : "r1", "type":"tool_response","label":{"untrusted":false,"class":"secret"},'
        b'"output":"\\u00e9","outcome":"done","ok":true}'
    )
    message = wire.decode(loose)
    assert message == ToolResponse("r1", Done(True, "é", Label(DataClass.SECRET, False)))
    assert (
        wire.encode(message)
        == (
            '{"type":"tool_response","id":"r1","outcome":"done","ok":true,"output":"é",'
            '"label":{"class":"secret","untrusted":false}}'
        ).encode()
    )


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_random_bytes_raise_nothing_but_decode_error(data: bytes) -> None:
    try:
        message = wire.decode(data)
    except wire.DecodeError:
        return
    assert wire.decode(wire.encode(message)) == message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(st.sampled_from(FILES), st.data())
def test_any_mutation_of_a_fixture_is_refused_or_decodes_to_a_canonical_message(
    path: Path, data: st.DataObject
) -> None:
    value = load(path)
    trail = data.draw(st.sampled_from(leaves(value)))
    at(value, trail[:-1])[trail[-1]] = data.draw(json_values)
    try:
        message = wire.decode(dump(value))
    except wire.DecodeError:
        return
    assert wire.decode(wire.encode(message)) == message


@pytest.mark.parametrize("text", ["", "short", "é" * 3000, "x" * 5000, "😀" * 1100])
def test_short_cuts_any_text_to_what_a_short_field_holds(text: str) -> None:
    from bxcore.wire.messages import MAX_SHORT, Error, ErrorCode, short

    cut = short(text)
    assert len(cut.encode()) <= MAX_SHORT
    assert cut == text or text.startswith(cut[:-1])
    frame = wire.encode(Error("r1", ErrorCode.INTERNAL, cut))
    assert wire.decode(frame).message == cut
