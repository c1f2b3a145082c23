"""The injection suite (SPEC §16) for the console's login (issue 23 items 3 and 4), through a
real `bxctl up` box over plain HTTP, as a hostile local user would try it:

- Another server on 127.0.0.1 that the owner's browser visited received the cookie
  `bx_console` (browsers scope cookies by host, not port) and replays it from its own client:
  with no key, with the old `X-BX-Console: 1`, with a key from a login of its own, with the
  cookie as the key. Every route answers 401, the event stream and `POST /api/grants` included,
  and nothing changes; the owner's own client goes on working.
- Anyone on the machine sends wrong tokens, one after another or many at once: each wrong one
  is answered after a fixed delay (or at once with 429 when a few already wait), and the right
  token always logs in at once, never 429.

The page doing the same in real Chromium is tests/browser/test_injection_console.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from services.gatewayd.console.logins import FAILED_LOGIN_DELAY_S, FAILED_LOGINS_AT_ONCE
from tests.e2e.test_console_http import (
    KEY_HEADER,
    ROUTES,
    TIMEOUT,
    WRONG_TOKENS,
    Console,
    console_of,
    error_of,
)
from tests.support.e2e import box_up


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with box_up() as box:
        yield console_of(box)


def replays(console: Console) -> list[tuple[str, dict[str, str]]]:
    """The owner's cookie, replayed with each key a stranger could offer."""
    with console.client() as owner:
        cookie, key = console.cookie, console.key
        assert cookie is not None and key is not None
        assert owner.get("/api/sessions").status_code == 200
    with console.client():  # a login of the stranger's own: its key, another cookie
        other_key = console.key
        assert other_key is not None and other_key != key and console.cookie != cookie
    jar = {"cookie": f"bx_console={cookie}"}
    return [
        ("no key", jar),
        ("X-BX-Console: 1", {**jar, KEY_HEADER: "1"}),
        ("a key from another login", {**jar, KEY_HEADER: other_key}),
        ("the cookie as the key", {**jar, KEY_HEADER: cookie}),
        ("the key twice over", {**jar, KEY_HEADER: f"{key},{key}"}),
    ]


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_the_owners_cookie_replayed_without_its_own_key_opens_no_route_and_changes_nothing(
    console: Console, method: str, path: str, body: dict[str, object] | None
) -> None:
    with console.client() as owner:
        before = console.snapshot(owner)
        tried = replays(console)
        with console.client(logged_in=False) as thief:
            for how, headers in tried:
                sent = thief.request(
                    method, path, json=body, headers={**headers, "content-type": "application/json"}
                )
                assert "run `bxctl console`" in error_of(sent, 401), how
                assert "set-cookie" not in sent.headers, how
        assert console.snapshot(owner) == before
        assert owner.get("/api/sessions").status_code == 200  # the owner's pair still works
    assert not (console.home / "grants" / "r401.toml").exists()


def test_a_grant_written_with_the_replayed_cookie_is_refused_and_the_owner_can_still_write_one(
    console: Console,
) -> None:
    """The red team's round 3: the cookie from another port, and `POST /api/grants` → 201."""
    grant = {"id": "stolen", "tool": "shell", "mode": "allow", "path": "/"}
    tried = replays(console)
    with console.client(logged_in=False) as thief:
        for how, headers in tried:
            error_of(thief.post("/api/grants", json=grant, headers=headers), 401)
            with thief.stream("GET", "/api/events", headers=headers) as stream:
                assert stream.status_code == 401, how
    assert not (console.home / "grants" / "stolen.toml").exists()
    with console.client() as owner:
        mine = {"id": "owners-own", "tool": "read_file", "path": str(console.home / "workspace")}
        assert owner.post("/api/grants", json=mine).status_code == 201
        assert owner.delete(
            "/api/grants/owners-own", headers={"content-type": "application/json"}
        ).is_success


def test_ten_wrong_tokens_one_after_another_are_each_slowed_and_the_right_one_logs_in_at_once(
    console: Console,
) -> None:
    """The lockout of round 3: ten wrong tokens made the right one 429 for a minute."""
    with console.client(logged_in=False) as guesser:
        for n in range(10):
            sent = time.monotonic()
            wrong = guesser.post("/api/login", json={"token": WRONG_TOKENS[n % 2]})
            took = time.monotonic() - sent
            assert "bxctl console" in error_of(wrong, 401), n
            assert took >= FAILED_LOGIN_DELAY_S * 0.9, f"a wrong token answered in {took:.2f} s"
        sent = time.monotonic()
        right = guesser.post("/api/login", json={"token": console.token})
        took = time.monotonic() - sent
    assert right.status_code == 200, right.text
    assert took < FAILED_LOGIN_DELAY_S, f"the right token took {took:.2f} s"


def test_a_flood_of_wrong_tokens_at_once_never_keeps_the_right_token_out(console: Console) -> None:
    flood = 3 * FAILED_LOGINS_AT_ONCE
    answers: list[tuple[int, float]] = []
    lock = threading.Lock()

    def guess(n: int) -> None:
        with httpx.Client(base_url=console.base, timeout=TIMEOUT) as guesser:
            sent = time.monotonic()
            status = guesser.post("/api/login", json={"token": WRONG_TOKENS[n % 2]}).status_code
            with lock:
                answers.append((status, time.monotonic() - sent))

    guessers = [threading.Thread(target=guess, args=(n,)) for n in range(flood)]
    for thread in guessers:
        thread.start()
    rights: list[tuple[int, float]] = []
    try:
        with console.client(logged_in=False) as owner:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # until some of the flood were sent away
                with lock:
                    if any(status == 429 for status, _ in answers):
                        break
                time.sleep(0.01)
            for _ in range(3):  # while the flood waits its delay
                sent = time.monotonic()
                right = owner.post("/api/login", json={"token": console.token})
                rights.append((right.status_code, time.monotonic() - sent))
                keyed = {KEY_HEADER: right.json()["key"]}
                assert owner.get("/api/sessions", headers=keyed).status_code == 200
    finally:
        for thread in guessers:
            thread.join(timeout=30)
    assert [status for status, _ in rights] == [200, 200, 200]
    assert all(took < FAILED_LOGIN_DELAY_S for _, took in rights), rights
    assert len(answers) == flood
    assert {status for status, _ in answers} == {401, 429}, answers  # a few wait, more are told
    slowed = [took for status, took in answers if status == 401]
    assert all(took >= FAILED_LOGIN_DELAY_S * 0.9 for took in slowed), answers
