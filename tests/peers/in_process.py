"""A client's `tools/call` driven straight through an ASGI app in the test's own event
loop: its request task can be cancelled, and its client made to leave (`leave`), which
no HTTP client over a socket can do at a chosen moment."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from peers.clients import MODERN, call_body

SECONDS = 10.0
"""Every call driven here has this deadline."""


class InProcessCall:
    """One `tools/call` of the tool `held` to the server `s`, with these arguments."""

    def __init__(self, app: Any, request_id: int, arguments: dict[str, Any]) -> None:
        self.app, self.request_id, self.arguments = app, request_id, arguments
        self.gone = asyncio.Event()
        self.status = 0
        self.parts: list[bytes] = []

    def leave(self) -> None:
        """The client disconnects (the app's next `receive` says so)."""
        self.gone.set()

    async def __call__(self) -> tuple[int, bytes]:
        body = json.dumps(call_body(self.request_id, "held", self.arguments)).encode()
        headers = {
            "host": "127.0.0.1:3500",
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": "tools/call",
            "mcp-name": "held",
        }
        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "path": "/mcp/s",
            "query_string": b"",
            "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 50000 + self.request_id),
        }
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message["type"] == "http.response.body":
                self.parts.append(message.get("body", b""))

        await asyncio.wait_for(self.app(scope, receive, send), SECONDS)
        return self.status, b"".join(self.parts)
