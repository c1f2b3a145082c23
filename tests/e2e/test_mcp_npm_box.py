"""MCP servers as their READMEs configure them, through the whole box (issue 27): `bxctl mcp
add fs -- npx -y @modelcontextprotocol/server-filesystem DIR` before `bxctl up`, and the model
reads a file through it (skipped only where npm is not installed: install.sh installs it);
`bxctl mcp trust` right after `up` waits for a server slow to list, saying so; a server that
cannot start shows its own error in `bxctl status` and `bxctl mcp list`, and a path it cannot
use a warning."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_mcp_box import run_turn
from tests.fakes.model_server import Answer
from tests.support.box import wait_until
from tests.support.brokerd import args
from tests.support.cli import bxctl
from tests.support.daemons import tool_owned
from tests.support.e2e import UpBox, box_up, decisions
from tests.support.mcp import entry, fake, grant, reachable

NPM = shutil.which("npm") is not None

FS = "@modelcontextprotocol/server-filesystem"
READ = "mcp__fs__read_text_file"
BOOM = "import sys; sys.stderr.write('Error: no mailbox at /home/me/Mail'); sys.exit(4)"


def notes(home: Path) -> Path:
    return home.parent / "notes"


def with_servers(home: Path) -> None:
    folder = notes(home)
    folder.mkdir()
    (folder / "todo.md").write_text("water the plants\n")
    reachable(folder)
    tool_owned(folder)
    if NPM:
        added = bxctl(home, "mcp", "add", "fs", "--", "npx", "-y", FS, str(folder), timeout=300)
        assert added.returncode == 0, added.stderr
    with (home / "config.toml").open("a") as config:
        missing = [str(home.parent / "missing")]
        config.write("\n" + entry("boom", [sys.executable, "-c", BOOM], ro_paths=missing))
        config.write(fake("sleepy", "slow-start", start_s=30))
    grant(home, "fs-read", READ, kind="source", class_="private")


@pytest.fixture(scope="module")
def box() -> Iterator[UpBox]:
    with box_up(before_up=with_servers) as box:
        yield box


def test_trust_right_after_up_waits_for_a_server_slow_to_list(box: UpBox) -> None:
    trusted = box.bxctl("mcp", "trust", "sleepy", "--yes")  # it lists 8 s after its start
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stderr.startswith(
        "waiting for brokerd to list the tools of sleepy (at most 50 s)…\n"
    )
    assert "pinned 2 tools of sleepy in " in trusted.stdout


@pytest.mark.skipif(not NPM, reason="npm is not installed")
def test_an_npm_server_added_as_its_readme_says_is_read_through(box: UpBox) -> None:
    trusted = box.bxctl("mcp", "trust", "fs", "--yes")  # no wait before: `trust` waits itself
    assert trusted.returncode == 0, trusted.stderr
    assert "pinned 14 tools of fs in " in trusted.stdout
    read = run_turn(
        box,
        "npm-1",
        "what is on my todo list?",
        box.model.calls((READ, args(path=str(notes(box.home) / "todo.md")))),
        Answer(text="the plants"),
    )
    assert read == ["water the plants\n"]
    assert decisions(box, "npm-1") == [(READ, "allowed", None)]


def test_a_server_that_cannot_start_shows_its_own_error(box: UpBox) -> None:
    def failed() -> dict[str, object] | None:
        rows = {row["name"]: row for row in box.status().get("mcp", [])}
        return rows.get("boom") if (rows.get("boom") or {}).get("problem") else None

    row = wait_until(failed, 30, "boom's start error in `bxctl status --json`")
    assert row is not None
    problem = str(row["problem"])
    assert problem == (
        "exited with code 4 (the server closed its output); its standard error ends: "
        "Error: no mailbox at /home/me/Mail"
    )
    status = box.bxctl("status")
    listed = box.bxctl("mcp", "list")
    assert f"MCP server boom: {problem}" in status.stdout
    assert f"boom: {problem}" in " ".join(listed.stdout.split())
    warned = f"boom ro_paths: {box.home.parent / 'missing'} does not exist: nothing is bound there"
    assert f"MCP server {warned}" in status.stdout
    assert warned in " ".join(listed.stdout.split())
    assert "Connection closed" not in status.stdout + listed.stdout
    assert all(len(line) <= 100 for line in listed.stdout.splitlines())
