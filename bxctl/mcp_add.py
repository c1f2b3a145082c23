"""`bxctl mcp add NAME [--path P] [--ro-path P] [--host H] [--env K=V] -- COMMAND...` (issue
27): an MCP server added as its README says to run it, its `[[mcp]]` entry appended to
config.toml once it reads as brokerd will read it.

An `npx -y PACKAGE ARGS...` command is installed first (`mcp_npm`: outside the sandbox, no
package script run) and the entry runs the package's bin with node, its `node_modules` bound
read-only; `uvx PACKAGE ARGS...` is installed into a virtual environment of its own
(`mcp_pypi`: wheels only) whose program the entry runs; any other program is written as the
absolute path brokerd would find. Arguments that are absolute paths of existing files or
folders are the server's to use: bound read-write (`paths`) unless given as `--ro-path`.
`render_entry` is pure.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from typing import Annotated

import typer

from bxcore.config.file import ConfigError, load_config, parse_config
from bxcore.config.mcp import valid_server_name
from bxcore.config.written import toml_value
from bxcore.home.atomic import write_atomically
from bxcore.home.layout import Home
from bxcore.mcp_host import not_found, resolve_program
from bxcore.visible import visible
from bxctl import mcp_npm, mcp_pypi
from bxctl.mcp_install import InstallError
from bxctl.output import fail, say
from services.brokerd.face import binds_problem, own_places


def render_entry(
    name: str,
    command: Sequence[str],
    *,
    paths: Sequence[str] = (),
    ro_paths: Sequence[str] = (),
    hosts: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    note: str | None = None,
) -> str:
    """The `[[mcp]]` table, with the keys it needs only; `note` is a comment above it, kept to
    one line (`visible`): a newline in an argument the owner pasted, or in the version a
    package's own package.json gives, would end the comment and write TOML of its own."""
    lines = [f"# {visible(note)}"] if note else []
    lines += ["[[mcp]]", f"name = {toml_value(name)}", f"command = {toml_value(list(command))}"]
    for key, values in (("paths", paths), ("ro_paths", ro_paths), ("hosts", hosts)):
        if values:
            lines.append(f"{key} = {toml_value(list(values))}")
    if env:
        lines.append(f"env = {toml_value(dict(env))}")
    return "\n".join(lines) + "\n"


def named_paths(args: Sequence[str], given: Sequence[str]) -> list[str]:
    """The server's arguments that are absolute paths of existing files or folders and are
    not in `given` already: what it was told to use."""
    found: list[str] = []
    for arg in args:
        path = arg.rstrip("/") or arg
        fresh = path.startswith("/") and path not in given and path not in found
        if fresh and os.path.exists(path):
            found.append(path)
    return found


def _env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals:
            fail(f"--env {pair!r}: expected NAME=VALUE")
        env[name] = value
    return env


def add(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The server's name: a-z 0-9 -, 1 to 24.")
    ],
    command: Annotated[
        list[str],
        typer.Argument(
            metavar="COMMAND", help="After --: its command line, as its README gives it."
        ),
    ],
    path: Annotated[
        list[str] | None,
        typer.Option("--path", metavar="PATH", help="Bind this read-write (repeatable)."),
    ] = None,
    ro_path: Annotated[
        list[str] | None,
        typer.Option("--ro-path", metavar="PATH", help="Bind this read-only (repeatable)."),
    ] = None,
    host: Annotated[
        list[str] | None,
        typer.Option("--host", metavar="HOST", help="A host it may reach on 443 (repeatable)."),
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", metavar="NAME=VALUE", help="In its environment (repeatable)."),
    ] = None,
) -> None:
    """Add an MCP server as its README runs it (`npx` and `uvx` packages are installed once)."""
    home: Home = ctx.obj.home
    if not valid_server_name(name):
        fail(f"{name!r}: a server's name is 1 to 24 of a-z 0-9 -")
    if not home.config.exists():
        fail(f"there is no {home.config}: run `bxctl init` first")
    try:
        config = load_config(home.config)
    except ConfigError as error:
        fail(f"config.toml must be mended first: {error}")
    if any(server.name == name for server in config.mcp):
        fail(f"config.toml has an [[mcp]] entry named {name!r} already")
    rw = list(path or [])
    ro = list(ro_path or [])
    argv, own, ro_installed, note = _command(home, name, command)
    rw += named_paths(own, [*rw, *ro])
    block = render_entry(
        name,
        argv,
        paths=rw,
        ro_paths=[*ro_installed, *ro],
        hosts=host or [],
        env=_env(env or []),
        note=note,
    )
    old = home.config.read_bytes()
    new = old + (b"" if old.endswith(b"\n") or not old else b"\n") + b"\n" + block.encode()
    try:
        parse_config(new, str(home.config))
    except ConfigError as error:
        fail(str(error))
    problem = binds_problem(own_places(home, config), rw, [*ro_installed, *ro])
    if problem is not None:
        fail(f"not added: {problem} (brokerd would not start it)")
    write_atomically(home.config, new, mode=home.config.stat().st_mode & 0o777)
    say(f"added [[mcp]] {name} to {home.config}:")
    for line in block.splitlines():
        say(f"  {line}")
    say(f"next: `bxctl restart brokerd` (or `bxctl up`), then `bxctl mcp trust {name}`")


def _command(
    home: Home, name: str, command: list[str]
) -> tuple[list[str], tuple[str, ...], list[str], str]:
    """The entry's argv, the server's own arguments, what it needs read-only, and a note on
    where it came from."""
    if not command:
        fail("give the server's command after --, e.g. `-- npx -y @modelcontextprotocol/...`")
    if mcp_pypi.is_uvx(command):
        return _uvx(home, name, command)
    if not mcp_npm.is_npx(command):
        program = resolve_program(command[0], os.environ.get("PATH"))
        if program is None:
            fail(not_found(command[0], os.environ.get("PATH")))
        return (
            [program, *command[1:]],
            tuple(command[1:]),
            [],
            f"bxctl mcp add {name} -- {shlex.join(command)}",
        )
    try:
        npx = mcp_npm.npx_command(command)
        node, npm = mcp_npm.programs()
        folder = home.mcp_npm(name)
        home.mcp.mkdir(mode=0o700, parents=True, exist_ok=True)
        say(f"installing {npx.spec} with npm into {folder}…")
        manifest = mcp_npm.install(npm, folder, npx.spec)
        script = folder / "node_modules" / npx.package / mcp_npm.bin_of(manifest, npx.package)
    except InstallError as error:
        fail(str(error))
    if not script.is_file():
        fail(f"{npx.package}'s program {script} was not installed")
    version = manifest.get("version")
    said = f"{npx.package} {version}" if isinstance(version, str) else npx.package
    note = f"{said}, installed by `bxctl mcp add {name} -- {shlex.join(command)}`"
    return [node, str(script), *npx.args], npx.args, [str(folder / "node_modules")], note


def _uvx(
    home: Home, name: str, command: list[str]
) -> tuple[list[str], tuple[str, ...], list[str], str]:
    """`uvx PACKAGE ARGS`: the package installed into a virtual environment of its own, whose
    program the entry runs (brokerd binds an environment read-only by itself)."""
    try:
        uvx = mcp_pypi.uvx_command(command)
        folder = home.mcp_venv(name)
        home.mcp.mkdir(mode=0o700, parents=True, exist_ok=True)
        say(f"installing {uvx.requirement} with pip into {folder}…")
        program = mcp_pypi.install(folder, uvx.requirement) / uvx.program
    except InstallError as error:
        fail(str(error))
    if not program.is_file():
        fail(
            f"{uvx.requirement} has no program {uvx.program!r}: name it, "
            "`uvx --from PACKAGE PROGRAM ARGS`"
        )
    note = f"{uvx.requirement}, installed by `bxctl mcp add {name} -- {shlex.join(command)}`"
    return [str(program), *uvx.args], uvx.args, [], note
