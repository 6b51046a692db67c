"""What every hand-written raw ASGI upstream repeats: reading the whole request body
and its headers, and answering with one JSON body."""

from __future__ import annotations

import json
from typing import Any


async def read_body(receive: Any) -> bytes:
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    return body


def headers_of(scope: Any) -> dict[str, str]:
    """A request's headers by lower-case name, repeated ones joined with ", "."""
    headers: dict[str, str] = {}
    for key, value in scope["headers"]:
        name, text = key.decode("latin-1"), value.decode("latin-1")
        headers[name] = f"{headers[name]}, {text}" if name in headers else text
    return headers


async def send_json(send: Any, payload: Any, headers: list[tuple[bytes, bytes]] = []) -> None:  # noqa: B006
    """A 200 with `payload` as its JSON body (and any extra `headers`)."""
    sent = [(b"content-type", b"application/json"), *headers]
    await send({"type": "http.response.start", "status": 200, "headers": sent})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})
