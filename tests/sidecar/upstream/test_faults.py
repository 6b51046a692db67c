"""Upstream faults: the caller gets a clear error, nothing is cached, nothing is left over."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator

import httpx
import pytest

from peers.clients import call_body, call_headers, http_client, post, sse_messages
from peers.faulty import FaultyUpstream
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar


@pytest.fixture(scope="module")
def faulty() -> Iterator[FaultyUpstream]:
    upstream = FaultyUpstream().start()
    yield upstream
    upstream.stop()


@pytest.fixture
def sidecar(make_sidecar, faulty) -> RunningSidecar:
    faults = ("status-500", "reset-mid-stream", "truncated-event", "gated-json")
    return make_sidecar(
        {
            "servers": [
                {
                    "name": fault,
                    "url": faulty.url(fault)
                    + ("?bytes=3000000&gate=" + uuid.uuid4().hex if fault == "gated-json" else ""),
                    "cache": {"enabled": True, "maxSize": "64Ki"},
                }
                for fault in faults
            ]
        }
    )


def tasks(sidecar: RunningSidecar) -> int:
    return sidecar.tasks()


async def settled(sidecar: RunningSidecar, faulty: FaultyUpstream, baseline: int) -> None:
    """No task and no upstream socket outlives the call."""
    await async_wait_until(lambda: tasks(sidecar) <= baseline, what="tasks to finish")
    await async_wait_until(lambda: faulty.connections() == 0, what="upstream sockets to close")


async def post_echo(sidecar: RunningSidecar, server: str, request_id: int = 1) -> httpx.Response:
    return await post(sidecar.url(server), call_body(request_id, "echo", {}), call_headers("echo"))


async def test_an_upstream_5xx_reaches_the_caller_and_is_not_cached(sidecar, faulty) -> None:
    baseline = tasks(sidecar)
    for request_id in (1, 2):
        response = await post_echo(sidecar, "status-500", request_id)
        assert response.status_code == 500
        assert response.json()["error"]["message"] == "boom"
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=upstream-status"
    assert len(sidecar.sidecar.cache) == 0
    await settled(sidecar, faulty, baseline)


@pytest.mark.parametrize("fault", ["reset-mid-stream", "truncated-event"])
async def test_a_broken_event_stream_ends_with_a_json_rpc_error(sidecar, faulty, fault) -> None:
    baseline = tasks(sidecar)
    body = call_body(7, "echo", {})
    received = b""
    async with (
        http_client(timeout=10) as http,
        http.stream("POST", sidecar.url(fault), json=body, headers=call_headers("echo")) as r,
    ):
        assert r.status_code == 200
        # After a reset the transfer breaks too (test_broken_answers): read what came.
        with contextlib.suppress(httpx.ReadError, httpx.RemoteProtocolError):
            async for chunk in r.aiter_bytes():
                received += chunk
    media_type = {"content-type": r.headers["content-type"]}
    events = httpx.Response(200, headers=media_type, content=received)
    last = sse_messages(events)[-1]
    assert last["id"] == 7
    assert last["error"]["code"] == -32001
    assert f"MCP server '{fault}'" in last["error"]["message"]
    assert len(sidecar.sidecar.cache) == 0
    assert sidecar.sample("mcpcache_not_stored_total", server=fault, reason="incomplete") == 1
    await settled(sidecar, faulty, baseline)


async def open_gated(
    sidecar: RunningSidecar, faulty: FaultyUpstream, http: httpx.AsyncClient
) -> tuple[threading.Event, httpx.Response]:
    """Start a call whose upstream sends half its body, then waits for the returned gate."""
    url = sidecar.sidecar.config().server("gated-json").url
    gate = faulty.gate(url.rsplit("gate=", 1)[1])
    request = http.build_request(
        "POST",
        sidecar.url("gated-json"),
        json=call_body(1, "echo", {}),
        headers=call_headers("echo"),
    )
    return gate, await http.send(request, stream=True)


async def test_a_large_slow_body_is_relayed_as_it_arrives_not_buffered(sidecar, faulty) -> None:
    """In-flight memory stays bounded: past maxSize the body streams through."""
    baseline = tasks(sidecar)
    # The upstream sends the second half only once the test has read the first MB: a
    # relay that held the body back would make this read time out.
    async with http_client(timeout=10) as http:
        gate, response = await open_gated(sidecar, faulty, http)
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=too-large"
        received = 0
        async for chunk in response.aiter_raw():
            if received < 1_000_000 <= received + len(chunk):
                assert not gate.is_set(), "a megabyte arrived while the upstream held the rest"
                gate.set()
            received += len(chunk)
        await response.aclose()
    assert received == 3_000_000
    assert len(sidecar.sidecar.cache) == 0
    await settled(sidecar, faulty, baseline)


async def test_a_client_that_goes_away_releases_the_upstream(sidecar, faulty) -> None:
    baseline = tasks(sidecar)
    async with http_client(timeout=30) as http:
        gate, response = await open_gated(sidecar, faulty, http)
        async for _ in response.aiter_raw():
            break
        await response.aclose()
    await async_wait_until(lambda: faulty.connections() == 0, what="the upstream socket to close")
    gate.set()
    await settled(sidecar, faulty, baseline)
