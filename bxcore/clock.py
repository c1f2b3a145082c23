"""Time as boxmaker writes it: UTC, RFC 3339, milliseconds (`2026-11-30T02:34:30.123Z`).

The pure cores never read the clock; the shells read it here and pass it in.
"""

from __future__ import annotations

import datetime
import time


def now_ms() -> int:
    """Milliseconds since the epoch, from the wall clock."""
    return time.time_ns() // 1_000_000


def rfc3339(epoch_ms: int) -> str:
    """`epoch_ms` as UTC RFC 3339 with milliseconds."""
    seconds, millis = divmod(epoch_ms, 1000)
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"
