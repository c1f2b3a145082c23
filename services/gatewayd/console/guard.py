"""The console's door (SPEC §12.1), an ASGI middleware in front of every route and file:
the Host check (421), on `/api` the owner's cookie with the key its login paired with it in
`X-BX-Console` (401), the rules for a change (403), and the security headers on every response
it lets out, errors included. The rules themselves are `services.gatewayd.console.access` and
`services.gatewayd.console.logins`; this only applies them to ASGI's scope and messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gatewayd.console import access
from services.gatewayd.console.logins import Logins

#: Reached without the pair: logging in (and out) is how one gets (or drops) it.
OPEN_API = frozenset({"/api/login", "/api/logout"})
LOGGED_OUT = "log in first: run `bxctl console` for the link"
_SECURITY_NAMES = frozenset(name for name, _ in (*access.SECURITY_HEADERS, access.NO_STORE))


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        port: int,
        allowed_hosts: tuple[str, ...],
        logins: Logins,
        now: Callable[[], float],
    ) -> None:
        self.app = app
        self.port = port
        self.allowed_hosts = allowed_hosts
        self.logins = logins
        self._now = now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # no websockets, no lifespan: nothing else is served
        headers = _headers(scope)
        path: str = scope["path"]
        api = path == "/api" or path.startswith("/api/")
        added = [*access.SECURITY_HEADERS, *((access.NO_STORE,) if api else ())]

        async def send_guarded(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [
                    h for h in message.get("headers", []) if h[0].lower() not in _SECURITY_NAMES
                ]
                message = {**message, "headers": [*kept, *added]}
            await send(message)

        host = headers.get("host")
        problem = access.host_problem(host, self.port, self.allowed_hosts)
        if problem is not None:
            await _refuse(send_guarded, 421, problem)
            return
        assert host is not None
        if api and path not in OPEN_API:
            cookie = cookie_parser(headers.get("cookie", "")).get(access.COOKIE)
            key = headers.get(access.KEY_HEADER)
            if not self.logins.paired(cookie, key, self._now()):
                await _refuse(send_guarded, 401, LOGGED_OUT)
                return
        problem = access.mutation_problem(scope["method"], headers, host, self.allowed_hosts)
        if problem is not None:
            await _refuse(send_guarded, 403, problem)
            return
        await self.app(scope, receive, send_guarded)


def _headers(scope: Scope) -> dict[str, str]:
    """Header names lower-cased; of a header given twice, the first (Host above all)."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return found


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
