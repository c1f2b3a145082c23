"""The console's logins (SPEC §12.1): each cookie gatewayd set, the keys it paired with it, and
the gate that slows failed logins down without ever refusing the right token.

Pure: no I/O, no clock (`now` is given), no randomness (a login is handed its new cookie and
key). Only keyed digests are kept (HMAC-SHA256 under a secret made from the owner token), never
a cookie or a key, so the saved table opens nothing, and a new token leaves it matching nothing.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

LIFETIME_S = 30 * 24 * 3600  # as long as the cookie lives in the browser
KEYS_PER_COOKIE = 16  # the tabs of one browser, each logged in with the link
COOKIES_KEPT = 64  # browsers (and clients) logged in at once; the oldest forgotten first
FAILED_LOGIN_DELAY_S = 1.0
FAILED_LOGINS_AT_ONCE = 4
VERSION = 1


class LoginsError(ValueError):
    """A saved table that is not one this code wrote."""


@dataclass(frozen=True, slots=True)
class Key:
    digest: str
    at: float  # when its login was, in seconds since the epoch


class Logins:
    """Cookie digest → the keys paired with it, oldest first. A login that carries a cookie
    still paired with a key keeps that cookie and pairs one more key with it (another tab of
    the same browser stays logged in); any other login starts a cookie of its own."""

    def __init__(self, secret: bytes, cookies: dict[str, list[Key]] | None = None) -> None:
        self._secret = secret
        self._cookies: dict[str, list[Key]] = dict(cookies or {})

    def __repr__(self) -> str:
        keys = sum(len(keys) for keys in self._cookies.values())
        return f"Logins({len(self._cookies)} cookies, {keys} keys)"

    def _digest(self, what: bytes, value: str) -> str:
        return hmac.new(self._secret, what + value.encode("utf-8", "replace"), "sha256").hexdigest()

    def _live(self, cookie: str | None, now: float) -> list[Key]:
        if not cookie:
            return []
        keys = self._cookies.get(self._digest(b"cookie:", cookie), [])
        return [key for key in keys if now - LIFETIME_S < key.at]

    def login(self, cookie: str | None, fresh_cookie: str, key: str, now: float) -> str:
        """Pair `key` with the cookie the request carried when that cookie is still paired,
        else with `fresh_cookie`; the cookie to set in the answer."""
        kept = cookie if cookie and self._live(cookie, now) else fresh_cookie
        name = self._digest(b"cookie:", kept)
        keys = [*self._live(kept, now), Key(self._digest(b"key:", key), now)]
        self._cookies.pop(name, None)  # the newest last: the oldest is the first forgotten
        self._cookies[name] = keys[-KEYS_PER_COOKIE:]
        self._prune(now)
        return kept

    def paired(self, cookie: str | None, key: str | None, now: float) -> bool:
        """Whether `key` is one a login paired with `cookie`, and still lives. Every kept key
        of the cookie is compared, in constant time each."""
        if not key:
            return False
        offered = self._digest(b"key:", key)
        found = False
        for kept in self._live(cookie, now):
            found |= hmac.compare_digest(kept.digest, offered)
        return found

    def logout(self, cookie: str | None, key: str | None, now: float) -> bool:
        """Forget the cookie and every key paired with it, when `key` is one of them (a cookie
        alone, replayed by someone else, logs nobody out); whether anything was forgotten."""
        if not self.paired(cookie, key, now):
            return False
        assert cookie is not None
        del self._cookies[self._digest(b"cookie:", cookie)]
        return True

    def _prune(self, now: float) -> None:
        for name in list(self._cookies):
            keys = [key for key in self._cookies[name] if now - LIFETIME_S < key.at]
            if keys:
                self._cookies[name] = keys
            else:
                del self._cookies[name]
        while len(self._cookies) > COOKIES_KEPT:
            del self._cookies[next(iter(self._cookies))]

    def dumps(self) -> bytes:
        """The table as gatewayd saves it: digests and times only."""
        cookies = {
            name: [[key.digest, key.at] for key in keys] for name, keys in self._cookies.items()
        }
        return json.dumps({"version": VERSION, "cookies": cookies}, separators=(",", ":")).encode()

    @classmethod
    def loads(cls, secret: bytes, data: bytes) -> Logins:
        """A table saved by `dumps`, or LoginsError saying what is wrong with it."""
        try:
            saved = json.loads(data)
        except (ValueError, RecursionError):
            raise LoginsError("it is not JSON") from None
        if not isinstance(saved, dict) or set(saved) != {"version", "cookies"}:
            raise LoginsError("it is not a table of logins")
        if saved["version"] != VERSION or not isinstance(saved["cookies"], dict):
            raise LoginsError(f"it is not version {VERSION}")
        cookies: dict[str, list[Key]] = {}
        for name, keys in saved["cookies"].items():
            if not _is_digest(name) or not isinstance(keys, list) or not keys:
                raise LoginsError("a cookie's entry is malformed")
            cookies[name] = []
            for entry in keys:
                if not (isinstance(entry, list) and len(entry) == 2 and _is_digest(entry[0])):
                    raise LoginsError("a key's entry is malformed")
                at = entry[1]
                if isinstance(at, bool) or not isinstance(at, int | float):
                    raise LoginsError("a key's time is not a number")
                cookies[name].append(Key(entry[0], float(at)))
        return cls(secret, cookies)


def _is_digest(value: object) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


class FailureGate:
    """The failed logins being slowed down at this moment: each waits `FAILED_LOGIN_DELAY_S`
    before its answer, at most `at_once` at a time; one more is told at once to try again
    later (429). The right token never passes here: it is checked first and logs in at once,
    so nobody on the machine can keep the owner out."""

    def __init__(self, at_once: int = FAILED_LOGINS_AT_ONCE) -> None:
        self.at_once = at_once
        self.waiting = 0

    def __repr__(self) -> str:
        return f"FailureGate({self.waiting} of {self.at_once} waiting)"

    def enter(self) -> bool:
        """Whether one more failed login may wait its delay now (then `leave` after it)."""
        if self.waiting >= self.at_once:
            return False
        self.waiting += 1
        return True

    def leave(self) -> None:
        self.waiting -= 1
