"""The namespace's ConfigMap: every MCPServer there, in the sidecar's config format."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcpcache.sidecar.config import Server, SidecarConfig, dump_config

CONFIGMAP_NAME = "mcpcache-servers"
CONFIG_KEY = "config.yaml"
MANAGED_BY = {"app.kubernetes.io/managed-by": "mcpcache-operator"}


def render_config(servers: Iterable[Server]) -> str:
    """The file the sidecars read: their config model, so the two always agree."""
    ordered = tuple(sorted(servers, key=lambda s: s.name))
    return str(dump_config(SidecarConfig(servers=ordered)))


def configmap_body(namespace: str, servers: Iterable[Server]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
        },
        "data": {CONFIG_KEY: render_config(servers)},
    }
