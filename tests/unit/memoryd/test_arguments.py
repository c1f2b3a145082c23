"""memoryd reads only the canonical memory arguments brokerd sends (SPEC §4.2, §8.1)."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.memoryd.arguments import ArgumentsError, Forget, Note, Recall, parse


@pytest.mark.parametrize(
    ("arguments", "action"),
    [
        ('{"action":"note","text":"x"}', Note("x")),
        ('{"action":"note","text":""}', Note("")),
        ('{"action":"note","text":"é 日本 \\n \\"q\\" \\u0000"}', Note('é 日本 \n "q" \x00')),
        ('{"action":"recall","query":"x y"}', Recall("x y")),
        ('{"action":"forget","id":3}', Forget(3)),
        ('{"action":"forget","id":-9223372036854775808}', Forget(-(2**63))),
        ('{"action":"forget","id":9223372036854775807}', Forget(2**63 - 1)),
    ],
)
def test_canonical_arguments_parse_to_their_action(arguments: str, action: object) -> None:
    assert parse(arguments) == action


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ("", "not JSON"),
        ("[]", "not a JSON object"),
        ('"note"', "not a JSON object"),
        ("{}", "unknown action null"),
        ('{"action":"remember","text":"x"}', 'unknown action "remember"'),
        ('{"action":7,"text":"x"}', "unknown action 7"),
        ('{"action":"note"}', "exactly the fields action and text"),
        ('{"text":"x","action":"note"}', "exactly the fields action and text, in that order"),
        ('{"action":"note","text":"x","file":"y"}', "exactly the fields action and text"),
        ('{"action":"note","query":"x"}', "exactly the fields action and text"),
        ('{"action":"note","text":"x","text":"y"}', "duplicate field 'text'"),
        ('{"action":"note","action":"recall","text":"x"}', "duplicate field 'action'"),
        ('{"action":"note","text":5}', "text must be a JSON string"),
        ('{"action":"recall","query":null}', "query must be a JSON string"),
        ('{"action":"forget","id":"3"}', "id must be a JSON integer"),
        ('{"action":"forget","id":3.0}', "id must be a JSON integer"),
        ('{"action":"forget","id":true}', "id must be a JSON integer"),
        ('{"action":"forget","id":NaN}', "NaN is not a JSON value"),
        ('{"action":"forget","id":9223372036854775808}', "id is out of range"),
        ('{"action":"forget","id":-9223372036854775809}', "id is out of range"),
        ('{"action":"forget","id":' + "9" * 5000 + "}", "not JSON|out of range"),
        ('{"action": "note", "text": "x"}', "not in canonical form"),
        ('{"action":"note","text":"\\u00e9"}', "not in canonical form"),
        ('{"action":"note","text":"\\ud800"}', "not in canonical form"),
        ('{"action":"note","text":"x"} ', "text after the JSON object"),
        ('{"action":"note","text":"x"}{}', "text after the JSON object"),
        ("[" * 100_000, "not JSON|nested too deeply"),
    ],
)
def test_anything_else_is_refused_with_a_reason(arguments: str, why: str) -> None:
    with pytest.raises(ArgumentsError, match=why):
        parse(arguments)


@given(st.text(max_size=300))
def test_any_text_either_parses_or_is_refused_with_arguments_error(arguments: str) -> None:
    with contextlib.suppress(ArgumentsError):
        parse(arguments)


@given(
    st.one_of(
        st.text().map(Note), st.text().map(Recall), st.integers(-(2**63), 2**63 - 1).map(Forget)
    )
)
def test_what_brokerd_sends_always_parses_back(action: Note | Recall | Forget) -> None:
    if isinstance(action, Note):
        value: dict[str, object] = {"action": "note", "text": action.text}
    elif isinstance(action, Recall):
        value = {"action": "recall", "query": action.query}
    else:
        value = {"action": "forget", "id": action.id}
    canonical = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        canonical.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate cannot cross the wire
    assert parse(canonical) == action
