"""Removals reach every replica's memory: announced over Redis pub/sub, and never trusted
to have arrived.

A replica that removes entries (a purge, a write's invalidation, a notification, a
recheck that found a changed answer) fences the shared tier (`generations`) and then
announces the removal on its app's channel (`KeyLayout.channel`; sharded pub/sub on a
cluster), after the fence and never before it: a replica told first could copy the old
entry back from the tier. Every replica of the app listens there and removes the same
selection from its own memory (`announcement`).

Pub/sub delivers at most once, and only to a subscriber that is connected when the
message is published. A replica therefore trusts its memory only while it has been
listening without a break:

- **On every (re)subscription**, once Redis has confirmed it, the replica drops every
  entry in its memory (`on_gap`) before it counts itself as listening. Whatever was
  removed while it was not listening is gone with the rest; everything removed after
  the confirmation is announced to it. The tier still holds what was not removed, so
  the cost of a gap is one Redis round trip per entry asked for again, not upstream
  calls.
- **While not listening** (before the first subscription, after a connection dropped,
  a Redis restart, a failover, an ACL without the channel), the router does not answer
  from memory where Redis can answer instead (`listening`): a lookup goes to the tier,
  whose generation fences off every removed entry, and no expired entry answers (stale
  while revalidating, or because the upstream failed): Redis keeps none, so the answer
  comes from upstream. Only while Redis is out of reach (the breaker open) does memory
  answer, fresh or stale, as it did before replicas spoke to each other: then no replica
  can fence or announce a removal either, and one made meanwhile reaches this replica's
  memory on its next subscription. One lookup that failed, or was not made (the places
  all taken, the breaker half open, a removal this replica owes), is not that: the
  request goes upstream.
- **A silent loss** (no reset, no error) is noticed by a PING on the subscription every
  `PING_EVERY` seconds: a subscription that has not heard from Redis for `SILENT_FOR`
  seconds is given up and made again (a gap as above). That is the one window in which
  an announcement may be lost unseen; a write's own replica has always dropped its copy.

A message never stores or teaches anything and is bounded in every field and in the
work it costs (`announcement`); what one can do is what a write of the app's tools
through this replica can do already: remove entries. Whoever may publish on the channel
can send one, naming the right app: the Redis ACL on the channel (per namespace, or per
app) is the only boundary. A replica's own messages come back to it and are ignored
(they carry its random id). A refused message is counted, and logged at most once every
`REFUSED_LOG_EVERY` seconds (a publisher could otherwise flood the log).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ..metrics import SharedMetrics
from .announcement import Announcement, decode

if TYPE_CHECKING:
    from redis.asyncio.client import PubSub

    from .connect import RedisClient

logger = logging.getLogger("mcpcache.sidecar.tiers.broadcast")

PING_EVERY: Final = 1.0
"""Seconds of quiet on the subscription after which it is asked for a PONG."""
SILENT_FOR: Final = 3.0
"""Seconds without a word from Redis after which the subscription is given up."""
REFUSED_LOG_EVERY: Final = 60.0
"""Seconds between two warnings of refused messages (each is counted in the metrics)."""
_MESSAGES: Final = ("message", "smessage")
_CONFIRMED: Final = ("subscribe", "ssubscribe")
_ENDED: Final = ("unsubscribe", "sunsubscribe")


class SubscriptionLost(Exception):
    """Redis ended the subscription (a slot moved, a failover) or fell silent."""


class Broadcast:
    """One replica's side of its app's channel: publishing, and the listening task."""

    def __init__(
        self,
        client: RedisClient,
        channel: str,
        app_id: str,
        sender: str,
        metrics: SharedMetrics,
        retry_after: float,
        timeout: float,
    ) -> None:
        self._client = client
        self.channel = channel
        self.app_id = app_id
        self._metrics = metrics
        self._retry_after = retry_after
        self._timeout = max(1.0, timeout)
        self.sender = sender
        """This replica's id in its messages, to know its own when they come back."""
        self.listening = False
        """Subscribed without a break since memory was last dropped for a gap."""
        self._refused = 0
        """Messages refused since the last warning of them."""
        self._warned_at: float | None = None

    async def listen(
        self, on_message: Callable[[Announcement], object], on_gap: Callable[[], object]
    ) -> None:
        """Subscribe, drop memory, listen; again after every failure (at once the first
        time, then every `retry_after`), until cancelled."""
        failures = 0
        while True:
            pubsub: PubSub | None = None
            try:
                async with asyncio.timeout(self._timeout):
                    pubsub = await self._client.subscribe(self.channel)
                    await self._confirmed(pubsub)
                on_gap()
                self._set_listening(True)
                failures = 0
                await self._receive(pubsub, on_message)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                level = logging.WARNING if failures == 2 else logging.DEBUG
                logger.log(
                    level,
                    "removal announcements: not listening",
                    extra={"error": type(exc).__name__, "detail": str(exc)[:200]},
                )
            finally:
                self._set_listening(False)
                if pubsub is not None:
                    await _close(pubsub)
            if failures > 1:
                await asyncio.sleep(self._retry_after)

    async def _confirmed(self, pubsub: PubSub) -> None:
        while True:
            reply = await pubsub.get_message(timeout=self._timeout)
            if reply is not None and reply.get("type") in _CONFIRMED:
                return

    async def _receive(self, pubsub: PubSub, on_message: Callable[[Announcement], object]) -> None:
        heard = time.monotonic()
        while True:
            reply: dict[str, Any] | None = await pubsub.get_message(timeout=PING_EVERY)
            now = time.monotonic()
            if reply is None:
                if now - heard > SILENT_FOR:
                    raise SubscriptionLost("no answer to PING")
                await pubsub.ping()
                continue
            heard = now
            kind = reply.get("type")
            if kind in _ENDED:
                raise SubscriptionLost(f"ended by Redis ({kind})")
            if kind in _MESSAGES:
                self._received(reply.get("data"), on_message)

    def _received(self, data: object, on_message: Callable[[Announcement], object]) -> None:
        read = decode(data, self.app_id) if isinstance(data, bytes) else None
        if read is None:
            self._metrics.messages.labels("dropped").inc()
            self._refused += 1
            now = time.monotonic()
            if self._warned_at is None or now - self._warned_at >= REFUSED_LOG_EVERY:
                logger.warning(
                    "removal announcements: refused messages since the last warning",
                    extra={"refused": self._refused},
                )
                self._warned_at, self._refused = now, 0
            return
        sender, announcement = read
        if sender == self.sender:
            self._metrics.messages.labels("own").inc()
            return
        self._metrics.messages.labels("received").inc()
        on_message(announcement)

    def _set_listening(self, listening: bool) -> None:
        self.listening = listening
        self._metrics.listening.set(1 if listening else 0)
        if listening:
            self._metrics.resyncs.inc()


async def _close(pubsub: PubSub) -> None:
    """Close a subscription's connection, whose failure does not matter (it is dead)."""
    try:
        async with asyncio.timeout(1.0):
            await pubsub.aclose()  # type: ignore[no-untyped-call]
    except Exception as exc:
        logger.debug("removal announcements: closing failed", extra={"error": repr(exc)})
