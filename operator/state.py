"""The records a pass reads, by namespace, and how events and listings update them. Pure.

MCPServers arrive from two sources that race: kopf's watch (its events, in order) and
the operator's own paged listings (`kube.mcpservers`: the one way to know a listing is
complete). A listing's copy may be older than an event already applied, so every
change is ordered by resourceVersion: an older copy never replaces a newer record, and
while a listing runs a deletion leaves a tombstone, so that the listing cannot bring a
deleted object back. When a listing completes, what it did not hold and is not newer
than it is gone (deleted while no watch was looking, as after a `410 Gone`).

ConfigMaps come from the operator's own watch (`kube.configmaps`), which lists and
watches in one stream, so they need no ordering.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .configmap import CONFIGMAP_NAME
from .records import ConfigMapRecord, ServerRecord, version_of

Key = tuple[str, str]


class ClusterState:
    def __init__(
        self,
        on_server: Callable[[str, ServerRecord, bool], None],
        on_configmap: Callable[[str, ConfigMapRecord | None], None],
    ) -> None:
        self._servers: dict[str, dict[str, ServerRecord]] = {}
        self._configmaps: dict[str, ConfigMapRecord] = {}
        self._on_server = on_server
        self._on_configmap = on_configmap
        self._listings = 0
        """Listings of our own under way: while there are, deletions leave tombstones."""
        self._tombstones: dict[Key, int] = {}

    # -- what a pass reads ------------------------------------------------------------

    def servers(self, namespace: str) -> Iterable[ServerRecord]:
        return self._servers.get(namespace, {}).values()

    def configmap(self, namespace: str) -> ConfigMapRecord | None:
        return self._configmaps.get(namespace)

    def namespaces(self) -> Iterable[str]:
        return self._servers.keys() | self._configmaps.keys()

    def server_count(self) -> int:
        return sum(len(here) for here in self._servers.values())

    # -- MCPServers -------------------------------------------------------------------

    def watched(self, kind: str | None, body: Mapping[str, Any]) -> bool:
        """An event of kopf's watch (`kind` None: an object of kopf's own listing).
        Returns whether it is a re-listing (kopf listed an object it had reported)."""
        metadata = body.get("metadata") or {}
        current = self._servers.get(str(metadata.get("namespace")), {}).get(
            str(metadata.get("name"))
        )
        again = kind is None and current is not None and current.watched
        self.server_event("DELETED" if kind == "DELETED" else "MODIFIED", body, watched=True)
        return again

    def server_event(self, kind: str, body: Mapping[str, Any], watched: bool = False) -> None:
        metadata = body.get("metadata") or {}
        namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
        version = version_of(metadata)
        here = self._servers.get(namespace, {})
        current = here.get(name)
        if current is not None and version and current.version > version:
            return  # an older copy (a listing's) than the record
        if kind == "DELETED":
            if self._listings:
                self._tombstones[(namespace, name)] = version
            if current is None:
                return
            del here[name]
            if not here:
                del self._servers[namespace]
            self._on_server(namespace, current, True)
            return
        buried = self._tombstones.get((namespace, name))
        if buried is not None and version and buried >= version:
            return  # deleted since this copy was listed
        if current is not None and current.uid == metadata.get("uid"):
            watched = watched or current.watched
        record = ServerRecord.from_body(body, watched)
        self._servers.setdefault(namespace, {})[name] = record
        self._on_server(namespace, record, False)

    def listing_started(self) -> None:
        self._listings += 1

    def listing_done(self, namespace: str | None, present: set[Key], version: int) -> None:
        """A listing of our own (of one namespace, or all) at `version` is complete, its
        items already applied: a record it did not hold and not newer than it is gone."""
        for ns, records in list(self._servers.items()):
            if namespace not in (None, ns):
                continue
            for name, record in list(records.items()):
                if (ns, name) not in present and record.version <= version:
                    self.server_event("DELETED", {"metadata": {"namespace": ns, "name": name}})
        self._listings -= 1
        if not self._listings:
            self._tombstones.clear()

    # -- ConfigMaps -------------------------------------------------------------------

    def configmap_event(self, kind: str, body: Mapping[str, Any]) -> None:
        namespace = str(body["metadata"]["namespace"])
        if kind == "DELETED":
            self._configmaps.pop(namespace, None)
            self._on_configmap(namespace, None)
        else:
            record = ConfigMapRecord.from_body(body)
            self._configmaps[namespace] = record
            self._on_configmap(namespace, record)

    def configmaps_listed(self, namespace: str | None, present: set[Key]) -> None:
        """A ConfigMap listing is complete, its items already seen as events: what it
        did not hold is gone."""
        for ns in [n for n in self._configmaps if namespace in (None, n)]:
            if (ns, CONFIGMAP_NAME) not in present:
                self.configmap_event("DELETED", {"metadata": {"namespace": ns}})
