"""`bxctl grant add --read-only` (issue 15): a shell grant whose folder is bound read-only,
written as `write = false`, shown by `grant list`; refused for any other tool. The starter
shell grant stays read-write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.brokerd.core.grants import Grant, parse_grant
from tests.support.cli import bxctl


@pytest.fixture
def home(short_tmp: Path) -> Path:
    home = short_tmp / "home"
    assert bxctl(home, "init").returncode == 0
    return home


def test_a_read_only_shell_grant_is_written_as_write_false_and_listed(home: Path) -> None:
    added = bxctl(
        home, "grant", "add", "notes-sh", "--tool", "shell", "--path", "/home/kyle/notes",
        "--read-only",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "added notes-sh: allow shell /home/kyle/notes (read-only)" in added.stdout
    text = (home / "grants" / "notes-sh.toml").read_text()
    assert "write = false\n" in text
    grant = parse_grant("notes-sh", text.encode())
    assert isinstance(grant, Grant) and grant.write is False
    listed = {row["id"]: row for row in json.loads(bxctl(home, "grant", "list", "--json").stdout)}
    assert listed["notes-sh"]["write"] is False
    assert listed["workspace-shell"]["write"] is True  # the starter grant, unchanged
    assert listed["workspace-read"]["write"] is None
    assert "/home/kyle/notes (read-only)" in bxctl(home, "grant", "list").stdout


@pytest.mark.parametrize("place", [["--tool", "read_file", "--path", "/a"], ["--tool", "memory"]])
def test_read_only_is_refused_for_a_tool_that_is_not_shell(home: Path, place: list[str]) -> None:
    refused = bxctl(home, "grant", "add", "x", *place, "--read-only")
    assert refused.returncode == 1
    assert "write: only a shell grant takes write" in refused.stderr
    assert not (home / "grants" / "x.toml").exists()


def test_the_starter_shell_grant_says_nothing_of_write(home: Path) -> None:
    lines = (home / "grants" / "workspace-shell.toml").read_text().splitlines()
    assert 'tool = "shell"' in lines
    assert not [line for line in lines if line.startswith("write")]
