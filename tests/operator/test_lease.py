"""The Lease on the real API server: a leader stopping hands it over even when the
Lease was written since its last renewal (a copy kept from then has a stale
resourceVersion, which the API server refuses with 409)."""

from __future__ import annotations

import asyncio

from kubernetes import client, config

from mcpcache.operator.kube.api import KubeAPI
from mcpcache.operator.kube.lease import LeaseElector, LeaseSettings
from mcpcache.operator.metrics import OperatorMetrics
from peers.resources import new_namespace
from peers.serving import async_wait_until


def lease_of(control_plane, namespace: str, name: str) -> client.V1Lease:
    return client.CoordinationV1Api(control_plane.api_client()).read_namespaced_lease(
        name, namespace, _request_timeout=30
    )


def admin(control_plane) -> client.Configuration:
    configuration = client.Configuration()
    config.load_kube_config(str(control_plane.kubeconfig), client_configuration=configuration)
    return configuration


async def test_a_stopping_leader_releases_a_lease_written_since_its_last_renewal(
    control_plane,
) -> None:
    namespace = new_namespace(control_plane, "lease")
    metrics = OperatorMetrics()
    api = KubeAPI(admin(control_plane), metrics)
    # Renewals 30 s apart: nothing refreshes the leader's view before it stops.
    settings = LeaseSettings(namespace, "held", "replica-a", 15, 10, retry_period=30)
    elector = LeaseElector(api, settings, metrics, lambda: None, lambda: None)
    task = asyncio.create_task(elector.run())
    try:
        await async_wait_until(lambda: elector.leading, 10, "the lease")
        assert lease_of(control_plane, namespace, "held").spec.holder_identity == "replica-a"
        # Someone else writes the Lease (an annotation: its holder is unchanged).
        client.CoordinationV1Api(control_plane.api_client()).patch_namespaced_lease(
            "held", namespace, {"metadata": {"annotations": {"by": "hand"}}}, _request_timeout=30
        )
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await api.close()

    released = lease_of(control_plane, namespace, "held")
    assert released.spec.holder_identity is None
    assert released.metadata.annotations == {"by": "hand"}
    assert metrics.registry.get_sample_value("mcpcache_operator_leader") == 0
