"""The sidecar's own OTLP encoding of a batch of spans is the request the exporter's
encoder makes, parsed back and compared field by field."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mcpcache.sidecar.app.otlp import OtlpBatch

CALLER = {
    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "tracestate": "vendor=opaque,other=x",
}


def finished(**resource: object) -> tuple[list[ReadableSpan], trace.Tracer, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"k8s.pod.name": "agent-1", **resource}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("mcpcache.sidecar")
    parent = TraceContextTextMapPropagator().extract(CALLER)
    server = tracer.start_span(
        "tools/call search",
        context=parent,
        kind=SpanKind.SERVER,
        attributes={
            "mcp.method.name": "tools/call",
            "jsonrpc.request.id": "",
            "mcpcache.age_seconds": 12,
            "mcpcache.stored": True,
            "mcpcache.collapsed_followers": 0,
            "weight": 0.5,
            "negative": -3,
            "accents": "réponse ✓",
            "long": "x" * 300,
        },
    )
    client = tracer.start_span(
        "upstream tools/call",
        context=trace.set_span_in_context(server),
        kind=SpanKind.CLIENT,
        attributes={"server.port": 8000, "mcpcache.stored": False},
    )
    client.set_status(Status(StatusCode.ERROR, "upstream closed"))
    client.end()
    server.set_status(Status(StatusCode.ERROR))
    server.end()
    alone = tracer.start_span("GET /mcp/docs", kind=SpanKind.SERVER)
    alone.end()
    return list(memory.get_finished_spans()), tracer, memory


def parsed(data: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(data)


def test_the_sidecars_spans_encode_to_the_exporters_request() -> None:
    spans, _, _ = finished()
    encoder = OtlpBatch()
    for batch in (spans, spans[:1], spans[1:], spans + spans):
        assert parsed(encoder.encode(batch)) == encode_spans(batch)


def test_spans_of_another_shape_are_encoded_by_the_exporters_encoder() -> None:
    spans, tracer, memory = finished(**{"service.names": ("a", "b")})
    with_event = tracer.start_span("with an event")
    with_event.add_event("retry")
    with_event.end()
    listed = tracer.start_span("listed", attributes={"tools": ("a", "b")})
    listed.end()
    *_, event_span, list_span = memory.get_finished_spans()
    encoder = OtlpBatch()
    for batch in (spans, [*spans, event_span], [list_span]):
        assert parsed(encoder.encode(batch)) == encode_spans(batch)


@pytest.mark.parametrize("value", [0, 1, 127, 128, 2**63 - 1, -1, -(2**63)])
def test_integers_of_every_width_encode_as_the_exporter_does(value: int) -> None:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.get_tracer("t").start_span("s", attributes={"n": value}).end()
    spans = list(memory.get_finished_spans())
    assert parsed(OtlpBatch().encode(spans)) == encode_spans(spans)
