"""Transparent by default: the upstream receives exactly what the client sent — the body
byte for byte, the query string, the content type — whether the request passes by, is a
cacheable miss or is checked again in the background; and the query string is key
material."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peers.clients import call_headers, http_client, unique
from peers.recorder import Recorder, said
from peers.serving import ServedApp, async_wait_until, served
from peers.sidecar import RunningSidecar

HEADERS = call_headers("t")


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, ServedApp]]:
    peer = Recorder()
    with served(peer, lifespan="off") as app:
        yield peer, app


def _sidecar(make_sidecar: Any, app: ServedApp, **cache: Any) -> RunningSidecar:
    return make_sidecar(
        {
            "servers": [
                {"name": "on", "url": app.base_url + "/mcp", "cache": {"enabled": True, **cache}},
                {"name": "off", "url": app.base_url + "/mcp"},
                {"name": "own", "url": app.base_url + "/mcp?tenant=a", "cache": {"enabled": True}},
            ]
        }
    )


def _bodies(q: str) -> list[bytes]:
    """One call, written as different clients write it."""
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}
    params = {"name": "t", "arguments": {"q": q, "n": 1.50, "s": "é/\u2028"}}
    return [
        json.dumps({**call, "params": params}).encode(),  # Python's json: spaces, \\u escapes
        json.dumps({**call, "params": params}, ensure_ascii=False, indent=2).encode(),
        json.dumps({**call, "params": params}, separators=(",", ":"))
        .encode()
        .replace(b"1.5", b"1.50e0"),
        b'{"params":{"arguments":{"q":"' + q.encode() + b'","n":15E-1},"name":"t"},'
        b'"method":"tools/call","id":7,"jsonrpc":"2.0"}\n',
    ]


async def test_the_upstream_gets_the_clients_bytes_and_query_on_a_pass_through_and_a_miss(
    make_sidecar, recorder
) -> None:
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app)
    query = "api_key=k%2F1&x=%C3%A9&x=2&flag"
    async with http_client(timeout=10) as http:
        for server in ("off", "on"):
            for raw in (_bodies(unique())[i] for i in range(4)):
                response = await http.post(
                    f"{sidecar.url(server)}?{query}", content=raw, headers=HEADERS
                )
                assert response.status_code == 200, response.text
                status = response.headers["cache-status"]
                expected = "fwd=bypass" if server == "off" else "fwd=miss; stored"
                assert status == f"mcpcache; {expected}"
                got = peer.received[-1]
                assert (got.body, got.query) == (raw, query.encode())
                assert got.headers["content-type"] == "application/json"
    assert len(sidecar.sidecar.cache) == 4


async def test_bodies_every_reader_reads_alike_share_an_entry_and_spellings_do_not(
    make_sidecar, recorder
) -> None:
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app)
    spaced, indented, spelt, reordered = _bodies(unique())
    statuses = []
    async with http_client(timeout=10) as http:
        for raw in (spaced, indented, spelt, reordered):
            response = await http.post(sidecar.url("on"), content=raw, headers=HEADERS)
            statuses.append(response.headers["cache-status"])
    # The same call however spaced or escaped; `1.50e0` and `15E-1` are kept by spelling.
    assert statuses == [
        "mcpcache; fwd=miss; stored",
        "mcpcache; hit",
        "mcpcache; fwd=miss; stored",
        "mcpcache; fwd=miss; stored",
    ]
    assert peer.calls == 3


async def test_a_servers_own_query_comes_first_and_the_clients_follows_it(
    make_sidecar, recorder
) -> None:
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app)
    raw = _bodies(unique())[0]
    async with http_client(timeout=10) as http:
        await http.post(f"{sidecar.url('own')}?api_key=1", content=raw, headers=HEADERS)
        await http.post(sidecar.url("own"), content=_bodies(unique())[0], headers=HEADERS)
    assert [r.query for r in peer.received] == [b"tenant=a&api_key=1", b"tenant=a"]


async def test_the_query_string_is_key_material(make_sidecar, recorder) -> None:
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app)
    raw = _bodies(unique())[0]
    statuses = []
    async with http_client(timeout=10) as http:
        for query in ("?api_key=alice", "?api_key=bob", "", "?api_key=alice", "?api_key=Alice"):
            response = await http.post(sidecar.url("on") + query, content=raw, headers=HEADERS)
            statuses.append(response.headers["cache-status"])
    assert statuses == [
        "mcpcache; fwd=miss; stored",
        "mcpcache; fwd=miss; stored",
        "mcpcache; fwd=miss; stored",
        "mcpcache; hit",
        "mcpcache; fwd=miss; stored",
    ]
    assert [r.query for r in peer.received] == [
        b"api_key=alice",
        b"api_key=bob",
        b"",
        b"api_key=Alice",
    ]


async def test_a_background_recheck_sends_the_callers_own_bytes_and_query(
    make_sidecar, recorder
) -> None:
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app, revalidateSample=1)
    raw = _bodies(unique())[1]
    async with http_client(timeout=10) as http:
        miss = await http.post(sidecar.url("on") + "?v=1", content=raw, headers=HEADERS)
        assert miss.headers["cache-status"] == "mcpcache; fwd=miss; stored"
        hit = await http.post(sidecar.url("on") + "?v=1", content=raw, headers=HEADERS)
        assert hit.headers["cache-status"] == "mcpcache; hit"
    await async_wait_until(lambda: peer.calls == 2, what="the recheck upstream")
    assert [(r.body, r.query) for r in peer.received] == [(raw, b"v=1")] * 2


async def test_a_clients_response_with_names_equal_after_case_folding_goes_as_sent(
    make_sidecar, recorder
) -> None:
    # An elicitation's answer holding a free-form object (an HTTP headers map).
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app)
    raw = (
        b'{"jsonrpc":"2.0","id":"elicit-1","result":{"action":"accept",'
        b'"content":{"headers":{"Accept":"a","accept":"b"}}}}'
    )
    headers = {k: v for k, v in HEADERS.items() if not k.startswith("mcp-m")}
    headers.pop("mcp-name")
    async with http_client(timeout=10) as http:
        response = await http.post(sidecar.url("on"), content=raw, headers=headers)
    assert response.status_code == 202
    assert peer.received[-1].body == raw


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/json; charset=utf-7", "Application/JSON"]
)
async def test_a_content_type_goes_as_sent_or_not_at_all(
    make_sidecar, recorder, content_type: str | None
) -> None:
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app)
    headers = {k: v for k, v in HEADERS.items() if k != "content-type"}
    if content_type is not None:
        headers["content-type"] = content_type
    raw = _bodies(unique())[0]
    async with http_client(timeout=10) as http:
        response = await http.post(sidecar.url("on"), content=raw, headers=headers)
    got = peer.received[-1]
    assert got.body == raw
    assert got.headers.get("content-type") == content_type
    status = response.headers["cache-status"]
    if content_type == "Application/JSON":
        assert status == "mcpcache; fwd=miss; stored"
    else:
        assert status == "mcpcache; fwd=request; detail=unreadable"


@pytest.fixture
def recorded(make_sidecar, recorder) -> tuple[Recorder, RunningSidecar]:
    """One sidecar in front of the recorder for every example of a property."""
    peer, app = recorder
    return peer, _sidecar(make_sidecar, app)


_VALUE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    arguments=_VALUE,
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
    server=st.sampled_from(["on", "off"]),
)
def test_any_body_reaches_the_upstream_exactly_as_the_client_wrote_it(
    recorded, arguments: Any, indent: int | None, ascii_only: bool, server: str
) -> None:
    peer, sidecar = recorded
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "t", "arguments": {"q": unique(), "v": arguments}},
    }
    raw = json.dumps(body, indent=indent, ensure_ascii=ascii_only).encode()
    with httpx.Client(timeout=10) as http:
        response = http.post(sidecar.url(server) + "?k=1", content=raw, headers=HEADERS)
    assert response.status_code == 200, response.text
    assert (peer.received[-1].body, peer.received[-1].query) == (raw, b"k=1")
    assert said(response)["params"] == body["params"]


@pytest.mark.parametrize(
    "raw",
    [
        b"[]",
        b'[{"jsonrpc":"2.0","method":"notifications/initialized"}]',
        b'{"jsonrpc":"2.0","method":"notifications/x","Method":"notifications/y"}',
    ],
)
async def test_a_body_answered_202_flushes_nothing_though_it_could_not_be_read(
    make_sidecar, recorder, raw: bytes
) -> None:
    # A 202 answers notifications and responses only: no request in it wrote.
    _, app = recorder
    rules = [{"name": "t"}, {"name": "w", "invalidates": ["t"]}]
    sidecar = _sidecar(make_sidecar, app, tools=rules)
    stored = _bodies(unique())[0]
    async with http_client(timeout=10) as http:
        await http.post(sidecar.url("on"), content=stored, headers=HEADERS)
        response = await http.post(sidecar.url("on"), content=raw, headers=HEADERS)
        assert response.status_code == 202
        again = await http.post(sidecar.url("on"), content=stored, headers=HEADERS)
    assert again.headers["cache-status"] == "mcpcache; hit"


async def test_header_values_reach_the_upstream_byte_for_byte_non_ascii_included(
    make_sidecar, recorder
) -> None:
    """A gateway's `X-User-Name: José` in UTF-8 arrives as those bytes, not re-encoded
    (`JosÃ©`), on a pass-through and on a miss."""
    peer, app = recorder
    sidecar = _sidecar(make_sidecar, app)
    sent = "José Ørsted 山田".encode()
    async with http_client(timeout=10) as http:
        for server in ("off", "on"):
            raw = _bodies(unique())[0]
            headers = [*HEADERS.items(), ("x-user-name", sent)]
            response = await http.post(sidecar.url(server), content=raw, headers=headers)
            assert response.status_code == 200, response.text
            assert peer.received[-1].headers["x-user-name"].encode("latin-1") == sent
