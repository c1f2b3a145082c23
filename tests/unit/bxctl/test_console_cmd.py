"""`bxctl console` (SPEC §12.1, §13): the token made once by `bxctl init`, 0600, and kept; the
link's address; what gatewayd reports of where it serves, and the lines for a box that serves
nothing. The links a running box prints are tests/e2e/test_console_ports.py's."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from bxcore.console_link import TOKEN_LENGTH, Served, console_address, console_link, served
from bxcore.wire.messages import ServiceInfo, ServiceState, SupervisorReport
from bxctl.console_cmd import not_served
from tests.support.cli import bxctl


@pytest.fixture
def home(short_tmp: Path) -> Path:
    home = short_tmp / "h"
    assert bxctl(home, "init").returncode == 0
    return home


def test_init_makes_the_token_once_the_owners_alone(home: Path) -> None:
    token_file = home / "keys" / "console.token"
    token = token_file.read_text().strip()
    assert len(token) == TOKEN_LENGTH
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert bxctl(home, "init").returncode == 0
    assert token_file.read_text().strip() == token  # kept, never made again


def test_console_with_no_box_running_says_so_in_one_line(home: Path) -> None:
    """The link is where the running gatewayd serves the console (tests/e2e/
    test_console_ports.py); config.toml's port is no link: it may be taken."""
    for argv in (("console",), ("console", "--json")):
        shown = bxctl(home, *argv)
        assert shown.returncode == 1
        assert shown.stdout == ""
        assert shown.stderr.strip().splitlines() == [
            "bxctl: the box is not running, so nothing serves the console; start it with `bxctl up`"
        ]


def test_a_console_turned_off_is_said(home: Path) -> None:
    (home / "config.toml").write_text("[console]\nenabled = false\n")
    shown = bxctl(home, "console")
    assert shown.returncode == 1
    assert "the console is off" in shown.stderr


def test_what_gatewayd_reports_is_taken_whole_and_only_from_the_gatewayd_asked_of() -> None:
    said = {"pid": 41, "host": "::", "port": 8421, "asked": 8420}
    found = served(said, 41)
    assert found == Served(41, "::", 8421, 8420)
    assert found.address == "http://[::1]:8421/"
    assert found.moved == "port 8420 was taken, so the console took 8421"
    assert served(said, None) == found
    assert served(said, 42) is None  # an earlier gatewayd's report
    assert served({**said, "asked": 8421}, 41).moved is None  # type: ignore[union-attr]
    for bad in (None, [], {}, {**said, "port": "8421"}, {**said, "port": True},
                {**said, "pid": 0}, {**said, "host": 1}):  # fmt: skip
        assert served(bad, None) is None, bad


def test_a_box_whose_gatewayd_serves_nothing_says_why() -> None:
    def report(*services: ServiceInfo) -> SupervisorReport:
        return SupervisorReport("r1", 40, "bwrap", services)

    failed = ServiceInfo("gatewayd", ServiceState.FAILED, 0, "2026-12-04T00:00:00.000Z",
                         last_exit="cannot start: exit 78")  # fmt: skip
    assert not_served(report(failed)) == (
        "gatewayd is not running (failed: cannot start: exit 78), so nothing serves the "
        "console; see `bxctl logs gatewayd`"
    )
    assert not_served(report()) == "this box runs no gatewayd, so nothing serves the console"


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("127.0.0.1", "http://127.0.0.1:8420/"),
        ("0.0.0.0", "http://127.0.0.1:8420/"),
        ("::", "http://[::1]:8420/"),
        ("::1", "http://[::1]:8420/"),
        ("box.lan", "http://box.lan:8420/"),
    ],
)
def test_the_address_opens_a_wildcard_on_loopback(host: str, address: str) -> None:
    assert console_address(host, 8420) == address
    assert console_link(host, 8420, "t") == address + "#token=t"
