"""The operator outlives an API server restart: watches reconnect and nothing is lost."""

from __future__ import annotations

from kubernetes import client

from peers.resources import GROUP, PLURAL, VERSION, configured_servers, mcpserver, new_namespace
from peers.serving import wait_until


def server_names(core: client.CoreV1Api, namespace: str) -> set[str] | None:
    found = configured_servers(core, namespace)
    return None if found is None else set(found)


def test_changes_after_an_api_server_restart_are_reconciled(control_plane, operator) -> None:
    namespace = new_namespace(control_plane, "rst")
    core = client.CoreV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, mcpserver("before"))
    wait_until(lambda: server_names(core, namespace) == {"before"}, 30, "the first reconcile")

    control_plane.restart()

    core = client.CoreV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, mcpserver("after"))
    wait_until(
        lambda: server_names(core, namespace) == {"before", "after"},
        90,
        "a reconcile after the restart",
    )
    assert operator.process.poll() is None
