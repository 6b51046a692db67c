"""Sidecar injection through the real API server and the operator's TLS webhook."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from peers.operator import SIDECAR_IMAGE
from peers.resources import INJECTED_LABEL, new_namespace


@pytest.fixture(scope="module")
def core(control_plane) -> client.CoreV1Api:
    return client.CoreV1Api(control_plane.api_client())


@pytest.fixture
def namespace(control_plane, operator) -> str:
    return new_namespace(control_plane, "inj", labels={INJECTED_LABEL: "true"})


def pod(name: str, annotations: dict[str, str] | None = None, **spec: object) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "agent", "image": "agent:1"}], **spec},
    }


INJECT = {"mcpcache.io/inject": "true"}


def test_an_annotated_pod_gets_the_native_sidecar(core, namespace) -> None:
    created = core.create_namespaced_pod(
        namespace, pod("agent", INJECT | {"mcpcache.io/app-id": "checkout"})
    )
    (sidecar,) = created.spec.init_containers
    assert sidecar.name == "mcpcache"
    assert sidecar.restart_policy == "Always"
    assert sidecar.image == SIDECAR_IMAGE
    assert sidecar.args[:3] == ["sidecar", "--config", "/etc/mcpcache/config.yaml"]
    assert {(e.name, e.value) for e in sidecar.env} == {("MCPCACHE_APP_ID", "checkout")}
    assert sidecar.security_context.run_as_non_root is True
    assert sidecar.security_context.read_only_root_filesystem is True
    assert sidecar.security_context.capabilities.drop == ["ALL"]
    assert sidecar.readiness_probe.http_get.path == "/readyz"
    assert sidecar.resources.requests == {"cpu": "50m", "memory": "96Mi"}
    (mount,) = sidecar.volume_mounts
    assert (mount.mount_path, mount.read_only) == ("/etc/mcpcache", True)
    volume = next(v for v in created.spec.volumes if v.name == "mcpcache-config")
    assert volume.config_map.name == "mcpcache-servers"
    assert volume.config_map.optional is True
    (agent,) = created.spec.containers
    assert [(e.name, e.value) for e in agent.env] == [("MCPCACHE_URL", "http://localhost:3500/mcp")]


def test_the_app_id_defaults_to_the_service_account(core, namespace) -> None:
    created = core.create_namespaced_pod(
        namespace, pod("agent", INJECT, serviceAccountName="billing")
    )
    (sidecar,) = created.spec.init_containers
    assert {(e.name, e.value) for e in sidecar.env} == {("MCPCACHE_APP_ID", "billing")}


def test_pods_without_the_annotation_are_untouched(core, namespace) -> None:
    created = core.create_namespaced_pod(namespace, pod("plain", {"mcpcache.io/inject": "false"}))
    assert created.spec.init_containers is None
    assert created.spec.containers[0].env is None


def test_a_pod_that_already_has_the_sidecar_is_not_injected_twice(core, namespace) -> None:
    first = core.create_namespaced_pod(namespace, pod("first", INJECT))
    again = client.ApiClient().sanitize_for_serialization(first)
    again["metadata"] = {"name": "again", "annotations": INJECT}
    again.pop("status", None)
    created = core.create_namespaced_pod(namespace, again)
    assert [c.name for c in created.spec.init_containers] == ["mcpcache"]
    assert len([v for v in created.spec.volumes if v.name == "mcpcache-config"]) == 1


@pytest.mark.parametrize(
    ("annotations", "spec", "complaint"),
    [
        ({"mcpcache.io/app-id": "not valid!"}, {}, "not a valid app id"),
        (
            {},
            {"containers": [{"name": "agent", "image": "a", "ports": [{"containerPort": 9090}]}]},
            "container 'agent' uses port 9090",
        ),
    ],
)
def test_a_pod_that_cannot_take_the_sidecar_is_refused_with_a_reason(
    core, namespace, annotations, spec, complaint
) -> None:
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod(namespace, pod("bad", INJECT | annotations, **spec))
    assert refused.value.status == 400
    assert "cannot inject the mcpcache sidecar" in refused.value.body
    assert complaint in refused.value.body


def test_admissions_are_counted(core, namespace, operator) -> None:
    core.create_namespaced_pod(namespace, pod("counted", INJECT))
    text = operator.metrics()
    injected = next(
        line
        for line in text.splitlines()
        if line.startswith('mcpcache_operator_admissions_total{result="injected"}')
    )
    assert float(injected.split()[-1]) >= 1
