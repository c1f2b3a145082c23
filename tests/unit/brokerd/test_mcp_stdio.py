"""One MCP server's pipes, with a scripted server: a call answered, the server's ping answered,
and a server that ends or writes what is not JSON-RPC failing the call in flight."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from services.brokerd.mcp import stdio as mcp_stdio
from services.brokerd.mcp.stdio import PipeError

pytestmark = pytest.mark.anyio

SERVER = r"""
import json, sys
for line in sys.stdin:
    asked = json.loads(line)
    if "method" not in asked:
        continue
    tool = asked["params"]["name"]
    if tool == "garbage":
        print("hello", flush=True)
    elif tool == "exit":
        sys.exit(0)
    elif tool == "deaf":  # asks and asks, and never reads an answer
        for n in range(20):
            print(json.dumps({"jsonrpc": "2.0", "id": "p" * 1048576, "method": "ping"}), flush=True)
        __import__("time").sleep(30)
    elif tool == "long":
        sys.stdout.write("x" * (17 * 1024 * 1024)); sys.stdout.flush()
    else:
        said = None
        if tool == "ping_first":
            print(json.dumps({"jsonrpc": "2.0", "id": "p", "method": "ping"}), flush=True)
            print(json.dumps({"jsonrpc": "2.0", "method": "notifications/message"}), flush=True)
            said = json.loads(sys.stdin.readline())
        result = {"content": [{"type": "text", "text": json.dumps([asked["params"], said])}]}
        print(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": result}), flush=True)
"""


async def _call(tmp_path: Path, tool: str) -> tuple[object, list[str], int | None]:
    ended: list[str] = []
    argv = [sys.executable, "-c", SERVER]
    with open(tmp_path / "err.log", "w") as errlog:
        async with mcp_stdio.running(argv, {}, errlog, lambda: ended.append("end")) as pipe:
            try:
                answer: object = await pipe.call(tool, '{"a":1}', 10)
            except PipeError as error:
                answer = error
    return answer, ended, pipe.process.returncode


async def test_a_call_is_answered_and_the_server_is_stopped_after(tmp_path: Path) -> None:
    answer, _, code = await _call(tmp_path, "echo")
    assert isinstance(answer, dict)
    assert json.loads(answer["content"][0]["text"]) == [
        {"arguments": {"a": 1}, "name": "echo"},
        None,
    ]
    assert code is not None  # stopped: its input closed, it ended


async def test_the_servers_ping_is_answered_and_its_notification_ignored(tmp_path: Path) -> None:
    answer, _, _ = await _call(tmp_path, "ping_first")
    assert isinstance(answer, dict)
    _, said = json.loads(answer["content"][0]["text"])
    assert said == {"jsonrpc": "2.0", "id": "p", "result": {}}


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ("garbage", "not JSON-RPC"),
        ("exit", "closed its output"),
        ("long", "longer than"),
        ("deaf", "of its input unread"),
    ],
)
async def test_a_server_that_breaks_fails_the_call_and_ends(
    tmp_path: Path, tool: str, why: str
) -> None:
    answer, ended, code = await _call(tmp_path, tool)
    assert isinstance(answer, PipeError) and why in str(answer), answer
    assert ended == ["end"] and code is not None
