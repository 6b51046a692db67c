"""`helm uninstall` on the real node (runs after the other cluster tests: it removes the
chart they share)."""

from __future__ import annotations

from kubernetes import client

from peers.node import Node
from peers.workloads import AGENTS, OPERATOR_NAMESPACE, RELEASE, Agent, Chart, wait_for

# The namespace's own objects, which neither the chart nor the operator made.
BUILT_IN = {"serviceaccount/default", "configmap/kube-root-ca.crt"}
# The operator's Lease: the operator makes it, so Helm does not delete it (the docs say so).
LEASE = "lease.coordination.k8s.io/mcpcache-operator"


def _kinds(node: Node, namespaced: bool) -> str:
    listed = node.run_kubectl(
        "api-resources", "--verbs=list", f"--namespaced={str(namespaced).lower()}", "-o", "name"
    ).stdout.split()
    return ",".join(k for k in listed if k not in ("events", "events.events.k8s.io"))


def test_helm_uninstall_leaves_only_what_readme_says_it_leaves(
    node: Node, chart: Chart, agent: Agent
) -> None:
    node.run_helm("uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--wait")
    core = client.CoreV1Api(node.api_client())
    wait_for(lambda: not core.list_namespaced_pod(OPERATOR_NAMESPACE).items, 60, "no operator pods")
    ours = f"app.kubernetes.io/instance={RELEASE}"
    labelled = node.run_kubectl(
        "get", _kinds(node, True), "-A", "-l", ours, "-o", "name"
    ).stdout.split()
    labelled += node.run_kubectl(
        "get", _kinds(node, False), "-l", ours, "-o", "name"
    ).stdout.split()
    assert labelled == []
    in_namespace = set(
        node.run_kubectl(
            "get", _kinds(node, True), "-n", OPERATOR_NAMESPACE, "-o", "name"
        ).stdout.split()
    )
    assert in_namespace - BUILT_IN == {LEASE}
    # What the uninstall page says stays: the CRD, its admission policy and each
    # namespace's ConfigMap.
    node.run_kubectl("get", "crd", "mcpservers.mcpcache.io")
    node.run_kubectl("get", "validatingadmissionpolicy", "mcpservers.mcpcache.io")
    node.run_kubectl("get", "configmap", "mcpcache-servers", "-n", AGENTS)
