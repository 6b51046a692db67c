"""The caching proxy: one MCP request in, a cached or forwarded response out.

The request path is a short chain of named steps: guard the listener, find the server,
read and check the message, ask the policy for its plan (`rules.policy.plan`), ask the
reading decision what becomes of it (`rules.lookup.choose`, once more after reading the
Redis tier when it says so), and dispatch: forward it untouched (`passing`), answer from
memory (`hits`) or the tier, or go on as a miss (`misses`). The decisions live in
`rules`; the reading in `edge.incoming`; every call upstream is one
`upstream.exchange.Exchange`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

from starlette.types import ASGIApp

from ..cache.store import ResponseCache
from ..config import Server, SidecarConfig
from ..edge.errors import (
    FORBIDDEN,
    LOOP_DETECTED,
    REQUEST_TOO_LARGE,
    UNKNOWN_SERVER,
    ProxyError,
)
from ..edge.forwarded import ForwardedResponse, StreamedResponse
from ..edge.incoming import Incoming
from ..edge.origin import OriginPolicy
from ..metrics import Metrics
from ..rules.key.callers import extra_keyed_headers
from ..rules.lookup import Hit, ReadTier, StepAside, TierState, choose
from ..rules.policy.plan import Bypass, Lookup, plan
from ..rules.protocol.asked import Asked
from ..rules.protocol.messages import Message, method_label
from ..tiers.redis_tier import RedisTier
from ..upstream.client import UpstreamClient
from ..upstream.exchange import Exchanges
from ..upstream.flights import Coalescer
from .fetching import CacheableRequest, Storage
from .hits import Hits
from .invalidator import Invalidator
from .learned import Learned, Lessons
from .misses import MemoryReading, Misses
from .passing import pass_through
from .tier_reads import TierReads


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
        learned: Learned,
        tier: RedisTier | None = None,
    ) -> None:
        self._config, self.cache, self.metrics = config, cache, metrics
        self.origin_policy, self.invalidator, self.hints = origin_policy, invalidator, learned.tools
        self.via_token = f"mcpcache-{secrets.token_hex(8)}"
        """This sidecar's name in `Via`: a request that already carries it has looped."""
        self.via = f"1.1 {self.via_token}"
        self.sessions = learned.sessions
        self.exchanges = Exchanges(client, metrics, self.sessions, invalidator.notice)
        self.accepted = learned.accepted
        self.lessons = Lessons(learned, invalidator)
        self.storage = Storage(cache, tier, self.lessons, metrics)
        self.coalescer = Coalescer()
        self.reading = MemoryReading(cache, self.coalescer)
        self.hits = Hits(metrics, self.coalescer, self.exchanges, self.storage, self.via)
        self.tier_reads = None if tier is None else TierReads(tier, cache, invalidator)
        self.misses = Misses(
            metrics, self.coalescer, self.exchanges, self.storage, self.reading, self.via,
            self._tier,
        )  # fmt: skip

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
        headers, query = incoming.headers, incoming.query
        bound = self.sessions.bound(server, headers, query)
        asked = Asked(server, message, headers, incoming.raw_headers, query, bound)
        decision = plan(asked, config.app_id, self.hints)
        method = method_label(message.method)
        verified = isinstance(decision, Lookup) and self.accepted.accepted(
            decision.scope, decision.context, decision.ttl
        )
        outcome = choose(decision, verified, self.reading, server, self.cache.timer(), self._tier())
        generation = None
        if isinstance(outcome, ReadTier):
            assert isinstance(decision, Lookup)
            assert self.tier_reads is not None
            read = self.tier_reads.read(config.app_id, server, decision, outcome)
            tiered, generation = await read
            now = self.cache.timer()
            outcome = choose(decision, verified, self.reading, server, now, self._tier(), tiered)
        if isinstance(outcome, StepAside):
            if message.is_request or message.doubt is not None:
                self.metrics.count_bypass(server.name, method, outcome.plan.reason)
            return await self._pass(incoming, server, outcome.plan, message, raw)
        assert isinstance(decision, Lookup)
        if isinstance(outcome, Hit) and outcome.from_tier:
            return self.hits.from_tier(server, message, method, outcome.entry)
        if isinstance(outcome, Hit):
            app_id, entry = config.app_id, outcome.entry
            return self.hits.answer(incoming, server, message, decision, method, app_id, entry)
        extra = extra_keyed_headers(server, decision.keyed)
        if extra:
            self.metrics.count_keyed_headers(server.name, extra)
        request = CacheableRequest(
            incoming, server, message, raw, decision, method, config.app_id, generation, verified
        )
        return await self.misses.answer(request, outcome)

    def _tier(self) -> TierState | None:
        return None if self.tier_reads is None else self.tier_reads.state

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

    async def _pass(
        self,
        incoming: Incoming,
        server: Server,
        plan: Bypass,
        message: Message | None = None,
        raw: bytes | None = None,
    ) -> ForwardedResponse | StreamedResponse:
        return await pass_through(
            self.exchanges, self.lessons, self.via, incoming, server, plan, message, raw
        )
