"""The uvicorn settings both listeners share, and the one thing uvicorn lacks: a limit
on how long a connection may take to send its request (headers and body).

Without it, a thousand connections that open and never finish their request stay open
for good (uvicorn times out only idle keep-alive connections, after a response). The
limit lives in the protocol, not in the app: it then costs nothing per request but two
attribute writes, and a request that is slow to arrive never reaches the app at all.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def _header_timed(seconds: float) -> type[HttpToolsProtocol]:
    class HeaderTimedProtocol(_HeaderTimedProtocol):
        header_timeout = seconds

    return HeaderTimedProtocol


class _HeaderTimedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections that are slow to send a
    request: `header_timeout` seconds from connect, or from the end of the previous
    response, to the end of the request's body.

    A request only moves the deadline (two attribute writes); one timer per connection
    checks it when it falls due and sets itself again for the new deadline, so that no
    timer is made or cancelled per request."""

    header_timeout: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None
    _waiting_since: float | None = None
    """Since when the connection owes us a whole request (None: one is being answered)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting_since = self.loop.time()
        self._header_timer = self.loop.call_later(self.header_timeout, self._check)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._waiting_since is None:  # a request sent before the last answer ended
            self._waiting_since = self.loop.time()

    def on_message_complete(self) -> None:
        # A request answered before its body ended (an early 404 or 413) is not being
        # answered any more: the deadline set when that answer ended keeps running.
        if not self.cycle.response_complete:
            self._waiting_since = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            self._waiting_since = None  # a pipelined request, whole, is being answered
        else:
            self._waiting_since = self.loop.time()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def _check(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        since, now = self._waiting_since, self.loop.time()
        if since is not None and now - since >= self.header_timeout:
            self.transport.close()
            return
        wait = self.header_timeout if since is None else since + self.header_timeout - now
        self._header_timer = self.loop.call_later(wait, self._check)


def uvicorn_config(
    app: ASGIApp,
    host: str,
    port: int,
    lifespan: Literal["auto", "on", "off"] = "off",
    header_timeout: float = 10.0,
    max_connections: int = 1000,
) -> uvicorn.Config:
    """The server settings of both listeners (benchmarks serve their baselines with these).

    No access log (hits must not log), no proxy-header rewriting (the listener faces
    loopback callers, not a proxy), no Server/Date headers, a connection limit and the
    header timeout above.
    """
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=_header_timed(header_timeout),
        log_config=None,
        access_log=False,
        proxy_headers=False,
        lifespan=lifespan,
        server_header=False,
        date_header=False,
        limit_concurrency=max_connections,
    )
