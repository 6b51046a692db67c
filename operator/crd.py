"""The MCPServer CRD: its coordinates, and its schema generated from the config model.

kubebuilder generates a CRD from the Go types it serves; here the config model does that
job. `spec.cache` is `ServerCache` (the sidecar's own model: field docstrings become the
descriptions `kubectl explain` shows, `SchemaHint`s add what the API server checks
beyond the types; `schema` translates) and `status.effectiveTools` follows `ToolRule`;
the endpoint, the status and the printer columns are the resource's own and written
here. What the CRD's CEL cannot check goes to an admission policy written beside it.
Run from the repository's root:

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

from .schema import (
    Moved,
    duration_rules,
    model_schema,
    structural,
    validation,
    without_checks,
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

_CACHE_PATH: Final = (("field", "spec"), ("field", "cache"))


def cache_schema(moved: Moved | None = None) -> dict[str, Any]:
    """`spec.cache`, from the config model (`moved` receives the rules the CRD's CEL
    cannot check)."""
    schema = model_schema(ServerCache)
    out = structural(schema, schema.get("$defs", {}), "cache", _CACHE_PATH, moved)
    return {**out, "default": {}}


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
            "validations": [validation(path, rule) for path, rule in moved],
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
    schema = model_schema(ToolRule)
    rule = without_checks(structural(schema, schema.get("$defs", {}), "tools[]", (), []))
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
