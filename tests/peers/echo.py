"""A raw ASGI upstream that answers every `tools/call` with who it thinks is asking.

For what the SDK server cannot be told to do: set cookies, `Vary` and `Cache-Control`
on an answer, answer with a task handle, or stream one enormous event. The tool's
arguments choose the answer's extra headers (`respond_headers`), its result shape
(`result`, or `result_json` for JSON text put in as it is; `error` for a JSON-RPC error
response instead), its HTTP status (`status`), a gate to wait on (`hold`) and, for
`huge_event`, the size of a single event-stream event it streams; `notify`, notifications
(JSON-RPC objects) streamed as events before the answer, which then ends the stream.
Every request's headers are recorded. An `initialize` opens a legacy session bound to
the user it named, as a server that authenticates only at `initialize` does: its
`Authorization`, else a gateway's `X-User`, else its query string. A call in that
session is answered for that user (`bound_to`) whatever it sends.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from .asgi import headers_of, read_body

IDENTITY = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "x-auth-token",
    "x-tenant-id",
    "mcp-session-id",
)


class EchoUpstream:
    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        """Each request's headers, in order (lower-case names; repeats joined)."""
        self.gates: dict[str, threading.Event] = {}
        """An answer whose arguments name a gate (`hold`) waits until the test opens it."""
        self.bound: dict[str, str | None] = {}
        """The user each session `initialize` opened is bound to."""

    def gate(self, name: str) -> threading.Event:
        return self.gates.setdefault(name, threading.Event())

    @property
    def calls(self) -> int:
        return len(self.seen)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = headers_of(scope)
        self.seen.append(headers)
        request = json.loads(body) if body else {}
        if request.get("method") == "initialize":
            query = scope["query_string"].decode("latin-1")
            user = headers.get("authorization") or headers.get("x-user") or query or None
            await self._initialize(send, request.get("id"), user)
            return
        arguments = request.get("params", {}).get("arguments", {})
        extra = [(k.encode(), v.encode()) for k, v in arguments.get("respond_headers", [])]
        if "hold" in arguments:
            await asyncio.to_thread(self.gate(arguments["hold"]).wait, 10)
        if "huge_event" in arguments:
            lines = bool(arguments.get("in_lines"))
            await self._huge_event(send, request.get("id"), int(arguments["huge_event"]), lines)
            return
        who = {name: headers.get(name) for name in (*IDENTITY, "mcp-protocol-version")}
        who["bound_to"] = self.bound.get(headers.get("mcp-session-id") or "")
        text = json.dumps({"who": who, "arguments": arguments, "call": self.calls})
        result = arguments.get("result") or {"content": [{"type": "text", "text": text}]}
        answer = json.dumps({"jsonrpc": "2.0", "id": request.get("id"), "result": result})
        if "result_json" in arguments:  # a result given as JSON text, numbers as written
            answer = answer.replace(json.dumps(result), arguments["result_json"])
        if "error" in arguments:  # a JSON-RPC error response (HTTP 200, as servers send it)
            answer = json.dumps(
                {"jsonrpc": "2.0", "id": request.get("id"), "error": arguments["error"]}
            )
        body = answer.encode()
        content_type = b"application/json"
        if "notify" in arguments:
            content_type = b"text/event-stream"
            events = [*(json.dumps(n) for n in arguments["notify"]), answer]
            body = b"".join(b"event: message\ndata: " + e.encode() + b"\n\n" for e in events)
        await send(
            {
                "type": "http.response.start",
                "status": int(arguments.get("status", 200)),
                "headers": [(b"content-type", content_type), *extra],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _initialize(self, send: Any, request_id: Any, user: str | None) -> None:
        session = f"bound-{len(self.bound)}"
        self.bound[session] = user
        result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}
        answer = {"jsonrpc": "2.0", "id": request_id, "result": result}
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"mcp-session-id", session.encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(answer).encode()})

    async def _huge_event(self, send: Any, request_id: Any, size: int, in_lines: bool) -> None:
        """One event-stream event of `size` bytes, made and sent 64 KiB at a time: one
        `data` line, or (`in_lines`) a `data` line per 64 KiB."""
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        head = b'event: message\ndata: {"jsonrpc":"2.0","id":' + json.dumps(request_id).encode()
        head += b',"result":{"content":[{"type":"text","text":"'
        await send({"type": "http.response.body", "body": head, "more_body": True})
        chunk = b"x" * (64 << 10) + (b"\ndata: " if in_lines else b"")
        for _ in range(size >> 16):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b'"}]}}\n\n'})


def who_answered(response_json: dict[str, Any]) -> dict[str, Any]:
    """The `{"who", "arguments", "call"}` an `EchoUpstream` answer carries."""
    decoded: dict[str, Any] = json.loads(response_json["result"]["content"][0]["text"])
    return decoded
