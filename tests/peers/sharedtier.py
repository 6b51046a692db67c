"""Helpers of the shared-tier tests: a config with the tier on, one call with its
Cache-Status, and waiting for the background writes."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from .clients import call_body, call_headers, post
from .serving import ServedApp, async_wait_until
from .sidecar import RunningSidecar, one_server

SHARED_HIT = "mcpcache; hit; detail=shared"


def new_app() -> str:
    return f"app-{uuid.uuid4().hex[:10]}"


def shared_config(
    app: ServedApp, redis: str | dict[str, Any], app_id: str | None = None, **shared: Any
) -> dict[str, Any]:
    """One cached server on `app`, the shared tier on `redis` (a URL, or the `cluster` or
    `sentinel` block), a fresh app id unless one is given. Redis gets a second per
    operation unless the test says otherwise: the product's 50 ms is for a quiet
    network, not a loaded test machine."""
    document = one_server(app.base_url + "/mcp")
    document["appId"] = app_id or new_app()
    location = redis if isinstance(redis, dict) else {"url": redis}
    document["sharedCache"] = location | {"timeout": "1s", **shared}
    return document


async def call(
    sidecar: RunningSidecar, tool: str, arguments: dict[str, Any], **headers: str
) -> tuple[str, str, dict[str, Any]]:
    """Cache-Status, content type and the JSON-RPC message of one tools/call."""
    response = await post(
        sidecar.url("s"), call_body(7, tool, arguments), call_headers(tool, **headers), 10
    )
    assert response.status_code == 200, response.text
    content_type = response.headers["content-type"]
    if content_type.startswith("text/event-stream"):
        data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        message = json.loads(data[-1])
    else:
        message = response.json()
    return response.headers["cache-status"], content_type, message


def text_of(message: dict[str, Any]) -> str:
    return str(message["result"]["content"][0]["text"])


def stored_in_redis(sidecar: RunningSidecar, count: float = 1) -> Any:
    """Writes to Redis do not delay the answer: wait until they have happened."""
    return async_wait_until(
        lambda: sidecar.sample("mcpcache_shared_stores_total", result="stored") >= count,
        what="the shared tier to store",
    )


def on_loop(sidecar: RunningSidecar, work: Any) -> Any:
    """Run one of the sidecar's own coroutines on its event loop."""
    assert sidecar.sidecar.loop is not None
    return asyncio.run_coroutine_threadsafe(work, sidecar.sidecar.loop).result(10)
