"""The upstream fetch of a cacheable request, in its flight's own task.

A `Fetch` is one exchange and the observer it plugs in: it relays the answer to the
flight's leader (while there is one), judges the answer once the capture has seen it,
stores what may be stored (in memory, then in the Redis tier without waiting), and
settles what the flight's followers receive. It is sent with exactly its own request's
headers and body: whoever else waits for the answer, the credentials are this request's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import orjson

from ..cache.credentials import AcceptedCredentials
from ..cache.observations import Observations, answer_digest, scope_label
from ..cache.store import ResponseCache
from ..config import Server
from ..edge import spans
from ..edge.forwarded import BrokenBody
from ..edge.incoming import Incoming
from ..metrics import Metrics
from ..rules import answers, cache_status, freshness, policy
from ..rules.capture import ResponseCapture
from ..rules.headers import forward_headers, response_headers
from ..rules.hints import listing_ttl
from ..rules.messages import ERROR, RESULT, Message, Verdict, cache_scope
from ..tiers.redis_tier import RedisTier
from ..upstream.client import UpstreamFailure
from ..upstream.exchange import Exchange, Exchanges, Outbound
from ..upstream.flights import ALONE, ENDED_EARLY, Flight, Head, Outcome
from ..upstream.relay import Relay
from .invalidation import Invalidator


@dataclass(frozen=True, slots=True)
class CacheableRequest:
    """A cacheable request on its way: what it is, for whom (`key`), and its bytes."""

    incoming: Incoming
    server: Server
    message: Message
    raw: bytes
    lookup: policy.Lookup
    method: str
    """Its metrics label."""
    app_id: str
    """The caller's app id when it arrived (the shared tier files its answer under it)."""
    generation: bytes | None = None
    """The server's generation in the shared tier when it was looked up there (None: not
    looked up, or unknown): its answer is written there under it, or not at all."""
    unverified: bool = False
    """It may meet an entry for every caller, but the upstream has not accepted its
    credential lately: it goes upstream on its own (no stale answer, no flight to
    join; those who join its flight get its answer only once stored, so accepted)."""

    @property
    def session(self) -> str | None:
        """Its legacy session id, as sent (None: outside one)."""
        return self.incoming.headers.get(policy.SESSION_HEADER)


@dataclass(frozen=True, slots=True)
class Storage:
    """Where fetched answers go, and what decides whether they may."""

    cache: ResponseCache
    tier: RedisTier | None
    invalidator: Invalidator
    metrics: Metrics
    observations: Observations = field(default_factory=Observations)
    """What the upstream's answers showed over time (for `suggest` and revalidations)."""
    credentials: AcceptedCredentials | None = None
    """Credentials the upstream accepted lately (for entries for every caller)."""


class Fetch:
    """One upstream call of a cacheable request (see the module's docstring)."""

    follows = True

    def __init__(
        self, exchanges: Exchanges, storage: Storage, request: CacheableRequest, via: str
    ) -> None:
        self._storage = storage
        self._request = request
        self._exchanges = exchanges
        headers = forward_headers(request.incoming.raw_headers, via)
        server = request.server
        self._outbound = Outbound(
            "POST",
            headers,
            request.raw,
            request.method,
            request.message.id,
            request.incoming.headers.get(policy.SESSION_HEADER),
            server.timeout,
            ticketed=True,
            query=request.incoming.query,
        )
        self.capture: ResponseCapture | None = None
        self._flight: Flight | None = None
        self._exchange: Exchange | None = None
        self._status = 0
        self._header_map: dict[str, str] = {}
        self._epoch = 0
        self._learner = request.lookup.learner
        self._relay: Relay | None = None
        self.result: bytes | None = None
        """The result as it leaves, when it is not the upstream's bytes (see `freshness`)."""

    async def run(self, flight: Flight) -> None:
        """The flight's task: open, relay to the leader, judge, settle."""
        request, storage, server = self._request, self._storage, self._request.server
        self._flight = flight
        self._epoch = storage.invalidator.epoch(server.name)
        exchange = self._exchange = self._exchanges.start(server, self._outbound)
        try:
            response = await exchange.open()
        except UpstreamFailure as exc:
            flight.fail(exc)
            return
        status = self._status = response.status
        self._header_map = response.header_map
        refused = answers.response_refusal(
            server, request.lookup, status, response.header_map, response.event_stream
        )
        capture = self.capture = ResponseCapture(
            request.message.id, response.event_stream, server.cache.effective_max_size, refused
        )
        flight.capture = capture
        if refused is not None:
            flight.settle(_outcome(status, capture, Verdict(refused)))
        relay = self._relay = exchange.relay(response, self)
        headers = tuple(response_headers(response.headers))
        if response.event_stream:
            flight.open_head(Head(status, headers, cache_status.MISS))
        else:
            # A JSON answer is one message: read it (up to maxSize) before the headers, so
            # that Cache-Status can say whether it was stored.
            try:
                prefix = await relay.read_prefix()
            except UpstreamFailure as exc:
                flight.fail(exc)
                return
            if relay.done:
                if self.result is not None:
                    prefix = freshness.rewritten_body(request.message.id, self.result, False)
                flight.open_head(Head(status, headers, relay.cache_status(), prefix, True))
                return
            too_large = cache_status.forwarded("miss", cache_status.detail("too_large"))
            flight.open_head(Head(status, headers, too_large, prefix))
        try:
            await relay.deliver(flight.deliver)
        except BrokenBody:
            flight.break_off()

    @property
    def upstream_seconds(self) -> float:
        """How long the upstream has taken so far, from forwarding the request."""
        assert self._exchange is not None
        return time.perf_counter() - self._exchange.call.started

    def judged(self, verdict: Verdict, event_stream: bool) -> Verdict:
        """The answer is judged: store it if it may be, settle the followers' answer."""
        request, storage, server = self._request, self._storage, self._request.server
        assert self._exchange is not None
        assert self._flight is not None
        capture = self.capture
        if self._exchange.id_reused:
            # Whatever it says, the answer may be another request's: neither kept nor
            # handed to followers (an error or an uncached result included).
            verdict = Verdict("id_reused")
        if verdict.reason is None and storage.invalidator.epoch(server.name) != self._epoch:
            verdict = Verdict("invalidated")  # fetched before entries were dropped
        final = capture.final if capture is not None else None
        # A listing answered for another request, or overtaken by a change the server
        # announced while it was upstream, teaches nothing.
        current = verdict.reason not in ("id_reused", "invalidated")
        learner = self._learner
        if learner is not None and current and final is not None and "result" in final:
            held = listing_ttl(final["result"], server.cache.metadata_ttl, server.cache.ttl)
            storage.invalidator.hints.learn(server.name, final["result"], learner, held)
        result = final.get("result") if final is not None else None
        lookup = request.lookup
        served = current and isinstance(result, dict) and result.get("isError") is not True
        if lookup.credential and served and 200 <= self._status < 300:
            assert storage.credentials is not None  # the upstream served this credential
            held = lookup.ttl + server.cache.keep_stale  # as long as an entry may answer
            storage.credentials.accept(lookup.scope, lookup.credential, held)
        if served and isinstance(result, dict):
            digest = answer_digest(result)
            label, now = scope_label(lookup.scope), storage.cache.timer()
            storage.observations.saw(server.name, label, lookup.key, digest, now)
        rewrite = final is not None and freshness.overrides(server, request.message.method, final)
        if rewrite and final is not None:
            scope = cache_scope(final["result"])
            everyone = answers.for_everyone(server, request.lookup, scope, self._header_map)
            verdict = freshness.storable(verdict, final, everyone)
        verdict = answers.scoped(request.lookup, verdict, self._header_map)
        ttl = answers.storage_ttl(
            server, verdict, self._header_map, request.message.method, request.lookup.ttl
        )
        verdict = self._store(verdict, event_stream, ttl)
        if rewrite and verdict.reason is None:
            self.result = freshness.restated(verdict, ttl)
            if event_stream and self._relay is not None and capture is not None:
                message = freshness.rewritten_body(request.message.id, self.result, False)
                self._relay.edit = freshness.event_editor(capture.final_raw, message)
        # Settled, the flight takes no new followers: with none waiting, nobody reads
        # their share, so it is not built.
        flight = self._flight
        assert capture is not None
        if (trace := spans.current.get()) is not None:
            trace.judged(verdict.reason, flight.followers)
        if flight.followers:
            public = request.lookup.scope.public
            took = self.upstream_seconds
            flight.settle(_outcome(self._status, capture, verdict, public, self.result, took))
        else:
            flight.settle(ALONE)
        return verdict

    def _store(self, verdict: Verdict, event_stream: bool, ttl: float) -> Verdict:
        """Store a storable answer in memory and, only if memory kept it and it belongs
        to no legacy session, in the shared tier (without waiting for it); count why not
        otherwise."""
        request, storage = self._request, self._storage
        server, lookup = request.server, request.lookup
        sessions = self._exchanges.sessions
        took = self.upstream_seconds
        if verdict.reason is None and lookup.session and sessions.ended(lookup.session):
            verdict = Verdict("invalidated")  # its session ended while it was upstream
        if verdict.reason is None:
            filed = answers.filing(server, lookup, verdict, self._header_map)
            stored = storage.cache.store(
                filed.key,
                verdict.result,
                event_stream,
                ttl,
                filed.session,
                server.cache.keep_stale,
                verdict.ttl_at,
                scope=filed.scope,
                layout=verdict.layout,
                age_note=server.cache.age_note,
                fetch_seconds=took,
            )
            if stored is None:
                verdict = Verdict("over_budget")
            elif storage.tier is not None and not filed.session and request.generation is not None:
                storage.tier.put(
                    request.app_id,
                    server.name,
                    filed.key,
                    verdict.result,
                    event_stream,
                    ttl,
                    server.cache.effective_max_size,
                    request.generation,
                    took,
                )
        if verdict.reason is not None:
            storage.metrics.not_stored.labels(server.name, verdict.reason).inc()
        return verdict


def _outcome(
    status: int,
    capture: ResponseCapture,
    verdict: Verdict,
    public: bool = False,
    result: bytes | None = None,
    fetch_seconds: float = 0.0,
) -> Outcome:
    """The followers' answer, from the leader's answer as judged so far (`result`: the
    result as it leaves, when the sidecar rewrote it; `fetch_seconds`: how long the
    upstream took for it)."""
    kept = capture.final is not None
    share = answers.follower_share(status, verdict, capture.final_seen, kept, public)
    if share == "failed":
        if status >= 500:
            return Outcome("failed", upstream_status=status)
        # A body that timed out is a timeout to the followers too (a 504, not a 502).
        return Outcome("failed", failure=capture.failure or ENDED_EARLY)
    if share == "alone" or capture.final is None:
        return ALONE
    final = capture.final
    member = RESULT if "result" in final else ERROR
    payload = result or orjson.dumps(final["result"] if "result" in final else final["error"])
    event_stream = capture.event_stream
    return Outcome(
        "answer", member, payload, event_stream, verdict.reason, fetch_seconds=fetch_seconds
    )
