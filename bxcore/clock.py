"""Time as boxmaker writes it: UTC, RFC 3339, milliseconds (`2026-11-30T02:34:30.123Z`).

The pure cores never read the clock; the shells read it here and pass it in, and the
machine's time zone too (`local_zone`, for jobs' cron schedules, §19).
"""

from __future__ import annotations

import datetime
import functools
import time
import zoneinfo
from collections.abc import Mapping
from pathlib import Path

LOCALTIME = Path("/etc/localtime")


def now_ms() -> int:
    """Milliseconds since the epoch, from the wall clock."""
    return time.time_ns() // 1_000_000


def rfc3339(epoch_ms: int) -> str:
    """`epoch_ms` as UTC RFC 3339 with milliseconds."""
    seconds, millis = divmod(epoch_ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=4)
def _second(seconds: int) -> str:
    """The part down to the second; the ledger writes many records a second."""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def parse_rfc3339(text: str) -> int:
    """`rfc3339`'s output back to milliseconds since the epoch; ValueError otherwise."""
    if len(text) != 24 or not text.endswith("Z"):
        raise ValueError(f"not a boxmaker timestamp: {text!r}")
    moment = datetime.datetime.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")
    seconds = int(moment.replace(tzinfo=datetime.UTC).timestamp())
    return seconds * 1000 + int(text[20:23])


def local_zone(env: Mapping[str, str], localtime: Path = LOCALTIME) -> datetime.tzinfo:
    """The machine's time zone, with its DST rules: `$TZ` when it names a zone
    (`Europe/Berlin`, `:Europe/Berlin`), else `/etc/localtime`, else UTC. A fixed offset
    (`datetime.now().astimezone()`) would not do: a schedule looks months ahead."""
    name = env.get("TZ", "").removeprefix(":")
    if name:
        try:
            return zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with localtime.open("rb") as file:
            return zoneinfo.ZoneInfo.from_file(file, key=_key(localtime))
    except (OSError, ValueError):
        return datetime.UTC


def _key(localtime: Path) -> str:
    """`Europe/Berlin` for a link to `/usr/share/zoneinfo/Europe/Berlin`; else "localtime"."""
    target = str(localtime.resolve())
    marker = "/zoneinfo/"
    return target.split(marker, 1)[1] if marker in target else "localtime"
