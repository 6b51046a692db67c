"""One call upstream, from its session ticket to the close of its response.

Every request that goes upstream — forwarded as it is, or fetched for the cache — is one
`Exchange`: it takes a ticket for its id in its legacy session, opens the call (an
upstream that does not answer raises `UpstreamFailure`, counted and logged here, with
the ticket ended), tells the sessions what the upstream answered, and relays the body
through a `Relay` that shows every chunk to the caller's `ResponseCapture` and ends the
ticket once the upstream is done with the id. What happens to the answer is the
caller's, who reads the relay: the pass-through follows it (a write invalidates, a
`tools/list` teaches hints), the cacheable fetch judges, stores and shares it.
Notifications that say entries are out of date go to `on_notice` whoever reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ..config import Server
from ..edge import spans
from ..edge.errors import UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE, ProxyError
from ..metrics import Metrics
from ..rules.admission.capture import ResponseCapture
from ..rules.invalidation.notices import Notice
from ..rules.key.callers import SESSION_HEADER
from ..rules.protocol.session_ids import ANY_ID, Ticket
from .client import UpstreamClient, UpstreamFailure, UpstreamResponse
from .relay import Call, Relay
from .sessions import LegacySessions

logger = logging.getLogger("mcpcache.sidecar")


class Outbound(NamedTuple):
    """A request as it goes upstream. (A tuple: made on every call, so cheap.)"""

    method: str
    """The HTTP method."""
    headers: list[tuple[str, str]]
    body: bytes | None
    label: str
    """Its JSON-RPC method's metrics label."""
    request_id: Any = None
    """The JSON-RPC id of a request (None: a notification, a response, a GET or DELETE)."""
    session: str | None = None
    """Its legacy session (`Mcp-Session-Id`), when it has one."""
    idle: float | None = None
    """Seconds the upstream may stay silent mid-body (None: no limit, a server stream)."""
    ticketed: bool = False
    """A request whose id is held in its session until its answer has passed."""
    query: str = ""
    """The client's query string, exactly as sent (without `?`)."""
    unknown_ids: bool = False
    """A ticketed body the sidecar could not read: it holds every id of its session."""
    opening: str | None = None
    """For an `initialize`: its opener's digest (`key.callers.opening_digest`); the
    session it opens is remembered with it."""


class Exchanges:
    """What every exchange shares: the client, the metrics, the sessions, where
    notifications go."""

    def __init__(
        self,
        client: UpstreamClient,
        metrics: Metrics,
        sessions: LegacySessions,
        on_notice: Callable[[str, Notice], object],
    ) -> None:
        self.client = client
        self.metrics = metrics
        self.sessions = sessions
        self.on_notice = on_notice

    def start(self, server: Server, outbound: Outbound) -> Exchange:
        return Exchange(self, server, outbound)


class Exchange:
    # Until the call is ticketed, traced and answered (read from the class till then).
    ticket: Ticket | None = None
    _span_end: spans.UpstreamEnd | None = None
    _status: int | None = None

    def __init__(self, exchanges: Exchanges, server: Server, outbound: Outbound) -> None:
        self._exchanges = exchanges
        self.server = server
        self.outbound = outbound
        self.call = Call(server.name, outbound.label, outbound.request_id, time.perf_counter())
        if outbound.ticketed:
            ticket_id = ANY_ID if outbound.unknown_ids else outbound.request_id
            self.ticket = exchanges.sessions.ticket(server, outbound.session, ticket_id)

    @property
    def id_reused(self) -> bool:
        """Another request used this one's id in its session meanwhile: the answer may
        be that request's."""
        return self.ticket is not None and self.ticket.reused

    async def open(self) -> UpstreamResponse:
        """Send the request; raises `UpstreamFailure` when the upstream does not answer."""
        exchanges, outbound, server = self._exchanges, self.outbound, self.server
        headers = outbound.headers
        if (trace := spans.current.get()) is not None:
            headers, self._span_end = trace.upstream(server.url, outbound.label, headers)
        try:
            response = await exchanges.client.open(
                outbound.method,
                server.url,
                headers,
                outbound.body,
                server.timeout,
                outbound.idle,
                outbound.query,
            )
        except BaseException as exc:
            # It may have reached the server: the id stays taken.
            exchanges.sessions.end(self.ticket, answered=False)
            if isinstance(exc, UpstreamFailure):
                self._failed(exc)
            self._end_span(type(exc).__name__)
            raise
        exchanges.sessions.answered(server, outbound.session, outbound.method, response.status)
        if outbound.opening is not None and 200 <= response.status < 300:
            if outbound.session is not None:  # the upstream may have signed it in anew
                exchanges.sessions.reopened(server, outbound.session)
            elif opened := response.header_map.get(SESSION_HEADER):
                exchanges.sessions.opened(server, opened, outbound.opening)
        self._status = response.status
        return response

    def relay(self, response: UpstreamResponse, capture: ResponseCapture | None) -> Relay:
        """The relay of `response`, shown to `capture` as it passes (None: nothing to
        read, a notification's answer)."""
        return Relay(
            response,
            self.call,
            self._exchanges.metrics,
            capture,
            on_notice=self._notice,
            on_done=self._done,
        )

    def _notice(self, notice: Notice) -> None:
        self._exchanges.on_notice(self.server.name, notice)

    def _done(self, answered: bool) -> None:
        self._exchanges.sessions.end(self.ticket, answered)
        self._end_span(None if answered else "broken")

    def _end_span(self, error: str | None) -> None:
        if self._span_end is not None:
            self._span_end(self._status, error)
            self._span_end = None

    def _failed(self, exc: UpstreamFailure) -> None:
        call = self.call
        elapsed = time.perf_counter() - call.started
        self._exchanges.metrics.upstream_errors.labels(call.server, exc.kind).inc()
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


def failure_error(server: Server, failure: UpstreamFailure, request_id: Any) -> ProxyError:
    """The caller's error for an upstream that did not answer (or broke off)."""
    if failure.kind == "timeout":
        return ProxyError(
            504,
            UPSTREAM_TIMEOUT,
            f"MCP server {server.name!r} did not answer within {server.timeout:g}s",
            request_id,
        )
    what = "failed mid-response" if failure.kind == "broken" else "is unreachable"
    return ProxyError(
        502,
        UPSTREAM_UNAVAILABLE,
        f"MCP server {server.name!r} {what}: {failure.cause_name}",
        request_id,
    )
