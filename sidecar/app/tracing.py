"""OpenTelemetry spans for the proxy listener: one server span per MCP request, hits
included, with the cache's outcome on it, and a client span for each call upstream.

This module is the only one that imports the OpenTelemetry SDK and exporter, and the
sidecar imports it only when tracing is on (`Sidecar`): with tracing off, neither memory
nor the hit path carries any of it (benchmarks/tracing.py measures both). (FastAPI
imports the OpenTelemetry API on its own; without an SDK it does nothing.)

What a span holds is chosen for a trace that any caller's operator may read: the method,
the tool's name, the JSON-RPC id, the protocol version, the server's name and the cache's
outcome. Never an argument, a resource URI (it names what was read, as an argument does),
a result, a header value or the upstream's URL beyond its host and port.

Spans leave through `BoundedExport`, not the SDK's batch processor: its queue is as
bounded, but it drops spans without counting them, and an operator must be able to see
that a collector is losing the sidecar's spans (`mcpcache_trace_spans_dropped_total`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import CollectorRegistry, Counter
from starlette.types import Message as ASGIMessage
from starlette.types import Receive, Scope, Send

from ..config.tracing import SERVICE_NAME, Tracing
from ..edge import spans
from ..edge.incoming import Incoming
from ..proxy.router import Proxy
from ..rules.protocol.messages import Message

logger = logging.getLogger("mcpcache.sidecar")

TRACE_HEADERS: Final = frozenset({"traceparent", "tracestate"})
_PROPAGATOR: Final = TraceContextTextMapPropagator()


def _environ_number(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name, "")
    return int(value) if value.isascii() and value.isdigit() and int(value) > 0 else default


class BoundedExport(SpanProcessor):
    """Ends spans into a queue of at most `max_queue` spans that one thread exports in
    batches, every `delay` seconds or as soon as a batch is full. A full queue drops
    the new span, an export that fails drops its batch: both counted, neither ever
    waited for on the request path (an unreachable collector costs the export thread its
    timeout, and the callers nothing)."""

    def __init__(
        self,
        exporter: SpanExporter,
        dropped: Counter,
        max_queue: int = 2048,
        max_batch: int = 512,
        delay: float = 5.0,
    ) -> None:
        self._exporter = exporter
        self._dropped_full = dropped.labels("queue_full")
        self._dropped_failed = dropped.labels("export_failed")
        self._max_queue = max_queue
        self._max_batch = max_batch
        self._delay = delay
        self._queue: deque[ReadableSpan] = deque()
        self._exporting = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="mcpcache-spans", daemon=True)
        self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        # deque's append and len are atomic: the export thread may pop meanwhile.
        if len(self._queue) >= self._max_queue:
            self._dropped_full.inc()
            return
        self._queue.append(span)
        if len(self._queue) >= self._max_batch:
            self._wake.set()

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._export_queued()

    def _export_queued(self) -> None:
        queue = self._queue
        while queue and not self._stopping:
            batch = [queue.popleft() for _ in range(min(self._max_batch, len(queue)))]
            self._exporting = len(batch)
            try:
                result = self._exporter.export(batch)
            except Exception:  # an exporter bug must not end the thread
                logger.exception("span export raised")
                result = SpanExportResult.FAILURE
            finally:
                self._exporting = 0
            if result is not SpanExportResult.SUCCESS:
                self._dropped_failed.inc(len(batch))

    @property
    def queued(self) -> int:
        """Spans waiting for their export (and the batch being exported)."""
        return len(self._queue) + self._exporting

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        self._wake.set()
        return True

    def shutdown(self) -> None:
        """Stop exporting; spans still queued are dropped (and counted) rather than
        waited for: a sidecar that stops must not wait on a collector."""
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=2.0)
        if left := len(self._queue):
            self._dropped_failed.inc(left)
        self._exporter.shutdown()


class Tracer:
    """The proxy listener's tracing: a tracer provider of its own (not the process's
    global one: two sidecars in one process, as in the tests, keep theirs apart)."""

    def __init__(
        self, settings: Tracing, environ: Mapping[str, str], registry: CollectorRegistry
    ) -> None:
        dropped = Counter(
            "mcpcache_trace_spans_dropped",
            "Spans not exported, by reason: the export queue was full, or the export failed",
            ["reason"],
            registry=registry,
        )
        endpoint = settings.endpoint
        exporter = OTLPSpanExporter(
            endpoint=f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None
        )
        self.export = BoundedExport(
            exporter,
            dropped,
            max_queue=_environ_number(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
            max_batch=_environ_number(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
            delay=_environ_number(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000) / 1000,
        )
        named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        resource = Resource.create({} if named else {"service.name": SERVICE_NAME})
        sampler = ParentBased(TraceIdRatioBased(settings.ratio(environ)))
        self.provider = TracerProvider(sampler=sampler, resource=resource)
        self.provider.add_span_processor(self.export)
        self.tracer = self.provider.get_tracer("mcpcache.sidecar")

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, proxy: Proxy, name: str
    ) -> None:
        """Answer one MCP request as `ProxyApp` would, inside its span."""
        incoming = Incoming(scope, receive)
        request = RequestSpan(self.tracer, incoming, name)
        token = spans.current.set(request)

        async def observed(message: ASGIMessage) -> None:
            if message["type"] == "http.response.start":
                request.responded(message["status"], message.get("headers", ()))
            await send(message)

        error: BaseException | None = None
        try:
            response = await proxy.handle(incoming, name)
            await response(scope, receive, observed)
        except BaseException as exc:
            error = exc
            raise
        finally:
            spans.current.reset(token)
            request.end(error)

    def shutdown(self) -> None:
        self.provider.shutdown()


class RequestSpan:
    """The server span of one request (`spans.RequestTrace`). It is made when first
    needed, its start set to the request's arrival: by then the message has been read,
    so that the span starts named, and a `traceparent` in its `_meta` can be its parent
    when the headers carry none."""

    __slots__ = (
        "_age",
        "_cache_status",
        "_followers",
        "_incoming",
        "_not_stored",
        "_server",
        "_span",
        "_start_time",
        "_status",
        "_tracer",
    )

    def __init__(self, tracer: trace.Tracer, incoming: Incoming, server: str) -> None:
        self._tracer = tracer
        self._incoming = incoming
        self._server = server
        self._start_time = time.time_ns()
        self._span: trace.Span | None = None
        self._status: int | None = None
        self._cache_status: str | None = None
        self._age: str | None = None
        self._not_stored: str | None = None
        self._followers = 0

    def span(self) -> trace.Span:
        if self._span is None:
            self._span = self._start({})
        return self._span

    def _start(self, more: dict[str, Any]) -> trace.Span:
        message = self._incoming.read
        name, attributes = _request_attributes(self._incoming, message, self._server)
        attributes.update(more)
        return self._tracer.start_span(
            name,
            context=_parent(self._incoming.headers, message),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=self._start_time,
        )

    def upstream(
        self, url: str, method: str, headers: list[tuple[str, str]]
    ) -> tuple[list[tuple[str, str]], spans.UpstreamEnd]:
        parent = trace.set_span_in_context(self.span())
        attributes: dict[str, Any] = {"mcpcache.server": self._server}
        message = self._incoming.read
        if message is not None and message.method is not None:
            attributes["mcp.method.name"] = message.method
        address = urlsplit(url)
        if address.hostname:
            attributes["server.address"] = address.hostname
        if address.port:
            attributes["server.port"] = address.port
        attributes["http.request.method"] = self._incoming.method
        client = self._tracer.start_span(
            f"upstream {method}", context=parent, kind=SpanKind.CLIENT, attributes=attributes
        )
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(client))
        sent = [(k, v) for k, v in headers if k.lower() not in TRACE_HEADERS]
        sent.extend(carrier.items())

        def end(status: int | None, error: str | None) -> None:
            if status is not None:
                client.set_attribute("http.response.status_code", status)
            if error is not None:
                client.set_attribute("error.type", error)
                client.set_status(Status(StatusCode.ERROR))
            elif status is not None and status >= 500:
                client.set_attribute("error.type", str(status))
                client.set_status(Status(StatusCode.ERROR))
            client.end()

        return sent, end

    def judged(self, not_stored: str | None, followers: int) -> None:
        self._not_stored = not_stored
        self._followers = followers

    def responded(self, status: int, headers: Sequence[tuple[bytes, bytes]]) -> None:
        self._status = status
        for name, value in headers:
            if name == b"cache-status":
                self._cache_status = value.decode("latin-1")
            elif name == b"age":
                self._age = value.decode("latin-1")

    def end(self, error: BaseException | None) -> None:
        """Ends the span with the outcome on it. A span nothing asked for yet (a hit: no
        upstream call) starts here with every attribute at once: the SDK checks and
        stores an attribute given at the start in one pass, and takes its lock for
        each one set later."""
        outcome: dict[str, Any] = {}
        if self._status is not None:
            outcome["http.response.status_code"] = self._status
        if self._cache_status is not None:
            outcome.update(_cache_attributes(self._cache_status))
        if self._age is not None and self._age.isdigit():
            outcome["mcpcache.age_seconds"] = int(self._age)
        if self._not_stored is not None:
            outcome["mcpcache.not_stored_reason"] = self._not_stored
        if self._followers:
            outcome["mcpcache.collapsed"] = "leader"
            outcome["mcpcache.collapsed_followers"] = self._followers
        failed = error is not None or (self._status is not None and self._status >= 500)
        if failed:
            outcome["error.type"] = type(error).__name__ if error is not None else str(self._status)
        if self._span is None:
            span = self._span = self._start(outcome)
        else:
            span = self._span
            span.set_attributes(outcome)
        if failed:
            span.set_status(Status(StatusCode.ERROR))
        span.end()


def _parent(headers: Mapping[str, str], message: Message | None) -> Context | None:
    """The caller's trace context: the `traceparent` header (the HTTP hop, the nearer
    parent), else the one the MCP client put in the request's `params._meta`."""
    if "traceparent" in headers:
        return _PROPAGATOR.extract(headers)
    meta = message.params.get("_meta") if message is not None else None
    if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
        carrier = {"traceparent": meta["traceparent"]}
        if isinstance(state := meta.get("tracestate"), str):
            carrier["tracestate"] = state
        return _PROPAGATOR.extract(carrier)
    return None


def _request_attributes(
    incoming: Incoming, message: Message | None, server: str
) -> tuple[str, dict[str, Any]]:
    """The span's name and its attributes from the request (the MCP semantic
    conventions: `{mcp.method.name} {tool}`, never the resource URI)."""
    attributes: dict[str, Any] = {
        "mcpcache.server": server,
        "http.request.method": incoming.method,
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    method = message.method if message is not None else None
    if method is None:
        return f"{incoming.method} /mcp/{server}", attributes
    attributes["mcp.method.name"] = method
    name = method
    if message is not None and message.is_request:
        attributes["jsonrpc.request.id"] = str(message.id)
        attributes["jsonrpc.protocol.version"] = "2.0"
    tool = message.params.get("name") if message is not None else None
    if method == "tools/call" and isinstance(tool, str):
        attributes["gen_ai.tool.name"] = tool
        attributes["gen_ai.operation.name"] = "execute_tool"
        name = f"{method} {tool}"
    version = incoming.headers.get("mcp-protocol-version")
    meta = message.params.get("_meta") if message is not None else None
    if version is None and isinstance(meta, dict):
        found = meta.get("io.modelcontextprotocol/protocolVersion")
        version = found if isinstance(found, str) else None
    if version is not None:
        attributes["mcp.protocol.version"] = version
    return name, attributes


def _cache_attributes(value: str) -> dict[str, Any]:
    """`Cache-Status` read back into attributes: the whole value, what the cache did
    (hit, miss, bypass, stale, collapsed), its detail, and where a hit came from."""
    attributes: dict[str, Any] = {"mcpcache.cache_status": value}
    params: dict[str, str] = {}
    for part in value.split(";")[1:]:
        name, _, parameter = part.strip().partition("=")
        params[name] = parameter
    detail = params.get("detail")
    if "hit" in params:
        stale = detail is not None and "stale" in detail
        attributes["mcpcache.cache.outcome"] = "stale" if stale else "hit"
        shared = detail is not None and detail.startswith("shared")
        attributes["mcpcache.cache.tier"] = "shared" if shared else "memory"
    elif "collapsed" in params:
        attributes["mcpcache.cache.outcome"] = "collapsed"
        attributes["mcpcache.collapsed"] = "follower"
    elif "fwd" in params:
        attributes["mcpcache.cache.outcome"] = params["fwd"]
    if "stored" in params:
        attributes["mcpcache.stored"] = True
    if detail is not None:
        attributes["mcpcache.cache.detail"] = detail
        if params.get("fwd") == "miss" and "collapsed" not in params:
            attributes["mcpcache.not_stored_reason"] = detail.replace("-", "_")
    return attributes
