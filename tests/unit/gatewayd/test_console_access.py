"""Who may use the console (SPEC §12.1), rule by rule, in process: the Host check that stops
DNS rebinding (421), the rules for a request that changes something (403), and the owner's
token. The logins' table and the gate of failed logins are tests/unit/gatewayd/
test_console_logins.py; the real server is tested over HTTP in tests/e2e/test_console_http.py.
"""

from __future__ import annotations

import hmac
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gatewayd.console import access
from services.gatewayd.console.access import Keys, host_problem, mutation_problem

PORT = 8420
TOKEN = "HGEBqNydnTGf3w5NZwRakS5WcLooDqexvWYeqE6YLPw"  # the shape `bxctl init` makes
LOOPBACK = (f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}")
OWN = f"127.0.0.1:{PORT}"
JSON_CHANGE = {"content-type": "application/json"}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


# --- the Host check -----------------------------------------------------------------------------


@pytest.mark.parametrize("host", LOOPBACK)
def test_the_three_loopback_forms_with_the_consoles_port_are_the_console(host: str) -> None:
    assert host_problem(host, PORT, ()) is None


@pytest.mark.parametrize(
    "host",
    [
        f"127.0.0.1:{PORT + 1}",  # another port: another program on this machine
        f"localhost:{PORT + 1}",
        f"[::1]:{PORT + 1}",
        "127.0.0.1",  # no port: port 80, which is not the console
        "localhost",
        "[::1]",
        f"127.0.0.1:0{PORT}",  # the same number, written another way
        f"127.0.0.1:{PORT}:{PORT}",
        f"127.0.0.1.evil.com:{PORT}",  # a name that begins with 127. (OpenClaw's mistake)
        f"localhost.evil:{PORT}",
        f"evil.localhost:{PORT}",
        f"127.0.0.2:{PORT}",
        f"127.1:{PORT}",
        f"0.0.0.0:{PORT}",
        f"[::ffff:127.0.0.1]:{PORT}",
        f"[0:0:0:0:0:0:0:1]:{PORT}",
        f" 127.0.0.1:{PORT}",
        f"127.0.0.1:{PORT} ",
        f"user@127.0.0.1:{PORT}",
        f"127.0.0.1:{PORT}/",
        f"evil.example:{PORT}",
        "evil.example",
    ],
)
def test_any_other_host_is_refused_with_a_reason(host: str) -> None:
    problem = host_problem(host, PORT, ())
    assert problem is not None and "only to its own address" in problem


@pytest.mark.parametrize("host", [None, ""])
def test_no_host_header_is_refused(host: str | None) -> None:
    assert host_problem(host, PORT, ()) == "no Host header"


def test_a_refused_host_is_quoted_cut_short_in_the_reason() -> None:
    problem = host_problem("x" * 5000, PORT, ())
    assert problem is not None and len(problem) < 200


@pytest.mark.parametrize(
    "host",
    ["box.example", "box.example:443", "box.example:8443", f"box.example:{PORT}", "BOX.Example"],
)
def test_a_name_in_allowed_hosts_is_taken_with_any_port_or_none_in_any_case(host: str) -> None:
    assert host_problem(host, PORT, ("box.example",)) is None
    assert host_problem(host, PORT, ("Box.EXAMPLE",)) is None


@pytest.mark.parametrize(
    "host",
    [
        "box.example.evil.com",
        "evil.box.example",
        "box.example.",
        "box.exampl",
        "box.example:",  # a colon with no port
        "box.example:x443",
        "box.example:443:443",
        "box.example:-1",
        "box.example: 443",
        "box.example:²",  # a digit to str.isdigit, and no port
        "box.example:٤٤٣",
        "[box.example]:443",
        "user@box.example",
        "box.example/x",
    ],
)
def test_an_allowed_name_must_be_the_whole_name_and_any_port_well_formed(host: str) -> None:
    assert host_problem(host, PORT, ("box.example",)) is not None


def test_allowed_hosts_add_names_and_never_take_the_loopback_forms_away() -> None:
    for host in LOOPBACK:
        assert host_problem(host, PORT, ("box.example",)) is None
    assert host_problem("other.example", PORT, ("box.example",)) is not None


ALLOWED_NAMES = ("box.example", "tunnel.local")
HOST_CHARS = string.ascii_letters + string.digits + ".:-[]@/ _%²٤"
PIECES = st.sampled_from(
    [*LOOPBACK, *ALLOWED_NAMES, "127.0.0.1", "localhost", "[::1]", ":", str(PORT), ".evil",
     "evil.", "0", "١", "²", " ", "[", "]", "@", "BOX.EXAMPLE", ":443"]
)  # fmt: skip


def accepted_by_spec(host: str) -> bool:
    """SPEC §12.1, written out again: one of the loopback forms with the console's port, or a
    name of allowed_hosts (any case), alone or with a port of ASCII digits."""
    if host in LOOPBACK:
        return True
    name, colon, port = host.partition(":")
    well_formed_port = not colon or (port.isascii() and port.isdigit())
    return name.lower() in ALLOWED_NAMES and well_formed_port


@given(st.one_of(st.text(HOST_CHARS, max_size=40), st.lists(PIECES, max_size=5).map("".join)))
def test_a_host_is_accepted_only_when_it_is_exactly_one_of_the_allowed_forms(host: str) -> None:
    assert (host_problem(host, PORT, ALLOWED_NAMES) is None) == accepted_by_spec(host), host


@given(st.text(max_size=60))
def test_without_allowed_hosts_only_the_three_loopback_forms_are_ever_accepted(host: str) -> None:
    assert (host_problem(host, PORT, ()) is None) == (host in LOOPBACK)


# --- what a change needs ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "HEAD", "OPTIONS"])
def test_a_request_that_changes_nothing_passes_whatever_it_carries(method: str) -> None:
    headers = {"content-type": "text/plain", "origin": "http://evil.example"}
    assert mutation_problem(method, headers, OWN, ()) is None


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_every_changing_method_needs_json(method: str) -> None:
    assert mutation_problem(method, JSON_CHANGE, OWN, ()) is None
    assert mutation_problem(method, {}, OWN, ()) is not None
    assert mutation_problem(method, {"x-bx-console": "1"}, OWN, ()) is not None


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON",
     " application/json ;charset=UTF-8"],
)  # fmt: skip
def test_json_is_taken_with_or_without_its_parameters(content_type: str) -> None:
    assert mutation_problem("POST", {"content-type": content_type}, OWN, ()) is None


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",  # the three a page of another site may send without asking (CORS)
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain; charset=utf-8",
        "application/jsonx",
        "application/json-patch+json",
        "application/x-json",
        "text/json",
        "",
        "application/json, text/plain",
    ],
)
def test_anything_but_json_is_refused_for_a_change(content_type: str) -> None:
    assert mutation_problem("POST", {"content-type": content_type}, OWN, ()) == (
        "a change must be sent as application/json"
    )


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "null",  # a sandboxed frame or a file: page
        f"http://127.0.0.1:{PORT + 1}",
        f"https://127.0.0.1:{PORT}",  # the console is not served over TLS itself
        f"http://localhost:{PORT}",  # another origin than the one the page was loaded from
        f"http://127.0.0.1.evil.com:{PORT}",
        f"http://127.0.0.1:{PORT}/",
        "",
    ],
)
def test_a_change_from_any_origin_but_the_consoles_own_is_refused(origin: str) -> None:
    problem = mutation_problem("POST", {**JSON_CHANGE, "origin": origin}, OWN, ())
    assert problem is not None and problem.startswith("a change may come only from")


@pytest.mark.parametrize("host", LOOPBACK)
def test_a_change_from_the_consoles_own_origin_or_with_no_origin_passes(host: str) -> None:
    assert mutation_problem("POST", {**JSON_CHANGE, "origin": f"http://{host}"}, host, ()) is None
    assert mutation_problem("DELETE", JSON_CHANGE, host, ()) is None


def test_behind_an_allowed_name_the_page_may_come_over_http_or_https() -> None:
    allowed = ("box.example",)
    for origin in ("https://box.example", "http://box.example"):
        headers = {**JSON_CHANGE, "origin": origin}
        assert mutation_problem("POST", headers, "box.example", allowed) is None
    headers = {**JSON_CHANGE, "origin": "https://box.example:8443"}
    assert mutation_problem("POST", headers, "box.example", allowed) is not None
    assert mutation_problem("POST", headers, "box.example:8443", allowed) is None


def test_a_foreign_origin_is_quoted_cut_short() -> None:
    problem = mutation_problem("POST", {**JSON_CHANGE, "origin": "x" * 5000}, OWN, ())
    assert problem is not None and len(problem) < 200


# --- the headers on every response --------------------------------------------------------------


def test_the_security_headers_are_exactly_the_specs() -> None:
    assert dict(access.SECURITY_HEADERS) == {
        b"content-security-policy": CSP.encode(),
        b"x-frame-options": b"DENY",
        b"referrer-policy": b"no-referrer",
        b"x-content-type-options": b"nosniff",
    }
    assert access.NO_STORE == (b"cache-control", b"no-store")


# --- the token ----------------------------------------------------------------------------------


def test_the_token_matches_only_itself() -> None:
    keys = Keys(TOKEN)
    assert keys.token_matches(TOKEN)
    for offered in ("", TOKEN[:-1], f"{TOKEN}x", TOKEN.lower(), f" {TOKEN}", "é"):
        assert not keys.token_matches(offered), offered


def test_the_logins_secret_is_no_token_stays_across_restarts_and_dies_with_the_token() -> None:
    keys = Keys(TOKEN)
    assert TOKEN.encode() not in keys.logins_secret and len(keys.logins_secret) == 32
    assert Keys(TOKEN).logins_secret == keys.logins_secret  # gatewayd restarted
    assert Keys(TOKEN[::-1]).logins_secret != keys.logins_secret  # a new token


def test_the_keys_never_show_the_token() -> None:
    keys = Keys(TOKEN)
    assert TOKEN not in repr(keys) and TOKEN not in str(keys)


def test_the_token_is_compared_in_constant_time_by_hmac(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def compare_digest(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare_digest)  # the module access uses
    keys = Keys(TOKEN)
    assert keys.token_matches(TOKEN) and not keys.token_matches("wrong")
    assert compared == [(TOKEN.encode(), TOKEN.encode()), (b"wrong", TOKEN.encode())]
