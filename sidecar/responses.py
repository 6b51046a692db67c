"""Forwarded answers: the upstream's status and headers with our `Cache-Status`, and its
body whole or as it streams, sent as plain ASGI callables.

A framework response would do the same with more layers: a streamed one would start a
task group before its first byte. Here the headers go out at once, and one small task
watches for the client leaving, which ends the stream (and so releases the upstream
connection) even while no bytes flow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable

import anyio
from starlette.types import Receive, Scope, Send

_NO_CONTENT = frozenset({204, 304})
"""Statuses whose answers never carry `Content-Length` (nor do 1xx)."""


def _encoded(headers: Iterable[tuple[str, str]], cache_status: str) -> list[tuple[bytes, bytes]]:
    encoded = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    encoded.append((b"cache-status", cache_status.encode()))
    return encoded


class ForwardedResponse:
    """An answer read whole: one body, its length known."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, status: int, headers: Iterable[tuple[str, str]], cache_status: str, body: bytes
    ) -> None:
        self.status = status
        self.body = body
        self.headers = _encoded(headers, cache_status)
        if status >= 200 and status not in _NO_CONTENT:  # RFC 9110: never on these
            self.headers.insert(0, (b"content-length", str(len(body)).encode()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


class StreamedResponse:
    """An answer relayed as it arrives (chunked), until the body ends or the client
    leaves; the body iterator is closed either way."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        status: int,
        headers: Iterable[tuple[str, str]],
        cache_status: str,
        body: AsyncGenerator[bytes, None],
    ) -> None:
        self.status = status
        self.body = body
        self.headers = _encoded(headers, cache_status)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body
        try:
            await send(
                {"type": "http.response.start", "status": self.status, "headers": self.headers}
            )
            with anyio.CancelScope() as stream:
                watcher = asyncio.ensure_future(_until_disconnect(receive, stream))
                try:
                    async for chunk in body:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b""})
                finally:
                    watcher.cancel()
        finally:
            await body.aclose()


async def _until_disconnect(receive: Receive, stream: anyio.CancelScope) -> None:
    """Cancel `stream` once the client has gone (the server says `http.disconnect`)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.cancel()
            return
