"""What brokerd tells the owner's side about itself beside the wire: `{run}/brokerd.json`, one
JSON object rewritten whole whenever a part of it changes (`sandbox`: how tools are
confined; `mcp`: its MCP servers; `ledger`: the ledger's state, for tests and benches, while
`bxctl status` asks brokerd for it, issue 28). It is a report, never an input: nothing brokerd
decides depends on it. Reads and writes only that file.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from bxcore.atomic import write_atomically
from bxcore.home import Home

NAME = "brokerd.json"


class Report:
    """brokerd's side: the parts, and the file rewritten when one changes. A file that could not
    be written (a full disk) is removed, so that no reader takes the old one for the truth, and
    written again at the next `retry`."""

    def __init__(self, home: Home) -> None:
        self._path = home.run / NAME
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
        except OSError:  # nothing brokerd decides depends on it: only the file is withdrawn
            self._unwritten = True
            with contextlib.suppress(OSError):
                self._path.unlink(missing_ok=True)
        else:
            self._unwritten = False


def read(home: Home) -> dict[str, Any]:
    """What brokerd last reported; {} when it said nothing (or cannot be read)."""
    try:
        data = json.loads((home.run / NAME).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
