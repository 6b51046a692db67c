"""Forwarding what the cache does not answer: other methods, bypassed calls, GET streams
and DELETEs. Nothing is stored; a request's answer is still followed, to end a stream
that breaks before answering with an error the client sees, and to act on it: a write
invalidates, a `tools/list` teaches read-only hints (`Following`, the exchange's
observer here).
"""

from __future__ import annotations

from typing import Final

from ..config import Server
from ..edge.forwarded import ForwardedResponse, StreamedResponse
from ..edge.incoming import Incoming
from ..rules import answers, cache_status, policy
from ..rules.callers import has_credential
from ..rules.capture import ResponseCapture
from ..rules.headers import forward_headers, response_headers
from ..rules.hints import listing_ttl
from ..rules.messages import Message, Verdict, method_label
from ..upstream.client import UpstreamFailure
from ..upstream.exchange import Exchange, Exchanges, Outbound, failure_error
from .invalidation import Invalidator

FOLLOW_BOUND: Final = 1 << 20
"""How much of a write's or a `tools/list`'s answer is decoded to see how it ended."""


class Following:
    """Watches a forwarded request's answer, and acts once it is known: a write tool's
    answer that leaves open that it wrote drops what it invalidates; a `tools/list`
    answer teaches the tools' hints."""

    def __init__(
        self,
        invalidator: Invalidator,
        server: Server,
        plan: policy.Bypass,
        message: Message | None,
        event_stream: bool,
        status: int,
        exchange: Exchange,
        epoch: int,
    ) -> None:
        self._invalidator = invalidator
        self._server = server
        self._plan = plan
        self._status = status
        self._exchange = exchange
        self._epoch = epoch
        """The server's invalidation epoch when the request went upstream."""
        self._done = False
        self._unread = message is not None and message.method is None
        self.capture: ResponseCapture | None = None
        self.follows = False
        self.wrote = False
        """Whether the answer was judged to leave open that it wrote (entries dropped)."""
        # A body the sidecar could not read may still be a write: its answer is followed,
        # and unless it is a JSON-RPC error to no id (the upstream could not parse it
        # either), it ends without a final answer to the sidecar: so it may have written.
        if message is not None and (message.is_request or plan.invalidates):
            self.follows = bool(plan.invalidates) or plan.learner is not None
            bound = FOLLOW_BOUND if self.follows else 0
            self.capture = ResponseCapture(message.id, event_stream, bound)

    def judged(self, verdict: Verdict, event_stream: bool) -> Verdict:
        plan, server = self._plan, self._server
        if plan.invalidates:
            # A 202 answers a body of notifications and responses only: nothing it held
            # was a request, so nothing it held wrote.
            accepted_only = self._unread and self._status == 202
            if (
                not self._done
                and not accepted_only
                and answers.write_happened(verdict, self._status)
            ):
                self._invalidator.tools(server.name, plan.invalidates, "write")
                self.wrote = True
            self._done = True
        elif plan.learner is not None:
            assert self.capture is not None  # follows only with a capture
            final = self.capture.final
            # A listing answered for another request, or overtaken by a change the server
            # announced while it was upstream, teaches nothing.
            current = not self._exchange.id_reused
            current = current and self._invalidator.epoch(server.name) == self._epoch
            if current and final is not None and "result" in final:
                result, cache = final["result"], server.cache
                ttl = listing_ttl(result, cache.metadata_ttl, cache.ttl)
                self._invalidator.hints.learn(server.name, result, plan.learner, ttl)
        return verdict


async def pass_through(
    exchanges: Exchanges,
    invalidator: Invalidator,
    via: str,
    incoming: Incoming,
    server: Server,
    plan: policy.Bypass,
    message: Message | None = None,
    raw: bytes | None = None,
) -> ForwardedResponse | StreamedResponse:
    """Forward `incoming` (with its `message`, read from `raw`, for a POST) and relay."""
    # A body read as no message at all may hold any id of its session (a batch, an id
    # given twice): it takes them all while it is upstream.
    unread = message is not None and message.method is None and message.doubt is not None
    outbound = Outbound(
        incoming.method,
        forward_headers(incoming.raw_headers, via),
        raw,
        method_label(message.method if message is not None else None),
        message.id if message is not None else None,
        incoming.headers.get(policy.SESSION_HEADER),
        # A GET is the server's long-lived event stream: no idle limit on it.
        None if incoming.method == "GET" else server.timeout,
        ticketed=message is not None and (message.is_request or unread),
        query=incoming.query,
        unknown_ids=unread,
        credentialed=(
            message is not None
            and message.method == "initialize"
            and has_credential(server, incoming.headers)
        ),
    )
    exchange = exchanges.start(server, outbound)
    epoch = invalidator.epoch(server.name)
    try:
        response = await exchange.open()
    except UpstreamFailure as exc:
        raise failure_error(server, exc, outbound.request_id) from exc
    following = Following(
        invalidator,
        server,
        plan,
        message,
        response.event_stream,
        response.status,
        exchange,
        epoch,
    )
    relay = exchange.relay(response, following)
    headers = response_headers(response.headers)
    status = cache_status.forwarded(plan.fwd, plan.detail)
    if not following.follows or response.event_stream:
        return StreamedResponse(response.status, headers, status, relay.stream(b""))
    # A JSON answer followed to its end: read it before the headers, so that what it
    # invalidates is gone before the caller can ask again.
    try:
        prefix = await relay.read_prefix()
    except UpstreamFailure as exc:
        raise failure_error(server, exc, outbound.request_id) from exc
    if relay.done:
        if following.wrote:  # the other replicas are told before the caller is answered
            await invalidator.announced(server.name)
        return ForwardedResponse(response.status, headers, status, prefix)
    following.judged(Verdict("too_large"), False)  # cannot tell how it ended: assume it wrote
    return StreamedResponse(response.status, headers, status, relay.stream(prefix))
