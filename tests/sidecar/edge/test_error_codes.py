"""The errors the sidecar answers itself: each HTTP status with its JSON-RPC code (the
errors page's table), the configured limits and allowed hosts, and the upstream-error metrics."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from peers.clients import call_body, call_headers, post, sse_messages, unique
from peers.serving import free_port
from peers.sidecar import RunningSidecar, one_server


def assert_error(response: httpx.Response, status: int, code: int, request_id: Any) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["id"] == request_id
    assert body["error"]["code"] == code
    assert body["error"]["message"]


async def test_foreign_host_and_origin_get_403_with_32005(sidecar) -> None:
    for extra in ({"host": "evil.example"}, {"origin": "http://evil.example"}, {"origin": "null"}):
        response = await post(
            sidecar.url("json"), call_body(1, "echo", {}), call_headers("echo") | extra
        )
        assert_error(response, 403, -32005, None)


async def test_an_unknown_server_gets_404_with_32003(sidecar) -> None:
    response = await post(sidecar.url("nope"), call_body(1, "echo", {}), call_headers("echo"))
    assert_error(response, 404, -32003, None)


async def test_a_body_over_the_limit_gets_413_with_32004(make_sidecar, echo_upstream) -> None:
    _, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp") | {"maxRequestBytes": "1Ki"})
    big = call_body(3, "t", {"q": "x" * 2000})
    assert_error(await post(sidecar.url("s"), big, call_headers("t")), 413, -32004, None)


async def test_a_configured_max_header_bytes_is_the_limit_431_with_32004(
    make_sidecar, echo_upstream
) -> None:
    _, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp") | {"maxHeaderBytes": "2Ki"})
    body = call_body(1, "t", {"q": unique()})
    below = await post(sidecar.url("s"), body, call_headers("t", **{"x-pad": "y" * 1024}))
    assert below.status_code == 200, "under the configured limit"
    above = await post(sidecar.url("s"), body, call_headers("t", **{"x-pad": "y" * 3000}))
    assert_error(above, 431, -32004, None)
    assert above.json()["error"]["message"] == "request headers exceed the limit of 2048 bytes"


async def test_a_dead_upstream_gets_502_with_32001_and_is_counted_unreachable(
    make_sidecar,
) -> None:
    sidecar = make_sidecar(one_server(f"http://127.0.0.1:{free_port()}/mcp"))
    response = await post(sidecar.url("s"), call_body(5, "t", {}), call_headers("t"))
    assert_error(response, 502, -32001, 5)
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="unreachable") == 1


async def test_a_silent_upstream_gets_504_with_32002_and_is_counted_timeout(
    make_sidecar, echo_upstream
) -> None:
    peer, app = echo_upstream
    document = one_server(app.base_url + "/mcp")
    document["servers"][0]["timeout"] = "300ms"
    sidecar = make_sidecar(document)
    gate = unique()
    try:
        response = await post(
            sidecar.url("s"), call_body(6, "t", {"hold": gate}), call_headers("t")
        )
    finally:
        peer.gate(gate).set()
    assert_error(response, 504, -32002, 6)
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="timeout") == 1
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="unreachable") == 0


async def test_a_body_that_breaks_gets_502_with_32001_and_is_counted_broken(
    make_sidecar, faulty_upstream
) -> None:
    sidecar = make_sidecar(one_server(faulty_upstream.url("cut-json")))
    response = await post(sidecar.url("s"), call_body(7, "t", {}), call_headers("t"))
    assert_error(response, 502, -32001, 7)
    assert "failed mid-response" in response.json()["error"]["message"]
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="broken") == 1
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason="incomplete") == 1


async def test_a_resumable_stream_that_ends_early_gets_no_error_event(
    make_sidecar, faulty_upstream
) -> None:
    """A stream that carried event ids may be resumed by the client: the sidecar must
    not end the call for it with an error of its own."""
    sidecar = make_sidecar(one_server(faulty_upstream.url("resumable-end")))
    response = await post(sidecar.url("s"), call_body(8, "t", {}), call_headers("t"))
    assert response.status_code == 200
    messages = sse_messages(response)
    assert [m.get("method") for m in messages] == ["notifications/progress"]
    assert not any("error" in m for m in messages)
    unresumable = make_sidecar(one_server(faulty_upstream.url("truncated-event")))
    cut = await post(unresumable.url("s"), call_body(9, "t", {}), call_headers("t"))
    assert sse_messages(cut)[-1]["error"]["code"] == -32001, "without ids, it does"


@pytest.mark.parametrize("allowed", ["agent.example", "AGENT.example"])
async def test_allowed_hosts_are_accepted_besides_loopback(
    make_sidecar, echo_upstream, allowed: str
) -> None:
    _, app = echo_upstream
    sidecar: RunningSidecar = make_sidecar(
        one_server(app.base_url + "/mcp") | {"allowedHosts": [allowed]}
    )
    body = call_body(1, "t", {"q": unique()})
    for extra in (
        {"host": f"agent.example:{sidecar.port}"},
        {"origin": "http://agent.example"},
        {"host": "127.0.0.1"},
    ):
        response = await post(sidecar.url("s"), body, call_headers("t") | extra)
        assert response.status_code == 200, extra
    for extra in ({"host": "other.example"}, {"origin": "https://other.example"}):
        response = await post(sidecar.url("s"), body, call_headers("t") | extra)
        assert_error(response, 403, -32005, None)
