"""The courier's memory calls while the supervisor says memoryd is down (issue 10): answered
at once, not after the client's tries; otherwise memoryd is asked as before. In this process,
with a client that records what it is asked."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from bxcore import service_states
from bxcore.client import Client, Unreachable
from bxcore.config.file import SandboxConfig
from bxcore.labels import DataClass, Label
from bxcore.service_states import Entry, Snapshot
from bxcore.wire.messages import Done, ToolRequest, ToolResponse
from services.brokerd.core import args
from services.brokerd.core.bwrap import Host
from services.brokerd.core.grants import Grant, Mode
from services.brokerd.core.policy import Allowed
from services.brokerd.courier import Courier, Result

pytestmark = pytest.mark.anyio

MEMORY = Grant("memory", "memory", Mode.ALLOW, None, None, DataClass.PRIVATE, False, "", "0" * 64)
NOTE = Allowed(MEMORY, args.parse("memory", '{"action":"note","text":"x"}'), None)


class FakeClient(Client):
    """Answers every request `Done`, or raises Unreachable when `answers` is False."""

    def __init__(self, asked: list[Any], *, answers: bool = True) -> None:
        self.endpoint, self.name = "ipc:///x/memory.sock", "memoryd"
        self.asked = asked
        self.answers = answers

    async def ask(self, message: Any, **_: Any) -> Any:
        self.asked.append(message)
        if not self.answers:
            raise Unreachable("memoryd did not answer")
        return ToolResponse(message.id, Done(True, "noted #1", Label(DataClass.PRIVATE, False)))

    def close(self) -> None:
        pass


def courier(run: Path, asked: list[Any], *, answers: bool = True) -> Courier:
    host = Host(None, "/usr/bin/python3", "/usr", "/toolkit")
    return Courier(SandboxConfig(), host, lambda: FakeClient(asked, answers=answers), run)


def say(run: Path, state: str, supervisor: int = os.getpid()) -> None:
    service_states.write(
        run, Snapshot(supervisor, {"memoryd": Entry(state, "cannot start: exit 78")})
    )


@pytest.mark.parametrize("state", ["failed", "stopped"])
async def test_a_memory_call_while_memoryd_stays_down_is_answered_at_once(
    tmp_path: Path, state: str
) -> None:
    asked: list[Any] = []
    say(tmp_path, state)
    started = time.monotonic()
    result = await courier(tmp_path, asked).run("s1", "c1", NOTE)
    assert time.monotonic() - started < 0.1
    assert asked == []
    assert result == Result.failed(
        f"memory unavailable: memoryd is {state} (cannot start: exit 78); see `bxctl logs memoryd`"
    )


@pytest.mark.parametrize("state", ["running", "backoff", "starting"])
async def test_memoryd_is_asked_while_it_runs_or_may_come_back(tmp_path: Path, state: str) -> None:
    asked: list[Any] = []
    say(tmp_path, state)
    result = await courier(tmp_path, asked).run("s1", "c1", NOTE)
    assert result.ok and result.output == "noted #1"
    assert len(asked) == 1 and isinstance(asked[0], ToolRequest)


async def test_without_a_supervisor_memoryd_is_asked_as_before(tmp_path: Path) -> None:
    asked: list[Any] = []
    result = await courier(tmp_path, asked, answers=False).run("s1", "c1", NOTE)
    assert len(asked) == 2  # the client's two tries, one at a time
    assert result.error == (
        "memory unavailable: memoryd did not answer at ipc:///x/memory.sock (2 tries, 5 s each); "
        "is it running? try `bxctl status`"
    )


async def test_a_supervisor_that_marks_memoryd_failed_between_tries_ends_the_wait(
    tmp_path: Path,
) -> None:
    asked: list[Any] = []
    say(tmp_path, "backoff")
    client = FakeClient(asked, answers=False)
    original = client.ask

    async def first_try_then_failed(message: Any, **kw: Any) -> Any:
        say(tmp_path, "failed")  # the supervisor gives up on it while we wait
        time.sleep(0.01)  # a new mtime, whatever the file system's resolution
        return await original(message, **kw)

    client.ask = first_try_then_failed  # type: ignore[method-assign]
    result = await Courier(SandboxConfig(), Host(None, "", "", ""), lambda: client, tmp_path).run(
        "s1", "c1", NOTE
    )
    assert len(asked) == 1
    assert result.error is not None and "memoryd is failed" in result.error
