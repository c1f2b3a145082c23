"""`bxctl console` (SPEC §12.1, §13): the link with the owner token in its fragment; the token
made once by `bxctl init`, 0600, and kept."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from bxcore.console_link import TOKEN_LENGTH, console_address, console_link
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


def test_console_prints_the_link_with_the_token_in_its_fragment(home: Path) -> None:
    token = (home / "keys" / "console.token").read_text().strip()
    shown = bxctl(home, "console")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"http://127.0.0.1:8420/#token={token}"
    as_json = json.loads(bxctl(home, "console", "--json").stdout)
    assert as_json == {"url": f"http://127.0.0.1:8420/#token={token}"}


def test_console_follows_the_configured_host_and_port(home: Path) -> None:
    (home / "config.toml").write_text('[console]\nhost = "::"\nport = 9001\n')
    assert bxctl(home, "console").stdout.startswith("http://[::1]:9001/#token=")


def test_a_console_turned_off_is_said(home: Path) -> None:
    (home / "config.toml").write_text("[console]\nenabled = false\n")
    shown = bxctl(home, "console")
    assert shown.returncode == 1
    assert "the console is off" in shown.stderr


def test_a_damaged_token_file_is_one_line_naming_it(home: Path) -> None:
    (home / "keys" / "console.token").write_text("not a token\n")
    shown = bxctl(home, "console")
    assert shown.returncode == 1
    assert "console.token does not hold a console token" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1


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
