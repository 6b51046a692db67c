"""A cacheable request no fresh entry answers, as `rules.lookup.choose` said: answered
from a stale entry while it is fetched again, after an identical request already
upstream (a flight), or upstream in a flight of its own, up to the answer's head here
and the rest of a streamed body in the flight's task; when that call fails, a stale
entry answers where `rules.lookup.on_failure` allows."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp

from ..cache.store import ResponseCache
from ..edge.forwarded import ForwardedResponse, StreamedResponse
from ..edge.hit_response import HitResponse
from ..metrics import Metrics
from ..rules import cache_status
from ..rules.lookup import Follow, Lead, Outcome, Reading, Refresh, Stale, TierState, on_failure
from ..upstream.exchange import Exchanges, failure_error
from ..upstream.flights import Coalescer, Flight
from .fetching import CacheableRequest, Fetch, Storage


class Misses:
    def __init__(
        self,
        metrics: Metrics,
        coalescer: Coalescer,
        exchanges: Exchanges,
        storage: Storage,
        reading: Reading,
        via: str,
        tier: Callable[[], TierState | None],
    ) -> None:
        self.metrics = metrics
        self.coalescer = coalescer
        self.exchanges = exchanges
        self.storage = storage
        self.cache: ResponseCache = storage.cache
        self.reading = reading
        self.via = via
        self._tier_state = tier

    @property
    def _tier(self) -> TierState | None:
        return self._tier_state()

    async def answer(self, request: CacheableRequest, outcome: Outcome) -> ASGIApp:
        """A cacheable request no fresh entry answers, as `choose` said: from a stale
        entry while it is fetched again, after an identical request already upstream,
        or upstream."""
        key, server = request.lookup.key, request.server
        if isinstance(outcome, Refresh):
            if outcome.start:
                fetch = self._fetcher(request).run
                session = request.session
                coalescer = self.coalescer
                coalescer.start(
                    key, fetch, leader=False, joinable=True, keep_going=True, session=session
                )
            self.metrics.count(server.name, request.method, "stale")
            status, now = cache_status.STALE_WHILE_REVALIDATE, self.cache.timer()
            message = request.message
            return HitResponse.stale(outcome.entry, message.id, now, status, message.progress_token)
        if isinstance(outcome, Follow):
            flight = self.coalescer.joinable(key)
            assert flight is not None  # nothing ran since `choose` saw it
            return await self._follow(request, flight)
        assert isinstance(outcome, Lead)
        return await self._lead(request, joinable=outcome.joinable)

    async def _lead(self, request: CacheableRequest, joinable: bool) -> ASGIApp:
        """Go upstream in a flight of this request's own, reading its bytes as they come:
        up to the head here, the rest of a streamed body in the flight's task."""
        server, method = request.server, request.method
        coalescer, fetch = self.coalescer, self._fetcher(request)
        flight = coalescer.lead(request.lookup.key, joinable=joinable, session=request.session)
        try:
            if await coalescer.run_here(flight, fetch.open):
                coalescer.carry_on(flight, fetch.rest)
            head = await flight.head()
        except BaseException:
            flight.detach_leader()
            raise
        if head.failure is not None or head.status >= 500:
            stale = self._on_failure(request)
            if stale is not None or head.failure is not None:
                flight.detach_leader()
            if stale is not None:
                self.metrics.count(server.name, method, "stale")
                status = cache_status.stale_if_error(head.status or None)
                message, now = request.message, self.cache.timer()
                token = message.progress_token
                return HitResponse.stale(stale.entry, message.id, now, status, token)
            if head.failure is not None:
                self.metrics.count(server.name, method, "miss")
                raise failure_error(server, head.failure, request.message.id)
        self.metrics.count(server.name, method, "miss")
        if head.complete:
            flight.detach_leader()
            return ForwardedResponse(head.status, head.headers, head.cache_status, head.prefix)
        body = flight.leader_body(head.prefix)
        return StreamedResponse(
            head.status, head.headers, head.cache_status, body, flight.detach_leader
        )

    async def _follow(self, request: CacheableRequest, flight: Flight) -> ASGIApp:
        """Wait for an identical request's answer; take it under this request's own id.

        A follower in another legacy session than the leader's takes only an answer that
        was stored (so is every session's); an error, or a failure, may be the leader's
        session's own (ended, unknown to a replica), so it goes upstream itself."""
        server, method, request_id = request.server, request.method, request.message.id
        outcome = await flight.wait_as_follower(server.timeout)
        if outcome is None:  # the flight is stuck: do not wait on it any longer
            return await self._lead(request, joinable=False)
        elsewhere = flight.session != request.session
        if outcome.kind == "answer" and not (elsewhere and outcome.reason is not None):
            self.metrics.count(server.name, method, "collapsed")
            self.metrics.saved(server.name, outcome.fetch_seconds)
            detail = cache_status.detail(outcome.reason) if outcome.reason else None
            status = cache_status.forwarded("miss", detail, collapsed=True)
            return HitResponse.collapsed(
                request_id, outcome.payload, outcome.event_stream, status, outcome.member,
                outcome.notes, request.message.progress_token,
            )  # fmt: skip
        if outcome.kind == "failed":
            stale = self._on_failure(request)
            if stale is not None:
                self.metrics.count(server.name, method, "stale")
                status = cache_status.stale_if_error(outcome.upstream_status)
                token, now = request.message.progress_token, self.cache.timer()
                return HitResponse.stale(stale.entry, request_id, now, status, token)
            if outcome.failure is not None and not elsewhere:
                self.metrics.count(server.name, method, "collapsed")
                raise failure_error(server, outcome.failure, request_id)
        return await self._lead(request, joinable=False)

    def _fetcher(self, request: CacheableRequest) -> Fetch:
        """`request`'s own fetch, with its own credentials."""
        return Fetch(self.exchanges, self.storage, request, self.via)

    def _on_failure(self, request: CacheableRequest) -> Stale | None:
        """The stale entry that answers `request` now that its upstream call failed."""
        lookup, server, now = request.lookup, request.server, self.cache.timer()
        # A stale entry for every caller answers a context the upstream answered within
        # the tool's TTL and the stale window, not only within the TTL.
        accepted = self.storage.lessons.learned.accepted
        within = lookup.ttl + server.cache.keep_stale
        verified = request.verified or accepted.accepted(lookup.scope, lookup.context, within)
        return on_failure(lookup, verified, self.reading, server, now, self._tier)


class MemoryReading:
    """This sidecar's memory and flights, as `rules.lookup.choose` reads them."""

    def __init__(self, cache: ResponseCache, coalescer: Coalescer) -> None:
        self.fresh = cache.get_fresh
        self.stale = cache.get_stale
        self.running = coalescer.running
        self._coalescer = coalescer

    def has_room(self, key: str) -> bool:
        return self._coalescer.joinable(key) is not None
