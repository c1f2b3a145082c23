"""A consequential call's targets, and which of them the owner gave (SPEC §20).

`check` walks a call's arguments by their roles (`bxcore.roles`; a built-in tool's are its
fields', an MCP tool's are pinned with it): every value under a *target* argument is a target
(each element of an array, each leaf of an object and each of its keys), named by its JSON
pointer (`/to`, `/recipients/1`; a key by its object's, so an MCP argument's name the pinned
schema does not declare is a target at the arguments' pointer, ""); a *code* argument is a target no
words ever endorse; of *content* only what `in_content` finds is looked at (links, card
numbers, IBANs): each is a target at its argument's pointer, since a link in a message sends
its reader there and an account number says where money goes (issue 24: "send Alice the link
www.evil…" to the Alice the owner named). A call runs unasked in an
untrusted session only when it has a target and every target is the owner's (`endorsed`).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from bxcore.frozen import frozen
from bxcore.ids import descends
from bxcore.roles import Role, role_of
from bxcore.tools import BROKERED
from services.brokerd.core.args import ToolArgs
from services.brokerd.core.in_content import in_content
from services.brokerd.core.mcp_args import McpArgs
from services.brokerd.core.owner_words import Words

OWNER = "owner"
CODE = "code"
UNKNOWN = "unknown"
UNTRUSTED = "untrusted: call "
SHOWN = 200  # characters of a target value kept for the owner's card and `explain`


@frozen
class Seen:
    """The call whose untrusted result a value first appeared in: of the session, or of a
    sub-agent of it (`session`), and its tool where the ledger says."""

    session: str
    call: str
    tool: str | None = None

    def origin(self, session: str) -> str:
        """`untrusted: call <id>`, `… of <sub-agent>` when it was a sub-agent's call."""
        of = "" if self.session == session else f" of {self.session}"
        return f"{UNTRUSTED}{self.call}{of}"


def seen_in(origin: str, session: str) -> Seen | None:
    """The call an origin `Seen.origin` wrote names (without its tool); None for any other."""
    if not origin.startswith(UNTRUSTED):
        return None
    call, of, owner = origin[len(UNTRUSTED) :].rpartition(" of ")
    if of and call and owner != session and descends(owner, session):
        return Seen(owner, call)
    return Seen(session, origin[len(UNTRUSTED) :])


@frozen
class Target:
    """One target value of a call: where it is in the arguments, the value (cut to `SHOWN`
    characters when shown), and where it came from: `owner`, `code` (never the owner's),
    `untrusted: call <id>` (the first result of the session it appeared in; `tool`, that
    call's tool where known) or `unknown`."""

    at: str
    value: str | int | float | bool
    origin: str
    tool: str | None = None

    @property
    def owner(self) -> bool:
        return self.origin == OWNER

    def shown(self) -> str:
        return shown(self.value)

    def said(self) -> str:
        """One line for `explain` and the card: `/to = "a@b.c": owner`, `…: untrusted: call
        c4 (read_inbox)`."""
        tool = "" if self.tool is None else f" ({self.tool})"
        return f"{self.at} = {self.shown()}: {self.origin}{tool}"


def shown(value: object) -> str:
    """A target value as JSON text, cut for the owner's views."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def check(
    args: ToolArgs | McpArgs,
    roles: Mapping[str, Role],
    words: Words,
    schema: Mapping[str, Any] | None = None,
) -> tuple[Target, ...]:
    """Every target value of the call, each with `owner` or not yet known (`unknown`): the
    shell may then say which result an unknown one first appeared in (`Target.origin`).
    `schema`, an MCP tool's pinned input schema, says which objects' keys are its own
    property names rather than values (`_leaves`), the arguments' own names too: any other
    name is the model's key, and a target at "" (a tool whose schema leaves its arguments
    open may take a map of addresses at the top)."""
    found: list[Target] = []
    properties = _properties(schema)
    for name, value, role in _arguments(args, roles):
        if isinstance(args, McpArgs) and name not in properties:  # the arguments' own key
            found.append(Target("", name, OWNER if words.holds(name) else UNKNOWN))
        leaves = _leaves(f"/{_escape(name)}", value, properties.get(name))
        if role is Role.CONTENT:  # only where it sends its reader, or their money
            for at, leaf in leaves:
                for inside in in_content(_text_of(leaf)):
                    found.append(Target(at, inside, OWNER if words.holds(inside) else UNKNOWN))
            continue
        for at, leaf in leaves:
            origin = CODE if role is Role.CODE else OWNER if words.holds(leaf) else UNKNOWN
            found.append(Target(at, leaf, origin))
    return tuple(found)


def value_at(arguments: str, at: str) -> object:
    """The value a JSON pointer names in a call's canonical arguments; None when it names
    nothing (the arguments of a record read back after a restart)."""
    try:
        value: object = json.loads(arguments)
    except ValueError:
        return None
    for step in at.split("/")[1:]:
        key = step.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    return value


def endorsed(targets: tuple[Target, ...]) -> bool:
    """Whether the call may run unasked: it has a target, and every one is the owner's."""
    return bool(targets) and all(target.owner for target in targets)


def _arguments(
    args: ToolArgs | McpArgs, roles: Mapping[str, Role]
) -> Iterator[tuple[str, Any, Role]]:
    if isinstance(args, McpArgs):
        for name, value in args.value.items():
            yield name, value, role_of(roles, name)
        return
    spec = BROKERED[args.tool]
    fields = {f.name: f for f in spec.fields}
    for variant in spec.variants:
        fields.update((f.name, f) for f in variant.fields)
    for name, value in args.values:
        yield name, value, fields[name].role


def _leaves(at: str, value: Any, schema: Any) -> Iterator[tuple[str, str | int | float | bool]]:
    """The values under `value`, each with its JSON pointer; null, [] and {} name nothing.
    An object's keys are values too, each named by the object's pointer: in a map such as
    `{"mallory@evil.example": "writer"}` the key is where the effect goes. Only a key that
    `schema` (the value's part of the pinned schema) lists in its `properties` is not: it is
    the tool's own name for a field (`{"file_id": "19"}`), never the model's to choose. An
    array's element is walked with the schema that holds it: `prefixItems`' own for the first
    ones, `items` for the rest (JSON Schema 2020-12)."""
    if isinstance(value, list):
        holds = schema if isinstance(schema, Mapping) else {}
        prefix, items = holds.get("prefixItems"), holds.get("items")
        first = prefix if isinstance(prefix, list) else []
        for n, item in enumerate(value):
            yield from _leaves(f"{at}/{n}", item, first[n] if n < len(first) else items)
    elif isinstance(value, dict):
        declared = _properties(schema)
        for key, item in value.items():
            if key not in declared:
                yield at, key
            yield from _leaves(f"{at}/{_escape(key)}", item, declared.get(key))
    elif value is not None:
        yield at, value


def _text_of(leaf: str | int | float | bool) -> str:
    """A content leaf as its reader sees it: a number as its digits (`4111111111111111`, an
    integral float without its `.0`), so that a card number sent as a JSON number is seen."""
    if isinstance(leaf, bool):
        return ""
    if isinstance(leaf, float) and leaf.is_integer():
        return str(int(leaf))
    return leaf if isinstance(leaf, str) else repr(leaf)


def _properties(schema: Any) -> Mapping[str, Any]:
    """The property schemas an object schema declares by name; none for anything else."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _escape(name: str) -> str:
    """A key as a JSON pointer writes it (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")
