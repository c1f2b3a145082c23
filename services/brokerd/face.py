"""What bxctl may do with brokerd's files while brokerd is not running (issue 25): read and
verify the ledger (its lines from the end, its confirmed head, the index's mark, the labels
it raised), write a restored ledger's confirmed head (`bxctl restore`), read the grants folder
and add or remove a grant file, and name the box's own places. bxctl reaches brokerd only
through here and brokerd's pure core (`tests/unit/test_imports.py`), so what it
may touch is this one list.
"""

from __future__ import annotations

from services.brokerd.grant_files import (
    GrantFields,
    GrantRefused,
    add_grant,
    parse_match,
    remove_grant,
)
from services.brokerd.grants_folder import read_folder
from services.brokerd.ledger.head import HEAD_FILE, read_confirmed, write_confirmed
from services.brokerd.ledger.index import START, Mark
from services.brokerd.ledger.labels import reached
from services.brokerd.ledger.scan import lines_backwards
from services.brokerd.ledger.verify import LedgerUnreadable, Progress, held, verify_file
from services.brokerd.own import binds_problem, own_places
from services.brokerd.state import decode_label

__all__ = [
    "HEAD_FILE",
    "START",
    "GrantFields",
    "GrantRefused",
    "LedgerUnreadable",
    "Mark",
    "Progress",
    "add_grant",
    "binds_problem",
    "decode_label",
    "held",
    "lines_backwards",
    "own_places",
    "parse_match",
    "reached",
    "read_confirmed",
    "read_folder",
    "remove_grant",
    "verify_file",
    "write_confirmed",
]
