"""The Redis client behind the shared tier, for each deployment Redis offers: one server
(`url`), Redis Cluster (`cluster`) and a Sentinel-managed primary (`sentinel`).

redis-py's own clients do the protocol work — discovering a cluster's shards and
following `MOVED`/`ASK`, asking the sentinels where the primary is after a failover —
and this module gives the tier the handful of operations it uses, the same in every
mode. It is the only module of the sidecar that imports `redis`, and the tier imports it
only when a shared tier is configured, so that a sidecar without one never loads it.

None of redis-py's retries: the tier's breaker decides when Redis is tried again, and
every operation is bounded by the tier's timeout, retries or not. The pools hold a few
connections more than the tier lets operations run at once (`MAX_IN_FLIGHT`): the tier
counts its operations itself and skips Redis when all are taken, so waiting for a
connection never counts as a Redis failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, cast
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..config import SHARED_CACHE_PASSWORD_ENV, SHARED_CACHE_USERNAME_ENV, SharedCache

MAX_IN_FLIGHT: Final = 32
"""Redis operations one sidecar runs at once (per node, with a cluster)."""
_POOL_SIZE: Final = MAX_IN_FLIGHT + 4  # a PING and topology refreshes besides
_SCAN_COUNT: Final = 500

Kind = Literal["timeout", "connection", "response"]


def kind(exc: BaseException) -> Kind:
    """What went wrong, as the errors metric names it."""
    if isinstance(exc, TimeoutError | RedisTimeoutError):
        return "timeout"
    if isinstance(exc, RedisConnectionError | OSError):
        return "connection"
    return "response"


def where(settings: SharedCache) -> str:
    """Where Redis is, without credentials, for logs."""
    shown = []
    for url in settings.urls:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            shown.append(f"unix://{parts.path}")
        else:
            shown.append(f"{parts.scheme}://{parts.hostname}:{parts.port or 6379}{parts.path}")
    if settings.sentinel is not None:
        return f"sentinel {settings.sentinel.master} at " + ",".join(shown)
    return ("cluster at " if settings.cluster is not None else "") + ",".join(shown)


def _options(url: str) -> tuple[dict[str, Any], bool]:
    """redis-py's connection options of one URL, and whether it asks for TLS."""
    options: dict[str, Any] = dict(parse_url(url))
    tls = options.pop("connection_class", None) is SSLConnection
    return options, tls


def _address(options: dict[str, Any]) -> tuple[str, int]:
    return str(options.pop("host")), int(options.pop("port", 6379))


class RedisClient:
    """The tier's view of Redis: its operations, whatever the deployment."""

    def __init__(self, settings: SharedCache, environ: Mapping[str, str]) -> None:
        timeout = settings.timeout
        # Credentials in the URL win; otherwise they come from the environment (in
        # Kubernetes, from a Secret), never from the configuration file.
        common: dict[str, Any] = {
            "username": environ.get(SHARED_CACHE_USERNAME_ENV) or None,
            "password": environ.get(SHARED_CACHE_PASSWORD_ENV) or None,
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "max_connections": _POOL_SIZE,
        }
        self.cluster: RedisCluster | None = None
        self._pool: aioredis.ConnectionPool | None = None
        if settings.cluster is not None:
            self.cluster = self._cluster(settings.cluster.nodes, common)
            self._redis: aioredis.Redis | RedisCluster = self.cluster
        elif settings.sentinel is not None:
            self._redis = self._sentinel(settings.sentinel.nodes, settings.sentinel.master, common)
            self._pool = self._redis.connection_pool
        else:
            assert settings.url is not None
            self._pool = aioredis.ConnectionPool.from_url(
                settings.url, retry=Retry(NoBackoff(), 0), **common
            )
            self._redis = aioredis.Redis.from_pool(self._pool)

    @staticmethod
    def _cluster(nodes: tuple[str, ...], common: dict[str, Any]) -> RedisCluster:
        seeds = []
        options: dict[str, Any] = {}
        for node in nodes:
            options, tls = _options(node)
            host, port = _address(options)
            seeds.append(ClusterNode(host, port))
        options.pop("db", None)
        return RedisCluster(
            startup_nodes=seeds,
            **(common | {k: v for k, v in options.items() if v is not None}),
            ssl=tls,
            # A shard without a primary (failing over, or never assigned) fails only
            # the keys of its slots; the others keep being served.
            require_full_coverage=False,
            retry=Retry(NoBackoff(), 0),
        )

    @staticmethod
    def _sentinel(nodes: tuple[str, ...], master: str, common: dict[str, Any]) -> aioredis.Redis:
        sentinels = []
        options: dict[str, Any] = {}
        tls = False
        for node in reversed(nodes):  # the first node's options win
            options, tls = _options(node)
            sentinels.append(_address(options))
        db = options.pop("db", 0)
        to_sentinels = {
            "socket_timeout": common["socket_timeout"],
            "socket_connect_timeout": common["socket_connect_timeout"],
            **options,
        }
        extra = {k: v for k, v in options.items() if k.startswith("ssl_")}
        if tls:
            to_sentinels["ssl"] = extra["ssl"] = True
        manager = Sentinel(list(reversed(sentinels)), sentinel_kwargs=to_sentinels)  # type: ignore[no-untyped-call]
        client: aioredis.Redis = manager.master_for(
            master, db=db, retry=Retry(NoBackoff(), 0), **common, **extra
        )
        return client

    async def get_two(self, name: str, other: str) -> list[object]:
        """Two GETs in one round trip: a pipeline, not MGET, so that the ACL a namespace
        needs stays `+get`. In a cluster both keys share a slot (the codec's hash tag), so
        the pipeline goes to one node."""
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(name)
            pipe.get(other)
            values: list[object] = await pipe.execute()
        return values

    async def set(self, name: str, value: bytes | str, px: int | None = None) -> None:
        await self._redis.set(name, value, px=px)

    async def unlink(self, names: list[str] | list[bytes]) -> int:
        """Remove keys (a cluster's client sends one UNLINK per slot)."""
        return int(await self._redis.unlink(*names))

    async def scan_targets(self) -> list[ClusterNode | None]:
        """What one SCAN pass goes through: every primary of a cluster (keys live on
        their shard only), or the one server."""
        if self.cluster is None:
            return [None]
        await self.cluster.initialize()
        return list(self.cluster.get_primaries())

    async def scan(
        self, target: ClusterNode | None, cursor: int, pattern: str
    ) -> tuple[int, list[bytes]]:
        """One page of a SCAN of `target` (see `scan_targets`)."""
        if target is None or self.cluster is None:
            next_cursor, names = await self._redis.scan(cursor, match=pattern, count=_SCAN_COUNT)
        else:
            # With target nodes, a cluster's SCAN answers each node's cursor by name.
            cursors, names = cast(
                tuple[dict[str, int], list[bytes | str]],
                await self.cluster.scan(
                    cursor, match=pattern, count=_SCAN_COUNT, target_nodes=target
                ),
            )
            next_cursor = cursors[target.name]
        return int(next_cursor), [n for n in names if isinstance(n, bytes)]

    async def publish(self, channel: str, message: bytes) -> None:
        """Announce `message` on `channel`: on a cluster with sharded pub/sub (SPUBLISH,
        which only the channel's shard carries, rather than every node of the bus)."""
        if self.cluster is not None:
            await self.cluster.spublish(channel, message)
        else:
            await self._redis.publish(channel, message)

    async def subscribe(self, channel: str) -> PubSub:
        """A subscription to `channel` on a connection of its own (SSUBSCRIBE to the
        channel's primary on a cluster; the current primary under Sentinel). The caller
        waits for the confirmation, and closes it on any failure: no redis-py retry
        subscribes again behind its back, so that every gap is seen (`broadcast`)."""
        if self.cluster is None:
            pubsub = self._redis.pubsub()
            await pubsub.subscribe(channel)
            return pubsub
        await self.cluster.initialize()
        node = self.cluster.get_node_from_key(channel)
        if node is None:
            raise RedisConnectionError(f"no primary serves {channel}")
        pool = aioredis.ConnectionPool(
            connection_class=node.connection_class, max_connections=1, **node.connection_kwargs
        )
        pubsub = aioredis.Redis.from_pool(pool).pubsub()
        await pubsub.ssubscribe(channel)
        return pubsub

    async def ping(self) -> None:
        """A first connection (and TLS handshake) before the first lookup needs one; with
        a cluster, the topology and a connection to every primary."""
        if self.cluster is not None:
            await self.cluster.ping(target_nodes=RedisCluster.PRIMARIES)
        else:
            await self._redis.ping()

    async def after_failure(self, failure: Kind, opened: bool) -> None:
        """Let the next operations start afresh after a failure (`opened`: one that
        opened the breaker). One Redis, or Sentinel's primary: close the idle connections
        after a connection failure (they may be sockets the server has closed; the pool
        hands out its most recent ones first, and a sentinel-managed connection asks the
        sentinels where the primary is when it reconnects). A cluster, after a
        connection failure or once the breaker opens (a primary killed or stuck, its
        replica promoted): close it, which makes the client read the topology again when
        next used — what redis-py's own pipeline retry does, without its sleep. Not after
        every timeout: reading the topology again costs a round trip and new
        connections, which would only make a busy moment's next operations slower."""
        if self.cluster is not None:
            if failure == "connection" or opened:
                await self.cluster.aclose()
                await self.ping()  # the topology and a connection to each primary, now
        elif failure == "connection":
            await self.drop_idle()

    async def drop_idle(self) -> None:
        """Close the idle connections (they reconnect when next used)."""
        if self._pool is not None:
            await self._pool.disconnect(inuse_connections=False)
        elif self.cluster is not None:
            for node in self.cluster.get_nodes():
                await node.disconnect_free_connections()

    async def aclose(self) -> None:
        await self._redis.aclose()
