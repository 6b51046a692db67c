"""After Redis restarts, the shared tier holds no dead connections: the sockets the old
server closed are let go (their descriptors with them) once the tier sees the failure
and again when Redis is back, not when a burst happens to drain the pool. And a burst
larger than the pool is not a Redis failure."""

from __future__ import annotations

import asyncio
import uuid

import psutil

from mcpcache.sidecar.tiers.connect import MAX_IN_FLIGHT
from peers.clients import call_body, call_headers, post
from peers.redisserver import RedisServer
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar, one_server


def redis_sockets(port: int, status: str | None = None) -> int:
    """This process's TCP sockets to the Redis port (in one state, or all of them)."""
    return sum(
        1
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == port and (status is None or c.status == status)
    )


async def burst(sidecar: RunningSidecar, count: int) -> None:
    """`count` different calls at once: each looks up and writes the shared tier."""
    headers = call_headers("echo")
    calls = [
        post(sidecar.url("s"), call_body(n, "echo", {"text": uuid.uuid4().hex}), headers, 10)
        for n in range(count)
    ]
    for response in await asyncio.gather(*calls):
        assert response.status_code == 200


async def test_a_redis_restart_leaves_no_dead_connections_behind(
    make_sidecar, own_redis_server: RedisServer, json_upstream
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    document = one_server(app.base_url + "/mcp")
    document["appId"] = "recovery-" + uuid.uuid4().hex
    document["sharedCache"] = {"url": redis.url, "timeout": "500ms", "retryAfter": "200ms"}
    sidecar = make_sidecar(document)
    await burst(sidecar, 24)
    pooled = redis_sockets(redis.port, psutil.CONN_ESTABLISHED)
    assert pooled > 1, "the burst opened several connections"

    misses = sidecar.sample("mcpcache_shared_lookups_total", result="miss")
    redis.kill()
    redis.start()
    # Calls go on: the tier fails on its dead connections, then Redis answers again.
    for _ in range(40):
        await burst(sidecar, 2)
        if sidecar.sample("mcpcache_shared_lookups_total", result="miss") >= misses + 4:
            break
    assert sidecar.sample("mcpcache_shared_lookups_total", result="miss") >= misses + 4
    await async_wait_until(
        lambda: redis_sockets(redis.port, psutil.CONN_CLOSE_WAIT) == 0,
        what="the dead connections to be closed",
    )
    assert redis_sockets(redis.port) <= pooled


async def test_a_burst_that_finds_every_connection_busy_skips_the_tier_without_failing_it(
    make_sidecar, own_redis_server: RedisServer, json_upstream
) -> None:
    _, app = json_upstream
    redis = own_redis_server
    document = one_server(app.base_url + "/mcp")
    document["appId"] = "burst-" + uuid.uuid4().hex
    document["sharedCache"] = {"url": redis.url, "timeout": "5s"}
    sidecar = make_sidecar(document)
    redis.pause()  # every lookup waits for Redis and holds its connection
    try:
        calls = asyncio.ensure_future(burst(sidecar, MAX_IN_FLIGHT + 8))
        await async_wait_until(
            lambda: sidecar.sample("mcpcache_shared_lookups_total", result="pool_full") >= 8,
            what="the calls past the pool to skip the tier",
        )
    finally:
        redis.resume()
    await calls  # every call answered
    assert sidecar.sample("mcpcache_shared_lookups_total", result="pool_full") == 8
    assert sidecar.sample("mcpcache_shared_lookups_total", result="miss") == MAX_IN_FLIGHT
    assert sidecar.sample("mcpcache_shared_lookups_total", result="error") == 0
    assert sidecar.sample("mcpcache_shared_breaker", mcpcache_shared_breaker="closed") == 1
