"""A quick yes for the JSON Schemas most MCP tools give (SPEC §18.5): objects of typed
properties, some required, perhaps no others, perhaps arrays of typed items.

`compile_check(schema)` turns such a schema into a plain function of a value, or gives None
when the schema uses anything else. The function says True only when draft 2020-12 would
accept the value for certain; False means "not known here", and `jsonschema` then decides,
so every refusal and its message stay `jsonschema`'s. It is only ever given schemas that
`jsonschema` has already checked, and values from strict JSON (dict, list, str, int, float,
bool, None). Why: `jsonschema` spends 15-35 µs on a two-key object, on every MCP call and
again on its structured result (docs/performance.md). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], bool]

#: Keywords that never change whether a value is valid (`format` is an annotation: brokerd's
#: validators have no format checker).
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
     "writeOnly", "format"}
)  # fmt: skip
#: What a value must be, exactly, to be known of a type (an integral float is an "integer"
#: to draft 2020-12; here it is left to `jsonschema`).
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}
_KNOWN = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "items"}


def compile_check(schema: object) -> Check | None:
    """The quick check of `schema`, or None when it uses what this module does not know."""
    if schema is True:
        return _always
    if not isinstance(schema, Mapping) or not _KNOWN.issuperset(schema):
        return None
    checks: list[Check] = []
    if "type" in schema:
        types = _types(schema["type"])
        if types is None:
            return None
        checks.append(lambda value: type(value) in types)
    if any(key in schema for key in ("properties", "required", "additionalProperties")):
        of_object = _object_check(schema)
        if of_object is None:
            return None
        checks.append(of_object)
    if "items" in schema:
        item = compile_check(schema["items"])
        if item is None:
            return None
        checks.append(lambda value: type(value) is not list or all(map(item, value)))
    return _all(checks)


def _always(value: Any) -> bool:
    return True


def _all(checks: list[Check]) -> Check:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


def _types(named: object) -> frozenset[type] | None:
    names = [named] if isinstance(named, str) else named
    if not isinstance(names, list) or not names:
        return None
    found: set[type] = set()
    for name in names:
        if not isinstance(name, str) or name not in _TYPES:
            return None
        found.update(_TYPES[name])
    return frozenset(found)


def _object_check(schema: Mapping[str, Any]) -> Check | None:
    """`properties`, `required` and a boolean `additionalProperties`, which only look at
    objects: anything else passes them."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    others = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(others, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        return None
    each: dict[str, Check] = {}
    for name, sub in properties.items():
        check = compile_check(sub)
        if check is None:
            return None
        each[name] = check
    needed = tuple(required)

    def of_object(value: Any) -> bool:
        if type(value) is not dict:
            return True
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            check = each.get(name)
            if check is None:
                if not others:
                    return False
            elif not check(item):
                return False
        return True

    return of_object
