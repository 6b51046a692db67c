"""A raw ASGI upstream that records exactly what reaches it: each request's bytes, query
string and headers as received. It answers a JSON-RPC request whose body Python reads
with a result naming the call's number and arguments (an error to what it cannot read);
`Authorization` values outside `accepted`, when that is set, get a 401 instead.

For what the SDK server cannot show: the bytes on the wire."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .asgi import headers_of, read_body


@dataclass(frozen=True)
class Received:
    method: str
    query: bytes
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    received: list[Received] = field(default_factory=list)
    accepted: frozenset[str] | None = None
    """When set, only these `Authorization` values are served; others get a 401 (or,
    with `refuse_in_result`, a 200 whose result says `isError`, as servers that pass a
    caller's token on to a backend do)."""
    refuse_in_result: bool = False
    refused_result: dict[str, Any] | None = None
    """The result a refused caller gets with `refuse_in_result` (an `isError` one when
    unset): a sign-in asked for (`input_required`), a task handle, ..."""
    status: int = 200
    """The status of every answer to a request (a 503: the upstream is failing)."""

    @property
    def calls(self) -> int:
        return len(self.received)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        headers = headers_of(scope)
        self.received.append(Received(scope["method"], scope["query_string"], headers, body))
        refused = self.accepted is not None and headers.get("authorization") not in self.accepted
        if refused and not self.refuse_in_result:
            await _send(send, 401, {"error": "unauthorized"})
            return
        if self.status != 200:
            await _send(send, self.status, {"error": "unavailable"})
            return
        try:
            request = json.loads(body)
        except ValueError:
            error = {"code": -32700, "message": "Parse error"}
            await _send(send, 400, {"jsonrpc": "2.0", "id": None, "error": error})
            return
        if not isinstance(request, dict) or "id" not in request or "method" not in request:
            await _send(send, 202, None)
            return
        params = request.get("params")
        said = {"call": self.calls, "params": params}
        result: dict[str, Any] = {"content": [{"type": "text", "text": json.dumps(said)}]}
        if refused:
            result = self.refused_result or {
                "content": [{"type": "text", "text": "backend said 401"}],
                "isError": True,
            }
        await _send(send, 200, {"jsonrpc": "2.0", "id": request["id"], "result": result})


async def _send(send: Any, status: int, payload: Any) -> None:
    body = b"" if payload is None else json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json")] if payload is not None else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def said(response: Any) -> dict[str, Any]:
    """What the recorder said it ran, from its answer through the sidecar."""
    return dict(json.loads(response.json()["result"]["content"][0]["text"]))
