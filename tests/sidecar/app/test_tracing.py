"""With tracing on, every MCP request through the sidecar is a span of its caller's trace,
hits included, with the cache's outcome on it; a miss's upstream call is a child span
whose context reaches the upstream. Spans go to a real OpenTelemetry Collector (built from
its Go modules, tests/otelcol) that writes what it received to a file read back here."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from peers.binaries import go_built
from peers.clients import MODERN, call_body, call_headers, mcp_client, post, text_of, unique
from peers.otelcol import BIN_ENV, CLIENT, SERVER, Collector, ExportedSpan
from peers.serving import ServedApp, wait_until
from peers.sidecar import SidecarProcess, one_server
from peers.upstream import Upstream

FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
"""Export every 50 ms, so that a test waits for spans a few polls, not the default 5 s."""


class HeaderLog:
    """The SDK server's app, with every request's headers kept as it received them."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.headers: list[dict[str, str]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self.app(scope, receive, send)

    def traceparents(self) -> list[str]:
        return [h["traceparent"] for h in self.headers if "traceparent" in h]


@pytest.fixture(scope="session")
def otelcol_bin() -> Path:
    """The collector, built by tests/otelcol/build.sh."""
    build = Path(__file__).parents[2] / "otelcol" / "build.sh"
    return go_built(BIN_ENV, build, "the OpenTelemetry Collector")


@pytest.fixture(scope="module")
def collector(otelcol_bin: Path) -> Iterator[Collector]:
    running = Collector(otelcol_bin).start()
    yield running
    running.stop()
    if out := os.environ.get("MCPCACHE_SPANS_OUT"):  # for docs/operations/trace_waterfall.py
        shutil.copyfile(running.spans_path, out)
    running.remove()


@pytest.fixture(scope="module")
def traced_upstream() -> Iterator[tuple[Upstream, HeaderLog, ServedApp]]:
    peer = Upstream()
    log = HeaderLog(peer.app(json_response=True))
    app = ServedApp(log).start()
    yield peer, log, app
    app.stop()


@pytest.fixture(scope="module")
def traced_sidecar(
    tmp_path_factory: pytest.TempPathFactory,
    collector: Collector,
    traced_upstream: tuple[Upstream, HeaderLog, ServedApp],
) -> Iterator[SidecarProcess]:
    document = one_server(traced_upstream[2].base_url + "/mcp")
    document["tracing"] = {"enabled": True, "endpoint": collector.endpoint}
    process = SidecarProcess(tmp_path_factory.mktemp("traced") / "sidecar.yaml", document)
    process.start(FAST_EXPORT)
    yield process
    process.stop()


def new_trace() -> tuple[str, str, str]:
    """A caller's trace id, its span id and the `traceparent` naming them (sampled)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def calls_of(spans: list[ExportedSpan]) -> list[ExportedSpan]:
    """The sidecar's server spans of `tools/call`, in the order they started."""
    found = [s for s in spans if s.kind == SERVER and s.attributes.get("mcp.method.name")]
    calls = [s for s in found if s.attributes["mcp.method.name"] == "tools/call"]
    return sorted(calls, key=lambda s: s.start_ns)


async def test_a_miss_and_a_hit_from_the_sdk_client_are_spans_of_the_callers_trace(
    traced_sidecar: SidecarProcess,
    collector: Collector,
    traced_upstream: tuple[Upstream, HeaderLog, ServedApp],
) -> None:
    _, log, _ = traced_upstream
    trace_id, caller_span, traceparent = new_trace()
    text = unique()
    async with mcp_client(traced_sidecar.url("s"), headers={"traceparent": traceparent}) as client:
        first = await client.call_tool("echo", {"text": text})
        second = await client.call_tool("echo", {"text": text})
    assert text_of(first) == text_of(second), "the second answer came from the cache"

    spans = wait_until(
        lambda: len(calls_of(collector.trace(trace_id))) >= 2 and collector.trace(trace_id),
        what="the two calls' spans at the collector",
    )
    miss, hit = calls_of(spans)
    for span in (miss, hit):
        assert span.parent_id == caller_span, "each continues the caller's trace"
        assert span.name == "tools/call echo"
        assert span.service == "mcpcache-sidecar"
        assert span.attributes["gen_ai.tool.name"] == "echo"
        assert span.attributes["mcp.protocol.version"] == MODERN
        assert span.attributes["jsonrpc.request.id"]
        assert span.attributes["http.response.status_code"] == 200
    assert miss.attributes["mcpcache.cache.outcome"] == "miss"
    assert miss.attributes["mcpcache.stored"] is True
    assert miss.attributes["mcpcache.cache_status"] == "mcpcache; fwd=miss; stored"
    assert hit.attributes["mcpcache.cache.outcome"] == "hit"
    assert hit.attributes["mcpcache.cache.tier"] == "memory"
    assert hit.attributes["mcpcache.age_seconds"] in (0, 1)

    upstream_calls = [s for s in spans if s.kind == CLIENT and s.parent_id == miss.span_id]
    assert len(upstream_calls) == 1, "the miss went upstream once, the hit never"
    (upstream_call,) = upstream_calls
    assert upstream_call.attributes["server.address"] == "127.0.0.1"
    assert upstream_call.attributes["http.response.status_code"] == 200
    assert not [s for s in spans if s.kind == CLIENT and s.parent_id == hit.span_id]
    expected = f"00-{trace_id}-{upstream_call.span_id}-01"
    assert expected in log.traceparents(), "the upstream was called as the span's child"
    assert traceparent not in log.traceparents(), "never the caller's own span as the parent"


async def test_a_traceparent_in_params_meta_is_followed_when_no_header_carries_one(
    traced_sidecar: SidecarProcess, collector: Collector
) -> None:
    trace_id, caller_span, traceparent = new_trace()
    body = call_body(1, "echo", {"text": unique()}, traceparent=traceparent)
    response = await post(traced_sidecar.url("s"), body, call_headers("echo"), seconds=10)
    assert response.status_code == 200

    spans = wait_until(
        lambda: calls_of(collector.trace(trace_id)), what="the call's span at the collector"
    )
    assert spans[0].parent_id == caller_span


async def test_no_argument_result_or_credential_reaches_a_span(
    traced_sidecar: SidecarProcess, collector: Collector
) -> None:
    trace_id, _, traceparent = new_trace()
    secret, token = unique(), f"Bearer {unique()}"
    headers = {"traceparent": traceparent, "authorization": token, "x-api-key": unique()}
    async with mcp_client(traced_sidecar.url("s"), headers=headers) as client:
        answers = [await client.call_tool("echo", {"text": secret}) for _ in range(2)]
        await client.read_resource(f"doc://{secret}")
    wait_until(lambda: len(calls_of(collector.trace(trace_id))) >= 2, what="the calls' spans")
    wait_until(
        lambda: any(
            s.attributes.get("mcp.method.name") == "resources/read"
            for s in collector.trace(trace_id)
        ),
        what="the read's span",
    )
    exported = collector.spans_path.read_text()
    for value in (secret, token.split()[1], headers["x-api-key"], text_of(answers[0])):
        assert value not in exported


async def test_an_unreachable_collector_never_delays_or_fails_a_call_and_drops_are_counted(
    tmp_path: Path, traced_upstream: tuple[Upstream, HeaderLog, ServedApp]
) -> None:
    # A collector that takes connections and never answers: each export waits for its
    # whole timeout (30 s), the longest a collector can hold the sidecar's exporter.
    with socket.socket() as black_hole:
        black_hole.bind(("127.0.0.1", 0))
        black_hole.listen(64)
        endpoint = f"http://127.0.0.1:{black_hole.getsockname()[1]}"
        document = one_server(traced_upstream[2].base_url + "/mcp")
        document["tracing"] = {"enabled": True, "endpoint": endpoint}
        environ = FAST_EXPORT | {
            "OTEL_BSP_MAX_QUEUE_SIZE": "4",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "2",
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "30",
        }
        process = SidecarProcess(tmp_path / "sidecar.yaml", document).start(environ)
        try:
            texts = [unique() for _ in range(5)]
            # Every answer within a 3 s deadline while the exporter waits 30 s.
            async with mcp_client(process.url("s"), read_timeout_seconds=3) as client:
                for text in texts:
                    for _ in range(4):  # a miss, then three hits
                        result = await client.call_tool("echo", {"text": text})
                        assert text_of(result).startswith(text)
            full = wait_until(
                lambda: process.sample("mcpcache_trace_spans_dropped_total", reason="queue_full"),
                what="spans dropped from the full queue to be counted",
            )
            # 25 spans at least (20 calls, 5 upstream calls); at most 4 queued and 2 in
            # the export that hangs: the rest were dropped, and counted.
            assert full >= 25 - 4 - 2
        finally:
            process.stop()


SDK = ("opentelemetry.sdk", "opentelemetry.exporter", "google.protobuf", "requests")
"""What tracing loads (FastAPI, which the admin endpoints load, imports the OpenTelemetry
API whatever the sidecar does: the API alone does nothing without an SDK)."""


def test_a_sidecar_without_tracing_never_loads_the_opentelemetry_sdk(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text("servers: [{name: s, url: 'http://127.0.0.1:9/mcp'}]\n")
    script = (
        "import sys\n"
        f"SDK = {SDK!r}\n"
        "from mcpcache.sidecar.app.assembly import Sidecar\n"
        "from mcpcache.sidecar.app.reload import ConfigSource\n"
        "from pathlib import Path\n"
        f"sidecar = Sidecar(ConfigSource(Path({str(config)!r}), environ={{}}))\n"
        "sidecar.proxy_app()\n"
        "print(sorted(m for m in sys.modules if m.startswith(SDK)))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
