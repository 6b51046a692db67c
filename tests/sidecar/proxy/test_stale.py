"""Expired entries answer on purpose: when the upstream fails (staleIfError), and at once
while the sidecar asks the upstream again (staleWhileRevalidate)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from peers.clients import call_body, call_headers, introduce, post, unique
from peers.faulty import FaultyUpstream
from peers.serving import async_wait_until, past, wait_until
from peers.sidecar import RunningSidecar, one_server


async def call(
    sidecar: RunningSidecar, tool: str, arguments: dict[str, Any], request_id: Any = 1, **headers
) -> httpx.Response:
    return await post(
        sidecar.url("s"), call_body(request_id, tool, arguments), call_headers(tool, **headers)
    )


def text(response: httpx.Response) -> str:
    return response.json()["result"]["content"][0]["text"]


async def first_fresh_hit(
    sidecar: RunningSidecar, tool: str, arguments: dict[str, Any], **headers: str
) -> tuple[httpx.Response, int]:
    """Ask until a fresh hit answers (a background refresh has stored its answer); with
    how many stale answers came while asking (the refresh may not have stored yet)."""
    stale = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        response = await call(sidecar, tool, arguments, "fresh", **headers)
        status = response.headers["cache-status"]
        if status == "mcpcache; hit":
            return response, stale
        assert status == "mcpcache; hit; detail=stale-while-revalidate", status
        stale += 1
    raise TimeoutError("no fresh hit: the refresh did not store its answer")


@pytest.mark.slow
async def test_a_dead_upstream_is_answered_from_the_stale_entry_within_the_window(
    make_sidecar, own_upstream
) -> None:
    peer, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="1s", staleIfError="2s"))
    arguments = {"text": unique()}
    first = await call(sidecar, "echo", arguments, "first")
    stored_at = time.monotonic()  # the entry was stored before this
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    app.stop()
    await past(stored_at + 1.05)
    stale = await call(sidecar, "echo", arguments, "second")
    assert stale.status_code == 200
    assert stale.headers["cache-status"] == "mcpcache; fwd=stale; detail=stale-if-error"
    assert int(stale.headers["age"]) >= 1, "the age is past the TTL"
    assert stale.json()["id"] == "second"
    assert text(stale) == text(first)
    assert (
        sidecar.sample("mcpcache_requests_total", server="s", method="tools/call", outcome="stale")
        == 1
    )
    await past(stored_at + 3.1)
    gone = await call(sidecar, "echo", arguments, "third")
    assert gone.status_code == 502, "nothing stale once the window has passed"
    assert gone.json()["id"] == "third"
    assert peer.calls["echo"] == 1


@pytest.mark.slow
async def test_a_burst_on_a_dead_upstream_is_answered_stale_under_each_callers_id(
    make_sidecar, own_upstream
) -> None:
    _, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="1s", staleIfError="1m"))
    arguments = {"text": unique()}
    first = await call(sidecar, "echo", arguments)
    stored_at = time.monotonic()  # the entry was stored before this
    app.stop()
    await past(stored_at + 1.05)
    responses = await asyncio.gather(*(call(sidecar, "echo", arguments, n) for n in range(8)))
    for request_id, response in enumerate(responses):
        assert response.headers["cache-status"] == "mcpcache; fwd=stale; detail=stale-if-error"
        assert response.json()["id"] == request_id
        assert text(response) == text(first)


@pytest.mark.slow
async def test_an_upstream_5xx_is_answered_from_the_stale_entry_with_its_status(
    make_sidecar, json_upstream
) -> None:
    _, app = json_upstream
    faulty = FaultyUpstream().start()
    try:
        document = one_server(app.base_url + "/mcp", ttl="1s", staleIfError="1m")
        sidecar = make_sidecar(document)
        arguments = {"text": unique()}
        first = await call(sidecar, "echo", arguments)
        stored_at = time.monotonic()  # the entry was stored before this
        # The same server, now answering 500 (a config change never flushes entries).
        document["servers"][0]["url"] = faulty.url("status-500")
        sidecar.write_config(document)
        wait_until(lambda: sidecar.sidecar.config().servers[0].url == faulty.url("status-500"))
        await past(stored_at + 1.05)
        stale = await call(sidecar, "echo", arguments, 7)
        assert stale.headers["cache-status"] == (
            "mcpcache; fwd=stale; fwd-status=500; detail=stale-if-error"
        )
        assert stale.json()["id"] == 7
        assert text(stale) == text(first)
        assert faulty.requests == 1
    finally:
        faulty.stop()


@pytest.mark.slow
async def test_without_stale_if_error_an_expired_entry_is_never_served(
    make_sidecar, own_upstream
) -> None:
    _, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="1s"))
    arguments = {"text": unique()}
    await call(sidecar, "echo", arguments)
    stored_at = time.monotonic()  # the entry was stored before this
    app.stop()
    await past(stored_at + 1.05)
    assert (await call(sidecar, "echo", arguments)).status_code == 502


@pytest.mark.slow
async def test_stale_while_revalidate_answers_at_once_and_refreshes_in_the_background(
    make_sidecar, json_upstream
) -> None:
    peer, app = json_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="1s", staleWhileRevalidate="1m"))
    gate = unique()
    peer.gate(gate).set()
    first = await call(sidecar, "held", {"gate": gate}, "first")
    stored_at = time.monotonic()  # the entry was stored before this
    before = peer.calls["held"]
    peer.gate(gate).clear()  # the refresh will wait here until the test says
    await past(stored_at + 1.05)
    stale = [await call(sidecar, "held", {"gate": gate}, f"stale-{n}") for n in range(3)]
    for n, response in enumerate(stale):
        assert response.headers["cache-status"] == "mcpcache; hit; detail=stale-while-revalidate"
        assert int(response.headers["age"]) >= 1
        assert response.json()["id"] == f"stale-{n}"
        assert text(response) == text(first)
    await async_wait_until(lambda: peer.calls["held"] - before == 1, what="the refresh")
    peer.gate(gate).set()
    fresh, stale_while_asking = await first_fresh_hit(sidecar, "held", {"gate": gate})
    assert fresh.headers["age"] == "0"
    assert text(fresh) != text(first)
    assert peer.calls["held"] - before == 1, "one refresh per key, however many stale answers"
    assert (
        sidecar.sample("mcpcache_requests_total", server="s", method="tools/call", outcome="stale")
        == 3 + stale_while_asking
    )


@pytest.mark.slow
async def test_a_refresh_carries_exactly_the_triggering_requests_headers(
    make_sidecar, json_upstream
) -> None:
    peer, app = json_upstream
    # `x-turn` is forwarded but, ignored, not keyed: both turns ask for one entry.
    sidecar = make_sidecar(
        one_server(
            app.base_url + "/mcp", ttl="1s", staleWhileRevalidate="1m", ignoreHeaders=["x-turn"]
        )
    )
    arguments: dict[str, Any] = {}
    credential = f"Bearer {unique()}"
    await call(sidecar, "headers", arguments, authorization=credential, **{"x-turn": "first"})
    stored_at = time.monotonic()  # the entry was stored before this
    before = peer.calls["headers"]
    await past(stored_at + 1.05)
    stale = await call(
        sidecar, "headers", arguments, authorization=credential, **{"x-turn": "second"}
    )
    assert stale.headers["cache-status"] == "mcpcache; hit; detail=stale-while-revalidate"
    await async_wait_until(lambda: peer.calls["headers"] - before == 1, what="the refresh")
    fresh, _ = await first_fresh_hit(sidecar, "headers", arguments, authorization=credential)
    seen = json.loads(text(fresh))
    assert seen["authorization"] == credential
    assert seen["x-turn"] == "second", "the refresh went with the triggering request's headers"


@pytest.mark.slow
async def test_a_stale_answer_from_an_entry_for_every_caller_says_so(
    make_sidecar, own_upstream
) -> None:
    _, app = own_upstream
    public = [{"name": "echo", "scope": "public"}]
    sidecar = make_sidecar(
        one_server(app.base_url + "/mcp", ttl="1s", staleIfError="1m", tools=public)
    )
    arguments = {"text": unique()}
    first = await call(sidecar, "echo", arguments, "first", authorization="Bearer alice")
    stored_at = time.monotonic()  # the entry was stored before this
    await introduce(sidecar.url("s"), "Bearer bob", "echo", {"text": unique()})
    app.stop()
    await past(stored_at + 1.05)
    stale = await call(sidecar, "echo", arguments, "second", authorization="Bearer bob")
    assert stale.status_code == 200
    assert stale.headers["cache-status"].endswith("; detail=public-stale-if-error")
    assert text(stale) == text(first)
