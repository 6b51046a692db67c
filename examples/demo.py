"""The one-machine demo: an MCP client, the mcpcache sidecar, and an MCP server.

Starts the bundled docs server, starts `mcpcache sidecar` in front of it, asks the same
question three times through the sidecar with the official MCP client, and shows what
the cache did: timings, the Cache-Status header, the upstream's own call count, and the
sidecar's /metrics.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).parent))
import docs_server


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_docs_server(port: int) -> uvicorn.Server:
    config = uvicorn.Config(docs_server.app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    wait_for(lambda: server.started, "the docs server")
    return server


def wait_for(condition, what: str, limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def ready(url: str) -> bool:
    try:
        return httpx.get(url).status_code == 200
    except httpx.HTTPError:
        return False


async def ask_three_times(url: str) -> None:
    statuses: list[str] = []

    async def remember(response: httpx2.Response) -> None:
        if response.request.headers.get("mcp-method") == "tools/call":
            statuses.append(response.headers.get("cache-status", "-"))

    http = httpx2.AsyncClient(event_hooks={"response": [remember]})
    async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
        for attempt in range(1, 4):
            statuses.clear()
            started = time.perf_counter()
            result = await client.call_tool("search_docs", {"query": "ttl"})
            elapsed = (time.perf_counter() - started) * 1000
            answer = result.content[0].text.splitlines()[0]
            print(
                f"call {attempt}: {elapsed:7.1f} ms  Cache-Status: {statuses[-1]:<28} {answer[:50]}"
            )


def main() -> int:
    logging.getLogger().setLevel(logging.WARNING)
    upstream_port, listen_port, metrics_port = free_port(), free_port(), free_port()
    start_docs_server(upstream_port)
    config = (
        "appId: demo-agent\n"
        "servers:\n"
        "  - name: docs\n"
        f"    url: http://127.0.0.1:{upstream_port}/mcp\n"
        "    cache: {enabled: true, ttl: 60s, maxSize: 256Ki}\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sidecar.yaml"
        path.write_text(config)
        env = os.environ | {
            "MCPCACHE_LISTEN_PORT": str(listen_port),
            "MCPCACHE_METRICS_PORT": str(metrics_port),
        }
        sidecar = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mcpcache.sidecar.cli",
                "sidecar",
                "--config",
                str(path),
                "--log-level",
                "WARNING",
            ],
            env=env,
        )
        try:
            metrics = f"http://127.0.0.1:{metrics_port}"
            wait_for(lambda: ready(f"{metrics}/readyz"), "the sidecar")
            print(f"sidecar on :{listen_port} -> docs MCP server on :{upstream_port}\n")
            asyncio.run(ask_three_times(f"http://127.0.0.1:{listen_port}/mcp/docs"))
            print(f"\nupstream searches actually run: {docs_server.searches}")
            print("\nfrom the sidecar's /metrics:")
            for line in httpx.get(f"{metrics}/metrics").text.splitlines():
                if line.startswith(
                    ("mcpcache_requests_total", "mcpcache_cache_entries", "mcpcache_cache_bytes ")
                ):
                    print("  " + line)
        finally:
            sidecar.terminate()
            sidecar.wait(10)
    return 0 if docs_server.searches == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
