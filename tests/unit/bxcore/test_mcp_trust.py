"""What trusting an MCP server pins (SPEC §18.3, §20): each argument's role proposed, kept as
the owner confirmed it while the schema stays, or given by the owner; a changed role makes the
tool changed; a `--role` that names no listed tool, argument or role is one line."""

from __future__ import annotations

import pytest

from bxcore.mcp_tools import Pins, ToolDef
from bxcore.mcp_trust import (
    RoleError,
    Source,
    State,
    check_given,
    given_of,
    parse_role,
    plan,
    plan_json,
)
from bxcore.roles import Role

SCHEMA = {"type": "object", "properties": {"to": {"type": "string"}, "body": {"type": "string"}}}
SEND = ToolDef("send_email", "Sends a mail.", SCHEMA)
DOTTED = ToolDef("mail.send", "Sends.", {"type": "object", "properties": {"x.y": {}}})


def pins_of(*tools: ToolDef, roles: dict[str, dict[str, Role]] | None = None) -> Pins:
    return Pins("mail", "2026-12-04T00:00:00.000Z", {t.name: t for t in tools}, roles)


def roles_of(planned: tuple[object, ...]) -> list[tuple[str, str, str, str | None]]:
    (entry,) = planned
    return [
        (c.argument, c.role.value, c.source.value, None if c.was is None else c.was.value)
        for c in entry.roles  # type: ignore[attr-defined]
    ]


def test_a_new_tool_gets_the_proposed_roles() -> None:
    planned = plan(None, (SEND,))
    assert planned[0].state is State.NEW
    assert roles_of(planned) == [
        ("to", "target", "proposed", None),
        ("body", "content", "proposed", None),
    ]


def test_roles_the_owner_confirmed_are_kept_while_the_schema_stays() -> None:
    pinned = pins_of(SEND, roles={"send_email": {"to": Role.CONTENT, "body": Role.CONTENT}})
    planned = plan(pinned, (SEND,))
    assert planned[0].state is State.UNCHANGED
    assert roles_of(planned) == [("to", "content", "kept", None), ("body", "content", "kept", None)]
    described = ToolDef("send_email", "Sends a mail, politely.", SCHEMA)  # the same schema
    planned = plan(pinned, (described,))
    assert planned[0].state is State.CHANGED
    assert [c.source for c in planned[0].roles] == [Source.KEPT, Source.KEPT]


def test_a_changed_schema_is_proposed_again_and_says_what_was_pinned() -> None:
    pinned = pins_of(SEND, roles={"send_email": {"to": Role.CONTENT, "body": Role.CONTENT}})
    wider = {"type": "object", "properties": {**SCHEMA["properties"], "cc": {"type": "string"}}}  # type: ignore[dict-item]
    planned = plan(pinned, (ToolDef("send_email", "Sends a mail.", wider),))
    assert planned[0].state is State.CHANGED
    assert roles_of(planned) == [
        ("to", "target", "proposed", "content"),
        ("body", "content", "proposed", None),
        ("cc", "target", "proposed", None),
    ]


def test_a_changed_role_is_a_changed_tool_until_it_is_trusted_again() -> None:
    pinned = pins_of(SEND, roles={"send_email": {"to": Role.TARGET, "body": Role.CONTENT}})
    planned = plan(pinned, (SEND,), {"send_email": {"body": Role.TARGET}})
    assert planned[0].state is State.ROLES_CHANGED
    assert roles_of(planned)[1] == ("body", "target", "yours", "content")
    assert planned[0].role_map() == {"to": Role.TARGET, "body": Role.TARGET}
    again = pins_of(SEND, roles={"send_email": planned[0].role_map()})
    assert plan(again, (SEND,))[0].state is State.UNCHANGED


def test_a_version_1_pin_held_every_argument_a_target() -> None:
    planned = plan(pins_of(SEND, roles={"send_email": {}}), (SEND,))
    assert planned[0].state is State.ROLES_CHANGED
    assert roles_of(planned)[1] == ("body", "content", "proposed", "target")


def test_the_json_names_each_role_with_its_meaning() -> None:
    shown = plan_json(plan(None, (SEND,))[0])
    assert shown["state"] == "new" and shown["sha256"] == SEND.sha256
    assert shown["roles"][1]["role"] == "content"
    assert (
        shown["roles"][1]["meaning"]
        == "what is said: only its links, card numbers and IBANs are checked"
    )


def test_a_role_option_names_a_tool_an_argument_and_a_role() -> None:
    assert parse_role("send_email.to=content", (SEND,)) == ("send_email", "to", Role.CONTENT)
    assert parse_role("mail.send.x.y=code", (SEND, DOTTED)) == ("mail.send", "x.y", Role.CODE)
    assert given_of(["send_email.to=code", "send_email.to=content"], (SEND,)) == {
        "send_email": {"to": Role.CONTENT}
    }


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("send_email.to", "write TOOL.ARG=ROLE, ROLE one of target, content, code"),
        ("send_email=target", "write TOOL.ARG=ROLE"),
        ("send_email.to=dest", "'dest' is not a role: one of target, content, code"),
        ("send_mail.to=target", "no tool 'send_mail' is listed (there are: send_email)"),
        ("send_email.too=target", "the tool 'send_email' has no argument 'too' (it has: to, body)"),
        ("send_email.=target", "the tool 'send_email' has no argument ''"),
    ],
)
def test_a_role_option_that_is_not_one_is_one_line(option: str, said: str) -> None:
    with pytest.raises(RoleError) as raised:
        parse_role(option, (SEND,))
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_the_consoles_roles_are_checked_as_the_option_is() -> None:
    assert check_given({"send_email": {"to": "content"}}, (SEND,)) == {
        "send_email": {"to": Role.CONTENT}
    }
    for bad in ([], {"send_email": "content"}, {"send_email": {"to": "nope"}}):
        with pytest.raises(RoleError):
            check_given(bad, (SEND,))
