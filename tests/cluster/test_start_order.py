"""What a platform team's pods need on a real node: the app starts only once its sidecar
answers, a pod that runs daprd gets the sidecar beside it, and `helm test` passes."""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

from kubernetes import client

from peers.node import Node
from peers.workloads import (
    AGENTS,
    OPERATOR_NAMESPACE,
    RELEASE,
    Agent,
    Chart,
    Server,
    agent_calls,
    agent_pod,
    wait_for,
)

FIRST_CALL = r"""
port=${MCPCACHE_URL#http://localhost:}; port=${port%%/*}
if ! exec 3<>"/dev/tcp/127.0.0.1/$port"; then echo "refused on $port"; exit 3; fi
body='{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
head='POST /mcp/docs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n'
head+='Accept: application/json, text/event-stream\r\nConnection: close\r\n'
printf '%bContent-Length: %d\r\n\r\n%s' "$head" "${#body}" "$body" >&3
IFS= read -r status <&3
echo "answered ${status%$'\r'}"
"""
"""The app's very first instruction, in bash (which starts in milliseconds, where Python
takes a tenth of a second): open a connection to the sidecar and send one request. Any
HTTP answer means the sidecar was listening; a refused connection means the app
started first."""


def first_call_pod(name: str, image: str) -> dict[str, Any]:
    pod = agent_pod(name, image)
    pod["spec"]["restartPolicy"] = "Never"  # a refused call is not hidden by a restart
    pod["spec"]["containers"][0]["command"] = ["bash", "-c", FIRST_CALL]
    return pod


def phase(core: client.CoreV1Api, name: str) -> str | None:
    found: str | None = core.read_namespaced_pod(name, AGENTS).status.phase
    return found if found in ("Succeeded", "Failed") else None


def test_the_apps_first_instruction_finds_the_sidecar_answering_on_every_start(
    node: Node, agent: Agent
) -> None:
    core = client.CoreV1Api(node.api_client())
    names = [f"first-call-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    try:
        for name in names:
            core.create_namespaced_pod(AGENTS, first_call_pod(name, node.images["peers"]))
        ended = {}
        for name in names:
            ended[name] = wait_for(lambda name=name: phase(core, name), 120, f"{name} to end")
        logs = {
            name: core.read_namespaced_pod_log(name, AGENTS, container="agent") for name in names
        }
        assert ended == dict.fromkeys(names, "Succeeded"), logs
        for name in names:
            assert logs[name].startswith("answered"), logs[name]
            pod = core.read_namespaced_pod(name, AGENTS)
            (sidecar,) = pod.spec.init_containers
            assert sidecar.startup_probe.http_get.path == "/readyz"
    finally:
        for name in names:
            core.delete_namespaced_pod(name, AGENTS, grace_period_seconds=0)


DAPRD_STAND_IN = """
import http.server, threading
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"daprd stand-in")
servers = [http.server.ThreadingHTTPServer(("0.0.0.0", port), Answer) for port in (3500, 9090)]
for server in servers[1:]:
    threading.Thread(target=server.serve_forever, daemon=True).start()
servers[0].serve_forever()
"""
"""Listens where daprd does (HTTP 3500, metrics 9090): the ports the sidecar would take."""


def dapr_pod(name: str, image: str) -> dict[str, Any]:
    pod = agent_pod(name, image)
    pod["metadata"]["annotations"] = {"dapr.io/enabled": "true", "dapr.io/app-id": "agent"}
    agent = pod["spec"]["containers"][0]
    agent["volumeMounts"] = [{"name": "program", "mountPath": "/program", "readOnly": True}]
    daprd = copy.deepcopy(agent)
    daprd.update(name="daprd", command=["python", "-c", DAPRD_STAND_IN])
    daprd["ports"] = [
        {"name": "dapr-http", "containerPort": 3500},
        {"name": "dapr-metrics", "containerPort": 9090},
    ]
    daprd["readinessProbe"] = {"tcpSocket": {"port": 3500}, "periodSeconds": 1}
    del daprd["volumeMounts"]
    pod["spec"]["containers"].append(daprd)
    pod["spec"]["volumes"] = [{"name": "program", "configMap": {"name": "agent-program"}}]
    return pod


def test_a_pod_that_runs_daprd_gets_the_sidecar_on_other_ports_and_calls_through_it(
    node: Node, agent: Agent, mcp_server: Server
) -> None:
    core = client.CoreV1Api(node.api_client())
    name = f"dapr-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(AGENTS, dapr_pod(name, node.images["peers"]))
    try:
        wait_for(
            lambda: any(
                c.type == "Ready" and c.status == "True"
                for c in core.read_namespaced_pod(name, AGENTS).status.conditions or []
            ),
            120,
            "the pod with daprd and the sidecar to be ready",
        )
        pod = core.read_namespaced_pod(name, AGENTS)
        (sidecar,) = pod.spec.init_containers
        env = {e.name: e.value for e in sidecar.env if e.value is not None}
        assert (env["MCPCACHE_LISTEN_PORT"], env["MCPCACHE_METRICS_PORT"]) == ("3510", "9190")
        text = uuid.uuid4().hex
        outcome = agent_calls(node, Agent(name), mcp_server, text, 2)
        assert [h["cache_status"] for h in outcome["headers"]] == [
            "mcpcache; fwd=miss; stored",
            "mcpcache; hit",
        ]
    finally:
        core.delete_namespaced_pod(name, AGENTS, grace_period_seconds=0)


def test_helm_test_calls_through_an_injected_sidecar(node: Node, chart: Chart) -> None:
    """The test pod runs in `default` (the release's namespace is never injected): it
    fails unless the webhook gave it a sidecar and that sidecar answered."""
    result = node.run_helm(
        "test", RELEASE, "-n", OPERATOR_NAMESPACE, "--timeout", "120s", check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"Phase:\s+Succeeded", result.stdout), result.stdout
    core = client.CoreV1Api(node.api_client())
    pods = core.list_namespaced_pod("default", label_selector="app.kubernetes.io/component=test")
    assert pods.items == [], "deleted once it succeeded"
