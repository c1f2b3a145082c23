"""`bxctl init`, `status`'s warnings, `grant list|add|rm|check` and `audit verify`, run in the
test's process (`tests.support.cli`); `init` under umask 000 as a process of its own."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

import pytest

from services.brokerd.core import records
from services.brokerd.core.grants import Grant, parse_grant
from services.brokerd.grants_folder import read_folder
from services.brokerd.ledger.file import Ledger
from tests.support.cli import bxctl


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


def modes(root: Path) -> dict[str, int]:
    """Every path under `root` (itself as "."), by its path relative to it: its mode bits."""
    found = {".": root.stat().st_mode & 0o7777}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = path.lstat().st_mode & 0o7777
    return found


def test_init_makes_the_home_the_owners_alone_whatever_the_umask(short_tmp: Path) -> None:
    """Issue 9 (10): folders 0700, files 0600 (a public key is public), even under umask 000."""
    home = short_tmp / "open"
    result = subprocess.run(
        [sys.executable, "-m", "bxctl", "--home", str(home), "init"],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=lambda: os.umask(0),
    )
    assert result.returncode == 0, result.stderr
    found = modes(home)
    assert {
        name for name, mode in found.items() if (home / name).is_dir() and mode != 0o700
    } == set()
    files = {name: mode for name, mode in found.items() if not (home / name).is_dir()}
    assert {name for name, mode in files.items() if mode != 0o600} == {
        "keys/owner.key", "keys/gatewayd.key", "keys/brokerd.key"
    }  # fmt: skip
    assert all(mode == 0o644 for name, mode in files.items() if name.endswith(".key"))
    assert "grants/workspace-read.toml" in files and "config.toml" in files


def test_status_warns_once_the_home_is_opened_to_others(home: Path) -> None:
    quiet = bxctl(home, "status", "--json")
    assert quiet.returncode == 3  # not running
    assert json.loads(quiet.stdout)["warnings"] == []
    assert "warning" not in bxctl(home, "status").stdout
    os.chmod(home, 0o755)
    os.chmod(home / "grants" / "memory.toml", 0o644)
    warned = bxctl(home, "status", "--json")
    assert warned.returncode == 3
    warnings = json.loads(warned.stdout)["warnings"]
    assert [line.split(" is open to ")[0] for line in warnings] == [
        str(home), str(home / "grants" / "memory.toml")
    ]  # fmt: skip
    assert warnings[0].endswith(f"(mode 755: list, enter); chmod go-rwx {home}")  # its group
    shown = bxctl(home, "status")
    assert shown.stdout.splitlines()[1:] == [f"warning: {line}" for line in warnings]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives the workspace away")
def test_init_as_root_gives_a_new_workspace_to_the_user_tools_run_as(home: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    workspace = (home / "workspace").stat()
    assert (workspace.st_uid, workspace.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert workspace.st_mode & 0o777 == 0o700
    assert (home.stat().st_uid, home.stat().st_mode & 0o777) == (0, 0o700)
    assert (home / "grants").stat().st_uid == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="only root reads [sandbox] user at init")
def test_init_as_root_with_an_unknown_sandbox_user_refuses_and_creates_nothing(
    short_tmp: Path,
) -> None:
    home = short_tmp / "home"
    home.mkdir()
    (home / "config.toml").write_text('[sandbox]\nuser = "no-such-user-here"\n')
    result = bxctl(home, "init")
    assert result.returncode == 1
    assert result.stderr == "bxctl: [sandbox] user: no user 'no-such-user-here' on this machine\n"
    assert sorted(p.name for p in home.iterdir()) == ["config.toml"]


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


def test_grant_check_and_status_warn_of_grants_over_the_home_and_grants_that_disagree(
    home: Path,
) -> None:
    parent = home.parent
    shell = bxctl(home, "grant", "add", "parent-shell", "--tool", "shell", "--path", str(parent))
    read = bxctl(home, "grant", "add", "parent-read", "--tool", "read_file", "--path",
                 str(parent), "--class", "secret")  # fmt: skip
    assert shell.returncode == 0 and read.returncode == 0
    result = bxctl(home, "grant", "check")
    assert result.returncode == 0  # warnings, not errors
    lines = result.stdout.splitlines()
    covers = f"warning: grant parent-shell (shell {parent}) covers boxmaker's own files ({home}"
    assert any(line.startswith(covers) for line in lines), lines
    assert any(
        line.startswith(f"warning: grants of {parent} disagree on its label") for line in lines
    )
    assert lines[-1].startswith("ok: 6 grants, all valid")
    warnings = json.loads(bxctl(home, "grant", "check", "--json").stdout)["warnings"]
    assert len(warnings) == 3
    status = json.loads(bxctl(home, "status", "--json").stdout)
    assert set(warnings) <= set(status["warnings"])


def test_grant_add_writes_a_valid_file_or_refuses_with_why(home: Path) -> None:
    ok = bxctl(home, "grant", "add", "wiki", "--tool", "http_fetch", "--host", "*.wikipedia.org")
    assert ok.returncode == 0, ok.stderr
    assert (home / "grants" / "wiki.toml").stat().st_mode & 0o777 == 0o600
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


def test_grant_add_lets_the_grants_folders_group_read_only_when_the_folder_does(
    home: Path,
) -> None:
    """deploy/: `grants/` is 2750 with brokerd's group, which must read a new grant."""
    os.chmod(home / "grants", 0o2750)
    added = bxctl(home, "grant", "add", "notes", "--tool", "read_file", "--path", "/srv/notes")
    assert added.returncode == 0, added.stderr
    assert (home / "grants" / "notes.toml").stat().st_mode & 0o777 == 0o640
    assert not list((home / "grants").glob(".*"))  # no temporary file left


def test_audit_verify_exits_1_when_a_witnessed_record_is_replaced_by_a_torn_stub(
    home: Path,
) -> None:
    """Issue 9 (9): alone, the stub would pass for a write brokerd never answered."""
    ledger = Ledger.open(home / "audit" / "ledger.jsonl", now_ms=lambda: 0)
    for n in range(3):
        ledger.append(*records.started(pid=n, version="t"))
    ledger.close()
    assert bxctl(home, "audit", "verify").stdout.strip().startswith("ok: 3 records")
    path = home / "audit" / "ledger.jsonl"
    lines = path.read_bytes().split(b"\n")[:-1]
    path.write_bytes(b"".join(line + b"\n" for line in lines[:2]) + lines[2][:25])
    result = bxctl(home, "audit", "verify")
    assert result.returncode == 1, result.stdout
    assert result.stdout == (
        "bad: line 3: the last line has no newline (a torn write); the ledger ends at seq 2, "
        "before the head seen (seq 3): cut or rewritten\n"
    )
    with path.open("ab") as f:  # a stub after the witnessed head is only a torn write
        f.write(lines[2][25:] + b"\n" + b'{"seq":4')
    torn = bxctl(home, "audit", "verify")
    assert torn.returncode == 0, torn.stdout
    assert "a torn last line, after the head the owner saw (seq 3)" in torn.stdout


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


def test_grant_add_warns_at_once_of_a_grant_of_the_whole_file_system(home: Path) -> None:
    added = bxctl(home, "grant", "add", "everything", "--tool", "read_file", "--path", "/")
    assert added.returncode == 0, added.stderr
    lines = added.stdout.splitlines()
    assert lines[0] == "added everything: allow read_file /"
    assert lines[1].startswith("warning: grant everything (read_file /) covers the whole file")
    assert any("covers boxmaker's own files" in line for line in lines[2:]), lines
    quiet = bxctl(home, "grant", "add", "notes", "--tool", "read_file", "--path", "/srv/notes")
    assert quiet.stdout == "added notes: allow read_file /srv/notes\n"


def test_grant_remove_is_grant_rm_as_the_console_names_it(home: Path) -> None:
    assert bxctl(home, "grant", "add", "notes", "--tool", "memory").returncode == 0
    removed = bxctl(home, "grant", "remove", "notes")
    assert (removed.returncode, removed.stdout) == (0, "removed notes\n")
    assert not (home / "grants" / "notes.toml").exists()
