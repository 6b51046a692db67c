"""Routing and transport: both protocol eras, streaming, headers, failures."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

import pytest
from mcp.server.transport_security import TransportSecuritySettings

from peers.clients import LEGACY, MODERN, call_body, call_headers, http_client, mcp_client, post
from peers.serving import async_wait_until, free_port, served
from peers.sidecar import one_server
from peers.upstream import Upstream


async def test_an_unknown_server_gets_404_naming_it(sidecar) -> None:
    response = await post(sidecar.url("nope"), call_body(1, "echo", {}), call_headers("echo"))
    assert response.status_code == 404
    error = response.json()["error"]
    assert "'nope'" in error["message"]
    assert error["data"] == {"server": "nope"}


@pytest.mark.parametrize(
    ("header", "value"),
    [("mcp-method", "tools/list"), ("mcp-name", "blob")],
)
async def test_routing_headers_that_disagree_with_the_body_are_refused(
    sidecar, json_upstream, header: str, value: str
) -> None:
    peer, _ = json_upstream
    posts = peer.http["POST"]
    headers = call_headers("echo") | {header: value}
    response = await post(sidecar.url("json"), call_body(5, "echo", {"text": "x"}), headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020
    assert response.json()["id"] == 5
    assert peer.http["POST"] == posts, "refused before any forwarding"


@pytest.mark.parametrize(
    ("copies", "refused"),
    [
        ([("mcp-method", "tools/call"), ("mcp-method", "tools/call")], False),
        ([("mcp-name", "echo"), ("mcp-name", "=?base64?ZWNobw==?=")], False),
        ([("mcp-method", "tools/call"), ("mcp-method", "tools/list")], True),
        ([("mcp-name", "echo"), ("mcp-name", "blob")], True),
    ],
)
async def test_a_routing_header_sent_twice_is_refused_only_when_a_copy_disagrees(
    sidecar, json_upstream, copies: list[tuple[str, str]], refused: bool
) -> None:
    # Copies that all agree with the body break no rule the sidecar must enforce: the
    # request goes upstream as sent, uncached (servers differ in which copy they read),
    # and the upstream answers it (the SDK's server refuses repeated routing headers).
    peer, _ = json_upstream
    posts = peer.http["POST"]
    repeated = {name for name, _ in copies}
    headers = [(k, v) for k, v in call_headers("echo").items() if k not in repeated] + copies
    body = json.dumps(call_body(5, "echo", {"text": uuid.uuid4().hex})).encode()
    async with http_client(timeout=10) as http:
        response = await http.post(sidecar.url("json"), content=body, headers=headers)
    if refused:
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32020
        assert peer.http["POST"] == posts, "refused before any forwarding"
    else:
        assert response.headers["cache-status"] == "mcpcache; fwd=request; detail=ambiguous-headers"
        assert "more than once" in response.json()["error"]["message"], "the upstream's answer"
        assert peer.http["POST"] == posts + 1


async def test_a_base64_mcp_name_header_is_decoded_before_comparing(sidecar) -> None:
    encoded = "=?base64?" + base64.b64encode(b"echo").decode() + "?="
    headers = call_headers("echo") | {"mcp-name": encoded}
    response = await post(sidecar.url("json"), call_body(1, "echo", {"text": "x"}), headers)
    assert response.status_code == 200


async def test_progress_reaches_the_client_before_the_tool_finishes(sidecar, upstream) -> None:
    peer, _ = upstream
    gate = uuid.uuid4().hex
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with mcp_client(sidecar.url("sse"), mode=MODERN) as client:
        call = asyncio.create_task(
            client.call_tool("slow", {"steps": 2, "gate": gate}, progress_callback=on_progress)
        )
        await async_wait_until(lambda: len(progress) == 2, what="progress through the sidecar")
        assert not call.done()
        assert not peer.gate(gate).is_set()
        peer.gate(gate).set()
        result = await asyncio.wait_for(call, 10)
    assert result.content[0].text == "done after 2 steps"


async def test_legacy_sessions_pass_get_streams_and_delete_through(sidecar, upstream) -> None:
    peer, _ = upstream
    gets, deletes = peer.http["GET"], peer.http["DELETE"]
    async with mcp_client(sidecar.url("sse"), mode=LEGACY) as client:
        assert client.session.protocol_version == "2025-11-25"
        await client.call_tool("echo", {"text": uuid.uuid4().hex})
        await async_wait_until(lambda: peer.http["GET"] > gets, what="the GET stream upstream")
    await async_wait_until(lambda: peer.http["DELETE"] == deletes + 1, what="the session DELETE")


async def test_initialize_returns_the_upstream_session_id(sidecar) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    response = await post(sidecar.url("sse"), body, headers)
    assert response.status_code == 200
    assert response.headers["mcp-session-id"]
    assert response.headers["cache-status"] == "mcpcache; fwd=method"


async def test_headers_pass_through_except_hop_by_hop_ones(sidecar, json_upstream) -> None:
    _, app = json_upstream
    headers = call_headers("headers") | {
        "x-request-tag": "abc",
        "authorization": "Bearer t0k3n",
        "keep-alive": "timeout=5",
        "proxy-authorization": "Basic c2VjcmV0",
        "te": "trailers",
        "accept-encoding": "gzip",
    }
    response = await post(sidecar.url("json"), call_body(1, "headers", {}), headers)
    seen = json.loads(response.json()["result"]["content"][0]["text"])
    assert seen["x-request-tag"] == "abc"
    assert seen["authorization"] == "Bearer t0k3n"
    assert seen["mcp-protocol-version"] == MODERN
    assert seen["host"] == f"127.0.0.1:{app.port}"
    assert seen["accept-encoding"] == "identity"
    # Meant for a proxy in front of the server (the sidecar asks for none), and keyed on.
    assert seen["proxy-authorization"] == "Basic c2VjcmV0"
    for hop in ("keep-alive", "te", "origin"):
        assert hop not in seen


async def test_an_upstream_with_dns_rebinding_protection_accepts_forwarded_requests(
    make_sidecar,
) -> None:
    peer = Upstream()
    strict = TransportSecuritySettings(allowed_hosts=["127.0.0.1:*"], allowed_origins=[])
    with served(peer.app(transport_security=strict)) as app:
        sidecar = make_sidecar({"servers": [{"name": "s", "url": app.base_url + "/mcp"}]})
        url = f"http://localhost:{sidecar.port}/mcp/s"
        async with mcp_client(
            url, mode=LEGACY, headers={"origin": f"http://localhost:{sidecar.port}"}
        ) as client:
            result = await client.call_tool("echo", {"text": "hi"})
    assert result.content[0].text == "hi #1"


async def test_a_dead_upstream_gets_502_and_nothing_is_cached(make_sidecar) -> None:
    port = free_port()
    sidecar = make_sidecar(
        {
            "servers": [
                {"name": "dead", "url": f"http://127.0.0.1:{port}/mcp", "cache": {"enabled": True}}
            ]
        }
    )
    for request_id in (1, 2):
        response = await post(
            sidecar.url("dead"), call_body(request_id, "echo", {}), call_headers("echo")
        )
        assert response.status_code == 502
        assert response.json()["id"] == request_id
        assert "'dead' is unreachable" in response.json()["error"]["message"]
    assert len(sidecar.sidecar.cache) == 0
    assert sidecar.sample("mcpcache_upstream_errors_total", server="dead", kind="unreachable") == 2


async def test_a_slow_upstream_gets_504(make_sidecar) -> None:
    peer = Upstream()
    with served(peer.app(json_response=True)) as app:
        sidecar = make_sidecar(one_server(app.base_url + "/mcp", timeout="300ms"))
        gate = uuid.uuid4().hex
        try:
            body = call_body(9, "slow", {"steps": 0, "gate": gate})
            response = await post(sidecar.url("s"), body, call_headers("slow"))
        finally:
            peer.gate(gate).set()
        assert response.status_code == 504
        assert response.json()["error"]["message"] == "MCP server 's' did not answer within 0.3s"
        assert len(sidecar.sidecar.cache) == 0


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example"}, 403),
        ({"origin": "http://evil.example"}, 403),
        # An origin is read as strictly as a host: the authority alone, nothing after.
        ({"origin": "http://localhost:3500.evil"}, 403),
        ({"origin": "http://[::1].evil"}, 403),
        ({"origin": "http://user@localhost"}, 403),
        ({"origin": "http://evil.example@localhost"}, 403),
        ({"origin": "http://localhost/path"}, 403),
        ({"origin": "http://localhost:3500?x"}, 403),
        ({"origin": "localhost"}, 403),
        ({"origin": "null"}, 403),
        ({"origin": "http://localhost:3500"}, 200),
        ({"origin": "HTTP://LOCALHOST"}, 200),
        ({"origin": "http://127.0.0.1:3500"}, 200),
        ({"origin": "http://[::1]:3500"}, 200),
    ],
)
async def test_the_listener_refuses_foreign_hosts_and_origins(sidecar, headers, status) -> None:
    response = await post(
        sidecar.url("json"), call_body(1, "echo", {}), call_headers("echo") | headers
    )
    assert response.status_code == status
    if status == 403:
        assert "not allowed" in response.json()["error"]["message"]


async def test_repeated_response_headers_survive_and_connection_named_ones_do_not(
    make_sidecar,
) -> None:
    peer = Upstream()
    inner = peer.app(json_response=True)

    async def with_cookies(scope, receive, send):
        async def add_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message["headers"],
                    (b"set-cookie", b"lb=one; Path=/"),
                    (b"set-cookie", b"affinity=two; Path=/"),
                    (b"connection", b"x-internal"),
                    (b"x-internal", b"secret-hop"),
                ]
            await send(message)

        await inner(scope, receive, add_headers)

    with served(with_cookies) as app:
        sidecar = make_sidecar({"servers": [{"name": "s", "url": app.base_url + "/mcp"}]})
        response = await post(
            sidecar.url("s"), call_body(1, "echo", {"text": "x"}), call_headers("echo")
        )
    assert response.headers.get_list("set-cookie") == ["lb=one; Path=/", "affinity=two; Path=/"]
    assert "x-internal" not in response.headers
