"""What `npx -y PACKAGE ARGS` means to `bxctl mcp add` (issue 27): the package to install and
the server's own arguments, and which of the package's files npx would run."""

from __future__ import annotations

import pytest

from bxctl.mcp_install import InstallError
from bxctl.mcp_npm import NpxCommand, bin_of, npx_command, package_name

FS = "@modelcontextprotocol/server-filesystem"


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["npx", "-y", FS, "/a", "/b"], NpxCommand(FS, ("/a", "/b"))),
        (["/usr/bin/npx", "--yes", f"{FS}@2026.8.31"], NpxCommand(f"{FS}@2026.8.31", ())),
        (["npx", "mcp-server-x@^1.2", "--flag"], NpxCommand("mcp-server-x@^1.2", ("--flag",))),
        (["npx", "-y", "-p", FS, "mcp-server-filesystem", "/a"], NpxCommand(FS, ("/a",))),
        (["npx", f"--package={FS}", "mcp-server-filesystem"], NpxCommand(FS, ())),
    ],
)
def test_the_package_and_the_servers_arguments_are_read(
    argv: list[str], command: NpxCommand
) -> None:
    assert npx_command(argv) == command
    assert command.package == package_name(command.spec)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["npx", "-y"], "npx is given no package"),
        (["npx", "--registry", "https://evil.example", FS], "npx option '--registry'"),
        (["npx", "-y", "./local-server"], "is not an npm package name"),
        (["npx", "-y", "git+https://example.com/x.git"], "is not an npm package name"),
        (["npx", "-y", "Server"], "is not an npm package name"),
        (["npx", "-y", "srv@$(rm -rf /)"], "is not a version, range or tag"),
    ],
)
def test_what_cannot_be_installed_is_one_line(argv: list[str], said: str) -> None:
    with pytest.raises(InstallError) as caught:
        npx_command(argv)
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_package_names_keep_their_scope_and_lose_their_version() -> None:
    assert package_name(f"{FS}@1.0.0") == FS
    assert package_name("mcp-server-x@latest") == "mcp-server-x"


@pytest.mark.parametrize(
    ("manifest", "program"),
    [
        ({"bin": {"mcp-server-filesystem": "dist/index.js"}}, "dist/index.js"),
        ({"bin": "./dist/index.js"}, "dist/index.js"),
        ({"bin": {"other": "o.js", "server-filesystem": "./s.js"}}, "s.js"),
    ],
)
def test_the_file_npx_would_run_is_the_one_bin_or_the_one_named_as_the_package(
    manifest: dict[str, object], program: str
) -> None:
    assert bin_of(manifest, FS) == program


@pytest.mark.parametrize(
    ("manifest", "said"),
    [
        ({}, "has no program to run"),
        ({"bin": {"a": "a.js", "b": "b.js"}}, "has several programs (a, b)"),
        ({"bin": "../../outside.js"}, "is not a file of the package"),
        ({"bin": "/usr/bin/sh"}, "is not a file of the package"),
        ({"bin": {"x": 3}}, "is not a file of the package"),
    ],
)
def test_a_package_without_one_clear_program_is_refused(
    manifest: dict[str, object], said: str
) -> None:
    with pytest.raises(InstallError) as caught:
        bin_of(manifest, FS)
    assert said in str(caught.value)
