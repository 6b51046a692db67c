"""An answer is either whole or visibly broken: when the upstream's body breaks off after
the answer's headers went out, the client's transfer breaks too (no last chunk, the
connection reset), on every path and for both media types, and it is counted."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator

import httpx
import pytest

from peers.clients import call_body, call_headers, http_client, post
from peers.faulty import FaultyUpstream
from peers.serving import async_wait_until
from peers.sidecar import RunningSidecar

LONG_JSON = "cut-long-json?announced=400000&sent=300000"


@pytest.fixture(scope="module")
def faulty() -> Iterator[FaultyUpstream]:
    upstream = FaultyUpstream().start()
    yield upstream
    upstream.stop()


def sidecar_for(make_sidecar, faulty: FaultyUpstream, fault: str, cached: bool) -> RunningSidecar:
    server = {"name": "s", "url": faulty.url(fault)}
    if cached:
        server["cache"] = {"enabled": True, "maxSize": "64Ki"}  # type: ignore[assignment]
    sidecar: RunningSidecar = make_sidecar({"servers": [server]})
    return sidecar


def raw_exchange(sidecar: RunningSidecar) -> bytes:
    """One request on a raw socket (`Connection: close`), read until the sidecar closes
    or resets it: the
    bytes a client receives, with a reset shown as `<RESET>` at their end."""
    body = call_body(1, "t", {"q": uuid.uuid4().hex})
    payload = httpx.Request("POST", "/", json=body).read()
    headers = call_headers("t") | {
        "host": "127.0.0.1",
        "content-length": str(len(payload)),
        "connection": "close",
    }
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"POST /mcp/s HTTP/1.1\r\n{head}\r\n".encode() + payload
    received = b""
    with socket.create_connection(("127.0.0.1", sidecar.port), timeout=10) as sock:
        sock.sendall(request)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            received += b"<RESET>"
    return received


@pytest.mark.parametrize("cached", [False, True], ids=["pass-through", "over-maxSize"])
def test_a_json_answer_cut_off_mid_body_reaches_the_client_as_a_broken_transfer(
    make_sidecar, faulty, cached: bool
) -> None:
    sidecar = sidecar_for(make_sidecar, faulty, LONG_JSON, cached)
    received = raw_exchange(sidecar)
    assert received.startswith(b"HTTP/1.1 200")
    assert received.endswith(b"<RESET>"), received[-80:]
    head, _, body = received.removesuffix(b"<RESET>").partition(b"\r\n\r\n")
    if cached:  # read up to maxSize, then relayed chunked
        assert b"transfer-encoding: chunked" in head.lower()
        assert b"\r\n0\r\n\r\n" not in received, "the body must not be ended as if whole"
    else:  # relayed as it came, with the upstream's length, which it never reaches
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert len(body) < length, "the body must not be ended as if whole"
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="broken") == 1


@pytest.mark.parametrize("cached", [False, True], ids=["pass-through", "leader"])
@pytest.mark.parametrize(
    "fault",
    # Chunked, a reset is a body without its last chunk; without a length (the body ends
    # with the connection) only the reset itself tells it from a whole body.
    ["reset-mid-chunked-stream", "reset-mid-stream"],
    ids=["chunked", "close-delimited"],
)
def test_an_event_stream_that_breaks_ends_with_an_error_event_then_a_broken_transfer(
    make_sidecar, faulty, fault: str, cached: bool
) -> None:
    sidecar = sidecar_for(make_sidecar, faulty, fault, cached)
    received = raw_exchange(sidecar)
    assert received.startswith(b"HTTP/1.1 200")
    assert b"notifications/progress" in received
    assert b"failed mid-stream" in received
    assert received.endswith(b"<RESET>"), received[-80:]
    assert b"\r\n0\r\n\r\n" not in received
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="broken") == 1


@pytest.mark.parametrize("cached", [False, True], ids=["pass-through", "over-maxSize"])
async def test_an_http_client_reading_a_cut_off_answer_gets_an_error_not_a_short_body(
    make_sidecar, faulty, cached: bool
) -> None:
    sidecar = sidecar_for(make_sidecar, faulty, LONG_JSON, cached)
    body = call_body(1, "t", {"q": uuid.uuid4().hex})
    async with (
        http_client(timeout=10) as http,
        http.stream("POST", sidecar.url("s"), json=body, headers=call_headers("t")) as response,
    ):
        assert response.status_code == 200
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await response.aread()


def test_a_whole_streamed_answer_still_ends_properly(make_sidecar, faulty) -> None:
    """The control: an answer over maxSize that the upstream sends whole ends whole."""
    gate = uuid.uuid4().hex
    faulty.gate(gate).set()
    sidecar = sidecar_for(make_sidecar, faulty, f"gated-json?bytes=300000&gate={gate}", True)
    received = raw_exchange(sidecar)
    assert received.startswith(b"HTTP/1.1 200")
    assert received.endswith(b"\r\n0\r\n\r\n")
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="broken") == 0


async def broken_leader(sidecar: RunningSidecar, body: dict[str, object]) -> None:
    """A leader's client whose stream must break (reset), not end."""
    async with (
        http_client(timeout=10) as http,
        http.stream("POST", sidecar.url("s"), json=body, headers=call_headers("t")) as r,
    ):
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await r.aread()


async def leader_and_follower(
    sidecar: RunningSidecar, faulty: FaultyUpstream
) -> tuple[asyncio.Future[None], asyncio.Future[httpx.Response]]:
    """A leader upstream, then an identical call waiting for it."""
    body = call_body(1, "t", {"q": uuid.uuid4().hex})
    requests = faulty.requests
    leading = asyncio.ensure_future(broken_leader(sidecar, body))
    await async_wait_until(lambda: faulty.requests == requests + 1, what="the leader's call")
    following = asyncio.ensure_future(post(sidecar.url("s"), body, call_headers("t"), 10))
    await async_wait_until(lambda: sidecar.waiting() >= 1, what="the follower")
    return leading, following


@pytest.mark.slow
async def test_followers_of_a_leader_whose_upstream_timed_out_get_a_timeout(
    make_sidecar, faulty
) -> None:
    gate = uuid.uuid4().hex
    server = {
        "name": "s",
        "url": faulty.url(f"stall-after-head?gate={gate}"),
        "timeout": "1s",
        "cache": {"enabled": True},
    }
    sidecar = make_sidecar({"servers": [server]})
    requests = faulty.requests
    try:  # the upstream stays silent until the end
        leading, following = await leader_and_follower(sidecar, faulty)
        answer = await asyncio.wait_for(following, 10)
        assert answer.status_code == 504
        assert "did not answer within 1s" in answer.json()["error"]["message"]
        await asyncio.wait_for(leading, 10)
        assert faulty.requests == requests + 1
    finally:
        faulty.gate(gate).set()


async def test_followers_of_a_leader_whose_stream_broke_get_an_error_not_a_short_answer(
    make_sidecar, faulty
) -> None:
    """The leader's stream stalls, then breaks off before the answer: the request that
    waited for it gets a 502 of its own, never the leader's partial bytes as a 200."""
    gate = uuid.uuid4().hex
    server = {
        "name": "s",
        "url": faulty.url(f"reset-mid-chunked-stream?gate={gate}"),
        "cache": {"enabled": True},
    }
    sidecar = make_sidecar({"servers": [server]})
    try:
        leading, following = await leader_and_follower(sidecar, faulty)
    finally:
        faulty.gate(gate).set()  # the upstream resets the stream
    answer = await asyncio.wait_for(following, 10)
    assert answer.status_code == 502
    assert answer.json()["error"]["code"] == -32001
    await asyncio.wait_for(leading, 10)


def test_a_write_whose_json_answer_breaks_off_gets_a_json_rpc_error_not_a_plain_500(
    make_sidecar, faulty
) -> None:
    # A write's answer is read whole before its headers (to invalidate first): when it
    # breaks off there, the caller gets the 502 every other path gives.
    rule = {"name": "t", "enabled": False, "invalidates": ["*"]}
    server = {
        "name": "s",
        "url": faulty.url("cut-json"),
        "cache": {"enabled": True, "tools": [rule]},
    }
    sidecar: RunningSidecar = make_sidecar({"servers": [server]})
    received = raw_exchange(sidecar)
    assert received.startswith(b"HTTP/1.1 502"), received[:200]
    assert b'"error"' in received, received[-300:]
    assert b'"id":1' in received
    assert sidecar.sample("mcpcache_upstream_errors_total", server="s", kind="broken") == 1
