"""Reading one client request: its headers decoded once, its body read under a bound,
and its JSON-RPC message checked before anything is looked up."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from starlette.types import Message as ASGIMessage
from starlette.types import Receive, Scope

from ..rules.ambiguity import LARGE_BODY, Ambiguous, upstream_body
from ..rules.headers import JSON, accepts_both, joined, media_type
from ..rules.messages import (
    HEADER_MISMATCH,
    INVALID_REQUEST,
    MalformedMessage,
    Message,
    parse_message,
    routing_header_mismatch,
)
from .errors import REQUEST_TOO_LARGE, ProxyError

UNCHECKED_BODY: Final = 64 << 10
BYTES_PER_VALUE: Final = 8
"""A body over `UNCHECKED_BODY` bytes may hold one value (counted by its objects, arrays
and commas) per this many bytes.

Parsed, an empty object costs about 64 bytes of memory and takes 3 in the body, a short
string about 50 and takes 4: a large body of nothing else would cost 20 to 30 times its
size. Real requests carry text between their separators; a large body past this bound
is refused before it is parsed (a small one costs little either way, and gets the
parser's own error)."""


DecodedHeaders = tuple[tuple[tuple[str, str], ...], Mapping[str, str], int]
"""A request's headers as sent (decoded), by lower-case name, and their size in bytes."""

MEMO_HEADERS: Final = 64
"""Header sets remembered decoded; a client sends the same headers call after call."""
MEMO_MAX_HEADERS: Final = 32
MEMO_HEADER_BYTES: Final = 4 << 10
"""Only header sets of at most this many headers and bytes are remembered: with the
objects that hold them, the memo stays around a megabyte whatever callers send. (The
sets are kept as sent, credentials included, in this process's memory only.)"""
_decoded: dict[tuple[tuple[bytes, bytes], ...], DecodedHeaders] = {}


def _decode(scope_headers: Iterable[tuple[bytes, bytes]]) -> DecodedHeaders:
    """The request's headers, decoded; the same bytes always give the same (immutable)
    result, so a header set seen before is taken from the memo."""
    pairs = tuple(scope_headers)
    remembered = True
    try:
        found = _decoded.get(pairs)
    except TypeError:  # a server that gives each header as a list: not remembered
        found, remembered = None, False
    if found is not None:
        return found
    # Values without the whitespace around them (RFC 9110's OWS, which some parsers
    # keep): the key, the checks and the upstream then all see the value a server reads
    # (`Mcp-Session-Id: "abc "` is session `abc` to a server that trims).
    raw = tuple((k.decode("latin-1"), v.decode("latin-1").strip(" \t")) for k, v in pairs)
    size = sum(len(k) + len(v) for k, v in pairs)
    decoded = (raw, MappingProxyType(joined(raw)), size)
    if remembered and len(raw) <= MEMO_MAX_HEADERS and size <= MEMO_HEADER_BYTES:
        if len(_decoded) >= MEMO_HEADERS:
            _decoded.clear()
        _decoded[pairs] = decoded
    return decoded


def _too_large(limit: int) -> ProxyError:
    return ProxyError(413, REQUEST_TOO_LARGE, f"request body exceeds the limit of {limit} bytes")


class Incoming:
    """One request as the proxy needs it: the ASGI scope's parts, decoded once."""

    __slots__ = ("header_bytes", "headers", "method", "raw_headers", "receive")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope["method"]
        self.receive = receive
        self.raw_headers, self.headers, self.header_bytes = _decode(scope["headers"])

    async def read_body(self, limit: int) -> bytes:
        """The whole body; 413 past `limit` bytes, declared or received. (A body that
        is slow to arrive is the listener's business: see `listener`.)"""

        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            event: ASGIMessage = await self.receive()
            if event["type"] == "http.disconnect":
                raise ProxyError(400, INVALID_REQUEST, "client disconnected mid-request")
            chunk: bytes = event.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            if not event.get("more_body", False):
                if not chunks:
                    return chunk  # the usual case: the whole body in one event
                chunks.append(chunk)
                return b"".join(chunks)
            chunks.append(chunk)

    def message(self, raw: bytes) -> Message:
        """The body as a JSON-RPC message, or the precise error for why it is not one."""
        headers = self.headers
        if media_type(headers) != JSON:
            raise ProxyError(
                415, INVALID_REQUEST, "Content-Type must be application/json for MCP requests"
            )
        if not accepts_both(headers.get("accept") or "*/*"):
            raise ProxyError(
                406,
                INVALID_REQUEST,
                "Accept must list both application/json and text/event-stream",
            )
        if len(raw) > UNCHECKED_BODY:
            values = raw.count(b"{") + raw.count(b"[") + raw.count(b",")
            if values > len(raw) // BYTES_PER_VALUE:
                raise ProxyError(
                    413,
                    REQUEST_TOO_LARGE,
                    f"request body holds about {values} values in {len(raw)} bytes; "
                    f"at most one per {BYTES_PER_VALUE} bytes is accepted",
                )
        try:
            message = parse_message(raw)
        except MalformedMessage as exc:
            raise ProxyError(400, exc.code, str(exc)) from exc
        if message.is_request and (mismatch := routing_header_mismatch(headers, message)):
            raise ProxyError(400, HEADER_MISMATCH, mismatch, request_id=message.id)
        return message

    @staticmethod
    async def upstream_body(message: Message) -> bytes:
        """The message's bytes for the upstream, as the sidecar read them; 400 for a
        body that may be read two ways (see `rules.ambiguity`). A large body is read
        off the event loop."""
        try:
            if len(message.raw) <= LARGE_BODY:
                return upstream_body(message.body, message.raw)
            return await asyncio.to_thread(upstream_body, message.body, message.raw)
        except Ambiguous as exc:
            raise ProxyError(400, INVALID_REQUEST, str(exc), request_id=message.id) from exc
