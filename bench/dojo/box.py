"""The real box of `python -m bench agentdojo`, and its owner.

`Box` is a fresh home (`bxctl init`, then a config naming the fake model, a console on a free
port, one `[[mcp]]` entry a suite: bench/dojo/server.py, shared by every session), the
owner's grants written as files, `bxctl up` (all four services under the supervisor), each
server trusted with `bxctl mcp trust NAME --yes` (every argument's role as proposed), and
`bxctl down` at the end. `Owner` is what the owner does through gatewayd with the owner's
key, as `bxctl chat` does: sends each task's prompt as a new session's message, follows the
turn, and denies every approval it waits for (`verdict`, through gatewayd to brokerd).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bxcore.home.layout import Home
from bxcore.wire.messages import (
    Accepted,
    Events,
    EventsQuery,
    OwnerMessage,
    Scope,
    TurnEnd,
    VerdictRequest,
)
from bxctl.init import init_home
from bxctl.owner_link import OwnerLink, request_id
from tests.support.mcp import reachable

SERVER = Path(__file__).resolve().parent / "server.py"
WAIT_MS = 2_000
TURN_S = 300.0  # a turn that takes longer is a fault of the run, not a figure

#: The owner's grants of each suite's tools, as an owner reading the tool list writes them:
#: the readers (`get_…`, `search_…`, `list_…`, `read_…`, `check_…`) as sources, every other
#: tool allowed as both; results untrusted (the default).
READERS = {
    "banking": ("get_", "read_"),
    "slack": ("get_", "read_"),
    "travel": ("get_", "search_", "check_"),
    "workspace": ("get_", "search_", "list_"),
}


def labelled_grants(suite: str) -> dict[str, str]:
    grants = {f"{suite}-all": f'tool = "mcp__{suite}__*"\nmode = "allow"\nkind = "both"\n'}
    for prefix in READERS[suite]:
        tool = f"mcp__{suite}__{prefix}*"
        grants[f"{suite}-{prefix.rstrip('_')}"] = (
            f'tool = "{tool}"\nmode = "allow"\nkind = "source"\n'
        )
    return grants


def open_grants(suite: str) -> dict[str, str]:
    """Allow-all: every tool runs, nothing is marked untrusted."""
    grant = f'tool = "mcp__{suite}__*"\nmode = "allow"\nkind = "both"\nuntrusted = false\n'
    return {f"{suite}-all": grant}


GRANTS = {"boxmaker": labelled_grants, "allow-all": open_grants}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _config(base_url: str, state: Path, suites: tuple[str, ...]) -> str:
    lines = [
        f'[model]\nbase_url = "{base_url}"\n',
        f"[console]\nport = {_free_port()}\n",
        "[loop]\nmax_steps = 100\n",
    ]
    for suite in suites:
        command = [sys.executable, str(SERVER), suite, str(state)]
        lines.append(
            f'[[mcp]]\nname = "{suite}"\ncommand = {json.dumps(command)}\n'
            f"ro_paths = {json.dumps([str(SERVER.parent)])}\npaths = {json.dumps([str(state)])}\n"
            "per_session = false\nidle_s = 86400\n"
        )
    return "\n".join(lines)


def bxctl(home: Home, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bxctl", "--home", str(home.root), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


@contextlib.contextmanager
def box(folder: Path, base_url: str, grants: str, suites: tuple[str, ...]) -> Iterator[Box]:
    """A box up with `grants` ("boxmaker" or "allow-all") of `suites`; down at the end."""
    from bench.dojo.tasks import tool_listing

    state = folder / "state"
    state.mkdir()
    for suite in suites:
        (state / f"{suite}.tools.json").write_text(json.dumps(tool_listing(suite)))
    reachable(state)  # the servers run as `[sandbox] user` when the bench runs as root
    home = Home(folder / "home")
    init_home(home)
    home.config.write_text(_config(base_url, state, suites))
    for suite in suites:
        for name, text in GRANTS[grants](suite).items():
            (home.root / "grants" / f"{name}.toml").write_text(text)
    started = bxctl(home, "up")
    try:
        if started.returncode != 0:
            raise RuntimeError(f"bxctl up failed: {started.stderr.strip()}")
        for suite in suites:
            _trust(home, suite)
        yield Box(home, state)
    finally:
        bxctl(home, "down")


def _trust(home: Home, suite: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        done = bxctl(home, "mcp", "trust", suite, "--yes")
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"bxctl mcp trust {suite}: {done.stderr.strip()}")
        time.sleep(0.5)


@dataclass
class Box:
    home: Home
    state: Path  # the servers' folder: the task they run, the state each run left


@dataclass
class Turn:
    """What the owner saw of one turn: the approvals asked (each denied) and why, how it
    ended."""

    asked: list[str] = field(default_factory=list)  # each approval's `why`
    targets: list[str] = field(default_factory=list)  # each asked target not the owner's:
    # `tool /pointer=value (origin)`
    ended: str = ""


class Owner:
    """The owner at gatewayd: a message, the turn followed, every approval denied."""

    def __init__(self, home: Home) -> None:
        self.link = OwnerLink(home, "gateway")

    def close(self) -> None:
        self.link.close()

    def turn(self, session: str, text: str) -> Turn:
        accepted = self.link.ask(OwnerMessage(request_id("dojo"), session, text))
        if not isinstance(accepted, Accepted):
            raise RuntimeError(f"gatewayd refused the message: {accepted!r}")
        seen = Turn()
        cursor, denied = accepted.seq - 1, set[str]()
        deadline = time.monotonic() + TURN_S
        while time.monotonic() < deadline:
            query = EventsQuery(request_id("dojo"), session, cursor, WAIT_MS)
            answer = self.link.ask(query)
            if not isinstance(answer, Events):
                raise RuntimeError(f"gatewayd answered {answer!r}")
            for info in answer.pending:
                if info.approval in denied:
                    continue
                denied.add(info.approval)
                seen.asked.append(str(info.why))
                seen.targets += [
                    f"{info.tool} {t.at}={t.value} ({t.origin})"
                    for t in info.targets or ()
                    if t.origin != "owner"
                ]
                verdict = VerdictRequest(
                    request_id("dojo"), info.approval, False, Scope.ONCE, "bench"
                )
                self.link.ask(verdict)
            for event in answer.events:
                cursor = max(cursor, event.seq)
                if event.turn == accepted.turn and isinstance(event.event, TurnEnd):
                    seen.ended = str(event.event.reason)
                    return seen
        raise TimeoutError(f"{session}: the turn did not end in {TURN_S:g} s")
