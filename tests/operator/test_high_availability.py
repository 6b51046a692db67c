"""Two replicas of the operator on the real API server: both answer the webhook, one
reconciles, and the other takes over when it dies or stops."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from peers.operator import LEASE_DURATION, OperatorProcess
from peers.resources import GROUP, PLURAL, VERSION, configured_servers, mcpserver, new_namespace
from peers.serving import wait_until

WRITES = (("POST", "configmaps"), ("PUT", "configmaps"), ("PATCH", "mcpservers"))


def writes(process: OperatorProcess) -> float:
    """The operator's own writes to ConfigMaps and statuses (its Lease aside)."""
    return sum(
        process.sample("mcpcache_operator_api_requests_total", method=m, resource=r) or 0
        for m, r in WRITES
    )


def injected(core: client.CoreV1Api, namespace: str) -> bool:
    """A labelled pod, created through the API server (as a dry run), gets the sidecar."""
    pod = {
        "metadata": {"generateName": "agent-", "labels": {"mcpcache.io/inject": "true"}},
        "spec": {"containers": [{"name": "agent", "image": "agent:1"}]},
    }
    created = core.create_namespaced_pod(namespace, pod, dry_run="All", _request_timeout=30)
    return [c.name for c in created.spec.init_containers or []] == ["mcpcache"]


@pytest.fixture
def standby(operator, operator_install) -> Iterator[OperatorProcess]:
    """A second replica of the session's operator (same account, certificate and Lease),
    started while the first holds the Lease. Afterwards the first is running again, holds
    the Lease, and the webhook's Service points at it."""
    wait_until(operator.leading, 30, "the first replica to hold the lease")
    second = OperatorProcess(operator_install.kubeconfig, operator_install.webhook.certificate)
    second.start()
    try:
        yield second
    finally:
        if operator.process is not None and operator.process.poll() is not None:
            operator.start()
        operator_install.webhook.install(operator.webhook_port)
        second.stop()
        wait_until(operator.leading, 30, "the first replica to lead again")


def test_the_standby_answers_the_webhook_but_does_not_reconcile(
    control_plane, operator, operator_install, standby
) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    wait_until(standby.ready, 30, "the standby's readiness")
    operator_install.webhook.install(standby.webhook_port)  # the Service reaches the standby only
    namespace = new_namespace(control_plane, "ha")
    assert injected(core, namespace)

    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("docs"), _request_timeout=30
    )
    wait_until(lambda: configured_servers(core, namespace), 30, "the leader to write the configmap")
    assert operator.leading()
    assert not standby.leading()
    assert writes(standby) == 0


def test_when_the_leader_dies_the_standby_takes_over_and_injection_never_stops(
    control_plane, operator, operator_install, standby
) -> None:
    core = client.CoreV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    namespace = new_namespace(control_plane, "ha")
    wait_until(standby.ready, 30, "the standby's readiness")
    operator_install.webhook.install(standby.webhook_port)

    operator.kill()
    killed = time.monotonic()
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("after"), _request_timeout=30
    )
    injections = 0

    def reflected() -> bool:
        nonlocal injections
        assert injected(core, namespace), "a pod was admitted without the sidecar"
        injections += 1
        return set(configured_servers(core, namespace) or {}) == {"after"}

    wait_until(reflected, LEASE_DURATION + 20, "the standby to reconcile")
    took = time.monotonic() - killed
    assert standby.leading()
    assert injections >= 1
    # A killed leader cannot hand over: the Lease must first expire (4 s here, 15 s in
    # the chart), then the standby's next look (0.5 s here) takes it.
    assert took < LEASE_DURATION + 10, f"takeover took {took:.1f}s"


def test_a_stopping_leader_hands_the_lease_over_at_once(operator, standby) -> None:
    wait_until(standby.ready, 30, "the standby's readiness")
    assert not standby.leading()
    operator.terminate()
    stopped = time.monotonic()
    wait_until(standby.leading, 30, "the standby to take the lease")
    # Sooner than the Lease could have run out: it was released on the way out.
    assert time.monotonic() - stopped < LEASE_DURATION
