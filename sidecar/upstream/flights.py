"""Collapsing identical cacheable misses into one upstream call.

A `Flight` is one upstream fetch of a cacheable request. The request that started it
(the leader) opens the call in its own task, up to the head of the answer: nothing can
cancel that task but shutdown (a client that goes away is noticed only once a body
streams), and a JSON answer, read whole before its head, ends there, with no task, no
event and no channel made for it. A body that streams on after its head goes on in a
task of its own, so that no client's disconnect can cancel it while anyone still waits
for its answer; the leader reads those bytes through a bounded channel. Requests with
the same cache key that arrive meanwhile (followers) wait for the final answer alone,
which the flight settles on once the capture has judged it. A background refresh runs
in a task from the start. `Coalescer` is the registry by key: the key is always the one
`policy.plan` gave, so two requests share a flight exactly when they would share a cache
entry.

Nothing here decides what followers may receive (that is
`admission.sharing.follower_share`) or frames an answer (that is `hit`); this module only
keeps time, tasks and waiters.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

import anyio

from ..cache.entry import Note
from ..edge.forwarded import BrokenBody
from ..rules.admission.capture import ResponseCapture
from .channel import ChunkChannel
from .client import UpstreamFailure

logger = logging.getLogger("mcpcache.sidecar")

MAX_FOLLOWERS: Final = 128
"""Followers one flight takes; more identical requests are forwarded on their own."""
LEADER_BUFFER: Final = 32
"""Chunks queued for a leader that reads slower than the upstream writes; past that the
flight waits for it (its memory stays bounded)."""


class Head(NamedTuple):
    """What the leader's response starts with, or why there is none. (A tuple: made on
    every miss, so cheap.)"""

    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    cache_status: str = ""
    prefix: bytes = b""
    complete: bool = False
    """The whole body is `prefix` (a JSON answer read to its end)."""
    failure: UpstreamFailure | None = None
    """The upstream did not answer (or broke before the leader's headers could go)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the followers of a flight get.

    `answer`: the final JSON-RPC `member` (`result` or `error`) as bytes, framed for each
    follower under its own id. `failed`: the upstream did not answer (`failure`) or
    answered with a server error (`upstream_status`); a stale entry may stand in.
    `alone`: the answer is not theirs to share; each forwards on its own.
    """

    kind: Literal["answer", "failed", "alone"]
    member: bytes = b""
    payload: bytes = b""
    event_stream: bool = False
    reason: str | None = None
    """Why the shared answer was not stored, if it was not."""
    failure: UpstreamFailure | None = None
    upstream_status: int | None = None
    fetch_seconds: float = 0.0
    """How long the upstream took for the answer."""
    notes: tuple[Note, ...] = ()
    """The notifications its stream carried before it, as a hit replays them (an answer
    not stored is shared only when its stream carried none)."""


ALONE: Final = Outcome("alone")


class AnswerMissing(Exception):
    """The upstream's response ended, or the fetch did, before its final answer."""


ENDED_EARLY: Final = UpstreamFailure("broken", AnswerMissing())
"""What followers learn when the body ended or broke off before the answer."""


class Flight:
    """One upstream fetch, its leader's channel and its followers."""

    # How a flight starts, read from the class until it changes (one is made per miss).
    followers = 0
    abandoned = False
    outcome: Outcome | None = None
    capture: ResponseCapture | None = None
    task: asyncio.Task[None] | None = None
    _head: Head | None = None
    _head_ready: asyncio.Event | None = None
    """Made for a leader that waits for the head before it is open."""
    _settled: asyncio.Event | None = None
    """Made for the first follower that waits before the outcome is known."""
    _broken = False
    """The upstream's body broke off: the leader's body must not end as if whole."""
    _channel: ChunkChannel | None = None
    """The leader's chunks, from the flight's task to the leader's response (made
    for the first chunk, or for the leader's body)."""
    _ended = False
    """The fetch is over: a channel made from now on starts closed."""

    def __init__(
        self,
        key: str,
        leader: bool,
        keep_going: bool,
        on_settled: Callable[[Flight], None] = lambda flight: None,
        session: str | None = None,
    ) -> None:
        self.key = key
        self.session = session
        """The legacy session of the request that started it (None: outside one)."""
        self.leader = leader
        """A client reads the stream (it goes when that client does)."""
        self.keep_going = keep_going
        """Run to the end even with nobody waiting (a background refresh)."""
        self._on_settled = on_settled
        """Called once the flight takes no more followers (settled or abandoned)."""

    # The fetching side (the flight's own task).

    def open_head(self, head: Head) -> None:
        if self._head is None:
            self._head = head
            if self._head_ready is not None:
                self._head_ready.set()

    def fail(self, failure: UpstreamFailure) -> None:
        """The upstream did not answer: the leader and the followers learn it at once."""
        self.open_head(Head(failure=failure))
        self.settle(Outcome("failed", failure=failure))

    def settle(self, outcome: Outcome) -> None:
        """The followers' answer is known (the first call decides)."""
        if self.outcome is None:
            self.outcome = outcome
            if self._settled is not None:
                self._settled.set()
            self._on_settled(self)

    async def deliver(self, chunk: bytes) -> None:
        """Pass a chunk to the leader, if it is still there; never raises for its sake."""
        if self.leader and not await self._leaders_channel().send(chunk):
            self.detach_leader()

    def break_off(self) -> None:
        """The upstream's body broke off after the head: the leader's body ends broken."""
        self._broken = True

    def progress(self) -> int:
        """Bytes received from the upstream so far (-1 before its headers)."""
        return self.capture.size if self.capture is not None else -1

    def end(self) -> None:
        """The fetch is over, however it ended: nobody may wait on it any longer."""
        self._ended = True
        if self._channel is not None:
            self._channel.close()  # the leader's body ends after what is queued
        if self._head is None:
            self.open_head(Head(failure=ENDED_EARLY))
        if self.outcome is None:
            self.settle(Outcome("failed", failure=ENDED_EARLY))

    def _leaders_channel(self) -> ChunkChannel:
        channel = self._channel
        if channel is None:
            channel = self._channel = ChunkChannel(LEADER_BUFFER)
            if self._ended:
                channel.close()
        return channel

    # The waiting side (the leader's and followers' request tasks).

    async def head(self) -> Head:
        if self._head is None:
            if self._head_ready is None:
                self._head_ready = asyncio.Event()
            await self._head_ready.wait()
        assert self._head is not None
        return self._head

    async def leader_body(self, prefix: bytes) -> AsyncGenerator[bytes, None]:
        """The leader's body: the prefix, then the chunks as the flight passes them on."""
        try:
            if prefix:
                yield prefix
            async for chunk in self._leaders_channel().chunks():
                yield chunk
            if self._broken:
                raise BrokenBody("the upstream's body broke off")
        finally:
            self.detach_leader()

    def detach_leader(self) -> None:
        """The leader needs no more bytes (its client left, or it has its answer)."""
        self.leader = False
        if self._channel is not None:
            self._channel.leave()
        self._abandon_if_idle()

    async def wait_as_follower(self, idle: float) -> Outcome | None:
        """The followers' answer; None when, after a first `idle` seconds, another
        `idle` seconds pass without the upstream sending a byte (the flight is stuck,
        behind a leader's slow client, say)."""
        self.followers += 1
        try:
            seen: int | None = None
            while self.outcome is None:
                if self._settled is None:
                    self._settled = asyncio.Event()
                with anyio.move_on_after(idle):
                    await self._settled.wait()
                if self.outcome is not None:
                    break
                progress = self.progress()
                if progress == seen:
                    return None
                seen = progress
            return self.outcome
        finally:
            self.followers -= 1
            self._abandon_if_idle()

    def _abandon_if_idle(self) -> None:
        """Nobody waits any more: end the fetch, as a client that goes away always has.
        The task is cancelled once it has run a first step (the loop runs callbacks in
        order): a task cancelled before it starts would never reach its own cleanup,
        and the upstream's response, the exchange's ticket and its report with it."""
        if self.keep_going or self.leader or self.followers or self.abandoned:
            return
        self.abandoned = True
        self._on_settled(self)
        if self.task is not None and not self.task.done():
            asyncio.get_running_loop().call_soon(self.task.cancel)


class Coalescer:
    """The flights in progress, by cache key, and every fetch task (so none leaks)."""

    def __init__(self, max_followers: int = MAX_FOLLOWERS) -> None:
        self.max_followers = max_followers
        self._by_key: dict[str, Flight] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def joinable(self, key: str) -> Flight | None:
        """The flight a request with this key may wait on, if any has room."""
        flight = self._by_key.get(key)
        if flight is None or flight.followers >= self.max_followers:
            return None
        return flight

    def waiting(self) -> int:
        """Followers waiting on any flight."""
        return sum(flight.followers for flight in list(self._by_key.values()))

    def running(self, key: str) -> bool:
        return key in self._by_key

    def start(
        self,
        key: str,
        fetch: Callable[[Flight], Awaitable[None]],
        *,
        leader: bool,
        joinable: bool,
        keep_going: bool = False,
        session: str | None = None,
    ) -> Flight:
        """Run `fetch(flight)` in a task of its own; `joinable`: followers may join it.
        `session`: the legacy session of the request it is for."""
        if joinable:
            flight = self._by_key[key] = Flight(key, leader, keep_going, self._forget, session)
        else:
            flight = Flight(key, leader, keep_going, session=session)
        task = asyncio.create_task(self._run(flight, fetch))
        flight.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return flight

    def lead(self, key: str, *, joinable: bool, session: str | None = None) -> Flight:
        """A flight whose leader opens the call in its own task (`run_here`), for a body
        that may go on in a task of its own (`carry_on`); `joinable`: followers may join
        it. `session`: the legacy session of the request it is for."""
        if joinable:
            flight = self._by_key[key] = Flight(key, True, False, self._forget, session)
        else:
            flight = Flight(key, True, False, session=session)
        return flight

    @staticmethod
    async def run_here(flight: Flight, step: Callable[[Flight], Awaitable[bool]]) -> bool:
        """Run `step(flight)` in this task, the leader's: True when the body goes on
        after the head (pass `carry_on` the rest). A step that fails ends the flight as
        a task that fails does. A leader cancelled before its head (only shutdown
        cancels one) takes no one's answer with it: its followers go on their own."""
        try:
            more = await step(flight)
        except Exception:
            logger.exception("upstream fetch failed")
            flight.break_off()
            flight.end()
            return False
        except BaseException:  # cancelled (only shutdown cancels a request's task)
            flight.settle(ALONE)
            flight.break_off()
            flight.end()
            raise
        if not more:
            flight.end()
        return more

    def carry_on(self, flight: Flight, rest: Callable[[Flight], Awaitable[None]]) -> None:
        """Run `rest(flight)`, the body after the head, in a task of its own: no
        client's disconnect can cancel it while anyone waits for its answer."""
        task = asyncio.create_task(self._run(flight, rest))
        flight.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda done: _cut_short(flight) if done.cancelled() else None)

    async def aclose(self) -> None:
        """Cancel every fetch running in a task of its own (at shutdown) and wait for
        them to release their sockets. A leader opening its call in its own task is its
        request's, which the listener has let finish before this is called."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _forget(self, flight: Flight) -> None:
        """Settled flights take no new followers: later requests find the cache instead."""
        if self._by_key.get(flight.key) is flight:
            del self._by_key[flight.key]

    @staticmethod
    async def _run(flight: Flight, fetch: Callable[[Flight], Awaitable[None]]) -> None:
        finished = False
        try:
            await fetch(flight)
            finished = True
        except asyncio.CancelledError:
            pass
        except Exception:
            logger.exception("upstream fetch failed")
        finally:
            if not finished:  # cut short: what the leader got so far must not look whole
                flight.break_off()
            flight.end()


def _cut_short(flight: Flight) -> None:
    """A task cancelled before it first ran (at shutdown): the leader's body, begun
    before the task, must end, and not as if whole."""
    flight.break_off()
    flight.end()
