"""The tools' JSON Schemas are generated from `bxcore.tools`, in a shape every server accepts."""

from __future__ import annotations

import json

import pytest

from bxcore.tools import BROKERED, SPAWN, Field, Kind, ToolSpec, Variant
from services.loopd import anthropic, openai
from services.loopd.schemas import tool_schema

ALL = [*BROKERED.values(), SPAWN]
COMBINATORS = {"oneOf", "anyOf", "allOf", "not", "enum", "const", "if", "then", "else"}


def test_read_file_takes_exactly_one_described_path() -> None:
    assert tool_schema(BROKERED["read_file"]) == {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": BROKERED["read_file"].fields[0].description,
            }
        },
        "required": ["path"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize("spec", [s for s in ALL if s.tag is None], ids=lambda s: s.name)
def test_a_plain_tool_lists_its_fields_in_order_and_requires_the_ones_not_optional(
    spec: ToolSpec,
) -> None:
    schema = tool_schema(spec)
    assert list(schema["properties"]) == [field.name for field in spec.fields]
    assert schema["required"] == [field.name for field in spec.fields if not field.optional]
    assert schema["additionalProperties"] is False
    for field in spec.fields:
        assert schema["properties"][field.name]["description"] == field.description


def test_shell_does_not_require_cwd() -> None:
    schema = tool_schema(BROKERED["shell"])
    assert schema["required"] == ["command"]
    assert set(schema["properties"]) == {"command", "cwd"}


def test_memory_is_one_flat_object_with_the_action_as_an_enum() -> None:
    schema = tool_schema(BROKERED["memory"])
    assert schema["type"] == "object"
    assert schema["required"] == ["action"]
    assert schema["additionalProperties"] is False
    action = schema["properties"]["action"]
    assert action["type"] == "string"
    assert action["enum"] == ["note", "recall", "forget"]
    assert set(schema["properties"]) == {"action", "text", "query", "id"}


def test_memory_forget_takes_an_integer_id() -> None:
    assert tool_schema(BROKERED["memory"])["properties"]["id"]["type"] == "integer"


def test_each_memory_field_says_which_action_it_goes_with() -> None:
    properties = tool_schema(BROKERED["memory"])["properties"]
    assert properties["text"]["description"].startswith("Only with action = note.")
    assert properties["query"]["description"].startswith("Only with action = recall.")
    assert properties["id"]["description"].startswith("Only with action = forget.")
    assert "forget: Delete one note; give id." in properties["action"]["description"]


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s.name)
def test_no_schema_has_a_combinator_at_the_top_which_openai_and_anthropic_refuse(
    spec: ToolSpec,
) -> None:
    schema = tool_schema(spec)
    assert schema["type"] == "object"
    assert not COMBINATORS & set(schema)


@pytest.mark.parametrize("spec", ALL, ids=lambda s: s.name)
def test_every_property_has_a_type_and_a_one_line_description(spec: ToolSpec) -> None:
    for prop in tool_schema(spec)["properties"].values():
        assert prop["type"] in ("string", "integer")
        assert prop["description"] and "\n" not in prop["description"]


def test_a_new_tagged_tool_gets_its_schema_without_code_naming_it() -> None:
    spec = ToolSpec(
        name="calendar",
        description="Read or add events.",
        tag="op",
        variants=(
            Variant("list", (Field("day", Kind.TEXT, "A date."),), "List a day."),
            Variant(
                "add",
                (Field("day", Kind.INT, "Days from now."), Field("what", Kind.TEXT, "The event.")),
                "Add an event.",
            ),
            Variant("clear", (), "Clear all."),
        ),
    )
    schema = tool_schema(spec)
    assert schema["required"] == ["op"]
    assert schema["properties"]["op"]["enum"] == ["list", "add", "clear"]
    assert "clear: Clear all; give nothing else." in schema["properties"]["op"]["description"]
    day = schema["properties"]["day"]
    assert day["type"] == ["string", "integer"]
    assert day["description"] == "Only with op = list or op = add. A date. Days from now."


def test_a_variant_field_named_like_the_tag_is_a_mistake_in_the_table() -> None:
    spec = ToolSpec(
        name="bad",
        description="x",
        tag="op",
        variants=(Variant("a", (Field("op", Kind.TEXT, "clash"),), "A."),),
    )
    with pytest.raises(ValueError, match="also the tag"):
        tool_schema(spec)


def test_the_openai_tool_list_wraps_each_schema_as_a_function() -> None:
    listed = openai.tool_list(ALL)
    assert [tool["function"]["name"] for tool in listed] == [spec.name for spec in ALL]
    first = listed[0]
    assert first["type"] == "function"
    assert first["function"]["description"] == BROKERED["read_file"].description
    assert first["function"]["parameters"] == tool_schema(BROKERED["read_file"])


def test_the_anthropic_tool_list_gives_each_schema_as_input_schema() -> None:
    listed = anthropic.tool_list(ALL)
    assert listed[-1] == {
        "name": "spawn",
        "description": SPAWN.description,
        "input_schema": tool_schema(SPAWN),
    }


def test_the_schemas_are_plain_json() -> None:
    for spec in ALL:
        assert json.loads(json.dumps(tool_schema(spec))) == tool_schema(spec)
