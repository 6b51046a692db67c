"""From MCPServer spec to sidecar configuration and status, without an API server."""

from __future__ import annotations

import hashlib

import yaml

from mcpcache.operator.configmap import (
    configmap_body,
    configmap_of,
    hand_edits,
    is_managed,
    render_config,
)
from mcpcache.operator.resource import PURGE_ANNOTATION, resolve_server
from mcpcache.operator.status import desired_status, same_status
from mcpcache.sidecar.config import Server, dump_servers, parse_servers_file

SPEC = {
    "endpoint": {"streamableHTTP": {"url": "http://docs.tools.svc:8000/mcp"}},
    "cache": {"enabled": True, "ttl": "60s", "maxSize": "256Ki"},
}


def test_the_configmap_holds_the_servers_in_the_sidecars_own_format() -> None:
    effective = resolve_server("docs", SPEC)
    assert effective.server is not None
    text = render_config([effective.server])
    assert list(yaml.safe_load(text)) == ["servers"], "nothing but servers"
    config = parse_servers_file(text, environ={})
    server = config.server("docs")
    assert server is not None
    assert (server.cache.enabled, server.cache.ttl, server.cache.max_size) == (True, 60, 256 << 10)


def test_max_size_above_the_ceiling_is_clamped_and_reported() -> None:
    spec = {**SPEC, "cache": {**SPEC["cache"], "maxSize": "8Mi"}}
    effective = resolve_server("docs", spec)
    assert effective.server is not None
    assert effective.server.cache.max_size == 1 << 20
    assert effective.clamped_from == "8Mi"
    status = desired_status(effective, 3, None)
    clamp = next(c for c in status["conditions"] if c["type"] == "MaxSizeClamped")
    assert clamp["status"] == "True"
    assert "8Mi" in clamp["message"]
    assert status["effectiveMaxSize"] == "1Mi"
    assert status["observedGeneration"] == 3


def test_an_empty_list_is_still_a_valid_config() -> None:
    assert parse_servers_file(render_config([]), environ={}).servers == ()


def test_a_hand_edit_is_told_apart_from_a_change_of_mcpservers() -> None:
    docs = resolve_server("docs", SPEC).server
    assert docs is not None
    written = configmap_body("ns", [docs])
    data, labels = written["data"], written["metadata"]["labels"]
    annotations = written["metadata"]["annotations"]
    # The MCPServers changed since: the operator's own content is not an edit.
    assert hand_edits(data, labels, annotations, render_config([])) == []

    evil = {"servers": [{"name": "docs", "url": "http://evil.example/mcp"}], "listen": {}}
    edited = {"config.yaml": yaml.safe_dump(evil), "extra": "x"}
    assert hand_edits(edited, {}, annotations, data["config.yaml"]) == [
        "label app.kubernetes.io/managed-by",
        "data key extra",
        "key listen",
        "server docs (cache, timeout, url)",
    ]


def test_status_comparison_ignores_transition_times_only() -> None:
    effective = resolve_server("docs", SPEC)
    first = desired_status(effective, 1, None)
    again = desired_status(effective, 1, first)
    assert same_status(first, again)
    assert (
        again["conditions"][0]["lastTransitionTime"] == first["conditions"][0]["lastTransitionTime"]
    )
    assert not same_status(first, desired_status(effective, 2, first))


RULES = [
    {"name": "search_*", "ttl": "5m", "ignoreArguments": ["requestId"]},
    {"name": "create_*", "invalidates": ["search_*", "get_*"]},
    {"name": "*", "enabled": False},
    {"name": "get_doc", "enabled": True},
]


def test_tool_rules_reach_the_configmap_and_status_shows_them_in_effect() -> None:
    spec = {**SPEC, "cache": {**SPEC["cache"], "onlyReadOnlyTools": True, "tools": RULES}}
    effective = resolve_server("docs", spec)
    assert effective.server is not None
    server = parse_servers_file(render_config([effective.server]), environ={}).server("docs")
    assert server is not None
    assert server.cache == effective.server.cache
    assert server.cache.rule_for("search_docs").ignore_arguments == ("requestId",)
    status = desired_status(effective, 1, None)
    assert status["effectiveTools"] == [
        {"name": "search_*", "caching": "read-only", "ttl": "5m", "ignoreArguments": ["requestId"]},
        {"name": "create_*", "caching": "off", "ttl": "1m", "invalidates": ["search_*", "get_*"]},
        {"name": "*", "caching": "off", "ttl": "1m"},
        {"name": "get_doc", "caching": "on", "ttl": "1m", "shadowedBy": "*"},
    ]


def test_argument_rules_and_public_scope_reach_the_configmap_and_status() -> None:
    rules = [
        {"name": "get_release", "skipIf": {"version": "latest"}},
        {"name": "search_*", "scope": "public"},
        {"name": "create_issue", "invalidates": ["x", {"tool": "list_issues", "match": ["repo"]}]},
    ]
    cache = {**SPEC["cache"], "fillSchemaDefaults": True, "trustPublicHints": True, "tools": rules}
    effective = resolve_server("docs", {**SPEC, "cache": cache})
    assert effective.server is not None
    server = parse_servers_file(render_config([effective.server]), environ={}).server("docs")
    assert server is not None
    assert server.cache == effective.server.cache
    assert server.cache.fill_schema_defaults
    assert server.cache.trust_public_hints
    assert server.cache.matched_arguments("list_issues") == ("repo",)
    tools = desired_status(effective, 1, None)["effectiveTools"]
    assert tools[0]["skipIf"] == {"version": ["latest"]}
    assert tools[1]["scope"] == "public"
    assert "scope" not in tools[0], "private, the default, goes unsaid"
    assert tools[2]["invalidates"] == ["x", {"tool": "list_issues", "match": ["repo"]}]


def test_a_rule_behind_an_earlier_catch_all_is_reported_not_refused() -> None:
    spec = {**SPEC, "cache": {**SPEC["cache"], "tools": RULES}}
    effective = resolve_server("docs", spec)
    assert effective.server is not None
    assert effective.shadowed == (("get_doc", "*"),)
    condition = next(
        c for c in desired_status(effective, 2, None)["conditions"] if c["type"] == "RulesShadowed"
    )
    assert condition["status"] == "True"
    assert "'get_doc' never applies" in condition["message"]
    plain = desired_status(resolve_server("docs", SPEC), 2, None)
    assert {c["type"]: c["status"] for c in plain["conditions"]}["RulesShadowed"] == "False"
    assert "effectiveTools" not in plain


def test_an_invalid_rule_makes_the_server_not_ready_with_the_reason() -> None:
    rule = {"name": "create", "enabled": True, "invalidates": ["get"]}
    effective = resolve_server("docs", {**SPEC, "cache": {"tools": [rule]}})
    assert effective.server is None
    assert effective.error is not None
    assert "spec.cache.tools[0]: " in effective.error
    assert "cannot be cached" in effective.error


def test_the_purge_annotation_becomes_the_servers_purge_marker() -> None:
    assert resolve_server("docs", SPEC).server.purge is None  # type: ignore[union-attr]
    annotated = resolve_server("docs", SPEC, {PURGE_ANNOTATION: "1764547200"})
    assert annotated.server is not None
    assert annotated.server.purge == "1764547200"
    assert desired_status(annotated, 1, None)["lastPurge"] == "1764547200"
    long = resolve_server("docs", SPEC, {PURGE_ANNOTATION: "x" * 5000}).server
    longer = resolve_server("docs", SPEC, {PURGE_ANNOTATION: "x" * 5001}).server
    assert long is not None
    assert longer is not None
    assert (long.purge or "").startswith("sha256:")
    assert long.purge != longer.purge
    # Removing the annotation later keeps the last purge on record.
    status = desired_status(resolve_server("docs", SPEC), 2, {"lastPurge": "1764547200"})
    assert status["lastPurge"] == "1764547200"


def test_stale_windows_and_metadata_ttl_reach_the_sidecar() -> None:
    cache = {
        **SPEC["cache"],
        "metadataTTL": "5m",
        "staleIfError": "10m",
        "staleWhileRevalidate": "30s",
    }
    effective = resolve_server("docs", {**SPEC, "cache": cache})
    assert effective.server is not None
    server = parse_servers_file(render_config([effective.server]), environ={}).server("docs")
    assert server is not None
    assert server.cache.metadata_ttl == 300
    assert (server.cache.stale_if_error, server.cache.stale_while_revalidate) == (600, 30)


def test_identity_and_ignored_headers_reach_the_sidecar() -> None:
    cache = {
        **SPEC["cache"],
        "identityHeaders": ["Authorization", "X-Tenant"],
        "ignoreHeaders": ["X-Request-Id"],
    }
    effective = resolve_server("docs", {**SPEC, "cache": cache})
    assert effective.server is not None
    server = parse_servers_file(render_config([effective.server]), environ={}).server("docs")
    assert server is not None
    assert server.cache.identity_headers == ("authorization", "x-tenant")
    assert server.cache.ignore_headers == ("x-request-id",)


def test_ignoring_an_identity_header_makes_the_server_not_ready_with_the_reason() -> None:
    cache = {**SPEC["cache"], "identityHeaders": ["x-tenant"], "ignoreHeaders": ["X-Tenant"]}
    effective = resolve_server("docs", {**SPEC, "cache": cache})
    assert effective.server is None
    assert effective.error is not None
    assert "ignoreHeaders cannot name x-tenant" in effective.error


def servers(*names: str) -> list[Server]:
    found = [resolve_server(name, SPEC).server for name in names]
    assert all(found)
    return found  # type: ignore[return-value]


def test_the_configmap_text_is_the_sidecars_own_dump_ordered_by_name() -> None:
    """libyaml's emitter (when installed) writes exactly what the config model's dump does."""
    text = render_config(servers("zeta", "alpha", "mid"))
    assert text == dump_servers(tuple(servers("alpha", "mid", "zeta")))
    assert [s["name"] for s in yaml.safe_load(text)["servers"]] == ["alpha", "mid", "zeta"]
    assert text.index("name: alpha") < text.index("url:"), "fields in the model's order"


def test_the_configmap_is_named_labelled_and_carries_its_digest() -> None:
    text = render_config(servers("docs"))
    assert configmap_body("agents", servers("docs")) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "mcpcache-servers",
            "namespace": "agents",
            "labels": {"app.kubernetes.io/managed-by": "mcpcache-operator"},
            "annotations": {"mcpcache.io/config-sha256": hashlib.sha256(text.encode()).hexdigest()},
        },
        "data": {"config.yaml": text},
    }
    assert configmap_of("agents", text, "known")["metadata"]["annotations"] == {
        "mcpcache.io/config-sha256": "known"
    }


def test_only_the_operators_label_marks_a_configmap_as_managed() -> None:
    assert is_managed({"app.kubernetes.io/managed-by": "mcpcache-operator", "x": "y"})
    assert not is_managed({"app.kubernetes.io/managed-by": "someone"})
    assert not is_managed({})
    assert not is_managed(None)


def test_every_kind_of_hand_edit_is_named() -> None:
    desired = render_config(servers("docs", "gone"))
    managed = {"app.kubernetes.io/managed-by": "mcpcache-operator"}
    annotations = {"mcpcache.io/config-sha256": "not-this-text"}

    def edits(text: str | None) -> list[str]:
        data = None if text is None else {"config.yaml": text}
        return hand_edits(data, managed, annotations, desired)

    assert hand_edits(None, None, None, desired) == [
        "label app.kubernetes.io/managed-by",
        "data key config.yaml (removed)",
    ]
    assert edits("servers: [") == ["config.yaml (not valid YAML)"]
    assert edits("[1, 2]") == ["config.yaml (not a mapping)"]
    assert edits("servers: [1]") == ["servers (not a list of servers)"]
    assert edits("servers: {}\nlisten: {}") == ["key listen", "servers (not a list of servers)"]
    added = {"servers": [*yaml.safe_load(desired)["servers"], {"name": "new", "url": "http://x"}]}
    assert edits(yaml.safe_dump(added)) == ["server new (added)"]
    fewer = {"servers": yaml.safe_load(desired)["servers"][:1]}
    assert edits(yaml.safe_dump(fewer)) == ["server gone (removed)"]
    assert edits(yaml.safe_dump(yaml.safe_load(desired), indent=4)) == ["config.yaml (reformatted)"]
    assert hand_edits({"config.yaml": "x"}, managed, {}, desired) == [], (
        "no digest: not ours to judge"
    )
