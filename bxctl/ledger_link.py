"""Asking brokerd for the ledger's state (issue 28), for `bxctl status` and `bxctl up`: its
word now, over the admin socket with the owner's key, so that what they say cannot go stale
unnoticed (a report file cannot be rewritten on a full disk). It never fails the command: no
answer is a reason, which the ledger's line says.
"""

from __future__ import annotations

from pathlib import Path

from bxcore import curve
from bxcore.client import ProtocolError, SyncClient, Unreachable, WrongAnswer
from bxcore.config.file import ConfigError, load_config
from bxcore.home.layout import Home
from bxcore.wire.asking import PATIENCE
from bxcore.wire.messages import Error, LedgerQuery, LedgerStatus
from bxctl.owner_link import as_owner, request_id


def ask_ledger(home: Home) -> LedgerStatus | str:
    """brokerd's answer, or why there is none (one line)."""
    try:
        endpoint = load_config(home.config).sockets.endpoint("admin", home)
        secure = as_owner(home, "brokerd")
    except (ConfigError, curve.KeyFileError) as error:
        return f"cannot ask brokerd: {error}"
    if endpoint.startswith("ipc://") and not Path(endpoint[6:]).exists():
        return f"brokerd has no admin socket at {endpoint}"
    with SyncClient(endpoint, socket="admin", secure=secure) as client:
        try:
            answer = client.ask(LedgerQuery(request_id("ledger")))
        except Unreachable:
            return f"brokerd did not answer in {PATIENCE['admin'][LedgerQuery].timeout_s:g} s"
        except ProtocolError as error:
            return f"brokerd answered something unreadable: {error.reason}"
        except WrongAnswer as error:
            return str(error)
    if isinstance(answer, Error):
        return f"brokerd: {answer.message}"
    return answer
