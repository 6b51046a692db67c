from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from peers.binaries import go_built
from peers.controlplane import BIN_ENV, Authority, ControlPlane
from peers.echo import EchoUpstream
from peers.faulty import FaultyUpstream
from peers.operator import (
    OPERATOR_NAMESPACE,
    ChartWebhook,
    OperatorProcess,
    install_operator_rbac,
)
from peers.paths import CHART, CRD
from peers.rediscluster import RedisCluster
from peers.redissentinel import RedisSentinel
from peers.redisserver import RedisServer, redis_server_binary
from peers.serving import STOPPING, ServedApp, served, wait_until
from peers.sidecar import RunningSidecar, one_server
from peers.upstream import Upstream

MARKERS = (
    "cluster: runs pods on the real one-node cluster of tests/cluster "
    "(root only; MCPCACHE_CLUSTER=0 skips)",
    "controlplane: uses the real kube-apiserver and etcd",
    "prometheus: uses the suite's Prometheus",
    "redis: uses a real redis-server",
    "typescript: uses the TypeScript SDK peer",
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


@pytest.fixture
def own_upstream() -> Iterator[tuple[Upstream, ServedApp]]:
    """A JSON-answering SDK server of the test's own: its counts are the test's, and
    the test may stop it."""
    peer = Upstream()
    app = ServedApp(peer.app(json_response=True)).start()
    yield peer, app
    if app.server.started and not app.server.should_exit:
        app.stop_soon()


@pytest.fixture(scope="session")
def echo_upstream() -> Iterator[tuple[EchoUpstream, ServedApp]]:
    """A raw upstream that answers as each call's arguments ask (see `peers.echo`)."""
    peer = EchoUpstream()
    with served(peer, lifespan="off") as app:
        yield peer, app


@pytest.fixture(scope="session")
def faulty_upstream() -> Iterator[FaultyUpstream]:
    """A raw-socket upstream whose path picks a fault (see `peers.faulty`)."""
    peer = FaultyUpstream().start()
    yield peer
    peer.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real Redis for the run, on a free loopback port; emptied by tests that need it."""
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A Redis of the test's own, for tests that stop and restart it."""
    server = RedisServer(redis_server_binary()).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """One real Redis Cluster for the run (3 primaries, 3 replicas); never failed over."""
    cluster = RedisCluster(redis_server_binary()).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def own_redis_cluster() -> Iterator[RedisCluster]:
    """A Redis Cluster of the test's own, for a test that kills a primary."""
    cluster = RedisCluster(redis_server_binary()).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[RedisSentinel]:
    """One Sentinel-managed Redis for the run (a primary, a replica, three sentinels)."""
    deployment = RedisSentinel(redis_server_binary()).start()
    yield deployment
    deployment.stop()


@pytest.fixture
def own_redis_sentinel() -> Iterator[RedisSentinel]:
    """A Sentinel-managed Redis of the test's own, for a test that kills the primary."""
    deployment = RedisSentinel(redis_server_binary()).start()
    yield deployment
    deployment.stop()


SidecarFactory = Callable[..., RunningSidecar]


@pytest.fixture
def make_sidecar(tmp_path: Path) -> Iterator[SidecarFactory]:
    """Start sidecars from config documents; stopped at the end of the test."""
    running: list[RunningSidecar] = []

    def start(document: dict[str, Any], projected: bool = False) -> RunningSidecar:
        """`projected`: in a folder of its own, updated as the kubelet updates a mount."""
        path = tmp_path / f"sidecar-{len(running)}.yaml"
        if projected:
            path = tmp_path / f"mounted-{len(running)}" / "config.yaml"
        sidecar = RunningSidecar(path, document, projected).start()
        running.append(sidecar)
        return sidecar

    yield start
    for sidecar in running:
        sidecar.stop_soon()


@pytest.fixture
def sidecar_on_echo(make_sidecar: SidecarFactory, echo_upstream) -> RunningSidecar:
    """A sidecar caching one server, `echo`, on the raw upstream that says who asked."""
    return make_sidecar(one_server(echo_upstream[1].base_url + "/mcp", name="echo"))


def server_entry(name: str, url: str, **cache: Any) -> dict[str, Any]:
    return {"name": name, "url": url, "cache": {"enabled": True, **cache}}


@pytest.fixture
def sidecar(
    make_sidecar: SidecarFactory,
    upstream: tuple[Upstream, ServedApp],
    json_upstream: tuple[Upstream, ServedApp],
) -> RunningSidecar:
    """A sidecar with `sse` and `json` upstreams cached, and `plain` uncached."""
    return make_sidecar(
        {
            "appId": "agent-a",
            "servers": [
                server_entry("sse", upstream[1].base_url + "/mcp"),
                server_entry("json", json_upstream[1].base_url + "/mcp"),
                {"name": "plain", "url": upstream[1].base_url + "/mcp"},
            ],
        }
    )


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
    control_plane.run_kubectl("apply", "-f", str(CRD))
    extensions = client.ApiextensionsV1Api(control_plane.api_client())

    def established() -> bool:
        crd = extensions.read_custom_resource_definition("mcpservers.mcpcache.io")
        return any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        )

    wait_until(established, 30, "the MCPServer CRD")


@pytest.fixture(scope="session")
def webhook_ca() -> Authority:
    return Authority.create("mcpcache-webhook-ca")


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
    "otelcol_bin": "otelcol",
    "uncached_plane": "controlplane",
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
