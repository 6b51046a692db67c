"""The MCP server pod's program: an SDK server on port 8000 with an `echo` tool.

`GET /calls` answers how many times each tool ran (JSON), so a test can tell a cache
hit (no run) from a miss without a tool call of its own.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import uvicorn
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

calls: collections.Counter[str] = collections.Counter()
server = MCPServer("docs")


@server.tool()
def echo(text: str) -> str:
    """Return the text, tagged with how many times echo ran."""
    calls["echo"] += 1
    return f"{text} #{calls['echo']}"


sdk = server.streamable_http_app(
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    host="0.0.0.0",
)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == "/calls":
        body = json.dumps(calls).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await sdk(scope, receive, send)


if __name__ == "__main__":
    uvicorn.run(app, host="0.0.0.0", port=8000, log_level="warning")
