"""List results and server/discover, cached per caller as the 2026-07-28 specification
describes, when the server's `metadataTTL` says so; `ttlMs` restated on every hit."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from peers.clients import MODERN, as_upstream_said, call_body, call_headers, mcp_client, post
from peers.serving import ServedApp, async_wait_until, served
from peers.sidecar import RunningSidecar, one_server
from peers.upstream import LIST_METHODS, Upstream

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(scope="module")
def listing() -> Iterator[tuple[Upstream, ServedApp]]:
    """An SDK server whose list and discovery results say `ttlMs: 60000`."""
    peer = Upstream(list_ttl_ms=60_000)
    app = ServedApp(peer.app(json_response=True)).start()
    yield peer, app
    app.stop()


def count(sidecar: RunningSidecar, method: str, outcome: str) -> float:
    return sidecar.sample("mcpcache_requests_total", server="s", method=method, outcome=outcome)


@pytest.mark.parametrize("method", LIST_METHODS)
async def test_a_list_is_cached_for_its_caller_when_metadata_ttl_is_set(
    make_sidecar, listing, method: str
) -> None:
    peer, app = listing
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="5m"))
    first = await sidecar.ask(method, "one")
    posts = peer.http["POST"]
    second = await sidecar.ask(method, "two")
    assert peer.http["POST"] == posts, "the second list came from the cache"
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert second.headers["cache-status"] == "mcpcache; hit"
    assert second.json()["id"] == "two"
    hit, miss = second.json()["result"], first.json()["result"]
    assert 0 < hit.pop("ttlMs") <= miss.pop("ttlMs")
    assert as_upstream_said(hit) == miss, "all but ttlMs as the upstream said it, cacheScope too"
    assert count(sidecar, method, "hit") == 1


async def test_the_sdk_client_lists_from_the_cache(make_sidecar, listing) -> None:
    peer, app = listing
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="5m"))
    async with mcp_client(sidecar.url("s")) as client:
        first = await client.list_tools()
        posts = peer.http["POST"]
        second = await client.list_tools()
        assert peer.http["POST"] == posts
    assert [t.name for t in second.tools] == [t.name for t in first.tools]
    assert count(sidecar, "tools/list", "hit") >= 1


async def test_each_page_and_each_caller_has_its_own_entry(make_sidecar, listing) -> None:
    peer, app = listing
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="5m"))
    posts = peer.http["POST"]
    for _ in range(2):
        for credential in ("Bearer alice", "Bearer bob"):
            await sidecar.ask("tools/list", credential=credential)
            await sidecar.ask("tools/list", credential=credential, cursor="page-2")
    assert peer.http["POST"] - posts == 4, "two pages for each of two callers, once each"
    assert count(sidecar, "tools/list", "hit") == 4


async def test_without_metadata_ttl_lists_are_forwarded_as_before(make_sidecar, listing) -> None:
    peer, app = listing
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    posts = peer.http["POST"]
    for request_id in (1, 2):
        response = await sidecar.ask("tools/list", request_id)
        assert response.headers["cache-status"] == "mcpcache; fwd=method"
    assert peer.http["POST"] - posts == 2


@pytest.mark.slow
async def test_the_shorter_of_metadata_ttl_and_ttl_ms_applies(make_sidecar, listing) -> None:
    _, app = listing  # ttlMs 60000
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="1s"))
    await sidecar.ask("resources/list")
    stored_at = time.monotonic()
    hit = await sidecar.ask("resources/list")
    assert hit.headers["cache-status"] == "mcpcache; hit"
    assert hit.json()["result"]["ttlMs"] <= 1000
    await async_wait_until(lambda: time.monotonic() > stored_at + 1.05, what="the clock")
    again = await sidecar.ask("resources/list")
    assert again.headers["cache-status"] == "mcpcache; fwd=miss; stored"


async def test_a_hit_restates_ttl_ms_as_the_freshness_left(make_sidecar, listing) -> None:
    _, app = listing  # resources/read says ttlMs 60000; the server's ttl is shorter
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="20s"))
    uri = f"doc://{uuid.uuid4().hex}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "resources/read",
        "params": {"uri": uri, "_meta": ENVELOPE},
    }
    headers = call_headers(uri, method="resources/read")
    miss = await post(sidecar.url("s"), body, headers)
    hit = await post(sidecar.url("s"), {**body, "id": 2}, headers)
    assert miss.json()["result"]["ttlMs"] == 60_000
    assert hit.headers["cache-status"] == "mcpcache; hit"
    assert 0 < hit.json()["result"]["ttlMs"] <= 20_000
    assert hit.json()["result"]["cacheScope"] == miss.json()["result"]["cacheScope"]
    assert hit.json()["result"]["contents"] == miss.json()["result"]["contents"]


async def test_a_tool_result_without_ttl_ms_gets_none_on_a_hit(make_sidecar, listing) -> None:
    _, app = listing
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    arguments = {"text": uuid.uuid4().hex}
    for request_id in (1, 2):
        response = await post(
            sidecar.url("s"), call_body(request_id, "echo", arguments), call_headers("echo")
        )
    assert response.headers["cache-status"] == "mcpcache; hit"
    assert "ttlMs" not in response.json()["result"]


@pytest.mark.parametrize(
    ("kind", "method"),
    [("prompts", "prompts/list"), ("tools", "tools/list"), ("resources", "resources/list")],
)
async def test_a_list_changed_notification_drops_that_lists_entries(
    make_sidecar, kind: str, method: str
) -> None:
    # Event streams this time: a notification needs a stream to travel in.
    with served(Upstream(list_ttl_ms=60_000).app()) as app:
        sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="5m"))
        await sidecar.ask(method)
        assert (await sidecar.ask(method, 2)).headers["cache-status"] == "mcpcache; hit"
        body = call_body(3, "announce", {"kind": kind, "scoped": True})
        await post(sidecar.url("s"), body, call_headers("announce"))
        again = await sidecar.ask(method, 4)
        assert again.headers["cache-status"].startswith("mcpcache; fwd=miss")
