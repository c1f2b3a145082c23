"""The witness (SPEC §7): the newest ledger head the owner's side has seen, kept outside
brokerd's reach, so a ledger rewritten by whoever holds the file is caught.

`{home}/witness/<who>.json` holds `{"seq": N, "hash": "<hex>", "size": B}` (`size`, the
ledger's length through that record's line, since issue 10; older files lack it). A missing
file is "no witness"; one that cannot be read or is not a head raises `WitnessUnreadable`,
never passes for none. `keep` never moves a head back; only `reset` does, on the owner's word.
`holds` finds a witnessed record in the ledger in O(1): it reads back from `size`, no scan.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import BinaryIO

from bxcore.frozen import frozen
from bxcore.home.atomic import write_atomically

_HASH = re.compile(r"[0-9a-f]{64}")
_KEYS = ({"seq", "hash"}, {"seq", "hash", "size"})
#: No ledger line is longer (services.brokerd.core.records.MAX_LINE_BYTES, which bxcore cannot
#: import): a witnessed line is never looked for further back than this.
MAX_LINE_BYTES = 32 * 1024 * 1024
_STEP = 64 * 1024


class WitnessUnreadable(Exception):
    """A witness file that exists but cannot be read, or holds no head: one line, saying
    which file and why. It is never "no witness": that would let a cut ledger pass."""


@frozen
class Seen:
    """A head the owner's side saw: `size` is the ledger's length through its line, or None
    when the head came without one (an older brokerd, or a witness file written before)."""

    seq: int
    hash: str
    size: int | None = None

    def __str__(self) -> str:
        at = "" if self.size is None else f" at byte {self.size}"
        return f"seq {self.seq} ({self.hash[:12]}…){at}"


def read(path: Path) -> Seen | None:
    """The head kept at `path`, or None when there is no file. Raises `WitnessUnreadable`
    when the file is there but cannot be read, or is not a head."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise WitnessUnreadable(f"cannot read the witness {path}: {_cause(error)}") from error
    seen = _parse(data)
    if seen is None:
        raise WitnessUnreadable(f"the witness {path} is damaged: it holds no ledger head")
    return seen


def _parse(data: bytes) -> Seen | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or set(value) not in _KEYS:
        return None
    seq, hash_, size = value["seq"], value["hash"], value.get("size")
    if type(seq) is not int or seq < 0 or not isinstance(hash_, str) or not _HASH.fullmatch(hash_):
        return None
    if "size" in value and (type(size) is not int or size < 0):
        return None
    return Seen(seq, hash_, size)


def newest(paths: list[Path]) -> Seen | None:
    """The newest head any of the owner's witnesses kept, for brokerd; `WitnessUnreadable`
    if one cannot be read (a damaged witness is a failure, not a smaller set of witnesses).
    A witness this process may not read at all is out of its reach, as the deploy layout
    means it to be (SPEC §7): the owner's side checks that one."""
    found = []
    for path in paths:
        try:
            seen = read(path)
        except WitnessUnreadable as error:
            if isinstance(error.__cause__, PermissionError):
                continue
            raise
        if seen is not None:
            found.append(seen)
    return max(found, key=lambda seen: seen.seq) if found else None


def keep(path: Path, seen: Seen) -> bool:
    """Keep `seen` unless the kept head is newer; False when it was refused as going back.
    Raises `WitnessUnreadable` (the damaged file is left as it is) and OSError."""
    old = read(path)
    if old is not None and old.seq > seen.seq:
        return False
    if old == seen:
        return True
    _write(path, seen)
    return True


def reset(path: Path, seen: Seen) -> None:
    """Write exactly `seen`, moving back if it must: the owner's decision (after a ledger was
    cut or rewritten on purpose), never a daemon's. A damaged file is replaced too."""
    _write(path, seen)


def _write(path: Path, seen: Seen) -> None:
    value: dict[str, object] = {"seq": seen.seq, "hash": seen.hash}
    if seen.size is not None:
        value["size"] = seen.size
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomically(path, json.dumps(value).encode())


def line_ending_at(f: BinaryIO, size: int) -> bytes | None:
    """The line (without its newline) whose newline is the byte just before `size`, read
    backwards in blocks to the newline before it; None when the file is shorter, that byte is
    no newline, or the line would be longer than any record."""
    if size <= 0:
        return None
    f.seek(size - 1)
    if f.read(1) != b"\n":
        return None
    pieces: list[bytes] = []
    end = size - 1
    pos = end
    while pos > 0 and end - pos <= MAX_LINE_BYTES:
        step = min(_STEP, pos)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        newline = block.rfind(b"\n")
        if newline >= 0:
            pieces.append(block[newline + 1 :])
            pos += newline + 1
            break
        pieces.append(block)
    if end - pos > MAX_LINE_BYTES:
        return None
    return b"".join(reversed(pieces))


def holds(ledger: Path, seen: Seen) -> bool:
    """Whether the ledger still holds the witnessed record: a line ending exactly at
    `seen.size` whose SHA-256 is `seen.hash` (a missing ledger holds nothing). O(1): never
    scans the file. Raises ValueError for a head without size, and OSError (a
    PermissionError when the ledger is another user's) when it cannot be read."""
    if seen.size is None:
        raise ValueError(f"the head {seen} has no size: it cannot be found in O(1)")
    if seen.seq == 0:
        return seen.size == 0
    try:
        with open(ledger, "rb") as f:
            line = line_ending_at(f, seen.size)
    except FileNotFoundError:
        return False
    return line is not None and hashlib.sha256(line).hexdigest() == seen.hash


def _cause(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__
