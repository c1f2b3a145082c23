"""The owner's side in tests: a whole box (brokerd, memoryd, loopd, gatewayd and a fake model
scripted per owner message), `bxctl` (`chat` as a real process, the owner's other commands in
the test's process: `tests.support.cli`), and a terminal (pty) to drive it.

    with running_box() as box:
        box.model.script("read a.md", Answer(tool_calls=(Call("read_file", ...),)), Answer("ok"))
        result = box.bxctl("chat", "--session", "s1", "read a.md")
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bxcore.wire.messages import Events, EventsQuery, TurnEnd, TurnEvent
from tests.fakes.model_server import Action, Answer, Call, FakeModel, Request
from tests.support.brokerd import short_folder
from tests.support.cli import Completed, bxctl
from tests.support.daemons import Daemon, init_home, running, sync_request

SERVICES = ("brokerd", "memoryd", "loopd", "gatewayd")


class ScriptedModel:
    """A fake model that answers each turn by its owner message: the n-th model call after
    that message gets the n-th scripted answer, so tests sharing one box never collide."""

    def __init__(self, fake: FakeModel) -> None:
        self.fake = fake
        self._scripts: dict[str, tuple[Action, ...]] = {}
        fake.respond_with(self._respond)

    def script(self, message: str, *answers: Action) -> None:
        self._scripts[message] = answers

    def calls(self, *calls: tuple[str, str]) -> Answer:
        """An answer making these tool calls (name, arguments)."""
        return Answer(tool_calls=tuple(Call(name, arguments) for name, arguments in calls))

    def requests_for(self, message: str) -> list[list[dict[str, Any]]]:
        """The messages of every request made in the turn that `message` started."""
        found = []
        for request in self.fake.requests:
            turn = _turn_of(request["messages"])
            if turn is not None and turn[0] == message:
                found.append(request["messages"])
        return found

    def _respond(self, request: Request) -> Action | None:
        turn = _turn_of(request.body["messages"])
        if turn is None or turn[0] not in self._scripts:
            return Answer(text="(nothing scripted)")
        answers = self._scripts[turn[0]]
        return answers[turn[1]] if turn[1] < len(answers) else Answer(text="(script ended)")


def _turn_of(messages: list[dict[str, Any]]) -> tuple[str, int] | None:
    """The last owner message, and how many times the model answered since (either API: an
    Anthropic tool result is a `user` message of `tool_result` blocks, not the owner's)."""
    for index in range(len(messages) - 1, -1, -1):
        said = _owner_said(messages[index])
        if said is not None:
            steps = sum(1 for m in messages[index + 1 :] if m["role"] == "assistant")
            return said, steps
    return None


def _owner_said(message: dict[str, Any]) -> str | None:
    if message["role"] != "user":
        return None
    content = message["content"]
    if isinstance(content, str):
        return content
    blocks = [b for b in content if isinstance(b, dict)]
    if any(b.get("type") == "tool_result" for b in blocks):
        return None
    return "".join(str(b.get("text", "")) for b in blocks)


@dataclass
class Box:
    home: Path
    model: ScriptedModel
    daemons: dict[str, Daemon] = field(default_factory=dict)

    def bxctl(self, *args: str, timeout: float = 60.0) -> Completed:
        return run_bxctl(self.home, *args, timeout=timeout)

    @contextlib.contextmanager
    def bxctl_process(self, *args: str) -> Iterator[subprocess.Popen[str]]:
        """`bxctl` running in the background (no terminal, stdin at its end); killed after."""
        process = subprocess.Popen(
            [sys.executable, "-m", "bxctl", "--home", str(self.home), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()

    def ask(self, message: Any, timeout: float = 10.0) -> Any:
        """One request on the gateway socket, as the owner."""
        return sync_request(self.home, "gateway", message, timeout=timeout)

    def turn(self, session: str, turn: int, after: int = 0) -> list[TurnEvent]:
        """The events of `turn`, long-polled through the gateway until it ends."""
        found: list[TurnEvent] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = self.ask(EventsQuery("t", session, after, 2000), timeout=10)
            assert isinstance(answer, Events), answer
            for event in answer.events:
                after = event.seq
                if event.turn == turn:
                    found.append(event)
                    if isinstance(event.event, TurnEnd):
                        return found
        raise TimeoutError(f"turn {turn} of {session} did not end: {found}")


@contextlib.contextmanager
def running_box(services: Sequence[str] = SERVICES, config: str = "") -> Iterator[Box]:
    with short_folder() as tmp, FakeModel() as fake, contextlib.ExitStack() as stack:
        home = init_home(tmp / "h", f'[model]\nbase_url = "{fake.base_url}"\n{config}')
        box = Box(home, ScriptedModel(fake))
        for name in services:
            box.daemons[name] = stack.enter_context(running(name, home))
        yield box


def run_bxctl(home: Path, *args: str, timeout: float = 60.0) -> Completed:
    """In this process unless the command needs its own (`tests.support.cli`)."""
    return bxctl(home, *args, timeout=timeout)


def wait_until(check: Any, timeout: float = 10.0, what: str = "a condition") -> Any:
    """Poll `check()` until it gives something true; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"waited {timeout} s for {what}")


class Reader:
    """What a process prints on one file descriptor, read as it comes, matched in order."""

    def __init__(self, fd: int, process: subprocess.Popen[Any]) -> None:
        self.fd = fd
        self.process = process
        self.output = ""  # what is not yet consumed by a match
        self.everything = ""

    def expect(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """Wait until the output (since the last match) holds `pattern`; consume up to it."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.output)
            if found:
                self.output = self.output[found.end() :]
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {pattern!r} in {timeout} s; the output: {self.output!r}")
            if not self._read(min(left, 0.2)) and self.process.poll() is not None:
                raise EOFError(f"the process ended; no {pattern!r} in {self.output!r}")

    def drain(self, timeout: float = 20.0) -> int:
        """Read until the process ends; its exit status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self._read(0.1) and self.process.poll() is not None:
                return self.process.returncode
        raise TimeoutError(f"the process did not end in {timeout} s: {self.everything!r}")

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], wait)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # a pty whose process is gone
            data = b""
        text = data.decode("utf-8", "replace").replace("\r\n", "\n")
        self.output += text
        self.everything += text
        return bool(data)


class Terminal:
    """A process on a pseudo-terminal: what it prints is read from the master side, and
    what the test types goes in there, through the line discipline as a person's would."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.master, slave = os.openpty()
        self.process = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            env=env,
            cwd=cwd,
        )
        os.close(slave)
        self.screen = Reader(self.master, self.process)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *_: object) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        os.close(self.master)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        return self.screen.expect(pattern, timeout)

    def wait(self, timeout: float = 20.0) -> int:
        """The exit status, once the process has ended (reading what it still prints)."""
        return self.screen.drain(timeout)
