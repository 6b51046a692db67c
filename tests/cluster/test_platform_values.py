"""What a platform with a private registry and user ids of its own sets, on a real node:
the chart's `injection.imagePullSecrets` reach the pods the webhook injects, beside the
pod's own (kept), and with `securityContext.runAsUser: null` the operator and the
injected sidecar run under restricted Pod Security with the uid the platform gives them
(here the pod's own security context, as OpenShift's restricted-v2 fills it in)."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from peers.node import Node
from peers.paths import CHART
from peers.workloads import (
    AGENTS,
    OPERATOR_NAMESPACE,
    RELEASE,
    Agent,
    Chart,
    agent_pod,
    ready_pods,
    run_in,
    wait_for,
)

OPERATOR = "app.kubernetes.io/name=mcpcache"


def _install(node: Node, chart: Chart, *values: str) -> None:
    repository, tag = chart.image.rsplit(":", 1)
    node.run_helm(
        "upgrade", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE,
        "--set", f"image.repository={repository}", "--set", f"image.tag={tag}", *values,
    )  # fmt: skip


def _operator_pods_with(core: client.CoreV1Api, user: int | None) -> list[Any]:
    """The two operator pods, once both are ready and run as `user` (None: unset)."""
    pods = ready_pods(core, OPERATOR_NAMESPACE, OPERATOR)
    users = {p.spec.security_context.run_as_user for p in pods}
    return pods if len(pods) == 2 and users == {user} else []


def _injected_on_dry_run(core: client.CoreV1Api, pod: dict[str, Any]) -> bool:
    made = core.create_namespaced_pod(AGENTS, pod, dry_run="All", _request_timeout=30)
    return any(c.name == "mcpcache" for c in made.spec.init_containers or [])


def _running(core: client.CoreV1Api, name: str) -> Any:
    """The pod, once it runs with its sidecar ready."""
    pod = core.read_namespaced_pod(name, AGENTS)
    statuses = pod.status.init_container_statuses or []
    return pod if pod.status.phase == "Running" and statuses and statuses[0].ready else None


def test_pull_secrets_and_a_platform_uid_reach_an_injected_pod(
    node: Node, chart: Chart, agent: Agent
) -> None:
    core = client.CoreV1Api(node.api_client())
    name = f"platform-{uuid.uuid4().hex[:6]}"
    secrets = "injection.imagePullSecrets[0].name=platform-registry"
    _install(node, chart, "--set", secrets, "--set", "securityContext.runAsUser=null")
    try:
        operators = wait_for(lambda: _operator_pods_with(core, None), 240, "the operator rolled")
        assert all(p.spec.security_context.run_as_non_root for p in operators)
        pod = agent_pod(name, node.images["peers"])
        pod["spec"]["imagePullSecrets"] = [{"name": "own-registry"}]
        # Ready pods are not yet a webhook the API server calls (the webhook fails open):
        # a dry run of the same pod comes back injected once it is.
        wait_for(lambda: _injected_on_dry_run(core, pod), 120, "the webhook injecting")
        core.create_namespaced_pod(AGENTS, pod)
        running = wait_for(lambda: _running(core, name), 180, "the injected pod running")
        pulled = [s.name for s in running.spec.image_pull_secrets]
        assert pulled == ["own-registry", "platform-registry"]
        (sidecar,) = [c for c in running.spec.init_containers if c.name == "mcpcache"]
        assert sidecar.security_context.run_as_user is None
        assert sidecar.security_context.run_as_non_root
        # The uid the pod gives (RESTRICTED_POD's), not the chart's 65532.
        assert run_in(node, name, "mcpcache", "id", "-u").strip() == "1000"
    finally:
        core.delete_namespaced_pod(name, AGENTS, grace_period_seconds=0)
        _install(node, chart)
        wait_for(lambda: _operator_pods_with(core, 65532), 240, "the operator rolled back")
