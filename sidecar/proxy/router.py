"""The caching proxy: one MCP request in, a cached or forwarded response out.

The request path is a short chain of named steps: guard the listener, find the server,
read and check the message, ask the policy, then answer from the cache (memory, then the
Redis tier when there is one) or go upstream. The decisions live in `rules`; the reading
in `edge.incoming`; every call upstream is one `upstream.exchange.Exchange`, which
`passing` (forwarded as it is) and `fetching` (fetched for the cache) watch with their
own observer; identical misses share one flight (`upstream.flights`).

A cacheable miss always goes upstream in a flight (`upstream.flights`), which identical
misses may join. Its leader opens the call in its own task, up to the answer's head: a
JSON answer is whole by then. A body that streams on goes on in a task of its own, so
that its client may go away without taking the answer from requests that wait for the
same one; a stale entry's background refresh is the same fetch in a task from the start,
with no client at all.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from starlette.types import ASGIApp

from ..cache.accepted import AcceptedContexts
from ..cache.store import Entry, ResponseCache
from ..config import Server, SidecarConfig
from ..edge.errors import (
    FORBIDDEN,
    LOOP_DETECTED,
    REQUEST_TOO_LARGE,
    UNKNOWN_SERVER,
    ProxyError,
)
from ..edge.forwarded import ForwardedResponse, StreamedResponse
from ..edge.hit import HitResponse
from ..edge.incoming import Incoming
from ..edge.origin import OriginPolicy
from ..metrics import Metrics
from ..rules import cache_status
from ..rules.key.callers import extra_keyed_headers
from ..rules.lookup import (
    Follow,
    Hit,
    Lead,
    Outcome,
    ReadTier,
    Refresh,
    Stale,
    StepAside,
    Tiered,
    TierState,
    choose,
    on_failure,
)
from ..rules.policy.plan import Bypass, Lookup, plan, public_side
from ..rules.protocol.messages import Message, method_label
from ..tiers.redis_tier import RedisTier, TierRead
from ..upstream.client import UpstreamClient
from ..upstream.exchange import Exchanges, failure_error
from ..upstream.flights import Coalescer, Flight
from ..upstream.sessions import LegacySessions
from .fetching import CacheableRequest, Fetch, Storage
from .hits import Hits
from .invalidation import Invalidator
from .passing import pass_through

logger = logging.getLogger("mcpcache.sidecar")


class Proxy:
    """Routes `/mcp/<server>` requests to the named upstream, answering from the cache
    where the policy allows."""

    def __init__(
        self,
        config: Callable[[], SidecarConfig],
        cache: ResponseCache,
        metrics: Metrics,
        client: UpstreamClient,
        origin_policy: OriginPolicy,
        invalidator: Invalidator,
        tier: RedisTier | None = None,
    ) -> None:
        self._config = config
        self.cache = cache
        self.metrics = metrics
        self.client = client
        self.origin_policy = origin_policy
        self.invalidator = invalidator
        self.hints = invalidator.hints
        self.tier = tier
        self.via_token = f"mcpcache-{secrets.token_hex(8)}"
        """This sidecar's name in `Via`: a request that already carries it has looped."""
        self.via = f"1.1 {self.via_token}"
        self.sessions = LegacySessions(cache)
        self.exchanges = Exchanges(client, metrics, self.sessions, invalidator.notice)
        self.accepted = AcceptedContexts(cache.timer)
        self.storage = Storage(cache, tier, invalidator, metrics, accepted=self.accepted)
        self.coalescer = Coalescer()
        self.reading = MemoryReading(cache, self.coalescer)
        self.hits = Hits(
            metrics, self.hints, self.coalescer, self.exchanges, self.storage, self.via
        )

    async def aclose(self) -> None:
        """End every upstream fetch still running (at shutdown)."""
        await self.coalescer.aclose()

    async def handle(self, incoming: Incoming, server_name: str) -> ASGIApp:
        try:
            return await self._handle(incoming, server_name)
        except ProxyError as error:
            return error.to_response()

    async def _handle(self, incoming: Incoming, server_name: str) -> ASGIApp:
        config = self._config()
        server = self._route(incoming, config, server_name)
        if incoming.method != "POST":
            return await self._pass(incoming, server, Bypass("method"))
        raw = await incoming.read_body(config.max_request_bytes)
        message = await incoming.message(raw)
        decision = plan(
            server,
            message,
            incoming.headers,
            incoming.raw_headers,
            config.app_id,
            self.hints,
            incoming.query,
            self.sessions.bound(server, incoming.headers, incoming.query),
        )
        method = method_label(message.method)
        verified = isinstance(decision, Lookup) and self.accepted.accepted(
            decision.scope, decision.context
        )
        outcome = choose(decision, verified, self.reading, server, self.cache.timer(), self._tier)
        generation = None
        if isinstance(outcome, ReadTier):
            assert isinstance(decision, Lookup)
            tiered, generation = await self._read_tier(config.app_id, server, decision, outcome)
            now = self.cache.timer()
            outcome = choose(decision, verified, self.reading, server, now, self._tier, tiered)
        if isinstance(outcome, StepAside):
            if message.is_request or message.doubt is not None:
                self.metrics.count_bypass(server.name, method, outcome.plan.reason)
            return await self._pass(incoming, server, outcome.plan, message, raw)
        assert isinstance(decision, Lookup)
        if isinstance(outcome, Hit):
            if not outcome.from_tier:
                app_id, entry = config.app_id, outcome.entry
                return self.hits.answer(incoming, server, message, decision, method, app_id, entry)
            self.metrics.count(server.name, method, "hit")
            self.metrics.saved(server.name, outcome.entry.fetch_seconds)
            now = self.cache.timer()
            return HitResponse.of(outcome.entry, message.id, now, from_tier=True)
        extra = extra_keyed_headers(server, decision.keyed)
        if extra:
            self.metrics.count_keyed_headers(server.name, extra)
        request = CacheableRequest(
            incoming, server, message, raw, decision, method, config.app_id, generation, verified
        )
        return await self._miss(request, outcome)

    @property
    def _tier(self) -> TierState | None:
        tier = self.tier
        return None if tier is None else TierState(tier.listening, tier.out_of_reach)

    async def _read_tier(
        self, app_id: str, server: Server, lookup: Lookup, read: ReadTier
    ) -> tuple[Tiered, bytes | None]:
        """What the shared tier holds for `lookup` (as `choose` asked), and the server's
        generation there as it was read."""
        assert self.tier is not None
        epoch = self.invalidator.epoch(server.name)
        own, found = await self._tier_lookup(self.tier, app_id, server, lookup)
        unreached = found.out_of_reach and self.invalidator.epoch(server.name) == epoch
        public = None
        if read.public_side and own is None:
            public = (await self._tier_lookup(self.tier, app_id, server, public_side(lookup)))[0]
        return Tiered(own, public, unreached, read.doubted), found.generation

    async def _tier_lookup(
        self, tier: RedisTier, app_id: str, server: Server, plan: Lookup
    ) -> tuple[Entry | None, TierRead]:
        """The Redis tier's entry for this lookup (verified there), copied into memory
        for the rest of its life, as long as its own policy allows (a tool rule's TTL
        included) and never longer than Redis says is left; None on a miss or when Redis
        was not read. With it, what the lookup found: the server's generation in the tier
        as it was read (None: unknown), under which an answer fetched now is written
        there, and whether Redis was out of reach.

        The copy is filed under the lookup's scope, as an answer fetched here would be,
        so that every removal (a purge, a write's invalidation, a notification) finds
        it; an entry read while entries of the server were being removed is not used."""
        epoch = self.invalidator.epoch(server.name)
        found = await tier.get(
            app_id, server.name, plan.key, server.cache.effective_max_size, plan.ttl
        )
        if self.invalidator.epoch(server.name) != epoch:
            return None, TierRead(None, 0.0, None)
        value, remaining = found.entry, found.remaining
        if value is None:
            return None, found
        age = max(0.0, tier.clock() - value.stored_at)
        copy = (value.result, value.event_stream, remaining)
        keep, ttl_at, scope = server.cache.keep_stale, value.ttl_at, plan.scope
        took = value.fetch_seconds
        entry = self.cache.store(
            plan.key, *copy, keep_stale=keep, ttl_at=ttl_at, age=age, scope=scope,
            fetch_seconds=took,
        ) or self.cache.make_entry(  # larger than the whole memory budget: served, not kept
            *copy, keep_stale=keep, ttl_at=ttl_at, age=age, scope=scope, fetch_seconds=took
        )  # fmt: skip
        return entry, found

    def _route(self, incoming: Incoming, config: SidecarConfig, server_name: str) -> Server:
        """The listener's guards, then the named server."""
        if (problem := self.origin_policy.refusal(incoming.headers)) is not None:
            raise ProxyError(403, FORBIDDEN, problem)
        if self.via_token in incoming.headers.get("via", ""):
            raise ProxyError(
                508, LOOP_DETECTED, "request already passed through this sidecar (a loop)"
            )
        if incoming.header_bytes > config.max_header_bytes:
            raise ProxyError(
                431,
                REQUEST_TOO_LARGE,
                f"request headers exceed the limit of {config.max_header_bytes} bytes",
            )
        server = config.server(server_name)
        if server is None:
            raise ProxyError(
                404,
                UNKNOWN_SERVER,
                f"unknown MCP server {server_name!r}",
                data={"server": server_name},
            )
        return server

    async def _miss(self, request: CacheableRequest, outcome: Outcome) -> ASGIApp:
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
            return HitResponse.stale(outcome.entry, request.message.id, now, status)
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
                now = self.cache.timer()
                return HitResponse.stale(stale.entry, request.message.id, now, status)
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
                request_id, outcome.payload, outcome.event_stream, status, outcome.member
            )
        if outcome.kind == "failed":
            stale = self._on_failure(request)
            if stale is not None:
                self.metrics.count(server.name, method, "stale")
                status = cache_status.stale_if_error(outcome.upstream_status)
                return HitResponse.stale(stale.entry, request_id, self.cache.timer(), status)
            if outcome.failure is not None and not elsewhere:
                self.metrics.count(server.name, method, "collapsed")
                raise failure_error(server, outcome.failure, request_id)
        return await self._lead(request, joinable=False)

    async def _pass(
        self,
        incoming: Incoming,
        server: Server,
        plan: Bypass,
        message: Message | None = None,
        raw: bytes | None = None,
    ) -> ForwardedResponse | StreamedResponse:
        return await pass_through(
            self.exchanges, self.invalidator, self.via, incoming, server, plan, message, raw
        )

    def _fetcher(self, request: CacheableRequest) -> Fetch:
        """`request`'s own fetch, with its own credentials."""
        return Fetch(self.exchanges, self.storage, request, self.via)

    def _on_failure(self, request: CacheableRequest) -> Stale | None:
        """The stale entry that answers `request` now that its upstream call failed."""
        lookup, now = request.lookup, self.cache.timer()
        return on_failure(lookup, request.verified, self.reading, request.server, now, self._tier)


class MemoryReading:
    """This sidecar's memory and flights, as `rules.lookup.choose` reads them."""

    def __init__(self, cache: ResponseCache, coalescer: Coalescer) -> None:
        self.fresh = cache.get_fresh
        self.stale = cache.get_stale
        self.running = coalescer.running
        self._coalescer = coalescer

    def has_room(self, key: str) -> bool:
        return self._coalescer.joinable(key) is not None
