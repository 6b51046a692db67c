"""Flights on their own: the follower cap, and no task outliving its waiters."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from mcpcache.sidecar.edge.forwarded import BrokenBody
from mcpcache.sidecar.rules.admission.capture import ResponseCapture
from mcpcache.sidecar.rules.protocol.results import RESULT
from mcpcache.sidecar.upstream.client import UpstreamFailure
from mcpcache.sidecar.upstream.flights import (
    ALONE,
    ENDED_EARLY,
    LEADER_BUFFER,
    Coalescer,
    Flight,
    Head,
    Outcome,
)
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


async def read_into(body: AsyncIterator[bytes], received: list[bytes]) -> None:
    async for chunk in body:
        received.append(chunk)


def until(release: asyncio.Event) -> Callable[[Flight], Awaitable[None]]:
    """A fetch that ends when the test releases it."""

    async def fetch(flight: Flight) -> None:
        await release.wait()

    return fetch


def flight(leader: bool = True, keep_going: bool = False) -> tuple[Flight, list[Flight]]:
    settled: list[Flight] = []
    return Flight("k", leader, keep_going, settled.append), settled


async def test_the_first_head_and_the_first_outcome_are_the_ones_that_count() -> None:
    one, settled = flight()
    one.open_head(Head(status=200, prefix=b"a"))
    one.open_head(Head(status=500))
    one.settle(Outcome("answer", b"{}"))
    one.settle(ALONE)
    assert (await asyncio.wait_for(one.head(), 5)).status == 200
    assert one.outcome == Outcome("answer", b"{}")
    assert settled == [one], "the registry hears of it once"


async def test_an_upstream_that_does_not_answer_fails_the_leader_and_the_followers() -> None:
    one, settled = flight()
    failure = UpstreamFailure("timeout", TimeoutError())
    one.fail(failure)
    assert (await asyncio.wait_for(one.head(), 5)).failure is failure
    assert await asyncio.wait_for(one.wait_as_follower(5), 5) == Outcome("failed", failure=failure)
    assert settled == [one]


async def test_a_fetch_that_ends_without_an_answer_tells_everyone_it_ended_early() -> None:
    one, _ = flight()
    await one.deliver(b"queued")
    one.end()
    head = await asyncio.wait_for(one.head(), 5)
    assert head.failure is ENDED_EARLY
    assert ENDED_EARLY.kind == "broken"
    assert one.outcome == Outcome("failed", failure=ENDED_EARLY)
    body = [chunk async for chunk in one.leader_body(b"")]
    assert body == [b"queued"], "what was queued still reaches the leader, then it ends"


async def test_the_leaders_body_is_the_prefix_then_the_chunks_and_ends_broken_if_they_broke() -> (
    None
):
    whole, _ = flight()
    await whole.deliver(b"1")
    await whole.deliver(b"2")
    whole.end()
    assert [chunk async for chunk in whole.leader_body(b"0")] == [b"0", b"1", b"2"]
    assert not whole.leader, "a leader with its whole body needs no more"
    broken, _ = flight()
    await broken.deliver(b"1")
    broken.break_off()
    broken.end()
    received: list[bytes] = []
    with pytest.raises(BrokenBody, match=r"^the upstream's body broke off$"):
        await read_into(broken.leader_body(b""), received)
    assert received == [b"1"]


async def test_chunks_for_a_leader_that_left_are_dropped_and_nothing_waits_for_it() -> None:
    one, _ = flight(leader=False)
    for _ in range(LEADER_BUFFER + 1):
        await asyncio.wait_for(one.deliver(b"x"), 5)  # nobody reads: never blocks
    assert one.progress() == -1, "no bytes counted before the upstream's headers"
    one.capture = ResponseCapture(1, event_stream=False, max_size=100)
    one.capture.feed(b"abc")
    assert one.progress() == 3


IDLE = 0.3
"""A follower's idle time in these tests; the time passing is what they test."""


async def follower_of_a_trickling_flight() -> tuple[Flight, asyncio.Future[Outcome | None]]:
    """A follower of a flight whose upstream sends a few bytes several times in each idle
    time, for two idle times: the time passing, with bytes in it, is what is tested."""
    one, _ = flight(keep_going=True)
    capture = one.capture = ResponseCapture(1, event_stream=True, max_size=1 << 16)
    waiting = asyncio.ensure_future(one.wait_as_follower(IDLE))
    for _ in range(12):
        await asyncio.sleep(IDLE / 6)
        capture.feed(b": ping\n\n")
    return one, waiting


async def test_a_follower_gives_up_on_a_flight_that_makes_no_progress() -> None:
    one, waiting = await follower_of_a_trickling_flight()
    assert not waiting.done()
    assert one.followers == 1
    assert await asyncio.wait_for(waiting, 5) is None
    assert one.followers == 0


async def test_a_follower_waits_past_the_idle_time_while_bytes_arrive() -> None:
    one, waiting = await follower_of_a_trickling_flight()
    one.settle(Outcome("answer", b"{}"))
    assert await asyncio.wait_for(waiting, 5) == Outcome("answer", b"{}")


async def test_the_last_waiter_leaving_cancels_the_fetch_once() -> None:
    flights = Coalescer()
    cancelled = asyncio.Event()

    async def fetch(flight: Flight) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    one = flights.start("k", fetch, leader=True, joinable=True)
    follower = asyncio.ensure_future(one.wait_as_follower(60))
    await async_wait_until(lambda: flights.waiting() == 1, what="the follower")
    one.detach_leader()
    assert not one.abandoned, "a follower still waits"
    assert flights.running("k")
    follower.cancel()
    await asyncio.wait_for(cancelled.wait(), 5)
    assert one.abandoned
    assert not flights.running("k"), "an abandoned flight takes no followers"
    await async_wait_until(lambda: len(flights) == 0, what="the task to end")


async def test_a_flight_not_joinable_is_not_found_by_its_key() -> None:
    flights = Coalescer()
    release = asyncio.Event()
    fetch = until(release)
    one = flights.start("k", fetch, leader=False, joinable=False, keep_going=True)
    assert flights.joinable("k") is None
    assert not flights.running("k")
    assert len(flights) == 1
    release.set()
    await asyncio.wait_for(one.task, 5)
    assert one.outcome == Outcome("failed", failure=ENDED_EARLY)
    await async_wait_until(lambda: len(flights) == 0, what="the task to end")


async def test_a_settled_flight_leaves_the_registry_but_a_newer_one_of_its_key_stays() -> None:
    flights = Coalescer()
    release = asyncio.Event()
    fetch = until(release)
    first = flights.start("k", fetch, leader=False, joinable=True, keep_going=True)
    first.settle(ALONE)
    second = flights.start("k", fetch, leader=False, joinable=True, keep_going=True)
    assert flights.joinable("k") is second
    release.set()
    await asyncio.wait_for(asyncio.gather(first.task, second.task), 5)
    assert not flights.running("k")


async def test_a_fetch_that_raises_ends_its_flight_and_shutdown_cancels_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flights = Coalescer()
    cancelled = asyncio.Event()

    async def failing(flight: Flight) -> None:
        raise RuntimeError("bug")

    hanging_started: list[str] = []

    async def hanging(flight: Flight) -> None:
        hanging_started.append(flight.key)
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    with caplog.at_level(logging.ERROR, logger="mcpcache.sidecar"):
        broken = flights.start("a", failing, leader=False, joinable=True, keep_going=True)
        await asyncio.wait_for(broken.task, 5)
    assert broken.outcome == Outcome("failed", failure=ENDED_EARLY)
    (record,) = [r for r in caplog.records if r.name == "mcpcache.sidecar"]
    assert record.getMessage() == "upstream fetch failed"
    assert record.exc_info is not None
    flights.start("b", hanging, leader=False, joinable=True, keep_going=True)
    flights.start("c", hanging, leader=False, joinable=True, keep_going=True)
    await async_wait_until(lambda: len(flights) == 2, what="the first task to end")
    await async_wait_until(lambda: len(hanging_started) == 2, what="the others to start")
    async with asyncio.timeout(5):  # in this task: aclose itself must wait for them
        await flights.aclose()
    assert cancelled.is_set()
    assert len(flights) == 0
    assert flights.waiting() == 0


@pytest.mark.parametrize("joinable", [True, False], ids=["joinable", "alone"])
async def test_the_leader_reads_what_its_fetch_delivers(joinable: bool) -> None:
    flights = Coalescer()

    async def fetch(flight: Flight) -> None:
        flight.open_head(Head(status=200))
        await flight.deliver(b"a")
        await flight.deliver(b"b")

    one = flights.start("k", fetch, leader=True, joinable=joinable)
    assert (await asyncio.wait_for(one.head(), 5)).status == 200
    received: list[bytes] = []
    await asyncio.wait_for(read_into(one.leader_body(b""), received), 5)
    assert received == [b"a", b"b"]


@pytest.mark.parametrize("joinable", [True, False], ids=["joinable", "alone"])
async def test_a_background_refresh_outlives_its_leader_and_followers(joinable: bool) -> None:
    flights = Coalescer()
    release = asyncio.Event()
    finished = asyncio.Event()

    async def fetch(flight: Flight) -> None:
        await release.wait()
        finished.set()

    one = flights.start("k", fetch, leader=True, joinable=joinable, keep_going=True)
    follower = asyncio.ensure_future(one.wait_as_follower(60))
    await async_wait_until(lambda: one.followers == 1, what="the follower")
    follower.cancel()
    one.detach_leader()
    await async_wait_until(lambda: one.followers == 0, what="the follower to leave")
    assert not one.abandoned
    release.set()
    await asyncio.wait_for(finished.wait(), 5)


async def test_shutdown_right_after_a_fetch_starts_waits_for_it_quietly() -> None:
    """A fetch cancelled before its task first ran ends cancelled, not in `_run`: the
    shutdown still waits for it without failing."""
    flights = Coalescer()
    started: list[Flight] = []

    async def fetch(flight: Flight) -> None:
        started.append(flight)

    flights.start("k", fetch, leader=False, joinable=True)
    async with asyncio.timeout(5):
        await flights.aclose()
    assert started == []
    assert len(flights) == 0


async def leader_reads(one: Flight, received: list[bytes]) -> None:
    head = await asyncio.wait_for(one.head(), 5)
    await read_into(one.leader_body(head.prefix), received)


async def test_a_fetch_that_raises_midway_ends_the_leaders_body_broken(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fetch(flight: Flight) -> None:
        flight.open_head(Head(status=200))
        await flight.deliver(b"part")
        raise RuntimeError("bug")

    received: list[bytes] = []
    with caplog.at_level(logging.CRITICAL, logger="mcpcache.sidecar"):
        one = Coalescer().start("k", fetch, leader=True, joinable=True)
        with pytest.raises(BrokenBody):
            await asyncio.wait_for(leader_reads(one, received), 5)
    assert received == [b"part"], "what came is passed on, then the body breaks"


async def test_a_fetch_cancelled_midway_ends_the_leaders_body_broken() -> None:
    delivered = asyncio.Event()

    async def fetch(flight: Flight) -> None:
        flight.open_head(Head(status=200))
        await flight.deliver(b"part")
        delivered.set()
        await asyncio.Event().wait()

    flights, received = Coalescer(), []
    one = flights.start("k", fetch, leader=True, joinable=True)
    reader = asyncio.ensure_future(leader_reads(one, received))
    await asyncio.wait_for(delivered.wait(), 5)
    await asyncio.wait_for(flights.aclose(), 5)
    with pytest.raises(BrokenBody):
        await asyncio.wait_for(reader, 5)
    assert received == [b"part"]


async def test_a_json_answer_led_in_the_leaders_task_makes_no_task() -> None:
    flights = Coalescer()

    async def head(flight: Flight) -> bool:
        flight.open_head(Head(status=200, prefix=b"{}", complete=True))
        flight.settle(ALONE)
        return False

    one = flights.lead("k", joinable=True)
    assert flights.joinable("k") is one
    assert await flights.run_here(one, head) is False
    assert (await asyncio.wait_for(one.head(), 5)).complete
    assert len(flights) == 0, "no task was started"
    assert not flights.running("k"), "a settled flight is no longer joinable"


async def test_a_streamed_body_goes_on_in_a_task_that_outlives_its_leader() -> None:
    flights = Coalescer()
    release = asyncio.Event()

    async def head(flight: Flight) -> bool:
        flight.open_head(Head(status=200))
        return True

    async def rest(flight: Flight) -> None:
        await flight.deliver(b"part")
        await release.wait()
        flight.settle(Outcome("answer", RESULT, b'{"content":[]}'))

    one = flights.lead("k", joinable=True)
    assert await flights.run_here(one, head) is True
    flights.carry_on(one, rest)
    follower = asyncio.ensure_future(one.wait_as_follower(60))
    await async_wait_until(lambda: one.followers == 1, what="the follower")
    one.detach_leader()  # the leader's client has gone
    assert not one.abandoned, "a follower still waits"
    release.set()
    outcome = await asyncio.wait_for(follower, 5)
    assert outcome is not None
    assert outcome.kind == "answer"
    await async_wait_until(lambda: len(flights) == 0, what="the task to end")


async def test_a_leader_cancelled_before_its_head_sends_its_followers_on_their_own() -> None:
    flights = Coalescer()
    opening = asyncio.Event()

    async def head(flight: Flight) -> bool:
        opening.set()
        await asyncio.Event().wait()
        return False

    one = flights.lead("k", joinable=True)
    leader = asyncio.ensure_future(flights.run_here(one, head))
    await asyncio.wait_for(opening.wait(), 5)
    follower = asyncio.ensure_future(one.wait_as_follower(60))
    await async_wait_until(lambda: one.followers == 1, what="the follower")
    leader.cancel()
    assert await asyncio.wait_for(follower, 5) == ALONE
    with pytest.raises(asyncio.CancelledError):
        await leader
    assert (await one.head()).failure is ENDED_EARLY


async def test_a_leaders_step_that_raises_ends_its_flight(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def head(flight: Flight) -> bool:
        raise RuntimeError("bug")

    one = Coalescer().lead("k", joinable=False)
    with caplog.at_level(logging.CRITICAL, logger="mcpcache.sidecar"):
        assert await Coalescer.run_here(one, head) is False
    assert (await one.head()).failure is ENDED_EARLY
    assert one.outcome == Outcome("failed", failure=ENDED_EARLY)
