"""A streamed flight whose own fetch task is cancelled: abandoned by its last reader,
or at shutdown.

Driven in-process through the proxy's ASGI app (as in test_cancelled_leader), against
the faulty upstream over a loopback socket.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mcpcache.sidecar.app.assembly import Sidecar
from mcpcache.sidecar.config import parse_config
from peers.faulty import FaultyUpstream
from peers.in_process import SECONDS, InProcessCall
from peers.serving import async_wait_until


def _sidecar(url: str) -> Sidecar:
    server = {"name": "s", "url": url, "cache": {"enabled": True}}
    config = parse_config(json.dumps({"servers": [server]}))
    return Sidecar(lambda: config)


def _progress(sidecar: Sidecar) -> int:
    flights = sidecar.proxy.coalescer._by_key.values()
    return max((f.progress() for f in flights), default=-1)


async def test_a_leader_that_leaves_a_stream_alone_releases_the_upstream_call(
    faulty: FaultyUpstream,
) -> None:
    """The leader's client leaves a stream nobody else waits for: the fetch task
    (cancelled once it has started) closes the response and reports the call."""
    sidecar = _sidecar(faulty.url("stall-after-head?gate=g1"))
    app = sidecar.proxy_app()
    try:
        leader = InProcessCall(app, 1, {"q": "alone"})
        task = asyncio.create_task(leader())
        await async_wait_until(lambda: leader.parts, SECONDS, "the leader's first bytes")
        leader.leave()
        await asyncio.wait_for(task, SECONDS)
        coalescer = sidecar.proxy.coalescer
        await async_wait_until(lambda: len(coalescer) == 0, SECONDS, "the fetch task to end")
        registry = sidecar.proxy.metrics.registry
        count = "mcpcache_upstream_request_duration_seconds_count"
        labels = {"server": "s", "method": "tools/call"}
        await async_wait_until(
            lambda: registry.get_sample_value(count, labels) == 1, SECONDS, "the call reported"
        )
    finally:
        await sidecar.proxy.aclose()
        await sidecar.client.aclose()


async def test_shutdown_does_not_send_a_waiting_follower_upstream_again(
    faulty: FaultyUpstream,
) -> None:
    """`Coalescer.aclose` cancels a streamed flight's task while a follower waits on it
    (its leader's client left): the follower is told the fetch ended (a 502, or a stale
    entry), and no new upstream call starts in the middle of shutdown, where no task of
    the coalescer's would be waited for."""
    sidecar = _sidecar(faulty.url("stall-after-head?gate=g2"))
    app = sidecar.proxy_app()
    coalescer = sidecar.proxy.coalescer
    tasks: list[asyncio.Task[Any]] = []
    try:
        leader = InProcessCall(app, 1, {"q": "same"})
        tasks.append(asyncio.create_task(leader()))
        await async_wait_until(lambda: _progress(sidecar) > 0, SECONDS, "the stream to start")
        follower = InProcessCall(app, 2, {"q": "same"})
        tasks.append(asyncio.create_task(follower()))
        await async_wait_until(lambda: coalescer.waiting() == 1, SECONDS, "the follower")
        leader.leave()
        await asyncio.wait_for(tasks[0], SECONDS)
        assert coalescer.waiting() == 1
        assert faulty.requests == 1
        await asyncio.wait_for(sidecar.proxy.aclose(), SECONDS)  # shutdown
        # Told the fetch ended, the follower answers at once; sent upstream again, it
        # would wait on the stalled stream past this deadline.
        await asyncio.wait_for(tasks[1], 5)
        assert faulty.requests == 1, "a follower went upstream again during shutdown"
        assert len(coalescer) == 0, "a fetch task outlived Coalescer.aclose"
    finally:
        follower.leave()
        faulty.gate("g2").set()
        await sidecar.proxy.aclose()
        await sidecar.client.aclose()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
