"""What the cluster tests run on the node: manifests for the MCP server, the agent and
their namespaces, and the calls a test makes into the pods (with `kubectl exec`)."""

from __future__ import annotations

import copy
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from .controlplane import ControlPlane
from .paths import ROOT

PODS = ROOT / "tests" / "cluster" / "pods"
RELEASE, OPERATOR_NAMESPACE = "mcpcache", "mcpcache-system"
AGENTS, TOOLS = "agents", "tools"
SERVER_PORT = 8000

RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}
RESTRICTED_POD = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass
class Chart:
    image: str
    seconds: float
    """From `helm install` to two ready operator pods."""


@dataclass
class Server:
    url: str
    """The MCP server's base URL through its Service's cluster IP."""


@dataclass
class Agent:
    pod: str
    """The agent pod's name (namespace `agents`)."""


def apply(plane: ControlPlane, *documents: dict[str, Any]) -> None:
    text = yaml.safe_dump_all(documents)
    result = subprocess.run(
        [str(plane.kubectl), f"--kubeconfig={plane.kubeconfig}", "apply", "-f", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def wait_for(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `check` until it returns something true; API errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            if result := check():
                return result
        except client.ApiException as error:
            last = error
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout}s (last error: {last})")
        time.sleep(0.25)


def ready_pods(core: client.CoreV1Api, namespace: str, selector: str) -> list[Any]:
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return [
        p
        for p in pods
        if p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def program_configmap(name: str, namespace: str, path: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {path.name: path.read_text()},
    }


def namespace(name: str) -> dict[str, Any]:
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def deployment(
    name: str,
    namespace: str,
    image: str,
    command: list[str],
    program: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    port: int | None = None,
) -> dict[str, Any]:
    """A restricted Deployment of one pod running `command` in `image`, with the
    ConfigMap `program` at /program."""
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "Never",
        "command": command,
        "securityContext": RESTRICTED_CONTAINER,
        "volumeMounts": [{"name": "program", "mountPath": "/program", "readOnly": True}],
    }
    if port:
        container["ports"] = [{"containerPort": port, "name": "mcp"}]
        container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 1}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name, **(labels or {})},
                    "annotations": annotations or {},
                },
                "spec": {
                    "securityContext": RESTRICTED_POD,
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                    "volumes": [{"name": "program", "configMap": {"name": program}}],
                },
            },
        },
    }


def mcp_server_objects(image: str) -> list[dict[str, Any]]:
    """The SDK server (pods/server.py) in namespace `tools`, behind the Service docs-mcp."""
    return [
        namespace(TOOLS),
        program_configmap("docs-server", TOOLS, PODS / "server.py"),
        deployment(
            "docs-mcp",
            TOOLS,
            image,
            ["python", "/program/server.py"],
            "docs-server",
            port=SERVER_PORT,
        ),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "docs-mcp", "namespace": TOOLS},
            "spec": {
                "selector": {"app": "docs-mcp"},
                "ports": [{"port": SERVER_PORT, "targetPort": "mcp"}],
            },
        },
    ]


def mcpserver(url: str, **cache: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mcpcache.io/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": "docs", "namespace": AGENTS},
        "spec": {
            "endpoint": {"streamableHTTP": {"url": f"{url}/mcp"}},
            "cache": {"enabled": True, "ttl": "10m", **cache},
        },
    }


def agent_objects(image: str, server_url: str) -> list[dict[str, Any]]:
    """The namespace `agents`, its MCPServer `docs`, and an agent Deployment labelled
    for injection whose container idles until a test runs pods/agent.py in it."""
    return [
        namespace(AGENTS),
        mcpserver(server_url),
        program_configmap("agent-program", AGENTS, PODS / "agent.py"),
        deployment(
            "agent",
            AGENTS,
            image,
            ["sleep", "infinity"],
            "agent-program",
            labels={"mcpcache.io/inject": "true"},
            annotations={"mcpcache.io/app-id": "agent"},
        ),
    ]


def agent_pod(name: str, image: str) -> dict[str, Any]:
    """A bare agent pod labelled for injection (namespace given at creation)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"mcpcache.io/inject": "true"}},
        "spec": {
            "securityContext": copy.deepcopy(RESTRICTED_POD),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "agent",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "securityContext": copy.deepcopy(RESTRICTED_CONTAINER),
                }
            ],
        },
    }


def run_in(plane: ControlPlane, pod: str, container: str, *command: str) -> str:
    result = plane.run_kubectl(
        "exec", "-n", AGENTS, pod, "-c", container, "--", *command, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def agent_calls(plane: ControlPlane, agent: Agent, server: Server, text: str, count: int) -> Any:
    """pods/agent.py in the agent's container: `count` echo calls through its sidecar."""
    command = ["python", "/program/agent.py", "docs", text, str(count), server.url]
    return json.loads(run_in(plane, agent.pod, "agent", *command))


def sidecar_metrics(plane: ControlPlane, agent: Agent) -> str:
    """The injected sidecar's /metrics through the pod's IP (where it listens, as a
    Prometheus scrapes it), fetched from the agent's container."""
    core = client.CoreV1Api(plane.api_client())
    ip = core.read_namespaced_pod(agent.pod, AGENTS).status.pod_ip
    fetch = (
        f"import urllib.request as u; print(u.urlopen('http://{ip}:9090/metrics').read().decode())"
    )
    return run_in(plane, agent.pod, "agent", "python", "-c", fetch)
