"""The head brokerd has confirmed (SPEC §7, I8): `{home}/audit/head.json`, its seq, hash and the
ledger's length through that line, beside the ledger, read at start and written whole.

Written only after the ledger's fsync covering that head (it may lag the ledger, never lead
it), and only whole: a damaged one is reported, never guessed at or replaced here.
"""

from __future__ import annotations

import json
from pathlib import Path

from bxcore.home.atomic import write_atomically
from services.brokerd.core.records import Head
from services.brokerd.ledger.index import Mark

HEAD_FILE = "head.json"


def read_confirmed(path: Path) -> Mark | None:
    """brokerd's durable head, or None when there is none yet. ValueError when the file is
    there but damaged (it is written whole, by rename, so that is not a crash)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {path}: {error}") from None
    if (
        not isinstance(data, dict)
        or set(data) != {"seq", "hash", "size"}
        or not all(type(data[k]) is int and data[k] >= 0 for k in ("seq", "size"))
        or not isinstance(data["hash"], str)
        or len(data["hash"]) != 64
    ):
        raise ValueError(f"{path} is damaged")
    return Mark(Head(data["seq"], data["hash"]), data["size"])


def write_confirmed(path: Path, mark: Mark) -> None:
    """head.json, whole (temp, fsync, rename, fsync of the folder). It may lag the ledger
    (a crash), never lead it: call it only after the ledger's fsync."""
    data = {"seq": mark.head.seq, "hash": mark.head.hash, "size": mark.size}
    write_atomically(path, json.dumps(data).encode())
