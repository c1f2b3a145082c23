"""Where boxmaker's own files are (issue 9): the places no tool reaches, whatever the grants say.

The home (everything but its workspace), the run folder with the sockets (also when it is a
short folder under /tmp, or an endpoint the config moved), and the installation: the folder
that holds the `bxcore` package (a checkout, or site-packages) and the Python environment it
runs in. A tool that could write there could grant itself anything, read the owner's keys,
speak on the owner's sockets, or plant code that brokerd or the toolkit would run. Each place
is listed as written and as resolved, since grants name paths as written. Reads paths only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import bxcore
from bxcore.config.file import Config
from bxcore.home.layout import SOCKETS, Home
from services.brokerd.core.args import valid_path
from services.brokerd.core.view import OwnPlaces


def own_places(home: Home, config: Config) -> OwnPlaces:
    install = Path(bxcore.__file__).resolve().parent.parent
    closed = [home.root, home.run_dir, install, Path(sys.prefix)]
    for socket in SOCKETS:
        endpoint = config.sockets.endpoint(socket, home)
        if endpoint.startswith("ipc://"):
            closed.append(Path(endpoint[len("ipc://") :]))
    code = _both([install, Path(sys.prefix), home.mcp])  # read by servers, written by none
    return OwnPlaces(_both(closed), _both([home.workspace]), code)


def binds_problem(own: OwnPlaces, paths: Sequence[str], ro_paths: Sequence[str]) -> str | None:
    """Why an MCP server with these binds may not start (None: it may): one would show one of
    boxmaker's own places (`OwnPlaces.shown_by`), each path as written and as resolved, since
    bwrap binds what a link names."""
    binds = [(path, False) for path in paths] + [(path, True) for path in ro_paths]
    for bound, read_only in binds:
        for form in dict.fromkeys((bound, os.path.realpath(bound))):
            place = own.shown_by(form, read_only=read_only)
            if place is not None:
                return (
                    f"its path {bound} would show boxmaker's own {place}, which no tool may "
                    "reach: name a folder outside it, or in the workspace"
                )
    return None


def _both(paths: list[Path]) -> tuple[str, ...]:
    """Each path as written and as resolved, without repeats, each a valid grant path."""
    found: dict[str, None] = {}
    for path in paths:
        for form in (os.path.abspath(path), os.path.realpath(path)):
            if valid_path(form):
                found[form] = None
    return tuple(found)
