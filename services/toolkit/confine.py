"""What the toolkit does first in a sandbox, before it reads a byte (SPEC §8.2, issue 9).

- `BX_BOUND=dev:ino:hexpath;…`: each host folder brokerd bound (the grant, pins, re-opened
  folders) must be, inside, the very folder brokerd checked. bwrap 0.8 turns the descriptor
  it is given back into a path; a folder swapped for a link in that instant would bind
  something else, and is refused here instead. Checked first, while the toolkit may still
  look through folders the tool user could not.
- `BX_USER=uid:gid` (brokerd runs as root): the sandbox was set up as root, so that bwrap could
  reach every granted folder, and the toolkit holds only CAP_SETUID, CAP_SETGID,
  CAP_SYS_RESOURCE and CAP_DAC_READ_SEARCH. With `BX_USERNS=0` it forbids new user namespaces
  in its own (what `bwrap --disable-userns` does), then drops every supplementary group and
  becomes that user, which clears every capability: no tool ever runs as root.

Imports `posix` only: `read_file` must stay as fast as it is.
"""

import posix

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


class ConfineError(Exception):
    """The sandbox is not as brokerd made it; `str()` is the reason after `toolkit: `."""


def confine(environ: "Mapping[bytes, bytes]") -> None:
    """Become the tool user and check the binds, as `environ` asks; ConfineError if not."""
    bound = environ.get(b"BX_BOUND")
    if bound:
        _check(bound)
    user = environ.get(b"BX_USER")
    if user is not None:
        _become(user, seal=environ.get(b"BX_USERNS") == b"0")


def _become(spec: bytes, *, seal: bool) -> None:
    try:
        uid_text, gid_text = spec.split(b":")
        uid, gid = int(uid_text), int(gid_text)
    except ValueError:
        raise ConfineError(f"BX_USER is not uid:gid: {spec!r}") from None
    if uid == 0 or gid == 0:
        raise ConfineError("BX_USER may not be root")
    try:
        if seal:
            fd = posix.open("/proc/sys/user/max_user_namespaces", posix.O_WRONLY)
            try:
                posix.write(fd, b"0")
            finally:
                posix.close(fd)
        posix.setgroups([])
        posix.setresgid(gid, gid, gid)
        posix.setresuid(uid, uid, uid)
    except OSError as error:
        raise ConfineError(f"cannot become the tool user: {error.strerror or error}") from None
    if posix.getresuid() != (uid, uid, uid) or posix.getgroups():
        raise ConfineError("cannot become the tool user")


def _check(bound: bytes) -> None:
    for entry in bound.split(b";"):
        try:
            dev, ino, hexpath = entry.split(b":")
            path = bytes.fromhex(hexpath.decode("ascii"))
            want = (int(dev), int(ino))
        except ValueError:
            raise ConfineError(f"BX_BOUND is malformed: {entry[:100]!r}") from None
        try:
            found = posix.lstat(path)
        except OSError:
            found = None
        if found is None or (found.st_dev, found.st_ino) != want:
            shown = path.decode("utf-8", "replace")
            raise ConfineError(f"{shown} is not the folder brokerd checked")
