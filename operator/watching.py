"""List, then watch: the operator's view of MCPServers and its ConfigMaps.

We watch these two kinds ourselves rather than through kopf. kopf's handlers cost a
good part of a millisecond of CPU per event in its machinery (per-object workers,
diff bases, handler state), and its indexes, the one way it tells when an initial
listing is complete, make every listed object wait on one shared condition that is
notified once per object: quadratic in the number of objects (measured: a restart with
1000 MCPServers took 30 s of CPU before the first pass). Here a listing is a few paged
LISTs; a watch resumes from the last resourceVersion it saw (bookmarks keep it
current) and lists again only when the API server says that version is gone (410).

Each event becomes a small record (`observed`) in `ClusterState`, and the reconciler
hears what changed. A pass waits until every watch has listed once, so no pass ever
runs on half a listing (after a restart that would rewrite ConfigMaps with servers
missing).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .configmap import CONFIGMAP_NAME, NAME_SELECTOR
from .kubeapi import ApiError, KubeAPI
from .observed import ConfigMapRecord, ServerRecord

logger = logging.getLogger("mcpcache.operator")

PAGE = 500
WATCH_SECONDS = 300
"""How long one watch request lasts before it is resumed (from its last version)."""


class Gone(Exception):
    """The version a watch resumes from is no longer kept: list again."""


class ClusterState:
    """The records the watches keep, by namespace: what a pass reads."""

    def __init__(
        self,
        on_server: Callable[[str, ServerRecord, bool], None],
        on_configmap: Callable[[str, ConfigMapRecord | None], None],
    ) -> None:
        self._servers: dict[str, dict[str, ServerRecord]] = {}
        self._configmaps: dict[str, ConfigMapRecord] = {}
        self._on_server = on_server
        self._on_configmap = on_configmap

    def servers(self, namespace: str) -> Iterable[ServerRecord]:
        return self._servers.get(namespace, {}).values()

    def configmap(self, namespace: str) -> ConfigMapRecord | None:
        return self._configmaps.get(namespace)

    def namespaces(self) -> Iterable[str]:
        return self._servers.keys() | self._configmaps.keys()

    def server_event(self, kind: str, body: Mapping[str, Any]) -> None:
        namespace = str(body["metadata"]["namespace"])
        record = ServerRecord.from_body(body)
        here = self._servers.setdefault(namespace, {})
        if kind == "DELETED":
            here.pop(record.name, None)
            if not here:
                del self._servers[namespace]
        else:
            here[record.name] = record
        self._on_server(namespace, record, kind == "DELETED")

    def configmap_event(self, kind: str, body: Mapping[str, Any]) -> None:
        namespace = str(body["metadata"]["namespace"])
        if kind == "DELETED":
            self._configmaps.pop(namespace, None)
            self._on_configmap(namespace, None)
        else:
            record = ConfigMapRecord.from_body(body)
            self._configmaps[namespace] = record
            self._on_configmap(namespace, record)

    def listed(self, kind: str, namespace: str | None, present: set[tuple[str, str]]) -> None:
        """A listing (of one namespace, or all) is complete, its items already seen as
        events: what it did not hold is gone."""
        if kind == "mcpservers":
            for ns, records in list(self._servers.items()):
                for name in [n for n in records if namespace in (None, ns)]:
                    if (ns, name) not in present:
                        self.server_event("DELETED", {"metadata": {"namespace": ns, "name": name}})
        else:
            for ns in [n for n in self._configmaps if namespace in (None, n)]:
                if (ns, CONFIGMAP_NAME) not in present:
                    self.configmap_event("DELETED", {"metadata": {"namespace": ns}})


class Watch:
    """One list-then-watch loop over `path` (a collection, optionally with a selector)."""

    def __init__(
        self,
        api: KubeAPI,
        state: ClusterState,
        kind: str,
        path: str,
        selector: str | None = None,
        namespace: str | None = None,
        retry_delay: float = 1.0,
    ) -> None:
        self.api = api
        self.state = state
        self.kind = kind
        self.path = path
        self.query = {"fieldSelector": selector} if selector else {}
        self.namespace = namespace
        self.retry_delay = retry_delay
        self.listed = asyncio.Event()

    def _url(self, **query: Any) -> str:
        return f"{self.path}?{urllib.parse.urlencode({**self.query, **query})}"

    async def run(self) -> None:
        while True:
            try:
                version = await self._list()
                self.listed.set()
                while True:
                    version = await self._watch(version)
            except Gone:
                logger.info("watch: listing again", extra={"resource": self.kind})
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning(
                    "watch failed; listing again",
                    extra={"resource": self.kind, "error": str(exc), "retry_in": self.retry_delay},
                )
                await asyncio.sleep(self.retry_delay)

    async def _list(self) -> str:
        """Page by page, each page's items handed over as it arrives: at ten thousand
        objects, holding every page until the end would double the process's peak."""
        event = self.state.server_event if self.kind == "mcpservers" else self.state.configmap_event
        present: set[tuple[str, str]] = set()
        token = None
        while True:
            query: dict[str, Any] = {"limit": PAGE}
            if token:
                query["continue"] = token
            page = await self.api.request("GET", self.kind, self._url(**query))
            for body in page.get("items") or []:
                present.add((body["metadata"]["namespace"], body["metadata"]["name"]))
                event("ADDED", body)
            metadata = page.get("metadata") or {}
            token = metadata.get("continue")
            del page
            if not token:
                break
        self.state.listed(self.kind, self.namespace, present)
        return str(metadata.get("resourceVersion"))

    async def _watch(self, version: str) -> str:
        url = self._url(
            watch="true",
            resourceVersion=version,
            allowWatchBookmarks="true",
            timeoutSeconds=WATCH_SECONDS,
        )
        event = self.state.server_event if self.kind == "mcpservers" else self.state.configmap_event
        try:
            async for change in self.api.stream(self.kind, url, silence=WATCH_SECONDS + 30):
                kind, body = change.get("type"), change.get("object") or {}
                if kind == "ERROR":
                    if body.get("code") == 410:
                        raise Gone()
                    raise ApiError(int(body.get("code") or 500), "WATCH", url, str(body))
                version = str((body.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    event(str(kind), body)
        except ApiError as exc:
            if exc.status == 410:
                raise Gone() from exc
            raise
        return version


def watches(api: KubeAPI, state: ClusterState, namespaces: tuple[str, ...]) -> list[Watch]:
    """MCPServers, and the ConfigMaps named `mcpcache-servers` (the field selector is
    what lets RBAC rights on that one name suffice): cluster-wide, or per namespace."""
    from .crd import RESOURCE_GROUP, RESOURCE_PLURAL, RESOURCE_VERSION

    group = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}"
    found: list[Watch] = []
    for namespace in namespaces or (None,):
        where = f"/namespaces/{namespace}" if namespace else ""
        servers = f"{group}{where}/{RESOURCE_PLURAL}"
        found.append(Watch(api, state, "mcpservers", servers, None, namespace))
        found.append(
            Watch(api, state, "configmaps", f"/api/v1{where}/configmaps", NAME_SELECTOR, namespace)
        )
    return found
