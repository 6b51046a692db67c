"""Entries for every caller of a server, by the operator's permission (`scope: public`)
or by the server's own label where the operator trusts it (`trustPublicHints`), against
the SDK's real server and client — and the attacks on them: can one end user read
another's private answer through a public entry, or make another read theirs?"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from peers.clients import (
    call_body,
    call_headers,
    call_tool,
    http_client,
    introduce,
    mcp_client,
    post,
    read_body,
    text_of,
    unique,
)
from peers.echo import who_answered
from peers.serving import ServedApp, async_wait_until
from peers.sidecar import RunningSidecar, one_server
from peers.upstream import Upstream

ALICE = {"authorization": "Bearer alice"}
BOB = {"authorization": "Bearer bob"}


@pytest.fixture(scope="module")
def public_upstream() -> Iterator[tuple[Upstream, ServedApp]]:
    """An SDK server that marks its `resources/read` results `cacheScope: "public"`."""
    peer = Upstream(resource_scope="public")
    app = ServedApp(peer.app()).start()
    yield peer, app
    app.stop()


async def call(
    sidecar: RunningSidecar, tool: str, arguments: dict[str, Any], **headers: str
) -> httpx.Response:
    return await call_tool(sidecar.url("docs"), tool, arguments, **headers)


async def read(sidecar: RunningSidecar, uri: str, **headers: str) -> httpx.Response:
    headers = call_headers(uri, "resources/read", **headers)
    return await post(sidecar.url("docs"), read_body(7, uri), headers)


def status_of(response: httpx.Response) -> str:
    return response.headers["cache-status"].removesuffix("; stored")


def result_of(response: httpx.Response) -> dict[str, Any]:
    text = response.text
    if text.startswith("event:"):
        data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        return dict(json.loads(data[-1])["result"])
    return dict(response.json()["result"])


async def test_a_public_tool_is_shared_by_two_end_users_while_a_private_one_is_not(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    rules = [{"name": "search", "scope": "public"}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    q, doc = unique(), unique()
    async with (
        mcp_client(sidecar.url("docs"), headers=ALICE) as alice,
        mcp_client(sidecar.url("docs"), headers=BOB) as bob,
    ):
        await bob.call_tool("search", {"q": unique()})  # Bob's context, answered upstream
        searches, reads = peer.calls["search"], peer.calls["get_doc"]
        shared = [text_of(await c.call_tool("search", {"q": q})) for c in (alice, bob)]
        own = [text_of(await c.call_tool("get_doc", {"name": doc})) for c in (alice, bob)]
    assert peer.calls["search"] == searches + 1
    assert shared[0] == shared[1], "one entry for both (the tool answered alice first)"
    assert peer.calls["get_doc"] == reads + 2
    assert "for Bearer alice" in own[0]
    assert "for Bearer bob" in own[1]
    # Raw calls, to read Cache-Status (their params differ from the SDK client's).
    await call(sidecar, "search", {"q": q}, authorization="Bearer carol")
    first = await call(sidecar, "search", {"q": q}, authorization="Bearer dave")
    assert status_of(first) == "mcpcache; fwd=miss", "dave's token, checked upstream first"
    public_hit = await call(sidecar, "search", {"q": q}, authorization="Bearer dave")
    assert public_hit.headers["cache-status"] == "mcpcache; hit; detail=public"
    await call(sidecar, "get_doc", {"name": doc}, authorization="Bearer carol")
    private_hit = await call(sidecar, "get_doc", {"name": doc}, authorization="Bearer carol")
    assert private_hit.headers["cache-status"] == "mcpcache; hit"


async def test_a_header_outside_the_identity_headers_stays_in_a_public_key(
    make_sidecar, upstream
) -> None:
    """The attack: alice sends a header the upstream may answer by (a tenant, a
    variant) to plant her answer where bob reads. Only the named identity headers leave
    a public key; every other keyed header keeps its own entry."""
    peer, app = upstream
    rules = [{"name": "search", "scope": "public"}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    q = unique()
    calls = peer.calls["search"]
    planted = await call(
        sidecar, "search", {"q": q}, **{"authorization": "Bearer alice", "x-variant": "x"}
    )
    assert status_of(planted) == "mcpcache; fwd=miss"
    read_by_bob = await call(sidecar, "search", {"q": q}, authorization="Bearer bob")
    assert status_of(read_by_bob) == "mcpcache; fwd=miss"
    assert "for Bearer bob" in read_by_bob.text
    assert peer.calls["search"] == calls + 2


async def test_a_public_tool_answer_the_server_marks_private_is_never_shared(
    make_sidecar, echo_upstream
) -> None:
    peer, app = echo_upstream
    rules = [{"name": "*", "scope": "public"}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    marker = unique()
    result = {"content": [{"type": "text", "text": marker}], "cacheScope": "private"}
    calls = peer.calls
    first = await call(sidecar, "lookup", {"result": result}, authorization="Bearer alice")
    assert status_of(first) == "mcpcache; fwd=miss; detail=private-result"
    second = await call(sidecar, "lookup", {"result": result}, authorization="Bearer bob")
    assert status_of(second) == "mcpcache; fwd=miss; detail=private-result"
    assert peer.calls == calls + 2
    assert sidecar.sample("mcpcache_not_stored_total", server="docs", reason="private_result") == 2


@pytest.mark.parametrize(
    "respond_headers",
    [[["vary", "Authorization"]], [["set-cookie", "session=alice"]]],
    ids=["vary-on-the-credential", "set-cookie"],
)
async def test_a_public_tool_answer_that_depends_on_the_caller_is_never_shared(
    make_sidecar, echo_upstream, respond_headers: list[list[str]]
) -> None:
    """The upstream says the answer depends on who asked (`Vary` on the credential, a
    cookie for the caller): not an answer for everyone, whatever the rule says."""
    _peer, app = echo_upstream
    rules = [{"name": "*", "scope": "public"}]
    document = one_server(app.base_url + "/mcp", name="docs", tools=rules, ignoreSetCookie=True)
    sidecar = make_sidecar(document)
    arguments = {"respond_headers": respond_headers, "n": unique()}
    await call(sidecar, "lookup", arguments, authorization="Bearer alice")
    bob = await call(sidecar, "lookup", arguments, authorization="Bearer bob")
    assert status_of(bob).startswith("mcpcache; fwd=miss")
    assert who_answered(bob.json())["who"]["authorization"] == "Bearer bob"


async def test_a_result_the_server_marks_public_is_shared_under_trust_public_hints(
    make_sidecar, public_upstream
) -> None:
    peer, app = public_upstream
    document = one_server(app.base_url + "/mcp", name="docs", trustPublicHints=True)
    sidecar = make_sidecar(document)
    uri = f"doc://{unique()}"
    await introduce(sidecar.url("docs"), "Bearer bob", uri=f"doc://{unique()}")
    reads = peer.calls["doc"]
    first = await read(sidecar, uri, authorization="Bearer alice")
    second = await read(sidecar, uri, authorization="Bearer bob")
    assert status_of(first) == "mcpcache; fwd=miss"
    assert second.headers["cache-status"] == "mcpcache; hit; detail=public"
    assert peer.calls["doc"] == reads + 1
    assert result_of(second)["cacheScope"] == "public", "as the server said it"


async def test_a_result_the_server_marks_public_stays_per_caller_without_trust_public_hints(
    make_sidecar, public_upstream
) -> None:
    peer, app = public_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs"))
    uri = f"doc://{unique()}"
    reads = peer.calls["doc"]
    await read(sidecar, uri, authorization="Bearer alice")
    second = await read(sidecar, uri, authorization="Bearer bob")
    assert status_of(second) == "mcpcache; fwd=miss"
    assert peer.calls["doc"] == reads + 2


async def test_a_result_the_server_marks_private_is_never_shared_whatever_the_config(
    make_sidecar, upstream
) -> None:
    """The SDK's server marks `resources/read` private by default."""
    peer, app = upstream
    rules = [{"name": "*", "scope": "public"}]
    document = one_server(app.base_url + "/mcp", name="docs", trustPublicHints=True, tools=rules)
    sidecar = make_sidecar(document)
    uri = f"doc://{unique()}"
    reads = peer.calls["doc"]
    mine = await read(sidecar, uri, authorization="Bearer alice")
    theirs = await read(sidecar, uri, authorization="Bearer bob")
    again = await read(sidecar, uri, authorization="Bearer alice")
    assert result_of(mine)["cacheScope"] == "private"
    assert status_of(theirs) == "mcpcache; fwd=miss"
    assert again.headers["cache-status"] == "mcpcache; hit", "alice's own entry"
    assert result_of(again)["cacheScope"] == "private", "never widened on the way out"
    assert peer.calls["doc"] == reads + 2


@pytest.mark.parametrize("outcome", ["ok", "tool_error"])
async def test_a_call_waiting_on_another_users_public_call_shares_only_a_stored_answer(
    make_sidecar, json_upstream, outcome: str
) -> None:
    """The attack: bob's identical call waits on alice's upstream call of a public
    tool. A stored answer is his by the rule; alice's error (which may name her) is
    not: he forwards on his own. (Both were answered upstream before: nobody waits on
    the call of a context the upstream has not answered.)"""
    peer, app = json_upstream
    rules = [{"name": "held", "scope": "public"}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    arguments = {"gate": unique(), "outcome": outcome}
    opened = unique()
    peer.gate(opened).set()
    for user in ("alice", "bob"):
        await introduce(sidecar.url("docs"), f"Bearer {user}", "held", {"gate": opened})
    before = peer.calls["held"]
    async with http_client(timeout=30) as http:

        async def held(user: str) -> httpx.Response:
            headers = call_headers("held", authorization=f"Bearer {user}")
            return await http.post(
                sidecar.url("docs"), json=call_body(user, "held", arguments), headers=headers
            )

        alice = asyncio.create_task(held("alice"))
        await async_wait_until(lambda: peer.calls["held"] == before + 1, what="alice upstream")
        bob = asyncio.create_task(held("bob"))
        try:
            await async_wait_until(lambda: sidecar.waiting() == 1, what="bob waiting on it")
        finally:
            peer.gate(arguments["gate"]).set()
        answers = await asyncio.gather(alice, bob)
    bob_status = answers[1].headers["cache-status"]
    bob_result = answers[1].json()["result"]
    if outcome == "ok":
        assert bob_status == "mcpcache; fwd=miss; collapsed"
        assert "user=Bearer alice" in bob_result["content"][0]["text"]
        assert peer.calls["held"] == before + 1
    else:
        assert "collapsed" not in bob_status
        assert bob_result["content"][0]["text"].endswith(f"held call #{before + 2} failed")
        assert peer.calls["held"] == before + 2


@pytest.mark.slow
async def test_entries_kept_per_caller_are_not_served_once_a_rule_makes_the_tool_public(
    make_sidecar, upstream
) -> None:
    """The attack: a config change never flushes entries, so the entries stored for
    alice, and for a caller who sent no credential at all, are still there when the
    operator makes the tool public. Bob's public lookup must find neither."""
    peer, app = upstream
    document = one_server(app.base_url + "/mcp", name="docs")
    sidecar = make_sidecar(document)
    q = unique()
    await call(sidecar, "search", {"q": q}, authorization="Bearer alice")
    await call(sidecar, "search", {"q": q})
    document["servers"][0]["cache"]["tools"] = [{"name": "search", "scope": "public"}]
    sidecar.write_config(document)
    await async_wait_until(
        lambda: sidecar.sample("mcpcache_config_reloads_total", result="applied") == 1,
        what="the reload to be applied",
    )
    calls = peer.calls["search"]
    bob = await call(sidecar, "search", {"q": q}, authorization="Bearer bob")
    assert status_of(bob) == "mcpcache; fwd=miss"
    assert "for Bearer bob" in bob.text
    assert peer.calls["search"] == calls + 1


async def test_a_caller_without_a_credential_never_meets_a_public_entry_fetched_with_one(
    make_sidecar, upstream
) -> None:
    # An upstream that refuses anonymous callers must not be bypassed through an entry
    # for every caller; nor may an anonymous answer reach those who sent a credential.
    peer, app = upstream
    rules = [{"name": "search", "scope": "public"}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    q = unique()
    searches = peer.calls["search"]
    await call(sidecar, "search", {"q": q}, authorization="Bearer carol")
    anonymous = [await call(sidecar, "search", {"q": q}) for _ in range(2)]
    statuses = [status_of(r) for r in anonymous]
    assert statuses == ["mcpcache; fwd=miss", "mcpcache; hit; detail=public"]
    assert "for Bearer carol" not in anonymous[0].text
    other_credential = await call(sidecar, "search", {"q": q}, **{"x-api-key": "k"})
    assert status_of(other_credential) == "mcpcache; fwd=miss", "a key is not a token"
    await introduce(sidecar.url("docs"), "Bearer dave", "search", {"q": unique()})
    dave = await call(sidecar, "search", {"q": q}, authorization="Bearer dave")
    assert status_of(dave) == "mcpcache; hit; detail=public"
    assert peer.calls["search"] == searches + 4, "carol, the anonymous, the key, dave's own"
