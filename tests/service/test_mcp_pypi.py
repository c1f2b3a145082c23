"""A real Python MCP server configured as its README says (issue 27): `bxctl mcp add time --
uvx mcp-server-time --local-timezone=Etc/UTC` installs it with pip (wheels only) into a
virtual environment of its own, and a real brokerd starts that environment's program in its
sandbox, lists its tools and runs a granted call. No uv is needed: uvx is not run."""

from __future__ import annotations

import json
from pathlib import Path

from bxcore.config import load_config
from bxcore.home import Home
from bxcore.messages import Done
from tests.support.brokerd import args, call
from tests.support.cli import bxctl
from tests.support.daemons import init_home, running
from tests.support.mcp import grant, trust


def test_a_uvx_server_added_with_bxctl_runs_in_its_sandbox(short_tmp: Path) -> None:
    home = init_home(short_tmp / "h")
    command = ["uvx", "mcp-server-time", "--local-timezone=Etc/UTC"]
    added = bxctl(home, "mcp", "add", "time", "--", *command, timeout=600)
    assert added.returncode == 0, added.stderr
    (server,) = load_config(home / "config.toml").mcp
    program = Home(home).mcp_venv("time") / "bin" / "mcp-server-time"
    assert server.command == (str(program), "--local-timezone=Etc/UTC")
    assert (server.paths, server.ro_paths) == ((), ())  # brokerd binds the environment
    grant(home, "time", "mcp__time__get_current_time", kind="source", untrusted=False)
    with running("brokerd", home) as brokerd:
        trust(home, "time")
        now = call(brokerd, "s1", "c1", "mcp__time__get_current_time", args(timezone="Etc/UTC"))
    assert isinstance(now, Done) and now.ok, now
    assert json.loads(now.output)["timezone"] == "Etc/UTC"
