"""kopf watches the MCPServers; each event becomes a record in `state.ClusterState`.

kopf lists, watches, reconnects, lists again after a `410 Gone` and backs off on
errors; one `kopf.on.event` handler, a coroutine (a plain function would cost a thread
hop per event), hands each event to the records. What we do not take from kopf, and
what its settings cost (read in its source, `kopf._core.reactor`):

- No indexes: kopf's index start-up makes every listed object wait on one shared
  condition notified once per object, quadratic in the number of objects (a restart
  with 1000 MCPServers took 30 s of CPU before its first pass). The records are ours.
- No change-detection handlers (create/update/resume), so no finalizer, no progress
  and no diff-base annotations: kopf writes nothing to an MCPServer. The storages are
  replaced by ones that store nothing, because kopf builds and diffs a diff base for
  every event whatever handlers there are, a deep copy of the body each time.
- kopf says when its listing is complete only to indexes, so the operator lists the
  MCPServers once itself at start-up, page by page, and passes start when that listing
  and the ConfigMaps' are complete. kopf's events and these copies race; the records
  order them by resourceVersion (see `state`). When kopf lists again (after a
  `410 Gone`) an object it had reported, deletions may have passed unseen: the operator
  lists once more itself, and what that listing lacks is gone.
- Pages of 500 for kopf's listings (by default one response holds every object), a
  deadline on every request, and per-object workers that end after a short idle time:
  each idle worker keeps its last event's body, at ten thousand objects most of the
  process's memory.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from typing import Any

import kopf

from ..crd import COLLECTION, RESOURCE_GROUP, RESOURCE_PLURAL, RESOURCE_VERSION
from ..state import ClusterState
from .api import KubeAPI

logger = logging.getLogger("mcpcache.operator")

PAGE = 500
REQUEST_TIMEOUT = 30.0
WATCH_SECONDS = 300
WORKER_IDLE = 0.5
"""Seconds a per-object kopf worker waits for its object's next event before ending."""
RELIST_DELAY = 1.0
"""After kopf lists again, how long to let its listing pass before ours."""


class _NoDiffBase(kopf.DiffBaseStorage):
    """No change-detection handler reads a diff base: build none, store none."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return None

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


class _NoProgress(kopf.ProgressStorage):
    """No handler has progress to keep: nothing is written to the objects."""

    def fetch(self, *, key: Any, body: Any) -> Any:
        return None

    def store(self, *, key: Any, record: Any, body: Any, patch: Any) -> None:
        return None

    def purge(self, *, key: Any, body: Any, patch: Any) -> None:
        return None

    def touch(self, *, body: Any, patch: Any, value: Any) -> None:
        return None

    def clear(self, *, essence: Any) -> Any:
        return essence


def configure_watching(settings: kopf.OperatorSettings) -> None:
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.persistence.progress_storage = _NoProgress()
    settings.watching.chunk_size = PAGE
    settings.watching.server_timeout = WATCH_SECONDS
    settings.watching.client_timeout = WATCH_SECONDS + 30
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = REQUEST_TIMEOUT
    settings.networking.connect_timeout = 10
    settings.queueing.idle_timeout = WORKER_IDLE


class ServerListing:
    """The operator's own paged listings of MCPServers: once at start-up (`listed`
    says when it is complete), and again whenever kopf lists again."""

    def __init__(
        self, api: KubeAPI, state: ClusterState, namespaces: tuple[str, ...], retry: float = 1.0
    ) -> None:
        self.api = api
        self.state = state
        self.namespaces = namespaces or (None,)
        self.retry = retry
        self.listed = asyncio.Event()
        self._again = asyncio.Event()

    def again(self) -> None:
        """kopf is listing again: list once more when it is done."""
        self._again.set()

    async def run(self) -> None:
        while True:
            try:
                for namespace in self.namespaces:
                    await self._list(namespace)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.warning("mcpservers: listing failed", extra={"error": str(exc)})
                await asyncio.sleep(self.retry)
                continue
            self.listed.set()
            await self._again.wait()
            await asyncio.sleep(RELIST_DELAY)
            self._again.clear()
            self.api.metrics.relists.inc()
            logger.info("mcpservers: kopf listed again; listing to find deletions")

    async def _list(self, namespace: str | None) -> None:
        where = f"/namespaces/{namespace}" if namespace else ""
        path = f"{COLLECTION}{where}/{RESOURCE_PLURAL}"
        present: set[tuple[str, str]] = set()
        token = None
        self.state.listing_started()
        version = 0
        try:
            while True:
                query: dict[str, Any] = {"limit": PAGE}
                if token:
                    query["continue"] = token
                url = f"{path}?{urllib.parse.urlencode(query)}"
                page = await self.api.request("GET", "mcpservers", url)
                for body in page.get("items") or []:
                    metadata = body["metadata"]
                    present.add((metadata["namespace"], metadata["name"]))
                    self.state.server_event("ADDED", body)
                meta = page.get("metadata") or {}
                token = meta.get("continue")
                del page
                if not token:
                    break
            version = int(meta.get("resourceVersion") or 0)
        except BaseException:
            self.state.listing_done(namespace, present, -1)
            raise
        self.state.listing_done(namespace, present, version)


def register(registry: kopf.OperatorRegistry, state: ClusterState, listing: ServerListing) -> None:
    @kopf.on.event(RESOURCE_GROUP, RESOURCE_VERSION, RESOURCE_PLURAL, registry=registry)
    async def mcpserver_event(event: kopf.RawEvent, **_: Any) -> None:
        if state.watched(event.get("type"), event["object"]):
            listing.again()
