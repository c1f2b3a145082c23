"""brokerd's own JSON-RPC to a started MCP server: what it sends, and what it takes back."""

from __future__ import annotations

import json

import pytest

from services.brokerd.mcp.wire import (
    Asked,
    Reply,
    Told,
    WireError,
    answer_line,
    call_line,
    parse_line,
)


def test_a_call_line_is_one_json_rpc_request_holding_the_canonical_arguments() -> None:
    line = call_line(7, 'e"cho', '{"text":"a\\nb"}')
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": 'e"cho', "arguments": {"text": "a\nb"}},
    }


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}', Reply(1, {"content": []})),
        (
            b'{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad"}}',
            Reply(2, None, "error -32602: bad"),
        ),
        (b'{"jsonrpc":"2.0","id":"p1","method":"ping"}', Asked("p1", "ping")),
        (
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{}}',
            Told("notifications/message"),
        ),
    ],
)
def test_the_messages_brokerd_takes(line: bytes, message: object) -> None:
    assert parse_line(line) == message


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'{"id":1,"result":{}}',  # no jsonrpc
        b'{"jsonrpc":"2.0","id":1,"id":2,"result":{}}',  # a key twice
        b'{"jsonrpc":"2.0","id":1,"result":{"x":NaN}}',
        b'{"jsonrpc":"2.0","id":true,"result":{}}',
        b'{"jsonrpc":"2.0","id":"1","result":{}}',  # brokerd's ids are numbers
        b'{"jsonrpc":"2.0","id":1}',
        b'{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}',
        b'{"jsonrpc":"2.0","id":1,"result":[]}',
        b'{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}',
        b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}',
        b'{"jsonrpc":"2.0","method":7}',
        b"[" * 100_000,
    ],
)
def test_anything_else_is_refused(line: bytes) -> None:
    with pytest.raises(WireError):
        parse_line(line)


def test_a_ping_is_answered_and_any_other_request_is_not_offered() -> None:
    assert json.loads(answer_line(Asked(3, "ping"))) == {"jsonrpc": "2.0", "id": 3, "result": {}}
    refused = json.loads(answer_line(Asked("s", "sampling/createMessage")))
    assert refused["id"] == "s" and refused["error"]["code"] == -32601
