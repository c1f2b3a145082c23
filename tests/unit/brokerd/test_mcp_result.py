"""What the model reads of an MCP result, parsed strictly from the server's JSON; an `isError`
result in the shape of a built-in tool's failure: the tool's name, then why (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest

from bxcore.mcp_tools import canonical
from services.brokerd.mcp.result import (
    CUT_NOTE,
    MAX_OUTPUT,
    Outcome,
    ResultError,
    error_text,
    read,
)

TOOL = "mcp__mail__send_email"
SCHEMA = canonical(
    {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"]}
)


@pytest.mark.parametrize(
    ("result", "schema", "outcome"),
    [
        ({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}, None,
         Outcome(True, "a\nb", 5)),
        ({"content": [{"type": "text", "text": "no disk"}], "isError": True}, SCHEMA,
         Outcome(False, f"{TOOL}: the tool reported an error: no disk", 5)),
        ({"content": [], "isError": True}, None,
         Outcome(False, f"{TOOL}: the tool reported an error", 5)),
        ({"content": [], "structuredContent": {"why": "quota"}, "isError": True}, SCHEMA,
         Outcome(False, f'{TOOL}: the tool reported an error: {{"why": "quota"}}', 5)),
        ({"content": [], "structuredContent": {"b": 1, "a": "é"}}, None,
         Outcome(True, '{"a": "é", "b": 1}', 5)),
        ({"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]}, None,
         Outcome(True, "[image content image/png: not shown]", 5)),
        ({"content": [{"type": "text", "text": "ping"}], "structuredContent": {"result": "ping"}},
         SCHEMA, Outcome(True, "ping", 5)),
    ],
)  # fmt: skip
def test_what_the_model_reads(result: dict[str, Any], schema: str | None, outcome: Outcome) -> None:
    assert read(result, 5, schema, TOOL) == outcome


@pytest.mark.parametrize(
    ("result", "schema"),
    [
        ({}, None),
        ({"content": "text"}, None),
        ({"content": [], "isError": "yes"}, None),
        ({"content": ["text"]}, None),
        ({"content": [{"type": "video"}]}, None),
        ({"content": [{"type": "text"}]}, None),
        ({"content": [{"type": "image", "mimeType": 3}]}, None),
        ({"content": [], "structuredContent": [1]}, None),
        ({"content": [{"type": "text", "text": "x"}]}, SCHEMA),  # no structured content
        ({"content": [], "structuredContent": {"result": 1}}, SCHEMA),
    ],
)
def test_what_is_not_a_tool_result_is_refused(result: dict[str, Any], schema: str | None) -> None:
    with pytest.raises(ResultError):
        read(result, 5, schema, TOOL)


def test_a_long_text_is_cut_and_says_so() -> None:
    outcome = read({"content": [{"type": "text", "text": "x" * (MAX_OUTPUT + 10)}]}, 0, None, TOOL)
    assert outcome.output == "x" * MAX_OUTPUT + CUT_NOTE


@pytest.mark.parametrize(
    ("tool", "text", "read_back"),
    [
        ("mcp__mail__send_email", "quota exceeded",
         "mcp__mail__send_email: the tool reported an error: quota exceeded"),
        ("mcp__git__git_log", "", "mcp__git__git_log: the tool reported an error"),
        ("mcp__git__git_log", "line 1\nline 2",
         "mcp__git__git_log: the tool reported an error: line 1\nline 2"),
    ],
)  # fmt: skip
def test_an_error_reads_as_a_built_in_tools_does_the_tools_name_then_why(
    tool: str, text: str, read_back: str
) -> None:
    """As `read_file: /x: no such file`: the model cannot take an error for a success."""
    assert error_text(tool, text) == read_back
    failed = read({"content": [{"type": "text", "text": text}], "isError": True}, 1, None, tool)
    assert failed == Outcome(False, read_back, 1)
