"""The second cache tier on Redis, shared by the sidecars (the replicas) of one app.

Lookups go memory → Redis → upstream. The tier uses the memory cache's keys as they
are, so it isolates callers and end users exactly as memory does; it adds a prefix
(`mcpcache:<namespace>:<app id>:<server>:`) so that one Redis can serve many
namespaces, each confined to its prefix by a Redis ACL, and so that a server's entries
can be found to purge them.

Redis trouble never becomes the caller's trouble. Every operation is bounded by the
configured timeout; after `FAILURES_TO_OPEN` failures in a row the tier is skipped for
`retry_after` (a circuit breaker), then one operation probes whether it is back. Writes
never delay an answer: they run as tasks of their own, at most `MAX_PENDING_WRITES` at a
time, and those still running at shutdown get one timeout to finish.

Removals and late writes. Writes run in the background and a removal is a SCAN, so a
write can land after the SCAN that should have removed it (or after Redis, paused,
comes back). Each server of an app therefore has a generation in Redis, a random token
that every removal replaces before it scans; a lookup reads the entry and the
generation in one round trip, an answer fetched after it is stored with the generation it saw,
and an entry stored under another generation is never served. A write that lands late
is dead on arrival. A removal is owed until its new generation is in Redis: until then
(Redis slow, paused or gone, the breaker open) the server's entries are neither read
from the tier nor written to it, and the new generation is tried again every
`retry_after`, so that a purge during an incident is never lost.

What is stored is a framed value: a version marker, an echo of the key and generation, a flag, the
result's wall-clock timestamps and length, then the result bytes (the JSON-RPC `result`
value, never headers, tokens or the caller's id). A value read back is verified before
it is served — the marker, the key echo, the length, and that the result is one JSON
object exactly as the memory tier encodes it — because it crossed a network and a store
other programs can write to: a value filed under the wrong key (by a bug, by hand, or by
a client that mixed up replies to cancelled commands, as redis-py once did) must never
be served.
A value that fails is refused, counted and deleted.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import struct
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Final, Literal, TypeVar
from urllib.parse import quote, urlsplit

import orjson
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..config import SHARED_CACHE_PASSWORD_ENV, SHARED_CACHE_USERNAME_ENV, SharedCache
from ..metrics import SharedMetrics
from ..rules.messages import encode_result

logger = logging.getLogger("mcpcache.sidecar.tiers.redis_tier")

T = TypeVar("T")

MAGIC: Final = b"mcpcache/2\n"
"""The framing and version marker every stored value starts with."""
_HEAD: Final = struct.Struct("!BddI")  # flags, stored_at, expires_at, result length
_EVENT_STREAM: Final = 1
KEY_LENGTH: Final = 64
"""A cache key is a hex sha256."""
GENERATION_LENGTH: Final = 16
"""A generation is 16 hex digits, or empty before the server's first removal."""
_OVERHEAD: Final = len(MAGIC) + KEY_LENGTH + 2 + GENERATION_LENGTH + _HEAD.size

FAILURES_TO_OPEN: Final = 3
MAX_PENDING_WRITES: Final = 64
MAX_CONNECTIONS: Final = 32

State = Literal["closed", "open", "half_open"]
Kind = Literal["timeout", "connection", "response"]


@dataclass(frozen=True, slots=True)
class SharedRead:
    """What one lookup found: the verified entry (None on a miss) with its remaining life,
    and the server's generation as it was read (None when Redis was out of reach: an
    answer fetched after such a lookup is not written, its generation being unknown)."""

    entry: SharedEntry | None
    remaining: float
    generation: bytes | None


@dataclass(frozen=True, slots=True)
class SharedEntry:
    """A result read from the shared tier, with wall-clock (Unix) timestamps."""

    result: bytes
    event_stream: bool
    stored_at: float
    expires_at: float
    ttl_at: int = 0
    """Where the result's `ttlMs` value starts (see `messages.encode_result`), 0: none."""


def _echo(key: str, generation: bytes) -> bytes:
    return b"".join((key.encode("ascii"), b":", generation, b"\n"))


def encode(
    key: str,
    result: bytes,
    event_stream: bool,
    stored_at: float,
    expires_at: float,
    generation: bytes = b"",
) -> bytes:
    flags = _EVENT_STREAM if event_stream else 0
    head = _HEAD.pack(flags, stored_at, expires_at, len(result))
    return b"".join((MAGIC, _echo(key, generation), head, result))


def decode(value: bytes, key: str, generation: bytes = b"") -> SharedEntry | None:
    """The entry `value` holds for `key` in this `generation` of its server, or None
    when it is not a value this tier wrote for this key since the server's last removal.
    Pure."""
    start = len(MAGIC)
    echo = _echo(key, generation)
    head_at = start + len(echo)
    body_at = head_at + _HEAD.size
    if len(value) < body_at or not value.startswith(MAGIC):
        return None
    if value[start:head_at] != echo:
        return None
    flags, stored_at, expires_at, length = _HEAD.unpack_from(value, head_at)
    result = value[body_at:]
    if flags & ~_EVENT_STREAM or length != len(result) or not stored_at <= expires_at:
        return None
    # Framed into responses as it is, so it must be exactly what this tier writes: one
    # JSON object in the encoding the memory tier stores (no raw line break that could
    # end an event-stream frame early, `ttlMs` last where a hit restates it).
    if b"\n" in result or b"\r" in result:
        return None
    try:
        parsed = orjson.loads(result)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    canonical, ttl_at = encode_result(parsed)
    if canonical != result:
        return None
    return SharedEntry(result, bool(flags & _EVENT_STREAM), stored_at, expires_at, ttl_at)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class Breaker:
    """Closed: operations run. `FAILURES_TO_OPEN` failures in a row open it: operations
    are skipped for `pause` seconds, after which one operation may run (half open); its
    success closes the breaker, its failure opens it again."""

    def __init__(
        self,
        pause: float,
        failures: int = FAILURES_TO_OPEN,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[State], None] | None = None,
    ) -> None:
        self.pause = pause
        self.failures = failures
        self.clock = clock
        self.on_change = on_change
        self.state: State = "closed"
        self._failed = 0
        self._since = 0.0

    def allow(self) -> bool:
        if self.state == "closed":
            return True
        if self.clock() < self._since + self.pause:
            return False
        # A pause has passed since the breaker opened, or since a probe began that never
        # reported back (its request was cancelled): let one operation probe.
        self._since = self.clock()
        self._set("half_open")
        return True

    def success(self) -> None:
        self._failed = 0
        self._set("closed")

    def failure(self) -> None:
        self._failed += 1
        if self.state == "half_open" or self._failed >= self.failures:
            self._since = self.clock()
            self._set("open")

    def _set(self, state: State) -> None:
        if state != self.state:
            self.state = state
            if self.on_change is not None:
                self.on_change(state)


class _Failed:
    """An operation that did not happen."""


_FAILED: Final = _Failed()
"""Tried, and Redis failed or did not answer in time."""
_SKIPPED: Final = _Failed()
"""Not tried: the breaker was open."""


def _kind(exc: Exception) -> Kind:
    if isinstance(exc, TimeoutError | RedisTimeoutError):
        return "timeout"
    if isinstance(exc, RedisConnectionError | OSError):
        return "connection"
    return "response"


def _where(url: str) -> str:
    """The URL without its credentials, for logs."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    return f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path}"


class SharedTier:
    """The shared tier of one sidecar: one Redis client with a connection pool."""

    def __init__(
        self,
        settings: SharedCache,
        metrics: SharedMetrics,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        env = os.environ if environ is None else environ
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.where = _where(settings.url)
        timeout = settings.timeout
        # Credentials in the URL win; otherwise they come from the environment (in
        # Kubernetes, from a Secret), never from the configuration file.
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.url,
            username=env.get(SHARED_CACHE_USERNAME_ENV) or None,
            password=env.get(SHARED_CACHE_PASSWORD_ENV) or None,
            max_connections=MAX_CONNECTIONS,
            timeout=timeout,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # the breaker decides when to try again
        )
        self._pool = pool
        self._redis = aioredis.Redis.from_pool(pool)
        self._breaker = Breaker(settings.retry_after, on_change=self._breaker_changed)
        self._pending: set[asyncio.Future[object]] = set()
        self._owed: dict[tuple[str, str], asyncio.Future[None]] = {}
        """Removals whose new generation is not in Redis yet, by app and server."""
        self._prefix = f"mcpcache:{settings.namespace}:"

    # Keys

    def app_prefix(self, app_id: str) -> str:
        """Every key of one app starts with this (the app id quoted: no `:` or glob
        characters reach the key)."""
        return f"{self._prefix}{quote(app_id, safe='')}:"

    def redis_key(self, app_id: str, server: str, key: str) -> str:
        return f"{self.app_prefix(app_id)}{server}:{key}"

    def generation_key(self, app_id: str, server: str) -> str:
        """Where a server's generation lives: beside the apps' prefixes, never under one
        (`@` is always quoted in an app id), so that no purge pattern removes it."""
        return f"{self._prefix}@generation:{quote(app_id, safe='')}:{server}"

    # Operations

    async def get(
        self, app_id: str, server: str, key: str, max_size: int, max_ttl: float
    ) -> SharedRead:
        """The verified entry for `key` and its remaining life in seconds (at most
        `max_ttl`, what the entry's own policy allows), with the server's generation;
        no entry on a miss, a refused value, or Redis out of reach."""
        if (app_id, server) in self._owed:  # entries of before a removal could be read
            self.metrics.lookups.labels("skipped").inc()
            return SharedRead(None, 0.0, None)
        name = self.redis_key(app_id, server, key)
        generation_name = self.generation_key(app_id, server)
        values = await self._run("get", partial(self._get_two, name, generation_name))
        if isinstance(values, _Failed):
            self.metrics.lookups.labels("error" if values is not _SKIPPED else "skipped").inc()
            return SharedRead(None, 0.0, None)
        value, generation = values
        generation = generation if isinstance(generation, bytes) else b""
        if value is None:
            self.metrics.lookups.labels("miss").inc()
            return SharedRead(None, 0.0, generation)
        entry = None
        if isinstance(value, bytes) and len(value) <= max_size + _OVERHEAD:
            entry = decode(value, key, generation)
        if entry is None or len(entry.result) > max_size:
            self.metrics.lookups.labels("refused").inc()
            logger.warning("shared cache: refused a stored value", extra={"server": server})
            self._spawn(partial(self._run, "delete", partial(self._unlink, [name])))
            return SharedRead(None, 0.0, generation)
        remaining = min(entry.expires_at - self.clock(), max_ttl)
        if not remaining > 0:  # expired by this host's clock, or the server's TTL is 0
            self.metrics.lookups.labels("miss").inc()
            return SharedRead(None, 0.0, generation)
        self.metrics.lookups.labels("hit").inc()
        return SharedRead(entry, remaining, generation)

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
    ) -> None:
        """Store a result the memory tier has just stored, for its remaining `ttl`,
        without waiting for Redis, in the `generation` its lookup saw (the value is dead
        if a removal came between)."""
        if len(result) > max_size or ttl <= 0:
            return
        now = self.clock()
        value = encode(key, result, event_stream, now, now + ttl, generation)
        if not self._spawn(partial(self._put, self.redis_key(app_id, server, key), value, ttl)):
            self.metrics.stores.labels("dropped").inc()

    async def delete(self, app_id: str, server: str, keys: Iterable[str]) -> int:
        """Remove these entries (an invalidation); how many Redis had, or 0 when out of reach."""
        names = [self.redis_key(app_id, server, key) for key in keys]
        if not names:
            return 0
        removed = await self._run("delete", partial(self._unlink, names))
        return 0 if isinstance(removed, _Failed) else removed

    async def delete_server(self, app_id: str, server: str) -> int:
        """Remove every entry of one server for one app, for every caller (a purge): a
        new generation first, which kills every value stored before it (written late
        or not), then a SCAN that frees their memory."""
        generation = secrets.token_hex(GENERATION_LENGTH // 2)
        name = self.generation_key(app_id, server)
        await self._run("set", lambda: self._redis.set(name, generation))
        return await self._delete_matching(
            _glob_escape(f"{self.app_prefix(app_id)}{server}:") + "*"
        )

    def forget_server(self, app_id: str, server: str) -> None:
        """Remove one server's entries for one app in the background (an invalidation
        or a purge on this replica reaches every replica's shared entries this way).

        Owed at once: the server's entries are not read from the tier again until the
        new generation is in Redis, however long that takes."""
        owed = self._owed.get((app_id, server))
        if owed is not None and not owed.done():
            return  # the generation still to be set comes after this removal too
        task = asyncio.ensure_future(self._settle_removal(app_id, server))
        self._owed[(app_id, server)] = task

    async def _settle_removal(self, app_id: str, server: str) -> None:
        """Set the server's new generation, trying every `retry_after` until Redis takes
        it (whatever the breaker says), then free the old entries' memory."""
        name = self.generation_key(app_id, server)
        try:
            while True:
                generation = secrets.token_hex(GENERATION_LENGTH // 2)
                done = await self._run(
                    "set", partial(self._redis.set, name, generation), guarded=False
                )
                if not isinstance(done, _Failed):
                    break
                await asyncio.sleep(self.settings.retry_after)
        finally:
            self._owed.pop((app_id, server), None)
        await self._delete_matching(_glob_escape(f"{self.app_prefix(app_id)}{server}:") + "*")

    async def clear(self, app_id: str) -> int:
        """Remove every entry of one app (its servers' generations stay as they are: a
        late write is not fenced off; `delete_server` is what a purge uses)."""
        return await self._delete_matching(_glob_escape(self.app_prefix(app_id)) + "*")

    def warm_up(self) -> None:
        """Open a first connection in the background, so that the first lookup does not
        pay for the connection (and a TLS handshake) within its timeout."""
        self._spawn(self._warm_up)

    async def _warm_up(self) -> None:
        try:
            async with asyncio.timeout(max(1.0, self.settings.timeout)):
                await self._redis.ping()
        except Exception as exc:  # the first lookup will find out, and count it
            logger.debug("shared cache: warm-up failed", extra={"error": type(exc).__name__})

    async def aclose(self) -> None:
        """Give writes in flight one timeout to finish, then close the pool (removals
        still owed are given up: nothing reads this replica's tier any more)."""
        owed = list(self._owed.values())
        for removal in owed:
            removal.cancel()
        await asyncio.gather(*owed, return_exceptions=True)
        pending = set(self._pending)
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.settings.timeout)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self._redis.aclose()

    @property
    def breaker_state(self) -> State:
        return self._breaker.state

    @property
    def pending_writes(self) -> int:
        return len(self._pending)

    # Internals

    async def _put(self, name: str, value: bytes, ttl: float) -> None:
        milliseconds = max(1, int(ttl * 1000))
        done = await self._run("set", lambda: self._redis.set(name, value, px=milliseconds))
        if done is _SKIPPED:
            self.metrics.stores.labels("skipped").inc()
        elif isinstance(done, _Failed):
            self.metrics.stores.labels("error").inc()
        else:
            self.metrics.stores.labels("stored").inc()

    async def _delete_matching(self, pattern: str) -> int:
        """SCAN and UNLINK in batches; each round trip bounded by the timeout."""
        removed = 0
        cursor = 0
        while True:
            page = await self._run("scan", partial(self._scan, cursor, pattern))
            if isinstance(page, _Failed):
                return removed
            cursor, names = page
            if names:
                count = await self._run("delete", partial(self._unlink, names))
                if isinstance(count, _Failed):
                    return removed
                removed += count
            if cursor == 0:
                return removed

    async def _get_two(self, name: str, other: str) -> list[object]:
        """Two GETs in one round trip: a pipeline, not MGET, so that the ACL a namespace
        needs stays `+get` and the two keys need not share a cluster slot."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(name)
            pipe.get(other)
            values: list[object] = await pipe.execute()
        return values

    async def _scan(self, cursor: int, pattern: str) -> tuple[int, list[bytes]]:
        next_cursor, names = await self._redis.scan(cursor, match=pattern, count=500)
        return int(next_cursor), [n for n in names if isinstance(n, bytes)]

    async def _unlink(self, names: list[str] | list[bytes]) -> int:
        return int(await self._redis.unlink(*names))

    async def _run(
        self, op: str, call: Callable[[], Awaitable[T]], guarded: bool = True
    ) -> T | _Failed:
        """One Redis operation, bounded by the timeout and (`guarded`) by the breaker."""
        if guarded and not self._breaker.allow():
            return _SKIPPED
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout):
                value = await call()
        except Exception as exc:  # whatever Redis or the network does, the caller goes on
            self.metrics.duration.labels(op).observe(time.perf_counter() - started)
            kind = _kind(exc)
            self.metrics.errors.labels(op, kind).inc()
            self._breaker.failure()
            if kind == "connection":
                self._drop_idle_connections()
            logger.debug(
                "shared cache operation failed",
                extra={"op": op, "kind": kind, "error": type(exc).__name__},
            )
            return _FAILED
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

    def _drop_idle_connections(self) -> None:
        """Close the pool's idle connections (they reconnect when next used). After a
        connection failure, or when Redis is back from one, they may be dead sockets the
        server has closed: the pool hands out its most recent connections first, so
        without this they would hold their descriptors until a burst drained the pool."""
        self._spawn(self._disconnect_idle)

    async def _disconnect_idle(self) -> None:
        try:
            await self._pool.disconnect(inuse_connections=False)
        except Exception as exc:  # closing a dead socket may fail; it is closed all the same
            logger.debug("shared cache: closing idle connections", extra={"error": repr(exc)})

    def _breaker_changed(self, state: State) -> None:
        self.metrics.breaker.state(state)
        if state == "open":
            logger.warning(
                "shared cache unavailable: answering without it",
                extra={"redis": self.where, "retry_after_s": self.settings.retry_after},
            )
        elif state == "closed":
            logger.info("shared cache available again", extra={"redis": self.where})
            self._drop_idle_connections()
