"""Forwarded answers: the upstream's status and headers with our `Cache-Status`, and its
body whole or as it streams, sent as plain ASGI callables.

A framework response would do the same with more layers: a streamed one would start a
task group before its first byte. Here the headers go out at once, and one small task
watches for the client leaving, which ends the stream (and so releases the upstream
connection) even while no bytes flow.

A body that breaks off after the headers went out is never ended as if it were whole:
the connection is reset instead of sending the last chunk, so that every HTTP client
sees a broken transfer rather than a short answer with a 200. (ASGI has no message for
this; the listener's protocol lends each request an `ABORT` extension that resets the
connection, and any other server closes it when the app raises.)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Final

import anyio
from starlette.types import Receive, Scope, Send

logger = logging.getLogger("mcpcache.sidecar")

ABORT: Final = "mcpcache.abort"
"""The scope extension (a callable) that resets the request's connection at once."""
ABORT_GRACE: Final = 1.0
"""Seconds to wait, after a reset, for the server to see the connection gone."""


class BrokenBody(Exception):
    """The upstream's body broke off after the answer's headers were sent."""


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
    """An answer relayed as it arrives, until the body ends or the client leaves; the
    body iterator is closed either way. `length`: the upstream's `Content-Length`, for
    a body relayed whole and unchanged (then it goes with that length, else chunked, or
    to an HTTP/1.0 client until the connection closes). `on_unread` is called when the
    response ends before its body was first asked for (the head could not be sent):
    a generator never started runs none of its own cleanup, so whoever made it is told."""

    __slots__ = ("body", "headers", "on_unread", "status")

    def __init__(
        self,
        status: int,
        headers: Iterable[tuple[str, str]],
        cache_status: str,
        body: AsyncGenerator[bytes, None],
        on_unread: Callable[[], None] | None = None,
        length: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.headers = _encoded(headers, cache_status)
        self.on_unread = on_unread
        if length is not None and length.isdigit() and status >= 200 and status not in _NO_CONTENT:
            self.headers.insert(0, (b"content-length", length.encode()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body
        broken = started = False
        try:
            await send(
                {"type": "http.response.start", "status": self.status, "headers": self.headers}
            )
            with anyio.CancelScope() as stream:
                watcher = asyncio.ensure_future(_until_disconnect(receive, stream))
                try:
                    started = True
                    async for chunk in body:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    await send({"type": "http.response.body", "body": b""})
                except BrokenBody:
                    broken = True
                finally:
                    watcher.cancel()
            if broken:
                await _abort(scope, receive)
        finally:
            if not started and self.on_unread is not None:
                try:
                    self.on_unread()
                except Exception:  # a fault of ours: logged, never in place of what ended it
                    logger.exception("ending a body that was never read failed")
            await body.aclose()


async def _abort(scope: Scope, receive: Receive) -> None:
    """Reset the connection, then wait (briefly) for the server to see it gone, so that
    it neither ends the body nor reports an app that left a response unfinished."""
    abort: Callable[[], None] | None = scope.get("extensions", {}).get(ABORT)
    if abort is None:
        raise BrokenBody("the upstream's body broke off")  # the server closes the connection
    abort()
    with anyio.move_on_after(ABORT_GRACE):
        while (await receive())["type"] != "http.disconnect":
            pass


async def _until_disconnect(receive: Receive, stream: anyio.CancelScope) -> None:
    """Cancel `stream` once the client has gone (the server says `http.disconnect`)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            stream.cancel()
            return
