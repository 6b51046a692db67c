"""The namespace's ConfigMap: every MCPServer there, as the sidecars' servers file.

It holds `servers` only: the sidecars take nothing else from it (see
`mcpcache.sidecar.config.parse_servers_file`), because a namespace's editors can write
it. The operator marks what it wrote with a label and the content's digest, so that a
hand edit is told apart from a change of MCPServers, and put back with an event naming
what was reverted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

import yaml

from mcpcache.sidecar.config import Server, SidecarConfig, dump_servers

CONFIGMAP_NAME: Final = "mcpcache-servers"
CONFIG_KEY: Final = "config.yaml"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "mcpcache-operator"}
DIGEST_ANNOTATION: Final = "mcpcache.io/config-sha256"
NAME_SELECTOR: Final = f"metadata.name={CONFIGMAP_NAME}"
"""The field selector of the operator's ConfigMap list and watch: with it, RBAC rights
limited to this one name (`resourceNames`) are enough."""


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def render_config(servers: Iterable[Server]) -> str:
    """The file the sidecars read, written with their own config model: the document of
    `dump_servers`, emitted by libyaml where it is installed (the same text, four times
    faster than the pure-Python emitter, which was most of the operator's CPU at scale)."""
    ordered = tuple(sorted(servers, key=lambda s: s.name))
    if _DUMPER is yaml.SafeDumper:
        return str(dump_servers(ordered))
    document = SidecarConfig(servers=ordered).to_document()
    return str(yaml.dump({"servers": document["servers"]}, Dumper=_DUMPER, sort_keys=False))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def configmap_body(namespace: str, servers: Iterable[Server]) -> dict[str, Any]:
    return configmap_of(namespace, render_config(servers))


def configmap_of(namespace: str, text: str, text_digest: str | None = None) -> dict[str, Any]:
    """The ConfigMap holding servers file `text` (whose digest may be known already)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
            "annotations": {DIGEST_ANNOTATION: text_digest or digest(text)},
        },
        "data": {CONFIG_KEY: text},
    }


def is_managed(labels: Mapping[str, str] | None) -> bool:
    return all((labels or {}).get(k) == v for k, v in MANAGED_BY.items())


def hand_edits(
    data: Mapping[str, str] | None,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
    desired: str,
) -> list[str]:
    """What someone other than the operator changed in the ConfigMap, in words; empty
    when it holds what the operator last wrote (a change of MCPServers since then is not
    an edit). `desired` is the servers file the operator is about to write."""
    data = data or {}
    edits = [f"label {k}" for k, v in MANAGED_BY.items() if (labels or {}).get(k) != v]
    edits += [f"data key {key}" for key in sorted(data) if key != CONFIG_KEY]
    text = data.get(CONFIG_KEY)
    written = (annotations or {}).get(DIGEST_ANNOTATION)
    if text is None:
        edits.append(f"data key {CONFIG_KEY} (removed)")
    elif written is not None and digest(text) != written:
        edits += _config_edits(text, desired)
    return edits


def _servers_by_name(document: Any) -> dict[str, Any] | None:
    servers = document.get("servers") if isinstance(document, dict) else None
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        return None
    return {str(s.get("name")): s for s in servers}


def _config_edits(text: str, desired: str) -> list[str]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return [f"{CONFIG_KEY} (not valid YAML)"]
    if not isinstance(document, dict):
        return [f"{CONFIG_KEY} (not a mapping)"]
    edits = [f"key {key}" for key in sorted(map(str, document)) if key != "servers"]
    edited = _servers_by_name(document)
    wanted = _servers_by_name(yaml.safe_load(desired)) or {}
    if edited is None:
        return [*edits, "servers (not a list of servers)"]
    for name in sorted(edited.keys() | wanted.keys()):
        if name not in wanted:
            edits.append(f"server {name} (added)")
        elif name not in edited:
            edits.append(f"server {name} (removed)")
        elif changed := sorted(
            key
            for key in edited[name].keys() | wanted[name].keys()
            if edited[name].get(key) != wanted[name].get(key)
        ):
            edits.append(f"server {name} ({', '.join(changed)})")
    return edits or [f"{CONFIG_KEY} (reformatted)"]
