"""A real npm MCP server configured as its README says (issue 27): `bxctl mcp add fs -- npx -y
@modelcontextprotocol/server-filesystem DIR` installs it with the machine's npm (install.sh
warms npm's cache with it), writes the entry that runs its bin with node, and a real brokerd
starts it in its sandbox, lists its tools and runs a granted read of a file in DIR.

Skipped only where npm is not installed (install.sh installs it)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bxcore.config.file import load_config
from bxcore.home.layout import Home
from bxcore.wire.messages import Done
from bxctl import mcp_pins
from tests.support.brokerd import args, call
from tests.support.cli import bxctl
from tests.support.daemons import init_home, running, tool_owned
from tests.support.mcp import grant, reachable, trust

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="npm is not installed")

FS = "@modelcontextprotocol/server-filesystem"


def test_an_npx_server_added_with_bxctl_runs_in_its_sandbox(short_tmp: Path) -> None:
    data = short_tmp / "notes"
    data.mkdir()
    (data / "todo.md").write_text("water the plants\n")
    reachable(data)
    tool_owned(data)
    home = init_home(short_tmp / "h")
    added = bxctl(home, "mcp", "add", "fs", "--", "npx", "-y", FS, str(data), timeout=300)
    assert added.returncode == 0, added.stderr
    (server,) = load_config(home / "config.toml").mcp
    installed = Home(home).mcp_npm("fs") / "node_modules"
    node = os.path.realpath(shutil.which("node") or "node")
    assert server.command == (node, str(installed / FS / "dist" / "index.js"), str(data))
    assert (server.paths, server.ro_paths) == ((str(data),), (str(installed),))
    grant(home, "fs-read", "mcp__fs__read_text_file", kind="source", class_="private")
    with running("brokerd", home) as brokerd:
        trust(home, "fs")
        tools = {tool.name for tool in mcp_pins.listing(Home(home), "fs")}
        assert {"read_text_file", "list_directory", "write_file"} <= tools
        read = call(
            brokerd, "s1", "c1", "mcp__fs__read_text_file", args(path=str(data / "todo.md"))
        )
    assert isinstance(read, Done) and read.ok, read
    assert read.output == "water the plants\n"


def test_no_script_of_a_packages_git_dependency_runs_at_its_install(short_tmp: Path) -> None:
    """A hostile registry package whose dependency is a git repository with `install` and
    `prepare` scripts (npm prepares a git dependency with an `npm install` of its own): with
    the owner's npm pointed at that registry, `bxctl mcp add` runs neither, outside any
    sandbox, as the owner."""
    from tests.fakes.npm_registry import PACKAGE, serve

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    home = init_home(short_tmp / "h")
    with serve(short_tmp) as registry:
        env = {**os.environ, "npm_config_registry": registry}
        env["npm_config_cache"] = str(short_tmp / "npm-cache")
        added = bxctl(home, "mcp", "add", "evil", "--", "npx", "-y", PACKAGE, env=env)
    assert added.returncode == 0, added.stderr
    assert (Home(home).mcp_npm("evil") / "node_modules" / "gitdep" / "package.json").exists()
    assert not (short_tmp / "ran").exists()
