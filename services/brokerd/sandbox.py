"""The sandbox's host side (SPEC §8.2): what the host looks like (`discover_host`), and the
descriptors the bwrap command binds — the winner's path and every folder laid over it, opened
without following a symbolic link (`open_granted`, `layers`). The command itself is pure, in
`services.brokerd.core.bwrap`; `services.brokerd.child` runs it within its limits.
"""

from __future__ import annotations

import os
import stat

from services.brokerd.core.bwrap import SYSTEM_LINKS, Cover, Host, Layer, depth
from services.brokerd.core.view import View


def discover_host(
    bwrap: str | None,
    python: str,
    prefix: str,
    toolkit: str,
    stdlib: tuple[str, ...] = (),
) -> Host:
    """The host as the sandbox binds it: the real paths of the interpreter, its prefix and the
    toolkit, and how /bin, /lib and the like are made here."""
    links: list[tuple[str, str]] = []
    folders: list[str] = []
    for name in SYSTEM_LINKS:
        path = f"/{name}"
        if os.path.islink(path):
            links.append((os.readlink(path), path))
        elif os.path.isdir(path):
            folders.append(path)
    # Real paths: a bind's source and destination are then the same folder, and the
    # interpreter is found under the prefix that is bound.
    real = os.path.realpath
    return Host(
        bwrap,
        real(python),
        real(prefix),
        real(toolkit),
        tuple(os.path.relpath(real(folder), real(prefix)) for folder in stdlib),
        tuple(links),
        tuple(folders),
    )


class Unconfinable(Exception):
    """The winner's path cannot be bound safely; `str()` is what the model reads."""


_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


def open_granted(path: str) -> int | None:
    """An `O_PATH` descriptor of `path`, reached one component at a time without following a
    symbolic link; None when it does not exist (nothing is bound, as `--bind-try` would).

    Unconfinable when a component is a symbolic link: bwrap would bind what it points to,
    which is not what the grant names (and may be what a tool pointed it at). The caller
    closes the descriptor."""
    current = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    walked = ""
    try:
        for part in (part for part in path.split("/") if part):
            walked += "/" + part
            try:
                following = os.open(part, _PATH_FLAGS, dir_fd=current)
            except (FileNotFoundError, NotADirectoryError):
                return None
            except OSError as error:
                why = error.strerror or str(error)
                raise Unconfinable(f"the granted path {path} cannot be confined: {why}") from None
            os.close(current)
            current = following
            if stat.S_ISLNK(os.fstat(current).st_mode):
                raise Unconfinable(
                    f"the granted path {path} cannot be confined: {walked} is a symbolic link"
                )
        found, current = current, -1
        return found
    finally:
        if current >= 0:
            os.close(current)


def layers(bound: int, view: View, *, writable: bool) -> tuple[Layer, ...]:
    """The layers of `view` over the winner's path (pinned as `bound`), for what exists.

    Each place is reached from `bound` without following a symbolic link. A narrower
    grant's place reached through one is Unconfinable (it could not be covered where it
    really is); one of boxmaker's own places is skipped, its resolved path being covered too.
    Pins are made only when the sandbox can write (a read-only one can move nothing). The
    caller closes the layers (`close`), also when this raises."""
    found: list[Layer] = []
    try:
        wanted: list[tuple[str, Cover]] = [(p, Cover.PIN) for p in view.pins] if writable else []
        wanted += [(path, Cover.REOPEN) for path in view.reopened]
        wanted += [(path, Cover.FOLDER) for path in view.covers]
        for path, cover in sorted(wanted, key=lambda item: depth(item[0])):
            strict = cover is Cover.FOLDER and path in view.strict
            fd = _walk(bound, view.root, path, strict=strict)
            if fd is None:
                continue
            if cover is Cover.FOLDER:
                is_folder = stat.S_ISDIR(os.fstat(fd).st_mode)
                os.close(fd)
                found.append(Layer(Cover.FOLDER if is_folder else Cover.FILE, path))
            elif stat.S_ISDIR(os.fstat(fd).st_mode):
                found.append(Layer(cover, path, fd))
            else:
                os.close(fd)
    except BaseException:
        close(found)
        raise
    return tuple(found)


def close(found: tuple[Layer, ...] | list[Layer]) -> None:
    for layer in found:
        if layer.fd >= 0:
            os.close(layer.fd)


def _walk(start: int, root: str, place: str, *, strict: bool) -> int | None:
    """An O_PATH descriptor of `place` under `root` (pinned as `start`), never through a link;
    None if it is missing (or, not `strict`, reached through a link)."""
    relative = place[len(root) :].strip("/") if root != "/" else place.strip("/")
    current = os.dup(start)
    try:
        for part in relative.split("/") if relative else ():
            try:
                following = os.open(part, _PATH_FLAGS, dir_fd=current)
            except (FileNotFoundError, NotADirectoryError):
                return None
            os.close(current)
            current = following
            if stat.S_ISLNK(os.fstat(current).st_mode):
                if not strict:
                    return None
                raise Unconfinable(
                    f"{place}, which another grant covers, cannot be hidden: it is reached "
                    "through a symbolic link"
                )
        found, current = current, -1
        return found
    finally:
        if current >= 0:
            os.close(current)
