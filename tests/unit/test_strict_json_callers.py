"""Every place that decodes JSON someone else wrote refuses NaN, Infinity, -Infinity and a key
given twice, and the refusal comes from the one decoder, `bxcore.strict_json` (the error a
caller raises has strict_json's behind it), each in the caller's own words; and no module but
strict_json (and the toolkit's copy, tests/unit/toolkit/test_input_agrees.py) sets a hook of
json's decoder of its own."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore import strict_json
from bxcore.mcp_tools import DefinitionError, Pins, ToolDef, parse_pins, render_pins
from bxcore.shown_arguments import shown_arguments
from bxcore.wire import codec
from services.brokerd.core import args, mcp_args, records
from services.brokerd.mcp import wire as mcp_wire
from services.loopd import http_client, tools
from services.loopd.model import ModelError
from services.memoryd import arguments as memory_arguments

ROOT = Path(__file__).resolve().parents[2]
LOG = ToolDef(
    "git_log", "Shows the commit logs.", {"type": "object", "properties": {"n": {"type": "number"}}}
)
PINS = render_pins(Pins("git", "2026-12-01T10:00:00.000Z", {"git_log": LOG}, {})).decode()

#: (caller, how it is called, a text it takes with `@` where a value goes, the same with a key
#: given twice)
CALLERS: list[tuple[str, Callable[[str], object], str, str]] = [
    (
        "wire frame",
        lambda t: codec.decode(t.encode()),
        '{"type":"ping","id":@}',
        '{"type":"ping","id":"a","id":"b"}',
    ),
    (
        "tool arguments",
        lambda t: args.parse("read_file", t),
        '{"path":@}',
        '{"path":"/a","path":"/b"}',
    ),
    (
        "MCP arguments",
        lambda t: mcp_args.parse(LOG, "mcp__git__git_log", t),
        '{"n":@}',
        '{"n":1,"n":2}',
    ),
    (
        "memory arguments",
        memory_arguments.parse,
        '{"action":"forget","id":@}',
        '{"action":"forget","id":1,"id":2}',
    ),
    (
        "pins file",
        lambda t: parse_pins("git", t.encode()),
        PINS.replace('"version": 2', '"version": @'),
        PINS.replace('"version": 2', '"version": 2, "version": 2'),
    ),
    ("model server", http_client.parse_json, '{"choices":@}', '{"choices":[],"choices":[]}'),
    (
        "MCP server line",
        lambda t: mcp_wire.parse_line(t.encode()),
        '{"jsonrpc":"2.0","id":1,"result":@}',
        '{"jsonrpc":"2.0","id":1,"id":2,"result":{}}',
    ),
]
#: What each caller raises when it refuses its input.
REFUSALS = (
    codec.DecodeError, args.ArgsError, memory_arguments.ArgumentsError, DefinitionError,
    ModelError, mcp_wire.WireError,
)  # fmt: skip

CONSTANTS = st.sampled_from(["NaN", "Infinity", "-Infinity"])


def _refusal(call: Callable[[str], object], text: str) -> BaseException:
    with pytest.raises(REFUSALS) as raised:
        call(text)
    return raised.value


def _behind(error: BaseException | None) -> strict_json.StrictJsonError | None:
    """The strict_json error a caller's error was raised while handling, if any."""
    while error is not None and not isinstance(error, strict_json.StrictJsonError):
        error = error.__context__
    return error


@pytest.mark.parametrize(("caller", "call", "text", "twice"), CALLERS, ids=[c[0] for c in CALLERS])
@given(constant=CONSTANTS, depth=st.integers(0, 4))
def test_every_caller_refuses_nan_and_infinity_through_strict_json(
    caller: str, call: Callable[[str], object], text: str, twice: str, constant: str, depth: int
) -> None:
    value = "[" * depth + constant + "]" * depth
    error = _refusal(call, text.replace("@", value))
    assert isinstance(_behind(error), strict_json.NotAValue), caller
    assert constant in str(error) and "\n" not in str(error)


@pytest.mark.parametrize(("caller", "call", "text", "twice"), CALLERS, ids=[c[0] for c in CALLERS])
def test_every_caller_refuses_a_key_given_twice(
    caller: str, call: Callable[[str], object], text: str, twice: str
) -> None:
    error = _refusal(call, twice)
    assert "twice" in str(error) or "duplicate" in str(error), (caller, str(error))
    if caller not in ("wire frame", "tool arguments"):  # those two keep pairs for the schema
        assert isinstance(_behind(error), strict_json.Twice), caller


@given(constant=CONSTANTS)
def test_the_callers_that_answer_rather_than_raise_refuse_them_too(constant: str) -> None:
    line = b'{"seq":1,"at":"2026-12-01T10:00:00.000Z","prev":"0","kind":' + constant.encode() + b"}"
    assert records.parse_line(line) == f"not JSON ({constant} is not allowed)"
    assert shown_arguments(f'{{"a":{constant}}}').text == f'{{"a":{constant}}}'  # as text
    assert tools.task_of(f'{{"task":{constant}}}') is None
    assert tools.task_of('{"task":"a","task":"b"}') is None


def test_a_ledger_line_with_a_key_twice_is_not_in_canonical_form() -> None:
    line = b'{"seq":1,"seq":1,"at":"2026-12-01T10:00:00.000Z","prev":"0","kind":"x"}'
    assert records.parse_line(line) == "not in canonical form"


def _hooks(source: Path) -> list[str]:
    """The hooks of json's decoder `source` passes by keyword."""
    hooks = {"object_pairs_hook", "object_hook", "parse_constant", "parse_int", "parse_float"}
    tree = ast.parse(source.read_text(), str(source))
    return [
        keyword.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        for keyword in node.keywords
        if keyword.arg in hooks
    ]


@pytest.mark.parametrize(
    "source",
    sorted(p for folder in ("bxcore", "services", "bxctl") for p in (ROOT / folder).rglob("*.py")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_only_strict_json_sets_json_s_hooks(source: Path) -> None:
    allowed = {ROOT / "bxcore" / "strict_json.py", ROOT / "services" / "toolkit" / "input.py"}
    if source not in allowed:
        assert not _hooks(source), f"{source.relative_to(ROOT)}: use bxcore.strict_json"
