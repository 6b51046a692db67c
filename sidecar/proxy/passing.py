"""Forwarding what the cache does not answer: other methods, bypassed calls, GET streams
and DELETEs. Nothing is stored; a request's answer is still followed, to end a stream
that breaks before answering with an error the client sees, and to act on it as
`forwarded` judges it: a write invalidates, a `tools/list` teaches read-only
hints (`Following`, which reads the relay on the client's behalf).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Final

from ..config import Server
from ..edge.forwarded import BrokenBody, ForwardedResponse, StreamedResponse
from ..edge.incoming import Incoming
from ..rules import cache_status
from ..rules.admission.capture import ResponseCapture
from ..rules.admission.judgement import answer_verdict, judge_forwarded, shareable_final
from ..rules.key.callers import SESSION_HEADER, opening_digest
from ..rules.policy.plan import Bypass
from ..rules.protocol.messages import Message, method_label
from ..rules.protocol.results import Verdict
from ..rules.reading.headers import response_headers, with_this_hop
from ..upstream.client import UpstreamFailure
from ..upstream.exchange import Exchange, Exchanges, Outbound, failure_error
from ..upstream.relay import Relay
from .learned import Lessons

FOLLOW_BOUND: Final = 1 << 20
"""How much of a write's or a `tools/list`'s answer is decoded to see how it ended."""


class Following:
    """Follows a forwarded request's answer, and acts once it is known: a write tool's
    answer that leaves open that it wrote drops what it invalidates; a `tools/list`
    answer teaches the tools' hints."""

    def __init__(
        self,
        lessons: Lessons,
        server: Server,
        plan: Bypass,
        message: Message | None,
        headers: Mapping[str, str],
        event_stream: bool,
        status: int,
        exchange: Exchange,
        epoch: int,
    ) -> None:
        self._lessons = lessons
        self._server = server
        self._plan = plan
        self._status = status
        self._exchange = exchange
        self._epoch = epoch
        """The server's invalidation epoch when the request went upstream."""
        self._message = message
        self._headers = headers
        self._unread = message is not None and message.method is None
        self.capture: ResponseCapture | None = None
        self.follows = False
        self.verdict: Verdict | None = None
        """What the answer was judged to be, once it was."""
        self.wrote = False
        """Whether the answer was judged to leave open that it wrote (entries dropped)."""
        # A body the sidecar could not read may still be a write: its answer is followed,
        # and unless it is a JSON-RPC error to no id (the upstream could not parse it
        # either), it ends without a final answer to the sidecar: so it may have written.
        if message is not None and (message.is_request or plan.invalidates):
            self.follows = bool(plan.invalidates) or plan.learner is not None
            bound = FOLLOW_BOUND if self.follows else 0
            self.capture = ResponseCapture(message.id, event_stream, bound)

    def check(self) -> None:
        """Act on the answer as soon as what the capture saw says what it was."""
        if self.follows and self.verdict is None and self.capture is not None:
            verdict = answer_verdict(self.capture)
            if verdict is not None:
                self._act(verdict)

    def ended(self, failure: BaseException | None) -> None:
        """The body is over (`failure`: how it broke off): act now if not yet."""
        capture = self.capture
        if capture is None:
            return
        if failure is None:
            capture.finish()
        else:
            capture.fail(failure if isinstance(failure, UpstreamFailure) else None)
        self.check()

    def _act(self, verdict: Verdict) -> None:
        plan, server, capture = self._plan, self._server, self.capture
        self.verdict = verdict
        final = shareable_final(capture, verdict) if capture is not None else None
        current = not self._exchange.id_reused
        current = current and self._lessons.invalidator.epoch(server.name) == self._epoch
        judged = judge_forwarded(plan, self._status, verdict, final, self._unread, current)
        self.wrote = judged.wrote
        if self._message is not None and (judged.wrote or judged.teaches):
            self._lessons.take(
                server,
                plan,
                self._message,
                self._headers,
                status=self._status,
                listing=final["result"] if judged.teaches and final is not None else None,
                wrote=judged.wrote,
            )

    async def relayed(self, relay: Relay, prefix: bytes) -> AsyncGenerator[bytes, None]:
        """The body from `prefix` on, read for the client: each chunk goes on once the
        answer it completes has been acted on; the relay is closed at the end."""
        error: BaseException | None = None
        try:
            async for chunk in relay.chunks(prefix):
                self.check()
                yield chunk
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.close(relay, error.__cause__ if isinstance(error, BrokenBody) else error)

    def close(self, relay: Relay, failure: BaseException | None) -> None:
        """The body is over: act on it (`ended`), then release the upstream's answer,
        whatever acting did. Neither waits, so a cancelled reader still releases."""
        try:
            self.ended(failure)
        finally:
            relay.close(failure, self.verdict)

    def on_unread(self, relay: Relay) -> Callable[[], None]:
        """What ends the body when its client's response ended before reading it: as a
        client that goes away does (a write may still have been done)."""
        return lambda: self.close(relay, ConnectionAbortedError("the body was never read"))


async def pass_through(
    exchanges: Exchanges,
    lessons: Lessons,
    via: str,
    incoming: Incoming,
    server: Server,
    plan: Bypass,
    message: Message | None = None,
    raw: bytes | None = None,
) -> ForwardedResponse | StreamedResponse:
    """Forward `incoming` (with its `message`, read from `raw`, for a POST) and relay."""
    # A body read as no message at all may hold any id of its session (a batch, an id
    # given twice): it takes them all while it is upstream.
    unread = message is not None and message.method is None and message.doubt is not None
    outbound = Outbound(
        incoming.method,
        with_this_hop(incoming.forwardable, via),
        raw,
        method_label(message.method if message is not None else None),
        message.id if message is not None else None,
        incoming.headers.get(SESSION_HEADER),
        # A GET is the server's long-lived event stream: no idle limit on it.
        None if incoming.method == "GET" else server.timeout,
        ticketed=message is not None and (message.is_request or unread),
        query=incoming.query,
        unknown_ids=unread,
        opening=(
            opening_digest(server, incoming.headers, incoming.query)
            if message is not None and message.method == "initialize"
            else None
        ),
    )
    exchange = exchanges.start(server, outbound)
    epoch = lessons.invalidator.epoch(server.name)
    try:
        response = await exchange.open()
    except UpstreamFailure as exc:
        raise failure_error(server, exc, outbound.request_id) from exc
    following = Following(
        lessons,
        server,
        plan,
        message,
        incoming.headers,
        response.event_stream,
        response.status,
        exchange,
        epoch,
    )
    relay = exchange.relay(response, following.capture)
    headers = response_headers(response.headers)
    status = cache_status.forwarded(plan.fwd, plan.detail)
    # A JSON body goes on whole and unchanged: with the upstream's length (an event
    # stream may gain an error event at its end: never with a length).
    length = None if response.event_stream else response.header_map.get("content-length")
    if not following.follows or response.event_stream:
        body = following.relayed(relay, b"")
        ending = following.on_unread(relay)
        return StreamedResponse(response.status, headers, status, body, ending, length)
    # A JSON answer followed to its end: read it before the headers, so that what it
    # invalidates is gone before the caller can ask again.
    try:
        prefix = await relay.read_prefix()
    except BaseException as exc:
        following.close(relay, exc)
        if isinstance(exc, UpstreamFailure):
            raise failure_error(server, exc, outbound.request_id) from exc
        raise
    # Whole, it is read now; past the bound it cannot be: assumed to have written.
    following.check()
    if relay.complete:
        following.close(relay, None)
        if following.wrote:  # the other replicas are told before the caller is answered
            await lessons.invalidator.announced(server.name)
        return ForwardedResponse(response.status, headers, status, prefix)
    body = following.relayed(relay, prefix)
    ending = following.on_unread(relay)
    return StreamedResponse(response.status, headers, status, body, ending, length)
