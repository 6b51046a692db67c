"""The suite's Prometheus scrapes an injected sidecar through its pod's IP, as a
PodMonitor on the port `mcpcache-prom` would."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from peers.binaries import go_built
from peers.node import Node
from peers.prometheus import BIN_ENV, SIDECAR_JOB, PrometheusServer
from peers.workloads import AGENTS, Agent, Server, agent_calls


@pytest.fixture
def prometheus(node: Node) -> Iterator[PrometheusServer]:
    """Prometheus in the node's network namespace, where pod IPs are reached."""
    build = Path(__file__).parents[1] / "prometheus" / "build.sh"
    server = PrometheusServer(go_built(BIN_ENV, build, "Prometheus"), netns=node.netns)
    server.start(jobs=(SIDECAR_JOB,))
    yield server
    server.stop()


def test_prometheus_scrapes_the_injected_sidecar_through_the_pod_ip(
    node: Node, agent: Agent, mcp_server: Server, prometheus: PrometheusServer
) -> None:
    pod = client.CoreV1Api(node.api_client()).read_namespaced_pod(agent.pod, AGENTS)
    (port,) = [
        p.container_port
        for c in pod.spec.init_containers
        for p in c.ports or []
        if p.name == "mcpcache-prom"
    ]
    prometheus.scrape(SIDECAR_JOB, f"{pod.status.pod_ip}:{port}")
    hits = 'sum(mcpcache_requests_total{server="docs", method="tools/call", outcome="hit"})'
    before = prometheus.values(hits)
    agent_calls(node, agent, mcp_server, uuid.uuid4().hex, 3)
    start = next(iter(before.values()), 0.0)
    prometheus.wait_for(
        hits, lambda result: bool(result) and float(result[0]["value"][1]) == start + 2
    )
