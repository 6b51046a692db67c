"""The peers a benchmark measures against, each run as its own process.

`upstream`: an official MCP SDK server (stateless JSON answers) with the tools the
benchmarks call. `ceiling`: a minimal ASGI app under the same uvicorn settings that
answers every POST with fixed bytes, the most any Python HTTP server here can do.
`forwarder`: a minimal ASGI app that forwards every POST to one URL with the same HTTP
client the sidecar uses and relays the answer as it streams, with nothing else (no
parsing, no cache): the least any proxy on this stack adds to a miss.
`least-cache`: a minimal ASGI app that does the least any caching proxy must do to
answer a hit, and nothing more: find the caller's credential and protocol version among
the headers, read and parse the body, key the call on its method, params and the hashed
credential, look the key up and check that the entry is fresh, and frame the result under
the caller's id. No checks, no metrics, no `Cache-Status`: what is left of the ceiling
once a cache lookup is made, the headroom any caching proxy here has for the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvicorn
import uvloop
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from mcpcache.sidecar.edge.listener import uvicorn_config

PAYLOAD = "p" * 4096


def upstream_app(json_response: bool) -> Any:
    server = MCPServer("bench")

    @server.tool()
    def payload(key: str) -> str:
        """A 4 KiB answer."""
        return PAYLOAD

    @server.tool()
    def blob(key: str, size: int) -> str:
        return "b" * size

    @server.tool()
    async def slow(key: str) -> str:
        """A 4 KiB answer after 50 ms of (simulated) work."""
        await asyncio.sleep(0.05)
        return PAYLOAD

    @server.tool()
    async def first_progress(key: str, ctx: Context) -> str:
        """Progress at once, the answer 20 ms later."""
        await ctx.report_progress(1, 2, "started")
        await asyncio.sleep(0.02)
        return "done"

    return server.streamable_http_app(json_response=json_response)


def ceiling_app(body: bytes) -> Any:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


_SHA256 = hashlib.sha256()


def _digest(data: bytes) -> str:
    copy = _SHA256.copy()
    copy.update(data)
    return copy.hexdigest()


async def _whole_body(receive: Any) -> bytes:
    parts, more = [], True
    while more:
        message = await receive()
        parts.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(parts)


def _least_key(headers: list[tuple[bytes, bytes]], call: dict[str, Any]) -> str:
    """What any cache keys a call on: its method and params, the hashed credential and
    the protocol version."""
    credential = version = b""
    for name, value in headers:
        if name == b"authorization":
            credential = value
        elif name == b"mcp-protocol-version":
            version = value
    material = {
        "method": call["method"],
        "params": call["params"],
        "caller": _digest(credential) if credential else "",
        "protocol": version.decode("latin-1"),
    }
    return _digest(orjson.dumps(material, option=orjson.OPT_SORT_KEYS))


def least_cache_app(answer: bytes) -> Any:
    """Answers every call with the `result` of `answer` (a whole JSON-RPC response)."""
    result = orjson.dumps(orjson.loads(answer)["result"])
    store: dict[str, tuple[float, bytes]] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        call = orjson.loads(await _whole_body(receive))
        key = _least_key(scope["headers"], call)
        now = time.monotonic()
        entry = store.get(key)
        if entry is None or entry[0] <= now:
            entry = store[key] = (now + 3600, result)  # the benchmark's one miss
        framed = b'{"jsonrpc":"2.0","id":%b,"result":%b}' % (orjson.dumps(call["id"]), entry[1])
        response = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(framed)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": response})
        await send({"type": "http.response.body", "body": framed})

    return app


def least_cache_miss_app(target: str, entries: int = 1024) -> Any:
    """A miss as the least caching proxy must take it, on the bare forwarder's client:
    key the call as `least_cache_app` does, forward it, read the whole answer, parse it,
    keep its result (at most `entries`, the oldest dropped first) when it answers the
    call's id, and relay the upstream's bytes. No checks, metrics, headers or sharing."""
    return _LeastCacheMiss(target, entries)


class _LeastCacheMiss:
    HOP = frozenset(
        {b"host", b"connection", b"content-length", b"transfer-encoding", b"keep-alive"}
    )
    RELAYED_HOP = HOP - {b"content-length"}

    def __init__(self, target: str, entries: int) -> None:
        self.target = target
        self.entries = entries
        self.store: dict[str, bytes] = {}
        self.client: aiohttp.ClientSession | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await lifespan(receive, send, self.aclose)
            return
        self.client = self.client or aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        body = await _whole_body(receive)
        call = orjson.loads(body)
        key = _least_key(scope["headers"], call)
        sent = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in self.HOP]
        async with self.client.post(self.target, data=body, headers=sent) as response:
            answer, status = await response.read(), response.status
            relayed = [(k, v) for k, v in response.raw_headers if k.lower() not in self.RELAYED_HOP]
        parsed = orjson.loads(answer)
        if status == 200 and parsed.get("id") == call["id"] and "result" in parsed:
            self.store[key] = orjson.dumps(parsed["result"])
            if len(self.store) > self.entries:
                del self.store[next(iter(self.store))]
        await send({"type": "http.response.start", "status": status, "headers": relayed})
        await send({"type": "http.response.body", "body": answer})

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.close()


def forwarder_app(target: str) -> Any:
    session: aiohttp.ClientSession | None = None
    hop = {b"host", b"connection", b"content-length", b"transfer-encoding", b"keep-alive"}

    async def aclose() -> None:
        if session is not None:
            await session.close()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await lifespan(receive, send, aclose)
            return
        if session is None:
            session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        parts, more = [], True
        while more:
            message = await receive()
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in hop]
        async with session.post(target, data=b"".join(parts), headers=headers) as response:
            out = [
                (k, v)
                for k, v in response.raw_headers
                if k.lower() not in hop or k.lower() == b"content-length"
            ]
            await send({"type": "http.response.start", "status": response.status, "headers": out})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

    return app


async def lifespan(receive: Any, send: Any, close: Callable[[], Awaitable[None]]) -> None:
    """ASGI lifespan for the apps above: their client is closed at shutdown."""
    while (await receive())["type"] == "lifespan.startup":
        await send({"type": "lifespan.startup.complete"})
    await close()
    await send({"type": "lifespan.shutdown.complete"})


async def shut_down(app: Any) -> None:
    """Shut an app above down as a server would at exit (its client closed)."""

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.shutdown"}

    async def send(message: dict[str, Any]) -> None:
        pass

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)


def serve(app: Any, port: int) -> None:
    """The same uvicorn settings, event loop and HTTP parser the sidecar uses."""
    uvloop.install()
    server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", port, lifespan="auto"))
    asyncio.run(server.serve())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["upstream", "ceiling", "least-cache", "forwarder"])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--body", type=Path, help="the response the ceiling (least cache) answers")
    parser.add_argument("--sse", action="store_true", help="answer streams (else JSON)")
    parser.add_argument("--target", help="the URL the forwarder sends every POST to")
    args = parser.parse_args()
    if args.kind == "upstream":
        serve(upstream_app(json_response=not args.sse), args.port)
    elif args.kind == "forwarder":
        serve(forwarder_app(args.target), args.port)
    elif args.kind == "least-cache":
        serve(least_cache_app(args.body.read_bytes()), args.port)
    else:
        serve(ceiling_app(args.body.read_bytes()), args.port)
