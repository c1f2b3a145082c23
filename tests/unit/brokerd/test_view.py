"""What a sandbox shows of the host (`view.plan`, `view.exposure_label`), case by case: what
is covered, shown again and pinned, and the label of what is shown (issue 9); and boxmaker's
own places (`OwnPlaces.holds`, by `within`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bxcore.labels import DataClass, Label
from services.brokerd.core.args import inside
from services.brokerd.core.grants import Grant, Mode
from services.brokerd.core.view import OwnPlaces, View, exposure_label, plan, within


def g(gid: str, path: str, *, tool: str = "read_file", mode: str = "allow", cls: str = "private",
      untrusted: bool = False) -> Grant:  # fmt: skip
    return Grant(gid, tool, Mode(mode), path, None, DataClass(cls), untrusted, "", "0" * 64)


WIDE = g("wide", "/w", tool="shell")
HOME = OwnPlaces(("/w/box",), ("/w/box/workspace",))


@pytest.mark.parametrize(
    "others, own, expected",
    [
        ([], OwnPlaces(), View("/w")),
        (  # a narrower secret folder two levels down: covered, and the folder above it pinned
            [g("vault", "/w/docs/vault", cls="secret")],
            OwnPlaces(),
            View("/w", ("/w/docs/vault",), (), ("/w/docs",), frozenset({"/w/docs/vault"})),
        ),
        (  # deeper still: every folder between is pinned
            [g("vault", "/w/a/b/c/vault", mode="deny")],
            OwnPlaces(),
            View(
                "/w",
                ("/w/a/b/c/vault",),
                (),
                ("/w/a", "/w/a/b", "/w/a/b/c"),
                frozenset({"/w/a/b/c/vault"}),
            ),
        ),
        (  # the home: covered, its workspace shown again, nothing pinned inside the cover
            [],
            HOME,
            View("/w", ("/w/box",), ("/w/box/workspace",)),
        ),
        (  # a narrower grant inside the workspace is covered again, pinned from the workspace
            [g("inner", "/w/box/workspace/p/q", cls="secret")],
            HOME,
            View(
                "/w",
                ("/w/box", "/w/box/workspace/p/q"),
                ("/w/box/workspace",),
                ("/w/box/workspace/p",),
                frozenset({"/w/box/workspace/p/q"}),
            ),
        ),
        (  # a narrower deny over the workspace keeps it covered
            [g("no-ws", "/w/box/workspace", mode="deny")],
            HOME,
            View("/w", ("/w/box",)),
        ),
        (  # a narrower deny above the home: the home is covered by it, the workspace too
            [g("no-box", "/w/box", mode="deny", tool="write_file")],
            OwnPlaces(("/w/box/inner",), ("/w/box/inner/workspace",)),
            View("/w", ("/w/box",), (), (), frozenset({"/w/box"})),
        ),
        (  # one cover inside another: only the outer one
            [g("a", "/w/a", cls="secret"), g("b", "/w/a/b", mode="deny")],
            OwnPlaces(),
            View("/w", ("/w/a",), (), (), frozenset({"/w/a"})),
        ),
        (  # what is not above the winner's label is not covered
            [g("same", "/w/s"), g("lower", "/w/l", cls="public"), g("out", "/x", cls="secret")],
            OwnPlaces(),
            View("/w"),
        ),
    ],
)
def test_the_plan_covers_reopens_and_pins(
    others: list[Grant], own: OwnPlaces, expected: View
) -> None:
    assert plan(WIDE, [WIDE, *others], own) == expected


def test_a_secret_grant_on_the_same_folder_or_above_leaves_nothing_to_cover() -> None:
    above = g("above", "/", tool="shell", cls="secret")
    vault = g("vault", "/w/docs/vault", cls="secret")
    assert plan(WIDE, [WIDE, above, vault]).covers == ()


@pytest.mark.parametrize("root", ["/", "/srv"])
def test_what_lies_under_the_sandboxes_own_folders_is_never_covered_or_pinned(root: str) -> None:
    """/tmp, /dev and /proc are the sandbox's own: the host's content under them is unseen."""
    winner = g("all", root, tool="shell")
    own = OwnPlaces(("/tmp/bx-1/h", "/srv/box"), ("/tmp/bx-1/h/workspace",))
    vault = g("vault", "/tmp/bx-1/vault", cls="secret")
    view = plan(winner, [winner, vault], own)
    assert view.covers == ("/srv/box",)
    assert view.pins == (() if root == "/srv" else ("/srv",))


def test_a_grant_under_tmp_sees_the_hosts_tmp_and_covers_there() -> None:
    winner = g("t", "/tmp/bx-1", tool="shell")
    own = OwnPlaces(("/tmp/bx-1/h",), ("/tmp/bx-1/h/workspace",))
    assert plan(winner, [winner], own) == View(
        "/tmp/bx-1", ("/tmp/bx-1/h",), ("/tmp/bx-1/h/workspace",)
    )


def test_a_grant_of_the_home_itself_covers_it_whole_but_its_workspace() -> None:
    winner = g("home", "/w/box", tool="shell")
    assert plan(winner, [winner], HOME) == View("/w/box", ("/w/box",), ("/w/box/workspace",))


def test_a_grant_inside_the_workspace_has_nothing_of_the_home_to_cover() -> None:
    winner = g("ws", "/w/box/workspace", tool="shell")
    assert plan(winner, [winner], HOME) == View("/w/box/workspace")


@pytest.mark.parametrize(
    "others, label",
    [
        ([], Label(DataClass.PRIVATE, False)),
        ([g("x", "/w", cls="secret", tool="write_file")], Label(DataClass.SECRET, False)),
        ([g("x", "/", untrusted=True)], Label(DataClass.PRIVATE, True)),
        ([g("x", "/w/below", cls="secret")], Label(DataClass.PRIVATE, False)),
        ([g("x", "/w", cls="secret", mode="deny")], Label(DataClass.PRIVATE, False)),
        ([g("x", "/wx", cls="secret")], Label(DataClass.PRIVATE, False)),
    ],
)
def test_what_a_sandbox_shows_carries_every_grant_on_or_above_its_folder(
    others: list[Grant], label: Label
) -> None:
    assert exposure_label(WIDE, [WIDE, *others]) == label


@pytest.mark.parametrize(
    "path, held",
    [
        ("/w/box", True),
        ("/w/box/keys/owner.key_secret", True),
        ("/w/box/workspace", False),
        ("/w/box/workspace/a", False),
        ("/w/boxes", False),
        ("/w", False),
    ],
)
def test_own_places_hold_the_home_but_its_workspace(path: str, held: bool) -> None:
    assert HOME.holds(path) is held


def test_grant_warnings_name_grants_over_the_home_and_grants_that_disagree() -> None:
    from services.brokerd.core.view import grant_warnings

    grants = [
        g("all", "/", tool="shell"),
        g("w-read", "/w", cls="secret"),
        g("w-shell", "/w", tool="shell"),
        g("w-deny", "/w", mode="deny", cls="public"),
        g("inside", "/w/box/workspace"),
    ]
    assert grant_warnings(grants, HOME) == [
        "grant all (shell /) covers the whole file system: every file the sandbox's user may "
        "read; name the folder it needs instead",
        "grant all (shell /) covers boxmaker's own files (/w/box): no tool ever reaches "
        "them, but the workspace",
        "grant w-deny (read_file /w) covers boxmaker's own files (/w/box): no tool ever "
        "reaches them, but the workspace",
        "grant w-read (read_file /w) covers boxmaker's own files (/w/box): no tool ever "
        "reaches them, but the workspace",
        "grant w-shell (shell /w) covers boxmaker's own files (/w/box): no tool ever reaches "
        "them, but the workspace",
        "grants of /w disagree on its label (w-read: secret, w-shell: private): what any tool "
        "reads there carries the highest of them",
    ]
    assert grant_warnings([g("a", "/x"), g("b", "/x", tool="shell")], HOME) == []


# Paths of a few components from a small alphabet, so that places and paths often share them.
PARTS = st.lists(st.sampled_from(["a", "b", "ab", "box", "workspace"]), max_size=4)
PATHS = PARTS.map(lambda parts: "/" + "/".join(parts))


@given(path=PATHS, places=st.frozensets(PATHS, max_size=6))
def test_within_is_inside_any_of_the_places(path: str, places: frozenset[str]) -> None:
    assert within(path, places) is any(inside(place, path) for place in places)


def test_own_places_made_alike_are_equal_and_hash_alike() -> None:
    again = OwnPlaces(("/w/box",), ("/w/box/workspace",))
    assert again == HOME and hash(again) == hash(HOME)
    assert repr(again) == "OwnPlaces(closed=('/w/box',), open=('/w/box/workspace',), code=())"


@pytest.mark.parametrize(
    ("path", "read_only", "shown"),
    [
        ("/w", False, "/w/box"),  # holds the home
        ("/w", True, "/w/box"),
        ("/w/box/keys", True, "/w/box/keys"),  # in it
        ("/w/box/workspace", False, None),  # the agent's
        ("/w/box/workspace/notes", False, None),
        ("/w/other", False, None),
        ("/opt/box", False, "/opt/box/.venv"),  # holds the installation: not to write
        ("/opt/box", True, None),  # but no secret to read
        ("/opt/box/.venv/lib", False, "/opt/box/.venv/lib"),
        ("/w/box/mcp/npm/fs/node_modules", True, None),  # a server's installed code
        ("/w/box/mcp/npm/fs/node_modules", False, "/w/box/mcp/npm/fs/node_modules"),
        ("/w/box/mcp", True, None),
    ],
)
def test_what_a_bind_of_a_path_would_show_of_the_box(
    path: str, read_only: bool, shown: str | None
) -> None:
    code = ("/opt/box/.venv", "/w/box/mcp")
    own = OwnPlaces(("/w/box", "/opt/box/.venv"), ("/w/box/workspace",), code)
    assert own.shown_by(path, read_only=read_only) == shown
