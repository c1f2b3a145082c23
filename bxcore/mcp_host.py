"""How an `[[mcp]]` entry meets this machine (issue 27), for brokerd at start and for `bxctl mcp
add`: where a bare program name is found (brokerd's PATH, then the box's own virtual
environment), and which of its `paths` and `ro_paths` its sandbox user cannot use, each a
warning (in brokerd's log, `bxctl status` and `bxctl mcp list`), never a refusal: the owner
may know better, and a folder may appear.

`warnings` is pure: it judges what `os.stat` said of each path (`look` does the I/O), for the
user the server runs as (`Sandboxed`): `[sandbox] user` when brokerd is root, else brokerd's.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass

from bxcore.config.mcp import McpServer


def search_path(path: str | None) -> str:
    """Where a bare program name is looked for: brokerd's PATH, then the folder brokerd's own
    interpreter is in (the box's virtual environment, where `pip install mcp-server-git` put
    the server, even when that environment is not activated)."""
    own = os.path.dirname(sys.executable)
    folders = [folder for folder in (path or os.defpath).split(os.pathsep) if folder]
    return os.pathsep.join(folders if own in folders or not own else [*folders, own])


def resolve_program(argv0: str, path: str | None) -> str | None:
    """argv[0] as the host finds it (absolute, or on `search_path`), or None."""
    if argv0.startswith("/"):
        return argv0 if os.access(argv0, os.X_OK) and os.path.isfile(argv0) else None
    return shutil.which(argv0, path=search_path(path))


def not_found(argv0: str, path: str | None) -> str:
    """Why `resolve_program` found nothing, naming where it looked."""
    if argv0.startswith("/"):
        return f"{argv0!r} is not an executable program here"
    return f"{argv0!r} is not an executable program in any of {search_path(path)}"


@dataclass(frozen=True, slots=True)
class Sandboxed:
    """The user a server runs as: its uid and groups, and a name to show."""

    uid: int
    groups: frozenset[int]
    name: str

    @classmethod
    def of_brokerd(cls, drop_to: tuple[int, int] | None) -> Sandboxed:
        """`drop_to` (brokerd is root: the tool user, no other group), else brokerd's own."""
        if drop_to is not None:
            uid, gid = drop_to
            return cls(uid, frozenset({gid}), _user_name(uid))
        uid = os.geteuid()
        return cls(uid, frozenset({os.getegid(), *os.getgroups()}), _user_name(uid))


def _user_name(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


Look = Callable[[str], "os.stat_result | OSError"]


def look(path: str) -> os.stat_result | OSError:
    """`os.stat` of `path`, or why it failed."""
    try:
        return os.stat(path)
    except OSError as error:
        return error


def _allowed(found: os.stat_result, user: Sandboxed, bits: int) -> bool:
    """Whether the mode's owner, group or other bits (whichever apply to `user`) hold `bits`
    (r=4, w=2, x=1): the sandbox keeps no capability, so root is no exception."""
    mode = found.st_mode
    if found.st_uid == user.uid:
        held = (mode >> 6) & 7
    elif found.st_gid in user.groups:
        held = (mode >> 3) & 7
    else:
        held = mode & 7
    return held & bits == bits


def _one(path: str, found: os.stat_result | OSError, user: Sandboxed, *, write: bool) -> str | None:
    if isinstance(found, FileNotFoundError):
        return f"{path} does not exist: nothing is bound there"
    if isinstance(found, OSError):
        return f"{path} cannot be looked at: {found.strerror or found}"
    folder = stat.S_ISDIR(found.st_mode)
    need = 4 | (2 if write else 0) | (1 if folder else 0)
    if not _allowed(found, user, need):
        wants = "read and write" if write else "read"
        return f"{path} is not one {user.name} may {wants} ({stat.filemode(found.st_mode)})"
    if write and found.st_uid != user.uid:
        return (
            f"{path} is owned by uid {found.st_uid}, not by {user.name}, whom the server runs "
            "as: some servers refuse it (git: 'dubious ownership')"
        )
    return None


def warnings(server: McpServer, user: Sandboxed, look: Look = look) -> list[str]:
    """What of `server`'s paths its sandbox user cannot use, one line each."""
    found: list[str] = []
    for key, paths, write in (("paths", server.paths, True), ("ro_paths", server.ro_paths, False)):
        for path in paths:
            line = _one(path, look(path), user, write=write)
            if line is not None:
                found.append(f"{key}: {line}")
    return found
