"""With `metadataTTL` set, the six results that carry a cache hint and say `ttlMs: 0` (or
nothing) are stored, and leave with the freshness the operator allowed: on the miss the
entry's whole life, on a hit what is left of it; never a wider `cacheScope`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from peers.clients import answer, introduce, mcp_client, unique
from peers.serving import ServedApp
from peers.sidecar import one_server
from peers.upstream import Upstream


@pytest.fixture(scope="module", params=["json", "sse"])
def zero_hints(request) -> Iterator[tuple[Upstream, ServedApp]]:
    """An SDK server whose every cache hint says `ttlMs: 0` (the SDK's default for
    lists, and here for `resources/read` too), answering as JSON or as event streams."""
    peer = Upstream(resource_ttl_ms=0)
    app = ServedApp(peer.app(json_response=request.param == "json")).start()
    yield peer, app
    app.stop()


async def test_a_list_saying_ttl_ms_zero_leaves_with_the_operators_freshness(
    make_sidecar, zero_hints
) -> None:
    peer, app = zero_hints
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="5m"))
    miss = await sidecar.ask("tools/list", "one")
    posts = peer.http["POST"]
    hit = await sidecar.ask("tools/list", "two")
    assert peer.http["POST"] == posts, "stored: the operator's word stands for the 0"
    assert miss.headers["cache-status"].startswith("mcpcache; fwd=miss")
    assert hit.headers["cache-status"] == "mcpcache; hit"
    missed, hit_result = answer(miss)["result"], answer(hit)["result"]
    assert missed["ttlMs"] == 300_000, "the miss says the entry's whole life"
    assert 0 < hit_result["ttlMs"] <= 300_000, "a hit says what is left of it"
    assert hit_result.get("cacheScope") == missed.get("cacheScope"), "the scope as it was"
    assert answer(miss)["id"] == "one"
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="ttl_zero") == 0


async def test_a_resource_saying_ttl_ms_zero_leaves_with_the_entrys_life_not_longer(
    make_sidecar, zero_hints
) -> None:
    _, app = zero_hints
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="20s", metadataTTL="5m"))
    uri = f"doc://{unique()}"
    miss = await sidecar.ask("resources/read", 1, uri=uri)
    hit = await sidecar.ask("resources/read", 2, uri=uri)
    assert answer(miss)["result"]["ttlMs"] == 20_000, "the resource's entry lives 20s"
    assert 0 < answer(hit)["result"]["ttlMs"] <= 20_000
    assert answer(hit)["result"]["contents"] == answer(miss)["result"]["contents"]


async def test_without_metadata_ttl_a_zero_hint_is_honoured_and_not_stored(
    make_sidecar, zero_hints
) -> None:
    _, app = zero_hints
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    uri = f"doc://{unique()}"
    for request_id in (1, 2):
        response = await sidecar.ask("resources/read", request_id, uri=uri)
        assert answer(response)["result"]["ttlMs"] == 0
    assert "detail=ttl-zero" in response.headers["cache-status"]
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="ttl_zero") == 2


async def test_the_sdk_client_reads_the_rewritten_hint_on_miss_and_hit(
    make_sidecar, zero_hints
) -> None:
    _, app = zero_hints
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="10m"))
    async with mcp_client(sidecar.url("s")) as client:
        first = await client.list_prompts()
        second = await client.list_prompts()
    assert first.ttl_ms == 600_000
    assert second.ttl_ms is not None
    assert 0 < second.ttl_ms <= 600_000
    assert second.prompts == first.prompts


async def test_a_rewritten_result_kept_per_caller_says_it_is_private(
    make_sidecar, zero_hints
) -> None:
    # An absent cacheScope reads as public: a client or shared cache downstream must
    # not share for minutes what the sidecar itself keeps for one caller.
    _, app = zero_hints
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="5m"))
    uri = f"doc://{unique()}"
    for method, params in (("tools/list", {}), ("resources/read", {"uri": uri})):
        miss = await sidecar.ask(method, 1, **params)
        hit = await sidecar.ask(method, 2, **params)
        assert hit.headers["cache-status"] == "mcpcache; hit"
        for response in (miss, hit):
            result = answer(response)["result"]
            assert result["ttlMs"] > 0
            assert result["cacheScope"] == "private", method
    async with mcp_client(sidecar.url("s")) as client:
        listed = await client.list_prompts()
    assert listed.cache_scope == "private"


@pytest.fixture(scope="module")
def public_zero_hints() -> Iterator[tuple[Upstream, ServedApp]]:
    """An SDK server whose `resources/read` results say `public` with `ttlMs: 0`."""
    peer = Upstream(resource_ttl_ms=0, resource_scope="public")
    app = ServedApp(peer.app(json_response=True)).start()
    yield peer, app
    app.stop()


async def test_a_rewritten_result_kept_for_every_caller_stays_public(
    make_sidecar, public_zero_hints
) -> None:
    _, app = public_zero_hints
    server = one_server(app.base_url + "/mcp", metadataTTL="5m", trustPublicHints=True)
    sidecar = make_sidecar(server)
    uri = f"doc://{unique()}"
    miss = await sidecar.ask("resources/read", 1, "Bearer alice", uri=uri)
    await introduce(sidecar.url("s"), "Bearer bob", uri=f"doc://{unique()}")
    hit = await sidecar.ask("resources/read", 2, "Bearer bob", uri=uri)
    assert hit.headers["cache-status"] == "mcpcache; hit; detail=public"
    for response in (miss, hit):
        result = answer(response)["result"]
        assert (result["cacheScope"], result["ttlMs"] > 0) == ("public", True)


async def test_a_rewritten_result_that_said_no_scope_leaves_saying_private(
    make_sidecar, echo_upstream
) -> None:
    # The raw echo peer answers a listing with neither `ttlMs` nor `cacheScope` (an
    # older server), naming who asked: the rewrite must not make it read as public.
    _, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", metadataTTL="5m"))
    cursor = unique()
    miss = await sidecar.ask("tools/list", 1, "Bearer alice", cursor=cursor)
    hit = await sidecar.ask("tools/list", 2, "Bearer alice", cursor=cursor)
    assert hit.headers["cache-status"] == "mcpcache; hit"
    for response in (miss, hit):
        result = answer(response)["result"]
        assert (result["cacheScope"], result["ttlMs"] > 0) == ("private", True)
