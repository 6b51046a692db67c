"""Answers the sidecar gives from memory: a hit, a stale entry, or a collapsed request's
share of another's answer. Fixed headers and one body, sent as a plain ASGI callable (a
hit costs a few microseconds; a framework response object would cost more).

None of them carries a header the upstream set: those were for the request that went
upstream, and may be its caller's alone (cookies, session ids)."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from ..cache.entry import Note, replayed
from ..cache.store import Entry
from ..rules import cache_status
from ..rules.protocol.results import RESULT, frame_parts, frame_response


class HitResponse:
    __slots__ = ("body", "headers")

    _JSON = (b"content-type", b"application/json")
    _EVENTS = (b"content-type", b"text/event-stream")
    _STATUS = (b"cache-status", cache_status.HIT.encode())
    _TIER_STATUS = (b"cache-status", cache_status.SHARED_HIT.encode())
    _PUBLIC_STATUS = (b"cache-status", cache_status.PUBLIC_HIT.encode())
    _PUBLIC_TIER_STATUS = (b"cache-status", cache_status.SHARED_PUBLIC_HIT.encode())
    _NO_CACHE = (b"cache-control", b"no-cache")

    def __init__(
        self,
        body: bytes,
        event_stream: bool,
        age: int | None,
        status: tuple[bytes, bytes] = _STATUS,
    ) -> None:
        self.body = body
        self.headers = [
            self._EVENTS if event_stream else self._JSON,
            (b"content-length", str(len(body)).encode()),
            status,
            self._NO_CACHE,
        ]
        if age is not None:
            self.headers.append((b"age", str(max(0, age)).encode()))

    @classmethod
    def of(
        cls,
        entry: Entry,
        request_id: Any,
        now: float,
        from_tier: bool = False,
        token: Any = None,
    ) -> HitResponse:
        """The stored result framed under the caller's own JSON-RPC id, its age in
        `_meta` and its `ttlMs` (if it has one) restated as the freshness left, after
        the notifications the upstream's stream carried before it (progress under the
        caller's own progress `token`, none without one); `from_tier` when it came from
        the Redis tier. An entry for every caller says so (`detail=public`)."""
        body = frame_parts(request_id, entry.result_parts(now), entry.event_stream)
        if entry.notes:
            body = replayed(entry.notes, _token(token)) + body
        if entry.scope is not None and entry.scope.public:
            status = cls._PUBLIC_TIER_STATUS if from_tier else cls._PUBLIC_STATUS
        else:
            status = cls._TIER_STATUS if from_tier else cls._STATUS
        return cls(body, entry.event_stream, int(now - entry.stored_at), status)

    @classmethod
    def stale(
        cls, entry: Entry, request_id: Any, now: float, status: str, token: Any = None
    ) -> HitResponse:
        """An expired entry, on purpose: `Age` past the TTL says how old, `status` why
        (and that the entry is for every caller, if it is)."""
        body = frame_parts(request_id, entry.result_parts(now), entry.event_stream)
        if entry.notes:
            body = replayed(entry.notes, _token(token)) + body
        if entry.scope is not None and entry.scope.public:
            status = cache_status.of_public_entry(status)
        return cls(body, entry.event_stream, int(now - entry.stored_at), _status_header(status))

    @classmethod
    def collapsed(
        cls,
        request_id: Any,
        payload: bytes,
        event_stream: bool,
        status: str,
        member: bytes = RESULT,
        notes: tuple[Note, ...] = (),
        token: Any = None,
    ) -> HitResponse:
        """Another request's fresh answer (`result` or `error`) under this caller's id,
        after the `notes` its stream carried (progress under this caller's `token`)."""
        body = frame_response(request_id, payload, event_stream, member=member)
        if notes:
            body = replayed(notes, _token(token)) + body
        return cls(body, event_stream, None, _status_header(status))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


def _token(token: Any) -> bytes | None:
    """A caller's progress token as it goes into replayed progress (None: none)."""
    if token is None:
        return None
    try:
        return orjson.dumps(token)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes: no progress
        return None


def _status_header(value: str) -> tuple[bytes, bytes]:
    return (b"cache-status", value.encode())
