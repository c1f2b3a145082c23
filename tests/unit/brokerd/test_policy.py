"""The decision, step by step (§5.2), with matching and specificity (§5.3) and labels (§5.5)."""

from __future__ import annotations

import json

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import DataClass, Label
from bxcore.wire.messages import AskWhy
from services.brokerd.core.grants import Grant, Mode
from services.brokerd.core.policy import Allowed, Ask, Denied, decide, redecide, specificity
from services.brokerd.core.view import OwnPlaces

PRIVATE = Label(DataClass.PRIVATE, False)
PUBLIC = Label(DataClass.PUBLIC, False)
SECRET = Label(DataClass.SECRET, False)
UNTRUSTED = Label(DataClass.PRIVATE, True)


def g(
    gid: str,
    tool: str,
    mode: str = "allow",
    *,
    path: str | None = None,
    host: str | None = None,
    cls: str = "private",
    untrusted: bool | None = None,
) -> Grant:
    if untrusted is None:
        untrusted = tool == "http_fetch"
    return Grant(gid, tool, Mode(mode), path, host, DataClass(cls), untrusted, "", "0" * 64)


def a(**fields: object) -> str:
    return json.dumps(fields)


NOTES = g("notes", "read_file", path="/home/kyle/notes")
WORK_W = g("work-w", "write_file", path="/home/kyle/work")
WORK_SH = g("work-sh", "shell", "ask", path="/home/kyle/work")
WIKI = g("wiki", "http_fetch", host="*.wikipedia.org")
MEMORY = g("memory", "memory")
EVERYTHING = [
    g("all-read", "read_file", path="/"),
    g("all-write", "write_file", path="/"),
    g("all-shell", "shell", path="/"),
    MEMORY,
]


def reason(decision: object) -> DenyReason:
    assert isinstance(decision, Denied), decision
    return decision.reason


# Step 1 and 2: what the grants say does not matter.


@pytest.mark.parametrize("tool", ["launch_missiles", "spawn", "READ_FILE", ""])
def test_an_unknown_tool_is_denied_whatever_the_grants(tool: str) -> None:
    assert reason(decide(PRIVATE, tool, a(path="/a"), EVERYTHING)) is DenyReason.UNKNOWN_TOOL


def test_invalid_arguments_are_denied_with_their_detail_whatever_the_grants() -> None:
    decision = decide(PRIVATE, "memory", a(action="note", file="notes.md", text="x"), EVERYTHING)
    assert decision == Denied(
        DenyReason.INVALID_ARGUMENTS,
        detail="invalid argument shape: unknown field `file`, expected `text`",
    )


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("read_file", a(path="/home/kyle/notes/../.ssh/id_rsa")),
        ("read_file", "not json"),
        ("write_file", a(path="/home/kyle/work/x")),
        ("shell", a(command="ls", cwd="relative")),
        ("http_fetch", a(url="http://en.wikipedia.org/")),
    ],
)
def test_malformed_arguments_never_reach_the_grants(tool: str, arguments: str) -> None:
    assert reason(decide(PRIVATE, tool, arguments, EVERYTHING)) is DenyReason.INVALID_ARGUMENTS


# Step 3: matching (§5.3).


@pytest.mark.parametrize(
    "tool, arguments, grants",
    [
        ("read_file", a(path="/home/kyle/notes2/a"), [NOTES]),
        ("read_file", a(path="/home/kyle"), [NOTES]),
        ("write_file", a(path="/home/kyle/notes/a", content=""), [NOTES]),
        ("shell", a(command="ls"), [WORK_SH]),
        ("shell", a(command="ls", cwd="/home/kyle"), [WORK_SH]),
        ("http_fetch", a(url="https://wikipedia.org/"), [WIKI]),
        ("http_fetch", a(url="https://evil.com/en.wikipedia.org"), [WIKI]),
        ("memory", a(action="recall", query="x"), [NOTES, WORK_W]),
    ],
)
def test_a_call_no_grant_matches_is_no_grant(
    tool: str, arguments: str, grants: list[Grant]
) -> None:
    assert reason(decide(PRIVATE, tool, arguments, grants)) is DenyReason.NO_GRANT


def test_a_shell_call_without_cwd_is_matched_as_the_root() -> None:
    root_shell = g("root-shell", "shell", path="/")
    decision = decide(PRIVATE, "shell", a(command="ls"), [WORK_SH, root_shell])
    assert isinstance(decision, Allowed) and decision.winner == root_shell


# Step 4: an explicit deny always wins.


def test_an_explicit_deny_beats_a_more_specific_allow() -> None:
    deny_home = g("no-home", "read_file", "deny", path="/home/kyle")
    decision = decide(PRIVATE, "read_file", a(path="/home/kyle/notes/a.md"), [NOTES, deny_home])
    assert decision == Denied(DenyReason.DENIED_BY_GRANT, grant=deny_home, args=decision.args)


def test_the_most_specific_deny_is_named() -> None:
    wide = g("deny-wide", "read_file", "deny", path="/home")
    narrow = g("deny-narrow", "read_file", "deny", path="/home/kyle/notes")
    decision = decide(PRIVATE, "read_file", a(path="/home/kyle/notes/a"), [wide, narrow, NOTES])
    assert isinstance(decision, Denied) and decision.grant == narrow


def test_a_deny_of_a_host_pattern_beats_an_exact_allow() -> None:
    deny = g("no-wiki", "http_fetch", "deny", host="*.wikipedia.org")
    exact = g("en-wiki", "http_fetch", host="en.wikipedia.org")
    decision = decide(PRIVATE, "http_fetch", a(url="https://en.wikipedia.org/"), [exact, deny])
    assert reason(decision) is DenyReason.DENIED_BY_GRANT


# Step 5: the winner.


def test_the_most_specific_grant_wins() -> None:
    wide_ask = g("wide", "read_file", "ask", path="/home")
    decision = decide(PRIVATE, "read_file", a(path="/home/kyle/notes/a"), [wide_ask, NOTES])
    assert isinstance(decision, Allowed) and decision.winner == NOTES


def test_at_equal_specificity_ask_beats_allow_then_the_smaller_id_wins() -> None:
    allow = g("a-allow", "read_file", path="/home/kyle/notes")
    ask = g("z-ask", "read_file", "ask", path="/home/kyle/notes")
    decision = decide(PRIVATE, "read_file", a(path="/home/kyle/notes/x"), [allow, ask])
    assert isinstance(decision, Ask) and decision.winner == ask
    other = g("b-allow", "read_file", path="/home/kyle/notes")
    decision = decide(PRIVATE, "read_file", a(path="/home/kyle/notes/x"), [other, allow])
    assert isinstance(decision, Allowed) and decision.winner == allow


@pytest.mark.parametrize(
    "grant, more",
    [
        (g("x", "read_file", path="/a"), (0, 1)),
        (g("x", "read_file", path="/"), (0, 0)),
        (g("x", "read_file", path="/a/b/c"), (0, 3)),
        (g("x", "http_fetch", host="*.example.com"), (0, 11)),
        (g("x", "http_fetch", host="a.example.com"), (1, 13)),
        (MEMORY, (0, 0)),
    ],
)
def test_specificity(grant: Grant, more: tuple[int, int]) -> None:
    assert specificity(grant) == more


def test_an_exact_host_beats_a_pattern_and_a_longer_base_beats_a_shorter() -> None:
    short = g("short", "http_fetch", "ask", host="*.example.com")
    long = g("long", "http_fetch", host="*.docs.example.com", untrusted=False)
    exact = g("exact", "http_fetch", "ask", host="api.docs.example.com")
    url = a(url="https://api.docs.example.com/v1")
    assert decide(PRIVATE, "http_fetch", url, [short, long, exact]).winner == exact  # type: ignore[union-attr]
    assert decide(PRIVATE, "http_fetch", url, [short, long]).winner == long  # type: ignore[union-attr]


# Step 6: flow (I4), for the sinks only.


@pytest.mark.parametrize(
    "tool, arguments, grant",
    [
        ("write_file", a(path="/home/kyle/work/x", content="s"), WORK_W),
        ("shell", a(command="ls", cwd="/home/kyle/work"), g("sh", "shell", path="/home/kyle/work")),
        ("http_fetch", a(url="https://en.wikipedia.org/"), WIKI),
    ],
)
def test_a_secret_session_may_not_write_or_send_to_a_private_place(
    tool: str, arguments: str, grant: Grant
) -> None:
    decision = decide(SECRET, tool, arguments, [grant])
    assert reason(decision) is DenyReason.FLOW_VIOLATION
    assert isinstance(decision, Denied) and decision.grant == grant


def test_a_private_session_may_not_send_to_a_public_host() -> None:
    public_host = g("pub", "http_fetch", host="example.org", cls="public")
    decision = decide(PRIVATE, "http_fetch", a(url="https://example.org/"), [public_host])
    assert reason(decision) is DenyReason.FLOW_VIOLATION


def test_a_public_session_may_send_to_a_public_host() -> None:
    public_host = g("pub", "http_fetch", host="example.org", cls="public")
    assert isinstance(
        decide(PUBLIC, "http_fetch", a(url="https://example.org/"), [public_host]), Allowed
    )


def test_reading_is_not_a_sink_so_a_secret_session_may_read_anywhere_it_is_granted() -> None:
    public = g("pub", "read_file", path="/srv/www", cls="public")
    assert isinstance(decide(SECRET, "read_file", a(path="/srv/www/index.html"), [public]), Allowed)


def test_memory_is_not_a_sink() -> None:
    decision = decide(Label(DataClass.SECRET, True), "memory", a(action="note", text="s"), [MEMORY])
    assert isinstance(decision, Allowed)


def test_a_secret_session_may_write_to_a_secret_place() -> None:
    vault = g("vault", "write_file", path="/home/kyle/vault", cls="secret")
    decision = decide(SECRET, "write_file", a(path="/home/kyle/vault/x", content=""), [vault])
    assert isinstance(decision, Allowed)


# Step 7: untrusted turns allow into ask (I5).


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("write_file", a(path="/home/kyle/work/x", content="")),
        ("shell", a(command="ls", cwd="/home/kyle/work")),
        ("http_fetch", a(url="https://en.wikipedia.org/")),
    ],
)
def test_an_untrusted_session_must_ask_for_every_consequential_call(
    tool: str, arguments: str
) -> None:
    grants = [WORK_W, g("sh", "shell", path="/home/kyle/work"), WIKI]
    decision = decide(UNTRUSTED, tool, arguments, grants)
    assert isinstance(decision, Ask) and decision.why is AskWhy.UNTRUSTED


def test_an_untrusted_session_must_ask_to_forget_a_note() -> None:
    decision = decide(UNTRUSTED, "memory", a(action="forget", id=1), [MEMORY])
    assert isinstance(decision, Ask) and decision.why is AskWhy.UNTRUSTED
    assert decision.args.canonical_json() == '{"action":"forget","id":1}'


def test_a_trusted_session_forgets_without_asking_and_forget_is_no_sink() -> None:
    decision = decide(SECRET, "memory", a(action="forget", id=1), [MEMORY])
    assert isinstance(decision, Allowed) and decision.label is None


def test_an_untrusted_session_asking_under_an_ask_grant_asks_because_it_is_untrusted() -> None:
    decision = decide(UNTRUSTED, "shell", a(command="ls", cwd="/home/kyle/work"), [WORK_SH])
    assert isinstance(decision, Ask) and decision.why is AskWhy.UNTRUSTED


def test_an_untrusted_session_may_still_read_and_keep_notes() -> None:
    assert isinstance(
        decide(UNTRUSTED, "read_file", a(path="/home/kyle/notes/a"), [NOTES]), Allowed
    )
    assert isinstance(decide(UNTRUSTED, "memory", a(action="recall", query="x"), [MEMORY]), Allowed)


# Step 8 and the result label (§5.5).


def test_an_ask_grant_asks_the_owner() -> None:
    decision = decide(PRIVATE, "shell", a(command="ls", cwd="/home/kyle/work/src"), [WORK_SH])
    assert isinstance(decision, Ask) and decision.why is AskWhy.GRANT_ASKS
    assert decision.args.canonical_json() == '{"command":"ls","cwd":"/home/kyle/work/src"}'


@pytest.mark.parametrize(
    "tool, arguments, grant, label",
    [
        (
            "read_file",
            a(path="/s/x"),
            g("s", "read_file", path="/s", cls="secret", untrusted=True),
            Label(DataClass.SECRET, True),
        ),
        ("shell", a(command="ls", cwd="/p"), g("p", "shell", path="/p"), PRIVATE),
        ("http_fetch", a(url="https://en.wikipedia.org/"), WIKI, Label(DataClass.PUBLIC, True)),
        (
            "http_fetch",
            a(url="https://me.example.org/"),
            g("me", "http_fetch", host="me.example.org", untrusted=False),
            PUBLIC,
        ),
        ("write_file", a(path="/home/kyle/work/x", content="x"), WORK_W, PUBLIC),
        ("memory", a(action="recall", query="x"), MEMORY, None),
    ],
)
def test_an_allowed_call_carries_its_result_label(
    tool: str, arguments: str, grant: Grant, label: Label | None
) -> None:
    decision = decide(PRIVATE, tool, arguments, [grant])
    assert isinstance(decision, Allowed) and decision.label == label


# redecide, after the owner approved.


def test_an_approved_ask_runs_as_if_allowed() -> None:
    arguments = a(command="make", cwd="/home/kyle/work")
    decision = redecide(PRIVATE, "shell", arguments, [WORK_SH])
    assert isinstance(decision, Allowed) and decision.label == PRIVATE


def test_an_approval_never_overrides_a_denial_that_came_meanwhile() -> None:
    arguments = a(command="make", cwd="/home/kyle/work")
    deny = g("no-shell", "shell", "deny", path="/")
    assert (
        reason(redecide(PRIVATE, "shell", arguments, [WORK_SH, deny])) is DenyReason.DENIED_BY_GRANT
    )
    assert reason(redecide(SECRET, "shell", arguments, [WORK_SH])) is DenyReason.FLOW_VIOLATION
    assert reason(redecide(PRIVATE, "shell", arguments, [])) is DenyReason.NO_GRANT


def test_the_trace_names_every_step_taken() -> None:
    trace: list[str] = []
    decide(SECRET, "write_file", a(path="/home/kyle/work/x", content=""), [WORK_W], trace)
    text = "\n".join(trace)
    assert "matching grants: work-w (allow)" in text
    assert "winner: work-w" in text
    assert "flow: the session holds secret data" in text


# What the sandbox of a wide grant must hide (a narrower grant denies or labels it higher);
# the plan itself is tested case by case in test_view.py.


@pytest.mark.parametrize(
    "others, hidden",
    [
        ([], ()),
        (
            [g("vault", "read_file", path="/home/kyle/notes/vault", cls="secret")],
            ("/home/kyle/notes/vault",),
        ),
        (
            [g("closed", "write_file", "deny", path="/home/kyle/notes/closed")],
            ("/home/kyle/notes/closed",),
        ),
        (
            [g("inbox", "read_file", path="/home/kyle/notes/inbox", untrusted=True)],
            ("/home/kyle/notes/inbox",),
        ),
        ([g("same", "read_file", path="/home/kyle/notes/same")], ()),
        ([g("lower", "read_file", path="/home/kyle/notes/pub", cls="public")], ()),
        ([g("outside", "read_file", path="/home/kyle/other", cls="secret")], ()),
        ([g("itself", "write_file", path="/home/kyle/notes", cls="secret")], ()),
        (
            [
                g("outer", "read_file", path="/home/kyle/notes/a", cls="secret"),
                g("inner", "read_file", "deny", path="/home/kyle/notes/a/b"),
            ],
            ("/home/kyle/notes/a",),
        ),
    ],
)
def test_an_allowed_call_hides_what_narrower_grants_deny_or_label_higher(
    others: list[Grant], hidden: tuple[str, ...]
) -> None:
    decision = decide(PRIVATE, "read_file", a(path="/home/kyle/notes/x"), [NOTES, *others])
    assert isinstance(decision, Allowed) and decision.winner == NOTES
    assert decision.view.covers == hidden


def test_an_approved_call_hides_the_same_places() -> None:
    vault = g("vault", "shell", path="/home/kyle/work/vault", cls="secret")
    decision = redecide(PRIVATE, "shell", a(command="ls", cwd="/home/kyle/work"), [WORK_SH, vault])
    assert isinstance(decision, Allowed) and decision.view.covers == ("/home/kyle/work/vault",)


# What a result carries joins every grant on or above the folder the sandbox shows.


@pytest.mark.parametrize(
    "others, label",
    [
        ([g("wide-shell", "shell", path="/home/kyle/notes", cls="public")], PRIVATE),
        ([g("same-secret", "write_file", path="/home/kyle/notes", cls="secret")], SECRET),
        ([g("above-secret", "shell", path="/home/kyle", cls="secret")], SECRET),
        ([g("above-mail", "read_file", path="/home", untrusted=True)], UNTRUSTED),
        ([g("below-public", "read_file", path="/home/kyle/notes/pub", cls="public")], PRIVATE),
        ([g("below-secret", "read_file", path="/home/kyle/notes/v", cls="secret")], PRIVATE),
        ([g("above-denied", "read_file", "deny", path="/home/kyle/x", cls="secret")], PRIVATE),
        ([g("deny-above", "shell", "deny", path="/home", cls="secret")], PRIVATE),
    ],
)
def test_a_result_carries_every_grant_that_names_its_folder_or_one_above_it(
    others: list[Grant], label: Label
) -> None:
    decision = decide(PUBLIC, "read_file", a(path="/home/kyle/notes/x"), [NOTES, *others])
    assert isinstance(decision, Allowed) and decision.winner == NOTES
    assert decision.label == label


def test_a_narrower_grant_with_a_lower_label_does_not_lower_what_it_shows() -> None:
    public = g("pub", "read_file", path="/home/kyle/notes/pub", cls="public")
    decision = decide(PUBLIC, "read_file", a(path="/home/kyle/notes/pub/a"), [NOTES, public])
    assert isinstance(decision, Allowed) and decision.winner == public
    assert decision.label == PRIVATE


# boxmaker's own places: never a tool's, whatever the grants say.

OWN = OwnPlaces(("/home/kyle/.box", "/srv/boxmaker"), ("/home/kyle/.box/workspace",))


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("read_file", a(path="/home/kyle/.box/keys/owner.key_secret")),
        ("read_file", a(path="/home/kyle/.box")),
        ("write_file", a(path="/home/kyle/.box/grants/zz.toml", content='tool = "shell"')),
        ("shell", a(command="ls", cwd="/home/kyle/.box/run")),
        ("shell", a(command="ls", cwd="/home/kyle/.box")),
        ("write_file", a(path="/srv/boxmaker/services/subprocess.py", content="x")),
    ],
)
def test_boxmakers_own_files_are_protected_whatever_the_grants(tool: str, arguments: str) -> None:
    for label in (PUBLIC, PRIVATE, SECRET, UNTRUSTED):
        assert reason(decide(label, tool, arguments, EVERYTHING, own=OWN)) is DenyReason.PROTECTED


@pytest.mark.parametrize(
    "tool, arguments",
    [
        ("read_file", a(path="/home/kyle/.box/workspace/todo.md")),
        ("shell", a(command="ls", cwd="/home/kyle/.box/workspace")),
        ("read_file", a(path="/home/kyle/.box2/x")),
        ("shell", a(command="ls", cwd="/home/kyle")),
        ("shell", a(command="ls")),
    ],
)
def test_the_workspace_and_everything_around_the_home_stay_reachable(
    tool: str, arguments: str
) -> None:
    decision = decide(PRIVATE, tool, arguments, EVERYTHING, own=OWN)
    assert isinstance(decision, Allowed), decision


def test_a_sandbox_over_the_home_hides_it_and_shows_the_workspace_again() -> None:
    decision = decide(PRIVATE, "shell", a(command="ls", cwd="/home/kyle"), EVERYTHING, own=OWN)
    assert isinstance(decision, Allowed)
    assert decision.view.covers == ("/srv/boxmaker", "/home/kyle/.box")  # parents first
    assert decision.view.reopened == ("/home/kyle/.box/workspace",)


def test_the_trace_says_why_a_protected_call_is_refused() -> None:
    trace: list[str] = []
    decide(PRIVATE, "read_file", a(path="/home/kyle/.box/config.toml"), EVERYTHING, trace, OWN)
    assert "/home/kyle/.box/config.toml holds boxmaker's own files" in "\n".join(trace)
