"""Grants checked against the tools they name, and invalid denies failing closed (issue 23;
`core.grant_check`): a `[match]` key its tool's pinned schema does not have makes the grant
invalid; an invalid deny whose tool is known denies that whole tool, for every session, and
the ledger, `explain` and the owner's views say so. Case tables, pure."""

from __future__ import annotations

import json

import pytest

from bxcore.deny import DenyReason
from bxcore.labels import CLEAN, DataClass, Label
from bxcore.mcp_tools import Pins, ToolDef, build_catalog
from services.brokerd.core import call as callmod
from services.brokerd.core import job_scope, policy
from services.brokerd.core.call_events import Decided, Found, Record
from services.brokerd.core.grant_check import blocking, check, denies_said, fit, said
from services.brokerd.core.grants import Grant, GrantSet, InvalidGrant, parse_grant
from services.brokerd.core.job_scope import JobScope

SEND_EMAIL = ToolDef(
    "send_email",
    "Send a mail.",
    {
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "cc": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "body": {"type": "string"},
            "priority": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "anything": {},
        },
        "required": ["to", "body"],
    },
)
READ_INBOX = ToolDef(
    "read_inbox",
    "Read mails.",
    {"type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]},
)
PINS = {"mail": Pins("mail", "", {"send_email": SEND_EMAIL, "read_inbox": READ_INBOX})}
CATALOG, _ = build_catalog(PINS, {})
SEND = "mcp__mail__send_email"
READ = "mcp__mail__read_inbox"


def parsed(grant_id: str, text: str) -> Grant | InvalidGrant:
    return parse_grant(grant_id, text.encode())


def valid(grant_id: str, text: str) -> Grant:
    grant = parsed(grant_id, text)
    assert isinstance(grant, Grant), grant
    return grant


def mcp(tool: str, match: str, mode: str = "deny", grant_id: str = "g") -> Grant:
    return valid(grant_id, f'tool = "{tool}"\nmode = "{mode}"\n\n[match]\n{match}\n')


def folder(*texts: tuple[str, str]) -> GrantSet:
    grants = [parsed(grant_id, text) for grant_id, text in texts]
    return GrantSet(
        tuple(g for g in grants if isinstance(g, Grant)),
        tuple(g for g in grants if isinstance(g, InvalidGrant)),
    )


# --- a [match] key against the pinned schema --------------------------------------------------

FIT_CASES = [
    ("a key the tool has", SEND, 'to = "glob:*@evil.example"', None),
    ("a misspelt key (recipient for to)", SEND, 'recipient = "glob:*@evil.example"',
     f"match.recipient: {SEND} has no argument 'recipient' "
     "(its arguments: anything, body, cc, priority, tags, to)"),
    ("a number for an integer", SEND, "priority = 5", None),
    ("a string for an integer: never equal", SEND, 'priority = "5"',
     "match.priority: the argument 'priority' is of type integer, so \"5\" can never match it"),
    ("an array argument: [match] compares strings and numbers", SEND, 'tags = "urgent"',
     "match.tags: the argument 'tags' is of type array, so \"urgent\" can never match it"),
    ("one value of several that can never match", SEND, 'priority = [1, "high"]',
     "match.priority: the argument 'priority' is of type integer, so \"high\" can never match it"),
    ("str | None, as pydantic writes it", SEND, 'cc = "boss@example.com"', None),
    ("an argument whose type is not said", SEND, 'anything = "x"', None),
    ("a pattern: a key one of the server's tools has", "mcp__mail__*", 'folder = "in"', None),
    ("a pattern: a key no tool of the server has", "mcp__mail__*", 'recipient = "x"',
     "match.recipient: no pinned tool of mail has an argument 'recipient'"),
    ("a pattern: a key no tool takes so", "mcp__mail__*", "folder = 3",
     "match.folder: no pinned tool of mail takes it so that it can match: the argument "
     "'folder' is of type string, so 3 can never match it"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "match", "problem"),
    [case[1:] for case in FIT_CASES],
    ids=[case[0] for case in FIT_CASES],
)
def test_a_match_key_is_checked_against_the_pinned_schema(
    tool: str, match: str, problem: str | None
) -> None:
    found = fit(mcp(tool, match), PINS)
    assert found.problem == problem and found.unchecked is None


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ("mcp__git__git_log", "git has no pins yet; checked once `bxctl mcp trust git`"),
        ("mcp__git__*", "git has no pins yet; checked once `bxctl mcp trust git`"),
        ("mcp__mail__send_mail", "send_mail is not a pinned tool of mail; checked once it is"),
    ],
)
def test_a_grant_whose_tool_is_not_pinned_is_not_refused_and_says_why_it_is_unchecked(
    tool: str, why: str
) -> None:
    found = fit(mcp(tool, 'recipient = "x"'), PINS)
    assert found.problem is None and found.unchecked == why


def test_a_grant_with_no_match_and_a_built_in_grant_always_fit() -> None:
    assert fit(valid("a", f'tool = "{SEND}"\nmode = "deny"\n'), PINS).problem is None
    notes = valid("n", 'tool = "read_file"\nmode = "deny"\npath = "/notes"\n')
    assert fit(notes, {}).problem is None and fit(notes, {}).unchecked is None


# --- which invalid grants deny their whole tool ---------------------------------------------

DENIES_CASES = [
    ("a bad path", "shell-deny",
     'tool = "shell"\nmode = "deny"\npath = "relative"\n', ("shell",)),
    ("an unknown key", "read-deny",
     'tool = "read_file"\nmode = "deny"\npaths = "/notes"\n', ("read_file",)),
    ("a host on a file tool", "r",
     'tool = "read_file"\nmode = "deny"\nhost = "a.example"\n', ("read_file",)),
    ("a file name that is no grant id", "Mail Deny",
     f'tool = "{SEND}"\nmode = "deny"\n', (SEND,)),
    ("a mode written Deny", "d", 'tool = "memory"\nmode = "Deny"\n', ("memory",)),
    ("a server pattern with a path", "p",
     'tool = "mcp__mail__*"\nmode = "deny"\npath = "/x"\n', ("mcp__mail__*",)),
    ("TOML that does not parse: the line scan", "broken",
     'tool = "http_fetch"\nmode = "deny"\nhost = *.evil.example\n', ("http_fetch",)),
    ("the line scan with comments and quoted keys", "broken2",
     '"tool" = \'shell\'  # no\nmode = "deny" # never\npath = [\n', ("shell",)),
    ("the line scan stops at the first table", "broken3",
     'mode = "deny"\n[match]\ntool = "shell"\nx = \n', ()),
    ("an allow that is invalid", "a", 'tool = "shell"\nmode = "allow"\npath = "x"\n', ()),
    ("an unknown tool", "u", 'tool = "Shell"\nmode = "deny"\npath = "/x"\n', ()),
    ("a broken file with no deny line", "b", 'tool = "shell"\nmode = allow\n', ()),
    ("not UTF-8", "n", b'tool = "shell"\nmode = "deny"\npath = "\xff"\n'.decode("latin-1"),
     ("shell",)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("grant_id", "text", "denies"),
    [case[1:] for case in DENIES_CASES],
    ids=[case[0] for case in DENIES_CASES],
)
def test_an_invalid_deny_names_the_tools_it_denies_whatever_made_it_invalid(
    grant_id: str, text: str, denies: tuple[str, ...]
) -> None:
    found = parse_grant(grant_id, text.encode("latin-1" if "\xff" in text else "utf-8"))
    assert isinstance(found, InvalidGrant)
    assert found.denies == denies


def test_a_deny_with_a_misspelt_key_is_invalid_and_blocks_its_tool() -> None:
    grants = folder(
        ("mail-evil", f'tool = "{SEND}"\nmode = "deny"\n[match]\nrecipient = "glob:*@evil"\n'),
        ("mail-send", f'tool = "{SEND}"\nmode = "allow"\nkind = "sink"\n'),
        ("mail-odd", f'tool = "{READ}"\nmode = "allow"\n[match]\nbox = "in"\n'),
    )
    checked = check(grants, PINS)
    assert [g.id for g in checked.valid] == ["mail-send"]
    assert [(g.id, g.denies) for g in checked.invalid] == [("mail-evil", (SEND,)), ("mail-odd", ())]
    assert checked.found == checked.invalid
    assert dict(checked.blocked) == {SEND: checked.invalid[0]}
    assert blocking(SEND, checked.blocked) is checked.invalid[0]
    assert blocking(READ, checked.blocked) is None


def test_without_pins_the_same_grants_are_unchecked_and_nothing_is_blocked() -> None:
    grants = folder(
        ("mail-evil", f'tool = "{SEND}"\nmode = "deny"\n[match]\nrecipient = "glob:*@evil"\n')
    )
    checked = check(grants, {})
    assert [g.id for g in checked.valid] == ["mail-evil"] and not checked.blocked
    assert checked.unchecked == (
        ("mail-evil", "mail has no pins yet; checked once `bxctl mcp trust mail`"),
    )


def test_the_smallest_id_names_what_two_invalid_denies_block() -> None:
    grants = folder(
        ("z-deny", 'tool = "shell"\nmode = "deny"\npath = "z"\n'),
        ("a-deny", 'tool = "shell"\nmode = "deny"\npath = "a"\n'),
    )
    assert check(grants, {}).blocked["shell"].id == "a-deny"


def test_an_invalid_deny_is_said_with_why_and_what_it_denies() -> None:
    invalid = check(
        folder(("p", 'tool = "mcp__mail__*"\nmode = "deny"\npath = "/x"\n')), PINS
    ).invalid[0]
    problem = "path: an MCP grant takes no path; its server's [[mcp]] entry does"
    assert said(invalid) == (
        f"grant p is invalid ({problem}) and, being a deny, denies every call of mcp__mail__* "
        "(every tool of the server mail) until it is mended"
    )
    assert said(invalid, SEND) == (
        f"grant p is invalid ({problem}) and, being a deny, denies every call of {SEND} "
        "until it is mended"
    )
    assert denies_said(invalid).startswith("being a deny, it denies every call of mcp__mail__*")
    other = InvalidGrant("o", "0" * 64, "mode: missing")
    assert said(other) == "grant o is invalid and never matches: mode: missing"
    assert denies_said(other) == ""


# --- the decision: fail closed -----------------------------------------------------------

NOTES = valid("notes", 'tool = "read_file"\nmode = "allow"\npath = "/notes"\n')
MAIL_ALL = valid("mail-all", 'tool = "mcp__mail__*"\nmode = "allow"\nuntrusted = false\n')


def decided(
    grants: GrantSet, tool: str, arguments: str, trace: list[str] | None = None
) -> policy.Decision:
    checked = check(grants, PINS)
    valid = (NOTES, MAIL_ALL, *checked.valid)
    return policy.decide(CLEAN, tool, arguments, valid, trace, mcp=CATALOG, blocked=checked.blocked)


def test_a_blocked_built_in_tool_is_denied_by_the_invalid_grant_whatever_allows_it() -> None:
    grants = folder(("notes-deny", 'tool = "read_file"\nmode = "deny"\npath = "/notes/"\n'))
    trace: list[str] = []
    decision = decided(grants, "read_file", json.dumps({"path": "/notes/a.md"}), trace)
    assert isinstance(decision, policy.Denied)
    assert decision.reason is DenyReason.DENIED_BY_GRANT
    assert isinstance(decision.grant, InvalidGrant) and decision.grant.id == "notes-deny"
    assert trace[-1] == (
        "grant notes-deny is invalid (path: '/notes/' is not a valid path (absolute, no "
        "trailing /, no . or ..)) and, being a deny, denies every call of read_file until it "
        "is mended"
    )
    # other tools are decided as before
    assert isinstance(decided(grants, SEND, json.dumps({"to": "a", "body": "b"})), policy.Allowed)


@pytest.mark.parametrize(
    ("text", "blocked", "free"),
    [
        (f'tool = "{SEND}"\nmode = "deny"\n[match]\nrecipient = "glob:*@evil"\n', SEND, READ),
        ('tool = "mcp__mail__*"\nmode = "deny"\n[match]\nrecipient = "x"\n', READ, None),
        ('tool = "mcp__mail__*"\nmode = "deny"\nnote = 3\n', SEND, None),
    ],
    ids=["an exact name", "a server pattern: every tool of it", "a pattern, invalid otherwise"],
)
def test_a_blocked_mcp_tool_is_denied_naming_the_invalid_grant(
    text: str, blocked: str, free: str | None
) -> None:
    grants = folder(("mail-deny", text))
    arguments = {SEND: {"to": "a@evil", "body": "b"}, READ: {"folder": "in"}}
    decision = decided(grants, blocked, json.dumps(arguments[blocked]))
    assert isinstance(decision, policy.Denied) and decision.reason is DenyReason.DENIED_BY_GRANT
    assert decision.grant is not None and decision.grant.id == "mail-deny"
    if free is not None:
        assert isinstance(decided(grants, free, json.dumps(arguments[free])), policy.Allowed)


def test_invalid_arguments_still_say_why_before_a_block() -> None:
    grants = folder(("r", 'tool = "read_file"\nmode = "deny"\npath = "x"\n'))
    decision = decided(grants, "read_file", '{"file": "/notes/a"}')
    assert isinstance(decision, policy.Denied)
    assert decision.reason is DenyReason.INVALID_ARGUMENTS


def test_a_jobs_run_is_denied_by_an_invalid_deny_it_does_not_name() -> None:
    grants = folder(("shell-deny", 'tool = "read_file"\nmode = "deny"\npath = "x"\n'))
    checked = check(grants, {})
    scope = JobScope("daily", 1, frozenset({"notes"}))
    arguments = json.dumps({"path": "/notes/a"})
    decision = job_scope.decide(
        CLEAN, "read_file", arguments, (NOTES,), scope, blocked=checked.blocked
    )
    assert isinstance(decision, policy.Denied) and decision.reason is DenyReason.DENIED_BY_GRANT
    again = job_scope.redecide(
        CLEAN, "read_file", arguments, (NOTES,), scope, blocked=checked.blocked
    )
    assert again == decision


def test_an_approval_given_before_an_invalid_deny_appeared_is_denied_when_redecided() -> None:
    ask = valid("notes-ask", 'tool = "read_file"\nmode = "ask"\npath = "/notes"\n')
    arguments = json.dumps({"path": "/notes/a"})
    assert isinstance(policy.decide(CLEAN, "read_file", arguments, (ask,)), policy.Ask)
    blocked = check(folder(("d", 'tool = "read_file"\nmode = "deny"\nx = 1\n')), {}).blocked
    again = policy.redecide(CLEAN, "read_file", arguments, (ask,), blocked=blocked)
    assert isinstance(again, policy.Denied) and again.reason is DenyReason.DENIED_BY_GRANT


def test_the_ledgers_decision_names_the_invalid_grant_and_its_file() -> None:
    grants = folder(("notes-deny", 'tool = "read_file"\nmode = "deny"\npath = "x"\n'))
    invalid = grants.invalid[0]
    arguments = json.dumps({"path": "/notes/a"})
    decision = decided(grants, "read_file", arguments)
    call = callmod.Call("s", "c1", "read_file", arguments)
    call, _ = callmod.step(call, Found(None))
    _, effects = callmod.step(call, Decided(Label(DataClass.PRIVATE, False), decision))
    assert isinstance(effects[0], Record)
    kind, record = effects[0].entries[0]
    assert kind == "decision"
    assert record["outcome"] == "denied" and record["reason"] == "denied_by_grant"
    assert record["grant"] == "notes-deny" and record["grant_sha256"] == invalid.sha256


# --- tool-name patterns (issue 27): `mcp__<server>__<prefix>*` ---------------------------------


@pytest.mark.parametrize(
    ("tool", "valid"),
    [
        ("mcp__git__git_*", True),
        ("mcp__git__*", True),
        ("mcp__git__git_log", True),
        ("mcp__git__*_log", False),  # only a last `*`
        ("mcp__git__git**", False),
        ("mcp__git*", False),
        ("mcp__Git__x*", False),
        ("mcp__git__git log*", False),
    ],
)
def test_a_grant_names_an_mcp_tool_exactly_or_by_a_pattern_ending_in_one_star(
    tool: str, valid: bool
) -> None:
    parsed = parse_grant("g", f'tool = "{tool}"\nmode = "allow"\n'.encode())
    assert isinstance(parsed, Grant) is valid, parsed


def test_a_pattern_covers_the_tools_of_its_server_whose_names_start_with_its_prefix() -> None:
    grant = parse_grant("g", b'tool = "mcp__git__git_*"\nmode = "allow"\n')
    assert isinstance(grant, Grant)
    assert grant.covers("mcp__git__git_log") and grant.covers("mcp__git__git_")
    assert not grant.covers("mcp__git__log") and not grant.covers("mcp__gitx__git_log")
    assert grant.pattern == ("git", "git_")


def test_a_longer_pattern_beats_a_shorter_and_an_exact_name_beats_every_pattern() -> None:
    grants = [
        mcp("mcp__mail__*", 'folder = "in"', "allow", "all"),
        valid("reads", 'tool = "mcp__mail__read_*"\nmode = "ask"\n'),
        valid("exact", f'tool = "{READ}"\nmode = "allow"\n'),
    ]
    ranked = sorted(grants, key=policy.specificity, reverse=True)
    assert [g.id for g in ranked] == ["exact", "reads", "all"]
    asked = policy.decide(Label(DataClass.PRIVATE, False), READ, json.dumps({"folder": "in"}),
                          grants[:2], mcp=CATALOG)  # fmt: skip
    assert isinstance(asked, policy.Ask) and asked.winner.id == "reads"


def test_a_pattern_is_checked_against_the_tools_it_covers_and_an_invalid_deny_blocks_them() -> None:
    assert fit(mcp("mcp__mail__read_*", 'folder = "in"'), PINS).problem is None
    misfit = fit(mcp("mcp__mail__send_*", 'folder = "in"'), PINS).problem
    assert (
        misfit
        == "match.folder: no pinned tool of mail starting with 'send_' has an argument 'folder'"
    )
    assert fit(mcp("mcp__mail__x_*", 'folder = "in"'), PINS).unchecked is not None
    checked = check(folder(("no-sends", 'tool = "mcp__mail__send_*"\nmode = "deny"\n'
                                        '[match]\nfolder = "in"\n')), PINS)  # fmt: skip
    blocker = blocking(SEND, checked.blocked)
    assert blocker is not None and blocker.id == "no-sends"
    assert blocking(READ, checked.blocked) is None
    assert "whose name starts with send_" in said(blocker)
