"""The pod mutation, as a pure function of the pod and the operator's settings."""

from __future__ import annotations

import copy
import importlib.metadata
import re

import pytest
from opentelemetry.sdk.resources import Resource

from mcpcache.operator.injection import (
    InjectionRefused,
    app_id_of,
    injected_annotations,
    plan_injection,
    wants_sidecar,
)
from mcpcache.operator.settings import OperatorSettings
from mcpcache.sidecar.config import parse_config
from mcpcache.sidecar.config.tracing import Tracing

SETTINGS = OperatorSettings(sidecar_image="example/mcpcache:test")


def pod(annotations: dict[str, str] | None = None, **spec: object) -> dict:
    return {
        "metadata": {"name": "p", "annotations": annotations or {}},
        "spec": {"containers": [{"name": "agent", "image": "agent:1"}], **spec},
    }


def test_pods_labelled_or_annotated_true_want_the_sidecar() -> None:
    labelled = pod()
    labelled["metadata"]["labels"] = {"mcpcache.io/inject": "true"}
    assert wants_sidecar(labelled)
    assert wants_sidecar(pod({"mcpcache.io/inject": "true"}))
    assert not wants_sidecar(pod({"mcpcache.io/inject": "yes"}))
    assert not wants_sidecar(pod())


def test_app_id_comes_from_the_annotation_then_the_service_account() -> None:
    assert app_id_of(pod({"mcpcache.io/app-id": "checkout"}, serviceAccountName="sa")) == "checkout"
    assert app_id_of(pod(serviceAccountName="sa")) == "sa"
    assert app_id_of(pod()) == "default"
    with pytest.raises(InjectionRefused, match="not a valid app id"):
        app_id_of(pod({"mcpcache.io/app-id": "has spaces"}))


def test_the_sidecar_is_a_native_sidecar_with_a_hardened_container() -> None:
    plan = plan_injection(pod({"mcpcache.io/app-id": "checkout"}), SETTINGS)
    assert plan is not None
    (sidecar,) = plan["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert sidecar["image"] == "example/mcpcache:test"
    assert {"name": "MCPCACHE_APP_ID", "value": "checkout"} in sidecar["env"]
    security = sidecar["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["args"][:3] == ["sidecar", "--servers-file", "/etc/mcpcache/config.yaml"]
    assert plan["volumes"] == [
        {"name": "mcpcache-config", "configMap": {"name": "mcpcache-servers", "optional": True}},
        {"name": "mcpcache-no-token", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}},
    ]
    assert {
        "name": "mcpcache-no-token",
        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        "readOnly": True,
    } in sidecar["volumeMounts"]
    assert plan["containers"][0]["env"] == [
        {"name": "MCPCACHE_URL", "value": "http://localhost:3500/mcp"}
    ]


def test_the_operators_cache_budget_reaches_the_sidecar() -> None:
    settings = OperatorSettings.from_environment(
        {"MCPCACHE_SIDECAR_CACHE_MAX_ENTRIES": "300", "MCPCACHE_SIDECAR_CACHE_MAX_BYTES": "32Mi"}
    )
    plan = plan_injection(pod(), settings)
    assert plan is not None
    env = {e["name"]: e.get("value") for e in plan["initContainers"][0]["env"]}
    assert env["MCPCACHE_CACHE_MAX_ENTRIES"] == "300"
    assert env["MCPCACHE_CACHE_MAX_BYTES"] == "32Mi"


POD_FIELDS = {
    "metadata.name": "agent-7d9f",
    "metadata.uid": "0b6f1c2e-5d1a-4c3b-9e0f-2a7b8c9d0e1f",
    "spec.nodeName": "node-3",
    "status.podIP": "10.0.0.7",
}


def resolved_env(container: dict, namespace: str, secret: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet would resolve it in `namespace`:
    the downward API's fields, the Secret's keys, and `$(VAR)` references to variables
    defined before."""
    env: dict[str, str] = {}
    for item in container["env"]:
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                lambda m: env.get(m[1], m[0]),
                item["value"],
            )
        elif "fieldRef" in source:
            fields = {"metadata.namespace": namespace, **POD_FIELDS}
            env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        elif (key := source["secretKeyRef"]["key"]) in secret:
            assert source["secretKeyRef"]["optional"] is True
            env[item["name"]] = secret[key]
    return env


def test_the_shared_cache_reaches_the_sidecars_of_the_chosen_namespaces() -> None:
    settings = OperatorSettings.from_environment(
        {
            "MCPCACHE_SIDECAR_SHARED_CACHE_URL": "rediss://redis.cache.svc:6380/0",
            "MCPCACHE_SIDECAR_SHARED_CACHE_TIMEOUT": "30ms",
            "MCPCACHE_SIDECAR_SHARED_CACHE_NAMESPACES": "agents, tools",
            "MCPCACHE_SIDECAR_SHARED_CACHE_SECRET": "mcpcache-redis",
        }
    )
    plan = plan_injection(pod(), settings)
    assert plan is not None
    (sidecar,) = plan["initContainers"]
    secret = {"username": "mcpcache-agents", "password": "s3cret"}
    env = resolved_env(sidecar, "agents", secret)
    assert env["MCPCACHE_SHARED_CACHE_PASSWORD"] == "s3cret"
    # What the sidecar makes of it: its own config model reads the same variables.
    shared = parse_config("servers: []", env).shared_cache
    assert shared is not None
    assert (shared.url, shared.timeout, shared.namespace) == (
        "rediss://redis.cache.svc:6380/0",
        0.03,
        "agents",
    )
    elsewhere = resolved_env(sidecar, "billing", secret)
    assert parse_config("servers: []", elsewhere).shared_cache is None


def test_the_sidecars_ports_are_its_own_whatever_services_the_namespace_has() -> None:
    """The kubelet adds MCPCACHE_METRICS_PORT=tcp://10.96.0.9:9090 to a pod in a
    namespace with a Service named mcpcache-metrics; a container's own variable wins."""
    plan = plan_injection(pod(), SETTINGS)
    assert plan is not None
    (sidecar,) = plan["initContainers"]
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert (env["MCPCACHE_LISTEN_PORT"], env["MCPCACHE_METRICS_PORT"]) == ("3500", "9090")
    links = {"MCPCACHE_METRICS_PORT": "tcp://10.96.0.9:9090"}
    resolved = links | resolved_env(sidecar, "agents", {})
    config = parse_config("servers: []", resolved)
    assert (config.listen.port, config.metrics.port) == (3500, 9090)


@pytest.mark.parametrize(
    ("settings", "mode", "urls"),
    [
        (
            {"MCPCACHE_SIDECAR_SHARED_CACHE_CLUSTER_NODES": "redis://a:6379,redis://b:6379"},
            "cluster",
            ("redis://a:6379", "redis://b:6379"),
        ),
        (
            {
                "MCPCACHE_SIDECAR_SHARED_CACHE_SENTINEL_NODES": "redis://s:26379",
                "MCPCACHE_SIDECAR_SHARED_CACHE_SENTINEL_MASTER": "cache",
            },
            "sentinel",
            ("redis://s:26379",),
        ),
    ],
)
def test_a_cluster_or_sentinels_reach_the_sidecars_as_they_were_given(
    settings: dict[str, str], mode: str, urls: tuple[str, ...]
) -> None:
    plan = plan_injection(pod(), OperatorSettings.from_environment(settings))
    assert plan is not None
    (sidecar,) = plan["initContainers"]
    shared = parse_config("servers: []", resolved_env(sidecar, "agents", {})).shared_cache
    assert shared is not None
    assert (shared.mode, shared.urls, shared.namespace) == (mode, urls, "agents")


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        (
            {
                "MCPCACHE_SIDECAR_SHARED_CACHE_URL": "redis://r:6379",
                "MCPCACHE_SIDECAR_SHARED_CACHE_CLUSTER_NODES": "redis://a:6379",
            },
            "at most one of url, cluster or sentinel \\(found url and cluster\\)",
        ),
        ({"MCPCACHE_SIDECAR_SHARED_CACHE_SENTINEL_NODES": "redis://s:26379"}, "master"),
    ],
)
def test_the_operator_refuses_two_places_for_redis_at_start_up(
    settings: dict[str, str], complaint: str
) -> None:
    with pytest.raises(ValueError, match=complaint):
        OperatorSettings.from_environment(settings)


def test_without_a_shared_cache_the_sidecar_has_no_redis_settings() -> None:
    plan = plan_injection(pod(), SETTINGS)
    assert plan is not None
    names = {e["name"] for e in plan["initContainers"][0]["env"]}
    assert not any("SHARED" in name or name == "MCPCACHE_NAMESPACE" for name in names)


TRACING = OperatorSettings.from_environment(
    {
        "MCPCACHE_SIDECAR_TRACING_ENABLED": "true",
        "MCPCACHE_SIDECAR_TRACING_ENDPOINT": "http://otel-collector.observability:4318",
        "MCPCACHE_SIDECAR_TRACING_SAMPLE_RATIO": "0.25",
    }
)


def traced_env(annotations: dict[str, str], settings: OperatorSettings) -> dict[str, str]:
    plan = plan_injection(pod(annotations), settings)
    assert plan is not None
    return resolved_env(plan["initContainers"][0], "agents", {})


def test_without_tracing_the_sidecar_has_no_opentelemetry_settings() -> None:
    env = traced_env({}, SETTINGS)
    assert [name for name in env if "OTEL" in name or "TRACING" in name] == []
    assert not Tracing().active(env)


def test_the_operators_tracing_reaches_the_sidecar_with_the_pods_identity(monkeypatch) -> None:
    env = traced_env({}, TRACING)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    # What the sidecar makes of it: its own config model and the SDK read these variables.
    assert Tracing().active(env)
    assert Tracing().ratio(env) == 0.25
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    resource = Resource.create({}).attributes
    assert resource["service.name"] == "mcpcache-sidecar"
    assert {key: resource[key] for key in resource if key.startswith("k8s.")} == {
        "k8s.pod.name": "agent-7d9f",
        "k8s.pod.uid": "0b6f1c2e-5d1a-4c3b-9e0f-2a7b8c9d0e1f",
        "k8s.namespace.name": "agents",
        "k8s.node.name": "node-3",
        "k8s.container.name": "mcpcache",
    }


def test_a_pod_chooses_its_own_collector_and_sample_ratio() -> None:
    chosen = {
        "mcpcache.io/tracing-endpoint": "https://collector.team-a:4318/otlp",
        "mcpcache.io/tracing-sample-ratio": "0.05",
    }
    for settings in (SETTINGS, TRACING):  # an endpoint turns tracing on by itself
        env = traced_env(chosen, settings)
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "https://collector.team-a:4318/otlp"
        assert Tracing().ratio(env) == 0.05
    only_ratio = traced_env({"mcpcache.io/tracing-sample-ratio": "1"}, TRACING)
    assert only_ratio["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert Tracing().ratio(only_ratio) == 1.0


def test_a_pod_turns_tracing_on_or_off_whatever_the_operator_says() -> None:
    on = traced_env({"mcpcache.io/tracing": "true"}, SETTINGS)
    assert on["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://localhost:4318", "a collector in the pod"
    assert Tracing().ratio(on) == 1.0
    off = traced_env({"mcpcache.io/tracing": "false"}, TRACING)
    assert [name for name in off if "OTEL" in name or "TRACING" in name] == []


def test_the_operator_refuses_a_bad_collector_url_at_start_up() -> None:
    with pytest.raises(ValueError, match="TRACING_ENDPOINT") as refused:
        OperatorSettings.from_environment({"MCPCACHE_SIDECAR_TRACING_ENDPOINT": "otel:4318"})
    assert str(refused.value) == (
        "MCPCACHE_SIDECAR_TRACING_ENDPOINT: 'otel:4318' is not allowed: use an http:// or "
        "https:// URL, e.g. http://otel-collector.observability:4318"
    )


def test_an_injected_pod_is_left_alone() -> None:
    plan = plan_injection(pod(), SETTINGS)
    assert plan is not None
    again = pod(initContainers=plan["initContainers"], volumes=plan["volumes"])
    assert plan_injection(again, SETTINGS) is None


def test_an_explicit_url_variable_is_kept() -> None:
    spec_pod = pod()
    spec_pod["spec"]["containers"][0]["env"] = [{"name": "MCPCACHE_URL", "value": "http://x"}]
    plan = plan_injection(spec_pod, SETTINGS)
    assert plan is not None
    assert plan["containers"][0]["env"] == [{"name": "MCPCACHE_URL", "value": "http://x"}]


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        (
            {"containers": [{"name": "a", "ports": [{"containerPort": 3600}]}]},
            "container 'a' uses that port",
        ),
        ({"containers": [{"name": "mcpcache"}]}, "already named 'mcpcache'"),
        ({"volumes": [{"name": "mcpcache-config", "emptyDir": {}}]}, "volume is already named"),
        ({"volumes": [{"name": "mcpcache-no-token", "emptyDir": {}}]}, "volume is already named"),
        ({"hostNetwork": True}, "the pod uses hostNetwork"),
    ],
)
def test_pods_that_cannot_take_the_sidecar_are_refused(spec: dict, complaint: str) -> None:
    with pytest.raises(InjectionRefused, match=complaint):
        plan_injection(pod({"mcpcache.io/proxy-port": "3600"}, **spec), SETTINGS)


FULL_SETTINGS = OperatorSettings(
    sidecar_image="example/mcpcache:test",
    sidecar_log_level="DEBUG",
    sidecar_cache_max_entries=500,
    sidecar_cache_max_bytes="32Mi",
    sidecar_shared_cache_url="redis://r:6379/0",
    sidecar_shared_cache_timeout="30ms",
    sidecar_shared_cache_namespaces=("agents", "tools"),
    sidecar_shared_cache_secret="sec",
    sidecar_resources={"requests": {"cpu": "10m"}},
    sidecar_tracing_enabled=True,
    sidecar_tracing_endpoint="http://otel:4318",
    sidecar_tracing_sample_ratio=0.5,
)
FULL_POD = {
    "metadata": {"name": "p", "annotations": {"mcpcache.io/app-id": "checkout"}},
    "spec": {
        "serviceAccountName": "sa",
        "initContainers": [{"name": "setup", "ports": [{"containerPort": 80}]}],
        "containers": [
            {
                "name": "agent",
                "env": [{"name": "A", "value": "1"}],
                "ports": [{"containerPort": 81}],
            },
            {"name": "helper"},
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
    },
}


def field(path: str) -> dict:
    return {"fieldRef": {"fieldPath": path}}


def secret_key(key: str) -> dict:
    return {"secretKeyRef": {"name": "sec", "key": key, "optional": True}}


def test_the_whole_plan_for_a_pod_with_every_setting() -> None:
    """Every field of the injected container, its volumes and the app containers' URL."""
    original = copy.deepcopy(FULL_POD)
    plan = plan_injection(FULL_POD, FULL_SETTINGS)
    url = {"name": "MCPCACHE_URL", "value": "http://localhost:3500/mcp"}
    assert plan == {
        "initContainers": [
            {"name": "setup", "ports": [{"containerPort": 80}]},
            {
                "name": "mcpcache",
                "image": "example/mcpcache:test",
                "imagePullPolicy": "IfNotPresent",
                "restartPolicy": "Always",
                "args": [
                    "sidecar",
                    "--servers-file",
                    "/etc/mcpcache/config.yaml",
                    "--allow-missing-config",
                    "--log-level",
                    "DEBUG",
                ],
                "env": [
                    {"name": "MCPCACHE_APP_ID", "value": "checkout"},
                    {"name": "MCPCACHE_METRICS_HOST", "valueFrom": field("status.podIP")},
                    {"name": "MCPCACHE_LISTEN_PORT", "value": "3500"},
                    {"name": "MCPCACHE_METRICS_PORT", "value": "9090"},
                    {"name": "MCPCACHE_CACHE_MAX_ENTRIES", "value": "500"},
                    {"name": "MCPCACHE_CACHE_MAX_BYTES", "value": "32Mi"},
                    {"name": "MCPCACHE_SHARED_CACHE_URL", "value": "redis://r:6379/0"},
                    {"name": "MCPCACHE_NAMESPACE", "valueFrom": field("metadata.namespace")},
                    {"name": "MCPCACHE_SHARED_CACHE_TIMEOUT", "value": "30ms"},
                    {"name": "MCPCACHE_SHARED_CACHE_NAMESPACES", "value": "agents,tools"},
                    {"name": "MCPCACHE_SHARED_CACHE_USERNAME", "valueFrom": secret_key("username")},
                    {"name": "MCPCACHE_SHARED_CACHE_PASSWORD", "valueFrom": secret_key("password")},
                    {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel:4318"},
                    {"name": "MCPCACHE_TRACING_SAMPLE_RATIO", "value": "0.5"},
                    {"name": "OTEL_SERVICE_NAME", "value": "mcpcache-sidecar"},
                    {
                        "name": "OTEL_RESOURCE_ATTRIBUTES_POD_NAME",
                        "valueFrom": field("metadata.name"),
                    },
                    {
                        "name": "OTEL_RESOURCE_ATTRIBUTES_POD_UID",
                        "valueFrom": field("metadata.uid"),
                    },
                    {
                        "name": "OTEL_RESOURCE_ATTRIBUTES_NAMESPACE_NAME",
                        "valueFrom": field("metadata.namespace"),
                    },
                    {
                        "name": "OTEL_RESOURCE_ATTRIBUTES_NODE_NAME",
                        "valueFrom": field("spec.nodeName"),
                    },
                    {
                        "name": "OTEL_RESOURCE_ATTRIBUTES",
                        "value": "k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME),"
                        "k8s.pod.uid=$(OTEL_RESOURCE_ATTRIBUTES_POD_UID),"
                        "k8s.namespace.name=$(OTEL_RESOURCE_ATTRIBUTES_NAMESPACE_NAME),"
                        "k8s.node.name=$(OTEL_RESOURCE_ATTRIBUTES_NODE_NAME),"
                        "k8s.container.name=mcpcache",
                    },
                ],
                "ports": [{"name": "mcpcache-prom", "containerPort": 9090}],
                "startupProbe": {
                    "httpGet": {"path": "/readyz", "port": 9090},
                    "periodSeconds": 1,
                    "failureThreshold": 60,
                },
                "readinessProbe": {
                    "httpGet": {"path": "/readyz", "port": 9090},
                    "periodSeconds": 5,
                },
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": 9090},
                    "periodSeconds": 10,
                },
                "resources": {"requests": {"cpu": "10m"}},
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65532,
                    "runAsGroup": 65532,
                    "readOnlyRootFilesystem": True,
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "volumeMounts": [
                    {"name": "mcpcache-config", "mountPath": "/etc/mcpcache", "readOnly": True},
                    {
                        "name": "mcpcache-no-token",
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "readOnly": True,
                    },
                ],
            },
        ],
        "containers": [
            {
                "name": "agent",
                "env": [{"name": "A", "value": "1"}, url],
                "ports": [{"containerPort": 81}],
            },
            {"name": "helper", "env": [url]},
        ],
        "volumes": [
            {"name": "data", "emptyDir": {}},
            {
                "name": "mcpcache-config",
                "configMap": {"name": "mcpcache-servers", "optional": True},
            },
            {"name": "mcpcache-no-token", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}},
        ],
    }
    assert original == FULL_POD, "the pod itself is left as it was"
    assert plan is not None
    plan["initContainers"][1]["resources"]["requests"]["cpu"] = "1"
    assert FULL_SETTINGS.sidecar_resources == {"requests": {"cpu": "10m"}}


@pytest.mark.parametrize(
    ("app_id", "valid"),
    [
        ("a", True),
        ("a" * 253, True),
        ("a" * 254, False),
        ("a.b_c-D9", True),
        ("-a", False),
        ("a-", False),
        ("a b", False),
        ("a/b", False),
    ],
)
def test_an_app_id_is_letters_digits_and_separators_inside(app_id: str, valid: bool) -> None:
    annotated = pod({"mcpcache.io/app-id": app_id})
    if valid:
        assert app_id_of(annotated) == app_id
    else:
        with pytest.raises(InjectionRefused, match="is not a valid app id") as refused:
            app_id_of(annotated)
        assert str(refused.value) == (
            f"annotation mcpcache.io/app-id={app_id!r} is not a valid app id: use letters, "
            "digits, '-', '_' and '.', starting and ending with a letter or digit, "
            "at most 253 characters"
        )


def test_a_pod_without_metadata_or_spec_gets_the_default_app_id() -> None:
    assert app_id_of({}) == "default"
    assert app_id_of({"metadata": {"annotations": {"mcpcache.io/app-id": ""}}}) == "default"
    assert not wants_sidecar({})
    assert not wants_sidecar({"metadata": {"labels": {"mcpcache.io/inject": "false"}}})


def test_a_port_taken_by_an_init_container_or_an_unnamed_one_is_refused_when_asked_for() -> None:
    setup = {"initContainers": [{"name": "setup", "ports": [{"containerPort": 9090}]}]}
    with pytest.raises(InjectionRefused) as refused:
        plan_injection(pod({"mcpcache.io/metrics-port": "9090"}, **setup), SETTINGS)
    assert str(refused.value) == (
        "annotation mcpcache.io/metrics-port: '9090' is not allowed: container 'setup' "
        "uses that port; choose another"
    )
    unnamed = {"containers": [{"ports": [{"name": "x"}, {"containerPort": 3500}]}]}
    with pytest.raises(InjectionRefused, match="container '\\?' uses that port"):
        plan_injection(pod({"mcpcache.io/proxy-port": "3500"}, **unnamed), SETTINGS)


def test_a_pod_without_containers_or_volumes_still_gets_the_sidecar() -> None:
    plan = plan_injection({"metadata": {}, "spec": {}}, SETTINGS)
    assert plan is not None
    assert plan["containers"] == []
    assert [c["name"] for c in plan["initContainers"]] == ["mcpcache"]
    assert [v["name"] for v in plan["volumes"]] == ["mcpcache-config", "mcpcache-no-token"]


def test_a_host_network_pod_is_told_what_to_do_instead() -> None:
    with pytest.raises(InjectionRefused) as refused:
        plan_injection(pod(hostNetwork=True), SETTINGS)
    assert str(refused.value) == (
        "the pod uses hostNetwork, so the sidecar's listeners would be on the node's "
        "network; run the agent without hostNetwork, or remove the mcpcache.io/inject label"
    )


def sidecar_of(plan: dict | None) -> dict:
    assert plan is not None
    return next(c for c in plan["initContainers"] if c["name"] == "mcpcache")


def env_values(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def test_a_pod_chooses_its_sidecars_ports_resources_budget_and_log_level() -> None:
    annotated = pod(
        {
            "mcpcache.io/proxy-port": "4100",
            "mcpcache.io/metrics-port": "4101",
            "mcpcache.io/cpu-request": "250m",
            "mcpcache.io/memory-request": "200Mi",
            "mcpcache.io/memory-limit": "400Mi",
            "mcpcache.io/cache-entries": "4096",
            "mcpcache.io/cache-bytes": "256Mi",
            "mcpcache.io/log-level": "debug",
        }
    )
    plan = plan_injection(annotated, SETTINGS)
    sidecar = sidecar_of(plan)
    env = env_values(sidecar)
    assert env["MCPCACHE_LISTEN_PORT"] == "4100"
    assert env["MCPCACHE_METRICS_PORT"] == "4101"
    assert env["MCPCACHE_CACHE_MAX_ENTRIES"] == "4096"
    assert env["MCPCACHE_CACHE_MAX_BYTES"] == "256Mi"
    assert sidecar["args"][-2:] == ["--log-level", "DEBUG"]
    assert sidecar["resources"] == {
        "requests": {"cpu": "250m", "memory": "200Mi"},
        "limits": {"memory": "400Mi"},
    }
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sidecar[probe]["httpGet"]["port"] == 4101
    assert sidecar["ports"] == [{"name": "mcpcache-prom", "containerPort": 4101}]
    assert plan is not None
    assert plan["containers"][0]["env"] == [
        {"name": "MCPCACHE_URL", "value": "http://localhost:4100/mcp"}
    ]
    assert SETTINGS.sidecar_resources == {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"memory": "192Mi"},
    }, "the operator's settings are left as they were"


def test_a_pod_that_runs_daprd_gets_ports_daprd_does_not_use() -> None:
    daprd = {3500, 3501, 9090, 50001, 50002, 7777}
    for dapr_pod, app_port in (
        (pod({"dapr.io/enabled": "true", "dapr.io/app-port": "3510"}), 3510),
        (pod(initContainers=[{"name": "daprd", "restartPolicy": "Always"}]), None),
    ):
        env = env_values(sidecar_of(plan_injection(dapr_pod, SETTINGS)))
        assert int(env["MCPCACHE_LISTEN_PORT"]) not in daprd | {app_port}
        assert int(env["MCPCACHE_METRICS_PORT"]) not in daprd
    plan = plan_injection(pod({"dapr.io/enabled": "true"}), SETTINGS)
    assert env_values(sidecar_of(plan))["MCPCACHE_LISTEN_PORT"] == "3510"
    assert env_values(sidecar_of(plan))["MCPCACHE_METRICS_PORT"] == "9190"


def test_a_pod_that_declares_a_default_port_itself_gets_the_next_free_one() -> None:
    own = {"containers": [{"name": "agent", "ports": [{"containerPort": 3500}]}]}
    plan = plan_injection(pod(**own), SETTINGS)
    assert env_values(sidecar_of(plan))["MCPCACHE_LISTEN_PORT"] == "3510"
    assert env_values(sidecar_of(plan))["MCPCACHE_METRICS_PORT"] == "9090"


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"mcpcache.io/proxy-port": "80"},
            "annotation mcpcache.io/proxy-port: '80' is not allowed: use a port number "
            "from 1024 to 65535",
        ),
        (
            {"mcpcache.io/metrics-port": "http"},
            "annotation mcpcache.io/metrics-port: 'http' is not allowed: use a port number "
            "from 1024 to 65535",
        ),
        (
            {"mcpcache.io/proxy-port": "4000", "mcpcache.io/metrics-port": "4000"},
            "annotation mcpcache.io/metrics-port: '4000' is not allowed: the sidecar's proxy "
            "(mcpcache.io/proxy-port) uses that port; choose another",
        ),
        (
            {"dapr.io/enabled": "true", "mcpcache.io/proxy-port": "3500"},
            "annotation mcpcache.io/proxy-port: '3500' is not allowed: daprd uses that port; "
            "choose another",
        ),
        (
            {"mcpcache.io/cpu-request": "lots"},
            "annotation mcpcache.io/cpu-request: 'lots' is not allowed: use CPU units, e.g. "
            "50m, 250m or 0.5",
        ),
        (
            {"mcpcache.io/memory-limit": "512"},
            "annotation mcpcache.io/memory-limit: '512' is not allowed: use a size of at "
            "least 1Mi, e.g. 128Mi or 1Gi",
        ),
        (
            {"mcpcache.io/memory-request": "300Mi"},
            "annotation mcpcache.io/memory-request: '300Mi' is not allowed: the request must "
            "not exceed the memory limit (192Mi)",
        ),
        (
            {"mcpcache.io/cache-entries": "0"},
            "annotation mcpcache.io/cache-entries: '0' is not allowed: use a whole number "
            "of entries, at least 1",
        ),
        (
            {"mcpcache.io/cache-bytes": "lots"},
            "annotation mcpcache.io/cache-bytes: 'lots' is not allowed: use a size such as "
            "16Mi or 256Mi",
        ),
        (
            {"mcpcache.io/cache-bytes": "256Mi"},
            "annotation mcpcache.io/cache-bytes: '256Mi' is not allowed: the cache must fit "
            "under the sidecar's memory limit (192Mi) with room to spare; raise "
            "mcpcache.io/memory-limit too",
        ),
        (
            {"mcpcache.io/log-level": "verbose"},
            "annotation mcpcache.io/log-level: 'verbose' is not allowed: use one of DEBUG, "
            "INFO, WARNING, ERROR",
        ),
        (
            {"mcpcache.io/tracing": "yes"},
            "annotation mcpcache.io/tracing: 'yes' is not allowed: use true or false",
        ),
        (
            {"mcpcache.io/tracing-endpoint": "otel-collector:4318"},
            "annotation mcpcache.io/tracing-endpoint: 'otel-collector:4318' is not allowed: use "
            "an http:// or https:// URL, e.g. http://otel-collector.observability:4318",
        ),
        (
            {"mcpcache.io/tracing-endpoint": "http://otel:4318/?token=x"},
            "annotation mcpcache.io/tracing-endpoint: 'http://otel:4318/?token=x' is not allowed: "
            "use the collector's base URL, without spaces, a query or a fragment",
        ),
        (
            {"mcpcache.io/tracing-endpoint": "https://team:s3cret@otel:4318"},
            "annotation mcpcache.io/tracing-endpoint: 'https://team:s3cret@otel:4318' is not "
            "allowed: credentials do not belong in the URL; set OTEL_EXPORTER_OTLP_HEADERS "
            "instead",
        ),
        (
            {"mcpcache.io/tracing-sample-ratio": "10%"},
            "annotation mcpcache.io/tracing-sample-ratio: '10%' is not allowed: use a ratio "
            "from 0 to 1, e.g. 0.1",
        ),
        (
            {"mcpcache.io/tracing-sample-ratio": "0.5"},
            "annotation mcpcache.io/tracing-sample-ratio: '0.5' is not allowed: tracing is off; "
            'set mcpcache.io/tracing: "true" or an endpoint too',
        ),
        (
            {"mcpcache.io/tracing": "false", "mcpcache.io/tracing-endpoint": "http://otel:4318"},
            "annotation mcpcache.io/tracing-endpoint: 'http://otel:4318' is not allowed: "
            'mcpcache.io/tracing is "false"',
        ),
    ],
)
def test_a_bad_annotation_is_refused_naming_it_its_value_and_what_is_allowed(
    annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(InjectionRefused) as refused:
        plan_injection(pod(annotations), SETTINGS)
    assert str(refused.value) == message


def test_an_injected_pod_says_which_version_injected_it_and_a_digest_of_its_sidecar() -> None:
    plan = plan_injection(pod(), SETTINGS)
    assert plan is not None
    annotations = injected_annotations(plan)
    assert annotations["mcpcache.io/version"] == importlib.metadata.version("mcpcache")
    digest = annotations["mcpcache.io/config-digest"]
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", digest)
    assert injected_annotations(plan_injection(pod(), SETTINGS) or {}) == annotations
    other = plan_injection(pod({"mcpcache.io/log-level": "DEBUG"}), SETTINGS)
    assert other is not None
    assert injected_annotations(other)["mcpcache.io/config-digest"] != digest


def test_the_sidecar_holds_the_app_back_until_both_its_listeners_answer() -> None:
    probe = sidecar_of(plan_injection(pod(), SETTINGS))["startupProbe"]
    assert probe["httpGet"] == {"path": "/readyz", "port": 9090}
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 30


def test_the_operators_pull_secrets_join_the_pods_own_once_each() -> None:
    settings = OperatorSettings.from_environment(
        {"MCPCACHE_INJECTION_IMAGE_PULL_SECRETS": "mirror, agents-registry"}
    )
    own = [{"name": "agents-registry"}, {"name": "app-registry"}]
    plan = plan_injection(pod(imagePullSecrets=own), settings)
    assert plan is not None
    assert plan["imagePullSecrets"] == [*own, {"name": "mirror"}]
    assert plan_injection(pod(), settings)["imagePullSecrets"] == [  # type: ignore[index]
        {"name": "mirror"},
        {"name": "agents-registry"},
    ]
    plan = plan_injection(pod(imagePullSecrets=own), SETTINGS)
    assert plan is not None
    assert "imagePullSecrets" not in plan, "none given: the pod's own stand"


def test_a_platform_assigned_user_leaves_the_sidecars_uid_unset_and_non_root() -> None:
    settings = OperatorSettings.from_environment({"MCPCACHE_SIDECAR_RUN_AS_USER": "null"})
    assert settings.sidecar_run_as_user is None
    plan = plan_injection(pod(), settings)
    assert plan is not None
    security = plan["initContainers"][0]["securityContext"]
    assert "runAsUser" not in security
    assert "runAsGroup" not in security
    assert security["runAsNonRoot"] is True
    chosen = OperatorSettings.from_environment({"MCPCACHE_SIDECAR_RUN_AS_USER": "1000700000"})
    plan = plan_injection(pod(), chosen)
    assert plan is not None
    security = plan["initContainers"][0]["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (1000700000, 1000700000)
    with pytest.raises(ValueError, match="MCPCACHE_SIDECAR_RUN_AS_USER"):
        OperatorSettings.from_environment({"MCPCACHE_SIDECAR_RUN_AS_USER": "0"})
