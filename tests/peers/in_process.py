"""A client's `tools/call` driven straight through an ASGI app in the test's own event
loop: its request task can be cancelled, and its client made to leave (`leave`), which
no HTTP client over a socket can do at a chosen moment."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from mcpcache.sidecar.app.assembly import Sidecar
from mcpcache.sidecar.config import parse_config
from peers.clients import MODERN, call_body

SECONDS = 10.0
"""Every call driven here has this deadline."""


class HeadFailed(OSError):
    """What the server's `send` raises for a call whose head cannot go out."""


class InProcessCall:
    """One `tools/call` of the tool `held` to the server `s`, with these arguments."""

    def __init__(
        self, app: Any, request_id: int, arguments: dict[str, Any], head_fails: bool = False
    ) -> None:
        self.app, self.request_id, self.arguments = app, request_id, arguments
        self.head_fails = head_fails
        """Sending the response's head fails (the server's `send` raises `HeadFailed`)."""
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
                if self.head_fails:
                    raise HeadFailed("the connection broke as the head went out")
                self.status = message["status"]
            elif message["type"] == "http.response.body":
                self.parts.append(message.get("body", b""))

        await asyncio.wait_for(self.app(scope, receive, send), SECONDS)
        return self.status, b"".join(self.parts)


class InProcessSidecar:
    """A sidecar's proxy app, driven through its ASGI interface in this event loop."""

    def __init__(self, url: str, cache: bool = True) -> None:
        server = {"name": "s", "url": url, "cache": {"enabled": cache}}
        config = parse_config(json.dumps({"servers": [server]}))
        self.sidecar = Sidecar(lambda: config)
        self.app = self.sidecar.proxy_app()

    @property
    def coalescer(self) -> Any:
        return self.sidecar.proxy.coalescer

    def flight_progress(self) -> int:
        """Bytes the upstream sent to the flights in progress (-1: no headers yet)."""
        return max((f.progress() for f in self.coalescer._by_key.values()), default=-1)

    async def call(
        self, request_id: int, arguments: dict[str, Any], head_fails: bool = False
    ) -> tuple[int, bytes]:
        return await InProcessCall(self.app, request_id, arguments, head_fails)()

    async def aclose(self) -> None:
        await self.sidecar.proxy.aclose()
        await self.sidecar.client.aclose()


@contextlib.asynccontextmanager
async def in_process_sidecar(url: str, cache: bool = True) -> AsyncIterator[InProcessSidecar]:
    sidecar = InProcessSidecar(url, cache)
    try:
        yield sidecar
    finally:
        await sidecar.aclose()
