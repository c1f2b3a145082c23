"""What a backup archive may hold and what its manifest says (docs/backup.md), parsed strictly.

Pure: no I/O. A member's name is a path relative to the home, in one of the places a backup
takes (`PLACES`); `keys/` only in an archive made `--with-secrets`. The manifest,
`backup.json`, names every other member with its size and SHA-256, and the ledger's head the
archive was cut at; a restore refuses an archive that differs from it in anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from bxcore import strict_json
from services.brokerd.core.records import Head
from services.brokerd.face import Mark

FORMAT = "boxmaker-backup 1"
MANIFEST = "backup.json"
LEDGER = "audit/ledger.jsonl"
HEAD = "audit/head.json"
MEMORY = "memory/memory.sqlite3"
LABELS = "state/broker"  # the session labels, `<session>.json`
#: Single files a backup takes, by their path in the home.
FILES = ("config.toml", LEDGER, HEAD, MEMORY)
#: Folders whose files (one level, no sub-folders) a backup takes, and which names it takes.
FOLDERS = {
    "grants": re.compile(r"[a-z0-9][a-z0-9-]{0,63}\.toml"),
    "jobs": re.compile(r"[a-z0-9][a-z0-9-]{0,63}\.toml"),
    "mcp": re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.pins\.json"),
    "witness": re.compile(r"[a-z0-9][a-z0-9-]{0,63}\.json"),
    "sessions": re.compile(r"([A-Za-z0-9_][A-Za-z0-9._-]{0,127}\.jsonl|\.jobs\.json)"),
    LABELS: re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}\.json"),
}
#: Only with `--with-secrets`: the CURVE key pairs and the console's owner token.
SECRETS = "keys"
SECRET_NAMES = re.compile(r"[a-z0-9-]{1,64}\.(key|key_secret|token)")
_HEX = re.compile(r"[0-9a-f]{64}")
_KEYS = {"format", "made", "home", "head", "secrets", "files"}


#: The folders an archive may have members for (as `tar` adds them), holding nothing else.
ALL_FOLDERS = frozenset({*FOLDERS, "audit", "memory", "state", SECRETS})


def member_name(name: str) -> str:
    """A member's name as a path in the home: `./grants/a.toml` (as `tar -C home .` writes
    it) is `grants/a.toml`; a trailing `/` (a folder's) is dropped."""
    while name.startswith("./"):
        name = name[2:]
    return name.rstrip("/")


class ArchiveRefused(Exception):
    """The archive is not one this restore takes as it is: one line saying why."""


def member_problem(name: str, secrets: bool) -> str | None:
    """Why `name` may not be a member of an archive (None: it may); `secrets` when the
    manifest says the archive holds keys."""
    if name == MANIFEST or name in FILES:
        return None
    folder, _, file = name.rpartition("/")
    if folder == SECRETS:
        if not secrets:
            return f"{name!r}: keys in an archive whose manifest says it holds none"
        return None if SECRET_NAMES.fullmatch(file) else f"{name!r} is not a key file"
    pattern = FOLDERS.get(folder)
    if pattern is None or pattern.fullmatch(file) is None:
        return f"{name!r} is no place a backup takes"
    return None


@dataclass(frozen=True)
class Entry:
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    made: str  # UTC, RFC 3339
    home: str  # the home it was made of (grants name paths in it, its workspace's)
    head: Mark  # the ledger's head the archive was cut at (seq 0: no ledger)
    secrets: bool  # holds keys/ (`--with-secrets`)
    files: dict[str, Entry]  # every member but the manifest

    def encode(self) -> bytes:
        value = {
            "format": FORMAT,
            "made": self.made,
            "home": self.home,
            "head": {
                "seq": self.head.head.seq,
                "hash": self.head.head.hash,
                "size": self.head.size,
            },
            "secrets": self.secrets,
            "files": {
                name: {"size": e.size, "sha256": e.sha256} for name, e in sorted(self.files.items())
            },
        }
        return (json.dumps(value, indent=1) + "\n").encode()


def parse_manifest(data: bytes) -> Manifest:
    """The manifest, checked whole; `ArchiveRefused` naming what is wrong."""
    try:
        value = strict_json.loads(data)
    except strict_json.StrictJsonError:
        raise ArchiveRefused(f"{MANIFEST} is not JSON") from None
    if not isinstance(value, dict) or set(value) != _KEYS:
        raise ArchiveRefused(f"{MANIFEST} is not a boxmaker backup's manifest")
    if value["format"] != FORMAT:
        raise ArchiveRefused(f"{MANIFEST}: format {value['format']!r}; this bxctl reads {FORMAT!r}")
    head, secrets, files = value["head"], value["secrets"], value["files"]
    if not isinstance(value["made"], str) or not isinstance(value["home"], str):
        raise ArchiveRefused(f"{MANIFEST}: 'made' or 'home' is not text")
    if type(secrets) is not bool:
        raise ArchiveRefused(f"{MANIFEST}: 'secrets' is not true or false")
    mark = _mark(head)
    if not isinstance(files, dict):
        raise ArchiveRefused(f"{MANIFEST}: 'files' is not a table")
    entries: dict[str, Entry] = {}
    for name, entry in files.items():
        problem = member_problem(name, secrets)
        if problem is not None or name == MANIFEST:
            raise ArchiveRefused(f"{MANIFEST} names {problem or repr(name)}")
        if not isinstance(entry, dict) or set(entry) != {"size", "sha256"}:
            raise ArchiveRefused(f"{MANIFEST}: the entry of {name!r} is not size and sha256")
        size, digest = entry["size"], entry["sha256"]
        if type(size) is not int or size < 0 or not isinstance(digest, str):
            raise ArchiveRefused(f"{MANIFEST}: the entry of {name!r} is of the wrong type")
        if not _HEX.fullmatch(digest):
            raise ArchiveRefused(f"{MANIFEST}: the sha256 of {name!r} is not 64 hex digits")
        entries[name] = Entry(size, digest)
    if (mark.head.seq > 0) != (LEDGER in entries):
        raise ArchiveRefused(f"{MANIFEST}: its head and whether it holds a ledger disagree")
    if LEDGER in entries and entries[LEDGER].size != mark.size:
        raise ArchiveRefused(f"{MANIFEST}: the ledger's size is not its head's")
    return Manifest(value["made"], value["home"], mark, secrets, entries)


def _mark(head: Any) -> Mark:
    if not isinstance(head, dict) or set(head) != {"seq", "hash", "size"}:
        raise ArchiveRefused(f"{MANIFEST}: 'head' is not seq, hash and size")
    seq, digest, size = head["seq"], head["hash"], head["size"]
    if type(seq) is not int or type(size) is not int or seq < 0 or size < 0:
        raise ArchiveRefused(f"{MANIFEST}: the head's seq or size is not a count")
    if not isinstance(digest, str) or not _HEX.fullmatch(digest):
        raise ArchiveRefused(f"{MANIFEST}: the head's hash is not 64 hex digits")
    return Mark(Head(seq, digest), size)
