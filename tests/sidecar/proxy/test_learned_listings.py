"""What a `tools/list` answered from the cache may teach: a caller's own listing teaches
that caller; a listing for every caller, or one of a server at an old URL, teaches no one.
Against raw upstreams whose listings say exactly what each test needs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from peers.asgi import read_body, send_json
from peers.clients import ask, call_body, call_headers, post
from peers.serving import ServedApp, async_wait_until
from peers.sidecar import one_server


class Lister:
    """One tool `t`: listed as `listing(who)` says (`who`: the caller's Authorization),
    every call counted and answered with its count."""

    def __init__(self, listing: Callable[[str], dict[str, Any]]) -> None:
        self.listing = listing
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        request = json.loads(body)
        if request["method"] == "tools/list" and request.get("params", {}).get("cursor"):
            result = {"tools": []}  # a page with no tools: teaches nothing
        elif request["method"] == "tools/list":
            result = self.listing(headers.get("authorization", "anonymous"))
        else:
            self.calls += 1
            result = {"content": [{"type": "text", "text": f"call #{self.calls}"}]}
        await send_json(send, {"jsonrpc": "2.0", "id": request["id"], "result": result})


@pytest.fixture
def serve() -> Iterator[Callable[[Lister], ServedApp]]:
    apps: list[ServedApp] = []

    def start(peer: Lister) -> ServedApp:
        apps.append(ServedApp(peer, "off").start())
        return apps[-1]

    yield start
    for app in apps:
        app.stop()


async def call_twice(url: str, authorization: str, arguments: list[dict[str, Any]]) -> None:
    for n, given in enumerate(arguments):
        headers = call_headers("t", authorization=authorization)
        response = await post(url, call_body(n, "t", given), headers)
        assert response.status_code == 200, response.text


async def test_a_listing_for_every_caller_teaches_no_defaults_to_those_it_answers(
    make_sidecar, serve
) -> None:
    # The default names whoever listed, and the server marks the listing public.
    def listing(who: str) -> dict[str, Any]:
        schema = {"type": "object", "properties": {"v": {"type": "string", "default": who}}}
        return {"tools": [{"name": "t", "inputSchema": schema}], "cacheScope": "public"}

    peer = Lister(listing)
    app = serve(peer)
    cache = {"metadataTTL": "5m", "fillSchemaDefaults": True, "trustPublicHints": True}
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", **cache))
    first = await ask(sidecar.url("s"), "tools/list", 1, "Bearer alice")
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    # An entry for every caller answers a credential the upstream accepted for the same
    # method: Bob's, on a page of his own that lists no tool.
    page = await ask(sidecar.url("s"), "tools/list", 9, "Bearer bob", cursor="empty")
    assert page.json()["result"]["tools"] == []
    seen = await ask(sidecar.url("s"), "tools/list", 2, "Bearer bob")
    assert seen.headers["cache-status"] == "mcpcache; hit; detail=public"
    await call_twice(sidecar.url("s"), "Bearer bob", [{"v": "Bearer alice"}, {}])
    assert peer.calls == 2, "Alice's default never fills Bob's call"


async def test_a_server_at_a_new_url_is_not_taught_by_the_old_servers_listing(
    make_sidecar, serve
) -> None:
    def listing(read_only: bool) -> Callable[[str], dict[str, Any]]:
        tool = {"name": "t", "inputSchema": {"type": "object"}}
        return lambda _: {"tools": [{**tool, "annotations": {"readOnlyHint": read_only}}]}

    old, new = Lister(listing(True)), Lister(listing(False))
    old_app, new_app = serve(old), serve(new)
    cache = {"metadataTTL": "5m", "onlyReadOnlyTools": True, "ttl": "60s"}
    sidecar = make_sidecar(one_server(old_app.base_url + "/mcp", **cache))
    listed = await ask(sidecar.url("s"), "tools/list", 1, "Bearer alice")
    assert listed.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    sidecar.write_config(one_server(new_app.base_url + "/mcp", **cache))
    await async_wait_until(
        lambda: sidecar.sample("mcpcache_config_reloads_total", result="applied") == 1,
        what="the reload",
    )
    again = await ask(sidecar.url("s"), "tools/list", 2, "Bearer alice")
    assert again.headers["cache-status"].startswith("mcpcache; fwd=miss"), "the old one is gone"
    await call_twice(sidecar.url("s"), "Bearer bob", [{}, {}])
    assert new.calls == 2, "t of the new server is not read-only: never cached"
