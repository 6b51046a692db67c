"""MCP SDK clients pointed at the sidecar, in either protocol era."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import httpx2
from httpx_sse import EventSource
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

MODERN = "2026-07-28"
LEGACY = "legacy"


CALL_SECONDS = 10.0
"""How long an SDK client waits for any one answer by default. A lost or misrouted answer
(a wrong JSON-RPC id, a stream that never ends) then fails its test within this, naming
the call, long before pytest's own timeout."""


TRUST = httpx.create_ssl_context()
"""httpx's default trust (certifi's roots), built once. Each client otherwise builds its
own, 30 ms on a 2-core machine, a thousand times a run; the suite's traffic is plain HTTP
on loopback, and a client given this one verifies exactly as it would by default."""

TRUST2 = httpx2.create_ssl_context()
"""The same for the SDK client's httpx2."""


def http_client(**kw: Any) -> httpx.AsyncClient:
    """An httpx client as `httpx.AsyncClient(**kw)` makes it, sharing `TRUST`."""
    return httpx.AsyncClient(verify=TRUST, **kw)


def http_get(url: str, **kw: Any) -> httpx.Response:
    """One `httpx.get`, sharing `TRUST`."""
    return httpx.get(url, verify=TRUST, **kw)


def mcp_client(
    url: str, mode: str = MODERN, headers: dict[str, str] | None = None, **kw: Any
) -> Client:
    """An SDK client with its own response cache off, so every call reaches the sidecar,
    and a deadline on every request (`read_timeout_seconds`, `CALL_SECONDS` unless given)."""
    http = httpx2.AsyncClient(
        headers=headers or {}, timeout=httpx2.Timeout(30, read=60), verify=TRUST2
    )
    kw.setdefault("read_timeout_seconds", CALL_SECONDS)
    return Client(streamable_http_client(url, http_client=http), mode=mode, cache=None, **kw)


def modern_request(
    request_id: Any, method: str, params: dict[str, Any], **meta: Any
) -> dict[str, Any]:
    """A modern (2026-07-28) request body with the `_meta` envelope the SDK client sends."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        **meta,
    }
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": method,
        "params": {**params, "_meta": envelope},
    }


def call_body(request_id: Any, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """A modern (2026-07-28) tools/call body, as the SDK client would send it."""
    return modern_request(request_id, "tools/call", {"name": name, "arguments": arguments}, **meta)


def read_body(request_id: Any, uri: str) -> dict[str, Any]:
    """A modern (2026-07-28) resources/read body, as the SDK client would send it."""
    return modern_request(request_id, "resources/read", {"uri": uri})


def text_of(result: Any) -> str:
    """The first text content of a tool result an SDK client returned."""
    return str(result.content[0].text)


def call_headers(name: str, method: str = "tools/call", **extra: str) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
        "mcp-name": name,
        **extra,
    }


async def post(
    url: str,
    body: object,
    headers: dict[str, str] | None = None,
    seconds: float = 30,
) -> httpx.Response:
    """One raw POST (for what the SDK client cannot be made to send), with a deadline."""
    async with http_client(timeout=seconds) as http:
        return await http.post(url, content=json.dumps(body).encode(), headers=headers or {})


def sse_messages(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a read event-stream response, parsed by httpx-sse.

    Events whose data is not JSON (a broken upstream's half-event) are left out.
    """
    messages = []
    for event in EventSource(response).iter_sse():
        try:
            messages.append(json.loads(event.data))
        except json.JSONDecodeError:
            continue
    return messages


async def call_tool(
    url: str, tool: str, arguments: dict[str, Any], request_id: Any = 1, **headers: str
) -> httpx.Response:
    """One raw modern tools/call (so that its `Cache-Status` can be read; extra `headers`
    as keyword arguments), with a deadline."""
    return await post(url, call_body(request_id, tool, arguments), call_headers(tool, **headers))


async def ask(
    url: str, method: str, request_id: Any = 1, credential: str | None = None, **params: Any
) -> httpx.Response:
    """One raw modern request of any other method (a list, `resources/read`), as the SDK
    client sends it; `credential`: its `Authorization`."""
    headers = call_headers(params["uri"], method) if "uri" in params else call_headers("", method)
    if "uri" not in params:
        del headers["mcp-name"]
    if credential:
        headers["authorization"] = credential
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    body["params"] = {**params, "_meta": envelope}
    return await post(url, body, headers)


async def introduce(
    url: str,
    credential: str,
    tool: str | None = None,
    arguments: dict[str, Any] | None = None,
    uri: str | None = None,
) -> None:
    """One raw call of `tool` (or one read of `uri`) the upstream answers with a result
    for `credential`: from then on the sidecar answers that authorization context (these
    headers, no query string, no session) from entries for every caller of that tool (or
    method). It answers them only to contexts the upstream answered lately for the same
    tool."""
    if tool is not None:
        body = call_body("introduce", tool, arguments or {})
        response = await post(url, body, call_headers(tool, authorization=credential))
    else:
        response = await ask(url, "resources/read", "introduce", credential, uri=uri)
    assert response.status_code == 200, response.text
    assert "result" in response.json(), response.text
    assert response.json()["result"].get("isError") is not True, response.text


def first_text(response: httpx.Response) -> str:
    """The first text item of a JSON answer's result."""
    text: str = response.json()["result"]["content"][0]["text"]
    return text


def answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a read response, whether JSON or an event stream (its
    last message)."""
    if response.headers.get("content-type", "").startswith("application/json"):
        message: dict[str, Any] = response.json()
        return message
    return sse_messages(response)[-1]


def unique() -> str:
    """A fresh name: for arguments no other test sends, sessions, gates."""
    return uuid.uuid4().hex


CACHE_META = ("io.mcpcache/age", "io.mcpcache/storedAt")


def as_upstream_said(result: dict[str, Any]) -> dict[str, Any]:
    """A result from the cache without what the cache adds to it (the answer's age and
    storage time in `_meta`), for comparing with the upstream's own answer."""
    rest = {k: v for k, v in result.items() if k != "_meta"}
    meta = {k: v for k, v in result.get("_meta", {}).items() if k not in CACHE_META}
    return {**rest, "_meta": meta} if meta else rest
