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
from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp

from ..cache.credentials import AcceptedCredentials
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
from ..rules.admission import freshness
from ..rules.key.callers import extra_keyed_headers
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
        self.credentials = AcceptedCredentials(cache.timer)
        self.storage = Storage(cache, tier, invalidator, metrics, credentials=self.credentials)
        self.coalescer = Coalescer()
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
            self.exchanges.sessions.bound(server, incoming.headers, incoming.query),
        )
        method = method_label(message.method)
        if isinstance(decision, Bypass):
            if message.is_request or message.doubt is not None:
                self.metrics.count_bypass(server.name, method, decision.reason)
            return await self._pass(incoming, server, decision, message, raw)
        # An entry for every caller answers only a credential the upstream accepted.
        verified = self.credentials.accepted(decision.scope, decision.credential)
        unverified = decision.scope.public and not verified
        entry = None if unverified else self.cache.get_fresh(decision.key)
        if entry is None and decision.named_key:  # a call filled from defaults
            entry = self.cache.get_fresh(decision.named_key)
        if entry is None and decision.public_key and verified:  # trustPublicHints
            entry = self.cache.get_fresh(decision.public_key)
        doubted, epoch = None, self.invalidator.epoch(server.name)
        if entry is not None and self.tier is not None and not self.tier.listening:
            # Removals by other replicas may have been missed: Redis answers instead
            # where it can (tiers.broadcast).
            doubted, entry = entry, None
            if decision.session and self.tier.out_of_reach:
                entry = doubted
        if entry is not None:
            return self.hits.answer(
                incoming, server, message, decision, method, config.app_id, entry
            )
        generation = None
        if self.tier is not None and not decision.session:
            # Answers given inside a legacy session end with it: they stay in memory.
            entry, found = await self._tier_lookup(self.tier, config.app_id, server, decision)
            generation = found.generation
            unreached = found.out_of_reach and self.invalidator.epoch(server.name) == epoch
            if doubted is not None and entry is None and unreached:  # the breaker open
                app_id = config.app_id
                return self.hits.answer(
                    incoming, server, message, decision, method, app_id, doubted
                )
            if unverified:  # looked up for its generation, to write its answer under
                entry = None
            if entry is None and decision.public_key and verified:
                public = public_side(decision)
                entry = (await self._tier_lookup(self.tier, config.app_id, server, public))[0]
            if entry is not None:
                self.metrics.count(server.name, method, "hit")
                self.metrics.saved(server.name, entry.fetch_seconds)
                token = message.progress_token
                return HitResponse.of(entry, message.id, self.cache.timer(), True, token)
        extra = extra_keyed_headers(server, decision.keyed)
        if extra:
            self.metrics.count_keyed_headers(server.name, extra)
        request = CacheableRequest(
            incoming, server, message, raw, decision, method, config.app_id, generation, unverified
        )
        return await self._miss(request)

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
        took, notes = value.fetch_seconds, value.notes
        entry = self.cache.store(
            plan.key, *copy, keep_stale=keep, ttl_at=ttl_at, age=age, scope=scope,
            fetch_seconds=took, notes=notes,
        ) or self.cache.make_entry(  # larger than the whole memory budget: served, not kept
            *copy, keep_stale=keep, ttl_at=ttl_at, age=age, scope=scope, fetch_seconds=took,
            notes=notes,
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

    async def _miss(self, request: CacheableRequest) -> ASGIApp:
        """A cacheable request the cache cannot answer fresh: answer from a stale entry
        while it is fetched again, wait for an identical request already upstream, or
        go upstream."""
        key, server = request.lookup.key, request.server
        if request.unverified:  # its own way up; a verified caller may wait on it
            return await self._lead(request, joinable=not self.coalescer.running(key))
        now = self.cache.timer()
        stale = self._stale(key)
        if stale is not None and freshness.stale_while_revalidating(server, stale.expires_at, now):
            if not self.coalescer.running(key):
                self.coalescer.start(
                    key,
                    self._fetch(request),
                    leader=False,
                    joinable=True,
                    keep_going=True,
                    session=request.session,
                )
            self.metrics.count(server.name, request.method, "stale")
            message = request.message
            return HitResponse.stale(
                stale, message.id, now, cache_status.STALE_WHILE_REVALIDATE, message.progress_token
            )
        flight = self.coalescer.joinable(key)
        if flight is not None:
            return await self._follow(request, flight)
        # A flight with no room left keeps its followers; this request goes on its own.
        return await self._lead(request, joinable=not self.coalescer.running(key))

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
            stale = self._stale_on_error(request)
            if stale is not None or head.failure is not None:
                flight.detach_leader()
            if stale is not None:
                self.metrics.count(server.name, method, "stale")
                status = cache_status.stale_if_error(head.status or None)
                message, now = request.message, self.cache.timer()
                return HitResponse.stale(stale, message.id, now, status, message.progress_token)
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
            stale = self._stale_on_error(request)
            if stale is not None:
                self.metrics.count(server.name, method, "stale")
                status = cache_status.stale_if_error(outcome.upstream_status)
                token, now = request.message.progress_token, self.cache.timer()
                return HitResponse.stale(stale, request_id, now, status, token)
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

    def _fetch(self, request: CacheableRequest) -> Callable[[Flight], Awaitable[None]]:
        """The flight's task for `request`: its own fetch, with its own credentials."""
        return self._fetcher(request).run

    def _fetcher(self, request: CacheableRequest) -> Fetch:
        """`request`'s own fetch, with its own credentials."""
        return Fetch(self.exchanges, self.storage, request, self.via)

    def _stale_on_error(self, request: CacheableRequest) -> Entry | None:
        if request.unverified:  # an entry for every caller: not for an unchecked caller
            return None
        entry = self._stale(request.lookup.key)
        if entry is None:
            return None
        if not freshness.stale_on_error(request.server, entry.expires_at, self.cache.timer()):
            return None
        return entry

    def _stale(self, key: str) -> Entry | None:
        """The expired entry kept for `key`, unless removals by other replicas may have
        been missed and Redis can be asked instead (tiers.broadcast): Redis keeps no
        expired entries, so the answer then comes from upstream."""
        if self.tier is not None and not self.tier.memory_trusted:
            return None
        return self.cache.get_stale(key)
