"""The uvicorn settings both listeners share, and the one thing uvicorn lacks: a limit
on how long a connection may take to send its request (headers and body).

Without it, a thousand connections that open and never finish their request stay open
for good (uvicorn times out only idle keep-alive connections, after a response). The
limit lives in the protocol, not in the app: it then costs nothing per request but a
timer, and a request that is slow to arrive never reaches the app at all.
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
    response, to the end of the request's body."""

    header_timeout: float = 10.0
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:
            self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._expire)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expire(self) -> None:
        self._header_timer = None
        self.transport.close()


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
