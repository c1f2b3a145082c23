"""`bxctl.safety` (issue 9): which paths of the home are open to more than their owner, one
line each; a group given on purpose (the systemd deployment) is not a leak."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from bxcore.home.layout import Home
from bxctl.init import init_home
from bxctl.safety import checked_paths, home_warnings, too_open

FOLDER = stat.S_IFDIR
FILE = stat.S_IFREG
P = Path("/h/x")


@pytest.mark.parametrize(
    ("mode", "login_group", "expected"),
    [
        (FOLDER | 0o700, "kyle", None),
        (FILE | 0o600, "kyle", None),
        (FILE | 0o400, None, None),
        (FOLDER | 0o2750, None, None),  # deploy/: a dedicated group, given on purpose
        (FOLDER | 0o3770, None, None),
        (FILE | 0o640, None, None),
        (
            FOLDER | 0o755,
            None,
            "/h/x is open to every user (mode 755: list, enter); chmod o-rwx /h/x",
        ),
        (
            FOLDER | 0o755,
            "kyle",
            "/h/x is open to group kyle and every user (mode 755: list, enter); chmod go-rwx /h/x",
        ),
        (FILE | 0o640, "users", "/h/x is open to group users (mode 640: read); chmod g-rwx /h/x"),
        (
            FILE | 0o606,
            None,
            "/h/x is open to every user (mode 606: read, change); chmod o-rwx /h/x",
        ),
        (FILE | 0o601, None, "/h/x is open to every user (mode 601: run); chmod o-rwx /h/x"),
        (
            FOLDER | 0o1777,
            None,
            "/h/x is open to every user (mode 1777: list, add and remove files, enter); "
            "chmod o-rwx /h/x",
        ),
        (FOLDER | 0o711, None, "/h/x is open to every user (mode 711: enter); chmod o-rwx /h/x"),
    ],
)
def test_a_path_is_too_open_when_every_user_or_the_owners_login_group_may_use_it(
    mode: int, login_group: str | None, expected: str | None
) -> None:
    assert too_open(P, mode, login_group) == expected


def test_a_home_made_by_init_has_no_warning(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    init_home(home)
    assert home_warnings(home) == []


def test_every_path_opened_wider_is_named_once_on_its_own_line(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    init_home(home)
    opened = [
        home.root,
        home.config,
        home.grants,
        home.grant("memory"),
        home.keys / "owner.key_secret",
        home.workspace,
        home.audit,
        home.sessions,
        home.memory_db.parent,
        home.logs,
    ]
    for path in opened:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    warnings = home_warnings(home)
    assert [line.split(" is open to ")[0] for line in warnings] == [str(p) for p in opened]
    assert all("\n" not in line and "every user" in line for line in warnings)


def test_public_keys_and_missing_paths_are_not_warned_about(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    init_home(home)
    assert (home.keys / "owner.key").stat().st_mode & 0o777 == 0o644
    assert not home.state_broker.exists() and not home.ledger.exists()
    assert home_warnings(home) == []


def test_the_services_files_are_checked_when_they_exist(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    init_home(home)
    home.state_broker.mkdir(parents=True, mode=0o700)
    home.witness("bxctl").parent.mkdir(mode=0o700)
    for path in (home.ledger, home.memory_db, home.witness("bxctl"), home.log("brokerd")):
        path.write_text("x")
        os.chmod(path, 0o644)
    os.chmod(home.state_broker.parent, 0o755)
    named = {line.split(" is open to ")[0] for line in home_warnings(home)}
    expected = [home.ledger, home.memory_db, home.witness("bxctl"), home.log("brokerd")]
    assert named == {str(p) for p in [*expected, home.state_broker.parent]}
    assert set(expected) <= set(checked_paths(home))
