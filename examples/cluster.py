"""The chart on a real node (run by examples/cluster.sh, which builds what it needs).

Starts the one-node cluster the tests use (tests/peers/node.py), installs the chart as
README's "Deploy on Kubernetes" says, runs an MCP server and an agent in pods, has the
agent call the same tool three times through its injected sidecar, and takes
everything down again, also on Ctrl-C or an error.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from peers.node import Node
from peers.paths import CHART
from peers.sidecar import parse_samples
from peers.workloads import (
    AGENTS,
    OPERATOR_NAMESPACE,
    RELEASE,
    TOOLS,
    Agent,
    Server,
    agent_calls,
    agent_objects,
    apply,
    mcp_server_objects,
    ready_pods,
    sidecar_metrics,
    wait_for,
)


def step(text: str) -> None:
    print(f"\n== {text}", flush=True)


def interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def demo(node: Node, keep: bool) -> None:
    core = client.CoreV1Api(node.api_client())
    repository, tag = node.images["mcpcache"].rsplit(":", 1)
    step(
        f"helm install {RELEASE} charts/mcpcache -n {OPERATOR_NAMESPACE} --create-namespace "
        f"--set image.repository={repository} --set image.tag={tag}"
    )
    node.run_helm(
        "install", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "--create-namespace",
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
    )  # fmt: skip

    def two_ready() -> list[Any] | None:
        pods = ready_pods(core, OPERATOR_NAMESPACE, "app.kubernetes.io/name=mcpcache")
        return pods if len(pods) == 2 else None

    operators = wait_for(two_ready, 240, "two ready operator pods")
    for pod in operators:
        print(f"   operator pod {pod.metadata.name} ready at {pod.status.pod_ip}")

    step(f"an MCP server (the SDK's, tests/cluster/pods/server.py) in namespace {TOOLS}")
    apply(node, *mcp_server_objects(node.images["peers"]))
    wait_for(lambda: ready_pods(core, TOOLS, "app=docs-mcp"), 180, "the MCP server pod")
    ip = core.read_namespaced_service("docs-mcp", TOOLS).spec.cluster_ip
    server = Server(f"http://{ip}:8000")
    print(f"   Service docs-mcp at {server.url}")

    step(f"namespace {AGENTS} (restricted): MCPServer docs, an agent labelled for injection")
    apply(node, *agent_objects(node.images["peers"], server.url))
    (pod,) = wait_for(lambda: ready_pods(core, AGENTS, "app=agent"), 180, "the agent pod")
    agent = Agent(pod.metadata.name)
    for container in pod.spec.init_containers or []:
        print(f"   {pod.metadata.name}: init container {container.name}, restartPolicy "
              f"{container.restart_policy} (a native sidecar)")  # fmt: skip
    for container in pod.spec.containers:
        print(f"   {pod.metadata.name}: container {container.name}")

    step("the agent calls echo three times with the same text, through $MCPCACHE_URL/docs")
    outcome = agent_calls(node, agent, server, uuid.uuid4().hex[:8], 3)
    calls = zip(outcome["texts"], outcome["headers"], strict=True)
    for number, (text, header) in enumerate(calls, 1):
        age = f"  Age: {header['age']}" if header["age"] else ""
        print(f"   call {number}: {text}  Cache-Status: {header['cache_status']}{age}")
    ran = outcome["runs_after"] - outcome["runs_before"]
    print(f"   the server ran echo {ran} time(s)")
    print("   from the sidecar's /metrics (through the pod's IP):")
    for (name, labels), value in parse_samples(sidecar_metrics(node, agent)).items():
        if name == "mcpcache_requests_total" and value:
            shown = ",".join(f'{k}="{v}"' for k, v in labels)
            print(f"     {name}{{{shown}}} {value:g}")

    if keep:
        step(f"the node is up: KUBECONFIG={node.kubeconfig} (Ctrl-C takes it down)")
        while True:
            time.sleep(3600)


def main() -> None:
    keep = "--keep" in sys.argv[1:]
    signal.signal(signal.SIGTERM, interrupt)
    node = Node(
        Path(os.environ["MCPCACHE_CONTROLPLANE_BIN"]),
        Path(os.environ["MCPCACHE_NODE_BIN"]),
        Path(os.environ["MCPCACHE_IMAGES"]),
    )
    step(
        "the node: etcd and kube-apiserver, containerd, controller-manager, scheduler, "
        f"kube-proxy and kubelet, in network namespace {node.netns}"
    )
    started = time.monotonic()
    try:
        node.start()
        print(f"   node Ready after {time.monotonic() - started:.1f} s")
        demo(node, keep)
    except KeyboardInterrupt:
        print("\n   interrupted")
    finally:
        step("taking everything down: pods, processes, mounts, cgroups, the namespace")
        node.stop()
        left = node.leftovers()
        print(f"   left behind: {left or 'nothing'}")


if __name__ == "__main__":
    main()
