"""Flights on their own: the follower cap, and no task outliving its waiters."""

from __future__ import annotations

import asyncio

from mcpcache.sidecar.rules.messages import RESULT
from mcpcache.sidecar.upstream.flights import Coalescer, Flight, Outcome
from peers.serving import async_wait_until


async def test_a_flight_takes_followers_up_to_its_cap() -> None:
    flights = Coalescer(max_followers=2)
    release = asyncio.Event()

    async def fetch(flight: Flight) -> None:
        await release.wait()
        flight.settle(Outcome("answer", RESULT, b'{"content":[]}'))

    flight = flights.start("k", fetch, leader=False, joinable=True, keep_going=True)
    assert flights.joinable("k") is flight
    waiters = [asyncio.create_task(flight.wait_as_follower(5)) for _ in range(2)]
    await async_wait_until(lambda: flights.waiting() == 2, what="two followers")
    assert flights.joinable("k") is None, "a full flight takes no one else"
    release.set()
    outcomes = await asyncio.wait_for(asyncio.gather(*waiters), 5)
    assert [o.kind for o in outcomes if o is not None] == ["answer", "answer"]
    assert not flights.running("k"), "a settled flight is no longer joinable"
    await async_wait_until(lambda: len(flights) == 0, what="the task to end")


async def test_a_flight_nobody_waits_for_any_more_is_cancelled() -> None:
    flights = Coalescer()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def fetch(flight: Flight) -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    flight = flights.start("k", fetch, leader=True, joinable=True)
    await asyncio.wait_for(started.wait(), 5)
    flight.detach_leader()
    await asyncio.wait_for(cancelled.wait(), 5)
    assert not flights.running("k")
    await async_wait_until(lambda: len(flights) == 0, what="the task to end")


async def test_a_background_refresh_runs_on_with_nobody_waiting() -> None:
    flights = Coalescer()
    release = asyncio.Event()
    finished = asyncio.Event()

    async def fetch(flight: Flight) -> None:
        await release.wait()
        finished.set()

    flights.start("k", fetch, leader=False, joinable=True, keep_going=True)
    release.set()
    await asyncio.wait_for(finished.wait(), 5)
    await async_wait_until(lambda: len(flights) == 0, what="the task to end")
