"""Answers that must reach the caller but never be stored, each with its reason."""

from __future__ import annotations

import json

import httpx
import pytest
from mcp.client.session import ClientRequestContext
from mcp_types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    TextContent,
)

from peers.clients import LEGACY, MODERN, call_body, call_headers, mcp_client, post, unique
from peers.serving import async_wait_until, served
from peers.sidecar import one_server
from peers.upstream import Upstream


async def post_call(sidecar, server: str, body: dict, name: str) -> httpx.Response:
    return await post(sidecar.url(server), body, call_headers(name))


async def test_tool_errors_are_not_stored(sidecar, json_upstream) -> None:
    peer, _ = json_upstream
    before = peer.calls["broken"]
    for request_id in (1, 2):
        response = await post_call(sidecar, "json", call_body(request_id, "broken", {}), "broken")
        assert response.json()["result"]["isError"] is True
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=tool-error"
    assert peer.calls["broken"] == before + 2
    assert sidecar.sample("mcpcache_not_stored_total", server="json", reason="tool_error") == 2


async def test_json_rpc_errors_are_not_stored(sidecar, json_upstream) -> None:
    for request_id in (1, 2):
        response = await post_call(
            sidecar, "json", call_body(request_id, "no-such-tool", {}), "no-such-tool"
        )
        assert "error" in response.json() or response.json()["result"].get("isError")
        assert "stored" not in response.headers["cache-status"].split("; ")
    assert (
        sidecar.sample("mcpcache_requests_total", server="json", method="tools/call", outcome="hit")
        == 0
    )


async def test_a_result_larger_than_max_size_reaches_the_client_whole_but_is_not_stored(
    make_sidecar, json_upstream
) -> None:
    _, app = json_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", maxSize="4Ki"))
    for request_id in (1, 2):
        response = await post_call(
            sidecar, "s", call_body(request_id, "blob", {"size": 10_000}), "blob"
        )
        assert response.status_code == 200
        assert len(response.json()["result"]["content"][0]["text"]) == 10_000
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=too-large"
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="too_large") == 2
    small = await post_call(sidecar, "s", call_body(3, "blob", {"size": 1000}), "blob")
    assert small.headers["cache-status"] == "mcpcache; fwd=miss; stored"


async def test_log_frames_count_towards_max_size(make_sidecar, upstream) -> None:
    _, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", maxSize="2Ki"))
    frames: list[object] = []

    async def on_log(params) -> None:
        frames.append(params)

    async with mcp_client(sidecar.url("s"), logging_callback=on_log, log_level="info") as client:
        for _ in range(2):
            result = await client.call_tool("chatty", {"frames": 20})
            assert result.content[0].text == "small"
    assert len(frames) == 40, "every frame reached the client both times"
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="too_large") == 2


async def test_calls_during_which_the_server_asked_the_client_are_not_stored(
    sidecar, upstream
) -> None:
    asked = 0

    async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        nonlocal asked
        asked += 1
        return ElicitResult(action="accept", content={"colour": f"blue{asked}"})

    async with mcp_client(sidecar.url("sse"), mode=LEGACY, elicitation_callback=answer) as client:
        first = await client.call_tool("ask", {})
        second = await client.call_tool("ask", {})
    assert first.content[0].text == "colour=blue1"
    assert second.content[0].text == "colour=blue2"
    assert asked == 2
    assert sidecar.sample("mcpcache_not_stored_total", server="sse", reason="server_request") == 2


async def test_calls_during_which_the_server_sampled_the_client_are_not_stored(
    sidecar, upstream
) -> None:
    sampled = 0

    async def model(context: ClientRequestContext, params: CreateMessageRequestParams):
        nonlocal sampled
        sampled += 1
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text=f"w{sampled}"), model="m"
        )

    async with mcp_client(sidecar.url("sse"), mode=LEGACY, sampling_callback=model) as client:
        first = await client.call_tool("word", {})
        second = await client.call_tool("word", {})
    assert (first.content[0].text, second.content[0].text) == ("word=w1", "word=w2")
    assert sidecar.sample("mcpcache_not_stored_total", server="sse", reason="server_request") == 2


async def test_requests_carrying_request_state_bypass_the_cache(sidecar, json_upstream) -> None:
    body = call_body(1, "echo", {"text": unique()})
    body["params"]["requestState"] = "opaque"
    for _ in range(2):
        response = await post_call(sidecar, "json", body, "echo")
        assert response.headers["cache-status"] == "mcpcache; fwd=request"
    assert (
        sidecar.sample(
            "mcpcache_requests_total", server="json", method="tools/call", outcome="bypass"
        )
        == 2
    )


async def test_a_zero_ttl_ms_in_the_result_is_not_stored(make_sidecar) -> None:
    peer = Upstream(resource_ttl_ms=0)
    with served(peer.app(json_response=True)) as app:
        sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
        async with mcp_client(sidecar.url("s"), mode=MODERN) as client:
            await client.read_resource("doc://a")
            await client.read_resource("doc://a")
        assert peer.calls["doc"] == 2
        assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="ttl_zero") == 2


async def test_a_ttl_ms_in_the_result_caps_the_entrys_life(make_sidecar) -> None:
    peer = Upstream(resource_ttl_ms=1500)
    with served(peer.app(json_response=True)) as app:
        sidecar = make_sidecar(
            {
                "servers": [
                    {
                        "name": "s",
                        "url": app.base_url + "/mcp",
                        "cache": {"enabled": True, "ttl": "1h"},
                    }
                ]
            }
        )
        async with mcp_client(sidecar.url("s"), mode=MODERN) as client:
            await client.read_resource("doc://a")
            entry = next(iter(sidecar.sidecar.cache.values()))
            assert entry.expires_at - entry.stored_at == pytest.approx(1.5)


async def test_upstream_no_store_is_respected(make_sidecar, json_upstream) -> None:
    async def add_no_store(scope, receive, send):
        async def patched_send(message):
            if message["type"] == "http.response.start":
                message["headers"] = [*message["headers"], (b"cache-control", b"no-store")]
            await send(message)

        await inner(scope, receive, patched_send)

    other = Upstream()
    inner = other.app(json_response=True)
    with served(add_no_store) as app:
        sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
        for request_id in (1, 2):
            response = await post_call(
                sidecar, "s", call_body(request_id, "echo", {"text": "x"}), "echo"
            )
            assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=no-store"
        assert other.calls["echo"] == 2


async def test_an_expired_entry_is_not_served(make_sidecar, json_upstream) -> None:
    _, app = json_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="300ms"))
    text = unique()
    first = await post_call(sidecar, "s", call_body(1, "echo", {"text": text}), "echo")
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    entry = next(iter(sidecar.sidecar.cache.values()))
    await async_wait_until(lambda: sidecar.sidecar.cache.timer() >= entry.expires_at, what="expiry")
    again = await post_call(sidecar, "s", call_body(2, "echo", {"text": text}), "echo")
    assert again.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert again.json()["result"] != first.json()["result"]


async def test_input_required_rounds_are_never_stored(sidecar, upstream) -> None:

    async def answer(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"colour": "green"})

    async with mcp_client(sidecar.url("sse"), mode=MODERN, elicitation_callback=answer) as client:
        for _ in range(2):
            result = await client.call_tool("survey", {})
            assert result.content[0].text == "colour=green"
    assert sidecar.sample("mcpcache_not_stored_total", server="sse", reason="input_required") == 2
    assert (
        sidecar.sample(
            "mcpcache_requests_total", server="sse", method="tools/call", outcome="bypass"
        )
        == 2
    )
    assert (
        sidecar.sample("mcpcache_requests_total", server="sse", method="tools/call", outcome="hit")
        == 0
    )


@pytest.mark.parametrize(
    "notification",
    [
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}},
        {
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {"progressToken": "x", "progress": 1},
        },
        {"jsonrpc": "2.0", "method": "notifications/example/unknown", "params": {}},
    ],
    ids=["cancelled", "another-token", "unknown"],
)
async def test_a_stream_a_hit_could_not_replay_is_not_stored(
    make_sidecar, echo_upstream, notification: dict
) -> None:
    """A notification before the result that a hit could not repeat faithfully (it may
    name something of its moment) keeps the call out of the cache; a log line does not."""
    _, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    log = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": "l"},
    }
    arguments = {"q": unique(), "notify": [log, notification]}
    for request_id in (1, 2):
        body = call_body(request_id, "t", arguments, progressToken="mine")
        response = await post_call(sidecar, "s", body, "t")
        assert response.status_code == 200
        assert response.text.count("event: message") == 3, "the caller got the whole stream"
    assert (
        sidecar.sample("mcpcache_not_stored_total", server="s", reason="stream_not_replayable") == 2
    )
    stored = {**arguments, "notify": [log]}
    for request_id in (3, 4):
        body = call_body(request_id, "t", stored, progressToken="mine")
        response = await post_call(sidecar, "s", body, "t")
    assert response.headers["cache-status"] == "mcpcache; hit"
    assert response.text.startswith("event: message\ndata: " + json.dumps(log) + "\n\n")
    assert response.text.count("event: message") == 2
