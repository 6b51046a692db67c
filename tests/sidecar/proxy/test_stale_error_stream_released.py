"""A server error whose body streams on, answered from the stale entry (staleIfError):
the sidecar must release the upstream's response it does not read.

The rest of a streamed body goes on in a task started after the head
(`Coalescer.carry_on`); the leader that takes the stale entry detaches at once and the
flight is abandoned. Its task must still run far enough to close the upstream's response,
report the call (metrics, log, span) and end a legacy session's id ticket.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from peers.asgi import read_body
from peers.clients import call_body, call_headers, post, unique
from peers.serving import ServedApp, async_wait_until, past, served
from peers.sidecar import one_server


class FailingStream:
    """Answers its first call with a result; afterwards (`failing`) with a 503 whose
    event-stream body goes on until the sidecar hangs up, which it records."""

    def __init__(self) -> None:
        self.failing = False
        self.hung_up = threading.Event()
        self.calls = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = json.loads(await read_body(receive))
        self.calls += 1
        if not self.failing:
            result = {"content": [{"type": "text", "text": "fine"}]}
            body = json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result})
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body.encode()})
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": b": busy\n\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        self.hung_up.set()


@pytest.fixture
def failing_stream() -> Iterator[tuple[FailingStream, ServedApp]]:
    peer = FailingStream()
    with served(peer, lifespan="off") as app:
        yield peer, app


@pytest.mark.slow
async def test_a_server_errors_stream_answered_from_the_stale_entry_is_released(
    make_sidecar, failing_stream
) -> None:
    peer, app = failing_stream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="1s", staleIfError="1m"))
    arguments = {"text": unique()}
    body, headers = call_body(1, "echo", arguments), call_headers("echo")
    first = await post(sidecar.url("s"), body, headers, seconds=10)
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    await past(time.monotonic() + 1.5)  # the entry expired
    peer.failing = True
    second = await post(sidecar.url("s"), body, headers, seconds=10)
    assert second.status_code == 200
    assert "stale-if-error" in second.headers["cache-status"], second.headers["cache-status"]
    assert peer.calls == 2
    # The 503's stream is nobody's any more: the sidecar closes it and reports the call.
    await async_wait_until(peer.hung_up.is_set, 5, "the sidecar to close the 503's stream")
    await async_wait_until(
        lambda: (
            sidecar.sample(
                "mcpcache_upstream_request_duration_seconds_count", server="s", method="tools/call"
            )
            == 2
        ),
        5,
        "the second upstream call to be reported",
    )
