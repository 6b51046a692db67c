"""List, then watch: the ConfigMaps named `mcpcache-servers`, read by name.

Our own watch, not kopf's, for least privilege: the operator's rights on ConfigMaps are
limited to that one name (`resourceNames`), which RBAC checks against a
`metadata.name` field selector on a list or watch. kopf would serve this watch only
with rights on every ConfigMap its selectors reach, and could not tell us when its
listing is complete without an index (see `mcpservers`). Here a listing is a few paged
LISTs; a watch resumes from the last resourceVersion it saw (bookmarks keep it
current) and lists again only when the API server says that version is gone (410).

Each event becomes a record (`records`) in `state.ClusterState`, and the reconciler
hears what changed. A pass waits until this watch has listed once (`listed`).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from typing import Any

from ..configmap import NAME_SELECTOR
from ..state import ClusterState
from .api import ApiError, KubeAPI

logger = logging.getLogger("mcpcache.operator")

PAGE = 500
WATCH_SECONDS = 300
"""How long one watch request lasts before it is resumed (from its last version)."""


class Gone(Exception):
    """The version a watch resumes from is no longer kept: list again."""


class Watch:
    """One list-then-watch loop over the ConfigMaps of one namespace, or all."""

    def __init__(
        self,
        api: KubeAPI,
        state: ClusterState,
        namespace: str | None = None,
        retry_delay: float = 1.0,
    ) -> None:
        self.api = api
        self.state = state
        self.kind = "configmaps"
        where = f"/namespaces/{namespace}" if namespace else ""
        self.path = f"/api/v1{where}/configmaps"
        self.query = {"fieldSelector": NAME_SELECTOR}
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
        event = self.state.configmap_event
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
        self.state.configmaps_listed(self.namespace, present)
        return str(metadata.get("resourceVersion"))

    async def _watch(self, version: str) -> str:
        url = self._url(
            watch="true",
            resourceVersion=version,
            allowWatchBookmarks="true",
            timeoutSeconds=WATCH_SECONDS,
        )
        event = self.state.configmap_event
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
    """Cluster-wide, or one per namespace the operator is limited to."""
    return [Watch(api, state, namespace) for namespace in namespaces or (None,)]
