"""The JSON Schema of each tool's arguments, generated from `bxcore.tools` (SPEC §4.5, §10.1).

An MCP tool's schema is the one its owner pinned (§18.4), passed through unchanged.
Pure: no I/O. Nothing here names a tool: a tool added to `bxcore.tools` gets its schema here.
The schema only guides the model; brokerd's `parse` is the judge of every argument string.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from bxcore.tools import Field, Kind, ToolSpec, Variant
from bxcore.wire.messages import OfferedTool
from services.loopd.model import McpTool, Offer

log = logging.getLogger("loopd")

#: The JSON type of each kind of field (a path and a URL are strings the broker checks).
JSON_TYPES: dict[Kind, str] = {
    Kind.TEXT: "string",
    Kind.PATH: "string",
    Kind.URL: "string",
    Kind.INT: "integer",
}


def offer_schema(tool: Offer) -> dict[str, Any]:
    """The schema a tool is offered with: a built-in's generated, an MCP tool's as pinned."""
    if isinstance(tool, ToolSpec):
        return tool_schema(tool)
    return dict(tool.input_schema)


def mcp_tools(offered: Sequence[OfferedTool]) -> list[McpTool]:
    """brokerd's `tools` as the model is offered them; one whose schema is not a JSON object
    (brokerd never sends one) is left out with a log line."""
    tools: list[McpTool] = []
    for tool in offered:
        try:
            schema = json.loads(tool.input_schema)
        except (ValueError, RecursionError):
            schema = None
        if not isinstance(schema, dict):
            log.warning("MCP tool %s is not offered: its schema is not a JSON object", tool.name)
            continue
        tools.append(McpTool(tool.name, tool.description, schema))
    return tools


def tool_schema(spec: ToolSpec) -> dict[str, Any]:
    """The `parameters` (OpenAI) or `input_schema` (Anthropic) of one tool.

    A plain tool: an object of its fields, the optional ones not required, nothing else allowed.

    A tagged tool (memory: `action` = note | recall | forget) is one flat object: the tag as a
    string `enum`, then every variant's fields, each described with the variant it belongs to;
    only the tag is required. Its exact shape would be a top-level `oneOf` of one object per
    variant with the tag as a `const`, but both APIs refuse a top-level combinator: OpenAI with
    "schema must have type 'object' and not have 'oneOf'/'anyOf'/'allOf'/'enum'/'const'/'not'
    at the top level", Anthropic with "input_schema does not support oneOf, allOf, or anyOf at
    the top level", and a rejected tool fails the whole request. So the flat object is what
    every server takes; the tag's description says which fields go with which value, and
    brokerd's denial names a wrong field exactly (§3.5), which is how the model learns the rest.
    """
    if spec.tag is None:
        properties = {field.name: _property(field) for field in spec.fields}
        required = [field.name for field in spec.fields if not field.optional]
    else:
        properties = {spec.tag: _tag_property(spec.tag, spec.variants)}
        properties.update(_variant_properties(spec))
        required = [spec.tag]
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _property(field: Field) -> dict[str, Any]:
    return {"type": JSON_TYPES[field.kind], "description": field.description}


def _tag_property(tag: str, variants: tuple[Variant, ...]) -> dict[str, Any]:
    """`{"type":"string","enum":[...]}`, described as `note: Keep a note; give text. ...`."""
    parts = []
    for variant in variants:
        names = " and ".join(_given(field) for field in variant.fields) or "nothing else"
        parts.append(f"{variant.name}: {variant.description.rstrip('.')}; give {names}.")
    return {
        "type": "string",
        "enum": [variant.name for variant in variants],
        "description": " ".join(parts),
    }


def _given(field: Field) -> str:
    return f"{field.name} (optional)" if field.optional else field.name


def _variant_properties(spec: ToolSpec) -> dict[str, dict[str, Any]]:
    """Each variant's fields once: a field two variants share is described for both, and takes
    either type if they differ."""
    types: dict[str, list[str]] = {}
    owners: dict[str, list[str]] = {}
    descriptions: dict[str, list[str]] = {}
    for variant in spec.variants:
        for field in variant.fields:
            if field.name == spec.tag:
                raise ValueError(f"tool {spec.name}: field {field.name!r} is also the tag")
            json_type = JSON_TYPES[field.kind]
            if json_type not in types.setdefault(field.name, []):
                types[field.name].append(json_type)
            owners.setdefault(field.name, []).append(variant.name)
            if field.description not in descriptions.setdefault(field.name, []):
                descriptions[field.name].append(field.description)
    properties: dict[str, dict[str, Any]] = {}
    for name, json_types in types.items():
        values = " or ".join(f"{spec.tag} = {owner}" for owner in owners[name])
        properties[name] = {
            "type": json_types[0] if len(json_types) == 1 else json_types,
            "description": f"Only with {values}. " + " ".join(descriptions[name]),
        }
    return properties
