"""The supervisor's word on each service's state, beside the wire: `{run}/services.json`, one
JSON object rewritten whole (by rename) whenever a state changes, and removed when the
supervisor ends. Only the supervisor writes it; brokerd reads it to answer a memory call at
once while memoryd is failed or stopped, rather than wait out its retries (issue 10). A hint
for the error path, never an input to a decision: a missing or unreadable file means "ask".
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bxcore.home.atomic import write_atomically

NAME = "services.json"
#: The states in which a service stays down until the owner acts (SPEC §13).
DOWN = frozenset({"failed", "stopped"})


@dataclass(frozen=True)
class Entry:
    state: str
    last_exit: str | None = None


@dataclass(frozen=True)
class Snapshot:
    """What the file says: who wrote it, and each service's state."""

    supervisor: int
    services: Mapping[str, Entry] = field(default_factory=dict)

    def json(self) -> dict[str, Any]:
        return {
            "supervisor": self.supervisor,
            "services": {
                name: {"state": e.state, "last_exit": e.last_exit}
                for name, e in sorted(self.services.items())
            },
        }

    def down(self, service: str) -> Entry | None:
        """`service`'s entry when it stays down until the owner acts; else None."""
        entry = self.services.get(service)
        return entry if entry is not None and entry.state in DOWN else None


def parse(data: bytes) -> Snapshot | None:
    """The snapshot in `data`; None when it is not one. Pure."""
    try:
        raw = json.loads(data)
        supervisor = raw["supervisor"]
        if not isinstance(supervisor, int) or isinstance(supervisor, bool) or supervisor <= 0:
            return None
        services = {}
        for name, item in raw["services"].items():
            state, last_exit = item["state"], item.get("last_exit")
            if not isinstance(state, str) or not isinstance(last_exit, str | None):
                return None
            services[str(name)] = Entry(state, last_exit)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return Snapshot(supervisor, services)


def path_in(run: Path) -> Path:
    return run / NAME


def write(run: Path, snapshot: Snapshot) -> None:
    """Replace the file with `snapshot`; a file that cannot be written changes nothing."""
    data = json.dumps(snapshot.json(), sort_keys=True).encode() + b"\n"
    with contextlib.suppress(OSError):
        write_atomically(path_in(run), data, durable=False)


def remove(run: Path, supervisor: int) -> None:
    """Remove the file if `supervisor` wrote it (a newer supervisor's is left alone)."""
    with contextlib.suppress(OSError):
        found = parse(path_in(run).read_bytes())
        if found is not None and found.supervisor == supervisor:
            path_in(run).unlink()


class StatesFile:
    """The reader's side: reads the file again only when it changed (its inode, size or
    mtime), so asking costs one `stat`. A file whose supervisor is gone says nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._snapshot: Snapshot | None = None

    def __repr__(self) -> str:
        return f"StatesFile({self.path}, {'read' if self._snapshot else 'nothing read'})"

    def down(self, service: str) -> Entry | None:
        """`service`'s entry when its supervisor says it stays down; else None."""
        snapshot = self._read()
        if snapshot is None:
            return None
        entry = snapshot.down(service)
        if entry is None or not _alive(snapshot.supervisor):
            return None
        return entry

    def _read(self) -> Snapshot | None:
        try:
            seen = os.stat(self.path)
        except OSError:
            self._seen = self._snapshot = None
            return None
        key = (seen.st_ino, seen.st_size, seen.st_mtime_ns)
        if key != self._seen:
            try:
                self._snapshot = parse(self.path.read_bytes())
            except OSError:
                self._snapshot = None
            self._seen = key
        return self._snapshot


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: it exists
        return True
    return True
