"""README.md's quick start, run as a new user runs it, on a fresh home (SPEC §13, §14).

The commands are read from README.md itself, so the README cannot drift from what works: a
command this test does not know fails it, and each one it knows is checked against what the
README says it does. `./install.sh` is not run again (CI runs it before the suite), nor the
README's test command (it is this suite). `$BX_HOME` names a fresh short home; a `--home DIR`
the README writes is given a fresh short home of its own, so a run touches no shared folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bxcore.home.layout import SERVICES
from tests.support.box import REPO, box_home, bxctl, processes_of
from tests.support.brokerd import ledger_lines, short_folder
from tests.support.owner import Terminal

README = REPO / "README.md"
NOT_RUN = ("./install.sh", ".venv/bin/pytest")  # CI runs the first; the second is this suite
PROMPT = r"approve [a-z2-9]{8}\? type ([a-z2-9]{4}) \(once\), \1 s \(session\) or n \(deny\): "


@dataclass(frozen=True)
class Command:
    """One command of the quick start: its words, and what the README says it does."""

    argv: tuple[str, ...]
    says: str

    def __str__(self) -> str:
        return shlex.join(self.argv)

    @property
    def words(self) -> tuple[str, ...]:
        """The command's words, after the global options: ("grant", "list"), ("up", "--demo")."""
        rest = list(self.argv[1:])
        while rest and rest[0] in ("--home", "--debug"):
            del rest[: 2 if rest[0] == "--home" else 1]
        return tuple(rest)

    @property
    def home(self) -> str | None:
        """The `--home DIR` it names, if any."""
        argv = self.argv
        return next((argv[i + 1] for i in range(1, len(argv) - 1) if argv[i] == "--home"), None)


def quick_start(readme: str) -> list[Command]:
    """Every command in the `sh` blocks of the "Quick start" section, `a && b` as two."""
    found = re.search(r"^## Quick start\n(.*?)(?=^## )", readme, re.M | re.S)
    assert found, "README.md has no `## Quick start` section"
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", found.group(1), re.M | re.S):
        for line in block.splitlines():
            says = _comment(line)
            words = shlex.split(line, comments=True)
            while words:
                end = words.index("&&") if "&&" in words else len(words)
                commands.append(Command(tuple(words[:end]), says))
                words = words[end + 1 :]
    return commands


def _comment(line: str) -> str:
    """The text after the line's first `#` that is outside quotes."""
    for mark in re.finditer(r"(?:^|\s)#", line):
        try:
            shlex.split(line[: mark.start()])
        except ValueError:  # an open quote: the `#` is inside an argument
            continue
        return line[mark.end() :].strip()
    return ""


@dataclass
class NewUser:
    """A new user's shell in the checkout: `$BX_HOME` set to a fresh home, and every other
    home the README names mapped to a fresh one. Every box it starts is stopped after."""

    stack: contextlib.ExitStack
    homes: dict[str | None, Path] = field(default_factory=dict)
    started: set[Path] = field(default_factory=set)  # homes a box ran in
    demo: set[Path] = field(default_factory=set)  # ... a demo box

    def home(self, command: Command) -> Path:
        return self.home_named(command.home)

    def home_named(self, name: str | None) -> Path:
        """The fresh home standing for `--home name` (None: for `$BX_HOME`)."""
        if name not in self.homes:
            root = self.stack.enter_context(short_folder())
            self.homes[name] = self.stack.enter_context(box_home(root))
        return self.homes[name]

    def argv(self, command: Command) -> list[str]:
        """The command as written; its program from the checkout; `--home` mapped."""
        program = command.argv[0]
        found = REPO / program if "/" in program else None
        assert found is not None and found.exists(), (
            f"README runs `{program}`, which a new user does not have after ./install.sh"
        )
        argv = [str(found), *command.argv[1:]]
        if command.home is not None:
            argv[argv.index("--home") + 1] = str(self.home(command))
        return argv

    def env(self) -> dict[str, str]:
        return {**os.environ, "BX_HOME": str(self.home_named(None)), "COLUMNS": "200"}

    def run(self, command: Command) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(command),
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            env=self.env(),
            cwd=REPO,
        )

    def terminal(self, command: Command) -> Terminal:
        return Terminal(self.argv(command), env=self.env(), cwd=REPO)


# -- what the README says each command does ------------------------------------------------------


def check_audit_verify(user: NewUser, command: Command) -> None:
    """It checks the hash chain, "checked against what you saw" once a box has run."""
    home = user.home(command)
    result = user.run(command)
    assert result.returncode == 0, result.stderr
    records = len(ledger_lines(home)) if (home / "audit" / "ledger.jsonl").exists() else 0
    assert result.stdout.startswith(f"ok: {records} records"), result.stdout
    if home in user.started:  # "checked against what you saw": gatewayd's witness
        witnessed = json.loads((home / "witness" / "gatewayd.json").read_text())["seq"]
        assert f"including the head the owner saw (seq {witnessed})" in result.stdout


def check_audit_tail(user: NewUser, command: Command) -> None:
    """It shows "the newest ledger records": the last twenty, oldest first."""
    home = user.home(command)
    result = user.run(command)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:3] == ["SEQ", "AT", "KIND"]
    records = [json.loads(line) for line in ledger_lines(home)]
    assert [int(row.split()[0]) for row in rows] == [r["seq"] for r in records[-20:]]
    if home in user.demo:
        assert any("no_grant" in row for row in rows) and any(" verdict " in r for r in rows)


def check_status(user: NewUser, command: Command) -> None:
    """It shows "the four services, their pids, memory and restarts"."""
    home = user.home(command)
    result = user.run(command)
    assert result.returncode == 0, result.stderr
    status = json.loads(bxctl(home, "status", "--json").stdout)
    lines = result.stdout.splitlines()
    header = next(
        i for i, line in enumerate(lines) if line.split()[:3] == ["SERVICE", "STATE", "PID"]
    )
    rows = [line.split() for line in lines[header + 1 : header + 1 + len(SERVICES)]]
    for row, service in zip(rows, status["services"], strict=True):
        assert row[:3] == [service["name"], "running", str(service["pid"])]
        assert (row[4], row[6]) == (str(service["restarts"]), "MiB")


def check_up(user: NewUser, command: Command) -> None:
    """The box starts: the four services run (with `--demo`, the scripted model's)."""
    home = user.home(command)
    result = user.run(command)
    assert result.returncode == 0, result.stderr
    started = [line.split()[0] for line in result.stdout.splitlines() if " running (pid " in line]
    assert started == list(SERVICES), result.stdout
    status = json.loads(bxctl(home, "status", "--json").stdout)
    assert [s["state"] for s in status["services"]] == ["running"] * len(SERVICES)
    # the link printed is where this box's console is (8420 may be another's: issue 27)
    links = re.findall(r"(?m)^console: (http://\S+/)#token=\S+$", result.stdout)
    assert links == [status["console"]], result.stdout
    user.started.add(home)
    if "--demo" in command.words:
        assert 'provider = "scripted"' in (home / "config.toml").read_text()
        assert (home / "workspace" / "welcome.md").exists()
        user.demo.add(home)


def check_chat(user: NewUser, command: Command) -> None:
    """A turn, on a terminal, each approval answered with the code its prompt shows, as a new
    user would; on the demo box, the demo turn: a read, a denial with its reason, and a command
    the owner approved."""
    home = user.home(command)
    with user.terminal(command) as term:
        approved = 0
        with contextlib.suppress(EOFError):
            while True:
                code = term.expect(PROMPT, timeout=60).group(1)
                term.type(f"{code}\n")
                approved += 1
        assert term.wait() == 0, term.screen.everything
    if home in user.demo:
        assert approved == 1
        in_order(
            term.screen.everything,
            f'agent│ → read_file {{"path": "{home}/workspace/welcome.md"}}\n'
            "agent│ ✓ read_file: done, ",
            'agent│ → read_file {"path": "/etc/shadow"}\n'
            "agent│ ✗ read_file denied: no grant allows this call\n",
            "approval ",
            '"command": "ls -l"',
            ": the call runs\n",
            "✓ shell: done, ",
            "That was the demo",
        )


def in_order(text: str, *parts: str) -> None:
    at = 0
    for part in parts:
        found = text.find(part, at)
        assert found >= 0, f"{part!r} not in what followed: {text[at:]!r}"
        at = found + len(part)


def check_down(user: NewUser, command: Command) -> None:
    """The box stops and nothing of it is left."""
    home = user.home(command)
    result = user.run(command)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] in ("stopped", "not running")
    assert processes_of(home) == []


CHECKS: dict[tuple[str, ...], Callable[[NewUser, Command], None]] = {
    ("audit", "verify"): check_audit_verify,
    ("audit", "tail"): check_audit_tail,
    ("status",): check_status,
    ("up",): check_up,
    ("chat",): check_chat,
    ("down",): check_down,
}


def check_of(command: Command) -> Callable[[NewUser, Command], None]:
    words = [w for w in command.words if not w.startswith("-")]
    for size in (2, 1):
        if tuple(words[:size]) in CHECKS:
            return CHECKS[tuple(words[:size])]
    pytest.fail(
        f"README's quick start runs `{command}`, which this test does not know: "
        f"teach it what the README says it does ({command.says!r})"
    )


def runnable(commands: list[Command]) -> list[Command]:
    return [c for c in commands if c.argv[0] not in NOT_RUN]


def test_the_readme_quick_start_works_as_written_on_a_fresh_home() -> None:
    commands = quick_start(README.read_text())
    assert str(commands[0]) == "./install.sh", "the quick start begins with the install step"
    assert ".venv/bin/pytest" in [c.argv[0] for c in commands], "the quick start has no test line"
    with contextlib.ExitStack() as stack:
        user = NewUser(stack)
        for command in runnable(commands):
            check_of(command)(user, command)


def test_the_readme_quick_start_shows_a_new_user_the_box_at_work() -> None:
    """SPEC §14: `bxctl up --demo` is there so a new user sees a whole turn with nothing else
    installed; the quick start must lead there, and stop the box after."""
    verbs = [c.words[0] for c in runnable(quick_start(README.read_text())) if c.words]
    assert "up" in verbs, f"the quick start never starts the box: {verbs}"
    up = verbs.index("up")
    assert "chat" in verbs[up:], f"the quick start never talks to the agent: {verbs}"
    assert "down" in verbs[verbs.index("chat", up) :], f"nor stops the box after: {verbs}"
