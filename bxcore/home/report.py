"""What a daemon tells the owner's side about itself beside the wire: `{run}/<service>.json`,
one JSON object rewritten whole whenever a part of it changes. brokerd's (`brokerd.json`):
`sandbox`, how tools are confined; `mcp`, its MCP servers; `ledger`, the ledger's state, for
tests and benches, while `bxctl status` asks brokerd for it (issue 28). gatewayd's
(`gatewayd.json`): `console`, the address and port it really serves the console on
(`bxcore.console_link.Served`). It is a report, never an input: nothing a daemon decides
depends on it. Reads and writes only that file.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home


class Report:
    """The daemon's side: the parts, and the file rewritten when one changes. A file that could not
    be written (a full disk) is removed, so that no reader takes the old one for the truth, and
    written again at the next `retry`."""

    def __init__(self, home: Home, service: str = "brokerd") -> None:
        self._path = path(home, service)
        self._parts: dict[str, Any] = {}
        self._unwritten = False

    def __repr__(self) -> str:
        state = ", unwritten" if self._unwritten else ""
        return f"Report({self._path}: {', '.join(self._parts)}{state})"

    def set(self, part: str, value: Any) -> None:
        if self._parts.get(part) == value:
            return
        self._parts[part] = value
        self._write()

    def retry(self) -> None:
        """Write the file again if the last write failed."""
        if self._unwritten:
            self._write()

    def _write(self) -> None:
        try:
            data = json.dumps(self._parts, sort_keys=True).encode()
            write_atomically(self._path, data, durable=False)
        except OSError:  # nothing the daemon decides depends on it: only the file is withdrawn
            self._unwritten = True
            with contextlib.suppress(OSError):
                self._path.unlink(missing_ok=True)
        else:
            self._unwritten = False


def path(home: Home, service: str) -> Path:
    return home.run / f"{service}.json"


def read(home: Home, service: str = "brokerd") -> dict[str, Any]:
    """What `service` last reported; {} when it said nothing (or cannot be read)."""
    try:
        data = json.loads(path(home, service).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
