"""Who may read an entry (`docs/operations/security.md#who-may-read-an-entry`), proven
against an upstream that answers by the whole authorization context
(`peers.contexts`): no request is ever answered anything but what the upstream itself
would answer it, across credentials of every kind, tenants by header and by query
string, sessions (none, opened, opened by another, forged, re-initialized, ended), both
protocol eras, entries for every caller and private ones, `sessionScoped` or not, and
two replicas sharing a Redis tier. Then the attacks that broke it, as examples: the
three of the issue that wrote the rule down, and those of its review (a session signed
in by an `initialize` inside it, a context refused since it was answered, an answer
older than the tool's TTL)."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peers.clients import MODERN, call_body, http_client
from peers.contexts import SESSION, ContextUpstream
from peers.serving import ServedApp, past, served
from peers.sharedtier import new_app
from peers.sidecar import RunningSidecar, one_server

LEGACY_VERSION = "2025-06-18"
PUBLIC_TOOLS = [{"name": "search", "scope": "public"}, {"name": "hello", "scope": "public"}]
CREDENTIALS = [None, "", "Bearer", "Bearer alice", "Bearer bob", "Bearer junk"]
TENANTS = [None, ("header", "b"), ("query", "b")]
ids = itertools.count(1)


@pytest.fixture
def contexts() -> Iterator[tuple[ContextUpstream, ServedApp]]:
    peer = ContextUpstream()
    with served(peer, lifespan="off") as app:
        yield peer, app


class Client:
    """The requests of one test, through the sidecars it runs."""

    def __init__(self, http: httpx.AsyncClient, sidecars: list[RunningSidecar]) -> None:
        self.http, self.sidecars = http, sidecars

    async def send(
        self,
        replica: int,
        body: dict[str, Any] | None,
        headers: dict[str, str],
        query: str = "",
        method: str = "POST",
    ) -> httpx.Response:
        url = self.sidecars[replica % len(self.sidecars)].url("t") + query
        content = json.dumps(body).encode() if body is not None else None
        return await self.http.request(method, url, content=content, headers=headers)

    async def open(self, replica: int, credential: str | None, session: str | None = None) -> str:
        body = {
            "jsonrpc": "2.0",
            "id": next(ids),
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        headers = _base(credential)
        if session is not None:
            headers[SESSION] = session
        response = await self.send(replica, body, headers)
        return response.headers.get(SESSION, "")


def _base(credential: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if credential is not None:
        headers["authorization"] = credential
    return headers


def call_request(
    era: str,
    version: bool,
    session: str | None,
    credential: str | None,
    tenant: tuple[str, str] | None,
    tool: str,
    q: str,
) -> tuple[dict[str, Any], dict[str, str], str]:
    """The body, headers and query string of one `tools/call`."""
    request_id = next(ids)
    headers = _base(credential)
    if era == "modern":
        body = call_body(request_id, tool, {"q": q})
        headers |= {"mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": tool}
    else:
        params = {"name": tool, "arguments": {"q": q}}
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        if version:
            headers["mcp-protocol-version"] = LEGACY_VERSION
        if session is not None:
            headers[SESSION] = session
    query = ""
    if tenant is not None:
        where, name = tenant
        if where == "header":
            headers["x-tenant"] = name
        else:
            query = f"?tenant={name}"
    return body, headers, query


def message_of(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        return dict(json.loads(data[-1]))
    return dict(response.json())


async def check_call(
    client: Client,
    peer: ContextUpstream,
    replica: int,
    request: tuple[dict[str, Any], dict[str, str], str],
) -> httpx.Response:
    """Send one call; its answer must be what the upstream answers that request now, or,
    for a request in a session that has ended since, what it answered that session while
    it was live: a context stays answered for an entry's lifetime (the rule)."""
    body, headers, query = request
    status, expected = peer.answer(headers, query.removeprefix("?"), body)
    response = await client.send(replica, body, headers, query)
    if response.status_code == 200 and headers.get(SESSION) in peer.ended:
        status, expected = peer.answer(headers, query.removeprefix("?"), body, while_live=True)
    where = f"{headers} {query} {body['params']} -> {response.headers.get('cache-status')}"
    assert response.status_code == status, where
    if status == 200:
        message = message_of(response)
        assert message["id"] == body["id"], where
        assert message["result"]["content"] == expected["result"]["content"], where
    return response


CALL = st.tuples(
    st.integers(0, 1),  # replica
    st.sampled_from(["modern", "legacy"]),
    st.booleans(),  # a legacy request says its version
    st.sampled_from([None, 0, 1, 2, "forged"]),  # the session: none, one opened, made up
    st.sampled_from(CREDENTIALS),
    st.sampled_from(TENANTS),
    st.sampled_from(["search", "hello", "whoami"]),
    st.just("x"),  # one argument: every call of a tool meets the others' entries
)
STEP = st.one_of(
    st.tuples(st.just("open"), st.integers(0, 1), st.sampled_from(CREDENTIALS)),
    st.tuples(
        st.just("reinit"), st.integers(0, 1), st.integers(0, 2), st.sampled_from(CREDENTIALS)
    ),
    st.tuples(st.just("end"), st.integers(0, 1), st.integers(0, 2)),
    st.tuples(st.just("calls"), st.lists(CALL, min_size=1, max_size=4)),
)


def run_steps(sidecars: list[RunningSidecar], peer: ContextUpstream, steps: list[Any]) -> None:
    async def main() -> None:
        sessions: list[str] = []
        async with http_client(timeout=20) as http:
            client = Client(http, sidecars)
            for step in steps:
                kind = step[0]
                if kind == "open":
                    if opened := await client.open(step[1], step[2]):
                        sessions.append(opened)
                elif kind == "reinit" and sessions:
                    await client.open(step[1], step[3], sessions[step[2] % len(sessions)])
                elif kind == "end" and sessions:
                    session = sessions[step[2] % len(sessions)]
                    await client.send(step[1], None, {SESSION: session}, method="DELETE")
                elif kind == "calls":
                    batch = []
                    for replica, era, version, slot, credential, tenant, tool, q in step[1]:
                        session = None
                        if era == "legacy" and slot == "forged":
                            session = "forged-session"
                        elif era == "legacy" and slot is not None and sessions:
                            session = sessions[slot % len(sessions)]
                        request = call_request(era, version, session, credential, tenant, tool, q)
                        batch.append(check_call(client, peer, replica, request))
                    await asyncio.gather(*batch)

    asyncio.run(main())


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(STEP, min_size=1, max_size=10))
def no_request_is_answered_what_the_upstream_would_not_answer_it(
    sidecars: list[RunningSidecar], peer: ContextUpstream, steps: list[Any]
) -> None:
    run_steps(sidecars, peer, steps)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("setup", ["replicas", "session_scoped"])
def test_no_request_is_answered_what_the_upstream_would_not_answer_it(
    make_sidecar, redis_server, contexts, setup: str
) -> None:
    peer, app = contexts
    if setup == "replicas":
        document = one_server(app.base_url + "/mcp", name="t", tools=PUBLIC_TOOLS)
        document["appId"] = new_app()
        document["sharedCache"] = {"url": redis_server.url, "timeout": "1s"}
        sidecars = [make_sidecar(document), make_sidecar(document)]
    else:
        document = one_server(
            app.base_url + "/mcp", name="t", tools=PUBLIC_TOOLS, sessionScoped=True
        )
        sidecars = [make_sidecar(document)]
    no_request_is_answered_what_the_upstream_would_not_answer_it(sidecars, peer)
    # The property must have met entries, or it proves nothing.
    hits = sum(
        sidecar.sample("mcpcache_requests_total", server="t", method="tools/call", outcome="hit")
        for sidecar in sidecars
    )
    assert hits > 0


def _one(make_sidecar, app: ServedApp, **cache: Any) -> RunningSidecar:
    return make_sidecar(one_server(app.base_url + "/mcp", name="t", tools=PUBLIC_TOOLS, **cache))


def legacy_call(
    tool: str, session: str | None = None, credential: str | None = None, **kw: Any
) -> tuple[dict[str, Any], dict[str, str], str]:
    return call_request("legacy", True, session, credential, kw.get("tenant"), tool, kw["q"])


@pytest.mark.parametrize("session_scoped", [False, True])
async def test_a_call_of_a_user_signed_in_at_initialize_answers_no_anonymous_caller(
    make_sidecar, contexts, session_scoped: bool
) -> None:
    peer, app = contexts
    sidecar = _one(make_sidecar, app, sessionScoped=session_scoped)
    async with http_client(timeout=20) as http:
        client = Client(http, [sidecar])
        signed_in = await client.open(0, "Bearer alice")
        q = new_app()
        # The client sends its credential at `initialize` only; the upstream answers
        # the session's calls as Alice.
        mine = await check_call(client, peer, 0, legacy_call("search", signed_in, q=q))
        assert mine.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        again = await check_call(client, peer, 0, legacy_call("search", signed_in, q=q))
        assert again.headers["cache-status"] == "mcpcache; hit; detail=public"
        anonymous = await client.open(0, None)
        for session in (anonymous, None):
            refused = await check_call(client, peer, 0, legacy_call("search", session, q=q))
            assert refused.status_code == 401  # the upstream's own answer, not the entry


@pytest.mark.parametrize("where", ["header", "query"])
async def test_a_context_the_upstream_answered_in_one_tenant_reads_nothing_in_another(
    make_sidecar, contexts, where: str
) -> None:
    peer, app = contexts
    sidecar = _one(make_sidecar, app)
    async with http_client(timeout=20) as http:
        client = Client(http, [sidecar])
        q = new_app()
        in_b = legacy_call("search", credential="Bearer bob", tenant=(where, "b"), q=q)
        assert (await check_call(client, peer, 0, in_b)).status_code == 200
        in_a = legacy_call("search", credential="Bearer alice", tenant=(where, "a"), q=q)
        assert (await check_call(client, peer, 0, in_a)).status_code == 200
        alice_in_b = legacy_call("search", credential="Bearer alice", tenant=(where, "b"), q=q)
        assert (await check_call(client, peer, 0, alice_in_b)).status_code == 403


async def test_an_initialize_inside_a_session_never_rebinds_it(make_sidecar, contexts) -> None:
    peer, app = contexts
    sidecar = _one(make_sidecar, app)
    async with http_client(timeout=20) as http:
        client = Client(http, [sidecar])
        victim = await client.open(0, "Bearer alice")
        # Anyone who learns the id sends an `initialize` in it, without a credential.
        assert await client.open(0, None, victim) == victim
        q = new_app()
        alices = await check_call(client, peer, 0, legacy_call("whoami", victim, q=q))
        assert alices.status_code == 200
        stranger = await client.open(0, None)
        refused = await check_call(client, peer, 0, legacy_call("whoami", stranger, q=q))
        assert refused.status_code == 401


@pytest.mark.parametrize("tool", ["whoami", "search"])
async def test_a_session_signed_in_by_a_later_initialize_answers_no_anonymous_caller(
    make_sidecar, contexts, tool: str
) -> None:
    peer, app = contexts
    sidecar = _one(make_sidecar, app)
    async with http_client(timeout=20) as http:
        client = Client(http, [sidecar])
        opened = await client.open(0, None)  # opened anonymously, here
        assert await client.open(0, "Bearer alice", opened) == opened  # then signed in
        q = new_app()
        alices = await check_call(client, peer, 0, legacy_call(tool, opened, q=q))
        assert alices.status_code == 200
        stranger = await client.open(0, None)
        refused = await check_call(client, peer, 0, legacy_call(tool, stranger, q=q))
        assert refused.status_code == 401


async def test_a_refusal_ends_what_the_upstream_answered_a_context_before(
    make_sidecar, contexts
) -> None:
    peer, app = contexts
    sidecar = _one(make_sidecar, app, ttl="300s")
    async with http_client(timeout=20) as http:
        client = Client(http, [sidecar])
        alice = {"credential": "Bearer alice"}
        await check_call(client, peer, 0, legacy_call("search", q=new_app(), **alice))
        peer.revoked.add("Bearer alice")
        refused = await check_call(client, peer, 0, legacy_call("search", q=new_app(), **alice))
        assert refused.status_code == 401
        q = new_app()
        bobs = legacy_call("search", credential="Bearer bob", q=q)
        assert (await check_call(client, peer, 0, bobs)).status_code == 200
        again = await check_call(client, peer, 0, legacy_call("search", q=q, **alice))
        assert again.status_code == 401  # upstream, not Bob's entry


async def test_an_answered_context_reads_fresh_entries_for_every_caller_for_the_tools_ttl(
    make_sidecar, contexts
) -> None:
    peer, app = contexts
    sidecar = _one(make_sidecar, app, ttl="1s", staleIfError="10m")
    async with http_client(timeout=20) as http:
        client = Client(http, [sidecar])
        alice = {"credential": "Bearer alice"}
        await check_call(client, peer, 0, legacy_call("search", q=new_app(), **alice))
        answered = time.monotonic()  # her context was answered before this
        peer.revoked.add("Bearer alice")  # and nothing here hears of it
        await past(answered + 1.05)
        q = new_app()
        bobs = legacy_call("search", credential="Bearer bob", q=q)
        assert (await check_call(client, peer, 0, bobs)).status_code == 200
        later = await check_call(client, peer, 0, legacy_call("search", q=q, **alice))
        assert later.status_code == 401  # upstream: her answer is older than the TTL
