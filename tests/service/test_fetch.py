"""http_fetch end to end (SPEC §8.2, §8.3, §5.5): a real brokerd, real bwrap, its one-tunnel
proxy, and a local HTTPS server with a test CA, reached through `[sandbox] fetch_pins`.

What is not tested here: a pin-less name that resolves to a loopback or private address (the
DNS-rebinding guard) needs a resolver the test controls, and brokerd has no seam for one
through its config, on purpose; tests/unit/brokerd/test_fetch_proxy.py injects one instead.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bxcore.deny import DenyReason
from bxcore.home.layout import Home
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import Denied, Done, Outcome, Pending, State, StateQuery, ToolRequest
from tests.support import tls
from tests.support.daemons import Daemon, init_home, running

HOST = "test.example"
PAGE = b"<p>hello from test.example</p>\n"
FETCHED = Label(DataClass.PUBLIC, True)


@dataclass
class Fetching:
    brokerd: Daemon
    server: tls.HttpsServer
    home: Path
    ids: Iterator[int] = field(default_factory=itertools.count)

    def fetch(self, url: str, session: str | None = None) -> tuple[str, Outcome]:
        n = next(self.ids)
        session = session or f"s{n}"
        request = ToolRequest(f"r{n}", session, f"c{n}", "http_fetch", json.dumps({"url": url}))
        answer = self.brokerd.ask(request, timeout=30)
        return session, answer.outcome

    def paths(self) -> list[str]:
        return [received.path for received in self.server.requests]


def grant(home: Path, name: str, host: str) -> None:
    (home / "grants" / f"{name}.toml").write_text(
        f'tool = "http_fetch"\nmode = "allow"\nhost = "{host}"\n'
    )


@pytest.fixture(scope="module")
def fetching() -> Iterator[Fetching]:
    root = Path(tempfile.mkdtemp(prefix="bx-", dir="/tmp"))
    try:
        authority = tls.make_authority(root / "ca", hosts=(HOST,))
        routes = {
            "/page": tls.Reply(headers=(("Content-Type", "text/html; charset=utf-8"),), body=PAGE),
            "/moved": tls.Reply(302, headers=(("Location", "https://test.example/elsewhere"),)),
            "/elsewhere": tls.Reply(body=b"never fetched\n"),
        }
        with tls.HttpsServer(authority, routes) as server:
            pin = f"127.0.0.1:{server.port}"
            config = (
                "[sandbox]\nfetch_timeout_s = 10\n"
                f'fetch_pins = {{ "{HOST}" = "{pin}", "wrong.example" = "{pin}" }}\n'
                f'fetch_ca_file = "{authority.ca_file}"\n'
            )
            home = init_home(root / "h", config)
            grant(home, "fetch-test", HOST)
            grant(home, "fetch-wrong", "wrong.example")
            grant(home, "fetch-other", "*.other.example")
            with running("brokerd", home) as brokerd:
                yield Fetching(brokerd, server, home)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_granted_fetch_returns_the_page_and_makes_the_session_untrusted(
    fetching: Fetching,
) -> None:
    before = len(fetching.server.requests)
    session, outcome = fetching.fetch("https://test.example/page")
    assert outcome == Done(
        True,
        "HTTP/1.1 200 OK\nContent-Type: text/html; charset=utf-8\n\n" + PAGE.decode(),
        FETCHED,
    )
    assert fetching.paths()[before:] == ["/page"]
    assert fetching.server.requests[-1].header("Host") == HOST
    state = fetching.brokerd.ask(StateQuery("q1", session))
    assert isinstance(state, State) and state.label.untrusted
    _, again = fetching.fetch("https://test.example/page", session)
    assert isinstance(again, Pending)  # I5: an untrusted session's next fetch needs the owner
    assert fetching.paths()[before:] == ["/page"]


def test_a_redirect_is_reported_with_its_target_and_not_followed(fetching: Fetching) -> None:
    before = len(fetching.server.requests)
    _, outcome = fetching.fetch("https://test.example/moved")
    assert isinstance(outcome, Done) and outcome.ok and outcome.label == FETCHED
    assert outcome.output.startswith("HTTP/1.1 302 Found\n")
    assert outcome.output.endswith(
        "redirect (302) to https://test.example/elsewhere: fetch that URL to follow it"
    )
    assert fetching.paths()[before:] == ["/moved"]


def test_a_host_without_a_grant_is_denied_and_nothing_is_fetched(fetching: Fetching) -> None:
    before = len(fetching.server.requests)
    _, outcome = fetching.fetch("https://example.com/page")
    assert outcome == Denied(DenyReason.NO_GRANT)
    assert fetching.paths()[before:] == []


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1/page",
        "https://[::1]/page",
        "https://2130706433/page",
        "https://test.example:8443/page",
        "http://test.example/page",
        "https://user@test.example/page",
    ],
)
def test_an_ip_literal_another_port_or_scheme_is_invalid_arguments(
    fetching: Fetching, url: str
) -> None:
    before = len(fetching.server.requests)
    _, outcome = fetching.fetch(url)
    assert isinstance(outcome, Denied) and outcome.reason is DenyReason.INVALID_ARGUMENTS
    assert fetching.paths()[before:] == []


def test_tls_is_checked_end_to_end_for_the_host_asked(fetching: Fetching) -> None:
    """wrong.example is pinned to the same server, whose certificate names only
    test.example: the tunnel opens, and the toolkit refuses the certificate."""
    before = len(fetching.server.requests)
    _, outcome = fetching.fetch("https://wrong.example/page")
    assert isinstance(outcome, Done) and not outcome.ok
    assert outcome.output.startswith("http_fetch: https://wrong.example/page: TLS failed: ")
    assert "certificate verify failed" in outcome.output
    assert fetching.paths()[before:] == []


def test_a_pattern_grant_reaches_a_pinless_host_only_through_dns_and_the_guard(
    fetching: Fetching,
) -> None:
    """*.other.example allows www.other.example, which has no pin: the proxy resolves it
    itself (.example never resolves, RFC 2606), and the local server sees nothing."""
    before = len(fetching.server.requests)
    _, outcome = fetching.fetch("https://www.other.example/page")
    assert isinstance(outcome, Done) and not outcome.ok
    assert outcome.output.startswith("http_fetch: https://www.other.example/page: ")
    assert fetching.paths()[before:] == []


def test_no_proxy_socket_is_left_behind(fetching: Fetching) -> None:
    fetching.fetch("https://test.example/page")
    assert list(Home(fetching.home).run_dir.glob("fetch-*")) == []
