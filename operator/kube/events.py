"""Events on the objects the operator writes about (`kubectl describe` shows them).

Posted with the operator's own client: passes run outside kopf's handlers, where
`kopf.warn` has no queue to post to (and kopf's posting is off: it has nothing to say).
A repeat of an event (same object, type, reason and message) counts up on the Event
already posted, as Kubernetes' own recorder does, instead of adding one Event per pass:
a hand edit reverted a hundred times is one Event with a count of a hundred.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from .api import MERGE_PATCH, ApiError, KubeAPI

COMPONENT = "mcpcache-operator"
REMEMBERED = 4096
"""Events remembered for counting repeats (the least recently posted are forgotten)."""

logger = logging.getLogger("mcpcache.operator")

Key = tuple[Any, ...]


class EventPoster:
    def __init__(self, api: KubeAPI) -> None:
        self.api = api
        self._tasks: set[asyncio.Task[None]] = set()
        self._posted: OrderedDict[Key, tuple[str, int]] = OrderedDict()
        """Per repeatable event: the Event's name and its count."""
        self._lock = asyncio.Lock()

    def warn(self, body: Mapping[str, Any], *, reason: str, message: str) -> None:
        """`kopf.warn`'s signature; posts in the background, never fails the caller."""
        self._spawn(body, "Warning", reason, message)

    def info(self, body: Mapping[str, Any], *, reason: str, message: str) -> None:
        """`kopf.info`'s signature: a Normal event."""
        self._spawn(body, "Normal", reason, message)

    async def drain(self) -> None:
        """Wait for the events being posted (tests and shutdown)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, body: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        task = asyncio.get_running_loop().create_task(self._post(body, kind, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, body: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        metadata = body.get("metadata") or {}
        namespace = metadata.get("namespace")
        involved = {
            "apiVersion": body.get("apiVersion"),
            "kind": body.get("kind"),
            "name": metadata.get("name"),
            "namespace": namespace,
            "uid": metadata.get("uid"),
        }
        message = message[:1024]
        key = (*involved.values(), kind, reason, message)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        path = f"/api/v1/namespaces/{namespace}/events"
        try:
            async with self._lock:  # one repeat at a time: counts never go backwards
                if (posted := self._posted.get(key)) is not None:
                    name, count = posted
                    change = {"count": count + 1, "lastTimestamp": now}
                    try:
                        await self.api.request(
                            "PATCH", "events", f"{path}/{name}", change, MERGE_PATCH
                        )
                        self._remember(key, name, count + 1)
                        return
                    except ApiError as exc:
                        if exc.status != 404:  # 404: expired (an hour by default): anew
                            raise
                event = {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"generateName": "mcpcache-", "namespace": namespace},
                    "involvedObject": involved,
                    "type": kind,
                    "reason": reason,
                    "message": message,
                    "source": {"component": COMPONENT},
                    "reportingComponent": COMPONENT,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                }
                created = await self.api.request("POST", "events", path, event)
                self._remember(key, str(created["metadata"]["name"]), 1)
        except Exception as exc:
            logger.warning("event not posted", extra={"reason": reason, "error": str(exc)})

    def _remember(self, key: Key, name: str, count: int) -> None:
        self._posted[key] = (name, count)
        self._posted.move_to_end(key)
        while len(self._posted) > REMEMBERED:
            self._posted.popitem(last=False)
