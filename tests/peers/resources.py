"""Building and reading the Kubernetes objects the operator tests work with."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mcpcache.operator.crd import RESOURCE_GROUP as GROUP
from mcpcache.operator.crd import RESOURCE_PLURAL as PLURAL
from mcpcache.operator.crd import RESOURCE_VERSION as VERSION
from mcpcache.sidecar.config import Server, parse_servers_file

from .controlplane import ControlPlane

__all__ = ["GROUP", "PLURAL", "VERSION", "configured_servers", "mcpserver", "new_namespace"]


def mcpserver(name: str, url: str = "http://docs.tools.svc:8000/mcp", **cache: Any) -> dict:
    """An MCPServer body; `cache` fields go to `spec.cache` when any are given."""
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "MCPServer",
        "metadata": {"name": name},
        "spec": {"endpoint": {"streamableHTTP": {"url": url}}},
    }
    if cache:
        body["spec"]["cache"] = cache
    return body


def new_namespace(plane: ControlPlane, prefix: str, labels: dict[str, str] | None = None) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    metadata = client.V1ObjectMeta(name=name, labels=labels)
    client.CoreV1Api(plane.api_client()).create_namespace(client.V1Namespace(metadata=metadata))
    return name


def configured_servers(core: client.CoreV1Api, namespace: str) -> dict[str, Server] | None:
    """The servers in the namespace's sidecar ConfigMap, or None while there is none."""
    try:
        configmap = core.read_namespaced_config_map(
            "mcpcache-servers", namespace, _request_timeout=30
        )
    except ApiException:
        return None
    config = parse_servers_file(configmap.data["config.yaml"], environ={})
    return {server.name: server for server in config.servers}
