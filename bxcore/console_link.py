"""The console's owner token and its link (SPEC §12.1), for `bxctl` and gatewayd alike, and
where gatewayd really serves it (`Served`, in its report `{run}/gatewayd.json`).

The token is 32 random bytes, URL-safe base64, in `{home}/keys/console.token` (0600), made once
and kept across restarts. The link carries it in the URL's fragment, which no browser sends to
a server or puts in a Referer; it never goes in a query, a log line or a response body.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from bxcore.home import report
from bxcore.home.layout import Home
from bxcore.wire.messages import ServiceInfo, ServiceState

TOKEN_BYTES = 32
TOKEN_LENGTH = 43  # URL-safe base64 of 32 bytes, without padding
MAX_TOKEN_FILE = 256


class TokenError(Exception):
    """The token file cannot be made or read; `str()` names it and why."""


def ensure_token(path: Path) -> bool:
    """Make the token file (0600) if it is missing; True when it was made."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return False
    except OSError as error:
        raise TokenError(f"cannot make the console token {path}: {error.strerror}") from None
    with os.fdopen(fd, "w", encoding="ascii") as file:
        os.fchmod(file.fileno(), 0o600)
        file.write(token + "\n")
        file.flush()
        os.fsync(file.fileno())
    return True


def read_token(path: Path) -> str:
    """The token; TokenError when the file is missing, unreadable or not a token."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:
            data = file.read(MAX_TOKEN_FILE + 1)
    except FileNotFoundError:
        raise TokenError(f"no console token at {path}; run `bxctl init`") from None
    except OSError as error:
        raise TokenError(f"cannot read the console token {path}: {error.strerror}") from None
    token = data.strip().decode("ascii", "replace")
    if len(token) < TOKEN_LENGTH or len(data) > MAX_TOKEN_FILE or not _urlsafe(token):
        raise TokenError(f"{path} does not hold a console token; remove it and run `bxctl init`")
    return token


def _urlsafe(text: str) -> bool:
    return all(c.isascii() and (c.isalnum() or c in "-_") for c in text)


def console_address(host: str, port: int) -> str:
    """`http://HOST:PORT/` as the owner opens it: a wildcard address is opened on loopback."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host}:{port}/"
    if address.is_unspecified:
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{shown}:{port}/"


def console_link(host: str, port: int, token: str) -> str:
    """The link `bxctl console` prints: the address with the token in its fragment."""
    return f"{console_address(host, port)}#token={token}"


@dataclass(frozen=True)
class Served:
    """Where gatewayd really serves the console (its report's `console` part): the process,
    the host, the port it bound, and the port config.toml asked for (another when that one was
    taken). The owner's side prints links from this, never from config.toml."""

    pid: int
    host: str
    port: int
    asked: int

    def json(self) -> dict[str, Any]:
        return {"pid": self.pid, "host": self.host, "port": self.port, "asked": self.asked}

    @property
    def address(self) -> str:
        return console_address(self.host, self.port)

    @property
    def moved(self) -> str | None:
        """Why the port is not the one config.toml asked for; None when it is."""
        if self.port == self.asked:
            return None
        return f"port {self.asked} was taken, so the console took {self.port}"


def served(said: object, pid: int | None) -> Served | None:
    """The report's `console` part when it is whole and was written by the gatewayd whose pid
    is `pid` (None: whatever gatewayd wrote it); else None. Pure."""
    if not isinstance(said, dict):
        return None
    found_pid, host, port, asked = (said.get(k) for k in ("pid", "host", "port", "asked"))
    if not (_whole(found_pid) and _whole(port) and _whole(asked) and isinstance(host, str)):
        return None
    if pid is not None and found_pid != pid:
        return None  # an earlier gatewayd's, or another's
    return Served(found_pid, host, port, asked)


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def console_served(home: Home, services: Iterable[ServiceInfo]) -> Served | None:
    """Where the box's gatewayd serves the console now, from its report: only while that
    gatewayd runs (`services`, the supervisor's word) and wrote the report itself."""
    gatewayd = next((info for info in services if info.name == "gatewayd"), None)
    if gatewayd is None or gatewayd.state is not ServiceState.RUNNING or gatewayd.pid is None:
        return None
    return served(report.read(home, "gatewayd").get("console"), gatewayd.pid)
