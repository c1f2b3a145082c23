"""`bxctl up --demo` (SPEC §14): a box that shows a whole turn with nothing else installed.

The demo home runs the bundled `scripted` model, which plays one turn: it reads a file of the
demo workspace (allowed), tries to read a file no grant names (denied, with the reason), and
asks to run a command there (the starter `shell` grant asks the owner). A demo lives in a
home of its own: a home with the owner's own config.toml is never turned into one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bxcore.config.written import toml_value
from bxcore.home.layout import Home
from bxctl.init import init_home, make_folder, write_new
from bxctl.output import fail

WELCOME = """# Welcome to the boxmaker demo

This file lives in the demo workspace. The agent may read and write here (the starter
grants `workspace-read` and `workspace-write` allow it) and may run commands here, each one
approved by you first (`workspace-shell` asks).

Everything it tries is decided by brokerd and written to the ledger before it runs:
`bxctl audit tail` shows it, `bxctl explain` says why.
"""

TODO = """- try `bxctl audit tail`
- try `bxctl explain --session demo read_file '{"path":"/etc/shadow"}'`
- point [model] at a real model server in config.toml of a home of your own
"""


def script_path(home: Home) -> Path:
    return home.root / "demo" / "script.json"


def demo_script(home: Home) -> list[dict[str, object]]:
    """The scripted model's answers, in order: one turn with a read, a denial, an approval."""
    workspace = str(home.workspace)
    return [
        {
            "text": "Let me look at the workspace first.",
            "tool_calls": [
                {"name": "read_file", "arguments": json.dumps({"path": f"{workspace}/welcome.md"})}
            ],
        },
        {
            "text": "Now a file outside the workspace, which no grant names.",
            "tool_calls": [{"name": "read_file", "arguments": json.dumps({"path": "/etc/shadow"})}],
        },
        {
            "text": "That was refused, as it should be. Listing the workspace needs your approval:",
            "tool_calls": [
                {"name": "shell", "arguments": json.dumps({"command": "ls -l", "cwd": workspace})}
            ],
        },
        {
            "text": (
                "That was the demo: a file read that a grant allows, a read no grant allows "
                "(denied, with the reason), and a command you decided on. Every step is in the "
                "ledger: try `bxctl audit tail`. (The scripted model plays this one turn; "
                "`bxctl restart loopd` plays it again.)"
            )
        },
    ]


def prepare(home: Home) -> None:
    """Make `home` a demo home, or check that it is one; a one-line refusal otherwise."""
    script = script_path(home)
    if home.config.exists() and not script.exists():
        fail(
            f"{home.root} has its own config.toml; run the demo in a home of its own: "
            "bxctl --home DIR up --demo"
        )
    if script.exists():
        return
    init_home(home)
    make_folder(script.parent)
    write_new(script, json.dumps(demo_script(home), indent=2) + "\n")
    workspace = os.stat(home.workspace)
    for name, text in (("welcome.md", WELCOME), ("todo.md", TODO)):
        target = home.workspace / name
        if write_new(target, text) and os.geteuid() == 0:  # tools run as the workspace's user
            os.chown(target, workspace.st_uid, workspace.st_gid)
    home.config.write_text(
        "# The boxmaker demo: the bundled scripted model plays one turn.\n"
        "# For a real model, use a home of your own (bxctl --home DIR init).\n\n"
        "[model]\n"
        'provider = "scripted"\n'
        f"script = {toml_value(str(script))}\n",
        encoding="utf-8",
    )
