"""The witness (SPEC §7): the newest ledger head the owner's side has seen, kept outside
brokerd's reach, so a ledger rewritten by whoever holds the file is caught.

`{home}/witness/<who>.json` holds `{"seq": N, "hash": "<hex>"}`. `keep` never moves it back:
a smaller seq than the one kept is refused and said so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from bxcore.atomic import write_atomically

_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class Seen:
    seq: int
    hash: str


def read(path: Path) -> Seen | None:
    """The head kept at `path`, or None when there is none (or it is unreadable)."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if (
        isinstance(value, dict)
        and set(value) == {"seq", "hash"}
        and type(value["seq"]) is int
        and value["seq"] >= 0
        and isinstance(value["hash"], str)
        and _HASH.fullmatch(value["hash"])
    ):
        return Seen(value["seq"], value["hash"])
    return None


def newest(paths: list[Path]) -> Seen | None:
    """The newest head any of the owner's witnesses kept."""
    found = [seen for seen in map(read, paths) if seen is not None]
    return max(found, key=lambda seen: seen.seq) if found else None


def keep(path: Path, seen: Seen) -> bool:
    """Keep `seen` unless the kept head is newer; False when it was refused as going back."""
    old = read(path)
    if old is not None and old.seq > seen.seq:
        return False
    if old == seen:
        return True
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(path, json.dumps({"seq": seen.seq, "hash": seen.hash}).encode())
    return True
