"""Events on the objects the operator writes about (`kubectl describe` shows
them), posted with the operator's own client: its passes run outside kopf's handlers,
where `kopf.warn` has no queue to post to."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Mapping
from typing import Any

from .kubeapi import KubeAPI

COMPONENT = "mcpcache-operator"

logger = logging.getLogger("mcpcache.operator")


class EventPoster:
    def __init__(self, api: KubeAPI) -> None:
        self.api = api
        self._tasks: set[asyncio.Task[None]] = set()

    def warn(self, body: Mapping[str, Any], *, reason: str, message: str) -> None:
        """`kopf.warn`'s signature; posts in the background, never fails the caller."""
        self._spawn(body, "Warning", reason, message)

    def info(self, body: Mapping[str, Any], *, reason: str, message: str) -> None:
        """`kopf.info`'s signature: a Normal event."""
        self._spawn(body, "Normal", reason, message)

    def _spawn(self, body: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        task = asyncio.get_running_loop().create_task(self._post(body, kind, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, body: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        metadata = body.get("metadata") or {}
        namespace = metadata.get("namespace")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "mcpcache-", "namespace": namespace},
            "involvedObject": {
                "apiVersion": body.get("apiVersion"),
                "kind": body.get("kind"),
                "name": metadata.get("name"),
                "namespace": namespace,
                "uid": metadata.get("uid"),
            },
            "type": kind,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            path = f"/api/v1/namespaces/{namespace}/events"
            await self.api.request("POST", "events", path, event)
        except Exception as exc:
            logger.warning("event not posted", extra={"reason": reason, "error": str(exc)})
