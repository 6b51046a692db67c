"""The MCPServer CRD as generated from the config model: the committed files are the
generated ones, every field is described, the status follows the rules' model, and what
the operator says of a bad spec is in words, never a validation library's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from mcpcache.operator.crd import REASON_PATTERN, crd, files, main, render
from mcpcache.operator.resource import resolve_server
from mcpcache.operator.schema import model_schema, structural
from mcpcache.operator.status import desired_status, effective_tools
from mcpcache.sidecar.config import Model, ServerCache, ToolRule
from peers.paths import ROOT

URL = "http://docs.tools.svc:8000/mcp"


def test_the_committed_crd_and_its_chart_copy_are_the_generated_ones() -> None:
    for path, text in files().items():
        assert (ROOT / path).read_text() == text, (
            f"{path} drifted from the config model: run `python -m mcpcache.operator.crd`"
        )
    assert main(["--check", "--root", str(ROOT)]) == 0


def properties(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property under `node`, through arrays' items and maps' values."""
    for name, child in (node.get("properties") or {}).items():
        yield f"{path}.{name}", child
        yield from properties(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from properties(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from properties(node["additionalProperties"], f"{path}.*")


def schema() -> dict[str, Any]:
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_every_field_of_the_crd_has_a_description_status_included() -> None:
    found = list(properties(schema(), "mcps"))
    assert len(found) > 50
    undescribed = [path for path, field in found if not field.get("description")]
    assert undescribed == []


def test_every_rule_field_of_the_model_is_in_the_spec_and_the_status() -> None:
    """A new field of `ToolRule` reaches the CRD's rules and `status.effectiveTools`
    with no one writing it there (`enabled` is read into `caching` for the status)."""
    props = schema()["properties"]
    spec_rule = props["spec"]["properties"]["cache"]["properties"]["tools"]["items"]
    status_rule = props["status"]["properties"]["effectiveTools"]["items"]
    aliases = {field.alias or name for name, field in ToolRule.model_fields.items()}
    assert set(spec_rule["properties"]) == aliases
    assert set(status_rule["properties"]) == aliases - {"enabled"} | {"caching", "shadowedBy"}
    cache = {field.alias or name for name, field in ServerCache.model_fields.items()}
    assert set(props["spec"]["properties"]["cache"]["properties"]) == cache


def test_effective_tools_write_every_field_a_rule_sets_as_the_model_writes_it() -> None:
    cache = ServerCache.model_validate(
        {
            "enabled": True,
            "ttl": "90s",
            "tools": [
                {"name": "get_*", "ttl": "5m", "ignoreArguments": ["rid"], "scope": "public"},
                {"name": "get_release", "skipIf": {"version": "latest"}},
                {"name": "create_*", "invalidates": ["get_*", {"tool": "x", "match": ["id"]}]},
            ],
        }
    )
    assert effective_tools(cache) == [
        {
            "name": "get_*",
            "caching": "on",
            "ttl": "5m",
            "ignoreArguments": ["rid"],
            "scope": "public",
        },
        {
            "name": "get_release",
            "caching": "on",
            "ttl": "1m30s",
            "skipIf": {"version": ["latest"]},
            "shadowedBy": "get_*",
        },
        {
            "name": "create_*",
            "caching": "off",
            "ttl": "1m30s",
            "invalidates": ["get_*", {"tool": "x", "match": ["id"]}],
        },
    ]


def condition_schema() -> dict[str, Any]:
    status = schema()["properties"]["status"]
    return status["properties"]["conditions"]["items"]


def test_conditions_have_the_shape_of_metav1_condition() -> None:
    shape = condition_schema()
    assert set(shape["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}
    assert shape["properties"]["reason"]["pattern"] == REASON_PATTERN
    assert shape["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


@pytest.mark.parametrize(
    "cache",
    [
        {"enabled": True, "maxSize": "2Mi", "tools": [{"name": "*"}, {"name": "a"}]},
        {"tools": [{"name": "a", "invalidates": [7]}]},
    ],
)
def test_the_conditions_the_operator_writes_fit_that_shape(cache: dict[str, Any]) -> None:
    spec = {"endpoint": {"streamableHTTP": {"url": URL}}, "cache": cache}
    status = desired_status(resolve_server("docs", spec), 3, None)
    shape = condition_schema()
    for condition in status["conditions"]:
        assert set(shape["required"]) <= set(condition)
        assert re.fullmatch(REASON_PATTERN, condition["reason"])
        assert condition["status"] in shape["properties"]["status"]["enum"]
        assert condition["message"]


INTERNALS = re.compile(
    r"constrained-str|ArgumentMatch|function-(after|before|wrap|plain)|"
    r"\.(bool|int|float|str)\b|\[(bool|int|float|str)\]|tagged-union|union_tag|pydantic"
)
"""What pydantic puts in an error's location or message for a union's members."""


@pytest.mark.parametrize(
    "rule",
    [
        {"name": "a", "invalidates": [""]},
        {"name": "a", "invalidates": [7]},
        {"name": "a", "invalidates": [{"tool": "b"}]},
        {"name": "a", "invalidates": [{"tool": "", "match": ["id"]}]},
        {"name": "a", "invalidates": [{"tool": "b", "match": []}]},
        {"name": "a", "invalidates": [{"tool": "b", "match": ["id"], "extra": 1}]},
        {"name": "a", "invalidates": ["b", "b"]},
        {"name": "a", "skipIf": {"v": {"deep": 1}}},
        {"name": "a", "skipIf": {"v": [[1]]}},
        {"name": "a", "skipIf": {"v": [None]}},
        {"name": "a", "skipIf": {"v": ""}},
        {"name": "a", "skipIf": {"v": []}},
        {"name": "a", "skipIf": {"": "x"}},
        {"name": "a", "invalidates": ["b"], "skipIf": {"v": "latest"}},
        {"name": "a", "enabled": True, "invalidates": ["b"]},
        {"name": "a", "enabled": "yes"},
        {"name": "a", "ttl": 60},
        {"name": "a", "scope": "everyone"},
    ],
)
def test_what_the_operator_says_of_a_bad_rule_is_in_words(rule: dict[str, Any]) -> None:
    spec = {"endpoint": {"streamableHTTP": {"url": URL}}, "cache": {"tools": [rule]}}
    effective = resolve_server("docs", spec)
    assert effective.server is None
    assert effective.error is not None
    assert effective.error.startswith("spec.cache.tools[0]")
    assert not INTERNALS.search(effective.error), effective.error


def test_the_generated_file_reads_as_yaml_and_says_how_it_is_made() -> None:
    text = render()
    assert text.startswith("# Generated from the config model by `python -m mcpcache.operator.crd`")
    assert yaml.safe_load(text) == crd()


class Undocumented(Model):
    documented: bool = False
    """Says what it does."""
    bare: bool = False


class Unhinted(Model):
    either: str | int = 0
    """A union of types with no CEL rules to check it."""


@pytest.mark.parametrize(
    ("model", "complaint"),
    [
        (Undocumented, "bare has no description: give the field a docstring"),
        (Unhinted, "either: a union of types needs a SchemaHint with its CEL rules"),
    ],
)
def test_the_generator_refuses_a_field_it_cannot_describe_or_check(
    model: type[Model], complaint: str
) -> None:
    """What would reach `kubectl explain` as `<empty>`, or be admitted unchecked, stops
    the generation instead."""
    schema = model_schema(model)
    with pytest.raises(ValueError, match=re.escape(complaint)):
        structural(schema, schema.get("$defs", {}), "cache")
