"""The upstream fetch of a cacheable request: up to the head in its leader's task, the
rest of a streamed body (or a whole background refresh) in its flight's own task.

A `Fetch` is one exchange, read to its end: it passes the answer on to the flight's
leader (while there is one) chunk by chunk, and as soon as the capture has seen the
final answer (before the chunk that carried it goes on), or the body has ended, it has
the answer judged (`admission.judgement.judge`, from what was seen) and carries the
judgement out: stores what may be stored (in memory, then in the Redis tier without
waiting), records what the upstream accepted and (once the answer has gone out) what it
showed, and settles what the flight's followers receive. It decides nothing itself. It
is sent with exactly its own request's headers and body: whoever else waits for the
answer, the credentials are this request's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple

import orjson

from ..cache.observations import Observations
from ..cache.store import ResponseCache
from ..config import Server
from ..edge import spans
from ..edge.forwarded import BrokenBody
from ..edge.incoming import Incoming
from ..metrics import Metrics
from ..rules import cache_status
from ..rules.admission import freshness
from ..rules.admission.capture import ResponseCapture
from ..rules.admission.judgement import Answer, Judgement, judge
from ..rules.admission.response_headers import response_refusal
from ..rules.admission.sharing import FollowerShare, early_share
from ..rules.key.callers import SESSION_HEADER
from ..rules.policy.plan import Lookup
from ..rules.protocol.messages import Message
from ..rules.protocol.results import ERROR, RESULT
from ..rules.reading.headers import response_headers, with_this_hop
from ..tiers.redis_tier import RedisTier
from ..upstream.client import UpstreamFailure
from ..upstream.exchange import Exchange, Exchanges, Outbound
from ..upstream.flights import ALONE, ENDED_EARLY, Flight, Head, Outcome
from ..upstream.relay import Relay
from .invalidator import Invalidator
from .learned import Lessons


class CacheableRequest(NamedTuple):
    """A cacheable request on its way: what it is, for whom (`key`), and its bytes."""

    incoming: Incoming
    server: Server
    message: Message
    raw: bytes
    lookup: Lookup
    method: str
    """Its metrics label."""
    app_id: str
    """The caller's app id when it arrived (the shared tier files its answer under it)."""
    generation: bytes | None = None
    """The server's generation in the shared tier when it was looked up there (None: not
    looked up, or unknown): its answer is written there under it, or not at all."""
    verified: bool = True
    """The upstream answered its authorization context lately (`cache.accepted`); where
    it may meet an entry for every caller and is not, it goes upstream on its own
    (`rules.lookup`)."""

    @property
    def session(self) -> str | None:
        """Its legacy session id, as sent (None: outside one)."""
        return self.incoming.headers.get(SESSION_HEADER)


@dataclass(frozen=True, slots=True)
class Storage:
    """Where fetched answers go, and what decides whether they may."""

    cache: ResponseCache
    tier: RedisTier | None
    lessons: Lessons
    """The step after an answer (and, through it, the removal epochs)."""
    metrics: Metrics

    @property
    def invalidator(self) -> Invalidator:
        return self.lessons.invalidator

    @property
    def observations(self) -> Observations:
        """What the upstream's answers showed over time (for `suggest` and revalidations)."""
        return self.lessons.learned.observations


class Fetch:
    """One upstream call of a cacheable request (see the module's docstring)."""

    def __init__(
        self, exchanges: Exchanges, storage: Storage, request: CacheableRequest, via: str
    ) -> None:
        self._storage = storage
        self._request = request
        self._exchanges = exchanges
        headers = with_this_hop(request.incoming.forwardable, via)
        server = request.server
        self._outbound = Outbound(
            "POST",
            headers,
            request.raw,
            request.method,
            request.message.id,
            request.incoming.headers.get(SESSION_HEADER),
            server.timeout,
            ticketed=True,
            query=request.incoming.query,
        )
        self.capture: ResponseCapture | None = None
        self.judgement: Judgement | None = None
        self._flight: Flight | None = None
        self._exchange: Exchange | None = None
        self._relay: Relay | None = None
        self._status = 0
        self._header_map: dict[str, str] = {}
        self._epoch = 0

    async def run(self, flight: Flight) -> None:
        """The flight's task (a background refresh): the head, then the rest."""
        if await self.open(flight):
            await self.rest(flight)

    async def open(self, flight: Flight) -> bool:
        """Open the call and the leader's head; True when the body goes on after the
        head (`rest` passes it on: the relay stays open for it)."""
        request, storage, server = self._request, self._storage, self._request.server
        self._flight = flight
        self._epoch = storage.invalidator.epoch(server.name)
        exchange = self._exchange = self._exchanges.start(server, self._outbound)
        try:
            response = await exchange.open()
        except UpstreamFailure as exc:
            flight.fail(exc)
            return False
        status = self._status = response.status
        self._header_map = response.header_map
        capture = self.capture = ResponseCapture(
            request.message.id,
            response.event_stream,
            server.cache.effective_max_size,
            request.message.progress_token,
        )
        flight.capture = capture
        refused = response_refusal(
            server, request.lookup, status, response.header_map, response.event_stream
        )
        early = early_share(status, capture, refused)
        if early is not None:  # followers need not wait for the body
            flight.settle(self._outcome(early))
        relay = self._relay = exchange.relay(response, capture)
        headers = tuple(response_headers(response.headers))
        return await self._reading(self._open_head(relay, flight, headers))

    async def rest(self, flight: Flight) -> None:
        """Pass the body on after the head, to its end."""
        assert self._relay is not None
        await self._reading(self._deliver(self._relay.chunks(), flight))

    async def _reading(self, step: Awaitable[bool | None]) -> bool:
        """Run a step of reading the body; True when the body goes on after it. Once
        the body is done with (or the step failed), the answer is judged if it was not,
        and the relay closed."""
        relay, capture, flight = self._relay, self.capture, self._flight
        assert relay is not None
        assert capture is not None
        assert flight is not None
        more = False
        error: BaseException | None = None
        try:
            more = bool(await step)
        except (BrokenBody, UpstreamFailure) as exc:
            error = exc
        except BaseException as exc:  # cancelled (or a fault of ours)
            error = exc
            if flight.task is not asyncio.current_task():
                # The leader's own request task, cut short (only shutdown cancels it):
                # no failure of the upstream's, so whoever waits on the flight goes
                # upstream on its own. A flight's own task cancelled (abandoned, or at
                # shutdown) ends as it always has: its followers are told it failed.
                flight.settle(ALONE)
            raise
        finally:
            if not more:
                # Neither judging nor closing the relay waits (the response is released,
                # not read on), so a cancelled task still judges and releases the answer.
                failure = error.__cause__ if isinstance(error, BrokenBody) else error
                try:
                    if self.judgement is None:
                        if failure is None:
                            capture.finish()
                        else:
                            capture.fail(failure if isinstance(failure, UpstreamFailure) else None)
                        self._judged()
                finally:  # whatever judging did, the response and the ticket are released
                    verdict = self.judgement.verdict if self.judgement is not None else None
                    relay.close(failure, verdict)
        if isinstance(error, BrokenBody):
            flight.break_off()
        elif isinstance(error, UpstreamFailure):  # the JSON body broke off before its head
            flight.fail(error)
        return more

    async def _open_head(
        self, relay: Relay, flight: Flight, headers: tuple[tuple[str, str], ...]
    ) -> bool:
        """Open the leader's head; True when the body goes on after it. A JSON answer is
        one message: it is read (up to maxSize) and judged before the head, so that
        Cache-Status can say whether it was stored."""
        request, status = self._request, self._status
        capture = self.capture
        assert capture is not None
        if capture.event_stream:
            flight.open_head(Head(status, headers, cache_status.MISS))
            return True
        prefix = await relay.read_prefix()
        if relay.complete:
            capture.finish()
            judgement = self._judged()
            if judgement.leaves is not None:
                prefix = freshness.rewritten_body(request.message.id, judgement.leaves, False)
            reason = judgement.verdict.reason
            flight.open_head(Head(status, headers, cache_status.of_miss(reason), prefix, True))
            return False
        too_large = cache_status.forwarded("miss", cache_status.detail("too_large"))
        flight.open_head(Head(status, headers, too_large, prefix))
        return True

    async def _deliver(self, chunks: AsyncIterator[bytes], flight: Flight) -> None:
        """Pass the body on chunk by chunk. Once the capture has seen the final answer,
        it is judged (and stored) before the chunk that carried it goes on: a caller
        that has seen its answer can be served from the cache at once."""
        capture = self.capture
        assert capture is not None
        edit: Callable[[bytes], bytes] | None = None
        async for chunk in chunks:
            if self.judgement is None:
                if capture.final_seen:
                    edit = self._editor(self._judged())
                elif flight.outcome is None:
                    early = early_share(self._status, capture, None)
                    if early is not None:  # the server asked the leader's client
                        flight.settle(self._outcome(early))
            if edit is not None:
                chunk, edit = edit(chunk), None
            await flight.deliver(chunk)

    def _editor(self, judgement: Judgement) -> Callable[[bytes], bytes] | None:
        """What rewrites the chunk an answer event ended in, when its hint was rewritten."""
        capture = self.capture
        if judgement.leaves is None or capture is None:
            return None
        message = freshness.rewritten_body(self._request.message.id, judgement.leaves, False)
        return freshness.event_editor(capture.final_raw, message)

    @property
    def upstream_seconds(self) -> float:
        """How long the upstream has taken so far, from forwarding the request."""
        assert self._exchange is not None
        return time.perf_counter() - self._exchange.call.started

    def _judged(self) -> Judgement:
        """Have the answer judged from what was seen, and carry the judgement out."""
        request, storage, server = self._request, self._storage, self._request.server
        exchange, capture, flight = self._exchange, self.capture, self._flight
        assert exchange is not None
        assert capture is not None
        assert flight is not None
        lookup = request.lookup
        answer = Answer(
            self._status,
            self._header_map,
            capture,
            id_reused=exchange.id_reused,
            overtaken=storage.invalidator.epoch(server.name) != self._epoch,
            session_ended=bool(lookup.session) and self._exchanges.sessions.ended(lookup.session),
        )
        judgement = self.judgement = judge(
            server, lookup, request.message.method, answer, storage.cache.max_bytes
        )
        final = judgement.final
        storage.lessons.take(
            server,
            lookup,
            request.message,
            request.incoming.headers,
            status=self._status,
            listing=final["result"] if judgement.teaches and final is not None else None,
            answer=final if judgement.served else None,
            epoch=self._epoch,
        )
        self._store(judgement, capture.event_stream)
        if (trace := spans.current.get()) is not None:
            trace.judged(judgement.verdict.reason, flight.followers)
        # Settled, the flight takes no new followers: with none waiting, nobody reads
        # their share, so it is not built.
        flight.settle(self._outcome(judgement.share) if flight.followers else ALONE)
        return judgement

    def _store(self, judgement: Judgement, event_stream: bool) -> None:
        """Store a storable answer in memory and, if it belongs to no legacy session, in
        the shared tier (without waiting for it); count why not otherwise."""
        request, storage, server = self._request, self._storage, self._request.server
        verdict, filed, ttl = judgement.verdict, judgement.filing, judgement.ttl
        if verdict.reason is not None:
            storage.metrics.not_stored.labels(server.name, verdict.reason).inc()
            return
        took = self.upstream_seconds
        storage.cache.store(
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
            notes=verdict.notes,
        )
        if storage.tier is not None and not filed.session and request.generation is not None:
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
                verdict.notes,
            )

    def _outcome(self, share: FollowerShare) -> Outcome:
        """The followers' answer, as `share` says, from the leader's answer as judged."""
        capture = self.capture
        assert capture is not None
        if share == "failed":
            if self._status >= 500:
                return Outcome("failed", upstream_status=self._status)
            # A body that timed out is a timeout to the followers too (a 504, not a 502).
            return Outcome("failed", failure=capture.failure or ENDED_EARLY)
        judgement = self.judgement
        final = judgement.final if judgement is not None else None
        if share == "alone" or judgement is None or final is None:
            return ALONE
        member = RESULT if "result" in final else ERROR
        try:
            payload = judgement.leaves or orjson.dumps(
                final["result"] if "result" in final else final["error"]
            )
        except orjson.JSONEncodeError:
            # Stored without our own `_meta` names, whole it is too deep to write: each
            # follower goes upstream itself.
            return ALONE
        return Outcome(
            "answer",
            member,
            payload,
            capture.event_stream,
            judgement.verdict.reason,
            fetch_seconds=self.upstream_seconds,
            notes=judgement.verdict.notes,
        )
