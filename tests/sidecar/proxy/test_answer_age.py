"""An answer from the cache says how old it is where the model's client can see it: its
age and storage time in the result's `_meta`, and with `ageNote` a first text item."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

import httpx
import pytest

from peers.clients import (
    LEGACY,
    MODERN,
    answer,
    call_body,
    call_headers,
    mcp_client,
    post,
    unique,
)
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar, one_server
from peers.typescript_sdk import typescript_client_calls

AGE, STORED_AT = "io.mcpcache/age", "io.mcpcache/storedAt"


def stored_at(meta: dict[str, object]) -> datetime:
    value = meta[STORED_AT]
    assert isinstance(value, str)
    assert value.endswith("Z"), "RFC 3339 in UTC"
    return datetime.fromisoformat(value)


async def call(sidecar: RunningSidecar, text: str, request_id: object = 1) -> httpx.Response:
    return await post(
        sidecar.url("s"), call_body(request_id, "echo", {"text": text}), call_headers("echo")
    )


@pytest.mark.parametrize("server", ["sse", "json"])
@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_the_sdk_client_sees_a_hits_age_and_storage_time_in_meta(
    sidecar, server: str, mode: str
) -> None:
    text = unique()
    before = datetime.now(UTC).replace(microsecond=0)
    async with mcp_client(sidecar.url(server), mode=mode) as client:
        first = await client.call_tool("echo", {"text": text})
        second = await client.call_tool("echo", {"text": text})
    assert AGE not in (first.meta or {}), "the upstream's own answer carries no age"
    meta = second.meta or {}
    assert meta[AGE] in (0, 1), "answered at once"
    assert before <= stored_at(meta) <= datetime.now(UTC)
    assert second.content == first.content, "the text is as the upstream said it"


@pytest.mark.slow
async def test_the_age_in_meta_counts_like_the_age_header(make_sidecar, upstream) -> None:
    sidecar = make_sidecar(one_server(upstream[1].base_url + "/mcp", ttl="30s"))
    text = unique()
    miss = await call(sidecar, text)
    stored = time.monotonic()
    assert miss.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    await async_wait_until(lambda: time.monotonic() > stored + 1.05, what="the clock")
    hit = await call(sidecar, text, 2)
    meta = answer(hit)["result"]["_meta"]
    assert meta[AGE] == int(hit.headers["age"]) >= 1


@pytest.mark.slow
async def test_a_stale_answer_carries_its_age_past_the_ttl(make_sidecar, json_upstream) -> None:
    sidecar = make_sidecar(
        one_server(json_upstream[1].base_url + "/mcp", ttl="1s", staleWhileRevalidate="30s")
    )
    text = unique()
    first = await call(sidecar, text)
    stored = time.monotonic()
    await async_wait_until(lambda: time.monotonic() > stored + 1.05, what="the clock")
    stale = await call(sidecar, text, 2)
    assert stale.headers["cache-status"] == "mcpcache; hit; detail=stale-while-revalidate"
    meta = stale.json()["result"]["_meta"]
    assert meta[AGE] == int(stale.headers["age"]) >= 1
    assert stale.json()["result"]["content"] == first.json()["result"]["content"]


@pytest.mark.parametrize("server", ["sse", "json"])
async def test_age_note_puts_the_age_first_in_the_text_the_model_reads(
    make_sidecar, upstream, json_upstream, server: str
) -> None:
    app = (upstream if server == "sse" else json_upstream)[1]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ageNote=True))
    text = unique()
    async with mcp_client(sidecar.url("s")) as client:
        first = await client.call_tool("echo", {"text": text})
        second = await client.call_tool("echo", {"text": text})
    assert len(first.content) == 1, "a miss is the upstream's answer"
    note, *rest = second.content
    assert note.type == "text"
    assert re.fullmatch(r"\[From a cache: this answer is [01]s old, stored \S+Z\.\]", note.text)
    assert (second.meta or {})[STORED_AT] in note.text
    assert rest == first.content


async def test_without_age_note_a_hits_content_is_the_upstreams(make_sidecar, upstream) -> None:
    sidecar = make_sidecar(one_server(upstream[1].base_url + "/mcp"))
    text = unique()
    async with mcp_client(sidecar.url("s")) as client:
        first = await client.call_tool("echo", {"text": text})
        second = await client.call_tool("echo", {"text": text})
    assert second.content == first.content
    assert AGE in (second.meta or {})


@pytest.mark.typescript
def test_the_typescript_sdk_client_sees_the_age_in_meta(make_sidecar, upstream) -> None:
    sidecar = make_sidecar(one_server(upstream[1].base_url + "/mcp", ageNote=True))
    calls = typescript_client_calls(sidecar.url("s"), "echo", {"text": unique()}, 2)
    assert [c["cacheStatus"] for c in calls] == ["mcpcache; fwd=miss", "mcpcache; hit"]
    assert AGE not in (calls[0]["meta"] or {})
    assert calls[1]["meta"][AGE] in (0, 1)
    assert calls[1]["text"].startswith("[From a cache: this answer is ")
