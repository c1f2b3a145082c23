"""An npm MCP server configured as its README says, `npx -y PACKAGE ARGS...` (issue 27), made
to run in a sandbox with no network: the package installed once, outside the sandbox, with the
machine's npm into `{home}/mcp/npm/<name>`, and its bin run with node.

`npx_command`, `package_name` and `bin_of` are pure; `install` runs npm (`--ignore-scripts`:
nothing of the package runs outside its sandbox, not even at its install).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bxctl import mcp_install
from bxctl.mcp_install import InstallError

#: npm's names: an optional @scope/, then a name; an optional @version or tag after it.
_PACKAGE = re.compile(r"(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*")
_VERSION = re.compile(r"[A-Za-z0-9.^~<>=*+|_ -]{1,64}")
_YES = ("-y", "--yes", "-q", "--quiet")


@dataclass(frozen=True, slots=True)
class NpxCommand:
    """`npx -y PACKAGE[@VERSION] ARGS...`: what to install, and the server's own arguments."""

    spec: str  # PACKAGE or PACKAGE@VERSION, as npm takes it
    args: tuple[str, ...]

    @property
    def package(self) -> str:
        return package_name(self.spec)


def is_npx(argv: list[str]) -> bool:
    return bool(argv) and argv[0].rsplit("/", 1)[-1] == "npx"


def npx_command(argv: list[str]) -> NpxCommand:
    """The package and arguments of an npx command line (`is_npx`). npx's own options are
    `-y`/`--yes` (and `-q`), or `--package=PACKAGE` / `-p PACKAGE` before the bin's name,
    which must then be the package's own."""
    rest = list(argv[1:])
    spec: str | None = None
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in _YES:
            continue
        if option.startswith("--package="):
            spec = option.split("=", 1)[1]
        elif option in ("-p", "--package") and rest:
            spec = rest.pop(0)
        else:
            raise InstallError(
                f"npx option {option!r} is not understood here; write -y PACKAGE ARGS"
            )
    if not rest:
        raise InstallError("npx is given no package: write `npx -y PACKAGE ARGS...`")
    if spec is None:
        spec = rest.pop(0)
    else:
        rest.pop(0)  # the bin's name: the package's own bin is run (`bin_of`)
    package_name(spec)  # checked
    return NpxCommand(spec, tuple(rest))


def package_name(spec: str) -> str:
    """The package of `PACKAGE[@VERSION]`; a path, URL or git source is refused (`InstallError`):
    only packages from the registry npm is configured with."""
    at = spec.find("@", 1)
    name, version = (spec, None) if at < 0 else (spec[:at], spec[at + 1 :])
    if _PACKAGE.fullmatch(name) is None or len(name) > 214:
        raise InstallError(f"{spec!r} is not an npm package name (such as @scope/server-x@1.2.3)")
    if version is not None and _VERSION.fullmatch(version) is None:
        raise InstallError(f"{spec!r}: {version!r} is not a version, range or tag")
    return name


def bin_of(manifest: dict[str, Any], package: str) -> str:
    """The file npx would run of a package, from its package.json (`manifest`): its one bin,
    or the one named as the package (without its scope). Relative to the package's folder."""
    bins = manifest.get("bin")
    short = package.rsplit("/", 1)[-1]
    if isinstance(bins, str):
        bins = {short: bins}
    if not isinstance(bins, dict) or not bins:
        raise InstallError(f"{package} has no program to run (no `bin` in its package.json)")
    if len(bins) == 1:
        chosen = next(iter(bins.values()))
    elif short in bins:
        chosen = bins[short]
    else:
        raise InstallError(f"{package} has several programs ({', '.join(sorted(bins))}): name one")
    relative = os.path.normpath(chosen) if isinstance(chosen, str) else "/"
    if relative.startswith(("/", "..")):
        raise InstallError(f"{package}: its bin {chosen!r} is not a file of the package")
    return relative


def programs() -> tuple[str, str]:
    """The machine's node and npm (Debian's `nodejs` and `npm`), or `InstallError`."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(n for n, p in (("node", node), ("npm", npm)) if p is None)
        raise InstallError(f"{missing} not found: install them (`apt install nodejs npm`)")
    return os.path.realpath(node), npm


def install(npm: str, folder: Path, spec: str) -> dict[str, Any]:
    """`spec` installed with npm into `folder` (its `node_modules`), none of its scripts run;
    the installed package's package.json. npm's cache is used first (`--prefer-offline`)."""
    folder.mkdir(mode=0o755, parents=True, exist_ok=True)
    argv = [npm, "install", "--prefix", str(folder), "--ignore-scripts", "--omit=dev"]
    argv += ["--no-audit", "--no-fund", "--prefer-offline", "--loglevel=error", spec]
    mcp_install.run(f"npm install {spec}", argv)
    manifest = folder / "node_modules" / package_name(spec) / "package.json"
    try:
        # json, not strict_json: npm reads package.json leniently (a key twice, the last wins),
        # and refusing what npm installed would refuse a package that works
        found = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InstallError(f"{manifest} cannot be read after npm install: {error}") from None
    if not isinstance(found, dict):
        raise InstallError(f"{manifest} is not a JSON object")
    return found
