"""Decoding a request's headers once: the memo of header sets gives exactly what a fresh
decode gives, can be changed by nobody, and stays bounded."""

from __future__ import annotations

from typing import Any

import pytest

from mcpcache.sidecar.edge import incoming
from mcpcache.sidecar.edge.incoming import (
    MEMO_HEADER_BYTES,
    MEMO_HEADERS,
    MEMO_MAX_HEADERS,
    Incoming,
)
from mcpcache.sidecar.rules.reading.headers import forward_headers, with_this_hop


def scope(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "headers": headers}


async def never() -> dict[str, Any]:
    raise AssertionError("the body is not read here")


def test_a_remembered_header_set_decodes_as_a_new_one_would() -> None:
    headers = [(b"authorization", b"Bearer a"), (b"accept", b"a"), (b"accept", b"b")]
    first = Incoming(scope(headers), never)
    again = Incoming(scope(list(headers)), never)
    other = Incoming(scope([(b"authorization", b"Bearer b")]), never)
    assert again.raw_headers == first.raw_headers
    assert dict(again.headers) == {"authorization": "Bearer a", "accept": "a, b"}
    assert again.header_bytes == first.header_bytes == len(b"authorizationBearer aacceptaacceptb")
    assert dict(other.headers) == {"authorization": "Bearer b"}


def test_a_remembered_header_set_cannot_be_changed_by_one_request() -> None:
    first = Incoming(scope([(b"x-api-key", b"k1")]), never)
    with pytest.raises(TypeError):
        first.headers["x-api-key"] = "k2"  # type: ignore[index]
    with pytest.raises(AttributeError):
        first.raw_headers.append(("x-api-key", "k2"))  # type: ignore[attr-defined]
    assert dict(Incoming(scope([(b"x-api-key", b"k1")]), never).headers) == {"x-api-key": "k1"}


def test_the_memo_stays_bounded_and_skips_large_header_sets() -> None:
    for n in range(MEMO_HEADERS * 3):
        Incoming(scope([(b"traceparent", str(n).encode())]), never)
        assert len(incoming._decoded) <= MEMO_HEADERS
    large = [(b"x-large", b"v" * MEMO_HEADER_BYTES)]
    decoded = Incoming(scope(large), never)
    assert decoded.header_bytes == len(b"x-large") + MEMO_HEADER_BYTES
    assert tuple(large) not in incoming._decoded
    many = [(b"a", b"") for _ in range(MEMO_MAX_HEADERS + 1)]
    decoded = Incoming(scope(many), never)
    assert decoded.header_bytes == MEMO_MAX_HEADERS + 1
    assert tuple(many) not in incoming._decoded


def test_headers_given_as_lists_are_decoded_too() -> None:
    listed: Any = [[b"authorization", b"Bearer a"], [b"accept", b"*/*"]]
    decoded = Incoming(scope(listed), never)
    assert dict(decoded.headers) == {"authorization": "Bearer a", "accept": "*/*"}


def test_a_remembered_header_set_goes_upstream_as_a_new_one_would() -> None:
    headers = [
        (b"authorization", b"Bearer a"),
        (b"connection", b"x-hop"),
        (b"x-hop", b"dropped"),
        (b"host", b"localhost"),
        (b"x-trace", b"1"),
    ]
    first = Incoming(scope(headers), never)
    again = Incoming(scope(list(headers)), never)
    assert again.forwardable is first.forwardable, "worked out once per header set"
    for request in (first, again):
        sent = with_this_hop(request.forwardable, "1.1 v")
        assert sent == forward_headers(request.raw_headers, "1.1 v")
        assert sent == [
            ("authorization", "Bearer a"),
            ("x-trace", "1"),
            ("accept-encoding", "identity"),
            ("via", "1.1 v"),
        ]
