"""`bxctl init` (SPEC §2.2, §5.6): the home folder, keys, a commented config and starter grants.

Idempotent, and it never overwrites anything the owner has: each file is written only where
none exists, and the starter grants only into a grants folder that has no grant yet. What it
creates is the owner's alone: folders 0700, files 0600 (public keys aside); it never changes
the mode or owner of what exists (deploy/install.sh sets its own afterwards). Run as root, it
gives a new `workspace/` to the user tools run as (`[sandbox] user`), so the starter grants work.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from pathlib import Path

from bxcore import curve
from bxcore.config.file import ConfigError, load_config
from bxcore.config.written import COMMENTED_CONFIG, toml_value
from bxcore.console_link import TokenError, ensure_token
from bxcore.errors import one_line
from bxcore.home.layout import Home, HomeError

FOLDER_MODE = 0o700  # the home and every folder bxctl makes in it
FILE_MODE = 0o600  # every file bxctl writes in it (a public key is public: 0644)


def starter_set(home: Home, folder: Path | None = None) -> dict[str, str]:
    """The starter grants (§5.6), by id: small, safe, and each explained; over `folder` (the
    home's `workspace/` unless the owner chose another)."""
    workspace = toml_value(str(folder or home.workspace))
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


def write_new(path: Path, text: str, mode: int = FILE_MODE) -> bool:
    """Write `text` to `path` at `mode` (whatever the umask) only if nothing is there; True
    when written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(file.fileno(), mode)
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    return True


def make_folder(folder: Path) -> bool:
    """Create `folder` 0700 (whatever the umask) if it is missing; True when it was. Missing
    parents are made as `mkdir -p` makes them: the home's own parents are not the home's."""
    if folder.exists():
        return False
    folder.mkdir(mode=FOLDER_MODE, parents=True)
    os.chmod(folder, FOLDER_MODE)
    return True


def tool_user_ids(configured: str) -> tuple[int, int]:
    """The uid and gid of `[sandbox] user` (a name, or a uid), as brokerd run as root will run
    tools; HomeError when there is no such user or it is root."""
    try:
        entry = pwd.getpwuid(int(configured)) if configured.isdigit() else pwd.getpwnam(configured)
        uid, gid = entry.pw_uid, entry.pw_gid
    except KeyError:
        if not configured.isdigit():
            raise HomeError(f"[sandbox] user: no user {configured!r} on this machine") from None
        uid = gid = int(configured)  # a uid with no name: its own number as its group
    if uid == 0 or gid == 0:
        raise HomeError("[sandbox] user: tools never run as root or in root's group")
    return uid, gid


def _workspace_owner(home: Home) -> tuple[int, int] | None:
    """Who a new workspace must belong to: None unless bxctl runs as root (then tools run as
    `[sandbox] user`, never as root, and must be able to write their workspace) and the
    workspace is still to be made (so a home made before reads no config here)."""
    if os.geteuid() != 0 or home.workspace.exists():
        return None
    try:
        configured = load_config(home.config).sandbox.user
    except ConfigError as error:
        raise HomeError(f"{error} (run as root, init reads [sandbox] user)") from None
    return tool_user_ids(configured)


def init_home(
    home: Home,
    *,
    starter_grants: bool = True,
    config: str = COMMENTED_CONFIG,
    grants: Mapping[str, str] | None = None,
    workspace: Path | None = None,
) -> list[str]:
    """Create what is missing; return what was created, one line each (empty: all was there).
    `config` is the config file's text, `grants` the grants (by id; the starter set unless
    given) and `workspace` the agent's folder, when the guided init chose them. Grants go only
    into an empty grants folder, and none without `starter_grants` (a restored home's grants
    are the archive's, none included). HomeError (one line, nothing created) when run as root
    with no usable `[sandbox] user`."""
    workspace_owner = _workspace_owner(home)
    made: list[str] = []
    try:
        for folder in (
            home.root,
            home.grants,
            home.audit,
            home.sessions,
            home.memory_db.parent,
            home.keys,
            home.logs,
            home.workspace,
            *([] if workspace is None else [workspace]),
        ):
            if make_folder(folder):
                made.append(f"folder {folder}")
                if folder in (home.workspace, workspace) and workspace_owner is not None:
                    os.chown(folder, *workspace_owner)
    except OSError as error:
        raise HomeError(f"cannot create the home folder: {one_line(error)}") from None
    home.ensure_run()
    for party in curve.PARTIES:
        if curve.generate(home.keys, party):
            made.append(f"key pair {home.keys / party}.key")
    try:
        if ensure_token(home.console_token):
            made.append(f"console token {home.console_token}")
    except TokenError as error:
        raise HomeError(str(error)) from None
    if write_new(home.config, config):
        made.append(f"config {home.config}")
    if starter_grants and not any(home.grants.glob("*.toml")):
        for grant_id, text in (starter_set(home) if grants is None else grants).items():
            if write_new(home.grant(grant_id), text):
                made.append(f"grant {grant_id}")
    return made
