"""An MCP call's arguments (SPEC §18.5): the model's string checked against the tool's pinned
`inputSchema` (JSON Schema draft 2020-12, by `jsonschema`), giving `McpArgs` or `ArgsError`;
and with the same validators, a tool's structured result against its `outputSchema`.

Every `$ref` that is not inside the schema itself is refused: nothing is ever fetched. The
model's text is hostile (§4): strict JSON, at most 2 MiB, an object. Pure: no I/O, no clock.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when first used: a brokerd without [[mcp]] never pays for them
    import jsonschema
    import referencing
    from jsonschema.exceptions import ValidationError

from bxcore import strict_json
from bxcore.frozen import frozen
from bxcore.mcp_tools import ToolDef, canonical
from services.brokerd.core.args import MAX_ARGUMENTS, ArgsError
from services.brokerd.core.argshape import json_kind
from services.brokerd.core.quick_schema import Check, compile_check


@frozen
class McpArgs:
    """A checked MCP call: the tool's model name and its arguments as one canonical JSON text
    (sorted keys, compact), which is what the ledger keeps and what the server is sent.

    It answers `ToolArgs`'s questions about paths and hosts with None: what an MCP server
    reaches is its `[[mcp]]` entry's, never the model's to name."""

    tool: str
    text: str

    def canonical_json(self) -> str:
        return self.text

    @property
    def value(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.text)
        return loaded

    path = property(lambda self: None)
    cwd = property(lambda self: None)
    url = property(lambda self: None)
    host = property(lambda self: None)


def _refuse_remote(uri: str) -> referencing.Resource[Any]:
    import referencing.exceptions

    # attrs classes: mypy without the attrs plugin does not see their fields
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


@functools.cache
def _registry() -> referencing.Registry[Any]:
    import referencing

    return referencing.Registry(retrieve=_refuse_remote)  # type: ignore[call-arg]


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.Draft202012Validator:
    import jsonschema

    schema = json.loads(schema_json)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=_registry())


@functools.lru_cache(maxsize=256)
def _quick(schema_json: str) -> Check | None:
    """The quick yes of a schema `_validator` has taken (`quick_schema`), if it has one."""
    return compile_check(json.loads(schema_json))


def _holds(schema_json: str, value: Any) -> bool:
    """Whether `value` is known valid without `jsonschema` (the schema checked first)."""
    _validator(schema_json)
    quick = _quick(schema_json)
    return quick is not None and quick(value)


def check_schema(tool: ToolDef) -> str | None:
    """Why the tool's inputSchema cannot be used (None: it can): shown when it is listed."""
    from jsonschema.exceptions import SchemaError

    try:
        _validator(tool.schema_json)
    except SchemaError as error:
        return f"the inputSchema is not a valid JSON Schema: {error.message}"
    return None


def parse(tool: ToolDef, name: str, arguments: str) -> McpArgs:
    """The model's `arguments` for the pinned `tool` (offered as `name`); `ArgsError` only."""
    if len(arguments) > MAX_ARGUMENTS or len(arguments.encode("utf-8", "replace")) > MAX_ARGUMENTS:
        raise ArgsError.shape(f"the arguments are larger than {MAX_ARGUMENTS} bytes")
    value = _load(arguments)
    if not isinstance(value, dict):
        raise ArgsError.shape(f"invalid type: {json_kind(value)}, expected an object")
    import referencing.exceptions
    from jsonschema.exceptions import SchemaError, best_match

    try:
        if _holds(tool.schema_json, value):
            return McpArgs(name, canonical(value))
        validator = _validator(tool.schema_json)
        error = best_match(validator.iter_errors(value))
    except SchemaError as bad:
        raise ArgsError.shape(f"the tool's inputSchema is not valid: {bad.message}") from None
    except referencing.exceptions.Unresolvable as ref:
        raise ArgsError.shape(f"the tool's inputSchema refers outside itself: {ref}") from None
    except RecursionError:
        raise ArgsError.shape("the arguments are nested too deeply") from None
    if error is not None:
        raise ArgsError.shape(_said(error))
    return McpArgs(name, canonical(value))


def mismatch(schema_json: str, value: Any) -> str | None:
    """Why `value` does not hold to the schema (its canonical JSON; None: it does), with the
    same validators and the same refusal of remote `$ref`s: a tool's structured result
    against its outputSchema."""
    import referencing.exceptions
    from jsonschema.exceptions import SchemaError, best_match

    try:
        if _holds(schema_json, value):
            return None
        validator = _validator(schema_json)
        if validator.is_valid(value):
            return None
        error = best_match(validator.iter_errors(value))
    except SchemaError as bad:
        return f"the schema is not valid: {bad.message}"
    except referencing.exceptions.Unresolvable as ref:
        return f"the schema refers outside itself: {ref}"
    except RecursionError:
        return "the value is nested too deeply"
    return None if error is None else _said(error)


def _said(error: ValidationError) -> str:
    where = "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def _load(text: str) -> Any:
    try:
        return strict_json.loads(text)
    except strict_json.StrictJsonError as error:
        raise ArgsError.shape(str(error)) from None
