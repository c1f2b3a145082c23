"""Argument roles (SPEC §20): what `bxctl mcp trust` proposes for each argument of a pinned
schema, and which roles a pins file may hold."""

from __future__ import annotations

import pytest

from bxcore.roles import Role, names_an_address, propose, roles_problem, words_of


@pytest.mark.parametrize(
    ("name", "schema", "role"),
    [
        ("to", {"type": "string"}, Role.TARGET),
        ("recipients", {"type": "array"}, Role.TARGET),
        ("recipient_name", {"type": "string"}, Role.TARGET),  # a target word wins
        ("channelName", {"type": "string"}, Role.TARGET),
        ("contact", {"type": "string", "format": "email"}, Role.TARGET),
        ("homepage", {"type": "string", "format": "uri"}, Role.TARGET),
        ("file_id", {"type": "string"}, Role.TARGET),
        ("amount", {"type": "number"}, Role.TARGET),
        ("body", {"type": "string"}, Role.CONTENT),
        ("subject", {"type": "string"}, Role.CONTENT),
        ("start_time", {"type": "string"}, Role.CONTENT),
        ("when", {"type": "string", "format": "date-time"}, Role.CONTENT),
        ("recurring", {"type": "boolean"}, Role.CONTENT),
        ("command", {"type": "string"}, Role.CODE),
        ("sql", {"type": "string"}, Role.CODE),
        ("hotel", {"type": "string"}, Role.TARGET),  # no word says: a target (fail closed)
        ("x", {}, Role.TARGET),
    ],
)
def test_the_proposal_reads_names_and_formats_and_leaves_the_unknown_a_target(
    name: str, schema: dict[str, object], role: Role
) -> None:
    assert propose({"type": "object", "properties": {name: schema}}) == {name: role}


def test_names_split_into_words_whatever_their_case_style() -> None:
    assert words_of("start_time") == words_of("startTime") == words_of("start-time")
    assert words_of("IBANNumber") == ["iban", "number"]


def test_a_schema_without_properties_proposes_nothing() -> None:
    assert propose({"type": "object"}) == {}
    assert propose({"properties": []}) == {}


def test_pinned_roles_name_only_declared_arguments_and_known_roles() -> None:
    schema = {"properties": {"to": {}, "body": {}}}
    assert roles_problem(schema, {"to": "target", "body": "content"}) is None
    assert (
        roles_problem(schema, {"cc": "target"}) == "the role of 'cc': the tool has no such argument"
    )
    assert "not one of" in str(roles_problem(schema, {"to": "owner"}))


@pytest.mark.parametrize(
    ("properties", "found"),
    [
        ({"url": {"type": "string"}}, "url"),
        ({"page_link": {"type": "string"}}, "page_link"),
        ({"webpageAddress": {"type": "string"}}, "webpageAddress"),
        ({"where": {"type": "string", "format": "uri"}}, "where"),
        ({"server": {"type": "string", "format": "hostname"}}, "server"),
        ({"n": {"type": "integer"}, "host": {"type": "string"}}, "host"),
        ({"channel": {"type": "string"}, "query": {"type": "string"}}, None),
        ({"hurl": {"type": "string"}, "curly": {"type": "string"}}, None),  # whole words only
    ],
)
def test_an_argument_that_takes_a_web_address_is_found_by_its_words_or_format(
    properties: dict[str, object], found: str | None
) -> None:
    assert names_an_address({"type": "object", "properties": properties}) == found
    assert names_an_address({"type": "object"}) is None
