"""What about the home is less safe than it should be, as one-line warnings (issue 9), for
`bxctl status` and `bxctl grant check`: each a plain string, printed as it is.

Grants that cover boxmaker's own files, or that disagree on a folder's label, are warned of
(`grant_warnings`, by brokerd's own pure check); and so is a sandbox that bounds memory per
process only, as brokerd reported at its start (`sandbox_warnings`).

The home and its folders should be 0700 and its files 0600 (`bxctl init` makes them so). A path
is too open when every user may use it ("other" bits), or the owner's own login group may
(group bits, when its group is that of the user running bxctl): a group given on purpose, as
deploy/install.sh gives its dedicated groups, is a choice, not a leak. `too_open` is pure;
`home_warnings` only stats (it never changes anything, and skips what it cannot see).
"""

from __future__ import annotations

import grp
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bxcore.config.file import Config, ConfigError, load_config
from bxcore.home import report
from bxcore.home.layout import Home
from services.brokerd.core.view import grant_warnings as check_grants
from services.brokerd.face import own_places, read_folder


def too_open(path: Path, mode: int, login_group: str | None) -> str | None:
    """One line when `path` (of `mode`) lets anyone but its owner in, else None.
    `login_group`: the name of the path's group when that group is the login group of the
    user running bxctl (its bits count), None when it is another (given on purpose)."""
    others = mode & 0o007
    group = (mode & 0o070) >> 3 if login_group is not None else 0
    if not others and not group:
        return None
    who = " and ".join(
        part
        for part in (f"group {login_group}" if group else "", "every user" if others else "")
        if part
    )
    what = _verbs(others | group, stat.S_ISDIR(mode))
    fix = ("g" if group else "") + ("o" if others else "")
    return f"{path} is open to {who} (mode {stat.S_IMODE(mode):o}: {what}); chmod {fix}-rwx {path}"


def _verbs(bits: int, folder: bool) -> str:
    verbs = [
        ("list" if folder else "read") if bits & 0o4 else "",
        ("add and remove files" if folder else "change") if bits & 0o2 else "",
        ("enter" if folder else "run") if bits & 0o1 else "",
    ]
    return ", ".join(verb for verb in verbs if verb)


def checked_paths(home: Home) -> Iterator[Path]:
    """The home's own paths whose mode matters, outermost first: every folder, the owner's
    files (config, grants, secret keys, witness) and the services' (ledger, notes, logs).
    Public keys are public; the files inside `state/` and `sessions/` are covered by their
    folder (0700 stops everyone before them), and may be many."""
    yield home.root
    yield home.config
    yield home.grants
    yield from _files(home.grants, "*.toml")
    yield home.keys
    yield from _files(home.keys, "*.key_secret")
    yield home.workspace
    yield home.state_broker.parent
    yield home.state_broker
    yield home.audit
    yield home.ledger
    yield home.sessions
    yield home.memory_db.parent
    yield from _files(home.memory_db.parent, "memory.sqlite3*")
    yield home.witness("bxctl").parent
    yield from _files(home.witness("bxctl").parent, "*.json")
    yield home.logs
    yield from _files(home.logs, "*.log*")
    yield home.run_dir


def _files(folder: Path, pattern: str) -> list[Path]:
    try:
        return sorted(folder.glob(pattern))
    except OSError:
        return []


def home_warnings(home: Home) -> list[str]:
    """Every path of the home open to more than its owner, one line each (none: all is
    well), judged for the user running bxctl."""
    login_gid = os.getgid()
    found: list[str] = []
    for path in checked_paths(home):
        try:
            info = os.stat(path)  # a link is judged by what it leads to: `run` may be one
        except OSError:
            continue  # missing, or not ours to see
        login_group = _group_name(info.st_gid) if info.st_gid == login_gid else None
        line = too_open(path, info.st_mode, login_group)
        if line is not None:
            found.append(line)
    return found


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def grant_warnings(home: Home) -> list[str]:
    """The valid grants' warnings (`services.brokerd.core.view.grant_warnings`)."""
    try:
        config = load_config(home.config)
    except ConfigError:
        config = Config()
    return check_grants(read_folder(home.grants).valid, own_places(home, config))


def sandbox_report(home: Home) -> dict[str, Any] | None:
    """What brokerd said at its start about how tools are confined; None if it did not."""
    found = report.read(home).get("sandbox")
    return found if isinstance(found, dict) else None


def sandbox_warnings(report: dict[str, Any] | None) -> list[str]:
    if report is None or report.get("mode") != "bwrap":
        return []
    if report.get("problem"):
        return [f"no sandbox can start, so every tool call fails: {report['problem']}"]
    if not report.get("memory"):
        why = report.get("memory_why") or "no cgroup can be had"
        return [
            f"a shell call's memory is bounded per process only ({why}): its tmpfs and its "
            "processes together are not (docs/sandbox.md)"
        ]
    return []


def box_warnings(home: Home) -> list[str]:
    """Everything `bxctl status` warns of."""
    return [
        *home_warnings(home),
        *grant_warnings(home),
        *sandbox_warnings(sandbox_report(home)),
    ]
