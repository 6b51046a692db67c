"""Caching through the sidecar, with the official SDK's client and server on both ends."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from peers.clients import (
    LEGACY,
    MODERN,
    as_upstream_said,
    call_body,
    call_headers,
    http_client,
    mcp_client,
    sse_messages,
    unique,
)


@pytest.mark.parametrize("server", ["sse", "json"])
@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_second_identical_call_is_served_from_cache(
    sidecar, upstream, json_upstream, server: str, mode: str
) -> None:
    peer = (upstream if server == "sse" else json_upstream)[0]
    text = unique()
    async with mcp_client(sidecar.url(server), mode=mode) as client:
        first = await client.call_tool("echo", {"text": text})
        posts = peer.http["POST"]
        second = await client.call_tool("echo", {"text": text})
        assert peer.http["POST"] == posts, "a hit must cause no upstream request"
    assert second.content == first.content
    assert first.content[0].text == f"{text} #{int(first.content[0].text.rsplit('#')[1])}"
    assert (
        sidecar.sample("mcpcache_requests_total", server=server, method="tools/call", outcome="hit")
        == 1
    )


async def test_a_hit_carries_the_callers_id_cache_status_and_age(sidecar) -> None:
    text = unique()
    async with http_client() as http:
        miss = await http.post(
            sidecar.url("json"),
            json=call_body(1, "echo", {"text": text}),
            headers=call_headers("echo"),
        )
        hit = await http.post(
            sidecar.url("json"),
            json=call_body("second-id", "echo", {"text": text}),
            headers=call_headers("echo"),
        )
    assert miss.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert "age" not in miss.headers
    assert hit.headers["cache-status"] == "mcpcache; hit"
    assert hit.headers["age"] == "0"
    assert hit.headers["content-type"] == "application/json"
    assert hit.json()["id"] == "second-id"
    assert as_upstream_said(hit.json()["result"]) == miss.json()["result"]


async def test_an_event_stream_hit_replays_progress_under_the_callers_own_token(
    sidecar, upstream
) -> None:
    peer, _ = upstream
    text = unique()
    async with http_client() as http:
        arguments = {"steps": 2, "text": text}
        body = call_body(7, "progress", arguments, progressToken="p7")
        miss = await http.post(sidecar.url("sse"), json=body, headers=call_headers("progress"))
        calls = peer.calls["progress"]
        body = call_body(8, "progress", arguments, progressToken=8)
        hit = await http.post(sidecar.url("sse"), json=body, headers=call_headers("progress"))
        body = call_body(9, "progress", arguments)
        tokenless = await http.post(sidecar.url("sse"), json=body, headers=call_headers("progress"))
    assert miss.headers["content-type"].startswith("text/event-stream")
    assert hit.headers["content-type"].startswith("text/event-stream")
    assert hit.headers["cache-status"] == tokenless.headers["cache-status"] == "mcpcache; hit"
    assert peer.calls["progress"] == calls
    *progress, answer = sse_messages(hit)
    assert [p["params"] for p in progress] == [
        {**p["params"], "progressToken": 8} for p in sse_messages(miss)[:-1]
    ]
    assert len(progress) == 2
    assert answer["id"] == 8
    assert text in answer["result"]["content"][0]["text"]
    (only,) = sse_messages(tokenless)
    assert only["id"] == 9, "no progress for a caller that sent no token"


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_a_hit_replays_the_log_lines_and_progress_the_miss_showed(
    sidecar, upstream, mode: str
) -> None:
    peer, _ = upstream
    logs: list[str] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    arguments = {"steps": 3, "text": unique()}
    async with mcp_client(
        sidecar.url("sse"), mode=mode, logging_callback=_collect(logs), log_level="info"
    ) as client:
        miss = await client.call_tool("narrated", arguments, progress_callback=on_progress)
        seen = (list(logs), list(progress))
        calls = peer.calls["narrated"]
        hit = await client.call_tool("narrated", arguments, progress_callback=on_progress)
    assert peer.calls["narrated"] == calls, "the second call was a hit"
    assert hit.content == miss.content
    assert len(seen[0]) == len(seen[1]) == 3
    assert (logs, progress) == (seen[0] * 2, seen[1] * 2)


def _collect(frames: list[str]):
    async def callback(params) -> None:
        frames.append(str(params.data))

    return callback


async def test_resources_read_is_cached(sidecar, upstream) -> None:
    peer, _ = upstream
    uri = f"doc://{unique()}"
    async with mcp_client(sidecar.url("sse")) as client:
        first = await client.read_resource(uri)
        second = await client.read_resource(uri)
    assert first.contents == second.contents
    assert peer.calls["doc"] >= 1
    assert (
        sidecar.sample(
            "mcpcache_requests_total", server="sse", method="resources/read", outcome="hit"
        )
        == 1
    )


async def test_two_end_users_never_share_an_entry(sidecar, upstream) -> None:
    answers = {}
    for user in ("alice", "bob"):
        async with mcp_client(
            sidecar.url("sse"), headers={"authorization": f"Bearer {user}"}
        ) as client:
            first = await client.call_tool("whoami", {})
            second = await client.call_tool("whoami", {})
            assert first.content == second.content
            answers[user] = first.content[0].text
    assert answers["alice"].startswith("user=Bearer alice")
    assert answers["bob"].startswith("user=Bearer bob")


async def test_two_callers_never_share_an_entry(make_sidecar, upstream) -> None:
    _, app = upstream
    text = unique()
    results = []
    for app_id in ("agent-one", "agent-two"):
        sidecar = make_sidecar(
            {
                "appId": app_id,
                "servers": [
                    {"name": "s", "url": app.base_url + "/mcp", "cache": {"enabled": True}}
                ],
            }
        )
        async with mcp_client(sidecar.url("s")) as client:
            results.append((await client.call_tool("echo", {"text": text})).content[0].text)
    assert results[0] != results[1]


async def test_progress_token_does_not_split_the_cache(sidecar, upstream) -> None:
    text = unique()
    async with http_client() as http:
        for request_id in (1, 2, 3):
            body = call_body(request_id, "echo", {"text": text}, progressToken=f"p{request_id}")
            body["params"]["_meta"]["traceparent"] = f"00-{unique()}-{unique()[:16]}-01"
            response = await http.post(sidecar.url("sse"), json=body, headers=call_headers("echo"))
            assert response.status_code == 200
    assert (
        sidecar.sample("mcpcache_requests_total", server="sse", method="tools/call", outcome="hit")
        == 2
    )


async def test_other_meta_members_split_the_cache(sidecar) -> None:
    text = unique()
    async with http_client() as http:
        for tenant in ("a", "b"):
            body = call_body(1, "echo", {"text": text}, tenant=tenant)
            response = await http.post(sidecar.url("json"), json=body, headers=call_headers("echo"))
            assert response.headers["cache-status"] == "mcpcache; fwd=miss; stored"


async def test_cache_disabled_servers_are_passed_through(sidecar, upstream) -> None:
    text = unique()
    async with mcp_client(sidecar.url("plain")) as client:
        await client.call_tool("echo", {"text": text})
        await client.call_tool("echo", {"text": text})
    assert (
        sidecar.sample(
            "mcpcache_requests_total", server="plain", method="tools/call", outcome="bypass"
        )
        == 2
    )


@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_list_prompt_and_handshake_methods_are_never_cached(
    sidecar, upstream, mode: str
) -> None:
    peer, _ = upstream
    async with mcp_client(sidecar.url("sse"), mode=mode) as client:
        posts = peer.http["POST"]
        for _ in range(2):
            await client.list_tools()
            await client.list_resources()
            await client.list_resource_templates()
            await client.list_prompts()
            await client.get_prompt("greet", {"name": "x"})
            if mode == LEGACY:
                await client.send_ping()
            else:
                await client.session.discover()
        forwarded = peer.http["POST"] - posts
    samples = sidecar.scrape()
    outcomes: dict[str, float] = {}
    for (name, labels), value in samples.items():
        if name == "mcpcache_requests_total" and dict(labels)["server"] == "sse":
            outcome = dict(labels)["outcome"]
            outcomes[outcome] = outcomes.get(outcome, 0) + value
    assert set(outcomes) == {"bypass"}
    assert outcomes["bypass"] >= 10
    assert forwarded == outcomes["bypass"], "every one of them went upstream"


async def test_many_concurrent_callers_each_get_their_own_answer(sidecar, json_upstream) -> None:
    peer, _ = json_upstream
    texts = [unique() for _ in range(8)]
    calls = peer.calls["echo"]

    async def caller(http: httpx.AsyncClient, n: int) -> None:
        text = texts[n % len(texts)]
        response = await http.post(
            sidecar.url("json"),
            json=call_body(f"req-{n}", "echo", {"text": text}),
            headers=call_headers("echo"),
        )
        assert response.status_code == 200
        body = response.json()
        assert body["id"] == f"req-{n}"
        assert body["result"]["content"][0]["text"].startswith(text + " #")

    async with http_client(limits=httpx.Limits(max_connections=64)) as http:
        await asyncio.gather(*(caller(http, n) for n in range(200)))
    outcomes = {
        outcome: sidecar.sample(
            "mcpcache_requests_total", server="json", method="tools/call", outcome=outcome
        )
        for outcome in ("hit", "miss", "collapsed")
    }
    assert sum(outcomes.values()) == 200
    assert outcomes["miss"] == 8, "one upstream call per distinct call, however concurrent"
    assert peer.calls["echo"] - calls == 8
