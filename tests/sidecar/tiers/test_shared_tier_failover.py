"""A Redis primary killed under traffic, on Redis Cluster and under Sentinel: every call
is answered, correctly and to its own caller, the breaker opens and closes, and shared
hits come back without restarting a sidecar."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from peers.redissentinel import MASTER
from peers.serving import async_wait_until
from peers.sharedtier import SHARED_HIT, call, new_app, shared_config, text_of
from peers.sidecar import RunningSidecar

pytestmark = pytest.mark.redis

USERS = ("Bearer alice-token", "Bearer bob-token")
DEADLINE = 45.0
"""Seconds the stream may run in all (pytest's timeout is the net under it)."""


@dataclass
class Stream:
    """What a steady stream of calls through two replicas saw."""

    calls: int = 0
    shared_hits: list[float] = field(default_factory=list)
    breaker_states: set[str] = field(default_factory=set)
    killed_at: float = 0.0
    failed_over_at: float = 0.0

    def gap(self) -> float:
        """Seconds between the last shared hit before the kill and the first after it."""
        before = max(t for t in self.shared_hits if t < self.killed_at)
        after = min(t for t in self.shared_hits if t > self.killed_at)
        return after - before


async def one_round(first: RunningSidecar, second: RunningSidecar, n: int, seen: Stream) -> None:
    """A new question, asked by two users through both replicas: the first replica goes
    upstream, the second may find the answer in Redis. Every answer must be the asker's
    own, whole and right."""
    arguments = {"text": f"round-{n}"}
    for sidecar, user in ((first, USERS[0]), (second, USERS[0]), (second, USERS[1])):
        status, _, message = await call(sidecar, "whoami", arguments, authorization=user)
        seen.calls += 1
        assert text_of(message).startswith(f"user={user} text=round-{n} #"), (status, message)
        if status == SHARED_HIT and sidecar is second:
            seen.shared_hits.append(time.monotonic())
        if sidecar is first:  # the write to Redis happens after the answer; let it land
            shared = first.sidecar.shared
            assert shared is not None
            await async_wait_until(lambda s=shared: s.pending_writes == 0, 5, what="the write")
    for sidecar in (first, second):
        assert sidecar.sidecar.shared is not None
        seen.breaker_states.add(sidecar.sidecar.shared.breaker_state)


async def stream_through_a_failover(
    first: RunningSidecar,
    second: RunningSidecar,
    kill: Callable[[], None],
    failed_over: Callable[[], bool],
) -> Stream:
    seen = Stream()
    started = time.monotonic()
    n = 0
    while len(seen.shared_hits) < 5:  # the tier works before anything fails
        n += 1
        await one_round(first, second, n, seen)
        assert time.monotonic() - started < DEADLINE, "no shared hits before the kill"
    kill()
    seen.killed_at = time.monotonic()
    while True:
        n += 1
        await one_round(first, second, n, seen)
        if not seen.failed_over_at and failed_over():
            seen.failed_over_at = time.monotonic()
        resumed = [t for t in seen.shared_hits if t > seen.killed_at]
        if seen.failed_over_at and len(resumed) >= 5:
            return seen
        assert time.monotonic() - started < DEADLINE, f"shared hits did not resume: {seen}"


def check(seen: Stream, first: RunningSidecar, second: RunningSidecar, mode: str) -> None:
    assert "open" in seen.breaker_states, "the breaker opened while the primary was gone"
    for sidecar in (first, second):
        assert sidecar.sidecar.shared is not None
        assert sidecar.sidecar.shared.breaker_state == "closed"
        assert sidecar.sample("mcpcache_shared_lookups_total", result="refused") == 0
    print(
        f"\n{mode} failover: {seen.calls} calls, all answered; primary killed, "
        f"failed over after {seen.failed_over_at - seen.killed_at:.2f} s, "
        f"shared hits missing for {seen.gap():.2f} s"
    )


def failover_config(app: Any, location: dict[str, Any]) -> dict[str, Any]:
    # Timeouts a loaded test machine keeps, a retry soon after the failover.
    return shared_config(app, location, new_app(), timeout="500ms", retryAfter="300ms")


async def test_a_cluster_primary_killed_under_traffic_costs_only_shared_hits(
    make_sidecar, upstream, own_redis_cluster
) -> None:
    _, app = upstream
    cluster = own_redis_cluster
    document = failover_config(app, {"cluster": {"nodes": cluster.urls}})
    first, second = make_sidecar(document), make_sidecar(document)
    shared = first.sidecar.shared
    assert shared is not None
    # The shard that holds this app's server: its entries and its generation.
    tagged = shared.keys.generation(document["appId"], "s")
    killed: list[Any] = []

    seen = await stream_through_a_failover(
        first,
        second,
        lambda: killed.append(cluster.kill_primary_of(tagged)),
        lambda: cluster.failed_over(killed[0]),
    )
    check(seen, first, second, "cluster")


async def test_a_sentinel_primary_killed_under_traffic_costs_only_shared_hits(
    make_sidecar, upstream, own_redis_sentinel
) -> None:
    _, app = upstream
    deployment = own_redis_sentinel
    location = {"sentinel": {"nodes": deployment.urls, "master": MASTER}}
    document = failover_config(app, location)
    first, second = make_sidecar(document), make_sidecar(document)

    seen = await stream_through_a_failover(
        first, second, deployment.primary.kill, deployment.failed_over
    )
    check(seen, first, second, "sentinel")
