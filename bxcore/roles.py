"""What each argument of a consequential tool is (SPEC §20): a *target* (where data, money or
an effect goes, or what is affected), *content* (what is said), or *code* (what runs). brokerd
lets an untrusted session's call run without asking only when every target value is one the
owner gave; of content only the links, card numbers and IBANs in it are looked at
(`services.brokerd.core.in_content`), each a target; code is never taken as the owner's.

The built-in tools' roles are in `bxcore.tools`. For an MCP tool, `propose` reads the pinned
inputSchema (names, `format`, descriptions) and proposes a role for each argument; the owner
confirms them with `bxctl mcp trust`, and what they confirm is pinned with the tool. An
argument with no role is a target (fail closed). Pure: no I/O.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any


class Role(enum.StrEnum):
    TARGET = "target"
    CONTENT = "content"
    CODE = "code"


#: What each role means, in the owner's words (`bxctl mcp trust`, `mcp show`, the console).
MEANING = {
    Role.TARGET: "where it goes or what it affects: runs unasked only when you gave the value",
    Role.CONTENT: "what is said: only its links, card numbers and IBANs are checked",
    Role.CODE: "what runs: never taken as yours, so an untrusted session always asks",
}

#: Words of an argument's name that say it is what is said, not where it goes.
_CONTENT_WORDS = frozenset(
    {
        "body", "content", "contents", "text", "message", "msg", "subject", "title",
        "description", "summary", "note", "notes", "comment", "comments", "caption", "reason",
        "markdown", "html", "label", "name", "topic", "agenda", "feedback", "review",
        "date", "time", "day", "start", "end", "duration", "timezone", "rating",
    }
)  # fmt: skip
#: Words that say it is run, evaluated or interpreted.
_CODE_WORDS = frozenset({"command", "cmd", "code", "script", "sql", "expression", "program"})
#: Words that say it names a place, a party, an account or a thing acted on: a target even
#: when a content word is in the name too (`recipient_name`, `file_title`, `event_id`).
_TARGET_WORDS = frozenset(
    {
        "to", "cc", "bcc", "recipient", "recipients", "address", "email", "emails", "url",
        "uri", "link", "host", "domain", "path", "file", "files", "folder", "directory", "dir",
        "id", "ids", "account", "iban", "user", "users", "username", "participant",
        "participants", "member", "members", "channel", "room", "phone", "number", "amount",
        "price", "attachment", "attachments", "location", "destination", "owner", "key",
        "filename", "filepath", "foldername", "sender", "target",
    }
)  # fmt: skip
#: `format` values (JSON Schema) that name a place or a party.
_TARGET_FORMATS = frozenset({"email", "idn-email", "uri", "iri", "uri-reference", "hostname"})
_DATE_FORMATS = frozenset({"date", "date-time", "time", "duration"})
#: Words of an argument's name, and `format` values, that say the value is a web address:
#: a tool given one reaches the network, and the address's path and query carry data out.
_ADDRESS_WORDS = frozenset(
    {
        "url", "urls", "uri", "uris", "link", "links", "href", "website", "webpage",
        "endpoint", "host", "hostname", "domain",
    }
)  # fmt: skip
_ADDRESS_FORMATS = frozenset(
    {"uri", "iri", "uri-reference", "iri-reference", "hostname", "idn-hostname"}
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def words_of(name: str) -> list[str]:
    """An argument name's words, lower-cased: `start_time`, `startTime`, `start-time` all give
    `["start", "time"]`."""
    return [w.lower() for w in _WORD.findall(name)]


def propose(input_schema: Mapping[str, Any]) -> dict[str, Role]:
    """A role for each top-level property of a tool's inputSchema, by this order of rules: a
    target format (`email`, `uri`, `hostname`) or a target word in the name → target; a code
    word → code; a yes/no option, a date or time format, or a content word → content;
    anything else → target."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {
        name: _propose_one(name, schema if isinstance(schema, Mapping) else {})
        for name, schema in properties.items()
        if isinstance(name, str)
    }


def _propose_one(name: str, schema: Mapping[str, Any]) -> Role:
    words = set(words_of(name))
    form = schema.get("format")
    if form in _TARGET_FORMATS or words & _TARGET_WORDS:
        return Role.TARGET
    if words & _CODE_WORDS:
        return Role.CODE
    if schema.get("type") == "boolean" or form in _DATE_FORMATS or words & _CONTENT_WORDS:
        return Role.CONTENT
    return Role.TARGET


def names_an_address(input_schema: Mapping[str, Any]) -> str | None:
    """The first top-level argument of a tool's inputSchema that takes a web address or a
    host (a `uri` or `hostname` format, or such a word in its name: `url`, `link`, `host`…),
    or None. A tool
    that has one reaches the network with what the caller puts in it (the path and query of
    an address carry data out, as `http_fetch`'s do), whatever the owner's grant calls it: a
    reader granted as a source is then decided as a consequential call (§20, issue 24)."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    for name, schema in properties.items():
        if not isinstance(name, str):
            continue
        form = schema.get("format") if isinstance(schema, Mapping) else None
        if form in _ADDRESS_FORMATS or set(words_of(name)) & _ADDRESS_WORDS:
            return name
    return None


def arguments_of(input_schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The top-level properties an inputSchema declares, in its order."""
    properties = input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return ()
    return tuple(name for name in properties if isinstance(name, str))


def roles_problem(input_schema: Mapping[str, Any], roles: Mapping[str, object]) -> str | None:
    """Why `roles` cannot be a tool's pinned roles (an argument it does not declare, a role
    that is not one), or None."""
    declared = set(arguments_of(input_schema))
    for name, role in roles.items():
        if name not in declared:
            return f"the role of {name!r}: the tool has no such argument"
        if not isinstance(role, str) or role not in Role.__members__.values():
            return f"the role of {name!r} is not one of target, content, code"
    return None


def role_of(roles: Mapping[str, Role], argument: str) -> Role:
    """An argument's role; one with none is a target (fail closed)."""
    return roles.get(argument, Role.TARGET)
