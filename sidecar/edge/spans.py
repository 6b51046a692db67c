"""What the request path knows of tracing: whether the request in hand is traced, and
the two facts only the miss path can tell its span.

Nothing here imports OpenTelemetry: a sidecar that does not trace never loads it. The
request's trace (`app.tracing`) is set in `current` for the request's task; an upstream
fetch runs in a flight task started from it, which copies the context, so the fetch
finds the trace of the request that led it. A hit never looks."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Protocol

UpstreamEnd = Callable[[int | None, str | None], None]
"""Ends the upstream call's span: its HTTP status (None: no answer), and its error."""


class RequestTrace(Protocol):
    """The span of one MCP request, as the miss path sees it."""

    def upstream(
        self, url: str, method: str, headers: list[tuple[str, str]]
    ) -> tuple[list[tuple[str, str]], UpstreamEnd]:
        """A child span for a call to the upstream at `url` (its metrics label
        `method`): the headers to send (the caller's with this
        span's `traceparent` and `tracestate` in place of the caller's), and what ends it."""
        ...

    def judged(self, not_stored: str | None, followers: int) -> None:
        """The answer it fetched was judged: why it was not stored (None: stored), and
        how many identical requests waited for it."""
        ...


current: ContextVar[RequestTrace | None] = ContextVar("mcpcache_request_trace", default=None)
