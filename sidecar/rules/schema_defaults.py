"""The top-level argument defaults of a tool's `inputSchema` that can be read with
certainty, for `fillSchemaDefaults`. Pure.

An omitted argument and its explicit default share an entry only if the server surely
fills that default itself. JSON Schema has many ways to make a `default` conditional or
to put one somewhere else; each of them here means "not certain", and an argument
without a certain default is keyed as sent (no sharing):

- the schema as a whole: not an object with plain `properties`, or any keyword that can
  add to or change them (`$ref`, `allOf`/`anyOf`/`oneOf`/`not`, `if`/`then`/`else`,
  `dependentSchemas`, `patternProperties`, `unevaluatedProperties`, and anything not
  in the short list below): no defaults at all;
- one property: a `$ref` or a combinator anywhere in it, a `default` of another JSON
  type than its `type` says or outside its `enum`/`const`, or the property `required`
  (a default the caller can never omit is a contradiction): that property's default
  is not used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

_SCHEMA_KEYWORDS: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "title",
        "description",
        "$schema",
        "$id",
        "$comment",
        "$defs",
        "definitions",
        "examples",
    }
)
"""Top-level keywords that change no property's default (`$defs` is only reachable by a
`$ref`, which makes the property that uses it uncertain)."""
_UNCERTAIN_IN_PROPERTY: Final = frozenset(
    {
        "$ref",
        "$dynamicRef",
        "$recursiveRef",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
    }
)
_JSON_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}
MAX_DEFAULTS: Final = 64


def certain_defaults(schema: Any) -> dict[str, Any]:
    """The defaults of `schema`'s top-level properties that are certain (see module)."""
    if not isinstance(schema, dict) or not _SCHEMA_KEYWORDS.issuperset(schema):
        return {}
    if schema.get("type", "object") != "object":
        return {}
    properties = schema.get("properties")
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        return {}
    found: dict[str, Any] = {}
    for name, prop in properties.items():
        if len(found) >= MAX_DEFAULTS:
            break
        certain = isinstance(prop, dict) and "default" in prop and name not in required
        if certain and _certain(prop):
            found[name] = prop["default"]
    return found


def _certain(prop: Mapping[str, Any]) -> bool:
    if _mentions_uncertain(prop):
        return False
    default = prop["default"]
    kind = prop.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        allowed = tuple(t for k in kinds for t in _JSON_TYPES.get(str(k), ()))
        if not isinstance(default, allowed):
            return False
        if isinstance(default, bool) and "boolean" not in kinds:
            return False  # a bool is an int to Python, never to JSON Schema
    if "enum" in prop and (not isinstance(prop["enum"], list) or default not in prop["enum"]):
        return False
    return "const" not in prop or prop["const"] == default


def _mentions_uncertain(value: Any, depth: int = 0) -> bool:
    """Whether a `$ref` or a combinator appears anywhere in `value` (deeply nested
    schemas count as uncertain too)."""
    if depth > 16:
        return True
    if isinstance(value, dict):
        if not _UNCERTAIN_IN_PROPERTY.isdisjoint(value):
            return True
        return any(_mentions_uncertain(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_mentions_uncertain(v, depth + 1) for v in value)
    return False
