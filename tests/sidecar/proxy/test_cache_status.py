"""What `Cache-Status` and `Age` tell a caller, for each row of the reference's tables: the
header as sent, the metric behind it, and whether the upstream was asked again."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from peers.clients import as_upstream_said, call_body, call_headers, http_client, post, unique
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar, one_server


async def call_echo(sidecar: RunningSidecar, arguments: dict[str, Any], request_id: Any = 1):
    return await post(sidecar.url("s"), call_body(request_id, "t", arguments), call_headers("t"))


async def test_a_server_without_caching_says_fwd_bypass(sidecar, upstream) -> None:
    peer, _ = upstream
    text = unique()
    before = peer.calls["echo"]
    for request_id in (1, 2):
        body = call_body(request_id, "echo", {"text": text})
        response = await post(sidecar.url("plain"), body, call_headers("echo"))
        assert response.status_code == 200
        assert response.headers["cache-status"] == "mcpcache; fwd=bypass"
    assert peer.calls["echo"] == before + 2


def _rpc(method: str, request_id: Any = None, **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return message


NEVER_CACHED = [
    pytest.param(_rpc("tools/list", 1), "tools/list", id="list"),
    pytest.param(
        _rpc("prompts/get", 1, name="greet", arguments={"name": "x"}), "prompts/get", id="prompt"
    ),
    pytest.param(
        _rpc("resources/subscribe", 1, uri="doc://a"), "resources/subscribe", id="subscribe"
    ),
    pytest.param(
        _rpc("resources/unsubscribe", 1, uri="doc://a"), "resources/unsubscribe", id="unsubscribe"
    ),
    pytest.param(
        _rpc("notifications/cancelled", requestId=99, reason="gone"),
        "notifications/cancelled",
        id="notification",
    ),
    pytest.param(
        {"jsonrpc": "2.0", "id": 99, "result": {"action": "decline"}}, None, id="client-response"
    ),
]


@pytest.mark.parametrize(("message", "method"), NEVER_CACHED)
async def test_methods_the_cache_never_handles_say_fwd_method_and_always_go_upstream(
    sidecar, json_upstream, message: dict[str, Any], method: str | None
) -> None:
    peer, _ = json_upstream
    headers = call_headers("greet" if method == "prompts/get" else "x")
    del headers["mcp-name"]
    if method is None:
        del headers["mcp-method"]
    else:
        headers["mcp-method"] = method
        if method == "prompts/get":
            headers["mcp-name"] = "greet"
    before = peer.http["POST"]
    for _ in range(2):
        response = await post(sidecar.url("json"), message, headers)
        assert response.headers["cache-status"] == "mcpcache; fwd=method"
    assert peer.http["POST"] == before + 2, "both went upstream"
    assert len(sidecar.sidecar.cache) == 0


async def test_a_call_carrying_input_responses_says_fwd_request(sidecar, json_upstream) -> None:
    peer, _ = json_upstream
    body = call_body(1, "echo", {"text": unique()})
    body["params"]["inputResponses"] = {"colour": {"action": "accept", "content": {}}}
    before = peer.http["POST"]
    for _ in range(2):
        response = await post(sidecar.url("json"), body, call_headers("echo"))
        assert response.headers["cache-status"] == "mcpcache; fwd=request"
    assert peer.http["POST"] == before + 2
    assert (
        sidecar.sample(
            "mcpcache_requests_total", server="json", method="tools/call", outcome="bypass"
        )
        == 2
    )


async def test_an_event_stream_miss_says_only_fwd_miss_and_is_stored(sidecar, upstream) -> None:
    arguments = {"steps": 1, "text": unique()}
    first = await post(
        sidecar.url("sse"),
        call_body(1, "progress", arguments, progressToken="p1"),
        call_headers("progress"),
    )
    assert first.headers["content-type"].startswith("text/event-stream")
    assert first.headers["cache-status"] == "mcpcache; fwd=miss"
    assert len(sidecar.sidecar.cache) == 1, "stored all the same"
    assert sidecar.sample("mcpcache_not_stored_total", server="sse", reason="incomplete") == 0
    second = await post(
        sidecar.url("sse"),
        call_body(2, "progress", arguments, progressToken="p2"),
        call_headers("progress"),
    )
    assert second.headers["cache-status"] == "mcpcache; hit"


async def test_a_json_rpc_error_response_is_not_stored(make_sidecar, echo_upstream) -> None:
    peer, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    arguments = {"q": unique(), "error": {"code": -32000, "message": "backend said no"}}
    before = peer.calls
    for request_id in (1, 2):
        response = await call_echo(sidecar, arguments, request_id)
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": request_id,
            "error": {"code": -32000, "message": "backend said no"},
        }
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=error"
    assert peer.calls == before + 2
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="error") == 2
    assert len(sidecar.sidecar.cache) == 0


async def test_a_result_larger_than_the_whole_cache_is_over_budget(
    make_sidecar, echo_upstream
) -> None:
    peer, app = echo_upstream
    document = one_server(app.base_url + "/mcp", maxSize="64Ki") | {"cache": {"maxBytes": "1Ki"}}
    sidecar = make_sidecar(document)
    arguments = {"q": unique(), "result": {"content": [{"type": "text", "text": "x" * 2000}]}}
    before = peer.calls
    for request_id in (1, 2):
        response = await call_echo(sidecar, arguments, request_id)
        assert response.json()["result"] == arguments["result"], "the caller gets it whole"
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=over-budget"
    assert peer.calls == before + 2
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="over_budget") == 2
    small = await call_echo(sidecar, {"q": unique()})
    assert small.headers["cache-status"] == "mcpcache; fwd=miss; stored"


@pytest.mark.slow
async def test_age_counts_the_seconds_since_the_answer_was_stored(sidecar) -> None:
    """`Age` is a whole number of seconds that grows: polled on hits until a second has
    passed on the monotonic clock (no sleep stands in for the clock)."""
    text = unique()
    stored = time.monotonic()
    miss = await post(
        sidecar.url("json"), call_body(1, "echo", {"text": text}), call_headers("echo")
    )
    assert miss.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    ages: list[int] = []
    deadline = stored + 10
    async with http_client(timeout=10) as http:
        while not ages or ages[-1] < 1:
            assert time.monotonic() < deadline, f"Age never reached 1 s: {ages}"
            hit = await http.post(
                sidecar.url("json"),
                json=call_body(len(ages) + 2, "echo", {"text": text}),
                headers=call_headers("echo"),
            )
            elapsed = time.monotonic() - stored
            assert hit.headers["cache-status"] == "mcpcache; hit"
            assert as_upstream_said(hit.json()["result"]) == miss.json()["result"]
            age = int(hit.headers["age"])
            assert 0 <= age <= elapsed, "never older than the time since it was stored"
            ages.append(age)
            await asyncio.sleep(0.05)  # pacing between polls, not synchronisation
    assert ages == sorted(ages), "Age never goes back"
    assert ages[0] == 0
    assert ages[-1] >= 1


async def test_expired_entries_are_counted_as_expired_evictions(make_sidecar, echo_upstream):
    _, app = echo_upstream
    sidecar = make_sidecar(
        one_server(app.base_url + "/mcp", ttl="200ms") | {"cache": {"maxEntries": 1}}
    )
    cache = sidecar.sidecar.cache
    arguments = {"q": unique()}
    assert (await call_echo(sidecar, arguments)).headers["cache-status"].endswith("stored")
    (entry,) = cache.values()
    await async_wait_until(lambda: cache.timer() >= entry.expires_at, what="the entry to expire")
    again = await call_echo(sidecar, arguments, 2)
    assert again.headers["cache-status"] == "mcpcache; fwd=miss; stored", "never served stale"
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="expired") == 1
    (entry,) = cache.values()
    await async_wait_until(lambda: cache.timer() >= entry.expires_at, what="the entry to expire")
    other = await call_echo(sidecar, {"q": unique()}, 3)
    assert other.headers["cache-status"].endswith("stored")
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="expired") == 2
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="capacity") == 0
