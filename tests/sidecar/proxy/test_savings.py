"""What the cache saved the upstream: each call answered in place of an upstream call
(a hit from memory or the shared tier, a request that waited for an identical one)
counts as a call saved, and as the upstream time of the call whose answer stood in."""

from __future__ import annotations

import asyncio
import time

import pytest

from peers.clients import call_body, call_headers, post, unique
from peers.redisserver import RedisServer
from peers.serving import async_wait_until
from peers.sharedtier import shared_config, stored_in_redis
from peers.sidecar import RunningSidecar

CALLS = "mcpcache_upstream_calls_saved_total"
SECONDS = "mcpcache_upstream_seconds_saved_total"


async def held_miss(sidecar: RunningSidecar, peer, arguments: dict[str, str]) -> float:
    """One miss whose answer the upstream holds until the test has seen it arrive there
    and a moment on the clock has passed; how long the client waited for it."""
    calls = peer.calls
    started = time.perf_counter()
    pending = asyncio.ensure_future(
        post(sidecar.url("echo"), call_body(1, "t", arguments), call_headers("t"))
    )
    await async_wait_until(lambda: peer.calls == calls + 1, what="the call upstream")
    floor = time.perf_counter() + 0.05
    await async_wait_until(lambda: time.perf_counter() >= floor, what="time to pass")
    peer.gate(arguments["hold"]).set()
    answer = await asyncio.wait_for(pending, 10)
    assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    return time.perf_counter() - started


async def test_each_hit_saves_a_call_and_the_upstream_time_of_the_call_that_fetched_it(
    sidecar_on_echo, echo_upstream
) -> None:
    peer, _ = echo_upstream
    arguments = {"q": unique(), "hold": unique()}
    waited = await held_miss(sidecar_on_echo, peer, arguments)
    assert sidecar_on_echo.sample(CALLS, server="echo") == 0
    url = sidecar_on_echo.url("echo")
    for hits in (1, 2):
        hit = await post(url, call_body(2, "t", arguments), call_headers("t"))
        assert hit.headers["cache-status"] == "mcpcache; hit"
        assert sidecar_on_echo.sample(CALLS, server="echo") == hits
    saved = sidecar_on_echo.sample(SECONDS, server="echo")
    # Twice the upstream's time: at least the time it was held, at most the client's wait.
    assert 2 * 0.05 <= saved <= 2 * waited


async def test_a_request_that_waited_for_an_identical_one_saves_a_call(
    sidecar_on_echo, echo_upstream
) -> None:
    peer, _ = echo_upstream
    arguments = {"q": unique(), "hold": unique()}
    url, calls = sidecar_on_echo.url("echo"), peer.calls
    leader = asyncio.ensure_future(post(url, call_body(1, "t", arguments), call_headers("t")))
    await async_wait_until(lambda: peer.calls == calls + 1, what="the leader upstream")
    follower = asyncio.ensure_future(post(url, call_body(2, "t", arguments), call_headers("t")))
    await async_wait_until(lambda: sidecar_on_echo.waiting() == 1, what="the follower")
    floor = time.perf_counter() + 0.05
    await async_wait_until(lambda: time.perf_counter() >= floor, what="time to pass")
    peer.gate(arguments["hold"]).set()
    _, followed = await asyncio.wait_for(asyncio.gather(leader, follower), 10)
    assert "collapsed" in followed.headers["cache-status"]
    assert peer.calls == calls + 1
    assert sidecar_on_echo.sample(CALLS, server="echo") == 1
    assert sidecar_on_echo.sample(SECONDS, server="echo") >= 0.05


@pytest.mark.redis
async def test_a_hit_from_the_shared_tier_saves_what_the_other_replica_fetched(
    make_sidecar, redis_server: RedisServer, echo_upstream
) -> None:
    peer, app = echo_upstream
    document = shared_config(app, redis_server.url)
    document["servers"][0]["name"] = "echo"
    first, second = make_sidecar(document), make_sidecar(document)
    arguments = {"q": unique(), "hold": unique()}
    waited = await held_miss(first, peer, arguments)
    await stored_in_redis(first)
    hit = await post(second.url("echo"), call_body(2, "t", arguments), call_headers("t"))
    assert hit.headers["cache-status"].startswith("mcpcache; hit")
    assert second.sample(CALLS, server="echo") == 1
    assert 0.05 <= second.sample(SECONDS, server="echo") <= waited
