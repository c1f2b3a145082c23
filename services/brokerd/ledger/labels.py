"""The label each session reached by the ledger's word (SPEC §6, §7): the join of every `raised`
record's `to` for it, and of every `absorbed` record's for its parent. brokerd writes a label
file before the ledger record of its rise, so a home's label files are never lower than this;
`bxctl restore` checks an archive's against it (docs/backup.md). Reads only.
"""

from __future__ import annotations

import os

from bxcore.labels import DataClass, Label
from services.brokerd.core.records import parse_line
from services.brokerd.ledger.scan import read_lines

#: The kinds that raise a label, and the field naming the session they raise.
_RAISING = {"raised": "session", "absorbed": "parent"}
#: A line's canonical prefix (`{"seq":N,"at":…,"prev":…,"kind":"`) ends within this many bytes.
_PREFIX = 200


def reached(path: str | os.PathLike[str]) -> dict[str, Label]:
    """Each session the ledger at `path` raised, with the highest label it raised it to. Only
    whole records are read; a line that is no record is passed over (`verify_file` names it)."""
    found: dict[str, Label] = {}
    with open(path, "rb") as f:
        for line, ended, _ in read_lines(f):
            head = line[:_PREFIX]
            if not ended or not any(b'"kind":"%s"' % k.encode() in head for k in _RAISING):
                continue
            record = parse_line(line)
            if isinstance(record, str) or record["kind"] not in _RAISING:
                continue
            session, to = record.get(_RAISING[str(record["kind"])]), record.get("to")
            if not isinstance(session, str) or not isinstance(to, dict):
                continue
            label = Label(DataClass(to["class"]), bool(to["untrusted"]))
            found[session] = found[session].join(label) if session in found else label
    return found
