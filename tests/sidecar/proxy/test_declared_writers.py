"""Tools the server itself marks as writers (`readOnlyHint: false`, `destructiveHint:
true`): never cached unless a rule names them, and a call of one that may have written
drops the server's entries for every caller unless the operator's rules say what it
invalidates. Server hints only ever make caching more careful."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from peers.asgi import read_body, send_json
from peers.clients import ask, call_body, call_headers, http_client, unique
from peers.serving import ServedApp, served
from peers.sidecar import RunningSidecar, one_server

TOOLS = [
    {"name": "search", "inputSchema": {"type": "object"}},
    {"name": "create", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": False}},
    {"name": "wipe", "inputSchema": {"type": "object"}, "annotations": {"destructiveHint": True}},
    {"name": "get", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
]


class Notes:
    """Lists `TOOLS`; counts every call per tool and answers with the count."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = json.loads(await read_body(receive))
        if request["method"] == "tools/list":
            result: dict[str, Any] = {"tools": TOOLS}
        else:
            tool = request["params"]["name"]
            self.calls[tool] += 1
            text = f"{tool} call #{self.calls[tool]}"
            result = {"content": [{"type": "text", "text": text}]}
        await send_json(send, {"jsonrpc": "2.0", "id": request["id"], "result": result})


@pytest.fixture
def notes() -> Iterator[tuple[Notes, ServedApp]]:
    peer = Notes()
    with served(peer, lifespan="off") as app:
        yield peer, app


async def _call(sidecar: RunningSidecar, tool: str, arguments: dict[str, Any]) -> Any:
    async with http_client(timeout=10) as http:
        return await http.post(
            sidecar.url("s"), json=call_body(1, tool, arguments), headers=call_headers(tool)
        )


async def test_a_tool_the_server_marks_as_a_writer_is_never_cached_and_drops_the_servers_entries(
    make_sidecar, notes
) -> None:
    peer, app = notes
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    listing = await ask(sidecar.url("s"), "tools/list", 1)
    assert listing.status_code == 200
    q = unique()
    await _call(sidecar, "search", {"q": q})
    assert (await _call(sidecar, "search", {"q": q})).headers["cache-status"] == "mcpcache; hit"
    for writer in ("create", "wipe"):
        statuses = [(await _call(sidecar, writer, {"n": 1})).headers["cache-status"] for _ in "ab"]
        assert statuses == ["mcpcache; fwd=bypass; detail=declared-writer"] * 2
        assert peer.calls[writer] == 2, "a retried write runs again"
        after = await _call(sidecar, "search", {"q": q})
        assert after.headers["cache-status"] == "mcpcache; fwd=miss; stored", "dropped"
    assert sidecar.sample("mcpcache_bypasses_total", server="s", reason="declared_writer") == 4
    assert sidecar.sample("mcpcache_invalidations_total", server="s", cause="write") >= 2


async def test_a_rule_that_names_a_writer_decides_for_it(make_sidecar, notes) -> None:
    peer, app = notes
    rules = [
        {"name": "create", "enabled": True},
        {"name": "wipe", "invalidates": ["get"]},
    ]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", tools=rules))
    await ask(sidecar.url("s"), "tools/list", 1)
    statuses = [(await _call(sidecar, "create", {"n": 2})).headers["cache-status"] for _ in "ab"]
    assert statuses == ["mcpcache; fwd=miss; stored", "mcpcache; hit"], "the operator's word"
    q = unique()
    await _call(sidecar, "search", {"q": q})
    wiped = await _call(sidecar, "wipe", {})
    assert wiped.headers["cache-status"] == "mcpcache; fwd=bypass; detail=tool-rule"
    kept = await _call(sidecar, "search", {"q": q})
    assert kept.headers["cache-status"] == "mcpcache; hit", "its rule says what it invalidates"
    assert peer.calls["create"] == 1


async def test_before_any_listing_a_tool_is_cached_as_today(make_sidecar, notes) -> None:
    _, app = notes
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    statuses = [(await _call(sidecar, "create", {"n": 3})).headers["cache-status"] for _ in "ab"]
    assert statuses == ["mcpcache; fwd=miss; stored", "mcpcache; hit"]
