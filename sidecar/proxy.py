"""The caching proxy: one MCP request in, a cached or forwarded response out.

`Proxy.handle` is the whole request path. Everything it decides is delegated to the pure
modules (`messages`, `key`, `capture`, `store`); this module does the I/O around them.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Final

import anyio
import httpx
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as ASGIMessage

from .capture import ResponseCapture
from .config import Server, SidecarConfig
from .errors import (
    FORBIDDEN,
    REQUEST_TOO_LARGE,
    UNKNOWN_SERVER,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE,
    ProxyError,
    error_body,
)
from .key import cache_key, credential_identity
from .messages import (
    HEADER_MISMATCH,
    INVALID_REQUEST,
    BypassReason,
    MalformedMessage,
    Message,
    NotStoredReason,
    Verdict,
    bypass_reason,
    frame_event,
    frame_response,
    method_label,
    parse_message,
    routing_header_mismatch,
)
from .metrics import Metrics
from .origin import OriginPolicy
from .store import Entry, ResponseCache

logger = logging.getLogger("mcpcache.sidecar")

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED: Final = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "origin"}
_NOT_RETURNED: Final = HOP_BY_HOP | {"content-length", "content-encoding"}
EVENT_STREAM: Final = "text/event-stream"
JSON: Final = "application/json"


def _cache_status(fwd: str, detail: str | None = None, stored: bool = False) -> str:
    value = f"mcpcache; fwd={fwd}"
    if stored:
        value += "; stored"
    if detail:
        value += f"; detail={detail}"
    return value


HIT_STATUS: Final = "mcpcache; hit"
_BYPASS_FWD: Final[dict[BypassReason, str]] = {
    "method": "method",  # the cache does not handle this method
    "disabled": "bypass",  # the server's cache is off
    "request_state": "request",  # the request itself rules the cache out
}
"""RFC 9211 `fwd` values for requests never looked up."""


def _detail(reason: NotStoredReason) -> str:
    return reason.replace("_", "-")


def _without(headers: Iterable[tuple[str, str]], dropped: frozenset[str]) -> list[tuple[str, str]]:
    """`headers` minus `dropped` and minus any header a `Connection` header names
    (RFC 9110: those are hop-by-hop too). Repeated headers stay repeated."""
    pairs = [(k.lower(), v) for k, v in headers]
    named = {
        token.strip().lower()
        for name, value in pairs
        if name == "connection"
        for token in value.split(",")
    }
    return [(k, v) for k, v in pairs if k not in dropped and k not in named]


def forward_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Request headers for the upstream: all but hop-by-hop ones and those httpx sets.

    `Host` is left to httpx, which sets it from the upstream URL: an MCP server that
    guards against DNS rebinding then sees its own name, not the sidecar's.
    """
    kept = _without(headers, _NOT_FORWARDED)
    kept.append(("accept-encoding", "identity"))
    return kept


def response_headers(headers: httpx.Headers) -> list[tuple[str, str]]:
    """The upstream's response headers for the client (a load balancer's repeated
    `Set-Cookie` included), without hop-by-hop ones."""
    return _without(headers.multi_items(), _NOT_RETURNED)


def _with_headers(
    response: Response, headers: list[tuple[str, str]], cache_status: str
) -> Response:
    response.raw_headers.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers)
    response.raw_headers.append((b"cache-status", cache_status.encode()))
    return response


@functools.lru_cache(maxsize=256)
def _parsed_url(url: str) -> httpx.URL:
    """Parsing a URL is most of what building an httpx request costs; servers are few."""
    return httpx.URL(url)


class Incoming:
    """One request as the proxy needs it: the ASGI scope's parts, decoded once."""

    __slots__ = ("header_bytes", "headers", "method", "raw_headers", "receive")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.method: str = scope["method"]
        self.receive = receive
        raw: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        size = 0
        for key, data in scope["headers"]:
            name, value = key.decode("latin-1"), data.decode("latin-1")
            size += len(name) + len(value)
            raw.append((name, value))
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.raw_headers = raw
        self.headers = headers
        self.header_bytes = size


def _media_type(headers: Mapping[str, str]) -> str:
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


@functools.lru_cache(maxsize=64)
def _accepts_both(accept: str) -> bool:
    """Whether `Accept` admits JSON and event streams (memoised: clients repeat it)."""
    kinds = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return bool(kinds & {JSON, "application/*", "*/*"}) and bool(
        kinds & {EVENT_STREAM, "text/*", "*/*"}
    )


class _HitResponse:
    """A cached answer: fixed headers and one body, sent without a framework response."""

    __slots__ = ("body", "headers")

    _JSON = (b"content-type", b"application/json")
    _EVENTS = (b"content-type", b"text/event-stream")
    _STATUS = (b"cache-status", HIT_STATUS.encode())
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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


class Proxy:
    """Routes `/mcp/<server>` requests to the named upstream, answering from the cache
    where the rules allow."""

    def __init__(
        self,
        config: Callable[[], SidecarConfig],
        cache: ResponseCache,
        metrics: Metrics,
        client: httpx.AsyncClient,
        origin_policy: OriginPolicy,
    ) -> None:
        self._config = config
        self.cache = cache
        self.metrics = metrics
        self.client = client
        self.origin_policy = origin_policy

    async def handle(self, incoming: Incoming, server_name: str) -> ASGIApp:
        try:
            return await self._handle(incoming, server_name)
        except ProxyError as error:
            return error.to_response()

    async def _handle(self, incoming: Incoming, server_name: str) -> ASGIApp:
        if (problem := self.origin_policy.refusal(incoming.headers)) is not None:
            raise ProxyError(403, FORBIDDEN, problem)
        config = self._config()
        if incoming.header_bytes > config.max_header_bytes:
            raise ProxyError(
                431,
                REQUEST_TOO_LARGE,
                f"request headers exceed the limit of {config.max_header_bytes} bytes",
            )
        server = config.server(server_name)
        if server is None:
            raise ProxyError(
                404,
                UNKNOWN_SERVER,
                f"unknown MCP server {server_name!r}",
                data={"server": server_name},
            )
        if incoming.method != "POST":
            return await self._forward(incoming, server, None, b"", _cache_status("method"))
        raw = await self._read_body(incoming, config.max_request_bytes)
        message = self._parse(incoming, raw)
        return await self._post(incoming, config, server, message, raw)

    async def _read_body(self, incoming: Incoming, limit: int) -> bytes:
        def too_large() -> ProxyError:
            return ProxyError(
                413, REQUEST_TOO_LARGE, f"request body exceeds the limit of {limit} bytes"
            )

        declared = incoming.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_large()
        chunks: list[bytes] = []
        size = 0
        while True:
            event: ASGIMessage = await incoming.receive()
            if event["type"] == "http.disconnect":
                raise ProxyError(400, INVALID_REQUEST, "client disconnected mid-request")
            chunk: bytes = event.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large()
            chunks.append(chunk)
            if not event.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _parse(self, incoming: Incoming, raw: bytes) -> Message:
        headers = incoming.headers
        if _media_type(headers) != JSON:
            raise ProxyError(
                415, INVALID_REQUEST, "Content-Type must be application/json for MCP requests"
            )
        if not _accepts_both(headers.get("accept") or "*/*"):
            raise ProxyError(
                406,
                INVALID_REQUEST,
                "Accept must list both application/json and text/event-stream",
            )
        try:
            message = parse_message(raw)
        except MalformedMessage as exc:
            raise ProxyError(400, exc.code, str(exc)) from exc
        if message.is_request and (mismatch := routing_header_mismatch(headers, message)):
            raise ProxyError(400, HEADER_MISMATCH, mismatch, request_id=message.id)
        return message

    async def _post(
        self,
        incoming: Incoming,
        config: SidecarConfig,
        server: Server,
        message: Message,
        raw: bytes,
    ) -> ASGIApp:
        method = method_label(message.method)
        bypass = bypass_reason(message)
        if bypass is None and not server.cache.enabled:
            bypass = "disabled"
        if bypass is not None:
            if message.is_request:
                self.metrics.count(server.name, method, "bypass")
            status = _cache_status(_BYPASS_FWD[bypass])
            return await self._forward(incoming, server, message, raw, status)

        assert message.method is not None
        key = cache_key(
            server.name,
            message.method,
            message.params,
            config.app_id,
            credential_identity(incoming.headers.get("authorization")),
        )
        entry = self.cache.get_fresh(key)
        if entry is not None:
            self.metrics.count(server.name, method, "hit")
            return self._hit(entry, message.id)
        self.metrics.count(server.name, method, "miss")
        return await self._forward(incoming, server, message, raw, None, key)

    def _hit(self, entry: Entry, request_id: Any) -> ASGIApp:
        body = frame_response(request_id, entry.result, event=entry.event_stream)
        age = int(self.cache.timer() - entry.stored_at)
        return _HitResponse(body, entry.event_stream, age)

    async def _forward(
        self,
        incoming: Incoming,
        server: Server,
        message: Message | None,
        raw: bytes,
        cache_status: str | None,
        key: str | None = None,
    ) -> Response:
        """Send the request upstream and relay the answer as it arrives.

        With a `key`, the answer is followed by a `ResponseCapture` and stored if the
        rules allow; `cache_status` is then decided here.
        """
        request_id = message.id if message is not None else None
        method = method_label(message.method if message is not None else None)
        # A GET is the server's long-lived event stream: no idle limit on reading it.
        read_timeout = None if incoming.method == "GET" else server.timeout
        timeout = httpx.Timeout(server.timeout, read=read_timeout)
        upstream_request = self.client.build_request(
            incoming.method,
            _parsed_url(server.url),
            headers=forward_headers(incoming.raw_headers),
            content=raw if incoming.method == "POST" else None,
            timeout=timeout,
        )
        started = time.perf_counter()
        try:
            upstream = await self.client.send(upstream_request, stream=True)
        except httpx.TimeoutException as exc:
            self._upstream_failed(server, method, "timeout", started, exc)
            raise ProxyError(
                504,
                UPSTREAM_TIMEOUT,
                f"MCP server {server.name!r} did not answer within {server.timeout:g}s",
                request_id,
            ) from exc
        except httpx.HTTPError as exc:
            self._upstream_failed(server, method, "unreachable", started, exc)
            raise ProxyError(
                502,
                UPSTREAM_UNAVAILABLE,
                f"MCP server {server.name!r} is unreachable: {type(exc).__name__}",
                request_id,
            ) from exc

        headers = response_headers(upstream.headers)
        event_stream = _media_type(upstream.headers) == EVENT_STREAM
        capture: ResponseCapture | None = None
        if message is not None and message.is_request:
            # Every request's answer is followed, if only to notice a stream that breaks
            # before its final response; only a cacheable one is ever buffered.
            max_size = server.cache.effective_max_size if key is not None else 0
            capture = ResponseCapture(request_id, event_stream, max_size)
            if key is not None and (refusal := self._refusal(upstream)) is not None:
                capture.verdict = Verdict(refusal)
        relay = _Relay(self, server, method, upstream, started, capture, key, request_id)
        status = upstream.status_code
        if key is not None and not event_stream:
            # A JSON answer is one message: read it (up to maxSize) before the headers,
            # so that Cache-Status can say whether it was stored.
            prefix = await relay.read_prefix()
            if relay.done:
                return _with_headers(Response(prefix, status), headers, relay.cache_status())
            too_large = _cache_status("miss", _detail("too_large"))
            return _with_headers(
                StreamingResponse(relay.stream(prefix), status), headers, too_large
            )
        cache_status = cache_status or _cache_status("miss")
        return _with_headers(StreamingResponse(relay.stream(b""), status), headers, cache_status)

    def _refusal(self, upstream: httpx.Response) -> NotStoredReason | None:
        if upstream.status_code != 200:
            return "upstream_status"
        directives = upstream.headers.get("cache-control", "").lower()
        if "no-store" in directives or "private" in directives:
            return "no_store"
        return None

    def _upstream_failed(
        self, server: Server, method: str, kind: str, started: float, exc: Exception
    ) -> None:
        elapsed = time.perf_counter() - started
        self.metrics.upstream_errors.labels(server.name, kind).inc()
        logger.warning(
            "upstream call failed",
            extra={
                "server": server.name,
                "method": method,
                "error": type(exc).__name__,
                "kind": kind,
                "duration_ms": round(elapsed * 1000, 3),
            },
        )

    def finish_capture(self, server: Server, key: str, capture: ResponseCapture) -> Verdict:
        """Store the captured result if the verdict allows; count why not otherwise."""
        verdict = capture.finish()
        if verdict.reason is None:
            ttl = server.cache.ttl
            if verdict.ttl_cap is not None:
                ttl = min(ttl, verdict.ttl_cap)
            if self.cache.store(key, verdict.result, capture.event_stream, ttl) is None:
                verdict = Verdict("over_budget")
        if verdict.reason is not None:
            self.metrics.not_stored.labels(server.name, verdict.reason).inc()
        return verdict


class _Relay:
    """Carries one upstream response to the client, showing each chunk to the capture."""

    def __init__(
        self,
        proxy: Proxy,
        server: Server,
        method: str,
        upstream: httpx.Response,
        started: float,
        capture: ResponseCapture | None,
        key: str | None,
        request_id: Any,
    ) -> None:
        self.proxy = proxy
        self.server = server
        self.method = method
        self.upstream = upstream
        self.started = started
        self.capture = capture
        self.key = key
        self.request_id = request_id
        self.done = False
        self.verdict: Verdict | None = None
        self._chunks = upstream.aiter_raw()

    async def read_prefix(self) -> bytes:
        """Read a JSON body until it ends or outgrows the cap (then the rest streams)."""
        assert self.capture is not None
        parts: list[bytes] = []
        try:
            async for chunk in self._chunks:
                self._see(chunk)
                parts.append(chunk)
                if self.capture.too_large:
                    return b"".join(parts)
        except httpx.HTTPError as exc:
            await self._close(exc)
            raise ProxyError(
                502,
                UPSTREAM_UNAVAILABLE,
                f"MCP server {self.server.name!r} failed mid-response: {type(exc).__name__}",
                self.request_id,
            ) from exc
        await self._close(None)
        return b"".join(parts)

    def cache_status(self) -> str:
        reason = self.verdict.reason if self.verdict is not None else "incomplete"
        if reason is None:
            return _cache_status("miss", stored=True)
        return _cache_status("miss", _detail(reason))

    async def stream(self, prefix: bytes) -> AsyncIterator[bytes]:
        error: BaseException | None = None
        try:
            if prefix:
                yield prefix
            async for chunk in self._chunks:
                self._see(chunk)
                yield chunk
            if self._unanswered():
                yield self._error_event("ended the stream before answering")
        except httpx.HTTPError as exc:
            error = exc
            if self._unanswered():
                yield self._error_event(f"failed mid-stream: {type(exc).__name__}")
        except BaseException as exc:  # client went away: cancelled or closed
            error = exc
            raise
        finally:
            # Shielded: a client that goes away must still release the upstream socket.
            with anyio.CancelScope(shield=True):
                await self._close(error)

    def _unanswered(self) -> bool:
        """An event stream for a request ended without its response, and the client
        cannot resume it: end the call with an error now rather than let it wait."""
        capture = self.capture
        return (
            capture is not None
            and capture.event_stream
            and not capture.final_seen
            and not capture.resumable
        )

    def _error_event(self, what: str) -> bytes:
        """A JSON-RPC error event, led by a blank line that ends whatever partial event
        the upstream left behind, so that the error always arrives as an event of its own."""
        message = f"MCP server {self.server.name!r} {what}"
        return b"\n\n" + frame_event(error_body(UPSTREAM_UNAVAILABLE, message, self.request_id))

    def _see(self, chunk: bytes) -> None:
        capture = self.capture
        if capture is None:
            return
        decided = capture.verdict is not None
        capture.feed(chunk)
        if self.key is not None and not decided and capture.final_seen:
            self.verdict = self.proxy.finish_capture(self.server, self.key, capture)

    async def _close(self, error: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        await self.upstream.aclose()
        if self.capture is not None and self.key is not None and self.verdict is None:
            if error is not None:
                self.capture.verdict = Verdict("incomplete")
            self.verdict = self.proxy.finish_capture(self.server, self.key, self.capture)
        elapsed = time.perf_counter() - self.started
        self.proxy.metrics.upstream_latency.labels(self.server.name, self.method).observe(elapsed)
        if error is not None and not isinstance(error, httpx.HTTPError):
            kind = "client_gone"
        elif error is not None:
            kind = "broken"
            self.proxy.metrics.upstream_errors.labels(self.server.name, "broken").inc()
        else:
            kind = "ok"
        logger.info(
            "upstream call",
            extra={
                "server": self.server.name,
                "method": self.method,
                "status": self.upstream.status_code,
                "duration_ms": round(elapsed * 1000, 3),
                "bytes": self.capture.size if self.capture is not None else None,
                "stored": None if self.verdict is None else self.verdict.reason is None,
                "not_stored": None if self.verdict is None else self.verdict.reason,
                "end": kind,
            },
        )
