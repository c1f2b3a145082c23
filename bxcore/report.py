"""What brokerd tells the owner's side about itself beside the wire: `{run}/brokerd.json`, one
JSON object rewritten whole whenever a part of it changes (`sandbox`: how tools are
confined; `ledger`: the ledger's state). `bxctl status` reads it; it is a report, never an
input: nothing brokerd decides depends on it. Reads and writes only that file.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from bxcore.atomic import write_atomically
from bxcore.home import Home

NAME = "brokerd.json"


class Report:
    """brokerd's side: the parts, and the file rewritten when one changes."""

    def __init__(self, home: Home) -> None:
        self._path = home.run / NAME
        self._parts: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"Report({self._path}: {', '.join(self._parts)})"

    def set(self, part: str, value: Any) -> None:
        if self._parts.get(part) == value:
            return
        self._parts[part] = value
        with contextlib.suppress(OSError):  # a report that cannot be written changes nothing
            data = json.dumps(self._parts, sort_keys=True).encode()
            write_atomically(self._path, data, durable=False)


def read(home: Home) -> dict[str, Any]:
    """What brokerd last reported; {} when it said nothing (or cannot be read)."""
    try:
        data = json.loads((home.run / NAME).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
