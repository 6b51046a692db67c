"""The agent pod's MCP client, run with `kubectl exec`: python agent.py SERVER TEXT CALLS

Calls the tool `echo` CALLS times with TEXT through the sidecar ($MCPCACHE_URL/SERVER)
and prints one JSON object: each call's text and the `Cache-Status` and `Age` headers
its HTTP response carried, and the server's tool runs before and after (from UPSTREAM,
the server's base URL, when given).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main(server: str, text: str, count: int, upstream: str | None) -> dict[str, Any]:
    headers: list[dict[str, str | None]] = []

    async def record(response: httpx2.Response) -> None:
        if response.request.headers.get("mcp-method") == "tools/call":
            headers.append(
                {"cache_status": response.headers.get("cache-status"),
                 "age": response.headers.get("age")}
            )  # fmt: skip

    async def runs() -> int | None:
        if not upstream:
            return None
        async with httpx2.AsyncClient(timeout=10) as plain:
            return int((await plain.get(f"{upstream}/calls")).json().get("echo", 0))

    before = await runs()
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30), event_hooks={"response": [record]})
    url = f"{os.environ['MCPCACHE_URL']}/{server}"
    texts = []
    async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
        for _ in range(count):
            result = await client.call_tool("echo", {"text": text})
            texts.append(result.content[0].text)
    return {"texts": texts, "headers": headers, "runs_before": before, "runs_after": await runs()}


if __name__ == "__main__":
    upstream = sys.argv[4] if len(sys.argv) > 4 else None
    outcome = asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), upstream))
    print(json.dumps(outcome))
