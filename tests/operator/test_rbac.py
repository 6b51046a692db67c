"""The operator's rights, as the real API server grants them: asked with `kubectl auth
can-i` and tried with the operator's own service-account token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from peers.operator import (
    OPERATOR_NAMESPACE,
    OperatorProcess,
    install_operator_rbac,
    service_account,
)
from peers.paths import CHART
from peers.resources import GROUP, PLURAL, VERSION, mcpserver, new_namespace
from peers.serving import wait_until

OPERATOR = f"system:serviceaccount:{OPERATOR_NAMESPACE}:mcpcache-operator"


def can_i(control_plane, user: str, verb: str, resource: str, *where: str) -> bool:
    result = control_plane.run_kubectl(
        "auth", "can-i", verb, resource, f"--as={user}", *where, check=False
    )
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), result.stderr
    return answer == "yes"


@pytest.fixture(scope="module")
def coredns(control_plane) -> None:
    """kube-system/coredns, as every cluster has it."""
    control_plane.run_kubectl("create", "namespace", "kube-system", check=False)
    control_plane.run_kubectl(
        "create",
        "configmap",
        "coredns",
        "-n",
        "kube-system",
        "--from-literal=Corefile=.:53 {}",
        check=False,
    )


@pytest.mark.parametrize(
    ("verb", "resource", "where", "allowed"),
    [
        ("get", "configmaps/mcpcache-servers", ("-n", "agents"), True),
        ("update", "configmaps/mcpcache-servers", ("-n", "agents"), True),
        ("patch", "configmaps/mcpcache-servers", ("-n", "agents"), True),
        ("watch", "configmaps/mcpcache-servers", ("-A",), True),
        ("list", "configmaps/mcpcache-servers", ("-A",), True),
        ("create", "configmaps", ("-n", "agents"), True),  # by name only: the policy
        ("get", "configmaps/coredns", ("-n", "kube-system"), False),
        ("update", "configmaps/coredns", ("-n", "kube-system"), False),
        ("delete", "configmaps/mcpcache-servers", ("-n", "agents"), False),
        ("list", "configmaps", ("-A",), False),
        ("watch", "configmaps", ("-n", "agents"), False),
        ("get", "secrets", ("-n", "agents"), False),
        ("list", "pods", ("-A",), True),  # labelled ones: pods that missed injection
        ("watch", "pods", ("-A",), False),
        ("get", "pods", ("-n", "agents"), False),
        ("patch", "pods", ("-n", "agents"), False),
        ("delete", "pods", ("-n", "agents"), False),
        ("watch", "mcpservers.mcpcache.io", ("-A",), True),
        ("create", "mcpservers.mcpcache.io", ("-n", "agents"), False),
        ("patch", "mcpservers.mcpcache.io", ("-n", "agents"), False),
        ("patch", "mcpservers.mcpcache.io", ("--subresource=status", "-n", "agents"), True),
        ("create", "events", ("-n", "agents"), True),
        ("patch", "events", ("-n", "agents"), True),
        ("delete", "events", ("-n", "agents"), False),
        ("get", "leases/mcpcache-operator", ("-n", OPERATOR_NAMESPACE), True),
        ("update", "leases/mcpcache-operator", ("-n", OPERATOR_NAMESPACE), True),
        ("update", "leases/other", ("-n", OPERATOR_NAMESPACE), False),
        ("get", "leases/mcpcache-operator", ("-n", "agents"), False),
        ("delete", "leases/mcpcache-operator", ("-n", OPERATOR_NAMESPACE), False),
        ("update", "mutatingwebhookconfigurations", (), False),
        ("list", "namespaces", (), False),
    ],
)
def test_the_operator_may_do_exactly_its_job(
    control_plane, operator, verb, resource, where, allowed
) -> None:
    assert can_i(control_plane, OPERATOR, verb, resource, *where) is allowed


def test_the_operators_token_cannot_touch_other_configmaps(
    control_plane, operator, coredns
) -> None:
    kubeconfig = operator.kubeconfig

    def kubectl(*args: str):
        return control_plane.run_kubectl(*args, kubeconfig=kubeconfig, check=False)

    for attempt in (
        ("get", "configmap", "coredns", "-n", "kube-system"),
        ("patch", "configmap", "coredns", "-n", "kube-system", "-p", '{"data":{"x":"y"}}'),
        ("delete", "configmap", "coredns", "-n", "kube-system"),
        ("get", "configmaps", "-A"),
    ):
        result = kubectl(*attempt)
        assert result.returncode != 0
        assert "forbidden" in result.stderr.lower(), (attempt, result.stderr)
    # Listing by name across namespaces is what its watch does: allowed.
    listed = kubectl(
        "get", "configmaps", "-A", "--field-selector", "metadata.name=mcpcache-servers"
    )
    assert listed.returncode == 0, listed.stderr
    # Creating is refused by the admission policy for every other name or without the label.
    namespace = new_namespace(control_plane, "cm")
    managed = {"app.kubernetes.io/managed-by": "mcpcache-operator"}
    for name, labels in (("coredns", managed), ("mcpcache-servers", {})):
        manifest = control_plane.dir / f"cm-{name}.yaml"
        metadata = {"name": name, "namespace": namespace, "labels": labels}
        manifest.write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata})
        )
        result = kubectl("create", "-f", str(manifest))
        assert result.returncode != 0
        assert "may create only its managed ConfigMap mcpcache-servers" in result.stderr
    left = control_plane.run_kubectl("get", "configmaps", "-n", namespace, "-o", "name")
    assert left.stdout.strip() == ""


def test_the_operators_token_may_create_only_its_own_lease(control_plane, operator) -> None:
    for name, namespace in (("other", OPERATOR_NAMESPACE), ("mcpcache-operator", "default")):
        manifest = control_plane.dir / f"lease-{name}-{namespace}.yaml"
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease"}
        manifest.write_text(
            yaml.safe_dump({**lease, "metadata": {"name": name, "namespace": namespace}})
        )
        result = control_plane.run_kubectl(
            "create", "-f", str(manifest), kubeconfig=operator.kubeconfig, check=False
        )
        assert result.returncode != 0
        assert "forbidden" in result.stderr.lower(), result.stderr


@pytest.fixture
def scoped_operator(
    control_plane, crd, webhook_ca
) -> Iterator[tuple[OperatorProcess, str, str, str]]:
    """A second release with operator.watchNamespaces=[watched], running as its own
    service account: (operator, its user, watched namespace, other namespace)."""
    watched = new_namespace(control_plane, "scoped")
    other = new_namespace(control_plane, "unwatched")
    home = new_namespace(control_plane, "scoped-system")
    kubeconfig = install_operator_rbac(
        control_plane,
        CHART,
        home,
        values=(f"operator.watchNamespaces={{{watched}}}",),
        release="scoped",
        may_create_in=watched,
    )
    lease = (home, f"{service_account('scoped')}")
    process = OperatorProcess(kubeconfig, webhook_ca, namespaces=(watched,), lease=lease).start()
    try:
        yield process, f"system:serviceaccount:{home}:{service_account('scoped')}", watched, other
    finally:
        process.stop()


def test_with_watch_namespaces_the_rights_are_those_namespaces_only(
    control_plane, scoped_operator
) -> None:
    process, user, watched, other = scoped_operator
    for verb, resource in (
        ("get", "configmaps/mcpcache-servers"),
        ("update", "configmaps/mcpcache-servers"),
        ("list", "mcpservers.mcpcache.io"),
        ("create", "events"),
        ("list", "pods"),
    ):
        assert can_i(control_plane, user, verb, resource, "-n", watched)
        assert not can_i(control_plane, user, verb, resource, "-n", other)
    assert not can_i(control_plane, user, "list", "mcpservers.mcpcache.io", "-A")
    assert not can_i(control_plane, user, "list", "configmaps/mcpcache-servers", "-A")
    assert not can_i(control_plane, user, "list", "pods", "-A")

    objects = client.CustomObjectsApi(control_plane.api_client())
    objects.create_namespaced_custom_object(
        GROUP, VERSION, watched, PLURAL, mcpserver("docs"), _request_timeout=30
    )
    wait_until(
        lambda: process.sample("mcpcache_operator_mcpservers", namespace=watched) == 1,
        30,
        "the scoped operator to reconcile its namespace",
    )
    # The session's cluster-wide operator writes there too, so a pass may lose a race
    # (409, retried); none may be refused for want of a right.
    log = process.log_tail(1000)
    assert " 403 " not in log
    assert "Forbidden" not in log
    # A namespace it does not watch is none of its business, even with an MCPServer.
    for namespace, name in ((other, "elsewhere"), (watched, "second")):
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, mcpserver(name), _request_timeout=30
        )
    wait_until(
        lambda: process.sample("mcpcache_operator_mcpservers", namespace=watched) == 2,
        30,
        "the scoped operator to see its namespace's second server",
    )
    assert process.sample("mcpcache_operator_mcpservers", namespace=other) is None
