"""The forwarded answers' ASGI side: what goes on the wire for a whole body, and a
streamed body that ends when its client leaves, even while the upstream sends nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from mcpcache.sidecar.edge.forwarded import ForwardedResponse, StreamedResponse


async def run(response: Any, receive: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(response({"type": "http"}, receive, send), 10)
    return sent


async def nothing_more() -> dict[str, Any]:
    await asyncio.Event().wait()  # the client neither sends nor leaves
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    ("status", "length"),
    [(200, b"7"), (404, b"7"), (204, None), (304, None)],
)
async def test_a_whole_body_carries_its_length_unless_the_status_forbids_one(
    status: int, length: bytes | None
) -> None:
    body = b"" if length is None else b'{"a":1}'
    response = ForwardedResponse(status, [("x-up", "1")], "mcpcache; fwd=miss", body)
    start, end = await run(response, nothing_more)
    headers = dict(start["headers"])
    assert start["status"] == status
    assert headers.get(b"content-length") == length
    assert headers[b"x-up"] == b"1"
    assert headers[b"cache-status"] == b"mcpcache; fwd=miss"
    assert end == {"type": "http.response.body", "body": body}


async def test_a_stream_ends_and_closes_its_body_when_the_client_leaves() -> None:
    closed = asyncio.Event()
    started = asyncio.Event()

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            yield b"data: 1\n\n"
            started.set()
            await asyncio.Event().wait()  # the upstream sends nothing more
            yield b"never"
        finally:
            closed.set()

    async def receive() -> dict[str, Any]:
        await started.wait()
        return {"type": "http.disconnect"}

    response = StreamedResponse(200, [], "mcpcache; fwd=miss", body())
    sent = await run(response, receive)
    assert closed.is_set()
    assert [m.get("body") for m in sent[1:]] == [b"data: 1\n\n"]


async def test_a_stream_that_ends_sends_its_last_chunk_and_closes() -> None:
    async def body() -> AsyncGenerator[bytes, None]:
        yield b"a"
        yield b"b"

    sent = await run(StreamedResponse(200, [], "s", body()), nothing_more)
    assert [m.get("body") for m in sent[1:]] == [b"a", b"b", b""]
    assert sent[-1].get("more_body", False) is False
    assert b"content-length" not in dict(sent[0]["headers"])


class HeadFailed(OSError):
    pass


async def fails_at_head(message: dict[str, Any]) -> None:
    if message["type"] == "http.response.start":
        raise HeadFailed("the connection broke as the head went out")


@pytest.mark.parametrize("cleanup_fails", [False, True])
async def test_a_stream_whose_head_fails_tells_its_maker_once_and_keeps_the_error(
    cleanup_fails: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A generator never started runs none of its own cleanup: whoever made it is told
    (once, and never after it started); a fault there is logged, not raised in place
    of the head's own failure."""
    ran: list[str] = []

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            yield b"a"
        finally:
            ran.append("own cleanup")

    def unread() -> None:
        ran.append("unread")
        if cleanup_fails:
            raise RuntimeError("cleanup failed")

    response = StreamedResponse(200, [], "s", body(), unread)
    with pytest.raises(HeadFailed):
        await response({"type": "http"}, nothing_more, fails_at_head)
    assert ran == ["unread"]
    assert ("ending a body that was never read failed" in caplog.text) is cleanup_fails
    started = StreamedResponse(200, [], "s", body(), unread)
    ran.clear()
    await run(started, nothing_more)
    assert ran == ["own cleanup"], "a body that was asked for cleans up after itself"
