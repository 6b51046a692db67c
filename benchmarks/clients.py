"""The forward client, chosen by measurement: sequential POSTs of one small JSON body to
a minimal ASGI app on loopback, from one process on uvloop, as the sidecar sends them.

Run on its own (`python benchmarks/clients.py URL`) it prints p50/p99 per client; the
benchmark suite runs it against the minimal ASGI app it starts.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx
import uvloop

from mcpcache.sidecar.upstream.client import UpstreamClient

BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{}}}'
HEADERS = [("content-type", "application/json"), ("accept", "application/json")]


async def _timed(calls: int, send: Callable[[], Awaitable[None]]) -> list[float]:
    for _ in range(50):
        await send()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        await send()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def _httpx(url: str, calls: int) -> list[float]:
    async with httpx.AsyncClient() as client:

        async def send() -> None:
            request = client.build_request("POST", url, headers=HEADERS, content=BODY)
            response = await client.send(request, stream=True)
            await response.aread()
            await response.aclose()

        return await _timed(calls, send)


async def _aiohttp_raw(url: str, calls: int) -> list[float]:
    async with aiohttp.ClientSession() as session:

        async def send() -> None:
            async with session.post(url, headers=HEADERS, data=BODY) as response:
                await response.read()

        return await _timed(calls, send)


async def _sidecar_client(url: str, calls: int) -> list[float]:
    """The sidecar's own `UpstreamClient` (aiohttp underneath), as the proxy uses it."""
    client = UpstreamClient()

    async def send() -> None:
        response = await client.open("POST", url, list(HEADERS), BODY, 30.0, 30.0)
        async for _ in response.chunks():
            pass
        response.close()

    try:
        return await _timed(calls, send)
    finally:
        await client.aclose()


CLIENTS = {"httpx": _httpx, "aiohttp": _aiohttp_raw, "sidecar UpstreamClient": _sidecar_client}


def compare(url: str, calls: int) -> dict[str, dict[str, float]]:
    """p50/p99 in ms per client, each measured in a fresh event loop."""
    results = {}
    for name, run in CLIENTS.items():
        times = uvloop.run(run(url, calls))
        cuts = statistics.quantiles(times, n=100, method="inclusive")
        results[name] = {"p50_ms": cuts[49], "p99_ms": cuts[98]}
    return results


if __name__ == "__main__":
    print(json.dumps(compare(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2000)))
