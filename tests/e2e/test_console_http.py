"""The owner console over plain HTTP (SPEC §12.1, §12.3; issue 12's security tests), against a
real `bxctl up` box with the fake model: who gets in (Host 421, cookie and key 401, the rules
for a change 403), the headers on every response, that the token is never in a
log line or a response body, that no CORS is ever granted; then each API route and the live
stream with its `Last-Event-ID` resume. The page itself is driven in a browser in
tests/browser/.

One box serves most of this module (each test uses sessions, grants and notes of its own);
every response any test gets passes `checked`: the §12.1 headers, no CORS, no token, no 500.
A console turned off needs a box of its own; a taken port is test_console_ports.py's.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest

from bxcore.home.layout import Home
from bxcore.mcp_tools import ToolDef
from bxctl import mcp_pins
from tests.fakes.model_server import Answer
from tests.support.box import box_home, bxctl, wait_until
from tests.support.brokerd import args
from tests.support.daemons import free_port, init_home
from tests.support.e2e import UpBox, box_up
from tests.support.mcp import fake, trust, wait_listed

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}
STATIC = Path(__file__).resolve().parents[2] / "services" / "gatewayd" / "console" / "static"
KEY_HEADER = "X-BX-Console"
WRONG_TOKENS = ("wrong-token-0123456789abcdefghijklmnopqrstu", "another-wrong-guess-zyxwvut")
TIMEOUT = httpx.Timeout(10.0)

#: Every route of SPEC §12.3 but login and logout, with a body a logged-in page could send.
ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/api/sessions", None),
    ("GET", "/api/tokens", None),
    ("GET", "/api/sessions/r401/history?after=0", None),
    ("POST", "/api/sessions/r401/messages", {"text": "refused 401"}),
    ("POST", "/api/sessions/r401/cancel", {}),
    ("GET", "/api/pending", None),
    ("POST", "/api/approvals/a-nonesuch", {"approve": True, "scope": "once"}),
    ("GET", "/api/ledger?after=0&session=r401&kind=decision", None),
    ("POST", "/api/ledger/verify", {}),
    ("GET", "/api/grants", None),
    ("POST", "/api/grants", {"id": "r401", "tool": "read_file", "path": "/tmp/r401"}),
    ("DELETE", "/api/grants/memory", None),
    ("POST", "/api/explain", {"session": "r401", "tool": "read_file", "arguments": "{}"}),
    ("GET", "/api/memory?q=milk", None),
    ("GET", "/api/services", None),
    ("POST", "/api/services/memoryd/restart", {}),
    ("GET", "/api/services/loopd/logs?n=5", None),
    ("GET", "/api/events", None),
    ("GET", "/api/jobs", None),
    ("POST", "/api/jobs/r401/run", {}),
    ("POST", "/api/jobs/r401/enabled", {"enabled": False}),
]


# --- what every response must be ----------------------------------------------------------------


def secure_headers_on(response: httpx.Response) -> None:
    """The §12.1 headers, each once and exactly; `no-store` on /api; no CORS header at all."""
    where = (response.request.method, response.url, response.status_code)
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get_list(name) == [value], (name, where)
    if response.url.path.startswith("/api"):
        assert response.headers.get_list("cache-control") == ["no-store"], where
    cors = [name for name in response.headers if name.lower().startswith("access-control-")]
    assert cors == [], (cors, where)


@dataclass
class Console:
    """The box's console as a plain HTTP client sees it."""

    box: UpBox
    port: int
    token: str
    cookie: str | None = None
    key: str | None = None

    @property
    def home(self) -> Path:
        return self.box.home

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def checked(self, response: httpx.Response) -> None:
        """Every response of this module: headers, no 500, and the token in no body."""
        secure_headers_on(response)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            response.read()
            assert self.token.encode() not in response.content, response.url
            assert self.token not in str(response.headers), response.url
        assert response.status_code < 500, (response.url, response.status_code, response.content)

    @contextlib.contextmanager
    def client(
        self, *, logged_in: bool = True, source: str | None = None
    ) -> Iterator[httpx.Client]:
        """A client of the console; from `source` (another loopback address) if given. Logged
        in, it sends the key its login gave on every request, as the page does."""
        transport = httpx.HTTPTransport(local_address=source) if source else None
        with httpx.Client(
            base_url=self.base,
            timeout=TIMEOUT,
            transport=transport,
            event_hooks={"response": [self.checked]},
        ) as client:
            if logged_in:
                response = client.post("/api/login", json={"token": self.token})
                assert response.status_code == 200, response.text
                self.cookie = client.cookies["bx_console"]
                self.key = response.json()["key"]
                client.headers[KEY_HEADER] = self.key
            yield client

    def snapshot(self, client: httpx.Client) -> dict[str, Any]:
        """What a refused request must not have changed: grant files, the services' pids,
        the sessions loopd knows, what the model was asked, the pending approvals."""
        services = client.get("/api/services").json()["services"]
        sessions = client.get("/api/sessions").json()["sessions"]
        return {
            "grants": sorted(path.name for path in (self.home / "grants").iterdir()),
            "pids": {service["name"]: service["pid"] for service in services},
            "sessions": sorted(session["session"] for session in sessions),
            "model requests": len(self.box.model.fake.requests),
            "pending": client.get("/api/pending").json()["approvals"],
        }


def console_of(box: UpBox) -> Console:
    """The console where gatewayd serves it (config.toml's port may have been taken)."""
    port = urlsplit(box.status()["console"]).port
    assert port is not None
    token = (box.home / "keys" / "console.token").read_text().strip()
    return Console(box, port, token)


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with box_up() as box:
        yield console_of(box)


@pytest.fixture
def owner(console: Console) -> Iterator[httpx.Client]:
    """A client logged in as the owner."""
    with console.client() as client:
        yield client


@pytest.fixture
def stranger(console: Console) -> Iterator[httpx.Client]:
    """A client with no cookie."""
    with console.client(logged_in=False) as client:
        yield client


def error_of(response: httpx.Response, status: int) -> str:
    """The response's `{"error": ...}`, once its status is `status`."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"] and isinstance(body["error"], str) and body["error"], body
    message: str = body["error"]
    return message


# --- the live stream, read as a browser's EventSource reads it -----------------------------------


@dataclass(frozen=True)
class Event:
    id: str | None
    name: str
    data: str

    @property
    def n(self) -> int:
        assert self.id is not None
        return int(self.id.rsplit("-", 1)[1])

    def json(self) -> Any:
        return json.loads(self.data)


class EventStream:
    def __init__(self, response: httpx.Response, token: str) -> None:
        self.response = response
        self.token = token
        self._lines = response.iter_lines()

    def next(self) -> Event:
        """The next event (comments skipped); httpx's read timeout bounds each wait."""
        fields: dict[str, str] = {}
        for line in self._lines:
            assert self.token not in line
            if line == "":
                if "event" in fields or "data" in fields:
                    return Event(fields.get("id"), fields.get("event", "message"), fields["data"])
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields[name] = (
                f"{fields[name]}\n{value}" if name == "data" and name in fields else value
            )
        raise EOFError("the stream ended")

    def until(self, last: Callable[[Event], bool], timeout: float = 30.0) -> list[Event]:
        """The events up to and including the first for which `last` is true."""
        deadline = time.monotonic() + timeout
        found: list[Event] = []
        while time.monotonic() < deadline:
            event = self.next()
            found.append(event)
            if last(event):
                return found
        raise TimeoutError(f"not within {timeout} s; got {found}")


@contextlib.contextmanager
def events(
    client: httpx.Client, token: str, last_event_id: str | None = None
) -> Iterator[EventStream]:
    headers: dict[bytes, bytes] = {}
    if last_event_id is not None:  # as bytes: a test sends ids no browser would
        headers[b"Last-Event-ID"] = last_event_id.encode("latin-1")
    with client.stream("GET", "/api/events", headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        yield EventStream(response, token)


def turn_end_of(session: str) -> Callable[[Event], bool]:
    def ended(event: Event) -> bool:
        if event.name != "turn":
            return False
        data = event.json()
        return bool(data["session"] == session and data["event"]["kind"] == "turn_end")

    return ended


def kinds_of(session: str, found: list[Event]) -> list[str]:
    """The kinds of `session`'s turn events among `found`, in order."""
    turns = [event.json() for event in found if event.name == "turn"]
    return [turn["event"]["kind"] for turn in turns if turn["session"] == session]


def history_of_turn(client: httpx.Client, session: str, turn: int) -> list[dict[str, Any]]:
    """The events of `turn`, polled from the API until it has ended."""

    def ended() -> list[dict[str, Any]] | None:
        found = client.get(f"/api/sessions/{session}/history")
        assert found.status_code == 200, found.text
        mine = [event for event in found.json()["events"] if event["turn"] == turn]
        return mine if mine and mine[-1]["event"]["kind"] == "turn_end" else None

    history: list[dict[str, Any]] = wait_until(ended, 30, f"turn {turn} of {session} ended")
    return history


def send(client: httpx.Client, session: str, text: str) -> dict[str, Any]:
    sent = client.post(f"/api/sessions/{session}/messages", json={"text": text})
    assert sent.status_code == 202, sent.text
    answer: dict[str, Any] = sent.json()
    assert answer["session"] == session
    return answer


# --- 401: no cookie, no API (the cookie without its key: tests/e2e/test_injection_console.py) ---


@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=[f"{m} {p}" for m, p, _ in ROUTES])
def test_every_api_route_without_the_cookie_is_401_even_with_the_key_and_changes_nothing(
    console: Console,
    owner: httpx.Client,
    stranger: httpx.Client,
    method: str,
    path: str,
    body: dict[str, Any] | None,
) -> None:
    before = console.snapshot(owner)
    assert console.cookie is not None and console.key is not None
    for cookie in (None, f"bx_console={console.token}", f"bx_console={console.cookie[:-1]}",
                   "bx_console=", f"other={console.cookie}",
                   f"bx_console={console.key}"):  # fmt: skip
        headers = {"content-type": "application/json", KEY_HEADER: console.key}
        if cookie is not None:
            headers["cookie"] = cookie
        sent = stranger.request(method, path, json=body, headers=headers)
        assert "run `bxctl console`" in error_of(sent, 401), cookie
        assert "set-cookie" not in sent.headers
    assert console.snapshot(owner) == before


def test_the_api_answers_with_the_cookie_and_a_bare_api_path_needs_it_too(
    owner: httpx.Client, stranger: httpx.Client
) -> None:
    for method, path, _ in ROUTES:
        if method == "GET" and path != "/api/events":
            assert owner.get(path).status_code == 200, path
    error_of(stranger.get("/api"), 401)
    error_of(stranger.get("/api/"), 401)
    error_of(stranger.get("/api/nonesuch"), 401)
    error_of(owner.get("/api/nonesuch"), 404)


# --- 421: the Host check -----------------------------------------------------------------------


def wrong_hosts(port: int) -> list[str]:
    return [
        "evil.example",
        f"evil.example:{port}",
        f"127.0.0.1.evil.com:{port}",
        f"localhost.evil:{port}",
        f"127.0.0.1:{port + 1}",
        "127.0.0.1",
        f"127.0.0.2:{port}",
    ]


def test_a_wrong_host_is_421_and_nothing_is_served_not_the_page_nor_a_file_nor_the_api(
    console: Console, owner: httpx.Client
) -> None:
    static = sorted(
        "/static/" + path.relative_to(STATIC).as_posix()
        for path in STATIC.rglob("*")
        if path.is_file() and not path.name.startswith(".")
    )
    before = console.snapshot(owner)
    for host in wrong_hosts(console.port):
        header = {"Host": host}
        for path in ["/", *static, "/static/nonesuch.js", "/api/sessions", "/api/events"]:
            sent = owner.get(path, headers=header)
            assert "only to its own address" in error_of(sent, 421), (host, path)
            assert b"<html" not in sent.content.lower() and b"<!doctype" not in sent.content
        change = {**header}
        login = owner.post("/api/login", json={"token": console.token}, headers=change)
        error_of(login, 421)
        assert "set-cookie" not in login.headers
        message = owner.post("/api/sessions/r421/messages", json={"text": "x"}, headers=change)
        error_of(message, 421)
        removal = owner.delete(
            "/api/grants/memory", headers={**change, "content-type": "application/json"}
        )
        error_of(removal, 421)
    assert console.snapshot(owner) == before


def test_the_three_loopback_names_with_the_port_are_served(
    console: Console, owner: httpx.Client
) -> None:
    for host in (f"127.0.0.1:{console.port}", f"localhost:{console.port}", f"[::1]:{console.port}"):
        assert owner.get("/api/sessions", headers={"Host": host}).status_code == 200, host
        page = owner.get("/", headers={"Host": host})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")


# --- 403: what a change needs -------------------------------------------------------------------


def refused_changes(console: Console) -> list[tuple[str, str, dict[str, Any]]]:
    """Changes a page of another site could try, each with a visible effect were it done."""
    return [
        ("POST", "/api/grants", {"id": "r403", "tool": "read_file", "path": "/tmp/r403"}),
        ("DELETE", "/api/grants/memory", {}),
        ("POST", "/api/sessions/r403/messages", {"text": "refused 403"}),
        ("POST", "/api/services/memoryd/restart", {}),
        ("POST", "/api/login", {"token": console.token}),
    ]


def attempts(port: int, body: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Each way the console must refuse a change: what it is, what the refusal names, and
    the arguments that make it with httpx."""
    raw = json.dumps(body)
    as_json = {"content-type": "application/json"}
    form = {key: str(value) for key, value in body.items()}
    foreign = ("http://evil.example", "null", f"http://127.0.0.1.evil.com:{port}",
               f"http://127.0.0.1:{port + 1}")  # fmt: skip
    return [
        *((f"Origin {origin}", "own page",
           {"content": raw, "headers": {**as_json, "Origin": origin}})
          for origin in foreign),
        ("a urlencoded form", "application/json", {"data": form}),
        ("a multipart form", "application/json", {"data": form, "files": {"f": ("f.txt", b"x")}}),
        ("text/plain", "application/json",
         {"content": raw, "headers": {"content-type": "text/plain"}}),
        ("no content type", "application/json", {"content": raw}),
    ]  # fmt: skip


def test_a_change_without_the_header_from_another_origin_or_as_a_form_is_403_and_changes_nothing(
    console: Console, owner: httpx.Client
) -> None:
    before = console.snapshot(owner)
    for method, path, body in refused_changes(console):
        for how, named, arguments in attempts(console.port, body):
            sent = owner.request(method, path, **arguments)
            assert named in error_of(sent, 403), (path, how)
            assert "set-cookie" not in sent.headers, (path, how)
    assert console.snapshot(owner) == before
    assert (console.home / "grants" / "memory.toml").exists()
    assert not (console.home / "grants" / "r403.toml").exists()
    history = owner.get("/api/sessions/r403/history").json()
    assert history.get("events", []) == []
    assert console.box.model.requests_for("refused 403") == []


def test_the_consoles_own_origin_may_change_things(console: Console, owner: httpx.Client) -> None:
    for host in (f"127.0.0.1:{console.port}", f"localhost:{console.port}"):
        headers = {"Host": host, "Origin": f"http://{host}"}
        assert owner.post("/api/ledger/verify", json={}, headers=headers).status_code == 200


# --- the headers on every response, and no CORS ever -------------------------------------------


def test_every_kind_of_response_carries_the_security_headers(
    console: Console, owner: httpx.Client, stranger: httpx.Client
) -> None:
    static = [p for p in STATIC.rglob("*") if p.is_file() and not p.name.startswith(".")]
    responses = [
        stranger.get("/"),
        stranger.head("/"),
        *(stranger.get("/static/" + p.relative_to(STATIC).as_posix()) for p in static),
        stranger.get("/static/nonesuch.js"),  # 404, a file
        stranger.get("/nonesuch"),  # 404, a page
        owner.get("/api/nonesuch"),  # 404, the API
        stranger.get("/api/sessions"),  # 401
        owner.post("/api/grants", content="{}", headers={"content-type": "text/plain"}),  # 403
        stranger.get("/api/login"),  # 405
        owner.put("/api/grants", json={}),  # 405
        stranger.get("/", headers={"Host": "evil.example"}),  # 421
        owner.post("/api/grants", json={"id": "x", "tool": "nope"}),  # 400
        owner.get("/api/sessions"),  # 200, the API
    ]
    with events(owner, console.token) as stream:  # 200, the stream
        secure_headers_on(stream.response)
    statuses = sorted({response.status_code for response in responses})
    # 429: tests/e2e/test_injection_console.py
    assert statuses == [200, 400, 401, 403, 404, 405, 421]
    for response in responses:
        secure_headers_on(response)
    assert static, "the page ships files"
    for path in static:
        served = stranger.get("/static/" + path.relative_to(STATIC).as_posix())
        assert served.status_code == 200 and served.content == path.read_bytes()


def test_no_cors_is_ever_granted_not_even_to_a_preflight(
    console: Console, owner: httpx.Client
) -> None:
    preflight = {
        "Origin": "http://evil.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, x-bx-console",
    }
    for path in ("/", "/api/login", "/api/grants", "/api/sessions/s/messages", "/api/events"):
        answer = owner.options(path, headers=preflight)
        assert answer.status_code in (401, 404, 405), (path, answer.status_code)
        assert not any(name.startswith("access-control-") for name in answer.headers)
    read = owner.get("/api/sessions", headers={"Origin": "http://evil.example"})
    assert read.status_code == 200 and "access-control-allow-origin" not in read.headers


# --- login ---------------------------------------------------------------------------------------


@pytest.fixture
def stranger_apart(console: Console) -> Iterator[httpx.Client]:
    """A client with no cookie, from 127.0.0.4 (loopback too)."""
    with console.client(logged_in=False, source="127.0.0.4") as client:
        yield client


def test_login_with_the_token_gives_a_strict_httponly_cookie_and_a_key_and_logout_forgets_both(
    console: Console, stranger_apart: httpx.Client
) -> None:
    stranger = stranger_apart
    wrong = stranger.post("/api/login", json={"token": "not-it"})
    assert "bxctl console" in error_of(wrong, 401)
    assert "set-cookie" not in wrong.headers
    error_of(stranger.post("/api/login", json={}), 401)  # no token: a wrong one
    for body in ({"token": 5}, {"token": console.token, "more": 1}, [console.token], "x"):
        error_of(stranger.post("/api/login", json=body), 400)
    right = stranger.post("/api/login", json={"token": console.token})
    assert right.status_code == 200 and list(right.json()) == ["key"]
    key = right.json()["key"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", key) and key != console.token  # 32 bytes
    [cookie] = right.headers.get_list("set-cookie")
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    name, _, value = name_value.partition("=")
    assert name == "bx_console"
    assert value and value != console.token and console.token not in value
    flags = {part.partition("=")[0].lower(): part.partition("=")[2] for part in attributes}
    assert "httponly" in flags
    assert flags["samesite"].lower() == "strict"
    assert flags["path"] == "/"
    assert "domain" not in flags  # this host only
    assert value != key and int(flags["max-age"]) == 30 * 24 * 3600
    error_of(stranger.get("/api/sessions"), 401)  # the cookie alone
    keyed = {KEY_HEADER: key}
    assert stranger.get("/api/sessions", headers=keyed).status_code == 200
    again = stranger.post("/api/login", json={"token": console.token})  # another tab
    assert again.json()["key"] != key and "bx_console" in stranger.cookies
    assert stranger.cookies["bx_console"] == value  # the same browser keeps its cookie
    assert stranger.get("/api/sessions", headers=keyed).status_code == 200  # both tabs work
    out = stranger.post("/api/logout", json={}, headers=keyed)
    assert out.status_code == 200 and out.json() == {"ok": True}
    assert "bx_console" not in stranger.cookies
    replayed = {**keyed, "cookie": f"bx_console={value}"}
    error_of(stranger.get("/api/sessions", headers=replayed), 401)  # the pair is forgotten
    other_tab = {KEY_HEADER: again.json()["key"], "cookie": f"bx_console={value}"}
    error_of(stranger.get("/api/sessions", headers=other_tab), 401)  # and its sibling


def test_the_token_the_cookie_and_the_key_are_in_no_log_line(console: Console) -> None:
    """After logins right and wrong, a token put where it does not belong (a query string),
    and a turn: nothing under {home}/logs/ holds the token, the cookie, the key or a wrong
    guess; nor does the saved table of logins hold the cookie or the key."""
    with console.client(logged_in=False, source="127.0.0.5") as guesser:
        for wrong in WRONG_TOKENS:
            error_of(guesser.post("/api/login", json={"token": wrong}), 401)
    with console.client() as owner:
        for path in ("/", "/api/sessions", "/static/console.css", "/nonesuch"):
            owner.get(path, params={"token": console.token})
        console.box.model.script("log check", Answer(text="nothing to log"))
        send(owner, "logcheck", "log check")
        history_of_turn(owner, "logcheck", 1)
        owner.get("/api/services/gatewayd/logs", params={"n": 200})
        assert console.cookie is not None and console.key is not None
        secrets = [console.token, console.cookie, console.key, *WRONG_TOKENS]
    logs = [log for log in (console.home / "logs").rglob("*") if log.is_file()]
    assert {log.name for log in logs} >= {"gatewayd.log", "supervisor.log", "loopd.log"}
    saved = Home(console.home).console_logins
    for log in [*logs, saved]:
        text = log.read_bytes()
        for secret in secrets:
            assert secret.encode() not in text, (log, secret[:6])
    assert saved.stat().st_mode & 0o777 == 0o600


# --- the API at work ----------------------------------------------------------------------------


def test_a_grant_added_is_listed_and_written_and_removed_and_an_invalid_one_is_refused_with_why(
    console: Console, owner: httpx.Client
) -> None:
    grants = console.home / "grants"
    target = console.home.parent / "grantees"
    added = owner.post(
        "/api/grants",
        json={"id": "api-read", "tool": "read_file", "path": str(target), "note": "from the API"},
    )
    assert added.status_code == 201, added.text
    listed = {grant["id"]: grant for grant in owner.get("/api/grants").json()["grants"]}
    assert listed["api-read"]["valid"] is True
    assert (listed["api-read"]["tool"], listed["api-read"]["path"]) == ("read_file", str(target))
    assert listed["api-read"]["mode"] == "allow" and listed["api-read"]["class"] == "private"
    assert {"memory", "workspace-read", "workspace-shell", "workspace-write"} <= set(listed)
    written = (grants / "api-read.toml").read_text()
    assert 'tool = "read_file"' in written and str(target) in written
    before = sorted(path.name for path in grants.iterdir())
    for body, why in [
        ({"id": "api-bad", "tool": "nope"}, "nope"),
        ({"id": "api-bad", "tool": "read_file", "path": "relative/path"}, "path"),
        ({"id": "api-bad", "tool": "read_file", "path": "/a/../b"}, "path"),
        ({"id": "api-bad", "tool": "read_file", "path": "/tmp", "mode": "maybe"}, "mode"),
        ({"id": "api-bad", "tool": "read_file", "path": "/tmp", "class": "top"}, "class"),
        ({"id": "api-read", "tool": "read_file", "path": "/tmp"}, "exists already"),
        ({"id": "../api-bad", "tool": "read_file", "path": "/tmp"}, "not a grant id"),
        ({"id": "api-bad", "tool": "read_file", "path": "/tmp", "extra": 1}, "extra"),
        ({"tool": "read_file", "path": "/tmp"}, "id"),
        ({"id": "api-bad", "tool": "read_file", "path": 5}, "path"),
    ]:
        refused = owner.post("/api/grants", json=body)
        assert why in error_of(refused, 400), body
    assert sorted(path.name for path in grants.iterdir()) == before
    assert not (console.home / "api-bad.toml").exists()
    as_json = {"content-type": "application/json"}  # a DELETE has no body
    removed = owner.delete("/api/grants/api-read", headers=as_json)
    assert removed.status_code == 200, removed.text
    assert "api-read" not in {grant["id"] for grant in removed.json()["grants"]}
    assert "api-read" not in {grant["id"] for grant in owner.get("/api/grants").json()["grants"]}
    assert not (grants / "api-read.toml").exists()
    again = owner.delete("/api/grants/api-read", headers=as_json)
    assert "no grant" in error_of(again, 400)


def test_a_read_only_shell_grant_and_an_mcp_grants_kind_and_match_go_through_the_api(
    console: Console, owner: httpx.Client
) -> None:
    grants = console.home / "grants"
    shell = {"id": "api-sh", "tool": "shell", "path": "/tmp/api-sh", "write": False}
    mcp = {
        "id": "api-git", "tool": "mcp__git__git_log", "kind": "source",
        "match": ["repo_path=glob:/srv/*", "max_count=5", "max_count=10"],
    }  # fmt: skip
    for body in (shell, mcp):
        added = owner.post("/api/grants", json=body)
        assert added.status_code == 201, added.text
    listed = {grant["id"]: grant for grant in owner.get("/api/grants").json()["grants"]}
    assert listed["api-sh"]["write"] is False and "kind" not in listed["api-sh"]
    assert listed["workspace-shell"]["write"] is True
    assert "write" not in listed["workspace-read"]
    assert listed["api-git"]["kind"] == "source"
    assert listed["api-git"]["match"] == ["max_count=5", "max_count=10", "repo_path=glob:/srv/*"]
    assert "write = false\n" in (grants / "api-sh.toml").read_text()
    written = (grants / "api-git.toml").read_text()
    assert 'kind = "source"' in written and '"max_count" = [5, 10]' in written
    before = sorted(path.name for path in grants.iterdir())
    for body, why in [
        ({"id": "api-bad", "tool": "read_file", "path": "/tmp", "write": False}, "write"),
        ({"id": "api-bad", "tool": "shell", "path": "/tmp", "write": "no"}, "write"),
        ({"id": "api-bad", "tool": "shell", "path": "/tmp", "kind": "sink"}, "kind"),
        ({"id": "api-bad", "tool": "mcp__git__*", "kind": "maybe"}, "kind"),
        ({"id": "api-bad", "tool": "mcp__git__*", "match": ["no-equals"]}, "NAME=VALUE"),
        ({"id": "api-bad", "tool": "mcp__git__*", "match": [3]}, "match"),
        ({"id": "api-bad", "tool": "mcp__git__*", "match": "a=b"}, "match"),
    ]:
        refused = owner.post("/api/grants", json=body)
        assert why in error_of(refused, 400), body
    assert sorted(path.name for path in grants.iterdir()) == before
    as_json = {"content-type": "application/json"}
    for grant_id in ("api-sh", "api-git"):
        assert owner.delete(f"/api/grants/{grant_id}", headers=as_json).status_code == 200


def test_explain_says_what_brokerd_would_decide_and_why(
    owner: httpx.Client, console: Console
) -> None:
    workspace = console.home / "workspace"
    denied = owner.post(
        "/api/explain",
        json={"session": "explained", "tool": "read_file", "arguments": {"path": "/etc/hostname"}},
    )
    assert denied.status_code == 200, denied.text
    assert (denied.json()["verdict"], denied.json()["reason"]) == ("denied", "no_grant")
    assert any("no grant" in step for step in denied.json()["steps"])
    allowed = owner.post(
        "/api/explain",
        json={"session": "explained", "tool": "read_file",
              "arguments": args(path=str(workspace / "a.md"))},
    )  # fmt: skip
    assert allowed.status_code == 200 and allowed.json()["verdict"] == "allowed", allowed.text
    asked = owner.post(
        "/api/explain",
        json={"session": "explained", "tool": "shell",
              "arguments": {"command": "ls", "cwd": str(workspace)}},
    )  # fmt: skip
    assert asked.status_code == 200 and asked.json()["verdict"] == "ask", asked.text
    error_of(owner.post("/api/explain", json={"session": "explained"}), 400)
    assert "explained" not in {s["session"] for s in owner.get("/api/sessions").json()["sessions"]}


def test_the_console_gives_each_turns_and_sessions_tokens_and_the_boxs_tokens_today(
    console: Console, owner: httpx.Client
) -> None:
    """Issue 16: what the model's answers said they cost, from the API the page reads."""
    before = owner.get("/api/tokens").json()
    assert before["max_per_day"] == 0 and before["tokens"] >= 0
    assert len(before["day"]) == 10  # 2026-12-01: the machine's local day
    workspace = console.home / "workspace"
    (workspace / "tokens.md").write_text("a few tokens")
    call = console.box.model.calls(("read_file", args(path=str(workspace / "tokens.md"))))
    console.box.model.script(
        "count my tokens",
        replace(call, usage=(300, 45)),
        Answer(text="A few tokens.", usage=(400, 20)),
    )
    send(owner, "api-tokens", "count my tokens")
    history = history_of_turn(owner, "api-tokens", 1)
    assert history[-1]["event"] == {"kind": "turn_end", "reason": "done", "tokens": 765}
    sessions = {s["session"]: s for s in owner.get("/api/sessions").json()["sessions"]}
    assert sessions["api-tokens"]["tokens"] == 765
    assert "tokens" not in sessions.get("api-turn", {})  # its answers said no figures
    after = owner.get("/api/tokens").json()
    assert after["tokens"] - before["tokens"] == 765 or after["day"] != before["day"]


def test_a_message_starts_a_turn_whose_events_the_history_and_the_ledger_give(
    console: Console, owner: httpx.Client
) -> None:
    workspace = console.home / "workspace"
    (workspace / "todo.md").write_text("buy milk")
    todo = args(path=str(workspace / "todo.md"))
    console.box.model.script(
        "read my todo", console.box.model.calls(("read_file", todo)), Answer(text="Buy milk.")
    )
    started = send(owner, "api-turn", "read my todo")
    assert started["turn"] == 1
    history = history_of_turn(owner, "api-turn", 1)
    kinds = [event["event"]["kind"] for event in history]
    assert kinds[0] == "owner_message" and history[0]["event"]["text"] == "read my todo"
    assert kinds[-1] == "turn_end" and history[-1]["event"]["reason"] == "done"
    assert {"kind": "assistant_text", "text": "Buy milk."} in [e["event"] for e in history]
    seqs = [event["seq"] for event in history]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    later = owner.get("/api/sessions/api-turn/history", params={"after": seqs[1]}).json()
    assert [event["seq"] for event in later["events"]] == seqs[2:]
    assert "more" in later
    error_of(owner.get("/api/sessions/api-turn/history", params={"after": "x"}), 400)
    error_of(owner.get("/api/sessions/api-turn/history", params={"after": "-1"}), 400)
    error_of(owner.get("/api/sessions/api-turn/history", params={"after": "²"}), 400)

    sessions = {s["session"]: s for s in owner.get("/api/sessions").json()["sessions"]}
    assert sessions["api-turn"]["label"] == {"class": "private", "untrusted": False}
    assert sessions["api-turn"]["parent"] is None

    mine = owner.get("/api/ledger", params={"session": "api-turn"}).json()["records"]
    assert mine and all(record.get("session") == "api-turn" for record in mine)
    assert any(record.get("tool") == "read_file" for record in mine), mine
    kind = mine[0]["kind"]
    of_kind = owner.get("/api/ledger", params={"session": "api-turn", "kind": kind}).json()
    assert of_kind["records"] and {r["kind"] for r in of_kind["records"]} == {kind}
    every = owner.get("/api/ledger").json()["records"]
    assert [r["seq"] for r in every] == sorted(r["seq"] for r in every)
    newest = every[-1]["seq"]
    assert owner.get("/api/ledger", params={"after": newest}).json()["records"] == []
    error_of(owner.get("/api/ledger", params={"after": "²"}), 400)


def test_verify_reports_the_chain_and_the_head_gatewayd_witnessed(
    console: Console, owner: httpx.Client
) -> None:
    console.box.model.script(
        "remember milk",
        console.box.model.calls(("memory", args(action="note", text="buy oat milk"))),
        Answer(text="Noted."),
    )
    send(owner, "api-verify", "remember milk")
    history_of_turn(owner, "api-verify", 1)  # a call: the ledger grew, and its head was sent

    def witnessed() -> dict[str, Any] | None:
        report = owner.post("/api/ledger/verify", json={})
        assert report.status_code == 200, report.text
        found: dict[str, Any] = report.json()
        return found if found["witnessed"] is not None else None

    report = wait_until(witnessed, 10, "a witnessed head")
    assert report["ok"] is True and report["records"] >= 2
    assert 1 <= report["witnessed"]["seq"] <= report["head_seq"]
    assert len(report["witnessed"]["hash"]) == 64
    if report["witnessed"]["seq"] == report["head_seq"]:
        assert report["witnessed"]["hash"] == report["head_hash"]


def test_memory_lists_and_searches_the_notes(console: Console, owner: httpx.Client) -> None:
    console.box.model.script(
        "note the code",
        console.box.model.calls(("memory", args(action="note", text="the bike lock is blue"))),
        Answer(text="Noted."),
    )
    send(owner, "api-memory", "note the code")
    history_of_turn(owner, "api-memory", 1)
    every = owner.get("/api/memory").json()
    assert any(note["text"] == "the bike lock is blue" for note in every["notes"]), every
    assert every["total"] >= 1
    found = owner.get("/api/memory", params={"q": "bike"}).json()
    assert [note["text"] for note in found["notes"]] == ["the bike lock is blue"]
    assert found["notes"][0]["session"] == "api-memory"
    assert owner.get("/api/memory", params={"q": "zebra"}).json()["notes"] == []


def test_services_show_the_four_and_their_logs(owner: httpx.Client) -> None:
    report = owner.get("/api/services").json()
    services = {service["name"]: service for service in report["services"]}
    assert list(services) == ["brokerd", "memoryd", "loopd", "gatewayd"]
    for service in services.values():
        assert service["state"] == "running" and service["pid"] > 0
        assert service["rss"] > 1_000_000 and service["cpu_s"] >= 0
    assert report["sandbox"] in ("bwrap", "none")
    logs = owner.get("/api/services/loopd/logs", params={"n": 5}).json()
    assert logs["service"] == "loopd" and 1 <= len(logs["lines"]) <= 5
    assert all(isinstance(line, str) for line in logs["lines"])
    assert owner.get("/api/services/loopd/logs", params={"n": 0}).json()["lines"] == []
    for n in ("x", "-1", "201", "²"):
        error_of(owner.get("/api/services/loopd/logs", params={"n": n}), 400)
    assert "no service" in error_of(owner.get("/api/services/nonesuch/logs"), 404)
    restart = owner.post("/api/services/nonesuch/restart", json={})
    error_of(restart, 404)


def test_a_service_restarted_from_the_api_runs_again_in_a_new_process(
    owner: httpx.Client,
) -> None:
    def pid_of(name: str) -> int | None:
        services = owner.get("/api/services").json()["services"]
        found = next(service for service in services if service["name"] == name)
        return found["pid"] if found["state"] == "running" else None

    old = pid_of("memoryd")
    restarted = owner.post("/api/services/memoryd/restart", json={})
    assert restarted.status_code == 200, restarted.text
    assert restarted.json()["restarted"] == "memoryd"
    wait_until(lambda: pid_of("memoryd") not in (None, old), 20, "memoryd in a new process")
    assert owner.get("/api/memory").status_code == 200  # and it answers


def test_an_approval_is_listed_with_its_arguments_and_settled_by_a_verdict(
    console: Console, owner: httpx.Client
) -> None:
    workspace = console.home / "workspace"
    call = args(command="echo approved-by-api", cwd=str(workspace))
    console.box.model.script(
        "run echo", console.box.model.calls(("shell", call)), Answer(text="It ran.")
    )
    send(owner, "api-approve", "run echo")

    def listed() -> dict[str, Any] | None:
        found = owner.get("/api/pending").json()["approvals"]
        return next((a for a in found if a["session"] == "api-approve"), None)

    approval = wait_until(listed, 20, "the approval listed")
    assert approval["tool"] == "shell"
    assert json.loads(approval["arguments"]) == json.loads(call)
    settle = f"/api/approvals/{approval['approval']}"
    for body in ({"approve": "yes"}, {"approve": True, "scope": "forever"}, {}):
        error_of(owner.post(settle, json=body), 400)
    verdict = owner.post(settle, json={"approve": True, "scope": "once"})
    assert verdict.status_code == 200, verdict.text
    history = history_of_turn(owner, "api-approve", 1)
    assert history[-1]["event"]["reason"] == "done"
    assert any(e["event"].get("text") == "It ran." for e in history)
    assert listed() is None
    again = owner.post(settle, json={"approve": False})
    assert again.status_code in (404, 409), again.text
    error_of(owner.post("/api/approvals/nonesuch", json={"approve": True}), 404)


# --- the live stream ---------------------------------------------------------------------------


def test_the_stream_says_hello_then_delivers_a_turn_live_with_ids(
    console: Console, owner: httpx.Client
) -> None:
    console.box.model.script("stream me", Answer(text="streamed"))
    with events(owner, console.token) as stream:
        hello = stream.next()
        assert hello.name == "hello" and hello.id is not None
        boot = hello.json()["boot"]
        assert hello.id == hello.json()["last"] and hello.id.startswith(f"{boot}-")
        send(owner, "sse-live", "stream me")
        found = stream.until(turn_end_of("sse-live"))
    assert all(event.id is not None and event.id.startswith(f"{boot}-") for event in found)
    assert [event.n for event in found] == list(range(hello.n + 1, hello.n + 1 + len(found)))
    assert kinds_of("sse-live", found) == ["owner_message", "assistant_text", "turn_end"]
    mine = [e.json() for e in found if e.name == "turn" and e.json()["session"] == "sse-live"]
    assert mine[0]["event"] == {"kind": "owner_message", "text": "stream me"}
    assert mine[1]["event"] == {"kind": "assistant_text", "text": "streamed"}
    assert {e.name for e in found} <= {"turn", "approval_requested", "approval_settled", "ledger"}


def test_a_page_that_reconnects_with_its_last_event_id_gets_exactly_what_it_missed(
    console: Console, owner: httpx.Client
) -> None:
    model = console.box.model
    model.script("before the drop", Answer(text="one"))
    note = console.home / "workspace" / "away.md"
    note.write_text("read while the page was away")
    model.script("while away", model.calls(("read_file", args(path=str(note)))), Answer("two"))
    with events(owner, console.token) as witness:  # open throughout: sees everything
        witness.next()
        with events(owner, console.token) as page:
            page.next()
            send(owner, "sse-resume", "before the drop")
            last = page.until(turn_end_of("sse-resume"))[-1]
        send(owner, "sse-resume", "while away")  # the page is away for this whole turn
        seen = witness.until(lambda event: event.id == last.id)
        assert seen[-1] == last
        missed = witness.until(turn_end_of("sse-resume"))
        assert last.id is not None
        with events(owner, console.token, last.id) as page:
            hello = page.next()
            assert (hello.name, hello.id) == ("hello", last.id)
            caught_up = page.until(lambda event: event.id == missed[-1].id)
    assert caught_up == missed
    assert kinds_of("sse-resume", missed)[0] == "owner_message"
    assert kinds_of("sse-resume", missed)[-1] == "turn_end"
    assert len(kinds_of("sse-resume", missed)) > 3  # the read is in it


def test_an_unknown_or_malformed_last_event_id_gets_a_reset(
    console: Console, owner: httpx.Client
) -> None:
    with events(owner, console.token) as stream:
        hello = stream.next()
    boot = hello.json()["boot"]
    other = "0" * 8 if boot != "0" * 8 else "1" * 8
    for last_event_id in (f"{other}-1", f"{boot}-{hello.n + 1000}", "nonsense", f"{boot}-",
                          f"{boot}-²", ""):  # fmt: skip
        with events(owner, console.token, last_event_id) as stream:
            reset = stream.next()
        assert reset.name == "reset", last_event_id
        assert reset.id is not None and reset.id.startswith(f"{boot}-")
        assert reset.json()["boot"] == boot


def test_after_gatewayd_restarts_the_cookie_and_its_key_still_work_and_an_old_id_gets_a_reset(
    console: Console,
) -> None:
    with console.client() as owner:
        with events(owner, console.token) as stream:
            old = stream.next()
        assert old.id is not None
        restarted = console.box.bxctl("restart", "gatewayd")
        assert restarted.returncode == 0, restarted.stderr

        def answers() -> bool:
            with contextlib.suppress(httpx.TransportError):
                return owner.get("/api/sessions").status_code == 200  # the same pair
            return False

        wait_until(answers, 15, "the console back")
        with events(owner, console.token, old.id) as stream:
            reset = stream.next()
    assert reset.name == "reset"
    assert reset.json()["boot"] != old.json()["boot"]


# --- starting: a console turned off (a taken port: test_console_ports.py) ------------------------


def test_a_console_turned_off_listens_nowhere(short_tmp: Path) -> None:
    port = free_port()
    with box_home(short_tmp) as home:
        init_home(home, f"[console]\nenabled = false\nport = {port}\n")
        result = bxctl(home, "up")
        assert result.returncode == 0, result.stderr
        assert "console:" not in result.stdout
        status = json.loads(bxctl(home, "status", "--json").stdout)
        gatewayd = next(s for s in status["services"] if s["name"] == "gatewayd")
        assert gatewayd["state"] == "running"
        listening = [
            connection
            for connection in psutil.Process(gatewayd["pid"]).net_connections(kind="inet")
            if connection.status == psutil.CONN_LISTEN
        ]
        assert listening == []
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_request_the_server_cannot_parse_is_refused_with_the_security_headers_too(
    console: Console,
) -> None:
    """uvicorn answers a malformed request itself, before any of the console's code runs."""
    with socket.create_connection(("127.0.0.1", console.port), timeout=10) as raw:
        raw.sendall(b"GET /api/pending HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower().splitlines()
    assert head[0].startswith("http/1.1 400")
    for name, value in SECURITY_HEADERS.items():
        assert f"{name}: {value}".lower() in head, name


# --- MCP servers (SPEC §18.3, §18.5) -------------------------------------------------------------


def test_mcp_servers_are_flagged_in_services_and_an_mcp_sink_waits_with_every_argument() -> None:
    """A box with the fake mailbox: `/api/services` lists it as `bxctl mcp list` does (its new
    tools flagged until trusted, then a changed pin flagged again); a `send_email` in an
    untrusted session asks, and `/api/pending` shows its tool and every argument."""

    def with_mailbox(home: Path) -> None:
        with (home / "config.toml").open("a") as config:
            config.write("\n" + fake("mail", "mailbox", home.parent / "mail"))
        for extra in (
            ["mail-read", "--tool", "mcp__mail__read_inbox", "--kind", "source"],
            ["mail-send", "--tool", "mcp__mail__send_email", "--kind", "sink",
             "--match", "to=glob:*@example.org"],
        ):  # fmt: skip
            added = bxctl(home, "grant", "add", *extra)
            assert added.returncode == 0, added.stderr

    with box_up(before_up=with_mailbox) as box:
        console = console_of(box)
        with console.client() as owner:
            wait_listed(box.home, "mail", timeout=60)

            def server() -> dict[str, Any]:
                found: list[dict[str, Any]] = owner.get("/api/services").json()["mcp"]
                assert [row["name"] for row in found] == ["mail"]
                return found[0]

            untrusted = server()
            assert untrusted["listed"] and untrusted["flagged"] and untrusted["pinned"] == 0
            assert sorted(untrusted["new"]) == ["read_inbox", "send_email"]
            trust(box.home, "mail")
            assert server() | {"running": 0, "warnings": []} == {
                "name": "mail", "pinned": 2, "changed": [], "new": [], "listed": True,
                "running": 0, "problem": None, "flagged": False,
                "roles": {"read_inbox": {"folder": "target"},
                          "send_email": {"body": "content", "to": "target"}},
                "warnings": [],  # as root, the mailbox folder is root's: warned of, not refused
            }  # fmt: skip

            to = "kyle@example.org"
            body = "Line one\nline two: " + "x" * 3000 + " the end"
            model = box.model
            model.script(
                "check my mail",
                model.calls(("mcp__mail__read_inbox", args(folder="in"))),
                model.calls(("mcp__mail__send_email", args(to=to, body=body))),
                Answer(text="Not sent."),
            )
            send(owner, "api-mcp", "check my mail")

            def listed() -> dict[str, Any] | None:
                found = owner.get("/api/pending").json()["approvals"]
                return next((a for a in found if a["session"] == "api-mcp"), None)

            approval = wait_until(listed, 30, "the MCP call's approval listed")
            assert approval["tool"] == "mcp__mail__send_email"
            assert json.loads(approval["arguments"]) == {"to": to, "body": body}  # nothing cut
            assert approval["grant"] == "mail-send"
            denied = owner.post(f"/api/approvals/{approval['approval']}", json={"approve": False})
            assert denied.status_code == 200, denied.text
            history_of_turn(owner, "api-mcp", 1)
            assert not (box.home.parent / "mail" / "sent.jsonl").exists()

            paths = Home(box.home)
            listed_tools = mcp_pins.listing(paths, "mail")
            changed = [
                ToolDef(t.name, t.description + " (as trusted)", t.input_schema, t.annotations)
                if t.name == "send_email" else t
                for t in listed_tools
            ]  # fmt: skip
            mcp_pins.trust(paths, "mail", tuple(changed))  # the server now differs from its pin
            flagged = server()
            assert flagged["flagged"] and flagged["changed"] == ["send_email"]

            # Trust from the console (§20): the tools as read, their roles, pinned as read.
            shown = owner.get("/api/mcp/mail").json()
            states = {tool["name"]: tool["state"] for tool in shown["tools"]}
            assert states == {"read_inbox": "unchanged", "send_email": "changed"}
            hashes = {tool["name"]: tool["sha256"] for tool in shown["tools"]}
            assert owner.get("/api/mcp/nope").status_code == 404
            trust_url = "/api/mcp/mail/trust"
            stale = owner.post(trust_url, json={"tools": {**hashes, "send_email": "0" * 64}})
            assert stale.status_code == 409 and "changed since you read them" in stale.text
            bad = {"tools": hashes, "roles": {"send_email": {"to": "dest"}}}
            refused = owner.post(trust_url, json=bad)
            assert refused.status_code == 400 and "'dest' is not a role" in refused.text
            roles = {"send_email": {"to": "target", "body": "target"}}
            pinned = owner.post(trust_url, json={"tools": hashes, "roles": roles})
            assert pinned.status_code == 200, pinned.text
            assert {t["name"]: t["state"] for t in pinned.json()["tools"]} == {
                "read_inbox": "unchanged", "send_email": "unchanged"
            }  # fmt: skip
            after = server()
            assert not after["flagged"]
            assert after["roles"]["send_email"] == {"body": "target", "to": "target"}
