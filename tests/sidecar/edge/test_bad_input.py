"""Bad input: what the sidecar cannot read goes upstream as sent and uncached; what an
intermediary must refuse gets a precise HTTP status and JSON-RPC error; nothing is
cached, nothing breaks."""

from __future__ import annotations

import json

import pytest

from peers.clients import call_body, call_headers, http_client

JSON_HEADERS = call_headers("echo")


def body(value: object) -> bytes:
    return json.dumps(value).encode()


FORWARDED = [
    pytest.param(b"{not json", JSON_HEADERS, "unreadable", id="malformed-json"),
    pytest.param(b'"a string"', JSON_HEADERS, "unreadable", id="non-object"),
    pytest.param(body([call_body(1, "echo", {})]), JSON_HEADERS, "batch", id="batch"),
    pytest.param(
        b'{"id": 1, "method": "tools/call"}', JSON_HEADERS, "unreadable", id="no-jsonrpc-version"
    ),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": 7}',
        JSON_HEADERS,
        "unreadable",
        id="method-not-string",
    ),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": {}, "method": "ping"}',
        JSON_HEADERS,
        "unreadable",
        id="id-object",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xff"}}',
        JSON_HEADERS,
        "unreadable",
        id="invalid-utf8",
    ),
    pytest.param(b"[" * 5000 + b"]" * 5000, JSON_HEADERS, "too-deep", id="deeply-nested"),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",'
        b'"arguments":{"text":NaN}}}',
        JSON_HEADERS,
        "unreadable",
        id="nan-python-reads-and-orjson-does-not",
    ),
    pytest.param(
        body(call_body(1, "echo", {})),
        {**JSON_HEADERS, "content-type": "text/plain"},
        "unreadable",
        id="wrong-content-type",
    ),
    pytest.param(
        body(call_body(1, "echo", {})),
        {k: v for k, v in JSON_HEADERS.items() if k != "content-type"},
        "unreadable",
        id="no-content-type",
    ),
    pytest.param(
        body(call_body(1, "echo", {})),
        {**JSON_HEADERS, "accept": "text/html"},
        "accept",
        id="wrong-accept",
    ),
    pytest.param(
        body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}),
        {k: v for k, v in JSON_HEADERS.items() if k != "mcp-name"},
        "unreadable",
        id="tools-call-without-name",
    ),
    pytest.param(
        body({"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {}}),
        {k: v for k, v in JSON_HEADERS.items() if k not in ("mcp-name", "mcp-method")},
        "unreadable",
        id="resources-read-without-uri",
    ),
    pytest.param(
        body({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": None}),
        {k: v for k, v in JSON_HEADERS.items() if k != "mcp-name"},
        "unreadable",
        id="params-null",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","Name":"x"}}',
        JSON_HEADERS,
        "ambiguous-name",
        id="name-twice-case-aside",
    ),
    pytest.param(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","Method":"x","params":{"name":"echo"}}',
        JSON_HEADERS,
        "ambiguous-name",
        id="json-rpc-member-twice-case-aside",
    ),
]
"""What the sidecar cannot read with certainty: forwarded as sent, answered by the
upstream (here as the upstream answers it directly), never stored."""


@pytest.mark.parametrize(("content", "headers", "detail"), FORWARDED)
async def test_what_the_sidecar_cannot_read_is_answered_as_directly_and_stores_nothing(
    sidecar, json_upstream, content: bytes, headers: dict[str, str], detail: str
) -> None:
    peer, app = json_upstream
    posts = peer.http["POST"]
    async with http_client() as http:
        direct = await http.post(app.base_url + "/mcp", content=content, headers=headers)
        response = await http.post(sidecar.url("json"), content=content, headers=headers)
        assert peer.http["POST"] == posts + 2
        assert (response.status_code, response.content) == (direct.status_code, direct.content)
        assert response.headers["cache-status"] == f"mcpcache; fwd=request; detail={detail}"
        assert len(sidecar.sidecar.cache) == 0
        healthy = await http.post(
            sidecar.url("json"), json=call_body(2, "echo", {"text": "ok"}), headers=JSON_HEADERS
        )
        assert healthy.status_code == 200


REFUSED = [
    pytest.param(
        body(call_body(1, "echo", {})),
        {**JSON_HEADERS, "mcp-method": "tools/list"},
        400,
        -32020,
        id="mcp-method-disagrees-with-the-body",  # the transport: MUST reject, -32020
    ),
    pytest.param(
        body(call_body(1, "echo", {})),
        {**JSON_HEADERS, "mcp-name": "other"},
        400,
        -32020,
        id="mcp-name-disagrees-with-the-body",  # the transport: MUST reject, -32020
    ),
]
"""What the sidecar itself refuses, each for the rule that makes an intermediary refuse
it (the size and header limits, which protect the sidecar, are tested below)."""


@pytest.mark.parametrize(("content", "headers", "status", "code"), REFUSED)
async def test_what_the_specification_makes_an_intermediary_refuse_is_refused_precisely(
    sidecar, json_upstream, content: bytes, headers: dict[str, str], status: int, code: int
) -> None:
    peer, _ = json_upstream
    posts = peer.http["POST"]
    async with http_client() as http:
        response = await http.post(sidecar.url("json"), content=content, headers=headers)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] == code
    assert peer.http["POST"] == posts
    assert len(sidecar.sidecar.cache) == 0


async def test_a_body_over_the_limit_gets_413(make_sidecar, json_upstream) -> None:
    _, app = json_upstream
    sidecar = make_sidecar(
        {"maxRequestBytes": "1Ki", "servers": [{"name": "s", "url": app.base_url + "/mcp"}]}
    )
    big = call_body(1, "echo", {"text": "x" * 2000})
    async with http_client() as http:
        response = await http.post(sidecar.url("s"), json=big, headers=JSON_HEADERS)

        async def chunks():
            yield json.dumps(big).encode()

        streamed = await http.post(sidecar.url("s"), content=chunks(), headers=JSON_HEADERS)
    for answer in (response, streamed):
        assert answer.status_code == 413
        assert answer.json()["error"]["message"] == "request body exceeds the limit of 1024 bytes"


async def test_oversized_headers_get_431(sidecar) -> None:
    async with http_client() as http:
        response = await http.post(
            sidecar.url("json"),
            json=call_body(1, "echo", {}),
            headers=JSON_HEADERS | {"x-huge": "y" * 200_000},
        )
    assert response.status_code == 431
    assert response.json()["error"]["message"] == "request headers exceed the limit of 65536 bytes"
    async with http_client() as http:
        assert (await http.get(f"{sidecar.metrics_url}/healthz")).status_code == 200


async def test_unknown_methods_are_forwarded_and_their_errors_not_cached(
    sidecar, json_upstream
) -> None:
    async with http_client() as http:
        for request_id in (1, 2):
            payload = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "tools/frobnicate",
                "params": {},
            }
            headers = JSON_HEADERS | {"mcp-method": "tools/frobnicate"}
            response = await http.post(sidecar.url("json"), json=payload, headers=headers)
            assert response.json().get("error") is not None
    assert len(sidecar.sidecar.cache) == 0
    assert (
        sidecar.sample("mcpcache_requests_total", server="json", method="other", outcome="bypass")
        == 2
    )
