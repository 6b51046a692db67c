"""Identical concurrent misses share one upstream call, and only identical ones do."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from peers.clients import call_body, call_headers, http_client, sse_messages, unique
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar, one_server
from peers.upstream import Upstream

ACCEPTS = ("application/json, text/event-stream", "text/event-stream, application/json;q=0.9")


def answer(response: httpx.Response) -> dict[str, Any]:
    """The one JSON-RPC response a response carries, JSON or event stream."""
    if response.headers["content-type"].startswith("text/event-stream"):
        return next(m for m in sse_messages(response) if "id" in m and "method" not in m)
    return response.json()


async def held_calls(
    sidecar: RunningSidecar,
    server: str,
    peer: Upstream,
    ids: list[Any],
    arguments: dict[str, Any],
    identity: dict[str, str] | None = None,
    wait_for: int | None = None,
) -> list[httpx.Response]:
    """Send `held` calls with these ids at once; open the gate once `wait_for` requests
    wait on another's upstream call (all but one of these by default; 0: leave the
    gate to the caller); every answer."""
    gate = arguments["gate"]
    extra = identity or {}

    async def call(http: httpx.AsyncClient, n: int, request_id: Any) -> httpx.Response:
        headers = call_headers("held", **extra, accept=ACCEPTS[n % 2])
        body = call_body(request_id, "held", arguments, progressToken=f"p-{request_id}")
        return await http.post(sidecar.url(server), json=body, headers=headers)

    async with http_client(timeout=30, limits=httpx.Limits(max_connections=100)) as http:
        calls = [asyncio.create_task(call(http, n, i)) for n, i in enumerate(ids)]
        if wait_for != 0:
            try:
                expected = len(ids) - 1 if wait_for is None else wait_for
                await async_wait_until(lambda: sidecar.waiting() >= expected, what="followers")
            finally:
                peer.gate(gate).set()
        return await asyncio.gather(*calls)


@pytest.mark.parametrize("server", ["sse", "json"])
async def test_twenty_concurrent_identical_calls_make_one_upstream_call(
    sidecar, upstream, json_upstream, server: str
) -> None:
    peer = (upstream if server == "sse" else json_upstream)[0]
    before = peer.calls["held"]
    ids = [f"call-{n}" for n in range(20)]
    responses = await held_calls(sidecar, server, peer, ids, {"gate": unique()})
    assert peer.calls["held"] - before == 1
    answers = [answer(r) for r in responses]
    assert [a["id"] for a in answers] == ids, "each caller gets its own JSON-RPC id"
    assert len({json.dumps(a["result"], sort_keys=True) for a in answers}) == 1
    statuses = [r.headers["cache-status"] for r in responses]
    assert statuses.count("mcpcache; fwd=miss; collapsed") == 19
    for response, request_id in zip(responses, ids, strict=True):
        if server == "sse":  # the leader's stream, progress under each caller's own token
            *progress, _ = sse_messages(response)
            assert [p["params"]["progressToken"] for p in progress] == [f"p-{request_id}"]
    media = "text/event-stream" if server == "sse" else "application/json"
    assert all(r.headers["content-type"].startswith(media) for r in responses), [
        (r.headers["content-type"], r.headers["cache-status"]) for r in responses
    ]
    outcomes = {
        outcome: sidecar.sample(
            "mcpcache_requests_total", server=server, method="tools/call", outcome=outcome
        )
        for outcome in ("miss", "collapsed")
    }
    assert outcomes == {"miss": 1, "collapsed": 19}


@pytest.mark.parametrize("header", ["authorization", "x-api-key"])
async def test_two_end_users_concurrent_identical_calls_are_never_merged(
    sidecar, upstream, header: str
) -> None:
    peer, _ = upstream
    before = peer.calls["held"]
    arguments = {"gate": unique()}
    gate = peer.gate(arguments["gate"])
    users = {"Bearer alice": [f"a{n}" for n in range(5)], "Bearer bob": [f"b{n}" for n in range(5)]}

    async def burst() -> list[list[httpx.Response]]:
        async def opener() -> None:
            await async_wait_until(lambda: sidecar.waiting() >= 8, what="both users' followers")
            gate.set()

        opening = asyncio.create_task(opener())
        try:
            return await asyncio.gather(
                *(
                    held_calls(sidecar, "sse", peer, ids, arguments, {header: user}, wait_for=0)
                    for user, ids in users.items()
                )
            )
        finally:
            gate.set()
            await opening

    results = await burst()
    assert peer.calls["held"] - before == 2, "one upstream call per end user"
    numbers = set()
    for (user, ids), responses in zip(users.items(), results, strict=True):
        texts = set()
        for request_id, response in zip(ids, responses, strict=True):
            body = answer(response)
            assert body["id"] == request_id
            texts.add(body["result"]["content"][0]["text"])
        (text,) = texts  # one answer per user...
        if header == "authorization":
            assert text.startswith(f"user={user} #")
        numbers.add(text)
    assert len(numbers) == 2, "...and never the other user's"


async def test_followers_get_a_tool_error_too_and_nothing_is_stored(sidecar, json_upstream) -> None:
    peer, _ = json_upstream
    before = peer.calls["held"]
    arguments = {"gate": unique(), "outcome": "tool_error"}
    responses = await held_calls(sidecar, "json", peer, list(range(6)), arguments)
    assert peer.calls["held"] - before == 1
    for request_id, response in enumerate(responses):
        body = answer(response)
        assert body["id"] == request_id
        assert body["result"]["isError"] is True
    statuses = sorted(r.headers["cache-status"] for r in responses)
    assert statuses == ["mcpcache; fwd=miss; collapsed; detail=tool-error"] * 5 + [
        "mcpcache; fwd=miss; detail=tool-error"
    ]
    assert len(sidecar.sidecar.cache) == 0


@pytest.mark.parametrize("server", ["sse", "json"])
async def test_followers_of_an_answer_too_large_to_keep_forward_on_their_own(
    make_sidecar, upstream, json_upstream, server: str
) -> None:
    peer, app = upstream if server == "sse" else json_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", maxSize="4Ki"))
    before = peer.calls["held"]
    arguments = {"gate": unique(), "size": 20_000}
    responses = await held_calls(sidecar, "s", peer, list(range(4)), arguments)
    assert peer.calls["held"] - before == 4
    for request_id, response in enumerate(responses):
        body = answer(response)
        assert body["id"] == request_id
        assert len(body["result"]["content"][0]["text"]) > 20_000
        assert "collapsed" not in response.headers["cache-status"]


async def test_a_leader_that_goes_away_does_not_take_the_followers_answer(
    sidecar, upstream
) -> None:
    peer, _ = upstream
    before = peer.calls["held"]
    gate = unique()
    # With a progress token, the tool's first progress event opens the leader's stream at
    # once (without one, nothing flows until the server's 15 s keep-alive ping).
    body = call_body("leader", "held", {"gate": gate}, progressToken="leader")
    baseline = sidecar.tasks()
    async with http_client(timeout=30) as http:
        async with http.stream(
            "POST", sidecar.url("sse"), json=body, headers=call_headers("held")
        ) as leader:
            assert leader.status_code == 200
            await async_wait_until(lambda: peer.calls["held"] - before == 1, what="the call")
            followers = [
                asyncio.create_task(
                    http.post(
                        sidecar.url("sse"),
                        json=call_body(f"f{n}", "held", {"gate": gate}),
                        headers=call_headers("held"),
                    )
                )
                for n in range(3)
            ]
            await async_wait_until(lambda: sidecar.waiting() == 3, what="followers")
        # The leader's client has gone; its upstream call goes on for the followers.
        peer.gate(gate).set()
        responses = await asyncio.gather(*followers)
        again = await http.post(
            sidecar.url("sse"),
            json=call_body("later", "held", {"gate": gate}),
            headers=call_headers("held"),
        )
    assert [answer(r)["id"] for r in responses] == ["f0", "f1", "f2"]
    assert all(r.headers["cache-status"] == "mcpcache; fwd=miss; collapsed" for r in responses)
    assert again.headers["cache-status"] == "mcpcache; hit", "the answer was stored"
    assert peer.calls["held"] - before == 1
    await async_wait_until(lambda: sidecar.tasks() <= baseline, what="no task left behind")


@pytest.mark.slow
async def test_a_silent_upstream_times_out_every_waiter_with_its_own_id(
    make_sidecar, json_upstream
) -> None:
    peer, app = json_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", timeout="1s"))
    gate = unique()
    before = peer.calls["held"]
    baseline = sidecar.tasks()
    try:
        async with http_client(timeout=30) as http:
            responses = await asyncio.gather(
                *(
                    http.post(
                        sidecar.url("s"),
                        json=call_body(n, "held", {"gate": gate}),
                        headers=call_headers("held"),
                    )
                    for n in range(5)
                )
            )
    finally:
        peer.gate(gate).set()
    assert peer.calls["held"] - before == 1
    for request_id, response in enumerate(responses):
        assert response.status_code == 504
        assert response.json()["id"] == request_id
        assert response.json()["error"]["code"] == -32002
    await async_wait_until(lambda: sidecar.tasks() <= baseline, what="no task left behind")
