"""`POST /api/login` and `POST /api/logout` (SPEC §12.1), and the file that keeps the logins'
table across gatewayd's restarts, `{home}/run/console-logins.json` (digests only; gatewayd is
its only writer). The rules are `services.gatewayd.console.logins`; this is their shell: the
randomness, the clock, the delay a failed login waits, the file.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bxcore.home.atomic import write_atomically
from services.gatewayd.console import access
from services.gatewayd.console.api import Refused, body, fail
from services.gatewayd.console.logins import (
    FAILED_LOGIN_DELAY_S,
    LIFETIME_S,
    FailureGate,
    Logins,
    LoginsError,
)

log = logging.getLogger("gatewayd")

KEY_BYTES = 32


def load(path: Path, keys: access.Keys) -> Logins:
    """The saved table, or an empty one (saying why) when there is none that reads."""
    try:
        return Logins.loads(keys.logins_secret, path.read_bytes())
    except FileNotFoundError:
        pass
    except OSError as error:
        log.warning("the console's logins cannot be read (%s): every page logs in again", error)
    except LoginsError as error:
        log.warning("the console's logins in %s are not readable (%s): every page logs in again",
                    path, error)  # fmt: skip
    return Logins(keys.logins_secret)


class LoginRoutes:
    def __init__(
        self,
        keys: access.Keys,
        path: Path,
        *,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.keys = keys
        self.path = path
        self.logins = load(path, keys)
        self.gate = FailureGate()
        self.now = now
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"LoginRoutes({self.logins!r}, {self.gate!r})"

    def _save(self) -> None:
        """The table on disk; a page still works when this fails, until gatewayd restarts."""
        try:
            write_atomically(self.path, self.logins.dumps(), durable=False)
        except OSError as error:
            log.warning("the console's logins cannot be saved (%s): pages log in again "
                        "after gatewayd restarts", error)  # fmt: skip

    async def login(self, request: Request) -> Response:
        """The token, once, in the body; a cookie and the key paired with it in return. The
        right token logs in at once; a wrong one is answered after a fixed delay, a few at a
        time (§12.1: slowed down, never a lockout)."""
        client = request.client.host if request.client else "unknown"
        try:
            token = (await body(request, {"token": str})).get("token", "")
        except Refused as refused:
            return fail(refused.status, str(refused))
        if not self.keys.token_matches(token):
            if not self.gate.enter():
                return fail(429, "too many failed logins at this moment; try again in a second")
            try:
                log.warning("a console login from %s failed: wrong token", client)
                await self._sleep(FAILED_LOGIN_DELAY_S)
            finally:
                self.gate.leave()
            return fail(401, "that is not the console's token; run `bxctl console` for the link")
        key = secrets.token_urlsafe(KEY_BYTES)
        carried = request.cookies.get(access.COOKIE)
        cookie = self.logins.login(carried, secrets.token_urlsafe(KEY_BYTES), key, self.now())
        self._save()
        response = JSONResponse({"key": key})
        response.set_cookie(
            access.COOKIE,
            cookie,
            max_age=LIFETIME_S,
            path="/",
            httponly=True,
            samesite="strict",
        )
        log.info("the owner logged in to the console from %s", client)
        return response

    async def logout(self, request: Request) -> Response:
        """The cookie cleared; with the key paired with it, the pair (and the cookie's other
        keys) forgotten, so neither opens anything again."""
        cookie = request.cookies.get(access.COOKIE)
        key = request.headers.get(access.KEY_HEADER)
        if self.logins.logout(cookie, key, self.now()):
            self._save()
        response = JSONResponse({"ok": True})
        response.delete_cookie(access.COOKIE, path="/", httponly=True, samesite="strict")
        return response
