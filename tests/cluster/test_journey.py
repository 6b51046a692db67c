"""A platform team's first install, on a real node: the agent's calls through the
sidecar the webhook injected, in running pods."""

from __future__ import annotations

import time
import uuid

from kubernetes import client
from packaging.utils import canonicalize_name

from peers.node import Node
from peers.paths import ROOT
from peers.sidecar import parse_samples, sample
from peers.workloads import (
    AGENTS,
    OPERATOR_NAMESPACE,
    Agent,
    Chart,
    Server,
    agent_calls,
    agent_pod,
    run_in,
    sidecar_metrics,
    wait_for,
)

TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CONFIGMAP = "mcpcache-servers"


def sidecar_sample(node: Node, agent: Agent, name: str, **labels: str) -> float:
    return sample(parse_samples(sidecar_metrics(node, agent)), name, **labels)


def test_the_agent_pod_runs_the_injected_native_sidecar(node: Node, agent: Agent) -> None:
    pod = client.CoreV1Api(node.api_client()).read_namespaced_pod(agent.pod, AGENTS)
    (sidecar,) = [c for c in pod.spec.init_containers or [] if c.name == "mcpcache"]
    assert sidecar.restart_policy == "Always"
    (status,) = pod.status.init_container_statuses
    assert status.ready
    assert status.started
    assert status.state.running is not None
    (agent_container,) = pod.spec.containers
    assert {"name": "MCPCACHE_URL", "value": "http://localhost:3500/mcp"} in [
        {"name": e.name, "value": e.value} for e in agent_container.env or []
    ]


def test_the_agents_second_call_through_its_sidecar_is_a_hit(
    node: Node, chart: Chart, agent: Agent, mcp_server: Server
) -> None:
    text = uuid.uuid4().hex
    outcome = agent_calls(node, agent, mcp_server, text, 2)
    first, second = outcome["headers"]
    assert first["cache_status"] == "mcpcache; fwd=miss; stored"
    assert second["cache_status"] == "mcpcache; hit"
    assert second["age"] is not None
    assert outcome["texts"][0] == outcome["texts"][1]
    assert outcome["runs_after"] == outcome["runs_before"] + 1, "one call reached the server"


def test_the_sidecar_runs_as_65532_on_a_read_only_root_without_the_token(
    node: Node, agent: Agent
) -> None:
    assert run_in(node, agent.pod, "mcpcache", "id", "-u").strip() == "65532"
    result = node.run_kubectl(
        "exec", "-n", AGENTS, agent.pod, "-c", "mcpcache", "--", "touch", "/tmp/x", check=False
    )
    assert result.returncode != 0
    assert "Read-only file system" in result.stderr
    assert run_in(node, agent.pod, "mcpcache", "ls", "-A", TOKEN_DIR).split() == []
    # The agent's own container still has its token: only the sidecar's view is hidden.
    assert "token" in run_in(node, agent.pod, "agent", "ls", TOKEN_DIR).split()


def _sidecar_config(node: Node, agent: Agent) -> str:
    return run_in(node, agent.pod, "mcpcache", "cat", "/etc/mcpcache/config.yaml")


def test_an_mcpserver_edit_reaches_the_running_sidecar_through_the_kubelets_projection(
    node: Node, agent: Agent, mcp_server: Server, timings: dict[str, float]
) -> None:
    core = client.CoreV1Api(node.api_client())
    before = _sidecar_config(node, agent)
    node.run_kubectl(
        "patch", "mcps", "docs", "-n", AGENTS, "--type=merge",
        "-p", '{"spec": {"cache": {"ttl": "7m"}}}',
    )  # fmt: skip
    edited = time.monotonic()
    text = wait_for(
        lambda: (
            (data := core.read_namespaced_config_map(CONFIGMAP, AGENTS).data["config.yaml"])
            != before
            and data
        ),
        30,
        "the operator to write the ConfigMap",
    )
    written = time.monotonic()
    wait_for(lambda: _sidecar_config(node, agent) == text, 90, "the projected file to change")
    projected = time.monotonic()
    timings["operator: MCPServer edit to ConfigMap"] = written - edited
    timings["kubelet: ConfigMap to projected file"] = projected - written
    # The kubelet refreshes a pod's ConfigMap volumes on its pod sync (syncFrequency,
    # 10 s on this node, 1 m by default), not on the ConfigMap's change.
    assert projected - written < 60
    reloads = wait_for(
        lambda: sidecar_sample(node, agent, "mcpcache_config_reloads_total", result="applied"),
        30,
        "the sidecar to reload",
    )
    assert reloads >= 1


def test_the_purge_annotation_empties_the_servers_entries_in_the_running_pod(
    node: Node, agent: Agent, mcp_server: Server, timings: dict[str, float]
) -> None:
    text = uuid.uuid4().hex
    outcome = agent_calls(node, agent, mcp_server, text, 2)
    assert [h["cache_status"] for h in outcome["headers"]] == [
        "mcpcache; fwd=miss; stored",
        "mcpcache; hit",
    ]
    node.run_kubectl(
        "annotate", "mcps", "docs", "-n", AGENTS, f"mcpcache.io/purge={text}", "--overwrite"
    )
    annotated = time.monotonic()

    def purged() -> bool:
        (header,) = agent_calls(node, agent, mcp_server, text, 1)["headers"]
        return bool(header["cache_status"].startswith("mcpcache; fwd=miss"))

    wait_for(purged, 90, "a miss after the purge")
    timings["purge annotation to an emptied entry"] = time.monotonic() - annotated
    (header,) = agent_calls(node, agent, mcp_server, text, 1)["headers"]
    assert header["cache_status"] == "mcpcache; hit", "the new answer is cached again"


def test_the_operator_pods_meet_restricted_and_run_as_65532_on_a_read_only_root(
    node: Node, chart: Chart
) -> None:
    result = node.run_kubectl(
        "label", "--dry-run=server", "--overwrite", "namespace", OPERATOR_NAMESPACE,
        "pod-security.kubernetes.io/enforce=restricted",
    )  # fmt: skip
    assert "Warning" not in result.stderr, result.stderr
    pods = client.CoreV1Api(node.api_client()).list_namespaced_pod(OPERATOR_NAMESPACE).items
    assert len(pods) == 2
    for pod in pods:
        command = ["exec", "-n", OPERATOR_NAMESPACE, pod.metadata.name, "--"]
        assert node.run_kubectl(*command, "id", "-u").stdout.strip() == "65532"
        touched = node.run_kubectl(*command, "touch", "/x", check=False)
        assert "Read-only file system" in touched.stderr


def test_the_running_image_holds_exactly_the_locked_packages(node: Node, agent: Agent) -> None:
    listed = run_in(node, agent.pod, "mcpcache", "python", "-m", "pip", "list", "--format=freeze")
    installed = dict(line.split("==") for line in listed.split())
    installed = {canonicalize_name(k): v for k, v in installed.items()}
    locked = {}
    for line in (ROOT / "requirements" / "image.txt").read_text().splitlines():
        if "==" in line and not line.startswith(" "):
            name, version = line.split()[0].split("==")
            locked[canonicalize_name(name)] = version
    assert installed.pop("mcpcache") == "0.1.0"
    # pip itself comes with the venv, not from the lock.
    installed.pop("pip")
    assert installed == locked


def test_a_service_named_mcpcache_metrics_in_the_namespace_does_not_break_the_sidecar(
    node: Node, chart: Chart, agent: Agent
) -> None:
    """The kubelet gives every pod service-link variables named after the namespace's
    Services: MCPCACHE_METRICS_PORT=tcp://... here, which is also the sidecar's setting."""
    core = client.CoreV1Api(node.api_client())
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "mcpcache-metrics"},
        "spec": {"selector": {"app": "agent"}, "ports": [{"port": 9090}]},
    }
    core.create_namespaced_service(AGENTS, service)
    name = "agent-beside-a-service"
    try:
        core.create_namespaced_pod(AGENTS, agent_pod(name, node.images["peers"]))
        wait_for(
            lambda: any(
                c.type == "Ready" and c.status == "True"
                for c in core.read_namespaced_pod(name, AGENTS).status.conditions or []
            ),
            90,
            "the pod with the sidecar to be ready",
        )
    finally:
        core.delete_namespaced_pod(name, AGENTS, grace_period_seconds=0)
        core.delete_namespaced_service("mcpcache-metrics", AGENTS)
