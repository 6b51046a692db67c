"""The uvicorn settings both listeners share, and the two things uvicorn lacks: a limit
on how long a connection may take to send its request (headers and body), and one on
how long a response may wait for its client to take any of its bytes.

Without them, a thousand connections that open and never finish their request stay open
for good (uvicorn times out only idle keep-alive connections, after a response), and so
does every client that stops reading a response (it holds an upstream call and its
buffers until `maxConnections` is reached). The limits live in the protocol, not in the
app: they then cost nothing per request but two attribute writes (the send limit costs
nothing until a client's buffers are full), and a request that is slow to arrive never
reaches the app at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any, Literal

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from .forwarded import ABORT

_RESET: bytes = struct.pack("ii", 1, 0)
"""SO_LINGER on, zero seconds: closing the socket sends a TCP reset."""


def _timed(header_timeout: float, send_timeout: float) -> type[HttpToolsProtocol]:
    class TimedProtocol(_TimedProtocol):
        pass

    TimedProtocol.header_timeout = header_timeout
    TimedProtocol.send_timeout = send_timeout
    return TimedProtocol


class _TimedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections that are slow to send a
    request: `header_timeout` seconds from connect, or from the end of the previous
    response, to the end of the request's body; and resetting those whose client takes
    nothing for `send_timeout` seconds while a response waits to be sent (the transport
    has paused writing: its buffer is past the high-water mark).

    A request only moves the deadline (two attribute writes); one timer per connection
    checks it when it falls due and sets itself again for the new deadline, so that no
    timer is made or cancelled per request."""

    header_timeout: float = 10.0
    send_timeout: float = 30.0
    _extensions: dict[str, Any]
    _header_timer: asyncio.TimerHandle | None = None
    _send_timer: asyncio.TimerHandle | None = None
    _waiting_since: float | None = None
    """Since when the connection owes us a whole request (None: one is being answered)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._extensions = {ABORT: self._reset}
        self._waiting_since = self.loop.time()
        self._header_timer = self.loop.call_later(self.header_timeout, self._check)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = self._extensions
        if self._waiting_since is None:  # a request sent before the last answer ended
            self._waiting_since = self.loop.time()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if self.scope.get("http_version") == "1.0" and cycle is not None:
            cycle.__class__ = _Http10Cycle  # its task has not run yet: it sends as one

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

    def _reset(self) -> None:
        """Reset the connection (the `ABORT` extension): a response that cannot be
        finished must not look finished to the client."""
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # Closed already, or not a TCP socket: an abort is all there is.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        self.transport.abort()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self.send_timeout, self._send_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _send_stalled(self) -> None:
        self._send_timer = None
        if not self.transport.is_closing():
            self._reset()  # a client that reads nothing gets nothing more

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._header_timer, self._send_timer):
            if timer is not None:
                timer.cancel()
        self._header_timer = self._send_timer = None
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


class _Http10Cycle(RequestResponseCycle):
    """An HTTP/1.0 request's answer: a body without a `Content-Length` ends when the
    connection closes (RFC 1945, 7.2.2), never in chunks, which HTTP/1.0 does not have.

    uvicorn's httptools protocol chunks every answer that has no length, whatever the
    client's version (its h11 protocol does not, but is several times slower), so an
    HTTP/1.0 client (`curl --http1.0`, `ab`, health checkers) could not read a relayed
    answer. uvicorn already closes an HTTP/1.0 connection after its answer; here each
    body part is written as it is, uvicorn told to expect exactly that many bytes."""

    _close_delimited = False

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            names = {name.lower() for name, _ in message.get("headers", ())}
            if b"content-length" not in names and b"transfer-encoding" not in names:
                self._close_delimited = True
                self.chunked_encoding = False
        elif self._close_delimited and message["type"] == "http.response.body":
            self.expected_content_length = len(message.get("body", b""))
        await super().send(message)


def uvicorn_config(
    app: ASGIApp,
    host: str,
    port: int,
    lifespan: Literal["auto", "on", "off"] = "off",
    header_timeout: float = 10.0,
    max_connections: int = 1000,
    send_timeout: float = 30.0,
) -> uvicorn.Config:
    """The server settings of both listeners (benchmarks serve their baselines with these).

    No access log (hits must not log), no proxy-header rewriting (the listener faces
    loopback callers, not a proxy), no Server/Date headers, a connection limit and the
    header and send timeouts above.
    """
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=_timed(header_timeout, send_timeout),
        log_config=None,
        access_log=False,
        proxy_headers=False,
        lifespan=lifespan,
        server_header=False,
        date_header=False,
        limit_concurrency=max_connections,
    )
