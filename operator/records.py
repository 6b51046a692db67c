"""What the operator keeps in memory of the objects it watches. Pure.

One record per MCPServer and per managed ConfigMap, built from each watch event, so a
reconcile pass reads memory instead of listing the namespace. We keep them ourselves
rather than in kopf's indexes, whose start-up is quadratic (see `kube.mcpservers`).
Records hold plain copies of the few fields a pass reads, never the event's body: at ten
thousand objects the bodies (managed fields and all) would be most of the process.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .configmap import CONFIG_KEY, DIGEST_ANNOTATION, is_managed

OURS = "mcpcache.io/"


def version_of(metadata: Mapping[str, Any]) -> int:
    """The resourceVersion as a number, which etcd-backed API servers issue as growing
    integers: it orders a listing's copy against a watch event's. 0 when it is not one."""
    try:
        return int(metadata.get("resourceVersion") or 0)
    except ValueError:
        return 0


SHARED = 100
"""Strings up to this length are interned: the keys and most values (reasons, messages,
durations) repeat in every record, and one copy each instead of one per record is
most of what ten thousand records hold (measured: 53 MB without, see `plain`)."""


def plain(value: Any) -> Any:
    """A deep copy made of dicts and lists, its strings shared (`SHARED`) with every
    other record's. A JSON decoder makes new strings for every body it reads."""
    if isinstance(value, Mapping):
        return {sys.intern(str(k)): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, str) and len(value) <= SHARED:
        return sys.intern(value)
    return value


@dataclass(frozen=True, slots=True)
class ServerRecord:
    name: str
    uid: str
    version: int
    generation: int
    deleting: bool
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    annotations: Mapping[str, str]
    """Ours only (`mcpcache.io/…`): others, such as kubectl's last-applied copy of the
    whole object, would double what each record holds."""
    watched: bool = False
    """kopf's watch has reported this object (a listing of ours alone has not)."""

    @classmethod
    def from_body(cls, body: Mapping[str, Any], watched: bool = False) -> ServerRecord:
        metadata = body.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        return cls(
            name=sys.intern(str(metadata.get("name"))),
            uid=str(metadata.get("uid")),
            version=version_of(metadata),
            generation=int(metadata.get("generation") or 0),
            deleting=bool(metadata.get("deletionTimestamp")),
            spec=plain(body.get("spec") or {}),
            status=plain(body.get("status") or {}),
            annotations={str(k): str(v) for k, v in annotations.items() if str(k).startswith(OURS)},
            watched=watched,
        )

    @property
    def inputs(self) -> tuple[Any, ...]:
        """What a pass reads from the object besides its status: an event that changes
        none of it (the operator's own status write coming back) needs no pass. The
        annotations count: a purge changes no generation."""
        return (self.uid, self.generation, self.deleting, tuple(sorted(self.annotations.items())))


@dataclass(frozen=True, slots=True)
class ConfigMapRecord:
    uid: str
    resource_version: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    data: Mapping[str, str]

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ConfigMapRecord:
        metadata = body.get("metadata") or {}
        return cls(
            uid=str(metadata.get("uid")),
            resource_version=str(metadata.get("resourceVersion")),
            labels=plain(metadata.get("labels") or {}),
            annotations=plain(metadata.get("annotations") or {}),
            data=plain(body.get("data") or {}),
        )

    def holds(self, text: str, digest: str) -> bool:
        """Whether it is exactly what the operator writes for `text`."""
        return (
            self.data == {CONFIG_KEY: text}
            and is_managed(self.labels)
            and self.annotations.get(DIGEST_ANNOTATION) == digest
        )

    def newer_than(self, other: ConfigMapRecord) -> bool:
        """By resourceVersion, which etcd-backed API servers issue as growing integers;
        when one is not, the watch's copy (`other`) is taken as the newer."""
        try:
            return int(self.resource_version) > int(other.resource_version)
        except ValueError:
            return False
