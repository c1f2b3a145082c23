"""A read-only shell grant through the real box (issue 15): brokerd binds the folder
read-only in a real bwrap sandbox, so the command reads it and every write fails, while its
private /tmp stays writable; `bxctl explain` says how the folder is bound."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bxcore.wire.messages import Done
from tests.support.brokerd import args, call
from tests.support.cli import bxctl
from tests.support.daemons import Daemon, init_home, running, tool_owned


@pytest.fixture
def box(short_tmp: Path) -> Iterator[tuple[Path, Path, Daemon]]:
    """A home whose only shell grant, `notes-sh`, binds `notes` read-only; brokerd up."""
    home = init_home(short_tmp / "h")
    for starter in (home / "grants").glob("workspace-*.toml"):
        starter.unlink()
    notes = short_tmp / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("buy milk\n")
    tool_owned(notes)
    added = bxctl(
        home, "grant", "add", "notes-sh", "--tool", "shell", "--path", str(notes), "--read-only"
    )
    assert added.returncode == 0, added.stderr
    with running("brokerd", home) as brokerd:
        yield home, notes, brokerd


def test_a_read_only_shell_reads_its_folder_and_cannot_write_it(box) -> None:
    _, notes, brokerd = box
    command = (
        "cat todo.md; echo gone > todo.md; touch new.md; mkdir sub; rm todo.md; "
        "echo scratch > /tmp/s && cat /tmp/s"
    )
    outcome = call(brokerd, "s1", "c1", "shell", args(command=command, cwd=str(notes)))
    assert isinstance(outcome, Done) and outcome.ok, outcome
    lines = outcome.output.splitlines()
    assert lines[0] == "buy milk"
    assert sum("Read-only file system" in line for line in lines) == 4, outcome.output
    assert lines[-2:] == ["scratch", "[exit status 0]"]
    assert sorted(p.name for p in notes.iterdir()) == ["todo.md"]
    assert (notes / "todo.md").read_text() == "buy milk\n"


def test_explain_says_the_folder_is_bound_read_only(box) -> None:
    home, notes, _ = box
    arguments = json.dumps({"command": "ls", "cwd": str(notes)})
    result = bxctl(home, "explain", "--session", "s2", "shell", arguments, "--json")
    assert result.returncode == 0, result.stderr
    explained = json.loads(result.stdout)
    assert explained["verdict"] == "allowed" and explained["winner"] == "notes-sh"
    assert f"{notes} is bound read-only in the sandbox (write = false)" in explained["steps"]
