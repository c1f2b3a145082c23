"""MCP servers that do not start, through a real brokerd (issue 27): each says why — its exit
and the end of its standard error, a start that took longer than its `start_s`, a program
found nowhere, naming where it was looked for — in brokerd's report (`bxctl mcp list`,
`bxctl status`), its log and `bxctl mcp trust` (never a listing an older brokerd left); never
"Connection closed". A bare name found
only in the box's own virtual environment starts; a path its sandbox user cannot use is
warned of."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bxcore.home import report
from bxcore.home.layout import Home
from bxcore.mcp_tools import ToolDef
from tests.support.cli import bxctl
from tests.support.daemons import init_home, running
from tests.support.mcp import entry, wait_listed

BOOM = "import sys; sys.stderr.write('Error: cannot open the mailbox /home/me/Mail'); sys.exit(4)"
SLOW = "import time; time.sleep(60)"
TOOL = ToolDef("read_inbox", "Reads the inbox.", {"type": "object"})


def servers(root: Path) -> str:
    return (
        entry("boom", [sys.executable, "-c", BOOM])
        + entry("slow", [sys.executable, "-c", SLOW], start_s=1)
        + entry("nope", ["mcp-server-nowhere"])
        + entry("time", ["mcp-server-time"], ro_paths=[str(root / "missing")])
    )


def problems(home: Path, names: set[str], timeout: float = 30.0) -> dict[str, Any]:
    """brokerd's report of its servers, once each of `names` has a problem."""
    deadline = time.monotonic() + timeout
    while True:
        found = report.read(Home(home)).get("mcp") or {}
        if all((found.get(name) or {}).get("problem") for name in names):
            return found
        assert time.monotonic() < deadline, f"no problem reported for all of {names}: {found}"
        time.sleep(0.1)


def test_a_server_that_cannot_start_says_why_everywhere_the_owner_looks(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h", servers(short_tmp))
    stale = Home(home).run / "mcp-boom.json"  # what a brokerd before listed: not shown as now
    stale.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    stale.write_text(json.dumps({"server": "boom", "tools": [TOOL.definition()]}))
    with running("brokerd", home, env={"PATH": "/usr/bin:/bin"}) as brokerd:
        found = problems(home, {"boom", "slow", "nope"})
        wait_listed(home, "time")  # only in the box's own environment, not on brokerd's PATH
        listed = bxctl(home, "mcp", "list")
        trusted = bxctl(home, "mcp", "trust", "boom", "--yes")
        log = brokerd.output()
    boom = found["boom"]["problem"]
    assert boom.startswith("exited with code 4 (the server closed its output); its standard")
    assert boom.endswith("error ends: Error: cannot open the mailbox /home/me/Mail")
    assert found["slow"]["problem"] == (
        "no answer to initialize and tools/list within 1 s (its start_s)"
    )
    assert found["nope"]["problem"] == (
        f"'mcp-server-nowhere' is not an executable program in any of "
        f"/usr/bin:/bin:{Path(sys.executable).parent}"
    )
    assert found["time"]["problem"] is None
    assert found["time"]["warnings"] == [
        f"ro_paths: {short_tmp / 'missing'} does not exist: nothing is bound there"
    ]
    assert f"MCP server boom did not start: {boom}" in log
    assert f"MCP server time ro_paths: {short_tmp / 'missing'} does not exist" in log
    assert "Connection closed" not in log + listed.stdout
    assert "cannot open the mailbox /home/me/Mail" in " ".join(listed.stdout.split())
    assert all(len(line) <= 100 for line in listed.stdout.splitlines())
    assert trusted.returncode == 1 and not stale.exists()
    assert trusted.stderr.startswith(f"bxctl: brokerd could not start boom: {boom}")


def test_a_server_whose_paths_would_show_the_box_itself_is_not_started(short_tmp: Path) -> None:
    """`paths = ["/home/me"]` (what `bxctl mcp add` binds for a README's `… /home/me`) holds
    the home: the server could write a grant, read the owner's key or speak on a socket. It
    is not started, saying so; the workspace, and the installation read-only, are fine."""
    from tests.support.mcp import FAKES, fake

    home = short_tmp / "h"
    work = home / "workspace" / "notes"
    config = (
        entry("wide", [sys.executable, "-c", BOOM], paths=[str(short_tmp)])
        + entry("keys", [sys.executable, "-c", BOOM], ro_paths=[str(home / "keys")])
        + entry("link", [sys.executable, "-c", BOOM], paths=[str(short_tmp / "to-home")])
        + fake("fine", "memory", paths=[str(work)])
    )
    home = init_home(home, config)
    work.mkdir(parents=True)
    (short_tmp / "to-home").symlink_to(home)
    assert str(FAKES) in (home / "config.toml").read_text()  # the installation, read-only
    with running("brokerd", home):
        found = problems(home, {"wide", "keys", "link"})
        wait_listed(home, "fine")
    assert found["wide"]["problem"] == (
        f"its path {short_tmp} would show boxmaker's own {home}, which no tool may reach: "
        "name a folder outside it, or in the workspace"
    )
    assert found["keys"]["problem"].startswith(f"its path {home / 'keys'} would show ")
    assert found["link"]["problem"].startswith(f"its path {short_tmp / 'to-home'} would show ")
    assert found["fine"]["problem"] is None
