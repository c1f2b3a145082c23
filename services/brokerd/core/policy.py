"""The decision (SPEC §5.2–5.5, §18.5): a session's label, a call and the grants in; a verdict
out. An MCP tool (`mcp__<server>__<tool>`) is decided by the same steps, against its pinned
definition in the `Catalog` the caller gives.

`decide` walks the steps of §5.2 in order and `redecide` runs them again when the owner
approves (a denial then still wins). Each step can be written to a `trace`, which is what
`bxctl explain` shows. `blocked`: the tools an invalid deny grant denies whole (fail closed,
`core.grant_check`), made when the grants change, so a decision only looks one up.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bxcore import mcp_tools
from bxcore.deny import DenyReason
from bxcore.frozen import frozen
from bxcore.labels import CLEAN, DataClass, Label
from bxcore.roles import Role, names_an_address
from bxcore.tools import BROKERED, Match, Mount, Result
from bxcore.wire.messages import AskWhy
from services.brokerd.core import args as argsmod
from services.brokerd.core import mcp_args
from services.brokerd.core.args import ArgsError, ToolArgs, host_matches, inside
from services.brokerd.core.grant_check import NO_BLOCKS, blocking, said
from services.brokerd.core.grants import Grant, InvalidGrant, McpKind, Mode
from services.brokerd.core.mcp_args import McpArgs
from services.brokerd.core.owner_words import NO_WORDS, Words
from services.brokerd.core.targets import Target, check, endorsed
from services.brokerd.core.view import NO_PLACES, NO_VIEW, OwnPlaces, View, exposure_label, plan


@frozen
class Allowed:
    winner: Grant
    args: ToolArgs | McpArgs
    label: Label | None  # what the result carries; None when the runner reports it
    view: View = NO_VIEW  # what the sandbox shows of the winner's path (`view.plan`)
    targets: tuple[Target, ...] = ()  # an untrusted session's: each the owner's (§20)


@frozen
class Ask:
    winner: Grant
    args: ToolArgs | McpArgs
    why: AskWhy
    targets: tuple[Target, ...] = ()  # an untrusted session's: which were not the owner's


@frozen
class Denied:
    reason: DenyReason
    detail: str | None = None  # for invalid_arguments only (§4.3)
    grant: Grant | InvalidGrant | None = None  # the grant that decided it, where one did
    args: ToolArgs | McpArgs | None = None


Decision = Allowed | Ask | Denied


@frozen
class Won:
    """The grant that allows a call (§5.2 step 8), and the targets it was allowed for."""

    grant: Grant
    targets: tuple[Target, ...]


def _matches(grant: Grant, args: ToolArgs, match: Match) -> bool:
    if grant.tool != args.tool:
        return False
    if match is Match.PATH:
        return grant.path is not None and args.path is not None and inside(grant.path, args.path)
    if match is Match.CWD:
        return grant.path is not None and inside(grant.path, args.cwd or "/")
    if match is Match.HOST:
        return (
            grant.host is not None and args.host is not None and host_matches(grant.host, args.host)
        )
    return True


EXACT = 1 << 16  # an MCP grant that names its tool beats every pattern (longer than any name)


def specificity(grant: Grant) -> tuple[int, int]:
    """Bigger is more specific (§5.3): path components; for hosts, exact, then a longer base;
    for MCP tools (§18.5), an exact name beats every pattern and a longer pattern a shorter
    (`mcp__git__git_*` beats `mcp__git__*`), then more `[match]` keys beat fewer."""
    if grant.mcp:
        pattern = grant.pattern
        return (EXACT if pattern is None else len(pattern[1]), len(grant.match))
    if grant.path is not None:
        return (0, 0 if grant.path == "/" else grant.path.count("/"))
    if grant.host is not None:
        if grant.host.startswith("*."):
            return (0, len(grant.host) - 2)
        return (1, len(grant.host))
    return (0, 0)


def binding(grant: Grant) -> str:
    """How a shell grant's folder is bound in its sandbox (issue 15)."""
    return "read-write" if grant.write else "read-only"


def _rank(grant: Grant) -> tuple[tuple[int, int], int, str]:
    """Sort key: most specific first, then `ask` before `allow`, then the smaller id."""
    neg = specificity(grant)
    return ((-neg[0], -neg[1]), 0 if grant.mode is Mode.ASK else 1, grant.id)


def result_label(winner: Grant, result: Result, grants: Sequence[Grant]) -> Label | None:
    """The label of what a call under `winner` returns (§5.5): for what a sandbox shows of a
    path, the join of every grant whose path equals or contains the winner's (issue 9)."""
    if result is Result.WINNER:
        return exposure_label(winner, grants)
    if result is Result.FETCHED:
        return Label(DataClass.PUBLIC, winner.untrusted)
    if result is Result.CLEAN:
        return CLEAN
    return None


def decide(
    label: Label,
    tool: str,
    arguments: str,
    grants: Sequence[Grant],
    trace: list[str] | None = None,
    own: OwnPlaces = NO_PLACES,
    mcp: mcp_tools.Catalog = mcp_tools.NO_TOOLS,
    blocked: Mapping[str, InvalidGrant] = NO_BLOCKS,
    words: Words = NO_WORDS,
) -> Decision:
    """What brokerd does with this call from a session holding `label` (§5.2). No target in
    `own` (boxmaker's home, run folder and installation, but the workspace) is ever
    reached, whatever the grants say. MCP tools are those of `mcp` (§18.5). A tool in
    `blocked` is denied whatever the grants say, by the invalid deny grant that names it.
    `words` are the owner's of the session: an untrusted session's call runs unasked when
    its every target is one of them (§20)."""

    def note(words: Callable[[], str]) -> None:  # put into words only for `explain`
        if trace is not None:
            trace.append(words())

    if mcp_tools.split_name(tool) is not None:
        return _decide_mcp(label, tool, arguments, grants, mcp, words, note, blocked)
    spec = BROKERED.get(tool)
    if spec is None:  # 1
        note(lambda: f"{tool!r} is not a tool")
        return Denied(DenyReason.UNKNOWN_TOOL)
    try:  # 2
        args = argsmod.parse(tool, arguments)
    except ArgsError as error:
        detail = error.detail()
        note(lambda: f"the arguments are not valid: {detail}")
        return Denied(DenyReason.INVALID_ARGUMENTS, detail=detail)
    note(lambda: f"arguments: {args.canonical_json()}")
    target = _target(args, spec.match)
    if target is not None and own.holds(target):  # boxmaker's own files: never a tool's
        note(lambda: f"{target} holds boxmaker's own files: no tool may reach it")
        return Denied(DenyReason.PROTECTED, args=args)
    if blocked and (invalid := blocking(tool, blocked)) is not None:  # 4, failing closed
        return _blocked(invalid, tool, args, note)
    matching = sorted((g for g in grants if _matches(g, args, spec.match)), key=_rank)
    if not matching:  # 3
        note(lambda: f"no grant of {tool} matches")
        return Denied(DenyReason.NO_GRANT, args=args)
    winner = _winner(
        matching, label, args, note, words, {},
        sink=spec.sink, consequential=spec.consequential(args.variant), place="place",
    )  # fmt: skip
    runs = winner.winner if isinstance(winner, Ask) else getattr(winner, "grant", None)
    if spec.mount is Mount.WORKDIR and isinstance(runs, Grant):  # now, or once approved
        said = "" if runs.write else " (write = false)"
        note(lambda: f"{runs.path} is bound {binding(runs)} in the sandbox{said}")
    if not isinstance(winner, Won):
        return winner
    allowed = _allowed(winner.grant, args, grants, own, winner.targets)
    view = allowed.view
    if view.covers:
        note(lambda: f"hidden in the sandbox: {', '.join(view.covers)}")
    if view.reopened:
        note(lambda: f"shown again inside what is hidden: {', '.join(view.reopened)}")
    return allowed


def _decide_mcp(
    label: Label,
    tool: str,
    arguments: str,
    grants: Sequence[Grant],
    mcp: mcp_tools.Catalog,
    words: Words,
    note: Callable[[Callable[[], str]], None],
    blocked: Mapping[str, InvalidGrant],
) -> Decision:
    """§5.2's steps for an MCP tool (§18.5): matching by name and `[match]`, the flow and
    untrusted checks for sinks, the untrusted check for a source given a web address (it
    reaches the network: `roles.names_an_address`), the grant's label for what any tool
    returns."""
    if tool in mcp.changed:  # 1: a rug pull, or a tool the owner never saw
        note(lambda: f"{tool!r}: {mcp_tools.CHANGED}")
        return Denied(DenyReason.UNKNOWN_TOOL, detail=mcp_tools.CHANGED)
    pinned = mcp.tools.get(tool)
    if pinned is None:
        note(lambda: f"{tool!r} is not a tool the owner trusted")
        return Denied(DenyReason.UNKNOWN_TOOL)
    try:  # 2
        args = mcp_args.parse(pinned, tool, arguments)
    except ArgsError as error:
        detail = error.detail()
        note(lambda: f"the arguments are not valid: {detail}")
        return Denied(DenyReason.INVALID_ARGUMENTS, detail=detail)
    note(lambda: f"arguments: {args.canonical_json()}")
    if blocked and (invalid := blocking(tool, blocked)) is not None:  # 4, failing closed
        return _blocked(invalid, tool, args, note)
    value = args.value
    matching = sorted((g for g in grants if g.covers(tool) and g.holds(value)), key=_rank)
    if not matching:  # 3
        note(lambda: f"no grant of {tool} matches (by name and [match])")
        return Denied(DenyReason.NO_GRANT, args=args)
    kind = matching[0].kind
    assert kind is not None
    address = None if kind.sink else names_an_address(pinned.input_schema)
    if address is not None:
        note(lambda: f"its argument {address!r} takes a web address: it reaches the network")
    winner = _winner(
        matching, label, args, note, words, mcp.roles_of(tool),
        sink=kind.sink, consequential=kind.sink or address is not None, place="sink", kind=kind,
        schema=pinned.input_schema,
    )  # fmt: skip
    if not isinstance(winner, Won):
        return winner
    return _allowed_mcp(winner.grant, args, winner.targets)


def _blocked(
    invalid: InvalidGrant,
    tool: str,
    args: ToolArgs | McpArgs,
    note: Callable[[Callable[[], str]], None],
) -> Denied:
    """A call of a tool an invalid deny grant names: denied by it, whatever else matches (an
    invalid deny denies everything it might have meant, not nothing: issue 23)."""
    note(lambda: said(invalid, tool))
    return Denied(DenyReason.DENIED_BY_GRANT, grant=invalid, args=args)


def _winner(
    matching: list[Grant],
    label: Label,
    args: ToolArgs | McpArgs,
    note: Callable[[Callable[[], str]], None],
    words: Words,
    roles: Mapping[str, Role],
    *,
    sink: bool,
    consequential: bool,
    place: str,
    kind: McpKind | None = None,
    schema: Mapping[str, Any] | None = None,
) -> Won | Denied | Ask:
    """§5.2 steps 4 to 8 on the grants that match, most specific first, for built-in and
    MCP tools alike: a deny wins; the winner's flow check for a sink (`place` names where a
    sink's data goes); for a consequential call (every sink's, and memory `forget`: issue 14)
    in an untrusted session, the owner asked unless every target is a value the owner gave
    (§20, `roles` saying which arguments are targets); the owner asked when the grant says
    so. The winner when it allows the call, with the targets it was allowed for."""
    note(lambda: "matching grants: " + ", ".join(f"{g.id} ({g.mode})" for g in matching))
    denies = [g for g in matching if g.mode is Mode.DENY]
    if denies:  # 4: an explicit deny always wins
        note(lambda: f"{denies[0].id} denies it, and a deny always wins")
        return Denied(DenyReason.DENIED_BY_GRANT, grant=denies[0], args=args)
    winner = matching[0]  # 5
    of_kind = "" if kind is None else f", kind {kind}"
    note(lambda: f"winner: {winner.id} ({winner.mode}, class {winner.class_}{of_kind})")
    if sink and not label.class_.at_most(winner.class_):  # 6
        note(
            lambda: (
                f"flow: the session holds {label.class_} data, which may not go to "
                f"{winner.id}'s {winner.class_} {place}"
            )
        )
        return Denied(DenyReason.FLOW_VIOLATION, grant=winner, args=args)
    if sink:
        note(lambda: f"flow: {label.class_} data may go to a {winner.class_} {place}")
    targets: tuple[Target, ...] = ()
    if consequential and label.untrusted:  # 7
        targets = check(args, roles, words, schema)
        if targets:
            note(lambda: "targets: " + "; ".join(target.said() for target in targets))
        if not endorsed(targets):
            why = "a target is not a value the owner gave" if targets else "it has no target"
            why = f"the session holds untrusted content and {why}"
            note(lambda: f"{why}, so the owner must approve this call")
            return Ask(winner, args, AskWhy.UNTRUSTED, targets)
        note(
            lambda: (
                "the session holds untrusted content, but every target is a value the owner gave"
            )
        )
    if winner.mode is Mode.ASK:  # 8
        note(lambda: f"{winner.id} asks the owner")
        return Ask(winner, args, AskWhy.GRANT_ASKS, targets)
    note(lambda: f"{winner.id} allows it")
    return Won(winner, targets)


def mcp_result_label(winner: Grant) -> Label:
    """What an MCP tool's result carries (§18.5, issue 23): the grant's class and untrusted
    flag, whatever its kind. The kind is the owner's word for what the tool does, which may
    be wrong (a mail reader granted as a sink); what it returns is the server's, so every
    result raises the session, an empty or failed one too (docs/mcp.md)."""
    return Label(winner.class_, winner.untrusted)


def _allowed_mcp(winner: Grant, args: McpArgs, targets: tuple[Target, ...] = ()) -> Allowed:
    return Allowed(winner, args, mcp_result_label(winner), targets=targets)


def _target(args: ToolArgs, match: Match) -> str | None:
    """The path a call reaches: a file's, or a shell's working folder (§5.3)."""
    if match is Match.PATH:
        return args.path
    if match is Match.CWD:
        return args.cwd or "/"
    return None


def _allowed(
    winner: Grant,
    args: ToolArgs | McpArgs,
    grants: Sequence[Grant],
    own: OwnPlaces,
    targets: tuple[Target, ...] = (),
) -> Allowed:
    if isinstance(args, McpArgs):
        return _allowed_mcp(winner, args, targets)
    spec = BROKERED[args.tool]
    label = result_label(winner, spec.result, grants)
    return Allowed(winner, args, label, plan(winner, grants, own), targets)


def redecide(
    label: Label,
    tool: str,
    arguments: str,
    grants: Sequence[Grant],
    own: OwnPlaces = NO_PLACES,
    mcp: mcp_tools.Catalog = mcp_tools.NO_TOOLS,
    blocked: Mapping[str, InvalidGrant] = NO_BLOCKS,
    words: Words = NO_WORDS,
) -> Allowed | Denied:
    """After the owner approved: the same steps again; a denial wins, anything else runs."""
    decision = decide(
        label, tool, arguments, grants, own=own, mcp=mcp, blocked=blocked, words=words
    )
    return approved(decision, grants, own) if isinstance(decision, Ask) else decision


def approved(ask: Ask, grants: Sequence[Grant], own: OwnPlaces = NO_PLACES) -> Allowed:
    """An ask the owner approved: it runs as if its winner had allowed it."""
    return _allowed(ask.winner, ask.args, grants, own)
