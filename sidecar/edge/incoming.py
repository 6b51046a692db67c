"""Reading one client request: its headers decoded once, its body read under a bound,
and its JSON-RPC message checked before anything is looked up."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from starlette.types import Message as ASGIMessage
from starlette.types import Receive, Scope

from ..rules.protocol.messages import (
    HEADER_MISMATCH,
    INVALID_REQUEST,
    Message,
    read_message,
    routing_header_mismatch,
)
from ..rules.reading.body import LARGE_BODY
from ..rules.reading.headers import accepts_both, forwardable, joined, utf8_json
from .errors import REQUEST_TOO_LARGE, ProxyError

UNCHECKED_BODY: Final = 64 << 10
BYTES_PER_VALUE: Final = 8
"""A body over `UNCHECKED_BODY` bytes may hold one value (counted by its objects, arrays
and commas) per this many bytes.

Parsed, an empty object costs about 64 bytes of memory and takes 3 in the body, a short
string about 50 and takes 4: a large body of nothing else would cost 20 to 30 times its
size. Real requests carry text between their separators; a large body past this bound
is not parsed at all: it goes upstream as sent, uncached (a small one costs little
either way)."""


class DecodedHeaders:
    """A request's headers as sent (decoded), by lower-case name, and their size in
    bytes; and those that go upstream (`reading.headers.forwardable`), worked out when
    first asked for (a hit never is) and then kept with the set."""

    __slots__ = ("_forwardable", "by_name", "raw", "size")

    def __init__(self, raw: tuple[tuple[str, str], ...], size: int) -> None:
        self.raw = raw
        self.by_name: Mapping[str, str] = MappingProxyType(joined(raw))
        self.size = size
        self._forwardable: tuple[tuple[str, str], ...] | None = None

    @property
    def forwardable(self) -> tuple[tuple[str, str], ...]:
        kept = self._forwardable
        if kept is None:
            kept = self._forwardable = forwardable(self.raw)
        return kept


MEMO_HEADERS: Final = 64
"""Header sets remembered decoded; a client sends the same headers call after call."""
MEMO_MAX_HEADERS: Final = 32
MEMO_HEADER_BYTES: Final = 4 << 10
"""Only header sets of at most this many headers and bytes are remembered: with the
objects that hold them, the memo stays around a megabyte whatever callers send. (The
sets are kept as sent, credentials included, in this process's memory only.)"""
_decoded: dict[tuple[tuple[bytes, bytes], ...], DecodedHeaders] = {}


def _decode(scope_headers: Iterable[tuple[bytes, bytes]]) -> DecodedHeaders:
    """The request's headers, decoded; the same bytes always give the same result, so
    a header set seen before is taken from the memo."""
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
    decoded = DecodedHeaders(raw, size)
    if remembered and len(raw) <= MEMO_MAX_HEADERS and size <= MEMO_HEADER_BYTES:
        if len(_decoded) >= MEMO_HEADERS:
            _decoded.clear()
        _decoded[pairs] = decoded
    return decoded


def _too_large(limit: int) -> ProxyError:
    return ProxyError(413, REQUEST_TOO_LARGE, f"request body exceeds the limit of {limit} bytes")


class Incoming:
    """One request as the proxy needs it: the ASGI scope's parts, decoded once."""

    __slots__ = (
        "_decoded",
        "header_bytes",
        "headers",
        "method",
        "query",
        "raw_headers",
        "read",
        "receive",
    )

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope["method"]
        self.receive = receive
        decoded = self._decoded = _decode(scope["headers"])
        self.raw_headers, self.headers, self.header_bytes = (
            decoded.raw,
            decoded.by_name,
            decoded.size,
        )
        query: bytes = scope.get("query_string", b"")
        self.query = query.decode("latin-1")
        """The query string exactly as sent (without `?`): it goes upstream, and into
        the key."""
        self.read: Message | None = None
        """Its message once read (for its span, when it is traced)."""

    @property
    def forwardable(self) -> tuple[tuple[str, str], ...]:
        """The headers that go upstream as the client sent them (`reading.headers`)."""
        return self._decoded.forwardable

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

    async def message(self, raw: bytes) -> Message:
        """The body as the sidecar reads it (`messages.read_message`), with why it is in
        doubt; refused only where the MCP specification makes an intermediary refuse:
        `Mcp-Method` or `Mcp-Name` headers that disagree with the body (else a request
        could name one tool in its headers, another in its body, and be answered with
        the wrong tool's result). A large body is read off the event loop."""
        headers = self.headers
        if not utf8_json(headers):
            return Message.unread(raw, "unreadable")  # the upstream answers it
        if len(raw) > UNCHECKED_BODY:
            values = raw.count(b"{") + raw.count(b"[") + raw.count(b",")
            if values > len(raw) // BYTES_PER_VALUE:
                return Message.unread(raw, "unreadable")  # costly to read: not read
        if len(raw) <= LARGE_BODY:
            message = read_message(raw)
        else:
            message = await asyncio.to_thread(read_message, raw)
        if message.is_request and (
            mismatch := routing_header_mismatch(headers, message, self.raw_headers)
        ):
            raise ProxyError(400, HEADER_MISMATCH, mismatch, request_id=message.id)
        if message.doubt is None and not accepts_both(headers.get("accept") or "*/*"):
            message.doubt = "accept"  # a hit's answer may be a stream it cannot take
        self.read = message
        return message
