"""The operator outlives an API server restart: watches reconnect and nothing is lost."""

from __future__ import annotations

import uuid

from kubernetes import client
from kubernetes.client.rest import ApiException

from mcpcache.sidecar.config import parse_config
from peers.serving import wait_until

GROUP, VERSION, PLURAL = "mcpcache.io", "v1alpha1", "mcpservers"


def mcpserver(name: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MCPServer",
        "metadata": {"name": name},
        "spec": {"endpoint": {"streamableHTTP": {"url": f"http://{name}.svc:8000/mcp"}}},
    }


def server_names(core: client.CoreV1Api, namespace: str) -> set[str] | None:
    try:
        configmap = core.read_namespaced_config_map("mcpcache-servers", namespace)
    except ApiException:
        return None
    return {s.name for s in parse_config(configmap.data["config.yaml"], environ={}).servers}


def test_changes_after_an_api_server_restart_are_reconciled(control_plane, operator) -> None:
    namespace = f"rst-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(control_plane.api_client())
    objects = client.CustomObjectsApi(control_plane.api_client())
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
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
