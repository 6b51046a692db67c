"""The second cache tier on Redis, shared by the sidecars (the replicas) of one app.

Lookups go memory → Redis → upstream. The tier uses the memory cache's keys as they
are, so it isolates callers and end users exactly as memory does; it adds a prefix
(`mcpcache:<namespace>:{<app id>:<server>}:`) so that one Redis can serve many
namespaces, each confined to its prefix by a Redis ACL, and so that a server's entries
can be found to purge them.

Redis trouble never becomes the caller's trouble. Every operation is bounded by the
configured timeout; after `FAILURES_TO_OPEN` failures in a row the tier is skipped for
`retry_after` (a circuit breaker), then one operation probes whether it is back. Writes
never delay an answer: they run as tasks of their own, at most `MAX_PENDING_WRITES` at a
time, and those still running at shutdown get one timeout to finish.

Removals reach every replica's and every shard's entries and are never lost to a late
write (`generations`).

Values and keys are the codec's (`codec`), the client the deployment's (`connect`, which
alone imports `redis`, and only when the tier starts), the breaker its own (`breaker`).
The tier works the same on one Redis, a Sentinel-managed primary and Redis Cluster.

Every operation takes one of `MAX_IN_FLIGHT` places; a request that finds them all taken
(a burst) goes on without the tier for that call (`pool_full`), and that is not counted
against Redis: waiting for a connection would have spent the caller's time for nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Final, TypeVar

from ..cache.entry import Note, notes_size
from ..config import SharedCache
from ..metrics import SharedMetrics
from .announcement import Announcement
from .announcement import encode as encode_announcement
from .breaker import FAILED, POOL_FULL, SKIPPED, Breaker, Failed, State
from .broadcast import Broadcast
from .codec import OVERHEAD, KeyLayout, TierEntry, decode, encode
from .generations import Generations

if TYPE_CHECKING:
    from .connect import RedisClient

logger = logging.getLogger("mcpcache.sidecar.tiers.redis_tier")

T = TypeVar("T")

MAX_PENDING_WRITES: Final = 64


@dataclass(frozen=True, slots=True)
class TierRead:
    """What one lookup found: the verified entry (None on a miss) with its remaining life,
    and the server's generation as it was read (None when Redis was not read: an answer
    fetched after such a lookup is not written, its generation being unknown).

    `out_of_reach`: Redis was not read because it is out of reach, the breaker open (not
    merely one failed or skipped lookup: a burst that filled the places, one timeout, a
    half-open breaker's probe elsewhere, a removal this replica still owes). Only then may
    memory this replica cannot vouch for answer instead (`broadcast`)."""

    entry: TierEntry | None
    remaining: float
    generation: bytes | None
    out_of_reach: bool = False


class RedisTier:
    """The shared tier of one sidecar: one Redis client (of any deployment) with its pools."""

    def __init__(
        self,
        settings: SharedCache,
        metrics: SharedMetrics,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from . import connect  # redis is loaded only for a sidecar that has a tier

        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.where = connect.where(settings)
        self._kind = connect.kind
        self._limit = connect.MAX_IN_FLIGHT
        self._client: RedisClient = connect.RedisClient(
            settings, os.environ if environ is None else environ
        )
        self._in_flight = 0
        self._breaker = Breaker(settings.retry_after, on_change=self._breaker_changed)
        self._pending: set[asyncio.Future[object]] = set()
        self._forgetting: set[asyncio.Future[None]] = set()
        self.keys = KeyLayout(settings.namespace)
        self.removals = Generations(
            self._run, self._client, self.keys, settings.retry_after, self._announce
        )
        self.sender = secrets.token_hex(8)
        """This replica's id in the removals it announces."""
        self.broadcast: Broadcast | None = None
        """The app's channel, once `listen` runs."""

    @property
    def listening(self) -> bool:
        """Whether every removal another replica announces reaches this one now, and has
        since memory was last dropped (`broadcast`): else memory is not to be trusted
        where Redis can answer instead."""
        return self.broadcast is not None and self.broadcast.listening

    @property
    def out_of_reach(self) -> bool:
        """Redis is being skipped after failures (the breaker is open)."""
        return self._breaker.state == "open"

    @property
    def memory_trusted(self) -> bool:
        """Whether memory may answer without Redis having been read for it: while
        listening, or while Redis is out of reach (`broadcast`). A stale entry (served
        while it is fetched again, or because the upstream failed) is served only then."""
        return self.listening or self.out_of_reach

    async def listen(
        self,
        app_id: str,
        on_message: Callable[[Announcement], object],
        on_gap: Callable[[], object],
    ) -> None:
        """Hear the removals the app's other replicas announce, until cancelled."""
        self.broadcast = Broadcast(
            self._client,
            self.keys.channel(app_id),
            app_id,
            self.sender,
            self.metrics,
            self.settings.retry_after,
            self.settings.timeout,
        )
        await self.broadcast.listen(on_message, on_gap)

    async def _announce(self, app_id: str, announcement: Announcement) -> None:
        """Tell the app's other replicas of a removal, once, bounded by the timeout (see
        `broadcast` for what a lost message costs). Not through the breaker: a Redis
        whose ACL lacks the channel refuses every message, and that must not take the
        tier's lookups away."""
        message = encode_announcement(app_id, self.sender, announcement)
        channel = self.keys.channel(app_id)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout):
                await self._client.publish(channel, message)
        except Exception as exc:
            self.metrics.errors.labels("publish", self._kind(exc)).inc()
            self.metrics.messages.labels("failed").inc()
            logger.debug("removal not announced", extra={"error": type(exc).__name__})
        else:
            self.metrics.messages.labels("sent").inc()
        self.metrics.duration.labels("publish").observe(time.perf_counter() - started)

    # Operations

    async def get(
        self, app_id: str, server: str, key: str, max_size: int, max_ttl: float
    ) -> TierRead:
        """The verified entry for `key` and its remaining life in seconds (at most
        `max_ttl`, what the entry's own policy allows), with the server's generation;
        no entry on a miss, a refused value, or Redis out of reach."""
        if self.removals.owed(app_id, server):  # entries of before a removal could be read
            self.metrics.lookups.labels("skipped").inc()
            return TierRead(None, 0.0, None, self.out_of_reach)
        name = self.keys.entry(app_id, server, key)
        generation_name = self.keys.generation(app_id, server)
        values = await self._run("get", partial(self._client.get_two, name, generation_name))
        if isinstance(values, Failed):
            self.metrics.lookups.labels(values.label).inc()
            return TierRead(None, 0.0, None, self.out_of_reach)
        value, generation = values
        generation = generation if isinstance(generation, bytes) else b""
        if value is None:
            self.metrics.lookups.labels("miss").inc()
            return TierRead(None, 0.0, generation)
        entry = None
        if isinstance(value, bytes) and len(value) <= 2 * max_size + OVERHEAD:
            # (each note's lengths take less than the event it frames: at most twice)
            entry = decode(value, key, generation)
        if entry is None or entry.size > max_size:
            self.metrics.lookups.labels("refused").inc()
            logger.warning("shared cache: refused a stored value", extra={"server": server})
            self._spawn(partial(self._run, "delete", partial(self._client.unlink, [name])))
            return TierRead(None, 0.0, generation)
        remaining = min(entry.expires_at - self.clock(), max_ttl)
        if not remaining > 0:  # expired by this host's clock, or the server's TTL is 0
            self.metrics.lookups.labels("miss").inc()
            return TierRead(None, 0.0, generation)
        self.metrics.lookups.labels("hit").inc()
        return TierRead(entry, remaining, generation)

    def put(
        self,
        app_id: str,
        server: str,
        key: str,
        result: bytes,
        event_stream: bool,
        ttl: float,
        max_size: int,
        generation: bytes,
        fetch_seconds: float = 0.0,
        notes: tuple[Note, ...] = (),
    ) -> None:
        """Store a result the memory tier has just stored, for its remaining `ttl`,
        without waiting for Redis, in the `generation` its lookup saw (the value is dead
        if a removal came between); `fetch_seconds`: how long the upstream took for it."""
        if len(result) + notes_size(notes) > max_size or ttl <= 0:
            return
        now = self.clock()
        value = encode(key, result, event_stream, now, now + ttl, generation, fetch_seconds, notes)
        if not self._spawn(partial(self._put, self.keys.entry(app_id, server, key), value, ttl)):
            self.metrics.stores.labels("dropped").inc()

    async def delete(self, app_id: str, server: str, keys: Iterable[str]) -> int:
        """Remove these entries (an invalidation); how many Redis had, or 0 when out of reach."""
        names = [self.keys.entry(app_id, server, key) for key in keys]
        if not names:
            return 0
        removed = await self._run("delete", partial(self._client.unlink, names))
        return 0 if isinstance(removed, Failed) else removed

    def forget(self, app_id: str, server: str, key: str) -> None:
        """Remove one entry known out of date, best effort, and announce it to the other
        replicas (their memory copies go too): now, and again once a write
        of it already on its way (bounded by the timeout) has landed. One lost to Redis
        trouble, or overtaken by a later write of the old answer, stays until its TTL,
        as any entry may; at most `MAX_PENDING_WRITES` removals run at a time, apart
        from the writes."""
        if len(self._forgetting) < MAX_PENDING_WRITES:
            task = asyncio.ensure_future(self._forget(app_id, server, key))
            self._forgetting.add(task)
            task.add_done_callback(self._forgetting.discard)

    async def _forget(self, app_id: str, server: str, key: str) -> None:
        await self.delete(app_id, server, [key])
        await self._announce(app_id, Announcement(server, keys=(key,)))
        await asyncio.sleep(2 * self.settings.timeout)
        await self.delete(app_id, server, [key])

    async def delete_server(self, app_id: str, server: str) -> int:
        """Remove every entry of one server for one app, for every caller (a purge)."""
        return await self.removals.delete_server(app_id, server)

    def forget_server(
        self, app_id: str, server: str, announcement: Announcement
    ) -> asyncio.Future[None]:
        """Remove one server's entries for one app in the background (an invalidation
        or a purge on this replica reaches every replica's shared entries this way), and
        announce `announcement` to the other replicas once the tier is fenced; done when
        it has been announced, or given up."""
        return self.removals.forget_server(app_id, server, announcement)

    async def clear(self, app_id: str) -> int:
        """Remove every entry of one app (its servers' generations stay as they are: a
        late write is not fenced off; `delete_server` is what a purge uses)."""
        return await self.removals.delete_matching(self.keys.app_pattern(app_id))

    def warm_up(self) -> None:
        """Open a first connection in the background, so that the first lookup does not
        pay for the connection (and a TLS handshake, a cluster's topology) within its
        timeout."""
        self._spawn(self._warm_up)  # if it fails, the first lookup finds out and counts it

    async def _warm_up(self) -> None:
        await self._quietly(self._client.ping, max(1.0, self.settings.timeout))

    async def aclose(self) -> None:
        """Give writes in flight one timeout to finish, then close the pool (removals
        still owed are given up: nothing reads this replica's tier any more)."""
        await self.removals.aclose()
        for forgetting in self._forgetting:
            forgetting.cancel()
        await asyncio.gather(*self._forgetting, return_exceptions=True)
        pending = set(self._pending)
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.settings.timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self._client.aclose()

    @property
    def breaker_state(self) -> State:
        return self._breaker.state

    @property
    def pending_writes(self) -> int:
        return len(self._pending)

    # Internals

    async def _put(self, name: str, value: bytes, ttl: float) -> None:
        milliseconds = max(1, int(ttl * 1000))
        done = await self._run("set", partial(self._client.set, name, value, milliseconds))
        self.metrics.stores.labels(done.label if isinstance(done, Failed) else "stored").inc()

    async def _run(
        self, op: str, call: Callable[[], Awaitable[T]], guarded: bool = True
    ) -> T | Failed:
        """One Redis operation, bounded by the timeout, by the places in flight and
        (`guarded`) by the breaker."""
        if guarded and not self._breaker.allow():
            return SKIPPED
        if self._in_flight >= self._limit:
            return POOL_FULL
        self._in_flight += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout):
                value = await call()
        except Exception as exc:  # whatever Redis or the network does, the caller goes on
            self.metrics.duration.labels(op).observe(time.perf_counter() - started)
            kind = self._kind(exc)
            self.metrics.errors.labels(op, kind).inc()
            was_open = self._breaker.state == "open"
            self._breaker.failure()
            opened = self._breaker.state == "open" and not was_open
            if kind != "response":
                after = partial(self._client.after_failure, kind, opened)
                self._spawn(partial(self._quietly, after, max(1.0, self.settings.timeout)))
            logger.debug(
                "shared cache operation failed",
                extra={"op": op, "kind": kind, "error": type(exc).__name__},
            )
            return FAILED
        finally:
            self._in_flight -= 1
        self.metrics.duration.labels(op).observe(time.perf_counter() - started)
        self._breaker.success()
        return value

    def _spawn(self, work: Callable[[], Awaitable[object]]) -> bool:
        """Run `work` as a task of its own, unless `MAX_PENDING_WRITES` already run."""
        if len(self._pending) >= MAX_PENDING_WRITES:
            return False
        task = asyncio.ensure_future(work())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        return True

    async def _quietly(self, work: Callable[[], Awaitable[None]], bound: float) -> None:
        """Closing and reopening connections (see `RedisClient.after_failure`) within
        `bound`, whose failures do not matter: closing a dead socket may fail, and the
        next operation finds out whether Redis is back."""
        try:
            async with asyncio.timeout(bound):
                await work()
        except Exception as exc:
            logger.debug("shared cache: connection upkeep failed", extra={"error": repr(exc)})

    def _breaker_changed(self, state: State) -> None:
        self.metrics.breaker.state(state)
        if state == "open":
            logger.warning(
                "shared cache unavailable: answering without it",
                extra={"redis": self.where, "retry_after_s": self.settings.retry_after},
            )
        elif state == "closed":
            logger.info("shared cache available again", extra={"redis": self.where})
            # Idle connections opened before the failure may be dead sockets.
            self._spawn(partial(self._quietly, self._client.drop_idle, self.settings.timeout))
