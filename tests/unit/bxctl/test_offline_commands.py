"""`bxctl init`, `grant list|add|rm|check` and `audit verify`, run as the owner runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.brokerd import records
from services.brokerd.grants import Grant, parse_grant, read_folder
from services.brokerd.ledger import Ledger


def bxctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bxctl", "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture
def home(short_tmp: Path) -> Path:
    home = short_tmp / "home"
    assert bxctl(home, "init").returncode == 0
    return home


def test_init_makes_the_home_with_keys_config_and_valid_starter_grants(home: Path) -> None:
    for folder in ("grants", "audit", "sessions", "memory", "keys", "run", "logs", "workspace"):
        assert (home / folder).is_dir(), folder
    assert (home / "run").stat().st_mode & 0o777 == 0o700
    for party in ("owner", "gatewayd", "brokerd"):
        assert (home / "keys" / f"{party}.key_secret").stat().st_mode & 0o777 == 0o600
    assert not (home / "state").exists()  # brokerd alone writes state
    grants = read_folder(home / "grants")
    assert grants.invalid == ()
    by_id = {g.id: g for g in grants.valid}
    assert set(by_id) == {"memory", "workspace-read", "workspace-write", "workspace-shell"}
    assert by_id["workspace-shell"].mode == "ask"
    assert by_id["workspace-read"].path == str(home / "workspace")
    assert not any(g.tool == "http_fetch" for g in grants.valid)


def test_init_again_changes_nothing_and_never_overwrites(home: Path) -> None:
    (home / "config.toml").write_text("[loop]\nmax_steps = 5\n")
    (home / "grants" / "workspace-read.toml").unlink()
    key = (home / "keys" / "owner.key_secret").read_bytes()
    result = bxctl(home, "init")
    assert result.returncode == 0
    assert "already initialised" in result.stdout
    assert (home / "config.toml").read_text() == "[loop]\nmax_steps = 5\n"
    assert not (home / "grants" / "workspace-read.toml").exists()  # the owner removed it
    assert (home / "keys" / "owner.key_secret").read_bytes() == key


def test_grant_check_names_each_invalid_grant_and_exits_1(home: Path) -> None:
    assert bxctl(home, "grant", "check").stdout.startswith("ok: 4 grants, all valid")
    (home / "grants" / "wild.toml").write_text('tool = "read_file"\nmode = "allow"\npath = "/a/"\n')
    result = bxctl(home, "grant", "check")
    assert result.returncode == 1
    assert "invalid: wild: path: '/a/' is not a valid path" in result.stdout
    listed = json.loads(bxctl(home, "grant", "list", "--json").stdout)
    assert {g["id"]: g["valid"] for g in listed}["wild"] is False


def test_grant_add_writes_a_valid_file_or_refuses_with_why(home: Path) -> None:
    ok = bxctl(home, "grant", "add", "wiki", "--tool", "http_fetch", "--host", "*.wikipedia.org")
    assert ok.returncode == 0, ok.stderr
    grant = parse_grant("wiki", (home / "grants" / "wiki.toml").read_bytes())
    assert isinstance(grant, Grant) and grant.host == "*.wikipedia.org" and grant.untrusted
    again = bxctl(home, "grant", "add", "wiki", "--tool", "memory")
    assert again.returncode == 1 and "exists already" in again.stderr
    bad = bxctl(home, "grant", "add", "bad", "--tool", "read_file", "--path", "relative")
    assert bad.returncode == 1
    assert bad.stderr.count("\n") == 1 and "not a valid path" in bad.stderr
    assert not (home / "grants" / "bad.toml").exists()
    assert bxctl(home, "grant", "rm", "wiki").returncode == 0
    missing = bxctl(home, "grant", "rm", "wiki")
    assert missing.returncode == 1 and "no grant 'wiki'" in missing.stderr


def test_audit_verify_reports_ok_and_names_the_first_bad_line(home: Path) -> None:
    assert "ok: 0 records" in bxctl(home, "audit", "verify").stdout
    ledger = Ledger.open(home / "audit" / "ledger.jsonl", now_ms=lambda: 0)
    for n in range(5):
        ledger.append(*records.started(pid=n, version="t"))
    ledger.close()
    assert bxctl(home, "audit", "verify").stdout.strip() == "ok: 5 records"
    path = home / "audit" / "ledger.jsonl"
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2].replace(b'"pid":2', b'"pid":9')
    path.write_bytes(b"\n".join(lines))
    result = bxctl(home, "audit", "verify")
    assert result.returncode == 1
    assert result.stdout.strip() == "bad: line 4: prev does not match the hash of line 3"


def test_a_broken_home_option_is_one_line_and_exit_2_for_usage(short_tmp: Path) -> None:
    usage = bxctl(short_tmp, "frobnicate")
    assert usage.returncode == 2
    blocked = short_tmp / "file"
    blocked.write_text("")
    result = bxctl(blocked, "init")
    assert result.returncode == 1
    assert result.stderr.startswith("bxctl: ") and result.stderr.count("\n") == 1
