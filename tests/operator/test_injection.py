"""Sidecar injection through the real API server and the operator's TLS webhook, as the
chart installs it: its configuration (selectors, service reference), its generated
certificate, its Service (resolved through an EndpointSlice to the operator process)."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from peers.operator import SIDECAR_IMAGE, OperatorProcess
from peers.resources import new_namespace
from peers.serving import wait_until

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def core(control_plane) -> client.CoreV1Api:
    return client.CoreV1Api(control_plane.api_client())


@pytest.fixture
def namespace(control_plane, operator) -> str:
    return new_namespace(control_plane, "inj")


INJECT = {"mcpcache.io/inject": "true"}


def pod(
    name: str,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = INJECT,
    **spec: object,
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {"containers": [{"name": "agent", "image": "agent:1"}], **spec},
    }


def create(core: client.CoreV1Api, namespace: str, body: dict, **kwargs: object) -> client.V1Pod:
    return core.create_namespaced_pod(namespace, body, _request_timeout=30, **kwargs)


POD_IP = "fieldRef:status.podIP"
"""The metrics listener binds the pod's own IP, from the downward API."""
PORTS = {"MCPCACHE_LISTEN_PORT": "3500", "MCPCACHE_METRICS_PORT": "9090"}
"""Set explicitly, over any service-link variable of the same name."""


def env_of(container: client.V1Container) -> dict[str, str]:
    """A container's env, a downward-API value written as `fieldRef:<path>`."""
    return {
        e.name: e.value if e.value_from is None else f"fieldRef:{e.value_from.field_ref.field_path}"
        for e in container.env
    }


def test_the_api_server_calls_the_charts_webhook_through_its_service(control_plane, operator):
    admission = client.AdmissionregistrationV1Api(control_plane.api_client())
    (webhook,) = admission.read_mutating_webhook_configuration(
        "mcpcache-inject", _request_timeout=30
    ).webhooks
    assert webhook.client_config.url is None
    assert (webhook.client_config.service.name, webhook.client_config.service.port) == (
        "mcpcache-webhook",
        443,
    )
    assert webhook.object_selector.match_labels == INJECT


def test_a_labelled_pod_gets_the_native_sidecar(core, namespace) -> None:
    created = create(core, namespace, pod("agent", {"mcpcache.io/app-id": "checkout"}))
    (sidecar,) = created.spec.init_containers
    assert sidecar.name == "mcpcache"
    assert sidecar.restart_policy == "Always"
    assert sidecar.image == SIDECAR_IMAGE
    assert sidecar.args[:3] == ["sidecar", "--servers-file", "/etc/mcpcache/config.yaml"]
    assert env_of(sidecar) == {
        "MCPCACHE_APP_ID": "checkout",
        "MCPCACHE_METRICS_HOST": POD_IP,
        **PORTS,
    }
    assert sidecar.security_context.run_as_non_root is True
    assert sidecar.security_context.read_only_root_filesystem is True
    assert sidecar.security_context.capabilities.drop == ["ALL"]
    assert sidecar.readiness_probe.http_get.path == "/readyz"
    assert sidecar.resources.requests == {"cpu": "50m", "memory": "96Mi"}
    mounts = {m.mount_path: m for m in sidecar.volume_mounts}
    assert mounts["/etc/mcpcache"].read_only is True
    volume = next(v for v in created.spec.volumes if v.name == "mcpcache-config")
    assert volume.config_map.name == "mcpcache-servers"
    assert volume.config_map.optional is True
    (agent,) = created.spec.containers
    assert [(e.name, e.value) for e in agent.env] == [("MCPCACHE_URL", "http://localhost:3500/mcp")]
    assert sidecar.startup_probe.http_get.path == "/readyz"
    annotations = created.metadata.annotations
    assert annotations["mcpcache.io/version"] == importlib.metadata.version("mcpcache")
    assert annotations["mcpcache.io/config-digest"].startswith("sha256:")
    assert annotations["mcpcache.io/app-id"] == "checkout", "the pod's own are kept"


def test_a_pod_asking_for_traces_gets_its_collector_and_its_identity(core, namespace) -> None:
    annotations = {
        "mcpcache.io/tracing-endpoint": "http://otel-collector.observability:4318",
        "mcpcache.io/tracing-sample-ratio": "0.1",
    }
    created = create(core, namespace, pod("traced", annotations))
    (sidecar,) = created.spec.init_containers
    env = env_of(sidecar)
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert env["MCPCACHE_TRACING_SAMPLE_RATIO"] == "0.1"
    assert env["OTEL_RESOURCE_ATTRIBUTES_POD_NAME"] == "fieldRef:metadata.name"
    assert env["OTEL_RESOURCE_ATTRIBUTES_NODE_NAME"] == "fieldRef:spec.nodeName"
    names = [e.name for e in sidecar.env]
    assert names.index("OTEL_RESOURCE_ATTRIBUTES") > names.index(
        "OTEL_RESOURCE_ATTRIBUTES_POD_NAME"
    ), "the kubelet expands $(VAR) only for variables defined before"
    assert "k8s.pod.name=$(OTEL_RESOURCE_ATTRIBUTES_POD_NAME)" in env["OTEL_RESOURCE_ATTRIBUTES"]
    untraced = env_of(create(core, namespace, pod("untraced")).spec.init_containers[0])
    assert not [name for name in untraced if name.startswith("OTEL_")]


def test_a_pod_without_annotations_is_annotated_with_the_version(core, namespace) -> None:
    body = pod("bare")
    del body["metadata"]["annotations"]
    created = create(core, namespace, body)
    assert set(created.metadata.annotations) == {"mcpcache.io/version", "mcpcache.io/config-digest"}


def test_a_pod_running_daprd_gets_the_sidecar_on_other_ports(core, namespace) -> None:
    created = create(core, namespace, pod("dapr", {"dapr.io/enabled": "true"}))
    (sidecar,) = created.spec.init_containers
    env = env_of(sidecar)
    assert (env["MCPCACHE_LISTEN_PORT"], env["MCPCACHE_METRICS_PORT"]) == ("3510", "9190")
    (agent,) = created.spec.containers
    assert [(e.name, e.value) for e in agent.env] == [("MCPCACHE_URL", "http://localhost:3510/mcp")]


def test_the_sidecar_cannot_see_the_service_account_token(core, namespace) -> None:
    created = create(core, namespace, pod("agent"))
    (sidecar,) = created.spec.init_containers
    (mount,) = [m for m in sidecar.volume_mounts if m.mount_path == TOKEN_DIR]
    assert mount.read_only is True
    (volume,) = [v for v in created.spec.volumes if v.name == mount.name]
    assert volume.empty_dir is not None
    assert volume.projected is None
    assert volume.secret is None
    (agent,) = created.spec.containers
    assert not agent.volume_mounts, "the app's own containers are left as they were"


def test_the_app_id_defaults_to_the_service_account(core, namespace) -> None:
    created = create(core, namespace, pod("agent", serviceAccountName="billing"))
    (sidecar,) = created.spec.init_containers
    assert env_of(sidecar) == {
        "MCPCACHE_APP_ID": "billing",
        "MCPCACHE_METRICS_HOST": POD_IP,
        **PORTS,
    }


def test_pods_without_the_label_are_never_sent_to_the_webhook(core, namespace, operator) -> None:
    before = operator.sample("mcpcache_operator_admissions_total", result="not_requested")
    # The annotation alone is not enough: the webhook's objectSelector is the label.
    created = create(core, namespace, pod("plain", annotations=INJECT, labels={}))
    assert created.spec.init_containers is None
    assert created.spec.containers[0].env is None
    assert operator.sample("mcpcache_operator_admissions_total", result="not_requested") == before


def test_a_pod_that_already_has_the_sidecar_is_not_injected_twice(core, namespace) -> None:
    first = create(core, namespace, pod("first"))
    again = client.ApiClient().sanitize_for_serialization(first)
    again["metadata"] = {"name": "again", "labels": INJECT}
    again.pop("status", None)
    created = create(core, namespace, again)
    assert [c.name for c in created.spec.init_containers] == ["mcpcache"]
    assert len([v for v in created.spec.volumes if v.name == "mcpcache-config"]) == 1


@pytest.mark.parametrize(
    ("annotations", "spec", "complaint"),
    [
        ({"mcpcache.io/app-id": "not valid!"}, {}, "not a valid app id"),
        (
            {"mcpcache.io/metrics-port": "9090"},
            {"containers": [{"name": "agent", "image": "a", "ports": [{"containerPort": 9090}]}]},
            "annotation mcpcache.io/metrics-port: '9090' is not allowed: container 'agent' "
            "uses that port; choose another",
        ),
        (
            {"mcpcache.io/memory-limit": "lots"},
            {},
            "annotation mcpcache.io/memory-limit: 'lots' is not allowed: use a size of at "
            "least 1Mi, e.g. 128Mi or 1Gi",
        ),
        ({}, {"hostNetwork": True}, "the pod uses hostNetwork"),
        (
            {"mcpcache.io/tracing-sample-ratio": "half"},
            {},
            "annotation mcpcache.io/tracing-sample-ratio: 'half' is not allowed: use a ratio "
            "from 0 to 1, e.g. 0.1",
        ),
    ],
)
def test_a_pod_that_cannot_take_the_sidecar_is_refused_with_a_reason(
    core, namespace, annotations, spec, complaint
) -> None:
    with pytest.raises(ApiException) as refused:
        create(core, namespace, pod("bad", annotations, **spec))
    assert refused.value.status == 400
    assert "cannot inject the mcpcache sidecar" in refused.value.body
    assert complaint in refused.value.body


def test_a_refusal_is_logged_as_an_expected_outcome_not_an_error(core, namespace, operator) -> None:
    with pytest.raises(ApiException):
        create(core, namespace, pod("refused-quietly", hostNetwork=True))
    lines = [
        json.loads(line) for line in operator.log_tail(2000).splitlines() if line.startswith("{")
    ]
    refusals = [r for r in lines if r.get("msg") == "pod refused: it cannot take the sidecar"]
    assert any(r.get("pod") == "refused-quietly" for r in refusals)
    assert {r["level"] for r in refusals} == {"info"}
    assert not [r for r in lines if "failed permanently" in r.get("msg", "")]


def restricted_pod(name: str) -> dict:
    body = pod(name)
    body["spec"]["securityContext"] = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    body["spec"]["containers"][0]["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    return body


def test_an_injected_pod_passes_the_restricted_pod_security_standard(
    control_plane, core, operator
) -> None:
    namespace = new_namespace(
        control_plane, "pss", labels={"pod-security.kubernetes.io/enforce": "restricted"}
    )
    # The namespace does enforce: a pod that does not meet the standard is refused.
    with pytest.raises(ApiException) as refused:
        create(core, namespace, pod("lax"))
    assert refused.value.status == 403
    assert "violates PodSecurity" in refused.value.body

    created = create(core, namespace, restricted_pod("strict"))
    assert [c.name for c in created.spec.init_containers] == ["mcpcache"]


def test_admissions_are_counted_and_dry_runs_are_not_injections(core, namespace, operator) -> None:
    def injected() -> float:
        return operator.sample("mcpcache_operator_admissions_total", result="injected") or 0

    before = injected()
    create(core, namespace, pod("counted"))
    assert injected() == before + 1
    dry = operator.sample("mcpcache_operator_admissions_total", result="dry_run") or 0
    tried = create(core, namespace, pod("tried"), dry_run="All")
    assert [c.name for c in tried.spec.init_containers] == ["mcpcache"]
    assert injected() == before + 1
    assert operator.sample("mcpcache_operator_admissions_total", result="dry_run") == dry + 1


def test_the_operator_exports_the_version_it_injects(core, namespace, operator) -> None:
    created = create(core, namespace, pod("versioned"))
    version = created.metadata.annotations["mcpcache.io/version"]
    assert operator.sample("mcpcache_build_info", version=version) == 1


@pytest.fixture
def platform_operator(operator, operator_install) -> Iterator[OperatorProcess]:
    """A replica of the session's operator with the chart's `securityContext.runAsUser:
    null` and `injection.imagePullSecrets` (as their environment), serving the webhook
    alone: the session's operator is stopped meanwhile, since the API server keeps its
    connections to the endpoint it already reached. Afterwards the session's operator
    runs again, holds the Lease, and the Service points at it."""
    replica = OperatorProcess(
        operator_install.kubeconfig,
        operator_install.webhook.certificate,
        environment={
            "MCPCACHE_SIDECAR_RUN_AS_USER": "null",
            "MCPCACHE_INJECTION_IMAGE_PULL_SECRETS": "mirror,agents-registry",
        },
    ).start()
    try:
        wait_until(replica.ready, 30, "the replica's readiness")
        operator.terminate()
        operator_install.webhook.install(replica.webhook_port)
        yield replica
    finally:
        operator.start()
        operator_install.webhook.install(operator.webhook_port)
        replica.stop()
        wait_until(operator.leading, 30, "the session's operator to lead again")


def test_with_the_platforms_user_and_the_charts_pull_secrets_a_pod_is_still_restricted(
    control_plane, core, platform_operator
) -> None:
    """No uid anywhere in the pod (the platform assigns one, as OpenShift's
    restricted-v2 does): the webhook leaves the sidecar's unset too, and Pod Security's
    restricted level still admits the pod. The pod's own pull secret is kept beside the
    chart's, each once."""
    namespace = new_namespace(
        control_plane, "uid", labels={"pod-security.kubernetes.io/enforce": "restricted"}
    )
    body = restricted_pod("platform-uid")
    del body["spec"]["securityContext"]["runAsUser"]
    body["spec"]["imagePullSecrets"] = [{"name": "agents-registry"}]
    created = create(core, namespace, body)
    (sidecar,) = created.spec.init_containers
    assert sidecar.name == "mcpcache"
    assert sidecar.security_context.run_as_user is None
    assert sidecar.security_context.run_as_group is None
    assert sidecar.security_context.run_as_non_root is True
    assert created.spec.security_context.run_as_user is None
    assert [s.name for s in created.spec.image_pull_secrets] == ["agents-registry", "mirror"]
