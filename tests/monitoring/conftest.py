"""A real Prometheus scraping a sidecar (and, where a test asks, the operator), and the
traffic whose metrics the tests then read back through Prometheus's query API."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import MCPError
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from peers.binaries import go_built
from peers.clients import call_body, call_headers, http_client, mcp_client
from peers.operator import OperatorProcess
from peers.prometheus import BIN_ENV, OPERATOR_JOB, SIDECAR_JOB, PrometheusServer, Traffic
from peers.serving import ServedApp, async_wait_until, free_port, past
from peers.sidecar import RunningSidecar
from peers.upstream import Upstream

SLOW_SECONDS = 0.3
"""How long the `timed` server's `wait` tool takes: inside the histogram's (0.25, 0.5] bucket."""


@pytest.fixture(scope="session")
def prometheus_bin() -> Path:
    """prometheus and promtool, built by tests/prometheus/build.sh."""
    return go_built(BIN_ENV, Path(__file__).parents[1] / "prometheus" / "build.sh", "Prometheus")


@pytest.fixture(scope="session")
def operator_crds(prometheus_bin: Path) -> Path:
    """The Prometheus Operator's CRDs that build.sh copied next to the binaries."""
    return prometheus_bin.parent / "crds"


@pytest.fixture(scope="session")
def prometheus(prometheus_bin: Path) -> Iterator[PrometheusServer]:
    server = PrometheusServer(prometheus_bin).start(jobs=(SIDECAR_JOB, OPERATOR_JOB))
    try:
        yield server
    finally:
        server.stop()


def _timed_server() -> MCPServer:
    server = MCPServer("timed")

    @server.tool()
    async def wait(seconds: float, key: str) -> str:
        """Answer after `seconds`: an upstream whose latency the test knows."""
        await anyio.sleep(seconds)
        return f"waited {seconds}s for {key}"

    @server.tool()
    def broken() -> str:
        """Always a tool error: answered, never stored."""
        raise ToolError("the backend is down")

    return server


@pytest.fixture(scope="session")
def timed_upstream() -> Iterator[ServedApp]:
    app = ServedApp(_timed_server().streamable_http_app()).start()
    yield app
    app.stop()


@pytest.fixture(scope="session")
def monitored_sidecar(
    tmp_path_factory: pytest.TempPathFactory,
    upstream: tuple[Upstream, ServedApp],
    timed_upstream: ServedApp,
    prometheus: PrometheusServer,
) -> Iterator[RunningSidecar]:
    """A sidecar of its own (its counters see only the `traffic` below), scraped by
    `prometheus`: `fast` and `timed` are cached, `down` has nothing listening, `burst`
    takes identical concurrent calls, `stale` answers from expired entries. Its shared
    tier's Redis has nothing listening either: the tier's lookups fail, its breaker
    opens, and the sidecar answers from memory and upstream all the same."""
    document = {
        "appId": "monitored",
        "sharedCache": {"url": f"redis://127.0.0.1:{free_port()}/0"},
        "servers": [
            {"name": "fast", "url": upstream[1].base_url + "/mcp", "cache": {"enabled": True}},
            {
                "name": "timed",
                "url": timed_upstream.base_url + "/mcp",
                "cache": {"enabled": True, "ttl": "10m"},
            },
            {"name": "burst", "url": upstream[1].base_url + "/mcp", "cache": {"enabled": True}},
            {
                "name": "stale",
                "url": upstream[1].base_url + "/mcp",
                "cache": {"enabled": True, "ttl": "10ms", "staleWhileRevalidate": "1h"},
            },
            {
                "name": "down",
                "url": f"http://127.0.0.1:{free_port()}/mcp",
                "timeout": "2s",
                "cache": {"enabled": True},
            },
        ],
    }
    sidecar = RunningSidecar(tmp_path_factory.mktemp("monitored") / "sidecar.yaml", document)
    sidecar.start()
    try:
        prometheus.scrape(SIDECAR_JOB, f"127.0.0.1:{sidecar.metrics_port}")
        yield sidecar
    finally:
        sidecar.stop()


async def collapsed_pair(sidecar: RunningSidecar, peer: Upstream) -> None:
    """Two identical calls at once to `burst`: the upstream holds the first until the
    second waits for its answer, which both then get (one miss, one collapsed)."""
    gate = uuid.uuid4().hex
    headers = call_headers("held")

    async def call(http: httpx.AsyncClient, request_id: str) -> httpx.Response:
        body = call_body(request_id, "held", {"gate": gate})
        return await http.post(sidecar.url("burst"), json=body, headers=headers)

    async with http_client(timeout=30) as http:
        calls = [asyncio.create_task(call(http, f"burst-{n}")) for n in range(2)]
        try:
            await async_wait_until(lambda: sidecar.waiting() >= 1, what="a follower")
        finally:
            peer.gate(gate).set()
        statuses = [r.headers["cache-status"] for r in await asyncio.gather(*calls)]
    follower = "mcpcache; fwd=miss; collapsed"
    assert follower in statuses
    (leader,) = [status for status in statuses if status != follower]
    assert leader.startswith("mcpcache; fwd=miss")  # "stored" unless its headers left first


async def stale_answer(sidecar: RunningSidecar) -> None:
    """A call to `stale` (stored for 10 ms), then the same call once that has passed:
    answered from the expired entry while it is fetched again."""
    headers = call_headers("echo")
    body = call_body("first", "echo", {"text": "stale"})
    async with http_client(timeout=30) as http:
        first = await http.post(sidecar.url("stale"), json=body, headers=headers)
        assert first.headers["cache-status"].startswith("mcpcache; fwd=miss")
        stored_at = time.monotonic()  # the entry was stored before this
        # What is waited for is time itself: the entry's 10 ms.
        await past(stored_at + 0.05)
        second = await http.post(sidecar.url("stale"), json=body, headers=headers)
    assert second.headers["cache-status"] == "mcpcache; hit; detail=stale-while-revalidate"


@pytest.fixture(scope="session")
async def traffic(
    monitored_sidecar: RunningSidecar,
    prometheus: PrometheusServer,
    upstream: tuple[Upstream, ServedApp],
) -> Traffic:
    """Drive known traffic through the sidecar once, with the official MCP client, and
    wait until Prometheus has scraped its end state."""
    sidecar = monitored_sidecar
    keys = ("a", "b", "c", "d")
    async with mcp_client(sidecar.url("timed")) as client:
        for _ in range(2):  # four misses that each take SLOW_SECONDS, then four hits
            for key in keys:
                await client.call_tool("wait", {"seconds": SLOW_SECONDS, "key": key})
        for _ in range(2):
            result = await client.call_tool("broken", {})
            assert result.is_error
    async with mcp_client(sidecar.url("fast")) as client:
        for _ in range(6):  # one miss, five hits
            await client.call_tool("echo", {"text": "monitored"})
    with pytest.raises(ExceptionGroup) as caught:
        async with mcp_client(sidecar.url("down")) as client:
            await client.call_tool("echo", {"text": "nobody home"})
    assert caught.group_contains(MCPError, match="unreachable", depth=None)
    await collapsed_pair(sidecar, upstream[0])
    await stale_answer(sidecar)
    expected = Traffic(
        hits={"timed": 4, "fast": 5},
        misses={"timed": 4 + 2, "fast": 1, "down": 1, "burst": 1, "stale": 1},
        stored=len(keys) + 1 + 2,
        not_stored_tool_error=2,
        unreachable=1,
        slow_seconds=SLOW_SECONDS,
        collapsed={"burst": 1},
        stale={"stale": 1},
    )
    total = sum(
        sum(counts.values())
        for counts in (expected.hits, expected.misses, expected.collapsed, expected.stale)
    )
    prometheus.wait_for(
        f'sum(mcpcache_requests_total{{job="{SIDECAR_JOB}", method="tools/call"}}) == {total}'
    )
    return expected


@pytest.fixture(scope="session")
def monitored_operator(operator: OperatorProcess, prometheus: PrometheusServer) -> OperatorProcess:
    """The suite's operator, scraped by `prometheus` too."""
    prometheus.scrape(OPERATOR_JOB, f"127.0.0.1:{operator.metrics_port}")
    return operator
