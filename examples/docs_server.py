"""A small MCP server to put the sidecar in front of: a slow, metered docs search.

Run it alone with `python examples/docs_server.py --port 8000`; the demo starts it itself.
"""

from __future__ import annotations

import argparse
import time

import uvicorn
from mcp.server import MCPServer

PAGES = {
    "caching": "Enable caching per server with spec.cache.enabled; entries live for ttl.",
    "ttl": "ttl defaults to 30s. A shorter ttl keeps answers fresher at the cost of more calls.",
    "maxSize": "maxSize caps one stored response (default 64Ki); above 1Mi it is clamped.",
}

server = MCPServer("docs")
searches = 0


@server.tool()
def search_docs(query: str) -> str:
    """Search the product docs. Each call costs 300 ms and one unit of quota."""
    global searches
    searches += 1
    time.sleep(0.3)
    hits = [f"{title}: {text}" for title, text in PAGES.items() if query.lower() in text.lower()]
    return "\n".join(hits) or "no match"


@server.tool()
def quota_used() -> int:
    """How many searches this server has run (never cache this one in real life)."""
    return searches


def app() -> object:
    return server.streamable_http_app()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    uvicorn.run(app(), host="127.0.0.1", port=args.port, log_level="warning")
