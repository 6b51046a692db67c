"""The Helm chart: lint, render, validate against the Kubernetes schemas, install."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from peers.paths import CHART, CRD

KUBERNETES_VERSION = "1.35.0"

NON_DEFAULT = {
    "image": {"repository": "registry.example/mcpcache", "tag": "9.9.9", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry"}],
    "operator": {
        "logLevel": "DEBUG",
        "watchNamespaces": ["agents", "tools"],
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
    },
    "sidecar": {
        "image": {"tag": "9.9.9-slim"},
        "logLevel": "WARNING",
        "cache": {"maxEntries": 256, "maxBytes": "16Mi"},
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "sharedCache": {
            "url": "rediss://redis.cache.svc:6380/0",
            "timeout": "30ms",
            "namespaces": ["agents"],
            "secretName": "mcpcache-redis",
        },
    },
    "webhook": {"failurePolicy": "Fail", "timeoutSeconds": 3},
    "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
    "serviceAccount": {"name": "custom-operator", "annotations": {"example.com/role": "x"}},
}


@pytest.fixture(scope="module")
def values_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("values") / "values.yaml"
    path.write_text(yaml.safe_dump(NON_DEFAULT))
    return path


def render(control_plane, *args: str) -> list[dict[str, Any]]:
    out = control_plane.run_helm("template", "mcpcache", str(CHART), "-n", "mcpcache-system", *args)
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents if d["kind"] == kind]
    return found


def test_the_chart_crd_is_the_top_level_crd() -> None:
    assert filecmp.cmp(CHART / "crds" / CRD.name, CRD, shallow=False)


@pytest.mark.parametrize("custom", [False, True], ids=["default", "non-default"])
def test_helm_lint_is_clean(control_plane, values_file, custom: bool) -> None:
    args = ["lint", "--strict", str(CHART)] + (["-f", str(values_file)] if custom else [])
    result = control_plane.run_helm(*args)
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("custom", [False, True], ids=["default", "non-default"])
def test_every_rendered_manifest_validates_against_the_kubernetes_schemas(
    control_plane, values_file, custom: bool
) -> None:
    documents = render(control_plane, *(["-f", str(values_file)] if custom else []))
    unchecked = set()
    for document in documents:
        try:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.add(document["kind"])
    assert unchecked == ({"ServiceMonitor"} if custom else set())
    kinds = sorted(d["kind"] for d in documents)
    expected = [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "MutatingWebhookConfiguration",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    assert kinds == sorted(expected + (["ServiceMonitor"] if custom else []))


def test_the_operator_deployment_is_hardened_and_single(control_plane) -> None:
    deployment = by_kind(render(control_plane), "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]
    assert container["resources"]["requests"]
    assert container["image"] == "ghcr.io/mcpcache/mcpcache:0.1.0"
    assert not any("SHARED_CACHE" in e["name"] for e in container["env"])  # off by default


def test_values_reach_the_operator_and_the_sidecar(control_plane, values_file) -> None:
    documents = render(control_plane, "-f", str(values_file))
    pod = by_kind(documents, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert container["image"] == "registry.example/mcpcache:9.9.9"
    assert env["MCPCACHE_SIDECAR_IMAGE"] == "registry.example/mcpcache:9.9.9-slim"
    assert env["MCPCACHE_SIDECAR_LOG_LEVEL"] == "WARNING"
    assert json.loads(env["MCPCACHE_SIDECAR_RESOURCES"]) == NON_DEFAULT["sidecar"]["resources"]
    assert env["MCPCACHE_NAMESPACES"] == "agents,tools"
    assert env["MCPCACHE_SIDECAR_CACHE_MAX_ENTRIES"] == "256"
    assert env["MCPCACHE_SIDECAR_CACHE_MAX_BYTES"] == "16Mi"
    assert env["MCPCACHE_SIDECAR_SHARED_CACHE_URL"] == "rediss://redis.cache.svc:6380/0"
    assert env["MCPCACHE_SIDECAR_SHARED_CACHE_TIMEOUT"] == "30ms"
    assert env["MCPCACHE_SIDECAR_SHARED_CACHE_NAMESPACES"] == "agents"
    assert env["MCPCACHE_SIDECAR_SHARED_CACHE_SECRET"] == "mcpcache-redis"
    assert pod["serviceAccountName"] == "custom-operator"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    webhook = by_kind(documents, "MutatingWebhookConfiguration")["webhooks"][0]
    assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Fail", 3)
    excluded = webhook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert "mcpcache-system" in excluded
    assert "kube-system" in excluded
    monitor = by_kind(documents, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"


def test_helm_install_creates_the_objects_and_uninstall_removes_them(control_plane) -> None:
    release, namespace = "pkgtest", "pkgtest-system"
    installed = control_plane.run_helm(
        "install", release, str(CHART), "--namespace", namespace, "--create-namespace"
    )
    assert "Next steps" in installed.stdout
    api = control_plane.api_client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    rbac = client.RbacAuthorizationV1Api(api)
    admission = client.AdmissionregistrationV1Api(api)
    fullname = f"{release}-mcpcache"
    try:
        deployment = apps.read_namespaced_deployment(f"{fullname}-operator", namespace)
        assert deployment.spec.template.spec.service_account_name == f"{fullname}-operator"
        core.read_namespaced_service_account(f"{fullname}-operator", namespace)
        core.read_namespaced_service(f"{fullname}-webhook", namespace)
        secret = core.read_namespaced_secret(f"{fullname}-webhook-tls", namespace)
        assert set(secret.data) == {"ca.crt", "tls.crt", "tls.key"}
        rbac.read_cluster_role(f"{fullname}-operator")
        webhook = admission.read_mutating_webhook_configuration(f"{fullname}-inject")
        assert webhook.webhooks[0].client_config.ca_bundle == secret.data["ca.crt"]
        client.ApiextensionsV1Api(api).read_custom_resource_definition("mcpservers.mcpcache.io")

        upgraded = control_plane.run_helm("upgrade", release, str(CHART), "--namespace", namespace)
        assert "has been upgraded" in upgraded.stdout
        again = core.read_namespaced_secret(f"{fullname}-webhook-tls", namespace)
        assert again.data == secret.data, "an upgrade keeps the webhook certificate"
    finally:
        control_plane.run_helm("uninstall", release, "--namespace", namespace, "--wait")
    for read in (
        lambda: apps.read_namespaced_deployment(f"{fullname}-operator", namespace),
        lambda: rbac.read_cluster_role(f"{fullname}-operator"),
        lambda: admission.read_mutating_webhook_configuration(f"{fullname}-inject"),
        lambda: core.read_namespaced_secret(f"{fullname}-webhook-tls", namespace),
    ):
        with pytest.raises(ApiException) as gone:
            read()
        assert gone.value.status == 404
