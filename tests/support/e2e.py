"""The whole box as the owner starts it, for tests/e2e: `bxctl up` (all four services, under
the supervisor) on a short home of its own, with a fake model scripted per owner message.

    with box_up() as box:
        box.model.script("hello", Answer(text="hi"))
        result = box.bxctl("chat", "--session", "s1", "hello")

Whatever the test did, `box_home` runs `bxctl down` after it and fails the test if any process
naming the home survived; the fake model stops only after that.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.model_server import FakeModel
from tests.support.box import box_home, bxctl, wait_until
from tests.support.brokerd import ledger_records, short_folder
from tests.support.cli import Completed
from tests.support.daemons import init_home
from tests.support.owner import Box, ScriptedModel, Terminal


@dataclass
class UpBox(Box):
    """A box started with `bxctl up`: its daemons are the supervisor's, not the test's."""

    started: Completed | None = field(default=None, repr=False)

    def bxctl(self, *args: str, timeout: float = 60.0) -> Completed:
        return bxctl(self.home, *args, timeout=timeout)

    def status(self) -> dict[str, Any]:
        """`bxctl status --json`."""
        result = self.bxctl("status", "--json")
        assert result.returncode in (0, 3), result.stderr
        data: dict[str, Any] = json.loads(result.stdout)
        return data

    def services(self) -> dict[str, dict[str, Any]]:
        return {item["name"]: item for item in self.status()["services"]}

    def restarted(self, name: str, old_pid: int, timeout: float = 20.0) -> dict[str, Any]:
        """`name`'s status once the supervisor runs it again in a process other than
        `old_pid`."""

        def again() -> dict[str, Any] | None:
            item = self.services()[name]
            # no pid while running: the old process has exited, and the supervisor has yet to
            # count it (it is stopping what the process left running)
            anew = item["pid"] is not None and item["pid"] != old_pid
            return item if item["state"] == "running" and anew else None

        found: dict[str, Any] = wait_until(again, timeout, f"{name} restarted")
        return found

    def chat_on_a_terminal(self, *args: str) -> Terminal:
        """`bxctl chat` on a pseudo-terminal, as the owner runs it in a shell."""
        return Terminal([sys.executable, "-m", "bxctl", "--home", str(self.home), "chat", *args])


@contextlib.contextmanager
def box_up(*, before_up: Callable[[Path], None] = lambda home: None) -> Iterator[UpBox]:
    """A fresh home (`bxctl init`, its model the fake one), `before_up(home)`, then `bxctl up`,
    which must succeed."""
    with short_folder() as root, FakeModel() as fake, box_home(root) as home:
        init_home(home, f'[model]\nbase_url = "{fake.base_url}"\n')
        before_up(home)
        box = UpBox(home, ScriptedModel(fake))
        box.started = bxctl(home, "up")
        assert box.started.returncode == 0, box.started.stderr
        yield box


def results_read(messages: list[dict[str, Any]]) -> list[str]:
    """What the model read back from its tool calls, in the order of `messages` (one request's,
    as `ScriptedModel.requests_for` gives them)."""
    return [m["content"] for m in messages if m["role"] == "tool"]


def decision_records(box: UpBox, session: str) -> list[dict[str, Any]]:
    """Each `decision` record of `session`, in the ledger's order."""
    return [
        r for r in ledger_records(box.home)
        if r.get("session") == session and r["kind"] == "decision"
    ]  # fmt: skip


def decisions(box: UpBox, session: str) -> list[tuple[Any, ...]]:
    """(tool, outcome, reason) of each `decision` record of `session`, in the ledger's order."""
    return [(r["tool"], r["outcome"], r.get("reason")) for r in decision_records(box, session)]


def label_of(box: UpBox, session: str) -> dict[str, Any]:
    """The session's label as brokerd keeps it on disk."""
    data: dict[str, Any] = json.loads(
        (box.home / "state" / "broker" / f"{session}.json").read_text()
    )
    return data
