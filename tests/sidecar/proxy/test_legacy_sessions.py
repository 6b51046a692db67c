"""Legacy sessions and the cache: a session is not an identity (by default a new session
of the same caller reads what an earlier one stored), being in one is; never across
callers; a `sessionScoped` server keeps each session's entries apart (those tests sit
beside the isolation tests they extend, under that setting)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcpcache.sidecar.cache.store import ResponseCache
from mcpcache.sidecar.config import Server
from mcpcache.sidecar.rules.key.callers import opening_digest
from mcpcache.sidecar.upstream.sessions import OPENED_SESSIONS_KEPT, LegacySessions
from peers.clients import (
    LEGACY,
    MODERN,
    call_body,
    call_headers,
    http_client,
    mcp_client,
    post,
    unique,
)
from peers.echo import who_answered
from peers.serving import async_wait_until
from peers.sidecar import one_server

OPENING = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-11-25",
}
"""The headers of an `initialize` (a session-era client's first request)."""


async def opened(url: str, **headers: str) -> str:
    """A legacy session opened through the sidecar by an `initialize` with `headers`."""
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
    answer = await post(url, body, OPENING | headers)
    assert answer.status_code == 200
    return answer.headers["mcp-session-id"]


def in_session(session: str | None, **extra: str) -> dict[str, str]:
    """A session-era call's headers (the version said, as SDK clients say it)."""
    headers = call_headers("t", **{"mcp-protocol-version": "2025-11-25", **extra})
    if session is not None:
        headers["mcp-session-id"] = session
    return headers


@pytest.mark.parametrize("mode", [LEGACY, MODERN])
async def test_a_client_that_opens_a_session_per_call_hits_from_its_second_session(
    make_sidecar, upstream, mode: str
) -> None:
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    text, calls = unique(), peer.calls["echo"]
    answers = []
    for _ in range(3):  # as LangChain's adapters do: a client (and session) per call
        async with mcp_client(sidecar.url("s"), mode=mode) as client:
            answers.append((await client.call_tool("echo", {"text": text})).content[0].text)
    assert answers[0] == answers[1] == answers[2]
    assert peer.calls["echo"] == calls + 1  # it ran once
    hits = sidecar.sample("mcpcache_requests_total", server="s", method="tools/call", outcome="hit")
    assert hits == 2


async def test_a_new_session_of_another_caller_never_reads_an_earlier_sessions_entry(
    make_sidecar, upstream
) -> None:
    peer, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    text, calls = unique(), peer.calls["whoami"]
    seen = []
    for user in ("alice", "bob", "alice"):
        headers = {"authorization": f"Bearer {user}"}
        async with mcp_client(sidecar.url("s"), mode=LEGACY, headers=headers) as client:
            seen.append((await client.call_tool("whoami", {"text": text})).content[0].text)
    assert seen[0].startswith("user=Bearer alice")
    assert seen[1].startswith("user=Bearer bob")
    assert seen[2] == seen[0]  # alice's second session: her own entry
    assert peer.calls["whoami"] == calls + 2


async def test_any_session_the_caller_opened_reads_its_entries_but_no_other_does(
    sidecar_on_echo, echo_upstream
) -> None:
    peer, _ = echo_upstream
    arguments = {"q": unique()}
    url = sidecar_on_echo.url("echo")
    one, two, eve = (
        await opened(url),
        await opened(url),
        await opened(url, authorization="Bearer eve"),
    )
    first = await post(url, call_body(1, "t", arguments), in_session(one))
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    calls = peer.calls
    # Another session the same caller opened: a session is not an identity.
    again = await post(url, call_body(2, "t", arguments), in_session(two))
    assert again.headers["cache-status"] == "mcpcache; hit"
    assert again.json()["result"]["content"] == first.json()["result"]["content"]
    assert peer.calls == calls
    # A session not opened here (made up, or opened elsewhere) keeps its own entries.
    forged = await post(url, call_body(3, "t", arguments), in_session("forged-" + unique()))
    assert forged.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    # Outside any session (which a session-era upstream refuses), it goes upstream.
    outside = await post(url, call_body(4, "t", arguments), in_session(None))
    assert outside.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert who_answered(outside.json())["who"]["mcp-session-id"] is None
    # Another caller in a session it opened never reads the first caller's entry.
    other = await post(
        url, call_body(5, "t", arguments), in_session(eve, authorization="Bearer eve")
    )
    assert other.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert who_answered(other.json())["who"]["authorization"] == "Bearer eve"
    assert peer.calls == calls + 3


async def test_a_session_that_does_not_say_its_version_keeps_its_own_entries(
    sidecar_on_echo, echo_upstream
) -> None:
    # The 2025-03-26 clients send no version header: which version the session agreed
    # is unknown, and two sessions of one caller may have agreed on different ones.
    peer, _ = echo_upstream
    arguments = {"q": unique()}
    headers = call_headers("t")
    del headers["mcp-protocol-version"]
    calls = peer.calls
    for session in ("a-" + unique(), "b-" + unique()):
        answer = await post(
            sidecar_on_echo.url("echo"),
            call_body(1, "t", arguments),
            headers | {"mcp-session-id": session},
        )
        assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert who_answered(answer.json())["who"]["mcp-session-id"] == session
    assert peer.calls == calls + 2


async def test_ending_a_session_keeps_its_callers_entries(make_sidecar, upstream) -> None:
    _, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp"))
    text = unique()
    async with mcp_client(sidecar.url("s"), mode=LEGACY) as client:
        stored = (await client.call_tool("echo", {"text": text})).content[0].text
    # Leaving the client ended the session (a DELETE the upstream accepted).
    async with mcp_client(sidecar.url("s"), mode=LEGACY) as client:
        again = (await client.call_tool("echo", {"text": text})).content[0].text
    assert again == stored
    assert sidecar.sample("mcpcache_cache_evictions_total", reason="purged") == 0
    assert sidecar.sample("mcpcache_cache_entries") == 1


@pytest.mark.parametrize("session_scoped", [False, True], ids=["sessions-share", "by-session"])
async def test_an_answer_in_flight_when_its_session_ends_is_stored_only_if_sessions_share(
    make_sidecar, echo_upstream, session_scoped: bool
) -> None:
    peer, app = echo_upstream
    server = one_server(app.base_url + "/mcp", name="echo", sessionScoped=session_scoped)
    sidecar = make_sidecar(server)
    url = sidecar.url("echo")
    gate, session = unique(), await opened(url)
    arguments = {"q": unique(), "hold": gate}
    calls = peer.calls
    pending = asyncio.ensure_future(post(url, call_body(1, "t", arguments), in_session(session)))
    await async_wait_until(lambda: peer.calls == calls + 1, what="the call upstream")
    async with http_client(timeout=10) as http:
        ended = await http.delete(url, headers={"mcp-session-id": session})
    assert ended.status_code == 200
    peer.gate(gate).set()
    answer = await asyncio.wait_for(pending, 10)
    later = await post(url, call_body(2, "t", arguments), in_session(await opened(url)))
    if session_scoped:  # the session's entries ended with it, this one too
        assert answer.headers["cache-status"] == "mcpcache; fwd=miss; detail=invalidated"
        assert later.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    else:  # the caller's answer, whichever session asked
        assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert later.headers["cache-status"] == "mcpcache; hit"


@pytest.mark.parametrize(
    ("extra", "shared"),
    [({}, True), ({"error": {"code": -32000, "message": "no such session state"}}, False)],
    ids=["stored-answer", "error"],
)
async def test_a_follower_in_another_session_shares_only_an_answer_that_was_stored(
    sidecar_on_echo, echo_upstream, extra: dict[str, Any], shared: bool
) -> None:
    peer, _ = echo_upstream
    gate = unique()
    arguments = {"q": unique(), "hold": gate, **extra}
    url = sidecar_on_echo.url("echo")
    lead, other = await opened(url), await opened(url)
    calls = peer.calls
    leader = asyncio.ensure_future(post(url, call_body(1, "t", arguments), in_session(lead)))
    await async_wait_until(lambda: peer.calls == calls + 1, what="the leader upstream")
    follower = asyncio.ensure_future(post(url, call_body(2, "t", arguments), in_session(other)))
    await async_wait_until(lambda: sidecar_on_echo.waiting() == 1, what="the follower to wait")
    peer.gate(gate).set()
    led, followed = await asyncio.wait_for(asyncio.gather(leader, follower), 10)
    assert led.status_code == followed.status_code == 200
    if shared:
        assert "collapsed" in followed.headers["cache-status"]
        assert followed.json()["result"]["content"] == led.json()["result"]["content"]
        assert peer.calls == calls + 1
    else:  # the leader's error may be its session's own: the follower asks for itself
        assert "collapsed" not in followed.headers["cache-status"]
        assert peer.calls == calls + 2
        assert peer.seen[-1]["mcp-session-id"] == other


async def test_a_session_opened_with_a_credential_keeps_its_entries_when_its_calls_carry_none(
    sidecar_on_echo, echo_upstream
) -> None:
    # A server that authenticates only at `initialize` binds the user to the session; its
    # later calls carry the session alone. Two such users must never share an entry.
    url, arguments = sidecar_on_echo.url("echo"), {"q": unique()}
    sessions = {
        user: await opened(url, authorization=user) for user in ("Bearer alice", "Bearer bob")
    }
    for user, session in sessions.items():
        answer = await post(url, call_body(1, "t", arguments), in_session(session))
        assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert who_answered(answer.json())["who"]["bound_to"] == user
    again = await post(url, call_body(2, "t", arguments), in_session(sessions["Bearer alice"]))
    assert again.headers["cache-status"] == "mcpcache; hit"
    assert who_answered(again.json())["who"]["bound_to"] == "Bearer alice"
    # A call that carries its credential is keyed by it, not by its session.
    carried = in_session(sessions["Bearer bob"], authorization="Bearer bob")
    answer = await post(url, call_body(3, "t", arguments), carried)
    assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"


@pytest.mark.parametrize("by", ["header", "query"])
async def test_sessions_bound_by_a_header_or_query_at_initialize_never_share_calls_without_it(
    sidecar_on_echo, echo_upstream, by: str
) -> None:
    # A gateway names the user at `initialize` in a header that is no identity header,
    # or a client puts it in the query string; later calls carry the session alone. The
    # upstream answers each session for its own user: two users must never share.
    url, arguments = sidecar_on_echo.url("echo"), {"q": unique()}
    sessions = {}
    for user in ("alice", "bob"):
        if by == "header":
            sessions[user] = await opened(url, **{"x-user": user})
        else:
            sessions[user] = await opened(f"{url}?user={user}")
    for user, session in sessions.items():
        answer = await post(url, call_body(1, "t", arguments), in_session(session))
        assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert user in who_answered(answer.json())["who"]["bound_to"]
    again = await post(url, call_body(2, "t", arguments), in_session(sessions["alice"]))
    assert again.headers["cache-status"] == "mcpcache; hit"
    assert "alice" in who_answered(again.json())["who"]["bound_to"]


async def test_a_call_hiding_the_header_its_session_was_opened_by_keeps_its_session(
    sidecar_on_echo, echo_upstream
) -> None:
    # `Connection: x-user` keeps the header from the upstream and from the key: such a
    # call differs from its session's opener, whatever value it hides.
    url, arguments = sidecar_on_echo.url("echo"), {"q": unique()}
    for n, user in enumerate(("alice", "bob")):
        session = await opened(url, **{"x-user": user})
        hiding = in_session(session, **{"x-user": user, "connection": "x-user"})
        answer = await post(url, call_body(n + 1, "t", arguments), hiding)
        assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert who_answered(answer.json())["who"]["bound_to"] == user


async def test_a_blank_session_id_never_reads_a_sessions_entries(
    sidecar_on_echo, echo_upstream
) -> None:
    url, arguments = sidecar_on_echo.url("echo"), {"q": unique()}
    stored = await post(url, call_body(1, "t", arguments), in_session(await opened(url)))
    assert stored.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    blank = await post(url, call_body(2, "t", arguments), in_session(""))
    assert blank.headers["cache-status"] != "mcpcache; hit"


async def test_a_shared_cookie_on_calls_in_sessions_bound_to_users_never_shares_them(
    sidecar_on_echo, echo_upstream
) -> None:
    # `cookie` is an identity header: a load balancer's affinity cookie, the same for
    # every user, makes a call look credentialed; it is not what opened the session.
    url, arguments = sidecar_on_echo.url("echo"), {"q": unique()}
    sessions = {
        user: await opened(url, authorization=user) for user in ("Bearer alice", "Bearer bob")
    }
    for n, (user, session) in enumerate(sessions.items()):
        headers = in_session(session, cookie="lb=a")
        answer = await post(url, call_body(n + 1, "t", arguments), headers)
        assert answer.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        assert who_answered(answer.json())["who"]["bound_to"] == user


def test_a_session_is_unkeyed_only_for_the_request_that_opened_it_here() -> None:
    sessions = LegacySessions(ResponseCache(16, 1 << 20))
    server = Server.model_validate({"name": "s", "url": "http://127.0.0.1:9/mcp"})
    alice, carol = {"authorization": "Bearer alice"}, {"x-user": "carol"}
    sessions.opened(server, "alice-1", opening_digest(server, alice, ""))
    sessions.opened(server, "anonymous-1", opening_digest(server, {}, ""))
    sessions.opened(server, "carol-1", opening_digest(server, carol, ""))
    sessions.opened(server, "dave-1", opening_digest(server, {}, "user=dave"))

    def bound(session: str, query: str = "", **headers: str) -> bool:
        return sessions.bound(server, {"mcp-session-id": session, **headers}, query)

    assert not bound("alice-1", **alice)
    assert not bound("anonymous-1")
    assert not bound("carol-1", **carol)
    assert not bound("dave-1", "user=dave")
    # The version and the session are left out: an `initialize` need not send them.
    assert not bound("alice-1", **alice, **{"mcp-protocol-version": "2025-11-25"})
    assert bound("alice-1"), "no credential: bound"
    assert bound("alice-1", cookie="lb=a")
    assert bound("carol-1"), "the header its opening named the user by is missing"
    assert bound("carol-1", **{"x-user": "mallory"})
    assert bound("dave-1"), "the query its opening named the user by is missing"
    assert bound("dave-1", "user=mallory")
    assert bound("anonymous-1", **{"x-user": "carol"}), "a header its opening lacked"
    assert bound("carol-1", **carol, connection="x-user"), "hidden from the upstream"
    assert bound("made-up"), "not opened here"
    assert not bound(""), "blank: its own marker"
    # Forgotten among many sessions opened since, it is keyed by itself (never shared).
    for n in range(OPENED_SESSIONS_KEPT):
        sessions.opened(server, f"mallory-{n}", "")
    assert bound("anonymous-1")
