"""A Python MCP server configured as its README says, `uvx PACKAGE ARGS...` (issue 27), made to
run in a sandbox with no network: the package installed once, outside the sandbox, with pip
into a virtual environment of its own, `{home}/mcp/venv/<name>`, whose program the entry runs
(brokerd binds the environment read-only, as for any program in one).

`uvx_command` is pure; `install` runs pip (`--only-binary :all:`: wheels only, so nothing of
the package runs outside its sandbox, not even a build at its install).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from bxctl import mcp_install
from bxctl.mcp_install import InstallError

#: PEP 508's names, and the exact versions and ranges this takes (`==1.2`, `>=1,<2`).
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_EXTRAS = re.compile(r"\[[A-Za-z0-9._-]+(,[A-Za-z0-9._-]+)*\]")
_SPECIFIER = re.compile(
    r"(===?|!=|~=|<=?|>=?)[A-Za-z0-9.*+!-]+(,(===?|!=|~=|<=?|>=?)[A-Za-z0-9.*+!-]+)*"
)


@dataclass(frozen=True, slots=True)
class UvxCommand:
    """`uvx [--from REQUIREMENT] PROGRAM ARGS...`: what to install, the program it provides
    (the package's name unless `--from` says otherwise) and the server's own arguments."""

    requirement: str  # as pip takes it: NAME[EXTRAS][SPECIFIER]
    program: str
    args: tuple[str, ...]


def is_uvx(argv: list[str]) -> bool:
    return bool(argv) and argv[0].rsplit("/", 1)[-1] == "uvx"


def uvx_command(argv: list[str]) -> UvxCommand:
    """The requirement, program and arguments of a uvx command line (`is_uvx`): `uvx PACKAGE
    ARGS`, `uvx PACKAGE@VERSION ARGS`, or `uvx --from REQUIREMENT PROGRAM ARGS` (and `-q`)."""
    rest = list(argv[1:])
    given: str | None = None
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in ("-q", "--quiet"):
            continue
        if option.startswith("--from="):
            given = option.split("=", 1)[1]
        elif option == "--from" and rest:
            given = rest.pop(0)
        else:
            raise InstallError(f"uvx option {option!r} is not understood here; write PACKAGE ARGS")
    if not rest:
        raise InstallError("uvx is given no package: write `uvx PACKAGE ARGS...`")
    first = rest.pop(0)
    if given is None:
        name, at, version = first.partition("@")
        requirement = f"{name}=={version}" if at else name
        program = name
    else:
        requirement, program = given, first
    _check(requirement)
    if _NAME.fullmatch(program) is None:
        raise InstallError(f"{program!r} is not a program's name")
    return UvxCommand(requirement, program, tuple(rest))


def _check(requirement: str) -> None:
    """A requirement from the index: a name, optional extras and version specifiers; a path,
    URL or anything else pip would fetch from elsewhere is refused."""
    found = _NAME.match(requirement)
    rest = requirement[found.end() :] if found else None
    if rest is not None and (extras := _EXTRAS.match(rest)):
        rest = rest[extras.end() :]
    if rest is None or (rest and _SPECIFIER.fullmatch(rest) is None):
        raise InstallError(f"{requirement!r} is not a package from the index (such as name==1.2)")


def install(folder: Path, requirement: str) -> Path:
    """`requirement` installed with pip, wheels only, into a new virtual environment at
    `folder`; its `bin` folder. One there already is emptied first (`venv --clear`): a `.pth`
    file a package put in it runs at every start of its Python, so pip never starts that
    Python outside the sandbox with a package's files in it."""
    folder.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    python = folder / "bin" / "python"
    venv = [sys.executable, "-m", "venv", "--clear", str(folder)]
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    steps = [
        ("python -m venv", venv),
        (f"pip install {requirement}", [*pip, "--only-binary", ":all:", requirement]),
    ]
    for what, argv in steps:
        mcp_install.run(what, argv)
    return folder / "bin"
