"""How an `[[mcp]]` entry meets the machine (issue 27): a bare program name is found in the
box's own virtual environment when it is not on PATH, a name found nowhere names where it was
looked for, and each path its sandbox user cannot use is one warning."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from bxcore.config.mcp import McpServer
from bxcore.mcp_host import Sandboxed, not_found, resolve_program, search_path, warnings

VENV_BIN = os.path.dirname(sys.executable)


def test_the_boxs_own_environment_is_searched_after_path() -> None:
    assert search_path("/usr/bin:/bin") == f"/usr/bin:/bin:{VENV_BIN}"
    assert search_path(f"{VENV_BIN}:/bin") == f"{VENV_BIN}:/bin"  # once


def test_a_program_only_in_the_boxs_environment_is_found_without_it_on_path() -> None:
    assert resolve_program("mcp-server-time", "/usr/bin:/bin") == f"{VENV_BIN}/mcp-server-time"


def test_a_program_found_nowhere_names_where_it_was_looked_for() -> None:
    assert resolve_program("mcp-server-nowhere", "/usr/bin") is None
    said = not_found("mcp-server-nowhere", "/usr/bin")
    assert (
        said == f"'mcp-server-nowhere' is not an executable program in any of /usr/bin:{VENV_BIN}"
    )


def test_an_absolute_program_must_be_an_executable_file(tmp_path: Path) -> None:
    assert resolve_program("/usr/bin", None) is None  # a folder
    assert resolve_program(sys.executable, None) == sys.executable
    assert not_found("/nope/srv", None) == "'/nope/srv' is not an executable program here"


ME = Sandboxed(1000, frozenset({1000}), "me (uid 1000)")


def found(mode: int, uid: int = 1000, gid: int = 1000) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


FOLDER = stat.S_IFDIR


@pytest.mark.parametrize(
    ("paths", "ro_paths", "said"),
    [
        ({"/r": found(FOLDER | 0o700)}, {}, []),
        ({}, {"/m": found(FOLDER | 0o755, uid=0, gid=0)}, []),  # ro: reading is enough
        ({}, {"/f": found(stat.S_IFREG | 0o640, uid=0, gid=1000)}, []),  # by its group
        (
            {"/r": found(FOLDER | 0o755, uid=0, gid=0)},
            {},
            ["paths: /r is not one me (uid 1000) may read and write (drwxr-xr-x)"],
        ),
        (
            {"/r": found(FOLDER | 0o777, uid=0, gid=0)},
            {},
            [
                "paths: /r is owned by uid 0, not by me (uid 1000), whom the server runs as: "
                "some servers refuse it (git: 'dubious ownership')"
            ],
        ),
        (
            {},
            {"/m": found(FOLDER | 0o750, uid=0, gid=0)},
            ["ro_paths: /m is not one me (uid 1000) may read (drwxr-x---)"],
        ),
        (
            {},
            {"/m": found(FOLDER | 0o644)},
            ["ro_paths: /m is not one me (uid 1000) may read (drw-r--r--)"],
        ),
        (
            {"/gone": FileNotFoundError(2, "No such file")},
            {},
            ["paths: /gone does not exist: nothing is bound there"],
        ),
        (
            {},
            {"/x": PermissionError(13, "Permission denied")},
            ["ro_paths: /x cannot be looked at: Permission denied"],
        ),
    ],
)
def test_each_path_the_sandbox_user_cannot_use_is_one_warning(
    paths: dict[str, os.stat_result | OSError],
    ro_paths: dict[str, os.stat_result | OSError],
    said: list[str],
) -> None:
    server = McpServer("srv", ("/usr/bin/srv",), paths=tuple(paths), ro_paths=tuple(ro_paths))
    looked = {**paths, **ro_paths}
    assert warnings(server, ME, looked.__getitem__) == said


def test_brokerd_as_root_judges_for_the_tool_user_and_as_itself_for_itself() -> None:
    dropped = Sandboxed.of_brokerd((65534, 65534))
    assert (dropped.uid, dropped.groups) == (65534, frozenset({65534}))
    assert Sandboxed.of_brokerd(None).uid == os.geteuid()
