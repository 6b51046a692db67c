"""The scan for pods that missed injection: list, count, and mark each with an event.

A periodic, label-selected LIST rather than a watch: the count moves only when the
webhook was unavailable, an alert waits minutes before it fires, and a LIST needs only
the `list` right on pods (no `watch`, no `get`). Every replica scans and exports its
own count (the alert takes the largest); the Event's fixed name makes one Event per pod
whichever replica posts first (`missed.event_name`).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import urllib.parse
from typing import Any

from ..metrics import OperatorMetrics
from ..missed import LABEL_SELECTOR, REASON, MissedPod, event_name, missed_pods
from .api import ApiError, KubeAPI
from .events import COMPONENT

logger = logging.getLogger("mcpcache.operator")

PAGE = 500


async def list_missed(api: KubeAPI, namespaces: tuple[str, ...] = ()) -> list[MissedPod]:
    """The pods labelled for injection that run without the sidecar, in `namespaces`
    (empty: the whole cluster), listed page by page."""
    pods: list[dict[str, Any]] = []
    for namespace in namespaces or (None,):
        where = f"/namespaces/{namespace}" if namespace else ""
        token = ""
        while True:
            query = {"labelSelector": LABEL_SELECTOR, "limit": PAGE}
            if token:
                query["continue"] = token
            path = f"/api/v1{where}/pods?{urllib.parse.urlencode(query)}"
            page = await api.request("GET", "pods", path)
            pods.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                break
    missed: list[MissedPod] = missed_pods(pods)
    return missed


class MissedInjections:
    """Scans every `interval` seconds until cancelled: a missed pod is counted and
    marked within one interval of the operator's start or of its creation."""

    def __init__(
        self,
        api: KubeAPI,
        metrics: OperatorMetrics,
        namespaces: tuple[str, ...] = (),
        interval: float = 30.0,
    ) -> None:
        self.api = api
        self.metrics = metrics
        self.namespaces = namespaces
        self.interval = interval
        self._marked: set[str] = set()
        """Pods (by uid) this replica has marked; bounded by the pods still missing."""

    async def run(self) -> None:
        while True:
            try:
                await self.scan()
            except Exception as exc:  # a failed scan is retried at the next one
                logger.warning("missed-injection scan failed", extra={"error": str(exc)})
            await asyncio.sleep(self.interval)

    async def scan(self) -> list[MissedPod]:
        missed = await list_missed(self.api, self.namespaces)
        self.metrics.missed_pods.set(len(missed))
        current = {pod.uid for pod in missed}
        self._marked &= current
        for pod in missed:
            if pod.uid not in self._marked:
                await self._mark(pod)
        return missed

    async def _mark(self, pod: MissedPod) -> None:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(pod), "namespace": pod.namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            },
            "type": "Warning",
            "reason": REASON,
            "message": pod.message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        path = f"/api/v1/namespaces/{pod.namespace}/events"
        try:
            await self.api.request("POST", "events", path, event)
        except ApiError as exc:
            if exc.status != 409:  # 409: another replica (or an earlier scan) posted it
                raise
        self._marked.add(pod.uid)
        logger.warning(
            "pod runs without the sidecar",
            extra={"namespace": pod.namespace, "pod": pod.name, "owner": pod.owner},
        )
