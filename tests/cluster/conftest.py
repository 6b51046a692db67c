"""The user's journey on a real node: the image built from the Dockerfile, the chart
installed with helm as README's "Install on Kubernetes" says, an MCP server pod behind a
Service, and an agent pod that gets the sidecar from the operator's webhook.

Everything here runs in pods of the one-node cluster of `peers.node`. The node, the
chart and the pods are started once per session (about a minute); each test then acts
on the running pods.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from peers.binaries import go_built
from peers.controlplane import BIN_ENV
from peers.node import IMAGES_ENV, NODE_BIN_ENV, Node
from peers.paths import CHART, ROOT
from peers.workloads import (
    AGENTS,
    OPERATOR_NAMESPACE,
    RELEASE,
    TOOLS,
    Agent,
    Chart,
    Server,
    agent_objects,
    apply,
    mcp_server_objects,
    ready_pods,
    wait_for,
)

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)
            # The first test waits for the node, the chart and the pods.
            item.add_marker(pytest.mark.timeout(600))


def _images(node_bin: Path) -> Path:
    if directory := os.environ.get(IMAGES_ENV):
        return Path(directory)
    script = ROOT / "tests" / "node" / "image.sh"
    out = subprocess.run(
        ["bash", str(script), str(node_bin / "pause")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        timeout=1800,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def node() -> Iterator[Node]:
    """The one-node cluster; its teardown fails the session if anything is left."""
    if os.environ.get("MCPCACHE_CLUSTER") == "0":
        pytest.skip("MCPCACHE_CLUSTER=0: the real node is left out")
    if os.geteuid() != 0:
        reason = "a node needs root (network namespace, cgroups, containerd)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    controlplane_bin = go_built(
        BIN_ENV, ROOT / "tests" / "controlplane" / "build.sh", "the test control plane"
    )
    node_bin = go_built(NODE_BIN_ENV, ROOT / "tests" / "node" / "build.sh", "the node")
    images = _images(node_bin)
    # A run ended with SIGTERM (a CI time limit, say) still takes the node down.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        cluster = Node(controlplane_bin, node_bin, images).start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        signal.signal(signal.SIGTERM, previous)
    left = cluster.leftovers()
    assert not left, f"the node left {left}"


@pytest.fixture(scope="session")
def timings(node: Node) -> Iterator[dict[str, float]]:
    """Durations the tests measure, in seconds: written as JSON to the file named by
    MCPCACHE_CLUSTER_TIMINGS at the end of the session, when set."""
    measured: dict[str, float] = dict(node.timings)
    yield measured
    if path := os.environ.get("MCPCACHE_CLUSTER_TIMINGS"):
        Path(path).write_text(json.dumps(measured, indent=2) + "\n")


@pytest.fixture(scope="session")
def chart(node: Node, timings: dict[str, float]) -> Iterator[Chart]:
    """`helm install` as README says, with the image built from the Dockerfile."""
    repository, tag = node.images["mcpcache"].rsplit(":", 1)
    started = time.monotonic()
    node.run_helm(
        "install", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "--create-namespace",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
    )  # fmt: skip
    core = client.CoreV1Api(node.api_client())
    selector = "app.kubernetes.io/name=mcpcache"
    wait_for(
        lambda: len(ready_pods(core, OPERATOR_NAMESPACE, selector)) == 2,
        240,
        "two ready operator pods",
    )
    timings["helm install to two ready operator pods"] = time.monotonic() - started
    yield Chart(node.images["mcpcache"], time.monotonic() - started)
    node.run_helm("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait", check=False)


@pytest.fixture(scope="session")
def mcp_server(node: Node) -> Server:
    """The SDK server in a pod of namespace `tools`, behind a Service."""
    apply(node, *mcp_server_objects(node.images["peers"]))
    core = client.CoreV1Api(node.api_client())
    wait_for(lambda: ready_pods(core, TOOLS, "app=docs-mcp"), 180, "the MCP server pod")
    service = core.read_namespaced_service("docs-mcp", TOOLS)
    return Server(f"http://{service.spec.cluster_ip}:8000")


@pytest.fixture(scope="session")
def agent(node: Node, chart: Chart, mcp_server: Server) -> Agent:
    """An agent Deployment labelled for injection, its MCPServer `docs` applied first."""
    apply(node, *agent_objects(node.images["peers"], mcp_server.url))
    core = client.CoreV1Api(node.api_client())
    (pod,) = wait_for(lambda: ready_pods(core, AGENTS, "app=agent"), 180, "the agent pod")
    return Agent(pod.metadata.name)
