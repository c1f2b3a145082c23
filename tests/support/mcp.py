"""Helpers for the MCP tests (SPEC §18): `[[mcp]]` entries for the fakes and the real servers,
the owner trusting a server, and waiting for brokerd to list one."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from bxcore.home.layout import Home
from bxctl import mcp_pins

FAKES = Path(__file__).resolve().parents[1] / "fakes"
SERVERS = FAKES / "mcp_servers.py"
VENV_BIN = Path(sys.executable).parent


def entry(name: str, command: list[str], **more: object) -> str:
    """One `[[mcp]]` table."""
    lines = ["[[mcp]]", f"name = {json.dumps(name)}", f"command = {json.dumps(command)}"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in more.items()]
    return "\n".join(lines) + "\n"


def fake(name: str, kind: str, folder: Path | None = None, **more: object) -> str:
    """A fake server of `tests/fakes/mcp_servers.py`, its folder bound read-write."""
    command = [sys.executable, str(SERVERS), kind]
    ro = [str(FAKES)]
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        reachable(folder)
        command.append(str(folder))
        more.setdefault("paths", [str(folder)])
    return entry(name, command, ro_paths=ro, **more)


def reachable(folder: Path) -> None:
    """A folder the tool user can use when the tests run as root (a root brokerd runs each
    server as `[sandbox] user`), and every folder above it that it can pass through."""
    if os.geteuid() != 0:
        return
    folder.chmod(0o777)
    for parent in folder.parents:
        if str(parent) in ("/", "/tmp"):
            break
        parent.chmod(parent.stat().st_mode | 0o055)


def wait_listed(home: Path, name: str, timeout: float = 20.0) -> None:
    """Until brokerd has listed server `name` (at its start, §18.3)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            mcp_pins.listing(Home(home), name)
            return
        except mcp_pins.NotListed:
            if time.monotonic() > deadline:
                log = Home(home).mcp_log(name)
                said = log.read_text()[-2000:] if log.exists() else "(no log)"
                raise AssertionError(f"brokerd never listed {name}: {said}") from None
            time.sleep(0.05)


def trust(home: Path, name: str) -> None:
    """What `bxctl mcp trust NAME --yes` does: pin what brokerd listed."""
    wait_listed(home, name)
    paths = Home(home)
    mcp_pins.trust(paths, name, mcp_pins.listing(paths, name))


def grant(home: Path, grant_id: str, tool: str, mode: str = "allow", **fields: object) -> None:
    lines = [f"tool = {json.dumps(tool)}", f"mode = {json.dumps(mode)}"]
    match = fields.pop("match", None)
    for key, value in fields.items():
        name = "class" if key == "class_" else key
        lines.append(f"{name} = {json.dumps(value)}")
    if isinstance(match, dict):
        lines.append("[match]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in match.items()]
    (home / "grants" / f"{grant_id}.toml").write_text("\n".join(lines) + "\n")
