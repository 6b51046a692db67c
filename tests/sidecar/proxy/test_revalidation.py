"""`revalidateSample`: a fraction of hits is fetched again in the background, with the
hit's own request, and compared with the entry; a changed answer replaces it."""

from __future__ import annotations

import json
from typing import Any

import httpx

from peers.asgi import read_body, send_json
from peers.clients import call_tool, first_text, http_get, unique
from peers.serving import async_wait_until, served
from peers.sidecar import RunningSidecar, one_server


async def call(
    sidecar: RunningSidecar, tool: str, arguments: dict[str, Any], request_id: Any = 1, **headers
) -> httpx.Response:
    return await call_tool(sidecar.url("s"), tool, arguments, request_id, **headers)


def revalidations(sidecar: RunningSidecar, result: str) -> float:
    return sidecar.sample("mcpcache_revalidations_total", server="s", result=result)


def admin_stats(sidecar: RunningSidecar) -> dict[str, Any]:
    response = http_get(f"http://127.0.0.1:{sidecar.port}/admin/stats", timeout=5)
    stats: dict[str, Any] = response.json()
    return stats


async def test_a_changed_upstream_result_is_caught_by_sampling_and_replaces_the_entry(
    make_sidecar, own_upstream
) -> None:
    peer, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="60s", revalidateSample=1))
    arguments = {"text": unique()}
    first = await call(sidecar, "echo", arguments, "first")
    hit = await call(sidecar, "echo", arguments, "hit")
    assert hit.headers["cache-status"] == "mcpcache; hit"
    assert first_text(hit) == first_text(first), "the hit answers at once, from the entry"
    await async_wait_until(lambda: revalidations(sidecar, "changed") == 1, 10, "a revalidation")
    assert peer.calls["echo"] == 2, "the echo counts its calls: its answer changed"
    after = await call(sidecar, "echo", arguments, "after")
    assert after.headers["cache-status"] == "mcpcache; hit"
    assert first_text(after) == f"{arguments['text']} #2", "the entry was replaced"
    assert admin_stats(sidecar)["servers"]["s"]["revalidations"]["echo"]["changed"] >= 1


async def test_an_unchanged_result_is_counted_as_the_same(make_sidecar, own_upstream) -> None:
    peer, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", revalidateSample=1))
    arguments = {"text": unique()}
    await call(sidecar, "stable", arguments, 1)
    await call(sidecar, "stable", arguments, 2)
    await async_wait_until(lambda: revalidations(sidecar, "same") == 1, 10, "a revalidation")
    assert peer.calls["stable"] == 2
    assert revalidations(sidecar, "changed") == 0
    counted = admin_stats(sidecar)["servers"]["s"]["revalidations"]
    assert counted == {"stable": {"same": 1, "changed": 0, "failed": 0}}


async def test_sampling_sends_each_hits_own_request_with_its_own_callers_credentials(
    make_sidecar, own_upstream
) -> None:
    peer, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", revalidateSample=1))
    arguments = {"text": unique()}
    alice, bob = {"authorization": "Bearer alice"}, {"authorization": "Bearer bob"}
    await call(sidecar, "whoami", arguments, 1, **alice)
    await call(sidecar, "whoami", arguments, 2, **bob)
    assert peer.callers == ["Bearer alice", "Bearer bob"]
    for seen, caller in enumerate((alice, bob, alice, bob), start=1):
        hit = await call(sidecar, "whoami", arguments, 3, **caller)
        assert hit.headers["cache-status"] == "mcpcache; hit"
        assert first_text(hit).startswith(f"user={caller['authorization']} ")
        await async_wait_until(
            lambda n=seen: revalidations(sidecar, "changed") == n, 10, "the hit's revalidation"
        )
        assert peer.callers[-1] == caller["authorization"], "the hit's own caller went upstream"
    assert peer.callers[2:] == ["Bearer alice", "Bearer bob"] * 2


async def test_a_revalidation_that_fails_is_counted_and_keeps_the_entry(
    make_sidecar, own_upstream
) -> None:
    _, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", revalidateSample=1, timeout="2s"))
    arguments = {"text": unique()}
    first = await call(sidecar, "echo", arguments, 1)
    app.stop()
    hit = await call(sidecar, "echo", arguments, 2)
    await async_wait_until(lambda: revalidations(sidecar, "failed") == 1, 10, "a revalidation")
    again = await call(sidecar, "echo", arguments, 3)
    assert again.headers["cache-status"] == "mcpcache; hit"
    assert first_text(again) == first_text(hit) == first_text(first)


async def test_without_revalidate_sample_a_hit_never_goes_upstream(
    make_sidecar, own_upstream
) -> None:
    peer, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    arguments = {"text": unique()}
    for request_id in range(5):
        await call(sidecar, "echo", arguments, request_id)
    assert peer.calls["echo"] == 1
    assert revalidations(sidecar, "same") + revalidations(sidecar, "changed") == 0


async def test_a_callers_rechecks_that_find_changes_leave_other_entries_in_memory(
    make_sidecar, own_upstream
) -> None:
    _, app = own_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="60s", revalidateSample=1))
    # One tool (`echo` answers differently every time), two callers' entries of it.
    alice_args, mallory_args = {"text": unique()}, {"text": unique()}
    stored = await call(sidecar, "echo", alice_args, 1, authorization="Bearer alice")
    await call(sidecar, "echo", mallory_args, 2, authorization="Bearer mallory")
    for n in range(1, 4):
        hit = await call(sidecar, "echo", mallory_args, 3, authorization="Bearer mallory")
        assert hit.headers["cache-status"] == "mcpcache; hit"
        await async_wait_until(
            lambda n=n: revalidations(sidecar, "changed") == n, 10, "the recheck"
        )
    kept = await call(sidecar, "echo", alice_args, 4, authorization="Bearer alice")
    assert kept.headers["cache-status"] == "mcpcache; hit", "another caller's entry stays"
    assert first_text(kept) == first_text(stored)


class Drifting:
    """A raw upstream whose answer to a call changes after the first, and then says it
    may not be stored (`Cache-Control: no-store`): what the SDK's server cannot send."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = json.loads(await read_body(receive))
        text = message["params"]["arguments"]["text"]
        seen = self.calls[text] = self.calls.get(text, 0) + 1
        result = {"content": [{"type": "text", "text": f"{text} #{seen}"}]}
        extra = [] if seen == 1 else [(b"cache-control", b"no-store")]
        await send_json(send, {"jsonrpc": "2.0", "id": message["id"], "result": result}, extra)


async def test_a_changed_answer_that_may_not_be_stored_removes_only_the_entry_it_checked(
    make_sidecar,
) -> None:
    peer = Drifting()
    with served(peer, lifespan="off") as app:
        sidecar = make_sidecar(one_server(app.base_url + "/mcp", ttl="60s", revalidateSample=1))
        checked, other = {"text": unique()}, {"text": unique()}
        await call(sidecar, "echo", checked, 1)
        await call(sidecar, "echo", other, 2)
        hit = await call(sidecar, "echo", checked, 3)
        assert hit.headers["cache-status"] == "mcpcache; hit"
        await async_wait_until(lambda: revalidations(sidecar, "changed") == 1, 10, "the check")
        kept = await call(sidecar, "echo", other, 4)
        assert kept.headers["cache-status"] == "mcpcache; hit", "another entry of the server"
        assert first_text(kept) == f"{other['text']} #1"
        gone = await call(sidecar, "echo", checked, 5)
        assert gone.headers["cache-status"].startswith("mcpcache; fwd=miss")
        assert first_text(gone) == f"{checked['text']} #3"
