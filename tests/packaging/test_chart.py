"""The Helm chart: lint, render, validate against the Kubernetes schemas, install."""

from __future__ import annotations

import base64
import datetime
import filecmp
import json
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from kubernetes import client
from kubernetes.client.rest import ApiException

from mcpcache.operator.injection import plan_injection
from mcpcache.operator.settings import OperatorSettings
from peers.paths import CHART, CRD, ROOT

KUBERNETES_VERSION = "1.35.0"

DIGEST = "sha256:" + "ab" * 32

NON_DEFAULT = {
    "nameOverride": "cache",
    "commonLabels": {"team": "platform", "app.kubernetes.io/name": "not-ours"},
    "image": {"repository": "registry.example/mcpcache", "tag": "9.9.9", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry"}],
    "injection": {"imagePullSecrets": [{"name": "agents-registry"}]},
    "securityContext": {"runAsUser": None},
    "operator": {
        "logLevel": "DEBUG",
        "watchNamespaces": ["agents", "tools"],
        "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "podLabels": {"team": "platform", "app.kubernetes.io/component": "not-ours"},
        "priorityClassName": "mcpcache-operator",
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}},
            }
        ],
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
        "tracing": {
            "enabled": True,
            "endpoint": "http://otel-collector.observability:4318",
            "sampleRatio": 0.25,
        },
    },
    "webhook": {"failurePolicy": "Fail", "timeoutSeconds": 3, "certManager": {"enabled": True}},
    "metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "podMonitor": {"enabled": True},
    },
    "networkPolicy": {
        "enabled": True,
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
    },
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


def test_the_chart_crds_are_the_top_level_crds() -> None:
    for path in CRD.parent.iterdir():
        assert filecmp.cmp(CHART / "crds" / path.name, path, shallow=False)


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
    assert unchecked == (
        {"ServiceMonitor", "PodMonitor", "Issuer", "Certificate"} if custom else set()
    )
    kinds = sorted(d["kind"] for d in documents)
    common = [
        *["ClusterRole"] * 2,  # aggregated into edit and view
        "Deployment",
        "MutatingWebhookConfiguration",
        "Service",
        "ServiceAccount",
        "Role",  # the operator's Lease
        "RoleBinding",
        "PodDisruptionBudget",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "Pod",  # `helm test`'s
    ]
    if custom:
        extra = ["Role", "Role", "RoleBinding", "RoleBinding", "ServiceMonitor", "PodMonitor"]
        extra += ["Issuer", "Certificate", "NetworkPolicy"]
    else:
        extra = ["Secret", "Secret"]  # the webhook's CA and serving certificate
        extra += ["ClusterRole", "ClusterRoleBinding"]  # the operator's, cluster-wide
    assert kinds == sorted(common + extra)


def test_the_charts_kubernetes_floor_is_the_first_version_that_has_all_its_objects(
    control_plane,
) -> None:
    """kubeVersion says 1.30: the operator's ValidatingAdmissionPolicy is
    admissionregistration.k8s.io/v1 from 1.30 on, and not in 1.29's API at all."""
    floor = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    assert floor == ">=1.30.0-0"
    refused = control_plane.run_helm(
        "template", "mcpcache", str(CHART), "--kube-version", "1.29.0", check=False
    )
    assert refused.returncode != 0
    assert "chart requires kubeVersion: >=1.30.0-0" in refused.stderr
    documents = render(control_plane, "--kube-version", "1.30.0")
    for document in documents:
        kubernetes_validate.validate(document, "1.30.0", strict=True)
    policy = by_kind(documents, "ValidatingAdmissionPolicy")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(policy, "1.29.0", strict=True)


def test_the_helm_test_pod_asks_for_the_sidecar_where_the_webhook_serves(control_plane) -> None:
    (pod,) = render(control_plane, "--show-only", "templates/tests/sidecar-answers.yaml")
    assert pod["metadata"]["namespace"] == "default"
    assert pod["metadata"]["labels"]["mcpcache.io/inject"] == "true"
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    watched = render(
        control_plane,
        "--show-only", "templates/tests/sidecar-answers.yaml",
        "--set", "operator.watchNamespaces={agents,tools}",
    )  # fmt: skip
    assert watched[0]["metadata"]["namespace"] == "agents"
    chosen = render(
        control_plane,
        "--show-only", "templates/tests/sidecar-answers.yaml",
        "--set", "tests.namespace=smoke",
    )  # fmt: skip
    assert chosen[0]["metadata"]["namespace"] == "smoke"


def test_with_cert_manager_every_render_is_the_same(control_plane) -> None:
    """The GitOps path: no key material is generated, so `helm template` (as Argo CD and
    Flux run it, without the cluster) gives the same manifests every time."""
    renders = [
        control_plane.run_helm(
            "template", "mcpcache", str(CHART), "--set", "webhook.certManager.enabled=true"
        ).stdout
        for _ in range(2)
    ]
    assert renders[0] == renders[1]
    assert "kind: Secret" not in renders[0]


def test_the_operator_deployment_is_hardened_and_replicated(control_plane) -> None:
    documents = render(control_plane)
    deployment = by_kind(documents, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    budget = by_kind(documents, "PodDisruptionBudget")["spec"]
    assert budget["maxUnavailable"] == 1
    assert budget["selector"] == spec["selector"]
    pod = spec["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert pod["securityContext"]["runAsNonRoot"] is True
    # The kubelet's service-link variable of the webhook Service would be named
    # MCPCACHE_WEBHOOK_PORT, one of the operator's settings (found on a real node).
    assert pod["enableServiceLinks"] is False
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["MCPCACHE_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["MCPCACHE_LEASE_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["MCPCACHE_LEASE_NAME"] == "mcpcache-operator"
    assert container["resources"]["requests"]
    assert container["image"] == "ghcr.io/mcpcache/mcpcache:0.1.0"
    assert not any("SHARED_CACHE" in e["name"] for e in container["env"])  # off by default


def test_values_reach_the_operator_and_the_sidecar(control_plane, values_file) -> None:
    documents = render(control_plane, "-f", str(values_file))
    pod = by_kind(documents, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
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
    assert env["MCPCACHE_SIDECAR_TRACING_ENABLED"] == "true"
    assert env["MCPCACHE_SIDECAR_TRACING_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert env["MCPCACHE_SIDECAR_TRACING_SAMPLE_RATIO"] == "0.25"
    injected = plan_injection(
        {"metadata": {}, "spec": {"containers": [{"name": "agent"}]}},
        OperatorSettings.from_environment({k: v for k, v in env.items() if v is not None}),
    )
    assert injected is not None
    sidecar_env = {e["name"]: e.get("value") for e in injected["initContainers"][0]["env"]}
    assert sidecar_env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability:4318"
    assert sidecar_env["MCPCACHE_TRACING_SAMPLE_RATIO"] == "0.25"
    assert pod["serviceAccountName"] == "custom-operator"
    assert pod["imagePullSecrets"] == [{"name": "registry"}]
    configuration = by_kind(documents, "MutatingWebhookConfiguration")
    (webhook,) = configuration["webhooks"]
    assert (webhook["failurePolicy"], webhook["timeoutSeconds"]) == ("Fail", 3)
    assert webhook["objectSelector"] == {"matchLabels": {"mcpcache.io/inject": "true"}}
    excluded, watched = webhook["namespaceSelector"]["matchExpressions"]
    assert excluded["operator"] == "NotIn"
    assert {"mcpcache-system", "kube-system"} <= set(excluded["values"])
    assert (watched["operator"], watched["values"]) == ("In", ["agents", "tools"])
    monitor = by_kind(documents, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    sidecars = by_kind(documents, "PodMonitor")["spec"]
    assert sidecars["namespaceSelector"] == {"matchNames": ["agents", "tools"]}
    assert sidecars["podMetricsEndpoints"][0]["port"] == "mcpcache-prom"
    # cert-manager issues the certificate and injects its CA; Helm generates neither.
    assert "caBundle" not in webhook["clientConfig"]
    annotation = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    certificate = by_kind(documents, "Certificate")
    assert annotation == f"mcpcache-system/{certificate['metadata']['name']}"
    assert certificate["spec"]["secretName"] == "mcpcache-webhook-tls"
    assert by_kind(documents, "Issuer")["spec"] == {"selfSigned": {}}
    policy = by_kind(documents, "NetworkPolicy")["spec"]
    webhook_rule, metrics_rule = policy["ingress"]
    assert "from" not in webhook_rule, "the API server may come from anywhere"
    assert metrics_rule["from"] == NON_DEFAULT["networkPolicy"]["metricsFrom"]


def rules_for(role: dict[str, Any], resource: str) -> list[dict[str, Any]]:
    return [r for r in role["rules"] if resource in r["resources"]]


def test_configmap_rights_are_by_name_and_namespaced_when_namespaces_are_watched(
    control_plane, values_file
) -> None:
    cluster_wide = render(control_plane, "--show-only", "templates/rbac.yaml")
    (role,) = [d for d in cluster_wide if d["kind"] == "ClusterRole"]
    by_name, create = rules_for(role, "configmaps")
    assert by_name["resourceNames"] == ["mcpcache-servers"]
    assert "delete" not in by_name["verbs"]
    assert create == {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}

    scoped = render(control_plane, "-f", str(values_file), "--show-only", "templates/rbac.yaml")
    assert sorted(d["kind"] for d in scoped) == ["Role"] * 3 + ["RoleBinding"] * 3
    roles = [d for d in scoped if d["kind"] == "Role" and rules_for(d, "configmaps")]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["agents", "tools"]
    assert rules_for(roles[0], "configmaps")[0]["resourceNames"] == ["mcpcache-servers"]


def test_the_lease_rights_are_one_lease_in_the_release_namespace(control_plane) -> None:
    documents = render(control_plane, "--show-only", "templates/rbac.yaml")
    (role,) = [d for d in documents if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "mcpcache-system"
    by_name, create = rules_for(role, "leases")
    assert by_name["resourceNames"] == ["mcpcache-operator"]
    assert sorted(by_name["verbs"]) == ["get", "update"]
    assert create["verbs"] == ["create"]  # limited to that name by the admission policy


def test_one_replica_renders_no_disruption_budget(control_plane) -> None:
    documents = render(control_plane, "--set", "operator.replicas=1")
    assert "PodDisruptionBudget" not in {d["kind"] for d in documents}


def certificates(pem: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem)


def signed_by(leaf: x509.Certificate, bundle: list[x509.Certificate]) -> bool:
    for authority in bundle:
        try:
            leaf.verify_directly_issued_by(authority)
        except (ValueError, InvalidSignature, TypeError):
            continue
        return True
    return False


def days_left(cert: x509.Certificate) -> float:
    remaining = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return remaining.total_seconds() / 86400


def test_helm_install_upgrade_renewal_and_uninstall(control_plane) -> None:
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
    # The chart's crds/ holds the CRD's admission policy too: Helm creates it with the CRD.
    policy = admission.read_validating_admission_policy("mcpservers.mcpcache.io")
    assert policy.spec.validations

    def tls() -> tuple[dict[str, str], bytes]:
        secret = core.read_namespaced_secret(
            f"{fullname}-webhook-tls", namespace, _request_timeout=30
        )
        webhook = admission.read_mutating_webhook_configuration(
            f"{fullname}-inject", _request_timeout=30
        )
        return secret.data, base64.b64decode(webhook.webhooks[0].client_config.ca_bundle)

    def upgrade(*values: str) -> None:
        args = [a for value in values for a in ("--set", value)]
        upgraded = control_plane.run_helm("upgrade", release, str(CHART), "-n", namespace, *args)
        assert "has been upgraded" in upgraded.stdout

    try:
        deployment = apps.read_namespaced_deployment(f"{fullname}-operator", namespace)
        assert deployment.spec.template.spec.service_account_name == f"{fullname}-operator"
        core.read_namespaced_service_account(f"{fullname}-operator", namespace)
        core.read_namespaced_service(f"{fullname}-webhook", namespace)
        rbac.read_cluster_role(f"{fullname}-operator")
        client.ApiextensionsV1Api(api).read_custom_resource_definition("mcpservers.mcpcache.io")
        data, bundle = tls()
        assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
        assert base64.b64decode(data["ca.crt"]) == bundle
        (leaf,) = certificates(base64.b64decode(data["tls.crt"]))
        assert signed_by(leaf, certificates(bundle))
        assert 364 < days_left(leaf) <= 365, "a one-year serving certificate"
        assert f"{fullname}-webhook.{namespace}.svc" in str(leaf.extensions)

        upgrade()
        assert tls() == (data, bundle), "an upgrade far from expiry keeps the certificate"

        # A render that may read the cluster (`helm template --dry-run=server`, as GitOps
        # tools with lookups do) shows the certificate the cluster holds: no drift.
        for _ in range(2):
            rendered = control_plane.run_helm(
                "template", release, str(CHART), "-n", namespace, "--dry-run=server"
            )
            (secret,) = [
                d
                for d in yaml.safe_load_all(rendered.stdout)
                if d and d["kind"] == "Secret" and d["metadata"]["name"].endswith("-webhook-tls")
            ]
            assert secret["data"] == data

        # Within renewBeforeDays of the serving certificate's expiry: renewed, same CA.
        upgrade("webhook.certificate.renewBeforeDays=400")
        renewed, same_bundle = tls()
        assert same_bundle == bundle
        assert renewed["tls.crt"] != data["tls.crt"]
        (new_leaf,) = certificates(base64.b64decode(renewed["tls.crt"]))
        assert signed_by(new_leaf, certificates(bundle))

        # Within renewBeforeDays of the CA's expiry: a new CA, and the old one stays in the
        # bundle so that the serving certificate still mounted in the pod keeps verifying.
        upgrade("webhook.certificate.renewBeforeDays=2000")
        rotated, new_bundle = tls()
        authorities = certificates(new_bundle)
        assert len(authorities) == 2
        assert certificates(bundle)[0] in authorities
        (rotated_leaf,) = certificates(base64.b64decode(rotated["tls.crt"]))
        assert signed_by(rotated_leaf, authorities[:1])
        assert signed_by(new_leaf, authorities)

        # From a release that kept no CA Secret: a new CA, the old one still trusted.
        core.delete_namespaced_secret(f"{fullname}-webhook-ca", namespace, _request_timeout=30)
        upgrade()
        _, from_old = tls()
        assert certificates(from_old)[1:] == authorities
        assert certificates(from_old)[0] not in authorities
    finally:
        control_plane.run_helm("uninstall", release, "--namespace", namespace, "--wait")
    for read in (
        lambda: apps.read_namespaced_deployment(f"{fullname}-operator", namespace),
        lambda: rbac.read_cluster_role(f"{fullname}-operator"),
        lambda: rbac.read_cluster_role(f"{fullname}-edit"),
        lambda: admission.read_mutating_webhook_configuration(f"{fullname}-inject"),
        lambda: admission.read_validating_admission_policy(f"{fullname}-operator-configmaps"),
        lambda: core.read_namespaced_secret(f"{fullname}-webhook-tls", namespace),
        lambda: core.read_namespaced_secret(f"{fullname}-webhook-ca", namespace),
    ):
        with pytest.raises(ApiException) as gone:
            read()
        assert gone.value.status == 404


def test_namespace_editors_and_viewers_get_mcpserver_rights(control_plane, crd) -> None:
    """The aggregated roles, bound directly (the test API server runs no controller that
    aggregates them into edit and view): editors manage MCPServers, viewers read them."""
    documents = render(control_plane, "--show-only", "templates/aggregate-roles.yaml")
    labels = {d["metadata"]["name"]: d["metadata"]["labels"] for d in documents}
    assert labels["mcpcache-edit"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["mcpcache-edit"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert labels["mcpcache-view"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    manifest = control_plane.dir / "aggregate-roles.yaml"
    manifest.write_text(yaml.safe_dump_all(documents))
    control_plane.run_kubectl("apply", "-f", str(manifest))
    namespace = f"team-{uuid.uuid4().hex[:8]}"
    control_plane.run_kubectl("create", "namespace", namespace)
    for role, user in (("mcpcache-edit", "alice"), ("mcpcache-view", "bob")):
        control_plane.run_kubectl(
            "create",
            "rolebinding",
            user,
            f"--clusterrole={role}",
            f"--user={user}",
            "-n",
            namespace,
        )

    def can(user: str, verb: str, resource: str = "mcpservers.mcpcache.io", *more: str) -> bool:
        answer = control_plane.run_kubectl(
            "auth", "can-i", verb, resource, f"--as={user}", "-n", namespace, *more, check=False
        )
        return answer.stdout.strip() == "yes"

    assert can("alice", "create")
    assert can("alice", "delete")
    assert not can("alice", "patch", "mcpservers.mcpcache.io", "--subresource=status")
    assert can("bob", "list")
    assert can("bob", "watch")
    assert not can("bob", "create")
    assert not can("bob", "list", "configmaps")


SECURITY_PAGE = ROOT / "docs" / "operations" / "security.md"
"""Its section "What the operator may do" lists these rights in words."""

DOCUMENTED_RIGHTS = {
    # get, list and watch MCPServers and the MCPServer CRD
    *(("mcpcache.io", "mcpservers", "", verb) for verb in ("get", "list", "watch")),
    *(
        ("apiextensions.k8s.io", "customresourcedefinitions", "", verb)
        for verb in ("get", "list", "watch")
    ),
    # get, patch and update MCPServers' status
    *(("mcpcache.io", "mcpservers/status", "", verb) for verb in ("get", "patch", "update")),
    # get, list, watch, update and patch ConfigMaps named mcpcache-servers
    *(
        ("", "configmaps", "mcpcache-servers", verb)
        for verb in ("get", "list", "watch", "update", "patch")
    ),
    # create ConfigMaps (the admission policy limits which); create and patch events
    ("", "configmaps", "", "create"),
    ("", "events", "", "create"),
    ("", "events", "", "patch"),
    # list pods (those labelled for injection: the ones that missed it)
    ("", "pods", "", "list"),
}


def rights(role: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """Every (API group, resource, resource name, verb) a role grants."""
    granted = set()
    for rule in role["rules"]:
        for group in rule.get("apiGroups", []):
            for resource in rule["resources"]:
                for name in rule.get("resourceNames") or [""]:
                    for verb in rule["verbs"]:
                        granted.add((group, resource, name, verb))
    return granted


def test_the_operators_cluster_role_grants_exactly_what_the_security_page_lists(
    control_plane,
) -> None:
    sentence = " ".join(SECURITY_PAGE.read_text().split())
    for words in (
        "get, list and watch MCPServers and the MCPServer CRD",
        "get, patch and update MCPServers' status",
        "get, list, watch, update and patch ConfigMaps named `mcpcache-servers`",
        "create events, and patch them",
        "get and update its Lease in the release namespace, and create it",
        "list pods, to find those labelled for injection that missed it",
        "Nothing else: no Secrets, no other right on Pods, no deletes, no webhook configuration",
    ):
        assert words in sentence
    documents = render(control_plane)
    (binding,) = [d for d in documents if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "mcpcache-operator", "namespace": "mcpcache-system"}
    ]
    role = next(
        d
        for d in documents
        if d["kind"] == "ClusterRole" and d["metadata"]["name"] == binding["roleRef"]["name"]
    )
    assert rights(role) == DOCUMENTED_RIGHTS
    # get and update its Lease in the release namespace, and create it: nothing more.
    (lease_role,) = [d for d in documents if d["kind"] == "Role"]
    assert lease_role["metadata"]["namespace"] == "mcpcache-system"
    (lease,) = {name for _, _, name, _ in rights(lease_role) if name}
    assert rights(lease_role) == {
        ("coordination.k8s.io", "leases", lease, "get"),
        ("coordination.k8s.io", "leases", lease, "update"),
        ("coordination.k8s.io", "leases", "", "create"),
    }
    (lease_binding,) = [d for d in documents if d["kind"] == "RoleBinding"]
    assert lease_binding["roleRef"]["name"] == lease_role["metadata"]["name"]
    assert lease_binding["subjects"] == binding["subjects"]


def test_the_webhook_fails_open_and_skips_system_and_release_namespaces(control_plane) -> None:
    documents = render(control_plane)
    (configuration,) = [d for d in documents if d["kind"] == "MutatingWebhookConfiguration"]
    (webhook,) = configuration["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    (excluded,) = webhook["namespaceSelector"]["matchExpressions"]
    assert excluded["key"] == "kubernetes.io/metadata.name"
    assert excluded["operator"] == "NotIn"
    assert sorted(excluded["values"]) == ["kube-node-lease", "kube-system", "mcpcache-system"]


def test_the_injected_sidecar_gets_the_documented_resources_and_port(control_plane) -> None:
    documents = render(control_plane)
    (deployment,) = [d for d in documents if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    environ = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    resources = json.loads(environ["MCPCACHE_SIDECAR_RESOURCES"])
    assert resources == {
        "requests": {"cpu": "50m", "memory": "96Mi"},
        "limits": {"memory": "192Mi"},
    }
    assert "MCPCACHE_NAMESPACES" not in environ or environ["MCPCACHE_NAMESPACES"] == ""
    assert environ["MCPCACHE_SIDECAR_TRACING_ENABLED"] == "false"

    settings = OperatorSettings.from_environment(environ | {"MCPCACHE_SIDECAR_IMAGE": "i:1"})
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "a"}]}}
    plan = plan_injection(pod, settings)
    assert plan is not None
    (sidecar,) = plan["initContainers"]
    assert sidecar["resources"] == resources
    assert sidecar["ports"] == [{"name": "mcpcache-prom", "containerPort": 9090}]
    assert not any(e["name"].startswith("OTEL_") for e in sidecar["env"]), "no tracing by default"


def test_names_labels_and_the_operators_pod_values_reach_every_object(
    control_plane, values_file
) -> None:
    documents = render(control_plane, "-f", str(values_file))
    for document in documents:
        labels = document["metadata"]["labels"]
        assert labels["team"] == "platform", document["kind"]
        assert labels["app.kubernetes.io/name"] == "cache", "commonLabels add, never replace"
    deployment = by_kind(documents, "Deployment")
    template = deployment["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "platform"
    assert template["metadata"]["labels"]["app.kubernetes.io/component"] == "operator"
    assert deployment["spec"]["selector"]["matchLabels"].items() <= (
        template["metadata"]["labels"].items()
    )
    pod = template["spec"]
    assert pod["priorityClassName"] == "mcpcache-operator"
    assert pod["topologySpreadConstraints"] == NON_DEFAULT["operator"]["topologySpreadConstraints"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }, "runAsUser null: the platform assigns the user"
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MCPCACHE_SIDECAR_RUN_AS_USER"] == "null"
    assert env["MCPCACHE_INJECTION_IMAGE_PULL_SECRETS"] == "agents-registry"
    assert (
        OperatorSettings.from_environment(
            {k: v for k, v in env.items() if v is not None}
        ).sidecar_run_as_user
        is None
    )

    renamed = render(control_plane, "--set", "fullnameOverride=cache")
    names = {d["metadata"]["name"] for d in renamed if d["kind"] != "ClusterRole"}
    assert "cache-operator" in names
    assert all(n.startswith("cache-") for n in names), names
    defaults = by_kind(render(control_plane), "Deployment")["spec"]["template"]["spec"]
    assert "priorityClassName" not in defaults
    assert defaults["securityContext"]["runAsUser"] == 65532


def test_an_image_digest_wins_over_the_tag_for_the_operator_and_the_sidecar(
    control_plane,
) -> None:
    digest = f"image.digest={DIGEST}"
    documents = render(control_plane, "--set", digest, "--set", "image.tag=9.9.9")
    (container,) = by_kind(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == f"ghcr.io/mcpcache/mcpcache@{DIGEST}"
    assert env["MCPCACHE_SIDECAR_IMAGE"] == f"ghcr.io/mcpcache/mcpcache@{DIGEST}"
    own = render(control_plane, "--set", digest, "--set", "sidecar.image.tag=slim")
    (container,) = by_kind(own, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MCPCACHE_SIDECAR_IMAGE"] == "ghcr.io/mcpcache/mcpcache:slim"
    refused = control_plane.run_helm(
        "template", "mcpcache", str(CHART), "--set", "image.digest=latest", check=False
    )
    assert "/image/digest" in refused.stderr


def test_chart_yaml_has_the_metadata_and_artifact_hub_annotations_of_the_chart(
    control_plane,
) -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"].startswith("https://")
    assert chart["sources"]
    assert chart["maintainers"][0]["name"]
    assert chart["icon"].endswith("/images/icon.svg")
    assert (ROOT / "docs" / "images" / "icon.svg").is_file(), "the icon is on the docs site"
    notes = chart["annotations"]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'license = "{notes["artifacthub.io/license"]}"' in pyproject
    (image,) = yaml.safe_load(notes["artifacthub.io/images"])
    (container,) = by_kind(render(control_plane), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    assert image["image"] == container["image"], "the image the chart installs by default"
    (listed,) = yaml.safe_load(notes["artifacthub.io/crds"])
    definition = yaml.safe_load(CRD.read_text())
    assert listed["name"] == definition["metadata"]["name"]
    assert listed["kind"] == definition["spec"]["names"]["kind"]
    assert listed["version"] in [v["name"] for v in definition["spec"]["versions"]]
    for key in ("links", "changes", "crdsExamples"):
        assert yaml.safe_load(notes[f"artifacthub.io/{key}"])
