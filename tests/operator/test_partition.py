"""A leader cut off from the API server (a proxy between them stops passing bytes):
it stops writing before its Lease can be taken, the standby takes over, and nothing is
written twice or lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from peers.controlplane import ControlPlane
from peers.cutoff import CutOff, through
from peers.operator import LEASE_DURATION, OPERATOR_NAMESPACE, RELEASE, OperatorProcess
from peers.resources import GROUP, PLURAL, VERSION, configured_servers, mcpserver, new_namespace
from peers.serving import wait_until

LEASE = f"{RELEASE}-operator"


class Writes:
    """Every change the API server makes to a namespace's ConfigMap and MCPServers
    from now on, as its own watch reports them (writes, counted where they land)."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        self.changes: list[tuple[str, str, str]] = []
        self._watches: list[watch.Watch] = []
        self._threads: list[threading.Thread] = []
        core = client.CoreV1Api(plane.api_client())
        objects = client.CustomObjectsApi(plane.api_client())
        listed = core.list_namespaced_config_map(namespace, _request_timeout=30)
        self._follow(
            core.list_namespaced_config_map,
            namespace,
            resource_version=listed.metadata.resource_version,
            field_selector="metadata.name=mcpcache-servers",
        )
        servers = objects.list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, _request_timeout=30
        )
        self._follow(
            objects.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            resource_version=servers["metadata"]["resourceVersion"],
        )

    def _follow(self, list_call: Any, *args: Any, **kwargs: Any) -> None:
        stream = watch.Watch()
        self._watches.append(stream)

        def run() -> None:
            events = stream.stream(
                list_call, *args, timeout_seconds=120, _request_timeout=130, **kwargs
            )
            try:
                for event in events:
                    body = event["object"]
                    metadata = body["metadata"] if isinstance(body, dict) else body.metadata
                    name = metadata["name"] if isinstance(metadata, dict) else metadata.name
                    kind = body["kind"] if isinstance(body, dict) else "ConfigMap"
                    self.changes.append((event["type"], kind, name))
            except ProtocolError:  # `stop()` closed the response under it
                pass

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)

    def of(self, kind: str, name: str) -> list[str]:
        return [change for change, k, n in self.changes if (k, n) == (kind, name)]

    def stop(self) -> None:
        for stream in self._watches:
            stream.stop()
        for thread in self._threads:
            thread.join(135)


@pytest.fixture
def pair(control_plane, operator, operator_install) -> Iterator[tuple[OperatorProcess, ...]]:
    """Two replicas in place of the session's operator: the first reaches the API server
    through a proxy that can cut it off and holds the Lease; the second is the standby.
    Afterwards the session's operator runs and leads again."""
    operator.terminate()
    proxy = CutOff("127.0.0.1", control_plane.port)
    kubeconfig = operator_install.kubeconfig
    first = OperatorProcess(through(kubeconfig, proxy), operator_install.webhook.certificate)
    second = OperatorProcess(kubeconfig, operator_install.webhook.certificate)
    try:
        first.start()
        wait_until(first.leading, 30, "the first replica to take the lease")
        second.start()
        wait_until(second.ready, 30, "the standby's readiness")
        yield first, second, proxy
    finally:
        first.stop()
        second.stop()
        proxy.close()
        operator.start()
        operator_install.webhook.install(operator.webhook_port)
        wait_until(operator.leading, 30, "the session's operator to lead again")


def holder(plane: ControlPlane) -> str | None:
    lease = client.CoordinationV1Api(plane.api_client()).read_namespaced_lease(
        LEASE, OPERATOR_NAMESPACE, _request_timeout=30
    )
    return lease.spec.holder_identity


def test_a_leader_cut_off_stops_writing_before_the_standby_takes_over_and_nothing_is_lost(
    control_plane, pair
) -> None:
    first, second, proxy = pair
    core = client.CoreV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    namespace = new_namespace(control_plane, "cut")
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("before"), _request_timeout=30
    )
    wait_until(lambda: configured_servers(core, namespace), 30, "the leader's first pass")
    wait_until(
        lambda: first.sample("mcpcache_operator_reconcile_pending") == 0, 30, "a quiet leader"
    )
    writes = Writes(control_plane, namespace)
    leader_identity = holder(control_plane)

    # A change the leader sees, then the cut before its pass writes (a pass waits
    # 0.2 s for more changes): its writes go into the cut, never to land.
    objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, mcpserver("during"), _request_timeout=30
    )

    def seen() -> bool:
        if first.sample("mcpcache_operator_reconcile_pending") == 1:
            return True
        return "during" in (configured_servers(core, namespace) or {})  # too quick to catch

    wait_until(seen, 10, "the leader to see the change")
    proxy.cut()
    cut = time.monotonic()

    stepped_down = took_over = None
    while took_over is None:
        now = time.monotonic()
        assert now - cut < LEASE_DURATION + 20, "the standby never took over"
        if stepped_down is None and not first.leading():
            stepped_down = now
        if second.leading():
            took_over = now
        time.sleep(0.02)
    assert stepped_down is not None, "both replicas led at once"
    assert stepped_down < took_over
    assert stepped_down - cut <= LEASE_DURATION * 0.75 + 1  # its renew deadline
    assert holder(control_plane) not in (None, leader_identity)

    wait_until(
        lambda: set(configured_servers(core, namespace) or {}) == {"before", "during"},
        30,
        "the new leader to write the change",
    )

    def during_ready() -> bool:
        found = objects.get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "during", _request_timeout=30
        )
        return (found.get("status") or {}).get("observedGeneration") == 1

    wait_until(during_ready, 30, "the new server's status")
    # The cut-off replica comes back as a standby: it writes nothing.
    proxy.mend()
    wait_until(lambda: first.sample("mcpcache_operator_leader") == 0, 10, "a standby")
    wait_until(
        lambda: second.sample("mcpcache_operator_reconcile_pending") == 0, 30, "a quiet leader"
    )
    writes.stop()

    # One write each, from whichever replica: the ConfigMap gained `during` once, its
    # status was written once, and `before` was left alone.
    assert writes.of("ConfigMap", "mcpcache-servers") == ["MODIFIED"]
    assert writes.of("MCPServer", "during") == ["ADDED", "MODIFIED"]
    assert writes.of("MCPServer", "before") == []
