"""Reconciliation: MCPServers in, one ConfigMap per namespace and statuses out."""

from __future__ import annotations

import re

import pytest
import yaml
from kubernetes import client

from peers.clients import http_get
from peers.resources import GROUP, PLURAL, VERSION, configured_servers, mcpserver, new_namespace
from peers.serving import wait_until


@pytest.fixture
def namespace(control_plane, operator) -> str:
    return new_namespace(control_plane, "rec")


@pytest.fixture
def objects(control_plane) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(control_plane.api_client())


@pytest.fixture
def core(control_plane) -> client.CoreV1Api:
    return client.CoreV1Api(control_plane.api_client())


servers = configured_servers


def test_create_update_and_delete_are_reflected_in_the_configmap(namespace, objects, core) -> None:
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("docs", enabled=True, ttl="60s")
    )
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, mcpserver("tickets"))
    found = wait_until(
        lambda: (s := servers(core, namespace)) and len(s) == 2 and s, 30, "both servers"
    )
    assert found["docs"].cache.enabled is True
    assert found["docs"].cache.ttl == 60
    assert found["tickets"].cache.enabled is False

    objects.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "docs", {"spec": {"cache": {"ttl": "5m"}}}
    )
    wait_until(lambda: servers(core, namespace)["docs"].cache.ttl == 300, 30, "the new ttl")

    objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "tickets")
    wait_until(lambda: set(servers(core, namespace)) == {"docs"}, 30, "tickets to go")
    objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "docs")
    wait_until(lambda: servers(core, namespace) == {}, 30, "an empty server list")


def test_a_hand_edit_of_the_configmap_is_put_back_with_a_warning(namespace, objects, core) -> None:
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("docs", enabled=True)
    )
    wait_until(lambda: servers(core, namespace), 30, "the configmap")
    configmap = core.read_namespaced_config_map("mcpcache-servers", namespace, _request_timeout=30)
    assert list(yaml.safe_load(configmap.data["config.yaml"])) == ["servers"]
    assert configmap.metadata.labels["app.kubernetes.io/managed-by"] == "mcpcache-operator"

    edited = yaml.safe_load(configmap.data["config.yaml"])
    edited["servers"][0]["url"] = "http://elsewhere.example/mcp"
    edited["listen"] = {"host": "0.0.0.0", "port": 3500}
    core.patch_namespaced_config_map(
        "mcpcache-servers",
        namespace,
        {"data": {"config.yaml": yaml.safe_dump(edited)}},
        _request_timeout=30,
    )
    wait_until(
        lambda: servers(core, namespace)["docs"].url == "http://docs.tools.svc:8000/mcp",
        30,
        "the repair",
    )

    def reverted() -> list:
        events = core.list_namespaced_event(namespace, _request_timeout=30).items
        return [e for e in events if e.reason == "HandEditReverted"]

    (event,) = wait_until(reverted, 30, "the warning event")
    assert event.type == "Warning"
    assert event.involved_object.kind == "ConfigMap"
    assert event.involved_object.name == "mcpcache-servers"
    assert "key listen" in event.message
    assert "server docs (url)" in event.message
    assert event.source.component == "mcpcache-operator"

    core.delete_namespaced_config_map("mcpcache-servers", namespace, _request_timeout=30)
    wait_until(lambda: set(servers(core, namespace) or {}) == {"docs"}, 30, "the re-creation")


def test_a_configmap_of_that_name_in_a_namespace_without_mcpservers_is_left_alone(
    namespace, core, operator
) -> None:
    body = {"metadata": {"name": "mcpcache-servers"}, "data": {"mine": "yes"}}
    core.create_namespaced_config_map(namespace, body, _request_timeout=30)
    # Its watch is by name, so the operator reconciles the namespace (the gauge says so)...
    wait_until(
        lambda: operator.sample("mcpcache_operator_mcpservers", namespace=namespace) == 0,
        30,
        "the operator to reconcile the namespace",
    )
    # ...and leaves a ConfigMap it never wrote alone.
    found = core.read_namespaced_config_map("mcpcache-servers", namespace, _request_timeout=30)
    assert found.data == {"mine": "yes"}
    assert not found.metadata.labels


def test_status_reports_readiness_generation_and_effective_values(namespace, objects) -> None:
    objects.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        mcpserver("docs", enabled=True, ttl="90s", maxSize="256Ki"),
    )

    def status() -> dict:
        return (
            objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "docs").get(
                "status"
            )
            or {}
        )

    current = wait_until(lambda: (s := status()).get("observedGeneration") and s, 30, "a status")
    ready = next(c for c in current["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Configured")
    assert current["effectiveTTL"] == "1m30s"
    assert current["effectiveMaxSize"] == "256Ki"
    generation = objects.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "docs", {"spec": {"cache": {"ttl": "2m"}}}
    )["metadata"]["generation"]
    wait_until(lambda: status().get("observedGeneration") == generation, 30, "the new generation")
    assert status()["effectiveTTL"] == "2m"


def test_max_size_above_one_mebibyte_is_clamped_with_a_warning(namespace, objects, core) -> None:
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("big", enabled=True, maxSize="8Mi")
    )
    found = wait_until(lambda: servers(core, namespace), 30, "the configmap")
    assert found["big"].cache.max_size == 1 << 20

    def clamp_condition() -> dict | None:
        status = (
            objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "big").get(
                "status"
            )
            or {}
        )
        return next(
            (c for c in status.get("conditions", []) if c["type"] == "MaxSizeClamped"), None
        )

    condition = wait_until(clamp_condition, 30, "the clamp condition")
    assert condition["status"] == "True"
    assert "8Mi" in condition["message"]

    def warnings() -> list:
        events = core.list_namespaced_event(namespace).items
        return [
            e for e in events if e.reason == "MaxSizeClamped" and e.involved_object.name == "big"
        ]

    (event,) = wait_until(warnings, 30, "the warning event")
    assert event.type == "Warning"
    assert "1Mi" in event.message


def test_namespaces_are_separate(control_plane, operator, objects, core) -> None:
    first, second = new_namespace(control_plane, "ten"), new_namespace(control_plane, "ten")
    objects.create_namespaced_custom_object(GROUP, VERSION, first, PLURAL, mcpserver("only-here"))
    wait_until(lambda: servers(core, first), 30, "the first namespace's configmap")
    assert servers(core, second) is None
    there = mcpserver("only-there", url="http://tickets.tools.svc:8000/mcp")
    objects.create_namespaced_custom_object(GROUP, VERSION, second, PLURAL, there)
    wait_until(lambda: servers(core, second), 30, "the second namespace's configmap")
    assert set(servers(core, first)) == {"only-here"}
    assert set(servers(core, second)) == {"only-there"}
    assert servers(core, second)["only-there"].url == "http://tickets.tools.svc:8000/mcp"


def test_operator_metrics_and_health(operator, namespace, objects, core) -> None:
    before = operator.sample("mcpcache_operator_reconciles_total", result="ok")
    errors = operator.sample("mcpcache_operator_reconciles_total", result="error")
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, mcpserver("m"))
    wait_until(lambda: servers(core, namespace), 30, "the configmap")
    wait_until(
        lambda: operator.sample("mcpcache_operator_reconciles_total", result="ok") > before,
        30,
        "the reconcile to be counted",
    )
    assert operator.sample("mcpcache_operator_reconciles_total", result="error") == errors
    assert operator.sample("mcpcache_operator_mcpservers", namespace=namespace) == 1
    for _ in range(3):
        assert http_get(f"http://127.0.0.1:{operator.health_port}/healthz", timeout=5).is_success
    assert "aiohttp.access" not in operator.log_tail(5000), "a probe writes no log line"


def test_kubectl_get_mcps_shows_the_effective_values_of_a_clamped_server(
    control_plane, namespace, objects
) -> None:
    objects.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        mcpserver("docs", enabled=True, ttl="60s", maxSize="256Ki"),
    )
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("big", enabled=True, maxSize="8Mi")
    )

    def rows() -> dict[str, dict[str, str]] | None:
        out = control_plane.run_kubectl("get", "mcps", "-n", namespace).stdout
        header, *lines = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()]
        if any(len(line) != len(header) for line in lines):
            return None  # a column still empty: the status is not written yet
        table = {line[0]: dict(zip(header, line, strict=True)) for line in lines}
        ready = all(row.get("READY") == "True" for row in table.values())
        return table if len(table) == 2 and ready else None

    table = wait_until(rows, 30, "both servers to be ready")
    assert list(table["big"]) == ["NAME", "URL", "CACHE", "TTL", "MAX SIZE", "READY", "AGE"]
    assert {k: table["big"][k] for k in ("CACHE", "TTL", "MAX SIZE")} == {
        "CACHE": "true",
        "TTL": "30s",
        "MAX SIZE": "1Mi",
    }
    assert {k: table["docs"][k] for k in ("CACHE", "TTL", "MAX SIZE")} == {
        "CACHE": "true",
        "TTL": "1m",
        "MAX SIZE": "256Ki",
    }


def events_for(core: client.CoreV1Api, namespace: str, name: str, reason: str) -> list:
    return [
        e
        for e in core.list_namespaced_event(namespace).items
        if e.reason == reason and e.involved_object.name == name
    ]


def status_of(objects: client.CustomObjectsApi, namespace: str, name: str) -> dict:
    found = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    return found.get("status") or {}


def test_a_shadowed_tool_rule_is_a_warning_and_the_rules_in_effect_are_in_status(
    namespace, objects, core
) -> None:
    tools = [
        {"name": "create_*", "invalidates": ["get_*"]},
        {"name": "*", "ttl": "10s"},
        {"name": "get_doc", "ttl": "5m"},
    ]
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("docs", enabled=True, tools=tools)
    )
    found = wait_until(lambda: servers(core, namespace), 30, "the configmap")
    assert [rule.name for rule in found["docs"].cache.tools] == ["create_*", "*", "get_doc"]
    status = wait_until(
        lambda: (s := status_of(objects, namespace, "docs")).get("effectiveTools") and s,
        30,
        "the rules in status",
    )
    assert status["effectiveTools"][0] == {
        "name": "create_*",
        "caching": "off",
        "ttl": "30s",
        "invalidates": ["get_*"],
    }
    assert status["effectiveTools"][2]["shadowedBy"] == "*"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", "a shadowed rule is reported, not refused"
    (event,) = wait_until(
        lambda: events_for(core, namespace, "docs", "RulesShadowed"), 30, "the warning"
    )
    assert event.type == "Warning"
    assert "'get_doc' never applies" in event.message


def test_the_purge_annotation_reaches_the_configmap_status_and_an_event(
    namespace, objects, core
) -> None:
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("docs", enabled=True)
    )
    wait_until(lambda: servers(core, namespace), 30, "the configmap")
    assert servers(core, namespace)["docs"].purge is None
    for value in ("1764547200", "1764547300"):
        objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            "docs",
            {"metadata": {"annotations": {"mcpcache.io/purge": value}}},
        )
        wait_until(lambda v=value: servers(core, namespace)["docs"].purge == v, 30, "the marker")
        wait_until(
            lambda v=value: status_of(objects, namespace, "docs").get("lastPurge") == v,
            30,
            "the purge in status",
        )
    events = wait_until(
        lambda: len(e := events_for(core, namespace, "docs", "PurgePropagated")) == 2 and e,
        30,
        "an event per purge",
    )
    assert {e.type for e in events} == {"Normal"}
    assert any("'1764547300'" in e.message for e in events)
