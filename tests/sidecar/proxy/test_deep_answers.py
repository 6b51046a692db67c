"""An answer nested deeper than orjson writes (it reads four times deeper) reaches its
caller whole, as the upstream sent it, and is neither stored nor handed to identical
requests waiting for it: each of those forwards on its own. An error stays an error (a
write that failed invalidates nothing). Against a raw upstream, since no SDK server nests
an answer 300 levels deep."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from mcpcache.sidecar.cache.entry import AGE  # one of our own `_meta` names, never stored
from mcpcache.sidecar.rules.admission.judgement import WRITE_DEPTH
from peers.asgi import read_body
from peers.clients import call_body, call_headers, http_client, sse_messages, unique
from peers.serving import ServedApp, async_wait_until, served
from peers.sidecar import RunningSidecar, one_server

DEPTH = 300
DEEP: Any = []
for _ in range(DEPTH - 1):
    DEEP = [DEEP]
LIMIT: Any = []  # as deep as orjson writes: the result holding it is a level deeper
for _ in range(WRITE_DEPTH - 1):
    LIMIT = [LIMIT]


class DeepAnswers:
    """Answers every call nested `DEPTH` levels deep, as a JSON-RPC `error`, an `isError`
    result or a plain result (`kind`), in JSON or one SSE event (`sse`), after waiting
    for the test to open `gate` when one is named; every call counted."""

    def __init__(self) -> None:
        self.calls = 0
        self.gates: dict[str, threading.Event] = {}

    def gate(self, name: str) -> threading.Event:
        return self.gates.setdefault(name, threading.Event())

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = json.loads(await read_body(receive))
        self.calls += 1
        arguments = request["params"]["arguments"]
        if "gate" in arguments:
            await anyio.to_thread.run_sync(self.gate(arguments["gate"]).wait, 10)
        text = [{"type": "text", "text": "deep"}]
        member: dict[str, Any] = {
            "shallow": {"result": {"content": [{"type": "text", "text": f"#{self.calls}"}]}},
            "error": {"error": {"code": -32000, "message": "deep", "data": DEEP}},
            "tool_error": {"result": {"isError": True, "content": text, "d": DEEP}},
            "result": {"result": {"content": text, "structuredContent": {"d": DEEP}}},
            "limit": {"result": {"content": LIMIT}},
            "ours": {"result": {"content": text, "_meta": {AGE: LIMIT[0]}}},
        }[arguments["kind"]]
        body = json.dumps({"jsonrpc": "2.0", "id": request["id"], **member}).encode()
        media = b"application/json"
        if arguments.get("sse"):
            body, media = b"event: message\ndata: " + body + b"\n\n", b"text/event-stream"
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", media)]}
        )
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def deep() -> Iterator[tuple[DeepAnswers, ServedApp]]:
    peer = DeepAnswers()
    with served(peer, "off") as app:
        yield peer, app


def the_answer(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text[:200]
    if response.headers["content-type"].startswith("text/event-stream"):
        messages = [m for m in sse_messages(response) if "id" in m]
        assert len(messages) == 1, "the stream ends with its answer"
        return messages[0]
    return response.json()


def nesting(value: Any) -> int:
    depth = 0
    while isinstance(value, list):
        value, depth = value[0] if value else None, depth + 1
    return depth


def assert_whole(answer: dict[str, Any], request_id: Any, kind: str) -> None:
    assert answer["id"] == request_id
    if kind == "error":
        assert nesting(answer["error"]["data"]) == DEPTH
    elif kind == "tool_error":
        assert nesting(answer["result"]["d"]) == DEPTH
    elif kind == "limit":
        assert nesting(answer["result"]["content"]) == WRITE_DEPTH
    elif kind == "ours":
        assert nesting(answer["result"]["_meta"][AGE]) == WRITE_DEPTH - 1
    else:
        assert nesting(answer["result"]["structuredContent"]["d"]) == DEPTH


async def call(
    http: httpx.AsyncClient, sidecar: RunningSidecar, request_id: Any, **arguments: Any
) -> httpx.Response:
    body = call_body(request_id, "t", arguments)
    return await http.post(sidecar.url("s"), json=body, headers=call_headers("t"))


REASON = {"error": "error", "tool_error": "tool_error", "result": "too_deep", "limit": "too_deep"}


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("kind", ["error", "tool_error", "result", "limit"])
async def test_an_answer_too_deep_to_write_again_reaches_its_caller_whole_and_is_not_stored(
    make_sidecar, deep, kind: str, sse: bool
) -> None:
    peer, app = deep
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    async with http_client(timeout=30) as http:
        for request_id in (1, 2):
            response = await call(http, sidecar, request_id, kind=kind, sse=sse)
            assert_whole(the_answer(response), request_id, kind)
            if not sse:  # a stream's headers leave before its answer is judged
                detail = REASON[kind].replace("_", "-")
                assert response.headers["cache-status"] == f"mcpcache; fwd=miss; detail={detail}"
    assert peer.calls == 2, "nothing was stored"
    assert sidecar.sample("mcpcache_not_stored_total", server="s", reason=REASON[kind]) == 2
    assert len(sidecar.sidecar.cache) == 0


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("kind", ["error", "result", "limit", "ours"])
async def test_identical_requests_waiting_for_an_answer_too_deep_to_write_forward_on_their_own(
    make_sidecar, deep, kind: str, sse: bool
) -> None:
    peer, app = deep
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    gate = unique()
    async with http_client(timeout=30) as http:
        calls = [
            asyncio.create_task(call(http, sidecar, request_id, kind=kind, sse=sse, gate=gate))
            for request_id in ("leader", "follower")
        ]
        try:
            await async_wait_until(lambda: sidecar.waiting() == 1, what="a follower")
        finally:
            peer.gate(gate).set()
        responses = await asyncio.gather(*calls)
    for request_id, response in zip(("leader", "follower"), responses, strict=True):
        assert_whole(the_answer(response), request_id, kind)
        assert "collapsed" not in response.headers["cache-status"]
    assert peer.calls == 2, "the follower went upstream on its own"


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("kind", ["result", "error"])
async def test_a_writes_answer_too_deep_to_write_again_reaches_its_caller_and_invalidates_as_ever(
    make_sidecar, deep, kind: str, sse: bool
) -> None:
    peer, app = deep
    sidecar = make_sidecar(
        one_server(app.base_url + "/mcp", tools=[{"name": "w", "invalidates": ["t"]}])
    )
    async with http_client(timeout=30) as http:
        await call(http, sidecar, 1, kind="shallow")
        stored = await call(http, sidecar, 2, kind="shallow")
        assert stored.headers["cache-status"] == "mcpcache; hit"
        body = call_body(3, "w", {"kind": kind, "sse": sse})
        wrote = await http.post(sidecar.url("s"), json=body, headers=call_headers("w"))
        assert_whole(the_answer(wrote), 3, kind)
        again = await call(http, sidecar, 4, kind="shallow")
    if kind == "result":  # the write may have happened: its tool's entries go
        assert again.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert peer.calls == 3
    else:  # a JSON-RPC error says it did not
        assert again.headers["cache-status"] == "mcpcache; hit"
        assert peer.calls == 2
