"""What every folder of the suite needs: the markers (and the hook that marks a test by the
peers it uses), the wait at the end of the session for peers stopping in the background,
and the session peers of more than one top-level folder (the SDK's servers; the control
plane, the CRD and the operator). Being here also puts tests/ on the import path, so that
every test imports `peers`. A peer that one folder uses has its fixture in that folder's
conftest.py (tests/README.md)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from peers.binaries import go_built
from peers.controlplane import BIN_ENV, ControlPlane
from peers.operator import (
    OPERATOR_NAMESPACE,
    ChartWebhook,
    OperatorProcess,
    install_operator_rbac,
)
from peers.paths import CHART, CRD
from peers.resources import GROUP, PLURAL, VERSION, mcpserver
from peers.serving import STOPPING, ServedApp, wait_until
from peers.upstream import Upstream

MARKERS = (
    "cluster: runs pods on the real one-node cluster of tests/cluster "
    "(root only; MCPCACHE_CLUSTER=0 skips)",
    "controlplane: uses the real kube-apiserver and etcd",
    "prometheus: uses the suite's Prometheus",
    "redis: uses a real redis-server",
    "typescript: uses the TypeScript SDK peer (or the conformance suite, which runs on it)",
    "otelcol: uses the suite's OpenTelemetry Collector",
    "slow: waits a second or more by design: for a TTL, an age in whole seconds, the "
    "config reload (polled each second), a timeout, a run of fixed length or a fresh install",
)
"""What a test needs, to pick a fast set (see tests/README.md). `cluster` is set
by tests/cluster, `slow` by the tests themselves (and `PEER_MARKERS`), the others from
the fixtures a test uses (`PEER_MARKERS`)."""


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)


@pytest.fixture(scope="session", autouse=True)
def stopping() -> Iterator[None]:
    """The peers whose teardown left their last steps for later have all stopped by the
    end of the session (or it fails)."""
    yield
    STOPPING.finish()


@pytest.fixture(scope="session")
def upstream() -> Iterator[tuple[Upstream, ServedApp]]:
    """An SDK server answering with SSE streams (its default)."""
    peer = Upstream()
    app = ServedApp(peer.app()).start()
    yield peer, app
    app.stop()


@pytest.fixture(scope="session")
def json_upstream() -> Iterator[tuple[Upstream, ServedApp]]:
    """An SDK server answering with plain application/json bodies."""
    peer = Upstream()
    app = ServedApp(peer.app(json_response=True)).start()
    yield peer, app
    app.stop()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A real kube-apiserver with etcd, RBAC on, admin kubeconfig at `.kubeconfig`."""
    build = Path(__file__).parent / "controlplane" / "build.sh"
    plane = ControlPlane(go_built(BIN_ENV, build, "the test control plane")).start()
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> None:
    """The CRD's folder as the docs apply it: the CRD and its admission policy, both in
    effect (the policy refuses a bad tool rule) before a test uses them."""
    control_plane.run_kubectl("apply", "-f", str(CRD.parent))
    extensions = client.ApiextensionsV1Api(control_plane.api_client())

    def established() -> bool:
        crd = extensions.read_custom_resource_definition("mcpservers.mcpcache.io")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_until(established, 30, "the MCPServer CRD")
    objects = client.CustomObjectsApi(control_plane.api_client())
    bad = mcpserver("policy-probe", tools=[{"name": "a", "invalidates": [7]}])

    def policy_in_effect() -> bool:
        try:
            objects.create_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, bad, dry_run="All", _request_timeout=10
            )
        except ApiException as refused:
            return refused.status == 422
        return False

    wait_until(policy_in_effect, 30, "the MCPServer admission policy")


@dataclass
class OperatorInstall:
    """What the chart installs for the operator: its account's kubeconfig, and the
    webhook (configuration, Service, certificate) whose endpoint a test may move."""

    kubeconfig: Path
    webhook: ChartWebhook


@pytest.fixture(scope="session")
def operator_install(control_plane: ControlPlane, crd: None) -> Iterator[OperatorInstall]:
    core = client.CoreV1Api(control_plane.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=OPERATOR_NAMESPACE)))
    kubeconfig = install_operator_rbac(control_plane, CHART, OPERATOR_NAMESPACE)
    webhook = ChartWebhook(control_plane, CHART, OPERATOR_NAMESPACE)
    yield OperatorInstall(kubeconfig, webhook)
    admission = client.AdmissionregistrationV1Api(control_plane.api_client())
    admission.delete_mutating_webhook_configuration(webhook.name, _request_timeout=30)


@pytest.fixture(scope="session")
def operator(operator_install: OperatorInstall) -> Iterator[OperatorProcess]:
    """The operator, running as its service account with only the chart's RBAC, serving
    the certificate the chart generated, behind the chart's own webhook configuration
    (reached through its Service)."""
    process = OperatorProcess(operator_install.kubeconfig, operator_install.webhook.certificate)
    process.start()
    operator_install.webhook.install(process.webhook_port)
    try:
        yield process
    finally:
        process.stop()


PEER_MARKERS = {
    "control_plane": "controlplane",
    "prometheus_bin": "prometheus",
    "redis_server": "redis",
    "own_redis_server": "redis",
    "redis_cluster": "redis",
    "own_redis_cluster": "redis",
    "redis_sentinel": "redis",
    "own_redis_sentinel": "redis",
    "ts_server": "typescript",
    "conformance_suite": "typescript",
    "otelcol_bin": "otelcol",
    "uncached_plane": "controlplane",
    "upgrade_plane": "controlplane",
    "image_venv": "slow",
}
"""Fixtures that start a slow or external peer (or install one), and the marker a test
using one gets."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the peers it uses (its fixtures, however indirect), so that a
    fast set can leave them out: `-m "not controlplane and not prometheus"`."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for fixture, marker in PEER_MARKERS.items():
            if fixture in used:
                item.add_marker(marker)
