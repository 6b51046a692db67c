"""The MCPServer CRD: its coordinates, and its schema generated from the config model.

kubebuilder generates a CRD from the Go types it serves; here the config model does that
job. `spec.cache` is `ServerCache` (the sidecar's own model: field docstrings become the
descriptions `kubectl explain` shows, `SchemaHint`s add what the API server checks
beyond the types) and `status.effectiveTools` follows `ToolRule`; the endpoint, the
status and the printer columns are the resource's own and written here. Run from the
repository's root:

    python -m mcpcache.operator.crd          # writes crds/ and the chart's copy
    python -m mcpcache.operator.crd --check  # exits 1 if either differs

A test runs the check, so a new model field reaches the CRD, its chart copy and the
status without anyone writing it three times.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from mcpcache.sidecar.config import ServerCache, ToolRule
from mcpcache.sidecar.config.units import (
    DURATION_PATTERN,
    QUANTITY_PATTERN,
    format_duration,
    format_quantity,
)

RESOURCE_GROUP: Final = "mcpcache.io"
RESOURCE_VERSION: Final = "v1alpha1"
RESOURCE_KIND: Final = "MCPServer"
RESOURCE_PLURAL: Final = "mcpservers"
API_VERSION: Final = f"{RESOURCE_GROUP}/{RESOURCE_VERSION}"
COLLECTION: Final = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}"
"""The path of the MCPServers' API, which a namespace and the plural follow."""

_FOLDERS: Final = (Path("crds"), Path("charts/mcpcache/crds"))
"""The CRD's folder and the chart's copy of it (Helm installs only what is in the chart;
the upgrade page applies the folder, policy included, before `helm upgrade`)."""
CRD_FILE: Final = "mcpservers.mcpcache.io.yaml"
POLICY_FILE: Final = "mcpservers.mcpcache.io.policy.yaml"

_HEADER = (
    "# Generated from the config model by `python -m mcpcache.operator.crd`: edit\n"
    "# sidecar/config/ (spec.cache) or operator/crd.py (the rest), never this file.\n"
)

_OVERFLOW = (
    "(^|[a-z])0*([1-9][0-9]{2,}([.][0-9]*)?h|[1-9][0-9]{4,}([.][0-9]*)?m([0-9.]|$)"
    "|[1-9][0-9]{5,}([.][0-9]*)?s|[1-9][0-9]{8,}([.][0-9]*)?ms|[1-9][0-9]{11,}([.][0-9]*)?us"
    "|[1-9][0-9]{14,}([.][0-9]*)?ns)"
)
"""A part of a duration that alone is over 24h (100h, 10000m, 100000s, ...): CEL's
duration() is never handed a number it cannot hold."""

_DROPPED: Final = frozenset(
    {"title", "$defs", "additionalProperties", "propertyNames", "default", "x-server-default"}
)
"""JSON-schema keywords a structural schema has no use for, or takes in another form."""


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


Path_ = tuple[tuple[str, str], ...]
"""Where a schema node is: ("field", name), ("items", ""), ("values", "") steps."""
Moved = list[tuple[Path_, dict[str, str]]]


def structural(
    node: Mapping[str, Any],
    defs: Mapping[str, Any],
    name: str,
    path: Path_ = (),
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
    if "$ref" in node:
        node = {
            **defs[node["$ref"].rsplit("/", 1)[-1]],
            **{k: v for k, v in node.items() if k != "$ref"},
        }
    if "anyOf" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) != 1:
            raise ValueError(f"{name}: a union of types needs a SchemaHint with its CEL rules")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        return structural({**structural_input(branches[0], defs), **rest}, defs, name, path, moved)
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


def structural_input(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """A branch of an optional, its `$ref` (if any) resolved."""
    if "$ref" in node:
        return dict(defs[node["$ref"].rsplit("/", 1)[-1]])
    return dict(node)


def _typed(
    node: Mapping[str, Any],
    defs: Mapping[str, Any],
    name: str,
    rules: list[dict[str, str]],
    path: Path_,
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


def _without_checks(node: Any) -> Any:
    """A schema with its CEL rules, defaults and required lists removed: what the
    operator writes into the status it has already checked."""
    if isinstance(node, dict):
        return {
            k: _without_checks(v)
            for k, v in node.items()
            if k not in ("x-kubernetes-validations", "default", "required")
        }
    if isinstance(node, list):
        return [_without_checks(v) for v in node]
    return node


_CACHE_PATH: Final = (("field", "spec"), ("field", "cache"))


def cache_schema(moved: Moved | None = None) -> dict[str, Any]:
    """`spec.cache`, from the config model (`moved` receives the rules the CRD's CEL
    cannot check)."""
    schema = ServerCache.model_json_schema(by_alias=True)
    out = structural(schema, schema.get("$defs", {}), "cache", _CACHE_PATH, moved)
    return {**out, "default": {}}


def _place(path: Path_) -> str:
    """`spec.cache.tools[].invalidates[]`, as the docs and messages name a place."""
    text = ""
    for kind, name in path:
        text += {"field": f".{name}", "items": "[]", "values": ".*"}[kind]
    return text.lstrip(".")


def _expression(path: Path_, rule: str, base: str = "object", depth: int = 0) -> str:
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


def _validation(path: Path_, rule: Mapping[str, str]) -> dict[str, str]:
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


def admission_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy (and its binding) that checks, when an MCPServer is
    applied, what the CRD's own CEL cannot type: CEL still, run by the API server (no
    webhook to be down), on every create and on updates that change the spec (an object
    stored before a rule existed can still be relabelled or deleted)."""
    moved: Moved = []
    cache_schema(moved)
    name = f"{RESOURCE_PLURAL}.{RESOURCE_GROUP}"
    labels = {"app.kubernetes.io/name": "mcpcache"}
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [RESOURCE_GROUP],
                        "apiVersions": [RESOURCE_VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [RESOURCE_PLURAL],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "spec-written",
                    "expression": "request.operation == 'CREATE' || object.spec != oldObject.spec",
                }
            ],
            "validations": [_validation(path, rule) for path, rule in moved],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def effective_tool_schema() -> dict[str, Any]:
    """An item of `status.effectiveTools`: a tool rule as `status.effective_tools`
    writes it, from the same model as the spec's rules."""
    schema = ToolRule.model_json_schema(by_alias=True)
    rule = _without_checks(structural(schema, schema.get("$defs", {}), "tools[]", (), []))
    properties = dict(rule["properties"])
    del properties["enabled"]
    properties["caching"] = {
        "type": "string",
        "enum": ["on", "off", "read-only"],
        "description": "on, off, or read-only (cached once the server lists the tool as "
        "read-only): the rule's enabled and the server's settings, combined.",
    }
    properties["ttl"] = {**properties["ttl"], "description": "The TTL the rule applies."}
    properties["shadowedBy"] = {
        "type": "string",
        "description": "An earlier rule that matches every tool this one does, so this one "
        "never applies.",
    }
    return {
        "type": "object",
        "description": "A tool rule as the sidecars apply it: the server's settings filled in.",
        "properties": properties,
    }


_ENDPOINT: Final = {
    "type": "object",
    "description": "Where the MCP server is reached.",
    "required": ["streamableHTTP"],
    "properties": {
        "streamableHTTP": {
            "type": "object",
            "description": "The server's Streamable HTTP transport (the only one the "
            "sidecar speaks).",
            "required": ["url"],
            "properties": {
                "url": {
                    "type": "string",
                    "description": "The server's MCP Streamable HTTP endpoint.",
                    "maxLength": 2048,
                    "x-kubernetes-validations": [
                        {
                            "rule": "isURL(self) && url(self).getScheme() in ['http', 'https'] "
                            "&& url(self).getHostname() != ''",
                            "message": "must be an absolute http or https URL, e.g. "
                            "http://docs-mcp.tools.svc:8000/mcp",
                        }
                    ],
                },
                "timeout": {
                    "type": "string",
                    "default": "30s",
                    "maxLength": 64,
                    "description": "How long the sidecar waits for each part of the server's "
                    "answer (its headers, then each piece of a stream) before it answers the "
                    "agent with a timeout error, as a duration (30s, 2m); more than 0s, at "
                    "most 1h. Raise it for tools that think for longer than 30s before they "
                    "answer.",
                    "x-kubernetes-validations": duration_rules("timeout", 0.0, 3600.0),
                },
            },
        }
    },
}

REASON_PATTERN: Final = "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
"""metav1.Condition's reason: CamelCase, a word a program can switch on."""

_CONDITION: Final = {
    "type": "object",
    "description": "One aspect of the MCPServer's state, shaped like metav1.Condition.",
    "required": ["type", "status", "lastTransitionTime", "reason", "message"],
    "properties": {
        "type": {
            "type": "string",
            "maxLength": 316,
            "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
            "description": "Ready, MaxSizeClamped or RulesShadowed.",
        },
        "status": {
            "type": "string",
            "enum": ["True", "False", "Unknown"],
            "description": "True, False or Unknown.",
        },
        "reason": {
            "type": "string",
            "minLength": 1,
            "maxLength": 1024,
            "pattern": REASON_PATTERN,
            "description": "Why, as one CamelCase word: Ready: Configured or InvalidSpec; "
            "MaxSizeClamped: AboveCeiling or WithinCeiling; RulesShadowed: "
            "EarlierRuleMatches or AllRulesReachable.",
        },
        "message": {
            "type": "string",
            "maxLength": 32768,
            "description": "What happened, in words (the rule that shadows another, the "
            "clamped size, what is wrong with the spec).",
        },
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "minimum": 0,
            "description": "The generation of the spec the condition was written for.",
        },
        "lastTransitionTime": {
            "type": "string",
            "format": "date-time",
            "description": "When the condition's status last changed.",
        },
    },
}


def status_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "description": "What the operator made of this MCPServer (written by the operator).",
        "properties": {
            "observedGeneration": {
                "type": "integer",
                "format": "int64",
                "description": "The generation of the spec this status describes.",
            },
            "effectiveTTL": {
                "type": "string",
                "description": "The TTL the sidecars apply, as a duration.",
            },
            "effectiveMaxSize": {
                "type": "string",
                "description": "The largest response stored, as a quantity, after clamping to 1Mi.",
            },
            "effectiveTimeout": {
                "type": "string",
                "description": "How long the sidecars wait for each part of the server's "
                "answer, as a duration.",
            },
            "effectiveTools": {
                "type": "array",
                "description": "The tool rules as the sidecars apply them, in order.",
                "items": effective_tool_schema(),
            },
            "lastPurge": {
                "type": "string",
                "description": "The last mcpcache.io/purge value written to the sidecars' "
                "configuration.",
            },
            "conditions": {
                "type": "array",
                "description": "Ready (written to the namespace's ConfigMap), MaxSizeClamped "
                "and RulesShadowed.",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
                "items": _CONDITION,
            },
        },
    }


_COLUMNS: Final = [
    {"name": "URL", "type": "string", "jsonPath": ".spec.endpoint.streamableHTTP.url"},
    {"name": "Cache", "type": "boolean", "jsonPath": ".spec.cache.enabled"},
    {"name": "TTL", "type": "string", "jsonPath": ".status.effectiveTTL"},
    {"name": "Max size", "type": "string", "jsonPath": ".status.effectiveMaxSize"},
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition."""
    spec = {
        "type": "object",
        "description": "What the sidecars of this namespace proxy, and how they cache it.",
        "required": ["endpoint"],
        "properties": {"endpoint": _ENDPOINT, "cache": cache_schema()},
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{RESOURCE_PLURAL}.{RESOURCE_GROUP}",
            "labels": {"app.kubernetes.io/name": "mcpcache"},
        },
        "spec": {
            "group": RESOURCE_GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": RESOURCE_KIND,
                "listKind": f"{RESOURCE_KIND}List",
                "plural": RESOURCE_PLURAL,
                "singular": RESOURCE_KIND.lower(),
                "shortNames": ["mcps"],
                "categories": ["mcpcache"],
            },
            "versions": [
                {
                    "name": RESOURCE_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "An MCP server that mcpcache sidecars in this "
                            "namespace proxy and may cache.",
                            "required": ["spec"],
                            "properties": {"spec": spec, "status": status_schema()},
                        }
                    },
                }
            ],
        },
    }


def _dump(documents: Sequence[Mapping[str, Any]]) -> str:
    return _HEADER + yaml.safe_dump_all(documents, sort_keys=False, width=100, allow_unicode=True)


def render() -> str:
    """The CRD file's text."""
    return _dump([crd()])


def files() -> dict[Path, str]:
    """Every generated file, by its path from the repository's root."""
    policy = _dump(admission_policy())
    return {
        path: text
        for folder in _FOLDERS
        for path, text in ((folder / CRD_FILE, render()), (folder / POLICY_FILE, policy))
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcpcache.operator.crd", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a file differs")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository")
    args = parser.parse_args(argv)
    wanted = files()
    stale = [path for path, text in wanted.items() if _read(args.root / path) != text]
    if args.check:
        for path in stale:
            print(f"{path} differs from the config model: run python -m mcpcache.operator.crd")
        return 1 if stale else 0
    for path in stale:
        (args.root / path).write_text(wanted[path])
        print(f"wrote {path}")
    return 0


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    sys.exit(main())
