"""Per-tool rules through the sidecar, against the SDK's real server: TTLs, arguments
left out of the key, read-only tools only, and writes that invalidate reads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from mcp import Client

from peers.clients import MODERN, call_body, call_headers, mcp_client, post, text_of, unique
from peers.serving import ServedApp, async_wait_until
from peers.sidecar import RunningSidecar, one_server
from peers.upstream import Upstream

ALICE = {"authorization": "Bearer alice"}
BOB = {"authorization": "Bearer bob"}


async def call(
    sidecar: RunningSidecar, tool: str, arguments: dict[str, Any], **headers: str
) -> httpx.Response:
    """One raw tools/call, so that its Cache-Status can be read."""
    return await post(
        sidecar.url("docs"), call_body(1, tool, arguments), call_headers(tool, **headers)
    )


async def list_tools(sidecar: RunningSidecar) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = call_headers("", method="tools/list")
    del headers["mcp-name"]
    return await post(sidecar.url("docs"), body, headers)


@contextlib.asynccontextmanager
async def alice_and_bob(sidecar: RunningSidecar) -> AsyncIterator[tuple[Client, Client]]:
    """Two end users of one app: same sidecar, different credentials."""
    async with (
        mcp_client(sidecar.url("docs"), headers=ALICE) as alice,
        mcp_client(sidecar.url("docs"), headers=BOB) as bob,
    ):
        yield alice, bob


async def read_doc(clients: tuple[Client, ...], doc: str) -> list[str]:
    return [text_of(await client.call_tool("get_doc", {"name": doc})) for client in clients]


@pytest.mark.parametrize("kind", ["sse", "json"])
async def test_a_write_invalidates_a_cached_read_for_every_caller(
    make_sidecar, upstream, json_upstream, kind: str
) -> None:
    peer, app = upstream if kind == "sse" else json_upstream
    rules = [{"name": "update_*", "invalidates": ["get_*"]}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    doc = unique()
    async with alice_and_bob(sidecar) as (alice, bob):
        await alice.call_tool("update_doc", {"name": doc, "text": "first"})
        before = await read_doc((alice, bob), doc)
        count = text_of(await alice.call_tool("count_docs", {}))
        reads = peer.calls["get_doc"]
        assert await read_doc((alice, bob), doc) == before
        assert peer.calls["get_doc"] == reads, "both callers' reads are cached"

        await bob.call_tool("update_doc", {"name": doc, "text": "second"})

        after = await read_doc((alice, bob), doc)
        assert after[0].startswith("second for Bearer alice")
        assert after[1].startswith("second for Bearer bob")
        assert peer.calls["get_doc"] == reads + 2
        assert text_of(await alice.call_tool("count_docs", {})) == count, "not matched: kept"
    assert sidecar.sample("mcpcache_invalidations_total", server="docs", cause="write") == 2
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="purged") >= 2


async def test_a_write_that_fails_invalidates_nothing(make_sidecar, upstream) -> None:
    peer, app = upstream
    rules = [{"name": "update_doc", "invalidates": ["*"]}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    doc = unique()
    first = await call(sidecar, "get_doc", {"name": doc})
    refused = await call(sidecar, "update_doc", {"name": doc, "text": ""})
    assert "refused" in refused.text
    assert refused.headers["cache-status"] == "mcpcache; fwd=bypass; detail=tool-rule"
    second = await call(sidecar, "get_doc", {"name": doc})
    assert second.headers["cache-status"] == "mcpcache; hit"
    assert first.headers["cache-status"].startswith("mcpcache; fwd=miss")
    assert sidecar.sample("mcpcache_invalidations_total", server="docs", cause="write") == 0
    assert peer.calls["update_doc"] >= 1


async def test_ignored_arguments_share_an_entry_and_nothing_else_does(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    rules = [{"name": "search", "ignoreArguments": ["requestId"]}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    q = unique()
    async with alice_and_bob(sidecar) as (alice, bob):
        calls = peer.calls["search"]
        one = text_of(await alice.call_tool("search", {"q": q, "requestId": "r1"}))
        two = text_of(await alice.call_tool("search", {"q": q, "requestId": "r2"}))
        assert one == two
        assert peer.calls["search"] == calls + 1
        other_query = text_of(await alice.call_tool("search", {"q": q + "x", "requestId": "r3"}))
        other_user = text_of(await bob.call_tool("search", {"q": q, "requestId": "r1"}))
    assert peer.calls["search"] == calls + 3
    assert other_query.startswith(f"results for {q}x for Bearer alice")
    assert other_user.startswith(f"results for {q} for Bearer bob")


async def test_only_read_only_tools_caches_exactly_the_read_only_tools(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    rules = [{"name": "echo", "enabled": True}]
    document = one_server(app.base_url + "/mcp", name="docs", onlyReadOnlyTools=True, tools=rules)
    sidecar = make_sidecar(document)
    doc = unique()

    async def twice(tool: str, arguments: dict[str, Any]) -> list[str]:
        statuses = []
        for _ in range(2):
            status = (await call(sidecar, tool, arguments)).headers["cache-status"]
            statuses.append(status.removesuffix("; stored"))
        return statuses

    not_read_only = "mcpcache; fwd=bypass; detail=not-read-only"
    assert await twice("get_doc", {"name": doc}) == [not_read_only] * 2, "nothing known yet"
    listing = await list_tools(sidecar)
    assert listing.status_code == 200
    assert await twice("get_doc", {"name": doc}) == ["mcpcache; fwd=miss", "mcpcache; hit"]
    assert await twice("count_docs", {}) == ["mcpcache; fwd=miss", "mcpcache; hit"]
    writer = "mcpcache; fwd=bypass; detail=declared-writer"  # readOnlyHint: false
    assert await twice("update_doc", {"name": doc, "text": "t"}) == [writer] * 2
    assert await twice("whoami", {}) == [not_read_only] * 2, "no readOnlyHint: not cached"
    assert (await twice("echo", {"text": doc}))[1] == "mcpcache; hit", "enabled: true overrides"
    assert peer.calls["update_doc"] >= 2

    changed = await call(sidecar, "announce", {"kind": "tools"})
    assert "announced" in changed.text
    assert await twice("get_doc", {"name": doc}) == [not_read_only] * 2, "tools changed: unknown"


async def test_a_rule_ttl_applies_to_its_tools_only(make_sidecar, upstream) -> None:
    _, app = upstream
    rules = [{"name": "echo", "ttl": "200ms"}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", ttl="60s", tools=rules))
    text = unique()
    assert (await call(sidecar, "echo", {"text": text})).headers["cache-status"].endswith("stored")
    await call(sidecar, "count_docs", {})
    statuses: list[str] = []

    async def expired() -> bool:
        statuses.append((await call(sidecar, "echo", {"text": text})).headers["cache-status"])
        return statuses[-1] != "mcpcache; hit"

    deadline = asyncio.get_running_loop().time() + 10
    while not await expired():
        assert asyncio.get_running_loop().time() < deadline, "echo's 200ms entry never expired"
    assert (await call(sidecar, "count_docs", {})).headers["cache-status"] == "mcpcache; hit"


async def test_resource_notifications_in_a_stream_drop_the_entries_they_name(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs"))
    one, two = f"doc://{unique()}", f"doc://{unique()}"
    async with mcp_client(sidecar.url("docs")) as client:
        for uri in (one, two):
            await client.read_resource(uri)
        text = unique()
        await client.call_tool("echo", {"text": text})
        reads = peer.calls["doc"]

        await client.call_tool("announce", {"kind": "resource", "uri": one})
        await client.read_resource(two)
        assert peer.calls["doc"] == reads, "another resource's entry stays"
        await client.read_resource(one)
        assert peer.calls["doc"] == reads + 1

        echoes = peer.calls["echo"]
        await client.call_tool("announce", {"kind": "resources"})
        await client.read_resource(two)
        await client.call_tool("echo", {"text": text})
        assert peer.calls["doc"] == reads + 2
        assert peer.calls["echo"] == echoes, "tool entries stay when resources change"

        await client.call_tool("announce", {"kind": "tools"})
        await client.call_tool("echo", {"text": text})
        assert peer.calls["echo"] == echoes + 1
    assert sidecar.sample("mcpcache_invalidations_total", server="docs", cause="notification") == 3


async def test_a_notification_on_the_sessions_get_stream_drops_entries(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs"))
    uri = f"doc://{unique()}"

    def noticed() -> float:
        return sidecar.sample("mcpcache_invalidations_total", server="docs", cause="notification")

    async with mcp_client(sidecar.url("docs"), mode="legacy") as client:
        await client.read_resource(uri)
        reads = peer.calls["doc"]
        # The client opens its GET stream in the background: announce until it is there.
        deadline = asyncio.get_running_loop().time() + 10
        while noticed() == 0:
            assert asyncio.get_running_loop().time() < deadline, "no notification arrived"
            arguments = {"kind": "resource", "uri": uri, "scoped": False}
            await client.call_tool("announce", arguments)
            with contextlib.suppress(TimeoutError):
                await async_wait_until(lambda: noticed() > 0, 0.5, "the notification")
        await client.read_resource(uri)
    assert peer.calls["doc"] == reads + 1


async def test_cached_tool_lists_teach_read_only_tools_and_go_when_tools_change(
    make_sidecar,
) -> None:
    peer = Upstream(list_ttl_ms=60_000)
    app = ServedApp(peer.app()).start()
    try:
        document = one_server(
            app.base_url + "/mcp", name="docs", metadataTTL="5m", onlyReadOnlyTools=True
        )
        sidecar = make_sidecar(document)
        listed = await list_tools(sidecar)
        assert listed.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert (await list_tools(sidecar)).headers["cache-status"] == "mcpcache; hit"
        doc = unique()
        statuses = [(await call(sidecar, "get_doc", {"name": doc})).headers["cache-status"]]
        statuses.append((await call(sidecar, "get_doc", {"name": doc})).headers["cache-status"])
        assert statuses == ["mcpcache; fwd=miss; stored", "mcpcache; hit"], "learned from a list"

        await call(sidecar, "announce", {"kind": "tools"})
        assert (await list_tools(sidecar)).headers["cache-status"].startswith("mcpcache; fwd=miss")
        again = await call(sidecar, "get_doc", {"name": doc})
        assert again.headers["cache-status"].startswith("mcpcache; fwd=miss"), "entries went too"
    finally:
        app.stop()
