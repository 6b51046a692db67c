"""From the config model's JSON schema to what the API server checks: the structural
OpenAPI v3 schema a CRD takes, and admission-policy validations for the rules the CRD's
own CEL cannot see. Pure: `crd` assembles the files from it."""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from mcpcache.sidecar.config.units import (
    DURATION_PATTERN,
    QUANTITY_PATTERN,
    format_duration,
    format_quantity,
)


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """A model's field docstrings, by field name, read from its source. pydantic can do
    this itself (`use_attribute_docstrings`), but at every import of the model: a quarter
    of the config package's import time, in every sidecar start, for text only the
    generator reads."""
    body = ast.parse(textwrap.dedent(inspect.getsource(model))).body[0]
    assert isinstance(body, ast.ClassDef)
    found = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def _models(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The model and every model its fields hold, by class name (as `$defs` names them)."""
    found: dict[str, type[BaseModel]] = {}

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation.__name__ in found:
                return
            found[annotation.__name__] = annotation
            for field in annotation.model_fields.values():
                visit(field.annotation)
        for argument in typing.get_args(annotation):
            visit(argument)

    visit(model)
    return found


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema (by alias) with each field's docstring as its
    description, where the field has no description of its own."""
    schema = model.model_json_schema(by_alias=True)
    nodes = {name: schema.get("$defs", {}).get(name, {}) for name in _models(model)}
    nodes[model.__name__] = schema
    for name, cls in _models(model).items():
        properties = nodes[name].get("properties", {})
        docs = field_docstrings(cls)
        for field_name, field in cls.model_fields.items():
            text = docs.get(field_name)
            node = properties.get(field.alias or field_name)
            if text and node is not None and "description" not in node:
                node["description"] = text
    return schema


_OVERFLOW = (
    "(^|[a-z])0*([1-9][0-9]{2,}([.][0-9]*)?h|[1-9][0-9]{4,}([.][0-9]*)?m([0-9.]|$)"
    "|[1-9][0-9]{5,}([.][0-9]*)?s|[1-9][0-9]{8,}([.][0-9]*)?ms|[1-9][0-9]{11,}([.][0-9]*)?us"
    "|[1-9][0-9]{14,}([.][0-9]*)?ns)"
)
"""A part of a duration that alone is over 24h (100h, 10000m, 100000s, ...): CEL's
duration() is never handed a number it cannot hold."""


def duration_rules(name: str, above: float, most: float) -> list[dict[str, str]]:
    """A duration string's CEL checks: its syntax, then its bounds (as the model's)."""
    shape = f"self.matches('{DURATION_PATTERN}')"
    low, high = format_duration(above), format_duration(most)
    bounds = f"duration(self) > duration('{low}') && duration(self) <= duration('{high}')"
    return [
        {"rule": shape, "message": f"{name} must be a duration such as 30s, 5m or 1h30m"},
        {
            "rule": f"!{shape} || (!self.matches('{_OVERFLOW}') && {bounds})",
            "message": f"{name} must be more than {low} and at most {high}",
        },
    ]


def _quantity_rules(name: str, least: int) -> list[dict[str, str]]:
    shape = f"self.matches('{QUANTITY_PATTERN}')"
    return [
        {
            "rule": f"type(self) == int || {shape}",
            "message": f"{name} must be a size such as 64Ki, 256Ki or 1Mi (bytes, or a number "
            "with Ki, Mi, Gi, Ti, k, M, G or T)",
        },
        {
            "rule": f"type(self) == int ? self >= {least} : (!{shape} || "
            f"quantity(self).compareTo(quantity('{least}')) >= 0)",
            "message": f"{name} must be at least {least} byte{'s' if least != 1 else ''}",
        },
    ]


def _bounds(node: Mapping[str, Any]) -> tuple[Any, Any]:
    """(exclusive lower, inclusive upper) bounds of a duration, in seconds: pydantic
    writes them as JSON-schema keywords, or under its own names inside an optional."""
    above = node.get("exclusiveMinimum", node.get("gt"))
    most = node.get("maximum", node.get("le"))
    return above, most


def _text(description: str) -> str:
    """A docstring's first paragraph, on one line: the rest is for the code's readers."""
    return " ".join(description.split("\n\n")[0].split())


Place = tuple[tuple[str, str], ...]
"""Where a schema node is: ("field", name), ("items", ""), ("values", "") steps."""
Moved = list[tuple[Place, dict[str, str]]]


def structural(
    node: Mapping[str, Any],
    defs: Mapping[str, Any],
    name: str,
    path: Place = (),
    moved: Moved | None = None,
) -> dict[str, Any]:
    """A pydantic JSON schema as the structural OpenAPI v3 schema a CRD takes: `$ref`s
    inlined, optionals unwrapped, durations and quantities as strings (or int-or-string)
    with CEL checks, unsupported keywords dropped. Every property must have a
    description (a field docstring).

    A union of types (a glob or an object) can only be an untyped node, which the CRD's
    CEL cannot see (nor the fields of an object holding one): the rules of such nodes go
    to `moved`, with their place, for the admission policy."""
    moved = [] if moved is None else moved
    node = _resolved(node, defs)
    if "anyOf" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"{name}: a union of types needs a SchemaHint with its CEL rules")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return structural({**_resolved(branches[0], defs), **rest}, defs, name, path, moved)
    out: dict[str, Any] = {}
    rules: list[dict[str, str]] = []
    kind = node.get("format")
    if node.get("x-kubernetes-preserve-unknown-fields"):
        out["x-kubernetes-preserve-unknown-fields"] = True
    elif kind == "duration":
        out |= {"type": "string", "maxLength": 64}
        above, most = _bounds(node)
        if above is not None or most is not None:
            rules += duration_rules(name, above or 0.0, most)
    elif kind == "quantity":
        out |= {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        }
        rules += _quantity_rules(name, node.get("minimum", 0))
    else:
        out["type"] = node["type"]
        out |= _typed(node, defs, name, rules, path, moved)
    if "description" in node:
        out["description"] = _text(node["description"])
    if node.get("x-server-default"):
        default = node["default"]
        out["default"] = (
            format_duration(default)
            if kind == "duration"
            else format_quantity(default)
            if kind == "quantity"
            else default
        )
    rules += node.get("x-kubernetes-validations", [])
    if rules and _untyped(out, deep=True):
        moved.extend((path, rule) for rule in rules)
    elif rules:
        out["x-kubernetes-validations"] = rules
    return out


def _untyped(node: Mapping[str, Any], deep: bool = False) -> bool:
    """Whether CEL in the CRD cannot type this node (`deep`: or a field it holds)."""
    if node.get("x-kubernetes-preserve-unknown-fields") and "type" not in node:
        return True
    children = [*(node.get("properties") or {}).values()]
    children += [
        node[k] for k in ("items", "additionalProperties") if isinstance(node.get(k), dict)
    ]
    return deep and any(_untyped(child, deep=True) for child in children)


def _resolved(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """A node with its `$ref` (if any) inlined; the node's own keywords win."""
    if "$ref" not in node:
        return dict(node)
    own = {k: v for k, v in node.items() if k != "$ref"}
    return {**defs[node["$ref"].rsplit("/", 1)[-1]], **own}


def _typed(
    node: Mapping[str, Any],
    defs: Mapping[str, Any],
    name: str,
    rules: list[dict[str, str]],
    path: Place,
    moved: Moved,
) -> dict[str, Any]:
    """The keywords of an object, array, string, number or boolean node."""
    out: dict[str, Any] = {}
    kind = node["type"]
    if kind == "object":
        properties = node.get("properties") or {}
        out["properties"] = {}
        for key, child in properties.items():
            if "description" not in child and "$ref" not in child:
                raise ValueError(f"{name}.{key} has no description: give the field a docstring")
            out["properties"][key] = structural(child, defs, key, (*path, ("field", key)), moved)
        if not properties:
            del out["properties"]
        if node.get("required"):
            out["required"] = list(node["required"])
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            out["additionalProperties"] = structural(
                extra, defs, name, (*path, ("values", "")), moved
            )
        if "maxProperties" in node:
            out["maxProperties"] = node["maxProperties"]
    elif kind == "array":
        out["items"] = structural(node["items"], defs, f"{name}[]", (*path, ("items", "")), moved)
        for keyword, limit in (("minItems", "minLength"), ("maxItems", "maxLength")):
            if keyword in node or limit in node:
                out[keyword] = node.get(keyword, node.get(limit))
        if node.get("uniqueItems"):
            out["x-kubernetes-list-type"] = "set"
    elif kind == "string":
        out |= {k: node[k] for k in ("enum", "minLength", "maxLength", "pattern") if k in node}
    elif kind in ("number", "integer"):
        low, high = node.get("minimum"), node.get("maximum")
        if low is not None and high is not None:
            rules.append(
                {
                    "rule": f"self >= {float(low)!r} && self <= {float(high)!r}",
                    "message": f"{name} must be a number from {low:g} to {high:g}",
                }
            )
    return out


def without_checks(node: Any) -> Any:
    """A schema with its CEL rules, defaults and required lists removed: what the
    operator writes into the status it has already checked."""
    if isinstance(node, dict):
        return {
            k: without_checks(v)
            for k, v in node.items()
            if k not in ("x-kubernetes-validations", "default", "required")
        }
    if isinstance(node, list):
        return [without_checks(v) for v in node]
    return node


def _place(path: Place) -> str:
    """`spec.cache.tools[].invalidates[]`, as the docs and messages name a place."""
    text = ""
    for kind, name in path:
        text += {"field": f".{name}", "items": "[]", "values": ".*"}[kind]
    return text.lstrip(".")


def _expression(path: Place, rule: str, base: str = "object", depth: int = 0) -> str:
    """A CEL rule written for a node (`self`) as an admission expression over `base`:
    every node at that place, through optional fields, lists and maps, passes it."""
    if not path:
        return f"[{base}].all(self, {rule})"
    (kind, name), rest = path[0], path[1:]
    if kind == "field":
        return f"(!has({base}.{name}) || {_expression(rest, rule, f'{base}.{name}', depth)})"
    var = f"x{depth}"
    inner = _expression(rest, rule, var if kind == "items" else f"{base}[{var}]", depth + 1)
    return f"{base}.all({var}, {inner})"


def _cel_text(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def validation(path: Place, rule: Mapping[str, str]) -> dict[str, str]:
    """One moved rule as a validation of the policy. Its message says where, and (a
    `messageExpression`, evaluated only on a refusal) names the tool rules at fault:
    `spec.cache.tools[].invalidates[] of rule create_*: an invalidates entry is ...`."""
    place = _place(path)
    validation = {
        "expression": _expression(path, rule["rule"]),
        "message": f"{place}: {rule['message']}",
        "reason": "Invalid",
    }
    lists = [i for i, (kind, _) in enumerate(path) if kind == "items"]
    if lists and all(kind == "field" for kind, _ in path[: lists[0]]):
        listed = "object" + "".join(f".{name}" for _, name in path[: lists[0]])
        inner = _expression(path[lists[0] + 1 :], rule["rule"], "x0", 1)
        names = f"{listed}.filter(x0, !{inner}).map(x0, has(x0.name) ? string(x0.name) : '')"
        validation["messageExpression"] = (
            f"{_cel_text(place + ' of rule ')} + {names}.join(', ') + "
            f"{_cel_text(': ' + rule['message'])}"
        )
    return validation
