"""The two halves of a raw ASGI peer that every hand-written upstream repeats: reading
the whole request body, and answering with one JSON body."""

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


async def send_json(send: Any, payload: Any, headers: list[tuple[bytes, bytes]] = []) -> None:  # noqa: B006
    """A 200 with `payload` as its JSON body (and any extra `headers`)."""
    sent = [(b"content-type", b"application/json"), *headers]
    await send({"type": "http.response.start", "status": 200, "headers": sent})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})
