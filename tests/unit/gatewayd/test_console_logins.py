"""The console's logins (SPEC §12.1, issue 23 items 3 and 4), in process: a cookie opens
nothing without a key its login paired with it, a key from another login or from no login
opens nothing, logout forgets the pair, the table forgets what is old and keeps to its bounds,
its saved form holds no cookie and no key and is read back strictly; and the gate of failed
logins lets a few wait at a time and never stands before the right token.
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path

import pytest

from services.gatewayd.console.access import Keys
from services.gatewayd.console.login_routes import load
from services.gatewayd.console.logins import (
    COOKIES_KEPT,
    FAILED_LOGINS_AT_ONCE,
    KEYS_PER_COOKIE,
    LIFETIME_S,
    FailureGate,
    Logins,
    LoginsError,
)

SECRET = Keys("HGEBqNydnTGf3w5NZwRakS5WcLooDqexvWYeqE6YLPw").logins_secret
NOW = 1_800_000_000.0


def logged_in(logins: Logins, n: int, cookie: str | None = None) -> tuple[str, str]:
    """The cookie and key of a login (the `n`th value of each the shell would have drawn)."""
    key = f"key-{n}"
    return logins.login(cookie, f"cookie-{n}", key, NOW), key


def test_a_login_pairs_a_new_key_with_a_new_cookie_and_only_the_pair_opens() -> None:
    logins = Logins(SECRET)
    cookie, key = logged_in(logins, 1)
    assert cookie == "cookie-1"
    assert logins.paired(cookie, key, NOW)
    for offered_cookie, offered_key in [
        (cookie, None),  # the cookie alone, replayed by another server on 127.0.0.1
        (cookie, ""),
        (cookie, "1"),  # the old header's value
        (cookie, key[:-1]),
        (cookie, key + "x"),
        (cookie, cookie),
        (None, key),
        ("", key),
        (key, cookie),
        ("cookie-2", key),
    ]:
        assert not logins.paired(offered_cookie, offered_key, NOW), (offered_cookie, offered_key)


def test_a_key_from_another_login_opens_nothing_with_this_cookie() -> None:
    logins = Logins(SECRET)
    first, first_key = logged_in(logins, 1)
    second, second_key = logged_in(logins, 2)
    assert first != second
    assert logins.paired(first, first_key, NOW) and logins.paired(second, second_key, NOW)
    assert not logins.paired(first, second_key, NOW)
    assert not logins.paired(second, first_key, NOW)


def test_a_second_tab_of_the_same_browser_keeps_the_cookie_and_both_keys_work() -> None:
    logins = Logins(SECRET)
    cookie, first_key = logged_in(logins, 1)
    again, second_key = logged_in(logins, 2, cookie)
    assert again == cookie
    assert logins.paired(cookie, first_key, NOW) and logins.paired(cookie, second_key, NOW)


def test_a_login_carrying_a_cookie_no_login_gave_gets_a_cookie_of_its_own() -> None:
    """A cookie set by someone else (another port of 127.0.0.1 may set one) is never paired."""
    logins = Logins(SECRET)
    cookie, key = logged_in(logins, 1, "planted-by-another-port")
    assert cookie == "cookie-1"
    assert not logins.paired("planted-by-another-port", key, NOW)


def test_logout_with_the_pair_forgets_the_cookie_and_every_key_paired_with_it() -> None:
    logins = Logins(SECRET)
    cookie, first_key = logged_in(logins, 1)
    _, second_key = logged_in(logins, 2, cookie)
    other, other_key = logged_in(logins, 3)
    assert logins.logout(cookie, first_key, NOW)
    assert not logins.paired(cookie, first_key, NOW)
    assert not logins.paired(cookie, second_key, NOW)
    assert logins.paired(other, other_key, NOW)  # another browser stays in
    assert not logins.logout(cookie, first_key, NOW)


def test_the_cookie_alone_logs_nobody_out() -> None:
    logins = Logins(SECRET)
    cookie, key = logged_in(logins, 1)
    for offered in (None, "", "1", "key-2"):
        assert not logins.logout(cookie, offered, NOW)
    assert logins.paired(cookie, key, NOW)


def test_a_key_lives_as_long_as_the_cookie_and_no_longer() -> None:
    logins = Logins(SECRET)
    cookie, key = logged_in(logins, 1)
    assert logins.paired(cookie, key, NOW + LIFETIME_S - 1)
    assert not logins.paired(cookie, key, NOW + LIFETIME_S)
    logins.login(None, "cookie-9", "key-9", NOW + LIFETIME_S)  # a login prunes the old
    assert repr(logins) == "Logins(1 cookies, 1 keys)"


def test_an_old_cookie_carried_to_a_login_is_not_kept() -> None:
    logins = Logins(SECRET)
    cookie, _ = logged_in(logins, 1)
    later = NOW + LIFETIME_S
    assert logins.login(cookie, "cookie-2", "key-2", later) == "cookie-2"


def test_a_cookie_keeps_its_newest_keys_and_the_table_its_newest_cookies() -> None:
    logins = Logins(SECRET)
    cookie, first_key = logged_in(logins, 0)
    keys = [first_key] + [logged_in(logins, n, cookie)[1] for n in range(1, KEYS_PER_COOKIE + 1)]
    assert not logins.paired(cookie, keys[0], NOW)
    assert all(logins.paired(cookie, key, NOW) for key in keys[1:])
    pairs = [logged_in(logins, 100 + n) for n in range(COOKIES_KEPT)]
    assert not logins.paired(cookie, keys[-1], NOW)  # the oldest browser forgotten
    assert all(logins.paired(c, k, NOW) for c, k in pairs)


def test_a_login_that_comes_back_makes_its_cookie_the_newest() -> None:
    logins = Logins(SECRET)
    cookie, _ = logged_in(logins, 0)
    for n in range(1, COOKIES_KEPT):
        logged_in(logins, n)
    _, key = logged_in(logins, 999, cookie)  # the first browser again
    logged_in(logins, 1000)  # one too many: the second browser is the oldest now
    assert logins.paired(cookie, key, NOW)
    assert not logins.paired("cookie-1", "key-1", NOW)


def test_every_kept_key_of_the_cookie_is_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logins = Logins(SECRET)
    cookie, key = logged_in(logins, 1)
    logged_in(logins, 2, cookie)
    logged_in(logins, 3, cookie)
    compared: list[tuple[str, str]] = []
    original = hmac.compare_digest

    def compare_digest(a: str, b: str) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare_digest)
    assert logins.paired(cookie, key, NOW)  # the first: the other two are compared still
    assert len(compared) == 3


def test_the_saved_table_holds_no_cookie_and_no_key_and_reads_back_the_same() -> None:
    logins = Logins(SECRET)
    cookie, key = logged_in(logins, 1)
    saved = logins.dumps()
    assert cookie.encode() not in saved and key.encode() not in saved
    again = Logins.loads(SECRET, saved)
    assert again.paired(cookie, key, NOW) and again.dumps() == saved


def test_the_saved_table_under_another_token_matches_nothing() -> None:
    logins = Logins(SECRET)
    cookie, key = logged_in(logins, 1)
    other = Keys("another-token-entirely-0123456789abcdefghijk").logins_secret
    assert not Logins.loads(other, logins.dumps()).paired(cookie, key, NOW)


DIGEST = "0" * 64


@pytest.mark.parametrize(
    "saved",
    [
        b"",
        b"not json",
        b"[]",
        b'{"version": 1}',
        b'{"version": 2, "cookies": {}}',
        b'{"version": 1, "cookies": [], "more": 1}',
        b'{"version": 1, "cookies": []}',
        json.dumps({"version": 1, "cookies": {"short": [[DIGEST, 1.0]]}}).encode(),
        json.dumps({"version": 1, "cookies": {"A" * 64: [[DIGEST, 1.0]]}}).encode(),
        json.dumps({"version": 1, "cookies": {DIGEST: []}}).encode(),
        json.dumps({"version": 1, "cookies": {DIGEST: [[DIGEST]]}}).encode(),
        json.dumps({"version": 1, "cookies": {DIGEST: [["x", 1.0]]}}).encode(),
        json.dumps({"version": 1, "cookies": {DIGEST: [[DIGEST, "1"]]}}).encode(),
        json.dumps({"version": 1, "cookies": {DIGEST: [[DIGEST, True]]}}).encode(),
        b"[" * 100_000,
    ],
)
def test_a_saved_table_that_this_code_did_not_write_is_refused_with_why(saved: bytes) -> None:
    with pytest.raises(LoginsError):
        Logins.loads(SECRET, saved)


# --- the gate of failed logins ------------------------------------------------------------------


def test_a_few_failed_logins_wait_at_a_time_and_one_more_is_told_at_once() -> None:
    gate = FailureGate()
    assert FAILED_LOGINS_AT_ONCE == 4
    assert [gate.enter() for _ in range(FAILED_LOGINS_AT_ONCE)] == [True] * FAILED_LOGINS_AT_ONCE
    assert not gate.enter()
    assert repr(gate) == "FailureGate(4 of 4 waiting)"
    gate.leave()
    assert gate.enter() and not gate.enter()
    for _ in range(FAILED_LOGINS_AT_ONCE):
        gate.leave()
    assert gate.waiting == 0 and gate.enter()


# --- the table's file (the shell's load) --------------------------------------------------------


def test_the_saved_file_is_read_back_and_one_that_does_not_read_starts_afresh_saying_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    keys = Keys("HGEBqNydnTGf3w5NZwRakS5WcLooDqexvWYeqE6YLPw")
    path = tmp_path / "console-logins.json"
    assert repr(load(path, keys)) == "Logins(0 cookies, 0 keys)"  # none yet: nothing said
    assert caplog.records == []
    logins = Logins(keys.logins_secret)
    cookie, key = logged_in(logins, 1)
    path.write_bytes(logins.dumps())
    assert load(path, keys).paired(cookie, key, NOW)
    path.write_bytes(b"{torn")
    assert repr(load(path, keys)) == "Logins(0 cookies, 0 keys)"
    assert "every page logs in again" in caplog.text
