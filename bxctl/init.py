"""`bxctl init` (SPEC §2.2, §5.6): the home folder, keys, a commented config and starter grants.

Idempotent, and it never overwrites anything the owner has: each file is written only where
none exists, and the starter grants only into a grants folder that has no grant yet.
"""

from __future__ import annotations

import os
from pathlib import Path

from bxcore import curve
from bxcore.config import COMMENTED_CONFIG, toml_value
from bxcore.home import Home


def starter_grants(home: Home) -> dict[str, str]:
    """The starter grants (§5.6), by id: small, safe, and each explained."""
    workspace = toml_value(str(home.workspace))
    head = "# A starter grant written by `bxctl init`; edit or remove it as you like.\n"
    return {
        "memory": head
        + "# The agent may keep, recall and forget notes. A note keeps the label of the\n"
        "# session that wrote it, and recalling it raises the reader's label.\n"
        'tool = "memory"\nmode = "allow"\nnote = "notes across conversations"\n',
        "workspace-read": head
        + "# The agent may read files in its workspace; what it reads there is private.\n"
        f'tool = "read_file"\nmode = "allow"\npath = {workspace}\nclass = "private"\n'
        'note = "read files in the workspace"\n',
        "workspace-write": head
        + "# The agent may write files in its workspace (no secret may be written there).\n"
        f'tool = "write_file"\nmode = "allow"\npath = {workspace}\nclass = "private"\n'
        'note = "write files in the workspace"\n',
        "workspace-shell": head
        + "# The agent may run commands in its workspace, each approved by you first.\n"
        f'tool = "shell"\nmode = "ask"\npath = {workspace}\nclass = "private"\n'
        'note = "run commands in the workspace, with your approval"\n',
    }


def _write_new(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write `text` to `path` only if nothing is there; True when written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    return True


def init_home(home: Home) -> list[str]:
    """Create what is missing; return what was created, one line each (empty: all was there)."""
    made: list[str] = []
    for folder, mode in (
        (home.root, 0o755),
        (home.grants, 0o755),
        (home.audit, 0o700),
        (home.sessions, 0o700),
        (home.memory_db.parent, 0o700),
        (home.keys, 0o700),
        (home.logs, 0o755),
        (home.workspace, 0o755),
    ):
        if not folder.exists():
            folder.mkdir(mode=mode, parents=True)
            made.append(f"folder {folder}")
    home.ensure_run()
    for party in curve.PARTIES:
        if curve.generate(home.keys, party):
            made.append(f"key pair {home.keys / party}.key")
    if _write_new(home.config, COMMENTED_CONFIG, 0o600):
        made.append(f"config {home.config}")
    if not any(home.grants.glob("*.toml")):
        for grant_id, text in starter_grants(home).items():
            if _write_new(home.grant(grant_id), text):
                made.append(f"grant {grant_id}")
    return made
