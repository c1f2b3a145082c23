"""What a sandbox shows of the host under its winning grant (SPEC §5.5, §8.2; issue 9), and the
label of what it shows. Pure: paths and grants in, a plan out; no I/O.

A sandbox binds the winner's whole path, so three rules keep a narrower place's content from
being reached under the winner's lower label:

- **Covered.** A place inside the winner's path that another grant denies or labels above
  what the sandbox shows (a higher class, or untrusted where it is trusted) is covered, and so
  is boxmaker's own home, run folder and installation (`OwnPlaces`), except its workspace,
  which is shown again (re-opened) with the winner's mode.
- **Pinned.** Every folder between the winner's path (or a re-opened workspace) and a covered
  place is bound onto itself: a mount point cannot be renamed or removed, so no tool can move
  a covered place out from under its cover (`mv docs docs2` would otherwise carry `docs/vault`
  to a path no narrower grant names).
- **Joined.** What the sandbox shows carries the join of every grant, of any tool, whose path
  equals or contains the winner's: two grants that name one folder with different labels
  give its content the higher.

Together they make the label of a place the join of every grant that contains it: content
moves only inside a sandbox that may see it, so only to places whose label is at least its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bxcore.frozen import frozen
from bxcore.labels import Label
from services.brokerd.core.args import inside
from services.brokerd.core.grants import Grant, Mode


@dataclass(frozen=True, slots=True)  # not @frozen: two fields are computed (__post_init__)
class OwnPlaces:
    """boxmaker's own places, out of every tool's reach whatever the grants say (I2, I6):
    `closed` (the home, the run folder, the installation; as written and as resolved) except
    what lies in `open` (the workspace); `code`, the places among them that hold code only
    (the installation, its Python environment, the MCP servers installed in the home): no
    secret to read, only never to write."""

    closed: tuple[str, ...] = ()
    open: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    # The same as sets, made once (the object is frozen): `holds` is asked at every decision.
    _closed: frozenset[str] = field(init=False, repr=False, compare=False)
    _open: frozenset[str] = field(init=False, repr=False, compare=False)
    _code: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_closed", frozenset(self.closed))
        object.__setattr__(self, "_open", frozenset(self.open))
        object.__setattr__(self, "_code", frozenset(self.code))

    def holds(self, path: str) -> bool:
        """Whether `path` is one of boxmaker's own, outside the workspace."""
        return within(path, self._closed) and not within(path, self._open)

    def shown_by(self, path: str, *, read_only: bool) -> str | None:
        """The place of boxmaker's own that a bind of `path` whole would show: `path` itself,
        or one of them inside it (`/home/me` holds the home); None when it shows none. Read
        only, what lies in `code` shows nothing secret."""
        if read_only and within(path, self._code):
            return None
        if self.holds(path):
            return path
        counted = self._closed - self._code if read_only else self._closed
        inner = (place for place in sorted(counted) if inside(path, place))
        return next((place for place in inner if not within(place, self._open)), None)


NO_PLACES = OwnPlaces()


def within(path: str, places: frozenset[str]) -> bool:
    """`any(inside(place, path) for place in places)` for valid paths (§4.4), by looking up
    `path` and each folder above it in `places` rather than comparing every place with it:
    a decision asks it of boxmaker's own places, a dozen or more."""
    if path in places or ("/" in places and path.startswith("/")):
        return True
    at = path.find("/", 1)
    while at > 0:
        if path[:at] in places:
            return True
        at = path.find("/", at + 1)
    return False


#: Folders every sandbox replaces with its own (§8.2): what the host has under them is not
#: shown, unless the winner's path lies in one of them.
PRIVATE = ("/proc", "/dev", "/tmp")


@frozen
class View:
    """The plan of one sandbox under a grant of `root`: each list ordered parents first.

    `covers` are hidden (an empty read-only folder, or /dev/null over a file); `reopened`
    are bound again inside a cover; `pins` are bound onto themselves so nothing moves them.
    A place in `strict` reached through a symbolic link makes the call unconfinable: it
    could not be covered where it really is."""

    root: str
    covers: tuple[str, ...] = ()
    reopened: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()
    strict: frozenset[str] = frozenset()  # covers a narrower grant names (not boxmaker's own)


NO_VIEW = View("")


def exposure_label(winner: Grant, grants: Sequence[Grant]) -> Label:
    """The label of what a sandbox of `winner` shows: the join of the winner and every other
    grant (any tool, but a deny) whose path equals or contains the winner's."""
    label = Label(winner.class_, winner.untrusted)
    if winner.path is None:
        return label
    for grant in grants:
        contains = grant.path is not None and inside(grant.path, winner.path)
        if contains and grant.mode is not Mode.DENY:
            label = label.join(Label(grant.class_, grant.untrusted))
    return label


def _above(grant: Grant, shown: Label) -> bool:
    return grant.mode is Mode.DENY or not Label(grant.class_, grant.untrusted).at_most(shown)


def plan(winner: Grant, grants: Sequence[Grant], own: OwnPlaces = NO_PLACES) -> View:
    """What a sandbox of `winner` covers, shows again and pins (see the module docstring)."""
    root = winner.path
    if root is None:
        return View("")
    shown = exposure_label(winner, grants)

    def seen(place: str) -> bool:  # inside the winner's path and not under a private folder
        return inside(root, place) and not any(
            inside(private, place) and not inside(private, root) for private in PRIVATE
        )

    narrower = {
        g.path for g in grants if g.path is not None and g.path != root and _above(g, shown)
    }
    narrower = {place for place in narrower if seen(place)}
    ours = {place for place in own.closed if seen(place)}
    openings = {o for o in own.open if seen(o) and o not in narrower}
    covers: list[str] = []
    reopened: list[str] = []
    for place in sorted(narrower | ours | openings, key=_depth):
        around = _deepest(place, (*covers, *reopened))
        if place in openings:
            if around is not None and around in ours and around in covers:
                reopened.append(place)
        elif around is None or around in reopened:
            covers.append(place)
    pins: set[str] = set()
    for place in covers:
        anchor = _deepest(place, reopened) or root
        pins.update(_between(anchor, place))
    strict = frozenset(place for place in covers if place in narrower and place not in ours)
    return View(root, tuple(covers), tuple(reopened), tuple(sorted(pins, key=_depth)), strict)


def _depth(path: str) -> tuple[int, str]:
    return (0 if path == "/" else path.count("/"), path)


def _deepest(path: str, among: Iterable[str]) -> str | None:
    """The deepest of `among` that strictly contains `path`."""
    found = [p for p in among if p != path and inside(p, path)]
    return max(found, key=_depth) if found else None


def _between(outer: str, place: str) -> list[str]:
    """The folders strictly between `outer` and `place` (which is inside it)."""
    rest = place[len(outer) :].strip("/") if outer != "/" else place.strip("/")
    parts = rest.split("/")[:-1]
    base = "" if outer == "/" else outer
    return [base + "/" + "/".join(parts[: n + 1]) for n in range(len(parts))]


def grant_warnings(grants: Sequence[Grant], own: OwnPlaces = NO_PLACES) -> list[str]:
    """What about valid grants the owner should know, one line each (`bxctl grant check`,
    `bxctl status`, `bxctl grant add`): a grant of `/`; a grant over boxmaker's own places,
    which no tool sees whatever it says;
    and grants of one path that disagree on its label, which is then the higher of them."""
    found: list[str] = []
    for grant in sorted(grants, key=lambda g: g.id):
        if grant.path is None:
            continue
        if grant.path == "/" and grant.mode is not Mode.DENY:
            found.append(
                f"grant {grant.id} ({grant.tool} /) covers the whole file system: every file "
                "the sandbox's user may read; name the folder it needs instead"
            )
        covered = [place for place in own.closed if inside(grant.path, place)]
        if covered:
            found.append(
                f"grant {grant.id} ({grant.tool} {grant.path}) covers boxmaker's own files "
                f"({', '.join(covered)}): no tool ever reaches them, but the workspace"
            )
    labelled: dict[str, list[Grant]] = {}
    for grant in grants:
        if grant.path is not None and grant.mode is not Mode.DENY:
            labelled.setdefault(grant.path, []).append(grant)
    for path, same in sorted(labelled.items()):
        labels = {(g.class_, g.untrusted) for g in same}
        if len(labels) > 1:
            each = ", ".join(
                f"{g.id}: {g.class_}{' untrusted' if g.untrusted else ''}"
                for g in sorted(same, key=lambda g: g.id)
            )
            found.append(
                f"grants of {path} disagree on its label ({each}): what any tool reads there "
                "carries the highest of them"
            )
    return found
