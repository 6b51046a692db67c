"""The response to a cache hit: fixed headers and one body, sent as a plain ASGI callable
(a hit costs a few microseconds; a framework response object would cost more)."""

from __future__ import annotations

from typing import Any

from starlette.types import Receive, Scope, Send

from . import cache_status
from .messages import frame_response
from .store import Entry


class HitResponse:
    __slots__ = ("body", "headers")

    _JSON = (b"content-type", b"application/json")
    _EVENTS = (b"content-type", b"text/event-stream")
    _STATUS = (b"cache-status", cache_status.HIT.encode())
    _NO_CACHE = (b"cache-control", b"no-cache")

    def __init__(self, body: bytes, event_stream: bool, age: int) -> None:
        self.body = body
        self.headers = [
            self._EVENTS if event_stream else self._JSON,
            (b"content-length", str(len(body)).encode()),
            self._STATUS,
            (b"age", str(max(0, age)).encode()),
            self._NO_CACHE,
        ]

    @classmethod
    def of(cls, entry: Entry, request_id: Any, now: float) -> HitResponse:
        """The stored result framed under the caller's own JSON-RPC id."""
        body = frame_response(request_id, entry.result, event=entry.event_stream)
        return cls(body, entry.event_stream, int(now - entry.stored_at))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})
