"""`bxctl mcp show | trust` right after `bxctl up` (issue 27): they wait for brokerd's listing,
saying so, for a bounded time, and only while brokerd runs; a server brokerd could not start
is said at once. A fake clock: nothing here really waits."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bxcore import mcp_state
from bxcore.config.mcp import McpServer
from bxcore.home.layout import Home
from bxcore.mcp_tools import ToolDef
from bxctl import mcp_wait

TOOL = ToolDef("git_log", "Shows the commit logs.", {"type": "object"})
SERVER = McpServer("git", ("/usr/bin/srv",), start_s=10.0)


class Clock:
    """Time that passes only when slept; `then` runs once the clock reaches its time."""

    def __init__(self, then: dict[float, object] | None = None) -> None:
        self.at = 0.0
        self.then = dict(then or {})

    def now(self) -> float:
        return self.at

    def sleep(self, seconds: float) -> None:
        self.at += seconds
        for when in [w for w in self.then if w <= self.at]:
            action = self.then.pop(when)
            assert callable(action)
            action()


def brokerd_runs(home: Home) -> None:
    home.run.mkdir(parents=True, exist_ok=True)
    home.lock("brokerd").write_text(f"{os.getpid()}\n")


def listed(home: Home) -> None:
    body = {"server": "git", "tools": [TOOL.definition()]}
    (home.run / "mcp-git.json").write_text(json.dumps(body))


def reported(home: Home, problem: str) -> None:
    (home.run / "brokerd.json").write_text(json.dumps({"mcp": {"git": {"problem": problem}}}))


def test_the_listing_brokerd_writes_meanwhile_is_waited_for_with_progress(tmp_path: Path) -> None:
    home = Home(tmp_path)
    brokerd_runs(home)
    clock = Clock({12.0: lambda: listed(home)})
    said: list[str] = []
    tools = mcp_wait.listing(home, SERVER, said.append, now=clock.now, sleep=clock.sleep)
    assert tools == (TOOL,)
    assert said[0] == "waiting for brokerd to list the tools of git (at most 30 s)…"
    assert said[1:] == ["… still waiting (5 s)", "… still waiting (10 s)"]


def test_the_wait_is_bounded_by_the_servers_start_s(tmp_path: Path) -> None:
    home = Home(tmp_path)
    brokerd_runs(home)
    clock = Clock()
    with pytest.raises(mcp_state.NotListed, match="has not listed the tools of 'git'"):
        mcp_wait.listing(home, SERVER, lambda line: None, now=clock.now, sleep=clock.sleep)
    assert 30.0 <= clock.at < 30.5


def test_a_server_brokerd_could_not_start_is_said_at_once(tmp_path: Path) -> None:
    home = Home(tmp_path)
    brokerd_runs(home)
    clock = Clock({1.0: lambda: reported(home, "exited with code 1: no mailbox")})
    with pytest.raises(mcp_state.StartError) as caught:
        mcp_wait.listing(home, SERVER, lambda line: None, now=clock.now, sleep=clock.sleep)
    assert str(caught.value).startswith("brokerd could not start git: exited with code 1: no ")
    assert clock.at < 1.5


def test_nothing_is_waited_for_while_brokerd_does_not_run(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.run.mkdir(parents=True)
    home.lock("brokerd").write_text("999999999\n")  # no such process: a brokerd that ended
    clock = Clock()
    with pytest.raises(mcp_state.NotListed, match="is the box up"):
        mcp_wait.listing(home, SERVER, lambda line: None, now=clock.now, sleep=clock.sleep)
    assert clock.at == 0.0
