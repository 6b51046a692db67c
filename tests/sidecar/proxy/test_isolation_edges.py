"""Isolation at the edges: ids spelled differently but equal in value, answers crossed in
a shared session and handed to followers, copies from the shared tier that removals
must reach, late writes to it, sessions that end while an answer is in flight, the Host
check, writes that did not happen, and params given by position.

Each test replays an attack on the running sidecar against an upstream that behaves as
the attack needs: the stock TypeScript SDK server where it can (it routes answers by the
id's numeric value), a raw echoing peer where it cannot."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client import CollectorRegistry

from mcpcache.sidecar.config import SharedCache
from mcpcache.sidecar.metrics import SharedMetrics
from mcpcache.sidecar.tiers.redis_tier import RedisTier
from peers.clients import call_body, call_headers, http_client, post, sse_messages, unique
from peers.echo import who_answered
from peers.redisserver import RedisServer
from peers.serving import ServedApp, async_wait_until
from peers.sidecar import RunningSidecar, one_server
from peers.typescript_sdk import TypeScriptServer

LEGACY_VERSION = "2025-06-18"


def raw_call(request_id: str, tool: str, arguments: dict[str, Any]) -> bytes:
    """A tools/call body whose id is written exactly as given (`1.0`, `1e0`)."""
    body = json.dumps(call_body("__ID__", tool, arguments))
    return body.replace('"__ID__"', request_id).encode()


async def post_raw(url: str, body: bytes, headers: dict[str, str], seconds: float = 10) -> Any:
    async with http_client(timeout=seconds) as http:
        return await http.post(url, content=body, headers=headers)


# 1. Ids equal in value, spelled differently, in one legacy session.


@pytest.mark.parametrize(
    ("first", "second"), [("7", "7"), ("1", "1.0"), ("1.0", "1e0"), ("7", '"7"')]
)
async def test_ids_equal_in_value_are_one_id_to_the_reused_id_guard(
    sidecar_on_echo, echo_upstream, first: str, second: str
) -> None:
    """Two users of one legacy session send the same id at once (spelled alike or not):
    a server routing answers by id may give either answer to either request, so neither
    may be stored."""
    peer, _ = echo_upstream
    gate, session = unique(), "shared-" + unique()
    calls = peer.calls
    requests = [
        post_raw(
            sidecar_on_echo.url("echo"),
            raw_call(request_id, "t", {"q": unique(), "hold": gate}),
            call_headers("t", authorization=who, **{"mcp-session-id": session}),
        )
        for request_id, who in ((first, "Bearer mallory"), (second, "Bearer alice"))
    ]
    pending = asyncio.gather(*requests)
    await async_wait_until(lambda: peer.calls == calls + 2, what="both calls upstream")
    peer.gate(gate).set()
    for request_id, response in zip(
        (first, second), await asyncio.wait_for(pending, 10), strict=True
    ):
        if request_id == "1e0":  # spelt otherwise than its value: forwarded, never looked up
            assert response.headers["cache-status"] == "mcpcache; fwd=request; detail=unreadable"
        else:
            assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=id-reused"
    assert len(sidecar_on_echo.sidecar.cache) == 0
    assert len(sidecar_on_echo.sidecar.proxy.sessions.ids) == 0


class LegacySession:
    """One legacy session with the TypeScript server, opened through the sidecar and
    then used by several callers (a gateway multiplexing its users onto one session)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.id = ""

    def headers(self, who: str) -> dict[str, str]:
        return {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": LEGACY_VERSION,
            "mcp-session-id": self.id,
            "authorization": who,
        }

    async def open(self) -> LegacySession:
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "gateway", "version": "1"},
            },
        }
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        response = await post(self.url, initialize, headers, 10)
        assert response.status_code == 200, response.text
        self.id = response.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        response = await post(self.url, initialized, self.headers(""), 10)
        assert response.status_code == 202, response.text
        return self

    async def call(self, request_id: str, who: str, text: str, ms: int = 0) -> httpx.Response:
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": "__ID__",
                "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": text, "ms": ms}},
            }
        ).replace('"__ID__"', request_id)
        response: httpx.Response = await post_raw(self.url, body.encode(), self.headers(who), 10)
        return response


def echoed(response: httpx.Response) -> dict[str, Any]:
    (message,) = [m for m in sse_messages(response) if "result" in m or "error" in m]
    decoded: dict[str, Any] = json.loads(message["result"]["content"][0]["text"])
    return decoded


async def test_an_answer_the_typescript_server_crosses_by_id_value_is_never_stored(
    make_sidecar, ts_server: TypeScriptServer
) -> None:
    """Mallory sends id 1.0, Alice id 1 while it is in flight: the TypeScript SDK takes
    them for one id and delivers Mallory's answer on Alice's stream. That answer must
    not become Alice's cached answer."""
    sidecar = make_sidecar(one_server(ts_server.url, name="ts", timeout="3s"))
    session = await LegacySession(sidecar.url("ts")).open()
    calls = ts_server.calls
    mallory = asyncio.ensure_future(session.call("1.0", "Bearer mallory", "planted", 1000))
    await async_wait_until(lambda: ts_server.calls == calls + 1, what="Mallory's call upstream")
    alice = await session.call("1", "Bearer alice", "question", 2500)

    crossed = echoed(alice)
    assert crossed["who"] == "Bearer mallory", "the upstream crossed the answers"
    # An event stream's headers leave before its answer: the metrics say why not stored.
    assert sidecar.sample("mcpcache_not_stored_total", server="ts", reason="id_reused") >= 1
    mallory.cancel()
    await asyncio.gather(mallory, return_exceptions=True)

    again = await session.call("2", "Bearer alice", "question")
    assert again.headers["cache-status"].startswith("mcpcache; fwd=miss")
    assert echoed(again)["who"] == "Bearer alice"
    third = await session.call("3", "Bearer alice", "question")
    assert third.headers["cache-status"] == "mcpcache; hit"
    assert echoed(third)["who"] == "Bearer alice"


# 2. A follower is never handed an answer that may have been crossed.


@pytest.mark.parametrize("outcome", ["result", "error", "tool_error"])
async def test_a_follower_never_takes_an_answer_given_while_its_id_was_reused(
    sidecar_on_echo, echo_upstream, outcome: str
) -> None:
    peer, _ = echo_upstream
    gate, session = unique(), "shared-" + unique()
    arguments: dict[str, Any] = {"q": unique(), "hold": gate}
    if outcome == "error":
        arguments["error"] = {"code": -32000, "message": "boom"}
    elif outcome == "tool_error":
        arguments["result"] = {"content": [{"type": "text", "text": "x"}], "isError": True}
    url = sidecar_on_echo.url("echo")
    calls = peer.calls

    def headers(who: str) -> dict[str, str]:
        return call_headers("t", authorization=who, **{"mcp-session-id": session})

    mallory = post(url, call_body(5, "t", {"q": unique(), "hold": gate}), headers("Bearer m"))
    alice = post(url, call_body(5, "t", arguments), headers("Bearer alice"))
    pending = asyncio.gather(mallory, alice)
    await async_wait_until(lambda: peer.calls == calls + 2, what="both id-5 calls upstream")
    follower = asyncio.ensure_future(
        post(url, call_body(6, "t", arguments), headers("Bearer alice"))
    )
    await async_wait_until(
        lambda: sidecar_on_echo.waiting() >= 1,
        what="Alice's id-6 call to follow her id-5 call",
    )
    peer.gate(gate).set()
    await asyncio.wait_for(pending, 10)
    answer = await asyncio.wait_for(follower, 10)
    assert "collapsed" not in answer.headers["cache-status"]
    assert peer.calls == calls + 3, "the follower went upstream on its own"
    assert answer.json()["id"] == 6


# 3. Copies from the shared tier are reached by every removal.


def shared_document(app: ServedApp, redis: RedisServer, **cache: Any) -> dict[str, Any]:
    document = one_server(app.base_url + "/mcp", name="echo", **cache)
    document["appId"] = "edges-" + unique()
    document["sharedCache"] = {"url": redis.url, "timeout": "1s"}
    return document


async def call_echo(sidecar: RunningSidecar, arguments: dict[str, Any]) -> httpx.Response:
    return await post(sidecar.url("echo"), call_body(1, "t", arguments), call_headers("t"), 10)


async def written_to_redis(sidecar: RunningSidecar, count: int = 1) -> None:
    await async_wait_until(
        lambda: sidecar.sample("mcpcache_shared_stores_total", result="stored") >= count,
        what="the shared tier to store",
    )


@pytest.mark.parametrize("removal", ["admin", "marker"])
async def test_a_copy_read_from_the_shared_tier_goes_with_a_purge(
    make_sidecar, redis_server, echo_upstream, removal: str
) -> None:
    peer, app = echo_upstream
    document = shared_document(app, redis_server)
    writer, reader = make_sidecar(document), make_sidecar(document)
    arguments = {"q": unique()}
    await call_echo(writer, arguments)
    await written_to_redis(writer)
    copied = await call_echo(reader, arguments)
    assert copied.headers["cache-status"].startswith("mcpcache; hit")
    admin = f"http://127.0.0.1:{reader.port}/admin"
    async with http_client(timeout=5) as http:
        stats = (await http.get(f"{admin}/stats")).json()
        assert stats["servers"]["echo"]["entries"] == 1, "the copy is counted under its server"
        if removal == "admin":
            purged = await http.post(f"{admin}/purge", json={"server": "echo"})
            assert purged.json()["purged"] == 1
    if removal == "marker":
        document["servers"][0]["purge"] = unique()
        reader.write_config(document)
        await async_wait_until(lambda: len(reader.sidecar.cache) == 0, what="the purge marker")
    calls = peer.calls
    again = await call_echo(reader, arguments)
    assert again.headers["cache-status"].startswith("mcpcache; fwd=miss")
    assert peer.calls == calls + 1


async def test_a_copy_read_from_the_shared_tier_lives_as_long_as_its_tool_rule_allows(
    make_sidecar, redis_server, echo_upstream
) -> None:
    _, app = echo_upstream
    document = shared_document(app, redis_server, ttl="1s", tools=[{"name": "t", "ttl": "60s"}])
    writer, reader = make_sidecar(document), make_sidecar(document)
    arguments = {"q": unique()}
    await call_echo(writer, arguments)
    await written_to_redis(writer)
    await call_echo(reader, arguments)
    (entry,) = reader.sidecar.cache.values()
    assert entry.expires_at - entry.stored_at > 50, "the rule's 60 s, not the server's 1 s"


async def test_a_shared_write_that_lands_after_a_purge_is_never_served(redis_server) -> None:
    """A write runs in the background; one that reaches Redis after the purge's SCAN (a
    slow write, a paused Redis) must not bring the purged answer back."""
    settings = SharedCache.model_validate({"url": redis_server.url, "timeout": "1s"})
    tier = RedisTier(settings, SharedMetrics(CollectorRegistry()))
    app, key, result = "late-" + unique(), "a" * 64, b'{"content":[]}'
    try:
        seen = await tier.get(app, "s", key, 1 << 20, 60)
        assert seen.entry is None
        assert seen.generation == b""
        await tier.delete_server(app, "s")  # a purge while the answer was upstream
        tier.put(app, "s", key, result, False, 60, 1 << 20, seen.generation)
        name = tier.keys.entry(app, "s", key)
        await async_wait_until(lambda: redis_server.client().exists(name), what="the late write")
        late = await tier.get(app, "s", key, 1 << 20, 60)
        assert late.entry is None, "written under the generation before the purge"

        tier.put(app, "s", key, result, False, 60, 1 << 20, late.generation)
        await async_wait_until(
            lambda: (tier.metrics.stores.labels("stored")._value.get() or 0) >= 2,
            what="the second write",
        )
        fresh = await tier.get(app, "s", key, 1 << 20, 60)
        assert fresh.entry is not None
        assert fresh.entry.result == result
    finally:
        await tier.aclose()


# The Host check, and /metrics.


@pytest.mark.parametrize(
    "host", ["localhost:3500.evil", "[::1].evil", "localhost.evil", "127.0.0.1:80:80", "[::1]x"]
)
async def test_a_host_that_only_starts_like_loopback_is_refused(sidecar_on_echo, host: str) -> None:
    headers = call_headers("t", host=host)
    response = await post(sidecar_on_echo.url("echo"), call_body(1, "t", {"q": "x"}), headers, 5)
    assert response.status_code == 403
    assert "is not allowed" in response.json()["error"]["message"]


async def test_metrics_answer_any_host_and_hold_nothing_of_a_caller(sidecar_on_echo) -> None:
    """/metrics has no Host check, by decision: Prometheus scrapes it by pod IP, and it
    holds counts by server, method and reason only, never a caller, header or argument."""
    secret = "Bearer " + unique()
    argument = unique()
    await call_echo_named(sidecar_on_echo, {"q": argument}, authorization=secret)
    async with http_client(timeout=5) as http:
        response = await http.get(
            sidecar_on_echo.metrics_url + "/metrics", headers={"host": "rebound.evil"}
        )
    assert response.status_code == 200
    assert "mcpcache_requests_total" in response.text
    assert secret not in response.text
    assert argument not in response.text


async def call_echo_named(
    sidecar: RunningSidecar, arguments: dict[str, Any], **headers: str
) -> httpx.Response:
    return await post(
        sidecar.url("echo"), call_body(1, "t", arguments), call_headers("t", **headers), 10
    )


# A write the upstream refused invalidates nothing.


@pytest.mark.parametrize(("status", "invalidated"), [(401, False), (403, False), (200, True)])
async def test_only_a_write_the_upstream_may_have_done_drops_entries(
    make_sidecar, echo_upstream, status: int, invalidated: bool
) -> None:
    _, app = echo_upstream
    rules = [{"name": "write", "invalidates": ["read"]}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="echo", tools=rules))
    url = sidecar.url("echo")
    read = {"q": unique()}
    await post(url, call_body(1, "read", read), call_headers("read", authorization="Bearer a"))
    write = {"q": unique(), "status": status}
    await post(url, call_body(2, "write", write), call_headers("write"))
    headers = call_headers("read", authorization="Bearer a")
    again = await post(url, call_body(3, "read", read), headers)
    expected = "mcpcache; fwd=miss; stored" if invalidated else "mcpcache; hit"
    assert again.headers["cache-status"] == expected
    assert sidecar.sample("mcpcache_invalidations_total", server="echo", cause="write") == (
        1 if invalidated else 0
    )


# Params given by position.


async def test_params_given_by_position_are_never_cached(make_sidecar, echo_upstream) -> None:
    peer, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="echo", metadataTTL="60s"))
    calls = peer.calls
    for page in ("page-1", "page-2", "page-1"):
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [page]}
        headers = call_headers("", method="tools/list")
        del headers["mcp-name"]
        response = await post(sidecar.url("echo"), body, headers, 10)
        assert response.headers["cache-status"] == (
            "mcpcache; fwd=request; detail=positional-params"
        )
    assert peer.calls == calls + 3


# From the review: ids the sidecar gave up on, session ids spelled with whitespace,
# charsets, removals owed to the shared tier.


async def test_an_id_whose_request_timed_out_stays_taken_while_the_server_may_answer_it(
    make_sidecar, ts_server: TypeScriptServer
) -> None:
    """Mallory's call times out at the sidecar but runs on upstream; Alice's call with
    the same id may receive Mallory's late answer, which must not become Alice's entry."""
    sidecar = make_sidecar(one_server(ts_server.url, name="ts", timeout="1s"))
    session = await LegacySession(sidecar.url("ts")).open()
    calls = ts_server.calls
    with contextlib.suppress(httpx.HTTPError):
        await session.call("1", "Bearer mallory", "planted", 1800)
    assert ts_server.calls == calls + 1
    await session.call("1", "Bearer alice", "question", 900)
    assert sidecar.sample("mcpcache_not_stored_total", server="ts", reason="id_reused") >= 1
    later = await session.call("2", "Bearer alice", "question")
    assert later.headers["cache-status"].startswith("mcpcache; fwd=miss")
    assert echoed(later)["who"] == "Bearer alice"


async def raw_post(url: str, headers: dict[str, str], body: bytes, idle: float = 10) -> bytes:
    """A POST written byte for byte (header values exactly as given), read to its end or
    until no byte came for `idle` seconds."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    head = f"POST {parts.path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n"
    head += "connection: close\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    writer.write(head.encode() + b"\r\n" + body)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := await asyncio.wait_for(reader.read(65536), idle):
            data += chunk
    writer.close()
    return data


async def test_a_session_id_with_whitespace_around_it_is_the_same_session(
    make_sidecar, ts_server: TypeScriptServer
) -> None:
    """The TypeScript server trims the header, so `<id> \\t` is the same session to it:
    the reused-id guard must see one session too."""
    sidecar = make_sidecar(one_server(ts_server.url, name="ts", timeout="10s"))
    session = await LegacySession(sidecar.url("ts")).open()
    headers = session.headers("Bearer mallory") | {"mcp-session-id": session.id + " \t"}
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "planted", "ms": 600}},
        }
    ).encode()
    calls = ts_server.calls
    # The server answers id 1 once, on one of the two streams: the other never ends.
    mallory = asyncio.ensure_future(raw_post(session.url, headers, body, idle=1))
    await async_wait_until(lambda: ts_server.calls == calls + 1, what="Mallory's call upstream")
    await session.call("1", "Bearer alice", "question", 1500)
    await asyncio.wait_for(mallory, 10)
    later = await session.call("2", "Bearer alice", "question", 10)
    assert later.headers["cache-status"].startswith("mcpcache; fwd=miss")
    assert echoed(later)["who"] == "Bearer alice"


async def test_a_body_in_another_charset_goes_as_sent_and_is_never_looked_up(
    sidecar_on_echo, echo_upstream
) -> None:
    """A charset parameter could make a server decode other params than the key saw
    (UTF-7): such a body goes up as sent, with its own content type, and uncached."""
    peer, _ = echo_upstream
    arguments = {"q": unique()}
    headers = call_headers("t") | {"content-type": "application/json; charset=utf-7"}
    calls = peer.calls
    for request_id in (1, 2):
        response = await post(
            sidecar_on_echo.url("echo"), call_body(request_id, "t", arguments), headers, 10
        )
        assert response.status_code == 200
        assert response.headers["cache-status"] == "mcpcache; fwd=request; detail=unreadable"
        assert peer.seen[-1]["content-type"] == "application/json; charset=utf-7"
    assert peer.calls == calls + 2
    assert len(sidecar_on_echo.sidecar.cache) == 0
    plain = call_headers("t") | {"content-type": "application/json; charset=UTF-8"}
    response = await post(sidecar_on_echo.url("echo"), call_body(3, "t", arguments), plain, 10)
    assert response.headers["cache-status"] == "mcpcache; fwd=miss; stored"


async def test_a_purge_while_redis_is_out_of_reach_is_kept_until_redis_takes_it(
    make_sidecar, own_redis_server, echo_upstream
) -> None:
    """The breaker is open when the purge comes: the removal is owed, the purged answer
    is not read from the tier meanwhile, and the new generation is set once Redis is
    back, so the purged answer never comes back from it."""
    _, app = echo_upstream
    redis = own_redis_server
    document = shared_document(app, redis)
    document["sharedCache"] |= {"timeout": "200ms", "retryAfter": "500ms"}
    writer, replica = make_sidecar(document), make_sidecar(document)
    arguments = {"q": unique()}
    original = who_answered((await call_echo(writer, arguments)).json())["call"]
    await written_to_redis(writer)
    redis.pause()
    try:
        for _ in range(3):  # a Redis blip: lookups time out, the breaker opens
            await call_echo(replica, {"q": unique()})
        assert replica.sidecar.shared is not None
        assert replica.sidecar.shared.breaker_state == "open"
        async with http_client(timeout=5) as http:
            purged = await http.post(
                f"http://127.0.0.1:{replica.port}/admin/purge", json={"server": "echo"}
            )
        assert purged.status_code == 200
    finally:
        redis.resume()
    owed = await call_echo(replica, arguments)
    assert who_answered(owed.json())["call"] != original
    generation = f"mcpcache:default:@generation:{{{document['appId']}:echo}}"
    await async_wait_until(
        lambda: redis.client().get(generation) is not None, what="the purge to reach Redis"
    )
    fresh = make_sidecar(document)  # a replica with nothing in memory reads the tier
    after = await call_echo(fresh, arguments)
    assert who_answered(after.json())["call"] != original
