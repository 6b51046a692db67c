"""Isolation under attack: each test replays one way a caller could read, or poison,
another caller's answer, against the real sidecar and an upstream that behaves as the
attack needs (an SDK server where it can, a raw echoing peer where it cannot)."""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peers.asgi import read_body, send_json
from peers.clients import (
    LEGACY,
    as_upstream_said,
    call_body,
    call_headers,
    http_client,
    mcp_client,
    post,
    unique,
)
from peers.echo import who_answered
from peers.serving import ServedApp, async_wait_until
from peers.sidecar import RunningSidecar, one_server


@pytest.fixture
def sidecar_on_echo_by_session(make_sidecar, echo_upstream) -> RunningSidecar:
    """As `sidecar_on_echo`, on a `sessionScoped` server: each session's entries apart."""
    server = one_server(echo_upstream[1].base_url + "/mcp", name="echo", sessionScoped=True)
    sidecar: RunningSidecar = make_sidecar(server)
    return sidecar


async def call(
    sidecar: RunningSidecar, arguments: dict[str, Any], request_id: Any = 1, **headers: str
) -> httpx.Response:
    extra = {name.replace("_", "-"): value for name, value in headers.items()}
    return await post(
        sidecar.url("echo"), call_body(request_id, "t", arguments), call_headers("t", **extra)
    )


async def test_a_cookie_one_caller_was_given_never_reaches_another(
    sidecar_on_echo, echo_upstream
) -> None:
    peer, _ = echo_upstream
    cookie = [["set-cookie", "session=alice-secret; Path=/"]]
    alice = await call(
        sidecar_on_echo, {"q": unique(), "respond_headers": cookie}, authorization="Bearer alice"
    )
    assert alice.headers["set-cookie"] == "session=alice-secret; Path=/"  # hers, untouched
    bob = await call(sidecar_on_echo, {"q": unique()}, authorization="Bearer bob")
    assert who_answered(bob.json())["who"]["cookie"] is None
    assert "cookie" not in peer.seen[-1]


@pytest.mark.parametrize(
    "header",
    [
        "authorization",
        "proxy-authorization",
        "cookie",
        "x-api-key",
        # Not listed in identityHeaders, but named like credentials: keyed all the same.
        "x-auth-token",
        "x-tenant-id",
    ],
)
async def test_users_told_apart_by_any_identity_header_never_share_an_entry(
    sidecar_on_echo, echo_upstream, header: str
) -> None:
    peer, _ = echo_upstream
    arguments = {"q": unique()}
    first = await call(sidecar_on_echo, arguments, **{header: "user-one"})
    calls = peer.calls
    second = await call(sidecar_on_echo, arguments, **{header: "user-two"})
    assert peer.calls == calls + 1, "another user's call must reach the upstream"
    assert who_answered(second.json())["who"][header] == "user-two"
    again = await call(sidecar_on_echo, arguments, **{header: "user-one"})
    assert again.headers["cache-status"] == "mcpcache; hit"
    assert as_upstream_said(again.json()["result"]) == first.json()["result"]
    assert peer.calls == calls + 1


async def test_configured_identity_headers_separate_users(make_sidecar, echo_upstream) -> None:
    _peer, app = echo_upstream
    sidecar = make_sidecar(
        one_server(app.base_url + "/mcp", name="echo", identityHeaders=["X-Tenant"])
    )
    arguments = {"q": unique()}
    await call(sidecar, arguments, x_tenant="a")
    second = await call(sidecar, arguments, x_tenant="b")
    assert second.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert (await call(sidecar, arguments, x_tenant="a")).headers["cache-status"] == "mcpcache; hit"


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ([["cache-control", "no-store"]], "no-store"),
        ([["cache-control", "private, max-age=60"]], "no-store"),
        ([["cache-control", "no-cache"]], "no-cache"),
        ([["cache-control", "max-age=0"]], "no-cache"),
        ([["cache-control", "public, s-maxage=0, max-age=60"]], "no-cache"),
        ([["vary", "X-Forwarded-User"]], "vary"),
        ([["vary", "*"]], "vary"),
        ([["vary", "Authorization"], ["vary", "X-Other"]], "vary"),
        ([["set-cookie", "lb=1"]], "set-cookie"),
    ],
)
async def test_answers_a_shared_cache_must_not_keep_are_not_stored(
    sidecar_on_echo, echo_upstream, headers: list[list[str]], detail: str
) -> None:
    peer, _ = echo_upstream
    arguments = {"q": unique(), "respond_headers": headers}
    for request_id in (1, 2):
        response = await call(sidecar_on_echo, arguments, request_id, authorization="Bearer a")
        assert response.headers["cache-status"] == f"mcpcache; fwd=miss; detail={detail}"
    assert who_answered(response.json())["call"] == peer.calls  # the second went upstream
    reason = detail.replace("-", "_")
    assert sidecar_on_echo.sample("mcpcache_not_stored_total", server="echo", reason=reason) == 2
    assert len(sidecar_on_echo.sidecar.cache) == 0


@pytest.mark.parametrize(
    "headers",
    [
        [["vary", "Authorization, Accept-Encoding"]],
        [["vary", "mcp-protocol-version"]],
        [["cache-control", "public, max-age=60"]],
    ],
)
async def test_answers_varying_only_on_what_the_key_holds_are_stored(
    sidecar_on_echo, headers: list[list[str]]
) -> None:
    arguments = {"q": unique(), "respond_headers": headers}
    first = await call(sidecar_on_echo, arguments)
    assert first.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert (await call(sidecar_on_echo, arguments, 2)).headers["cache-status"] == "mcpcache; hit"


async def test_max_age_shortens_the_entry_and_the_hit_carries_no_upstream_cookie(
    make_sidecar, echo_upstream
) -> None:
    _, app = echo_upstream
    sidecar = make_sidecar(
        one_server(app.base_url + "/mcp", name="echo", ttl="60s", ignoreSetCookie=True)
    )
    arguments = {
        "q": unique(),
        "respond_headers": [["cache-control", "max-age=7"], ["set-cookie", "lb=node-3"]],
    }
    miss = await call(sidecar, arguments)
    assert miss.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert miss.headers["set-cookie"] == "lb=node-3"
    (entry,) = sidecar.sidecar.cache.values()
    assert entry.expires_at - entry.stored_at == pytest.approx(7)
    hit = await call(sidecar, arguments, 2)
    assert hit.headers["cache-status"] == "mcpcache; hit"
    assert "set-cookie" not in hit.headers


async def test_protocol_versions_never_share_an_entry(sidecar_on_echo, echo_upstream) -> None:
    peer, _ = echo_upstream
    arguments = {"q": unique()}
    await call(sidecar_on_echo, arguments, mcp_protocol_version="2026-07-28")
    calls = peer.calls
    other = await call(sidecar_on_echo, arguments, mcp_protocol_version="2025-11-25")
    assert peer.calls == calls + 1
    assert who_answered(other.json())["who"]["mcp-protocol-version"] == "2025-11-25"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("18446744073709551617", "18446744073709551618"),
        ("0.1", "0.10000000000000000555"),
        ("123456789012345678901234567890", "123456789012345678901234567891"),
        ("0.0", "1e-400"),
        ("1.0", "1.00"),
        ("100.0", "1e2"),
    ],
)
async def test_numbers_a_double_cannot_hold_never_share_an_entry(
    sidecar_on_echo, echo_upstream, one: str, other: str
) -> None:
    # Each number is keyed by its spelling: both are cached, each under its own entry.
    peer, _app = echo_upstream
    calls = peer.calls
    account = unique()
    answers: dict[str, list[Any]] = {}
    for number in (one, other, one, other):
        body = (
            '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
            '{"name":"t","arguments":{"n":' + number + ',"account":"' + account + '"}}}'
        )
        async with http_client(timeout=30) as http:
            response = await http.post(
                sidecar_on_echo.url("echo"), content=body, headers=call_headers("t")
            )
        answers.setdefault(number, []).append(
            (response.headers["cache-status"], who_answered(response.json())["call"])
        )
    assert peer.calls == calls + 2
    for number in (one, other):
        (first, first_call), (second, second_call) = answers[number]
        assert (first, second) == ("mcpcache; fwd=miss; stored", "mcpcache; hit")
        assert first_call == second_call
    assert answers[one][0][1] != answers[other][0][1]


@pytest.mark.parametrize(
    "headers",
    [
        [("authorization", "Bearer a"), ("authorization", "Bearer b")],
        [("x-api-key", "k1"), ("x-api-key", "k2")],
        [("authorization", "Bearer a"), ("connection", "authorization")],
        [("mcp-session-id", "s"), ("connection", "keep-alive, Mcp-Session-Id")],
    ],
)
async def test_ambiguous_credentials_go_upstream_uncached(
    sidecar_on_echo, echo_upstream, headers
) -> None:
    # Once refused; now the upstream decides whom it serves, and the cache steps aside:
    # nothing is looked up, nothing stored, each repeat goes upstream.
    peer, _ = echo_upstream
    calls = peer.calls
    base = list(call_headers("t").items())
    for request_id in (1, 2):
        async with http_client(timeout=30) as http:
            response = await http.post(
                sidecar_on_echo.url("echo"),
                content=httpx.Request("POST", "/", json=call_body(request_id, "t", {})).read(),
                headers=base + headers,
            )
        assert response.status_code == 200
        assert response.headers["cache-status"] == (
            "mcpcache; fwd=request; detail=ambiguous-headers"
        )
        assert response.json()["id"] == request_id
    assert peer.calls == calls + 2
    assert len(sidecar_on_echo.sidecar.cache) == 0


async def test_task_requests_and_task_results_are_never_cached(
    sidecar_on_echo, echo_upstream
) -> None:
    _peer, _ = echo_upstream
    body = call_body(1, "t", {"q": unique()})
    body["params"]["task"] = {"ttl": 60000}
    statuses = [
        (await post(sidecar_on_echo.url("echo"), body, call_headers("t"))).headers["cache-status"]
        for _ in range(2)
    ]
    assert statuses == ["mcpcache; fwd=request"] * 2
    handle = {"resultType": "task", "task": {"taskId": unique(), "status": "working"}}
    for request_id in (1, 2):
        response = await call(sidecar_on_echo, {"q": "x", "result": handle}, request_id)
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=task"
    assert len(sidecar_on_echo.sidecar.cache) == 0


async def test_origin_null_is_refused(sidecar_on_echo, echo_upstream) -> None:
    peer, _ = echo_upstream
    calls = peer.calls
    response = await call(sidecar_on_echo, {"q": "x"}, origin="null")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == -32005
    assert peer.calls == calls


async def test_a_request_that_already_passed_this_sidecar_is_refused(
    sidecar_on_echo, echo_upstream
) -> None:
    peer, _ = echo_upstream
    await call(sidecar_on_echo, {"q": unique()})
    via = peer.seen[-1]["via"]
    calls = peer.calls
    looped = await call(sidecar_on_echo, {"q": unique()}, via=f"1.1 proxy.example, {via}")
    assert looped.status_code == 508
    assert peer.calls == calls


async def test_legacy_session_answers_stay_in_their_session_on_a_session_scoped_server(
    make_sidecar, upstream
) -> None:
    _, app = upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", sessionScoped=True))
    text = unique()
    async with mcp_client(sidecar.url("s"), mode=LEGACY) as client:
        cached = (await client.call_tool("echo", {"text": text})).content[0].text
        # The same call under a forged session id, and under none: never the session's
        # cached answer (the upstream decides what they get).
        for forged in ({"mcp-session-id": "forged-" + unique()}, {}):
            body = call_body(9, "echo", {"text": text})
            response = await post(sidecar.url("s"), body, call_headers("echo") | forged)
            assert response.headers.get("cache-status") != "mcpcache; hit"
            assert cached not in response.text
    # Leaving the client ends the session (DELETE): its entry goes with it.
    await async_wait_until(
        lambda: sidecar.sample("mcpcache_cache_evictions_total", reason="purged") == 1,
        what="the session's entry to be dropped",
    )


@pytest.mark.parametrize("in_lines", [False, True], ids=["one-line", "many-lines"])
async def test_one_huge_event_is_relayed_without_being_held(
    make_sidecar, echo_upstream, in_lines
) -> None:
    _, app = echo_upstream
    sidecar = make_sidecar({"servers": [{"name": "echo", "url": app.base_url + "/mcp"}]})
    size = 30 << 20
    gc.collect()
    tracemalloc.start()
    try:
        received = 0
        async with (
            http_client(timeout=60) as http,
            http.stream(
                "POST",
                sidecar.url("echo"),
                json=call_body(1, "t", {"huge_event": size, "in_lines": in_lines}),
                headers=call_headers("t"),
            ) as response,
        ):
            async for chunk in response.aiter_raw():
                received += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert received > size
    assert peak < 8 << 20, f"relaying one {size >> 20} MiB event held {peak >> 20} MiB"


async def test_connections_that_never_finish_their_request_are_closed(
    make_sidecar, echo_upstream
) -> None:
    _, app = echo_upstream
    document = one_server(app.base_url + "/mcp", name="echo") | {"headerTimeout": "300ms"}
    sidecar = make_sidecar(document)
    for port in (sidecar.port, sidecar.metrics_port):
        sockets = []
        for i in range(20):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            head = b"POST /mcp/echo HTTP/1.1\r\nHost: localhost\r\n"
            if i % 2:  # whole headers, then a body that never arrives
                head += b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            sock.sendall(head)
            sockets.append(sock)
        try:
            loop = asyncio.get_running_loop()
            for sock in sockets:
                # Closed by the sidecar (a route that needs no body may answer first).
                await asyncio.wait_for(loop.run_in_executor(None, _read_to_end, sock), 5)
        finally:
            for sock in sockets:
                sock.close()
    # The listener still serves well-behaved callers.
    assert (await call(sidecar, {"q": unique()})).status_code == 200


async def test_a_request_answered_before_its_body_ended_still_has_a_deadline(
    make_sidecar, echo_upstream
) -> None:
    """An early answer (a 404 for a path it never reads the body of) must not stop the
    clock: a client that sends the rest of its body afterwards, then nothing, is closed."""
    _, app = echo_upstream
    document = one_server(app.base_url + "/mcp", name="echo") | {"headerTimeout": "300ms"}
    sidecar = make_sidecar(document)
    sock = socket.create_connection(("127.0.0.1", sidecar.port), timeout=5)
    loop = asyncio.get_running_loop()
    try:
        sock.sendall(b"POST /nope HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1\r\n\r\n")
        (answer,) = await asyncio.wait_for(loop.run_in_executor(None, _read_responses, sock, 1), 5)
        assert answer.startswith(b"HTTP/1.1 404")
        sock.sendall(b"x")  # the rest of the body, after the answer; then nothing more
        await asyncio.wait_for(loop.run_in_executor(None, _read_to_end, sock), 5)
    finally:
        sock.close()


async def test_a_pipelined_request_is_not_cut_off_while_it_is_answered(
    make_sidecar, echo_upstream
) -> None:
    """Two requests sent back to back: the second, read whole while the first was being
    answered, may take longer than the header timeout to answer; it is not a slow request."""
    peer, app = echo_upstream
    document = one_server(app.base_url + "/mcp", name="echo") | {"headerTimeout": "300ms"}
    sidecar = make_sidecar(document)
    gates = [unique(), unique()]
    requests = b""
    for request_id, gate in enumerate(gates, 1):
        body = json.dumps(call_body(request_id, "t", {"q": unique(), "hold": gate})).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in call_headers("t").items())
        requests += (
            f"POST /mcp/echo HTTP/1.1\r\nHost: localhost\r\n{head}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
    calls = peer.calls
    sock = socket.create_connection(("127.0.0.1", sidecar.port), timeout=10)
    loop = asyncio.get_running_loop()
    try:
        sock.sendall(requests)
        await async_wait_until(lambda: peer.calls == calls + 1, what="the first call upstream")
        peer.gate(gates[0]).set()
        await async_wait_until(lambda: peer.calls == calls + 2, what="the second call upstream")
        # Past the header timeout while the second is answered: the condition under test.
        await asyncio.sleep(0.6)
        peer.gate(gates[1]).set()
        answers = await asyncio.wait_for(loop.run_in_executor(None, _read_responses, sock, 2), 10)
    finally:
        sock.close()
    assert [answer[:12] for answer in answers] == [b"HTTP/1.1 200"] * 2


async def test_an_answer_a_hit_could_not_repeat_exactly_is_not_stored(sidecar_on_echo) -> None:
    balance = 2**70 + 1
    result = f'{{"content": [{{"type": "text", "text": "b"}}], "balance": {balance}}}'
    for request_id in (1, 2):
        arguments = {"q": unique(), "result_json": result}
        response = await call(sidecar_on_echo, arguments, request_id)
        assert response.headers["cache-status"] == "mcpcache; fwd=miss; detail=inexact-number"
        assert str(balance) in response.text


def _read_responses(sock: socket.socket, count: int) -> list[bytes]:
    """`count` whole responses with a Content-Length, read off a blocking socket."""
    responses: list[bytes] = []
    data = b""
    while len(responses) < count:
        while b"\r\n\r\n" not in data:
            data += _received(sock)
        head, _, rest = data.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(rest) < length:
            rest += _received(sock)
        responses.append(head + b"\r\n\r\n" + rest[:length])
        data = rest[length:]
    return responses


def _received(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise ConnectionError("the sidecar closed the connection")
    return chunk


def _read_to_end(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


IDENTITY = st.fixed_dictionaries(
    {},
    optional={
        "authorization": st.sampled_from(["Bearer a", "Bearer b"]),
        "x-api-key": st.sampled_from(["k1", "k2"]),
        "cookie": st.sampled_from(["s=1", "s=2"]),
        "mcp-session-id": st.sampled_from(["session-1", "session-2"]),
        "mcp-protocol-version": st.sampled_from(["2026-07-28", "2025-11-25"]),
    },
)
CALLS = st.lists(
    st.tuples(IDENTITY, st.sampled_from([1, 2, 2**64 + 1, 2**64 + 2, 0.5]), st.integers(0, 99)),
    min_size=1,
    max_size=10,
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(batches=st.lists(CALLS, min_size=1, max_size=3))
def no_answer_is_ever_one_produced_for_another_identity(
    sidecar_on_echo, session_scoped, batches
) -> None:
    run = unique()

    async def one(http: httpx.AsyncClient, who: dict[str, str], number: Any, rid: int) -> None:
        body = (
            f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"t",'
            f'"arguments":{{"run":"{run}","n":{number}}}}}}}'
        )
        response = await http.post(
            sidecar_on_echo.url("echo"), content=body, headers=call_headers("t") | who
        )
        answer = response.json()
        assert answer["id"] == rid
        seen = who_answered(answer)
        for name in ("authorization", "x-api-key", "cookie"):
            assert seen["who"][name] == who.get(name)
        session = who.get("mcp-session-id")
        if session_scoped or session is None:
            assert seen["who"]["mcp-session-id"] == session
        else:  # a session is not an identity (the version is always sent here): any
            # session of the same caller's, never none
            assert seen["who"]["mcp-session-id"] is not None
        assert seen["who"]["mcp-protocol-version"] == who.get("mcp-protocol-version", "2026-07-28")
        assert str(seen["arguments"]["n"]) == str(number)

    async def main() -> None:
        async with http_client(timeout=30) as http:
            for batch in batches:
                await asyncio.gather(*(one(http, *item) for item in batch))
            # The first call once more, alone: a hit whenever its answer could be kept, so
            # that the property is exercised on hits in every example, not by chance.
            await one(http, *batches[0][0])

    asyncio.run(main())


@pytest.mark.parametrize("session_scoped", [False, True], ids=["sessions-share", "by-session"])
def test_no_answer_is_ever_one_produced_for_another_identity(
    request: pytest.FixtureRequest, session_scoped: bool
) -> None:
    fixture = "sidecar_on_echo_by_session" if session_scoped else "sidecar_on_echo"
    sidecar: RunningSidecar = request.getfixturevalue(fixture)
    no_answer_is_ever_one_produced_for_another_identity(sidecar, session_scoped)
    # The property must have been exercised on hits, or it proves nothing.
    hits = sidecar.sample(
        "mcpcache_requests_total", server="echo", method="tools/call", outcome="hit"
    )
    assert hits > 0


def _doubt_sidecar(make_sidecar: Any, app: ServedApp) -> RunningSidecar:
    rules = [
        {"name": "t", "scope": "public", "enabled": True},
        {"name": "w", "invalidates": ["t"]},
        {"name": "off", "enabled": False},
    ]
    server = one_server(app.base_url + "/mcp", name="echo", tools=rules, onlyReadOnlyTools=True)
    return make_sidecar(server)


def _raw_headers() -> dict[str, str]:
    headers = {k: v for k, v in call_headers("t").items() if not k.startswith("mcp-")}
    headers["mcp-protocol-version"] = call_headers("t")["mcp-protocol-version"]
    return headers


@pytest.mark.parametrize(
    "body",
    [
        # Go's encoding/json matches names regardless of case (U+017F and the Kelvin
        # sign fold too), last one wins: the key, the rule or the write's invalidation
        # would read one call while the upstream ran another.
        '"method":"tools/call","params":{"name":"t"},"Params":{"name":"read_my_mail"}',
        '"method":"tools/call","params":{"name":"t"},"param\\u017f":{"name":"read_my_mail"}',
        '"method":"tools/call","params":{"name":"off","arguments":{},"Name":"w"}',
        # A write the sidecar would read as a response, or as a method it passes by.
        '"Method":"tools/call","params":{"name":"w","arguments":{}}',
        '"method":"ping","Method":"tools/call","params":{"name":"w","arguments":{}}',
        # A listing the policy learns from, read upstream as a call.
        '"method":"tools/list","Method":"tools/call","Params":{"name":"t","arguments":{}}',
        # The method or the tool given twice: which one runs is the parser's choice.
        '"method":"tools/list","method":"tools/call","params":{"name":"w","arguments":{}}',
        '"method":"tools/call","params":{"name":"t","name":"w","arguments":{}}',
    ],
)
async def test_a_request_an_upstream_may_read_otherwise_is_never_stored_and_drops_what_writes_reach(
    make_sidecar, echo_upstream, body: str
) -> None:
    # Once refused; now it goes upstream as sent. Nothing it answers is stored or
    # shared, a repeat goes upstream again, and since it may be the write `w`, the
    # entries `w` invalidates are gone once it answered.
    peer, app = echo_upstream
    sidecar = _doubt_sidecar(make_sidecar, app)
    stored = await post(sidecar.url("echo"), call_body(1, "t", {"q": unique()}), call_headers("t"))
    assert stored.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert sidecar.sample("mcpcache_cache_entries") == 1
    raw = '{"jsonrpc":"2.0","id":"dup",' + body + "}"
    calls = peer.calls
    async with http_client(timeout=10) as http:
        for _ in range(2):
            response = await http.post(sidecar.url("echo"), content=raw, headers=_raw_headers())
            assert response.status_code == 200, response.text
            assert response.headers["cache-status"] == (
                "mcpcache; fwd=request; detail=ambiguous-name"
            )
    assert peer.calls == calls + 2, "both went upstream"
    assert sidecar.sample("mcpcache_cache_entries") == 0


@pytest.mark.parametrize(
    ("body", "sibling"),
    [
        (
            '"method":"tools/call","params":{"name":"t","arguments":{"city":"Paris","City":"Rome"}}',
            '"method":"tools/call","params":{"name":"t","arguments":{"city":"Paris"}}',
        ),
        (
            '"method":"tools/call","params":{"name":"t","arguments":{"deep":[{"a":1,"A":2}]}}',
            '"method":"tools/call","params":{"name":"t","arguments":{"deep":[{"a":1}]}}',
        ),
        (
            '"method":"tools/call","params":{"name":"t","arguments":{}},"extra":1',
            '"method":"tools/call","params":{"name":"t","arguments":{}}',
        ),
        (
            '"method":"tools/call","params":{"name":"t","arguments":{"q":"a","q":"b"}}',
            '"method":"tools/call","params":{"name":"t","arguments":{"q":"b"}}',
        ),
    ],
)
async def test_names_no_rule_reads_are_keyed_whole_so_only_the_same_body_meets_the_entry(
    make_sidecar, echo_upstream, body: str, sibling: str
) -> None:
    # Free-form arguments (a headers map, user JSON) and members beyond JSON-RPC's are
    # cached as sent: the key holds every member, so a body any upstream may read
    # otherwise never meets the entry (here one for every caller: `t` is public).
    peer, app = echo_upstream
    sidecar = _doubt_sidecar(make_sidecar, app)
    statuses = []
    calls = peer.calls
    async with http_client(timeout=10) as http:
        for each in (body, body, sibling):
            raw = '{"jsonrpc":"2.0","id":"x",' + each + "}"
            response = await http.post(sidecar.url("echo"), content=raw, headers=_raw_headers())
            assert response.status_code == 200, response.text
            statuses.append(response.headers["cache-status"])
    assert statuses == [
        "mcpcache; fwd=miss; stored",
        "mcpcache; hit; detail=public",
        "mcpcache; fwd=miss; stored",
    ]
    assert peer.calls == calls + 2


def first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in pairs:
        found.setdefault(name, value)
    return found


class FirstWinsRecorder:
    """A raw upstream that keeps every body as received and reads it keeping the first
    of two names, as some parsers do; it answers with the arguments it read."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await read_body(receive)
        self.bodies.append(body)
        request = json.loads(body, object_pairs_hook=first_wins)
        params = request.get("params", {})
        said = json.dumps({"name": params.get("name"), "arguments": params.get("arguments")})
        result = {"content": [{"type": "text", "text": said}]}
        await send_json(send, {"jsonrpc": "2.0", "id": request.get("id"), "result": result})


@pytest.fixture
def first_wins_upstream() -> Iterator[tuple[FirstWinsRecorder, ServedApp]]:
    peer = FirstWinsRecorder()
    app = ServedApp(peer, "off").start()
    yield peer, app
    app.stop()


@pytest.mark.parametrize(
    ("params", "said", "cached"),
    [
        ('{"name":"t","arguments":{"q":"secret","q":"x"}}', {"q": "secret"}, True),
        ('{"name":"read_my_mail","name":"t","arguments":{"q":"x"}}', {"q": "x"}, False),
    ],
)
async def test_a_name_given_twice_goes_as_sent_and_never_answers_the_body_the_sidecar_would_read(
    make_sidecar, first_wins_upstream, params: str, said: dict[str, Any], cached: bool
) -> None:
    # orjson keeps the last of two names and this upstream the first. The upstream gets
    # the client's bytes; the answer it gave is never filed where the body orjson would
    # read (the last names) is looked up — here an entry for every caller.
    peer, app = first_wins_upstream
    public = [{"name": "t", "scope": "public", "enabled": True}]
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="echo", tools=public))
    raw = '{"jsonrpc":"2.0","id":"dup","method":"tools/call","params":' + params + "}"
    async with http_client(timeout=10) as http:
        response = await http.post(sidecar.url("echo"), content=raw, headers=call_headers("t"))
        assert response.status_code == 200, response.text
        assert peer.bodies[-1] == raw.encode()
        answer = json.loads(response.json()["result"]["content"][0]["text"])
        assert answer["arguments"] == said
        assert sidecar.sample("mcpcache_cache_entries") == (1 if cached else 0)
        plain = call_body(2, "t", {"q": "x"})
        later = await http.post(sidecar.url("echo"), json=plain, headers=call_headers("t"))
    assert later.headers["cache-status"] == "mcpcache; fwd=miss; stored"
    assert json.loads(later.json()["result"]["content"][0]["text"])["arguments"] == {"q": "x"}


@pytest.mark.parametrize(("method", "depth"), [("ping", 260), ("ping", 600), ("tools/call", 600)])
async def test_bodies_nested_deeper_than_orjson_writes_go_as_written(
    make_sidecar, echo_upstream, method: str, depth: int
) -> None:
    # orjson reads 1024 levels but writes 254: such a body goes upstream as written,
    # once an exact reading finds no name given twice.
    _, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="echo"))
    nested = '{"a":' + "[" * depth + "]" * depth + "}"
    raw = (
        '{"jsonrpc":"2.0","id":"p","method":"' + method + '","params":'
        '{"name":"t","arguments":' + nested + "}}"
    )
    headers = call_headers("t", method)
    async with http_client(timeout=10) as http:
        response = await http.post(sidecar.url("echo"), content=raw, headers=headers)
    assert response.status_code == 200, response.text
    if method == "tools/call":
        assert response.headers["cache-status"] == "mcpcache; fwd=request; detail=too-deep"


async def test_nesting_too_deep_to_read_exactly_goes_upstream_uncached(
    make_sidecar, echo_upstream
) -> None:
    peer, app = echo_upstream
    sidecar = make_sidecar(one_server(app.base_url + "/mcp", name="echo"))
    nested = '{"a":' + "[" * 1000 + "12345678901234567" + "]" * 1000 + "}"
    raw = '{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"t","arguments":'
    calls = peer.calls
    async with http_client(timeout=10) as http:
        response = await http.post(
            sidecar.url("echo"), content=raw + nested + "}}", headers=call_headers("t")
        )
    assert response.headers["cache-status"] == "mcpcache; fwd=request; detail=too-deep"
    assert peer.calls == calls + 1
    assert len(sidecar.sidecar.cache) == 0
