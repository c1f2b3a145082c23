"""A real Python MCP server configured as its README says (issue 27): `bxctl mcp add time --
uvx mcp-server-time --local-timezone=Etc/UTC` installs it with pip (wheels only) into a
virtual environment of its own, and a real brokerd starts that environment's program in its
sandbox, lists its tools and runs a granted call. No uv is needed: uvx is not run."""

from __future__ import annotations

import json
from pathlib import Path

from bxcore.config.file import load_config
from bxcore.home.layout import Home
from bxcore.wire.messages import Done
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


def hostile_wheel(folder: Path, ran: Path) -> Path:
    """A wheel whose `.pth` file runs code at the start of every Python of the environment it
    is installed in (pip installs it without running it: wheels only, no build)."""
    import base64
    import hashlib
    import zipfile

    files = {
        "evilpth.py": b"def main():\n    pass\n",
        "evilpth.pth": f"import os; open({str(ran)!r}, 'w').close()\n".encode(),
        "evilpth-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: evilpth\nVersion: 1.0\n",
        "evilpth-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        "evilpth-1.0.dist-info/entry_points.txt": b"[console_scripts]\nevilpth = evilpth:main\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("evilpth-1.0.dist-info/RECORD,,")
    wheel = folder / "evilpth-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        for name, data in files.items():
            out.writestr(name, data)
        out.writestr("evilpth-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def test_a_packages_code_never_runs_outside_its_sandbox_when_it_is_added_again(
    short_tmp: Path,
) -> None:
    """A `.pth` file of the package runs at every start of its environment's Python: adding
    the server again (its entry removed, to change its arguments) must not start the Python
    of the environment the first add filled, outside any sandbox."""
    import os

    wheels = short_tmp / "wheels"
    wheels.mkdir()
    ran = short_tmp / "ran"
    hostile_wheel(wheels, ran)
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    home = init_home(short_tmp / "h")
    config = (home / "config.toml").read_bytes()
    for _ in range(2):
        added = bxctl(home, "mcp", "add", "evil", "--", "uvx", "evilpth", env=env, timeout=300)
        assert added.returncode == 0, added.stderr
        assert not ran.exists(), "the package's code ran as the owner"
        (home / "config.toml").write_bytes(config)  # the entry removed
