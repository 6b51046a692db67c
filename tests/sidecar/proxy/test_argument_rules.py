"""Rules on argument values through the sidecar, against the SDK's real server and
client: `skipIf`, writes that drop only the entries with their own argument values, and
the schema's defaults filled into the key (`fillSchemaDefaults`)."""

from __future__ import annotations

from typing import Any

import httpx

from peers import clients
from peers.clients import ask, call_tool, mcp_client, text_of, unique
from peers.sharedtier import SHARED_HIT, shared_config, stored_in_redis
from peers.sidecar import RunningSidecar, one_server

ALICE = {"authorization": "Bearer alice"}
BOB = {"authorization": "Bearer bob"}


async def call(
    sidecar: RunningSidecar, tool: str, arguments: dict[str, Any], **headers: str
) -> httpx.Response:
    return await call_tool(sidecar.url("docs"), tool, arguments, **headers)


def status_of(response: httpx.Response) -> str:
    return response.headers["cache-status"].removesuffix("; stored")


async def test_skip_if_sends_the_named_values_upstream_uncached_and_counts_them(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    rules = [{"name": "get_release", "skipIf": {"version": ["latest", "nightly"]}}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    name = unique()
    calls = peer.calls["get_release"]
    skipped = [
        await call(sidecar, "get_release", {"name": name, "version": v})
        for v in ("latest", "latest", "LATEST", "nightly")
    ]
    assert [status_of(r) for r in skipped] == ["mcpcache; fwd=bypass; detail=skip-if"] * 4
    assert peer.calls["get_release"] == calls + 4
    pinned = [
        await call(sidecar, "get_release", {"name": name, "version": "4.2"}) for _ in range(2)
    ]
    assert [status_of(r) for r in pinned] == ["mcpcache; fwd=miss", "mcpcache; hit"]
    assert peer.calls["get_release"] == calls + 5
    assert sidecar.sample("mcpcache_bypasses_total", server="docs", reason="skip_if") == 4


async def test_a_write_with_match_drops_exactly_the_matching_entries_for_every_caller(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    rules = [
        {
            "name": "create_issue",
            "invalidates": [{"tool": "list_issues", "match": ["owner", "repo"]}],
        }
    ]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    owner = unique()
    async with (
        mcp_client(sidecar.url("docs"), headers=ALICE) as alice,
        mcp_client(sidecar.url("docs"), headers=BOB) as bob,
    ):

        async def lists(repo: str) -> list[str]:
            args = {"owner": owner, "repo": repo}
            return [text_of(await c.call_tool("list_issues", args)) for c in (alice, bob)]

        first = {repo: await lists(repo) for repo in ("one", "two")}
        calls = peer.calls["list_issues"]
        assert {repo: await lists(repo) for repo in ("one", "two")} == first
        assert peer.calls["list_issues"] == calls, "all four entries are cached"

        await bob.call_tool("create_issue", {"owner": owner, "repo": "one", "title": "bug"})

        after = await lists("one")
        assert peer.calls["list_issues"] == calls + 2, "both callers' entries of repo one went"
        assert all("[bug]" in text for text in after)
        assert after[0].endswith(f"for Bearer alice #{calls + 1}")
        assert await lists("two") == first["two"], "another repository's entries stay"
        assert peer.calls["list_issues"] == calls + 2
    assert sidecar.sample("mcpcache_invalidations_total", server="docs", cause="write") == 1
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="purged") == 2


async def test_a_write_without_a_matched_argument_drops_every_entry_of_the_tool(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    rules = [
        {"name": "update_doc", "invalidates": [{"tool": "list_issues", "match": ["owner", "repo"]}]}
    ]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", tools=rules))
    owner = unique()
    for repo in ("one", "two"):
        await call(sidecar, "list_issues", {"owner": owner, "repo": repo})
    calls = peer.calls["list_issues"]
    # The write has no `owner` or `repo`: the sidecar cannot tell which repository's
    # entries it changed, so all of them go.
    await call(sidecar, "update_doc", {"name": unique(), "text": "new"})
    for repo in ("one", "two"):
        assert status_of(await call(sidecar, "list_issues", {"owner": owner, "repo": repo})) == (
            "mcpcache; fwd=miss"
        )
    assert peer.calls["list_issues"] == calls + 2


async def test_fill_schema_defaults_shares_an_omitted_argument_with_its_explicit_default(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", fillSchemaDefaults=True))
    name = unique()
    statuses = [
        status_of(await call(sidecar, "get_release", arguments))
        for arguments in ({"name": name}, {"name": name, "version": "latest"})
    ]
    assert statuses == ["mcpcache; fwd=miss"] * 2, "no schema seen yet: no sharing"
    async with mcp_client(sidecar.url("docs"), headers=ALICE) as alice:
        await alice.list_tools()
        name = unique()
        calls = peer.calls["get_release"]
        explicit = text_of(
            await alice.call_tool("get_release", {"name": name, "version": "latest"})
        )
        omitted = text_of(await alice.call_tool("get_release", {"name": name}))
        assert omitted == explicit
        assert peer.calls["get_release"] == calls + 1
        # The other way round, the omitted call's answer is filed apart: the server may
        # have changed its default since the listing, and whoever names "latest" must
        # never read an answer made under another default.
        name = unique()
        calls = peer.calls["get_release"]
        await alice.call_tool("get_release", {"name": name})
        await alice.call_tool("get_release", {"name": name, "version": "latest"})
        await alice.call_tool("get_release", {"name": name})
        assert peer.calls["get_release"] == calls + 2
        other = text_of(await alice.call_tool("get_release", {"name": name, "version": "4.2"}))
        assert other.startswith(f"{name} 4.2")

        paints = peer.calls["paint"]
        await alice.call_tool("paint", {"name": name})
        await alice.call_tool("paint", {"name": name, "colour": "red"})
        assert peer.calls["paint"] == paints + 2, "a default behind a $ref is not certain"

        await alice.call_tool("announce", {"kind": "tools"})
        name = unique()
        calls = peer.calls["get_release"]
        await alice.call_tool("get_release", {"name": name, "version": "latest"})
        await alice.call_tool("get_release", {"name": name})
        assert peer.calls["get_release"] == calls + 2, "forgotten once the tools changed"


async def test_filled_defaults_never_share_an_entry_between_two_end_users(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", fillSchemaDefaults=True))
    name = unique()
    async with (
        mcp_client(sidecar.url("docs"), headers=ALICE) as alice,
        mcp_client(sidecar.url("docs"), headers=BOB) as bob,
    ):
        await alice.list_tools()
        calls = peer.calls["search"]
        mine = text_of(await alice.call_tool("search", {"q": name}))
        theirs = text_of(await bob.call_tool("search", {"q": name, "requestId": ""}))
    assert peer.calls["search"] == calls + 2
    assert "for Bearer alice" in mine
    assert "for Bearer bob" in theirs


async def test_defaults_from_one_callers_listing_never_fill_another_callers_calls(
    make_sidecar, upstream
) -> None:
    # A schema may name one caller's own default (an owner that is the logged-in user):
    # Bob's omitted argument is filled only from a listing Bob was shown himself.
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", fillSchemaDefaults=True))
    name = unique()
    async with (
        mcp_client(sidecar.url("docs"), headers=ALICE) as alice,
        mcp_client(sidecar.url("docs"), headers=BOB) as bob,
    ):
        await alice.list_tools()
        calls = peer.calls["get_release"]
        await bob.call_tool("get_release", {"name": name})
        await bob.call_tool("get_release", {"name": name, "version": "latest"})
        assert peer.calls["get_release"] == calls + 2, "Alice's listing taught Bob nothing"
        await bob.list_tools()
        name = unique()
        await bob.call_tool("get_release", {"name": name, "version": "latest"})
        await bob.call_tool("get_release", {"name": name})
        assert peer.calls["get_release"] == calls + 3, "his own listing does"


async def test_defaults_from_a_listing_on_one_query_string_never_fill_calls_on_another(
    make_sidecar, upstream
) -> None:
    # The same headers, each user named in the query string (which the upstream sees and
    # may give each user a default by): Alice's listing says nothing of Bob's defaults.
    # (Raw requests: the SDK's client lists the tools itself before a call.)
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="docs", fillSchemaDefaults=True))
    alice, bob = (f"{sidecar.url('docs')}?user={user}" for user in ("alice", "bob"))
    assert (await ask(alice, "tools/list", 1, ALICE["authorization"])).status_code == 200
    name, calls = unique(), peer.calls["get_release"]
    for arguments in ({"name": name, "version": "latest"}, {"name": name}):
        await call_tool(bob, "get_release", arguments, **ALICE)
    assert peer.calls["get_release"] == calls + 2, "Alice's listing filled nothing of Bob's"
    name, calls = unique(), peer.calls["get_release"]
    for arguments in ({"name": name, "version": "latest"}, {"name": name}):
        await call_tool(alice, "get_release", arguments, **ALICE)
    assert peer.calls["get_release"] == calls + 1, "her own listing fills her calls"


async def test_a_listing_answered_from_the_cache_teaches_its_caller_the_defaults(
    make_sidecar, json_upstream, redis_server
) -> None:
    # Replica B first answers Alice's listing from the shared tier, then from memory:
    # a listing of her own teaches her defaults there as a miss would have.
    peer, app = json_upstream
    document = shared_config(app, redis_server.url)
    document["servers"][0]["cache"].update(fillSchemaDefaults=True, metadataTTL="5m")
    a, b = make_sidecar(document), make_sidecar(document)
    alice = ALICE["authorization"]
    await clients.ask(a.url("s"), "tools/list", 1, alice)
    await stored_in_redis(a)
    statuses = [(await clients.ask(b.url("s"), "tools/list", n, alice)).headers for n in (2, 3)]
    assert [h["cache-status"] for h in statuses] == [SHARED_HIT, "mcpcache; hit"]
    name = unique()
    calls = peer.calls["get_release"]
    for arguments in ({"name": name, "version": "latest"}, {"name": name}):
        await call_tool(b.url("s"), "get_release", arguments, **ALICE)
    assert peer.calls["get_release"] == calls + 1
