"""The caching proxy: one MCP request in, a cached or forwarded response out.

The request path is a short chain of named steps: guard the listener, find the server,
read and check the message, ask the policy, then answer from the cache (memory, then the
shared tier when there is one) or forward. The decisions live in `policy`; the reading in
`incoming`; the relaying in `relay`; the sharing of one upstream call between identical
requests in `coalesce`; the shared tier on Redis in `shared`.

A cacheable miss always goes upstream in a flight, a task of its own: its client may go
away without taking the answer from requests that wait for the same one, and a stale
entry's background refresh is the same fetch with no client at all.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import cachetools
import orjson
from starlette.types import ASGIApp

from ..cache.store import Entry, ResponseCache
from ..config import Server, SidecarConfig
from ..edge.errors import (
    FORBIDDEN,
    LOOP_DETECTED,
    REQUEST_TOO_LARGE,
    UNKNOWN_SERVER,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE,
    ProxyError,
)
from ..edge.forwarded import BrokenBody, ForwardedResponse, StreamedResponse
from ..edge.hit import HitResponse
from ..edge.incoming import Incoming
from ..edge.origin import OriginPolicy
from ..metrics import Metrics
from ..rules import answers, cache_status, policy
from ..rules.capture import ResponseCapture
from ..rules.headers import forward_headers, response_headers
from ..rules.messages import ERROR, INVALID_REQUEST, RESULT, Message, Verdict, method_label
from ..rules.notices import Notice
from ..rules.session_ids import SessionRequestIds, Ticket
from ..tiers.redis_tier import SharedTier
from ..upstream.client import UpstreamClient, UpstreamFailure, UpstreamResponse
from ..upstream.flights import ALONE, ENDED_EARLY, Coalescer, Flight, Head, Outcome
from ..upstream.relay import Call, Relay
from .invalidation import Invalidator

logger = logging.getLogger("mcpcache.sidecar")

ENDED_SESSIONS_KEPT = 4096
"""How many ended legacy sessions are remembered, so that an answer still in flight
when its session ended is not stored after the session's entries were dropped."""

FOLLOW_BOUND = 1 << 20
"""How much of a write's or a `tools/list`'s answer is decoded to see how it ended."""


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
        shared: SharedTier | None = None,
    ) -> None:
        self._config = config
        self.cache = cache
        self.metrics = metrics
        self.client = client
        self.origin_policy = origin_policy
        self.invalidator = invalidator
        self.hints = invalidator.hints
        self.shared = shared
        self.via_token = f"mcpcache-{secrets.token_hex(8)}"
        """This sidecar's name in `Via`: a request that already carries it has looped."""
        self.via = f"1.1 {self.via_token}"
        self.session_ids = SessionRequestIds()
        self._ended_sessions: cachetools.LRUCache[str, bool] = cachetools.LRUCache(
            ENDED_SESSIONS_KEPT
        )
        self.coalescer = Coalescer()

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
            return await self._pass_through(incoming, server, None, None, policy.Bypass("method"))
        raw = await incoming.read_body(config.max_request_bytes)
        message = incoming.message(raw)
        try:
            plan = policy.plan(
                server, message, incoming.headers, incoming.raw_headers, config.app_id, self.hints
            )
        except policy.RequestRefused as exc:
            raise ProxyError(400, INVALID_REQUEST, str(exc), message.id) from exc
        method = method_label(message.method)
        if isinstance(plan, policy.Bypass):
            if message.is_request:
                self.metrics.count(server.name, method, "bypass")
            return await self._pass_through(incoming, server, message, raw, plan)
        entry = self.cache.get_fresh(plan.key)
        if entry is not None:
            self.metrics.count(server.name, method, "hit")
            return HitResponse.of(entry, message.id, self.cache.timer())
        generation = None
        if self.shared is not None and not plan.session:
            # Answers given inside a legacy session end with it: they stay in memory.
            entry, generation = await self._shared_lookup(self.shared, config.app_id, server, plan)
            if entry is not None:
                self.metrics.count(server.name, method, "hit")
                return HitResponse.of(entry, message.id, self.cache.timer(), shared=True)
        extra = policy.extra_keyed_headers(server, plan.keyed)
        if extra:
            self.metrics.count_keyed_headers(server.name, extra)
        request = Request(incoming, server, message, raw, plan, method, config.app_id, generation)
        return await self._miss(request)

    async def _shared_lookup(
        self, shared: SharedTier, app_id: str, server: Server, plan: policy.Lookup
    ) -> tuple[Entry | None, bytes | None]:
        """The shared tier's entry for this lookup (verified there), copied into memory
        for the rest of its life, as long as its own policy allows (a tool rule's TTL
        included) and never longer than Redis says is left; None on a miss or when Redis
        is out of reach. With it, the server's generation in the tier as the lookup read
        it (None: unknown), under which an answer fetched now is written there.

        The copy is filed under the lookup's scope, as an answer fetched here would be,
        so that every removal (a purge, a write's invalidation, a notification) finds
        it; an entry read while entries of the server were being removed is not used."""
        epoch = self.invalidator.epoch(server.name)
        found = await shared.get(
            app_id, server.name, plan.key, server.cache.effective_max_size, plan.ttl
        )
        if self.invalidator.epoch(server.name) != epoch:
            return None, None
        value, remaining = found.entry, found.remaining
        if value is None:
            return None, found.generation
        age = max(0.0, shared.clock() - value.stored_at)
        entry = self.cache.store(
            plan.key,
            value.result,
            value.event_stream,
            remaining,
            keep_stale=server.cache.keep_stale,
            ttl_at=value.ttl_at,
            age=age,
            scope=plan.scope,
        )
        if entry is None:  # larger than the whole memory budget: served, not kept
            now = self.cache.timer()
            entry = Entry(
                value.result, value.event_stream, now - age, now + remaining, ttl_at=value.ttl_at
            )
        return entry, found.generation

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

    async def _pass_through(
        self,
        incoming: Incoming,
        server: Server,
        message: Message | None,
        raw: bytes | None,
        plan: policy.Bypass,
    ) -> ForwardedResponse | StreamedResponse:
        """Forward and relay; nothing is stored. A request's answer is still followed,
        to end a stream that breaks before answering with an error the client sees, and
        to act on it: a write invalidates, a `tools/list` teaches read-only hints."""
        status = cache_status.forwarded(plan.fwd, plan.detail)
        call, response, ticket = await self._open(incoming, server, message, raw)
        self._forget_ended_session(incoming, server, response)
        capture = None
        on_final = None
        if message is not None and message.is_request:
            follows = bool(plan.invalidates) or plan.learn_tools
            bound = FOLLOW_BOUND if follows else 0
            capture = ResponseCapture(message.id, response.event_stream, bound)
            on_final = self._follower(server, plan, capture, response.status)
        relay = Relay(
            response,
            call,
            self.metrics,
            capture,
            on_final,
            on_notice=self._on_notice(server),
            on_done=self._ender(ticket),
        )
        headers = response_headers(response.headers)
        if on_final is None or response.event_stream:
            return StreamedResponse(response.status, headers, status, relay.stream(b""))
        # A JSON answer followed to its end: read it before the headers, so that what
        # it invalidates is gone before the caller can ask again.
        prefix = await relay.read_prefix()
        if relay.done:
            return ForwardedResponse(response.status, headers, status, prefix)
        on_final(Verdict("too_large"), False)  # cannot tell how it ended: assume it wrote
        return StreamedResponse(response.status, headers, status, relay.stream(prefix))

    def _follower(
        self, server: Server, plan: policy.Bypass, capture: ResponseCapture, status: int
    ) -> Callable[[Verdict, bool], Verdict] | None:
        """What to do once a forwarded request's answer is known, if anything."""
        if plan.invalidates:
            globs = plan.invalidates
            done = False

            def invalidate(verdict: Verdict, event_stream: bool) -> Verdict:
                nonlocal done
                if not done and answers.write_happened(verdict, status):
                    self.invalidator.tools(server.name, globs, "write")
                done = True
                return verdict

            return invalidate
        if plan.learn_tools:

            def learn(verdict: Verdict, event_stream: bool) -> Verdict:
                final = capture.final
                if final is not None and "result" in final:
                    self.hints.learn(server.name, final["result"])
                return verdict

            return learn
        return None

    def _on_notice(self, server: Server) -> Callable[[Notice], None]:
        def notice(notice: Notice) -> None:
            self.invalidator.notice(server.name, notice)

        return notice

    async def _miss(self, request: Request) -> ASGIApp:
        """A cacheable request the cache cannot answer fresh: answer from a stale entry
        while it is fetched again, wait for an identical request already upstream, or
        go upstream."""
        key, server = request.key, request.server
        now = self.cache.timer()
        stale = self.cache.get_stale(key)
        if stale is not None and answers.stale_while_revalidating(server, stale.expires_at, now):
            if not self.coalescer.running(key):
                self.coalescer.start(
                    key, self._fetcher(request), leader=False, shared=True, keep_going=True
                )
            self.metrics.count(server.name, request.method, "stale")
            return HitResponse.stale(
                stale, request.message.id, now, cache_status.STALE_WHILE_REVALIDATE
            )
        flight = self.coalescer.joinable(key)
        if flight is not None:
            return await self._follow(request, flight)
        # A flight with no room left keeps its followers; this request goes on its own.
        return await self._lead(request, shared=not self.coalescer.running(key))

    async def _lead(self, request: Request, shared: bool) -> ASGIApp:
        """Go upstream in a flight of this request's own, reading its bytes as they come."""
        server, method = request.server, request.method
        flight = self.coalescer.start(
            request.key, self._fetcher(request), leader=True, shared=shared
        )
        try:
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
                return HitResponse.stale(stale, request.message.id, self.cache.timer(), status)
            if head.failure is not None:
                self.metrics.count(server.name, method, "miss")
                raise self._failure_error(server, head.failure, request.message.id)
        self.metrics.count(server.name, method, "miss")
        if head.complete:
            flight.detach_leader()
            return ForwardedResponse(head.status, head.headers, head.cache_status, head.prefix)
        body = flight.leader_body(head.prefix)
        return StreamedResponse(head.status, head.headers, head.cache_status, body)

    async def _follow(self, request: Request, flight: Flight) -> ASGIApp:
        """Wait for an identical request's answer; take it under this request's own id."""
        server, method, request_id = request.server, request.method, request.message.id
        outcome = await flight.wait_as_follower(server.timeout)
        if outcome is None:  # the flight is stuck: do not wait on it any longer
            return await self._lead(request, shared=False)
        if outcome.kind == "shared":
            self.metrics.count(server.name, method, "collapsed")
            detail = cache_status.detail(outcome.reason) if outcome.reason else None
            status = cache_status.forwarded("miss", detail, collapsed=True)
            return HitResponse.shared(
                request_id, outcome.payload, outcome.event_stream, status, outcome.member
            )
        if outcome.kind == "failed":
            stale = self._stale_on_error(request)
            if stale is not None:
                self.metrics.count(server.name, method, "stale")
                status = cache_status.stale_if_error(outcome.upstream_status)
                return HitResponse.stale(stale, request_id, self.cache.timer(), status)
            if outcome.failure is not None:
                self.metrics.count(server.name, method, "collapsed")
                raise self._failure_error(server, outcome.failure, request_id)
        return await self._lead(request, shared=False)

    def _stale_on_error(self, request: Request) -> Entry | None:
        entry = self.cache.get_stale(request.key)
        if entry is None:
            return None
        if not answers.stale_on_error(request.server, entry.expires_at, self.cache.timer()):
            return None
        return entry

    def _fetcher(self, request: Request) -> Callable[[Flight], Awaitable[None]]:
        """The upstream fetch for `request`, sent with exactly its own headers and body
        (whoever else waits for the answer, the credentials are this request's)."""
        headers = forward_headers(request.incoming.raw_headers, self.via, json_body=True)

        async def fetch(flight: Flight) -> None:
            await self._fetch(flight, request, headers)

        return fetch

    async def _fetch(
        self, flight: Flight, request: Request, headers: list[tuple[str, str]]
    ) -> None:
        """One upstream call of a cacheable request, in its flight's own task: relay to
        the leader (while it is there), settle the followers' answer, store if allowed.

        Inside a legacy session the call holds a ticket for its id until its answer has
        passed (see `session_ids`); an answer given while another request used the same id
        is neither stored nor shared."""
        server, message, incoming = request.server, request.message, request.incoming
        epoch = self.invalidator.epoch(server.name)
        call = Call(server.name, request.method, message.id, time.perf_counter())
        ticket = self._ticket(incoming, server, message.id)
        try:
            response = await self.client.open(
                "POST", server.url, headers, request.raw, server.timeout, server.timeout
            )
        except BaseException as exc:
            if ticket is not None:  # it may have reached the server: the id stays taken
                self.session_ids.end(ticket, answered=False)
            if not isinstance(exc, UpstreamFailure):
                raise
            self._upstream_failed(call, exc)
            flight.fail(exc)
            return
        self._forget_ended_session(incoming, server, response)
        status = response.status
        refused = answers.response_refusal(
            server, request.lookup, status, response.header_map, response.event_stream
        )
        capture = ResponseCapture(
            message.id, response.event_stream, server.cache.effective_max_size, refused
        )
        flight.capture = capture
        if refused is not None:
            flight.settle(_outcome(status, capture, Verdict(refused)))

        def store(verdict: Verdict, event_stream: bool) -> Verdict:
            if ticket is not None and ticket.reused:
                # Whatever it says, the answer may be another request's: neither kept
                # nor handed to followers (an error or an uncached result included).
                verdict = Verdict("id_reused")
            if verdict.reason is None and self.invalidator.epoch(server.name) != epoch:
                verdict = Verdict("invalidated")  # fetched before entries were dropped
            if learns and capture.final is not None and "result" in capture.final:
                self.hints.learn(server.name, capture.final["result"])
            ttl = answers.storage_ttl(
                server, verdict, response.header_map, message.method, request.lookup.ttl
            )
            verdict = self._store(request, verdict, event_stream, ttl)
            # Settled, the flight takes no new followers: with none waiting, nobody
            # reads their share, so it is not built.
            flight.settle(_outcome(status, capture, verdict) if flight.followers else ALONE)
            return verdict

        learns = policy.learns_tools(server, message)
        relay = Relay(
            response,
            call,
            self.metrics,
            capture,
            store,
            on_notice=self._on_notice(server),
            on_done=self._ender(ticket),
        )
        headers_out = tuple(response_headers(response.headers))
        if response.event_stream:
            flight.open_head(Head(status, headers_out, cache_status.MISS))
        else:
            # A JSON answer is one message: read it (up to maxSize) before the headers, so
            # that Cache-Status can say whether it was stored.
            try:
                prefix = await relay.read_prefix()
            except UpstreamFailure as exc:
                flight.fail(exc)
                return
            if relay.done:
                flight.open_head(Head(status, headers_out, relay.cache_status(), prefix, True))
                return
            too_large = cache_status.forwarded("miss", cache_status.detail("too_large"))
            flight.open_head(Head(status, headers_out, too_large, prefix))
        try:
            await relay.deliver(flight.deliver)
        except BrokenBody:
            flight.break_off()

    def _failure_error(
        self, server: Server, failure: UpstreamFailure, request_id: Any
    ) -> ProxyError:
        """The caller's error for an upstream that did not answer (or broke off)."""
        if failure.kind == "timeout":
            return ProxyError(
                504,
                UPSTREAM_TIMEOUT,
                f"MCP server {server.name!r} did not answer within {server.timeout:g}s",
                request_id,
            )
        if failure.kind == "broken":
            return ProxyError(
                502,
                UPSTREAM_UNAVAILABLE,
                f"MCP server {server.name!r} failed mid-response: {failure.cause_name}",
                request_id,
            )
        return ProxyError(
            502,
            UPSTREAM_UNAVAILABLE,
            f"MCP server {server.name!r} is unreachable: {failure.cause_name}",
            request_id,
        )

    def _ender(self, ticket: Ticket | None) -> Callable[[bool], None] | None:
        if ticket is None:
            return None
        return lambda answered: self.session_ids.end(ticket, answered)

    def _ticket(self, incoming: Incoming, server: Server, request_id: Any) -> Ticket | None:
        """A ticket for this request's id in its legacy session; None outside one."""
        session = incoming.headers.get(policy.SESSION_HEADER)
        if session is None:
            return None
        return self.session_ids.begin(policy.session_scope(server, session), request_id)

    async def _open(
        self, incoming: Incoming, server: Server, message: Message | None, raw: bytes | None
    ) -> tuple[Call, UpstreamResponse, Ticket | None]:
        """Send the request upstream; upstream failures become 502/504 errors.

        A request inside a legacy session holds a ticket for its id until its answer
        has passed (see `session_ids`)."""
        ticket = None
        if message is not None and message.is_request:
            ticket = self._ticket(incoming, server, message.id)
        try:
            call, response = await self._send(incoming, server, message, raw)
        except BaseException:
            if ticket is not None:  # it may have reached the server: the id stays taken
                self.session_ids.end(ticket, answered=False)
            raise
        return call, response, ticket

    async def _send(
        self, incoming: Incoming, server: Server, message: Message | None, raw: bytes | None
    ) -> tuple[Call, UpstreamResponse]:
        request_id = message.id if message is not None else None
        call = Call(
            server.name,
            method_label(message.method if message is not None else None),
            request_id,
            time.perf_counter(),
        )
        try:
            response = await self.client.open(
                incoming.method,
                server.url,
                forward_headers(incoming.raw_headers, self.via, json_body=raw is not None),
                raw,
                server.timeout,
                # A GET is the server's long-lived event stream: no idle limit on it.
                None if incoming.method == "GET" else server.timeout,
            )
        except UpstreamFailure as exc:
            self._upstream_failed(call, exc)
            raise self._failure_error(server, exc, request_id) from exc
        return call, response

    def _upstream_failed(self, call: Call, exc: UpstreamFailure) -> None:
        elapsed = time.perf_counter() - call.started
        self.metrics.upstream_errors.labels(call.server, exc.kind).inc()
        logger.warning(
            "upstream call failed",
            extra={
                "server": call.server,
                "method": call.method,
                "error": exc.cause_name,
                "kind": exc.kind,
                "duration_ms": round(elapsed * 1000, 3),
            },
        )

    def _forget_ended_session(
        self, incoming: Incoming, server: Server, response: UpstreamResponse
    ) -> None:
        """A legacy session the upstream ended (DELETE) or no longer knows (404) takes
        its entries on that server with it: nobody may be answered inside it any more."""
        session = incoming.headers.get(policy.SESSION_HEADER)
        if session is None:
            return
        ended = incoming.method == "DELETE" and 200 <= response.status < 300
        if ended or response.status == 404:
            scope = policy.session_scope(server, session)
            self._ended_sessions[scope] = True
            self.session_ids.forget_session(scope)
            self.cache.purge_session(scope)

    def _store(self, request: Request, verdict: Verdict, event_stream: bool, ttl: float) -> Verdict:
        """Store a storable answer in memory and, only if memory kept it and it belongs
        to no legacy session, in the shared tier (without waiting for it); count why not
        otherwise."""
        server, lookup = request.server, request.lookup
        if verdict.reason is None and lookup.session and lookup.session in self._ended_sessions:
            verdict = Verdict("invalidated")  # its session ended while it was upstream
        if verdict.reason is None:
            stored = self.cache.store(
                lookup.key,
                verdict.result,
                event_stream,
                ttl,
                lookup.session,
                server.cache.keep_stale,
                verdict.ttl_at,
                scope=lookup.scope,
            )
            if stored is None:
                verdict = Verdict("over_budget")
            elif self.shared is not None and not lookup.session and request.generation is not None:
                self.shared.put(
                    request.app_id,
                    server.name,
                    lookup.key,
                    verdict.result,
                    event_stream,
                    ttl,
                    server.cache.effective_max_size,
                    request.generation,
                )
        if verdict.reason is not None:
            self.metrics.not_stored.labels(server.name, verdict.reason).inc()
        return verdict


@dataclass(frozen=True, slots=True)
class Request:
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

    @property
    def key(self) -> str:
        return self.lookup.key


def _outcome(status: int, capture: ResponseCapture, verdict: Verdict) -> Outcome:
    """The followers' answer, from the leader's answer as judged so far."""
    share = answers.follower_share(status, verdict, capture.final_seen, capture.final is not None)
    if share == "failed":
        if status >= 500:
            return Outcome("failed", upstream_status=status)
        # A body that timed out is a timeout to the followers too (a 504, not a 502).
        return Outcome("failed", failure=capture.failure or ENDED_EARLY)
    if share == "alone" or capture.final is None:
        return ALONE
    final = capture.final
    member = RESULT if "result" in final else ERROR
    payload = orjson.dumps(final["result"] if "result" in final else final["error"])
    return Outcome("shared", member, payload, capture.event_stream, verdict.reason)
