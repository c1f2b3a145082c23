"""Who may use the console, request by request (SPEC §12.1). Pure: no I/O, time is given.

- `host_problem`: the Host header must name the console itself (DNS rebinding): 421.
- `mutation_problem`: a request that changes anything must be JSON and come from the
  console's own origin when the browser says where it comes from: 403.
- `Keys`: the owner token, compared in constant time, and the secret the logins' table
  (`services.gatewayd.console.logins`) keys its digests with.
- `SECURITY_HEADERS`: on every response, errors and static files included.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

COOKIE = "bx_console"
KEY_HEADER = "x-bx-console"
MUTATING = frozenset({"POST", "PUT", "DELETE", "PATCH"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
)
NO_STORE = (b"cache-control", b"no-store")


def _name(host: str) -> str | None:
    """The name in a Host header without its port, lower-cased; None when malformed. An IPv6
    literal is kept whole: only the loopback one, with the port, is ever accepted."""
    if host.startswith("["):
        return None
    name, colon, port = host.partition(":")
    if colon and not (port.isascii() and port.isdigit()):  # "²" is a digit to isdigit
        return None
    return name.lower()


def _allowed(host: str, allowed_hosts: tuple[str, ...]) -> bool:
    name = _name(host)
    return name is not None and name in {allowed.lower() for allowed in allowed_hosts}


def host_problem(host: str | None, port: int, allowed_hosts: tuple[str, ...]) -> str | None:
    """Why `host` (the Host header) is not the console's, or None when it is. A loopback name
    must carry the console's port; a name in `allowed_hosts` may carry any port (a proxy's)."""
    if not host:
        return "no Host header"
    if host in {f"{name}:{port}" for name in LOOPBACK_NAMES} or _allowed(host, allowed_hosts):
        return None
    return f"this console answers only to its own address, not to {host[:80]!r}"


def own_origins(host: str, allowed_hosts: tuple[str, ...]) -> frozenset[str]:
    """The origins the console's own page has when it was reached at `host` (checked)."""
    if _allowed(host, allowed_hosts):
        return frozenset({f"http://{host}", f"https://{host}"})
    return frozenset({f"http://{host}"})


def mutation_problem(
    method: str, headers: Mapping[str, str], host: str, allowed_hosts: tuple[str, ...]
) -> str | None:
    """Why a request that may change something is refused (403), or None. `headers` has
    lower-case names. Requests that change nothing pass."""
    if method not in MUTATING:
        return None
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        return "a change must be sent as application/json"
    origin = headers.get("origin")
    if origin is not None and origin not in own_origins(host, allowed_hosts):
        return f"a change may come only from the console's own page, not from {origin[:80]!r}"
    return None


class Keys:
    """The owner token, and a secret made from it (HMAC) for the logins' table: the table's
    digests match nothing once the token is replaced, so every login dies with it."""

    def __init__(self, token: str) -> None:
        self._token = token.encode("ascii")
        self.logins_secret = hmac.new(self._token, b"bx_console logins v1", hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "Keys(<hidden>)"

    def token_matches(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode("utf-8", "replace"), self._token)
