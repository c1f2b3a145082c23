"""A whole box with the phone channel on, for the channel's tests and bench (SPEC §21.4): an
owner and a box account on the homeserver, the owner's phone (a real nio client) in a room it
made and invited the box to, and brokerd, memoryd, loopd and gatewayd on a fresh home whose
`[matrix]` table names them; gatewayd gets the box's token in its environment.

    with world(hs, encrypted=True) as w:
        w.model.script("hello", Answer("hi"))
        w.phone.send(w.room, "hello")
        w.box_post("hi")
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bxcore import matrix_report
from bxcore.home.layout import Home
from bxcore.wire.messages import PendingList, PendingQuery
from tests.fakes.model_server import Answer, FakeModel
from tests.support.brokerd import args, short_folder
from tests.support.daemons import Daemon, init_home, running, start
from tests.support.owner import ScriptedModel, wait_until
from tests.support.phone import Phone
from tests.support.synapse import Account, Homeserver

BOX_SERVICES = ("brokerd", "memoryd", "loopd")


@dataclass
class World:
    hs: Homeserver
    home: Path
    model: ScriptedModel
    box: Account
    phone: Phone
    room: str
    encrypted: bool
    daemons: dict[str, Daemon] = field(default_factory=dict)

    @property
    def gatewayd(self) -> Daemon:
        return self.daemons["gatewayd"]

    def start_gatewayd(self) -> Daemon:
        daemon = start("gatewayd", self.home, env={"BX_MATRIX_TOKEN": self.box.token})
        self.daemons["gatewayd"] = daemon
        daemon.wait_ready()
        return daemon

    def link(self) -> dict[str, object]:
        return matrix_report.read(Home(self.home)) or {}

    def wait_joined(self, timeout: float = 30.0) -> None:
        def joined() -> bool | None:
            link = self.link()
            return (link.get("state") == "syncing" and link.get("joined")) or None

        wait_until(joined, timeout, f"the box joined (report: {self.link()})")
        self.phone.wait_member(self.room, self.box.user_id)

    def box_post(self, wanted: str, timeout: float = 30.0) -> str:
        """The event id of the box's first post whose newest text holds `wanted`."""
        post = self.phone.wait_post(self.box.user_id, lambda _p, text: wanted in text, timeout,
                                    f"a post of the box saying {wanted!r}")  # fmt: skip
        return post.event_id

    def session_of(self, root: str) -> str:
        """The session the box made for the thread under `root`."""
        threads = json.loads((self.home / "matrix" / "channel.json").read_text())["threads"]
        session: str = threads[root]
        return session

    def pending(self) -> list[str]:
        answer = self.daemons["brokerd"].ask(PendingQuery("p"), socket="admin")
        assert isinstance(answer, PendingList), answer
        return [a.approval for a in answer.approvals]


counter = iter(range(1, 10_000))  # account names of this process


@contextlib.contextmanager
def world(hs: Homeserver, encrypted: bool, config: str = "") -> Iterator[World]:
    n = f"{os.getpid()}x{next(counter)}"
    box, me = hs.register(f"box{n}"), hs.register(f"me{n}")
    with short_folder() as tmp, FakeModel() as fake, contextlib.ExitStack() as stack:
        phone = stack.enter_context(Phone(hs, me, tmp / "phone"))
        room = phone.create_room(invite=[box.user_id], encrypted=encrypted)
        matrix = (
            f'[matrix]\nhomeserver = "{hs.url}"\nuser = "{box.user_id}"\n'
            f'owners = ["{me.user_id}"]\nroom = "{room}"\n'
            f"encrypted = {'true' if encrypted else 'false'}\n"
        )
        home = init_home(tmp / "h", f'[model]\nbase_url = "{fake.base_url}"\n{config}{matrix}')
        w = World(hs, home, ScriptedModel(fake), box, phone, room, encrypted)
        for name in BOX_SERVICES:
            w.daemons[name] = stack.enter_context(running(name, home))
        try:
            w.start_gatewayd()
            w.wait_joined()
            yield w
        finally:
            if "gatewayd" in w.daemons:
                w.gatewayd.stop()


def shell_call(w: World, command: str) -> Answer:
    workspace = str(w.home / "workspace")
    return w.model.calls(("shell", args(command=command, cwd=workspace)))
