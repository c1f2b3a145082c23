"""What `uvx PACKAGE ARGS` means to `bxctl mcp add` (issue 27): the requirement pip installs
from the index, the program it provides, and the server's own arguments."""

from __future__ import annotations

import pytest

from bxctl.mcp_install import InstallError
from bxctl.mcp_pypi import UvxCommand, uvx_command

GIT = UvxCommand("mcp-server-git", "mcp-server-git", ("--repository", "/r"))
TIME = UvxCommand("mcp-server-time==2025.9.25", "mcp-server-time", ())
FETCH = UvxCommand("mcp-server-fetch>=2025,<2027", "mcp-server-fetch", ())
WEATHER = UvxCommand("weather-mcp[cli]", "weather", ("--units", "si"))


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["uvx", "mcp-server-git", "--repository", "/r"], GIT),
        (["/usr/bin/uvx", "mcp-server-time@2025.9.25"], TIME),
        (["uvx", "-q", "--from", "mcp-server-fetch>=2025,<2027", "mcp-server-fetch"], FETCH),
        (["uvx", "--from=weather-mcp[cli]", "weather", "--units", "si"], WEATHER),
    ],
)
def test_the_requirement_program_and_arguments_are_read(
    argv: list[str], command: UvxCommand
) -> None:
    assert uvx_command(argv) == command


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["uvx"], "uvx is given no package"),
        (["uvx", "--index-url", "https://evil.example", "srv"], "uvx option '--index-url'"),
        (
            ["uvx", "--from", "git+https://example.com/x.git", "x"],
            "is not a package from the index",
        ),
        (["uvx", "--from", "./local", "x"], "is not a package from the index"),
        (["uvx", "--from", "srv @ https://evil.example/srv.whl", "srv"], "is not a package from"),
        (["uvx", "--from", "srv", "../bin/sh"], "is not a program's name"),
        (["uvx", "srv@1.0; rm -rf /"], "is not a package from the index"),
    ],
)
def test_what_cannot_be_installed_is_one_line(argv: list[str], said: str) -> None:
    with pytest.raises(InstallError) as caught:
        uvx_command(argv)
    assert said in str(caught.value) and "\n" not in str(caught.value)
