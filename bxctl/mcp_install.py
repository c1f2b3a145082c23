"""Running an installer for `bxctl mcp add` (issue 27): npm or pip, outside any sandbox, as
the owner, bounded in time; its failure one line (`InstallError`) with the end of what it
said. What each installer is told is `mcp_npm`'s and `mcp_pypi`'s.
"""

from __future__ import annotations

import subprocess

INSTALL_S = 600.0


class InstallError(Exception):
    """What cannot be installed, or how its installer failed: one line for the owner."""


def run(what: str, argv: list[str]) -> None:
    """`argv` run to its end within INSTALL_S; `InstallError` naming `what` unless it ends 0."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_S)
    except subprocess.TimeoutExpired:
        raise InstallError(f"{what} took over {INSTALL_S:g} s") from None
    except OSError as error:
        raise InstallError(f"{what} cannot run: {error.strerror or error}") from None
    if done.returncode != 0:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        raise InstallError(f"{what} failed: {' | '.join(said[-3:]) or done.returncode}")
