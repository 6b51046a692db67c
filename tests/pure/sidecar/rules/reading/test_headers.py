"""Which headers cross the proxy in each direction, read as pure functions over
`(name, value)` pairs."""

from __future__ import annotations

import pytest

from mcpcache.sidecar.rules.reading.headers import (
    accepts_both,
    cache_directives,
    connection_named,
    forward_headers,
    joined,
    media_type,
    repeated_or_hidden,
    response_headers,
    without,
)


def test_the_upstream_gets_the_end_to_end_headers_an_identity_encoding_and_our_via() -> None:
    sent = [
        ("Host", "localhost:3500"),
        ("Authorization", "Bearer a"),
        ("Proxy-Authorization", "Basic p"),
        ("Mcp-Session-Id", "s"),
        ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "dropped"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("Transfer-Encoding", "chunked"),
        ("Upgrade", "h2c"),
        ("Content-Length", "12"),
        ("Accept-Encoding", "gzip"),
        ("Origin", "http://localhost"),
        ("X_Api_Key", "underscored"),
        ("X-Trace", "1"),
        ("X-Trace", "2"),
    ]
    assert forward_headers(sent, "1.1 mcpcache-x") == [
        ("authorization", "Bearer a"),
        ("proxy-authorization", "Basic p"),
        ("mcp-session-id", "s"),
        ("x-trace", "1"),
        ("x-trace", "2"),
        ("accept-encoding", "identity"),
        ("via", "1.1 mcpcache-x"),
    ]


def test_the_client_gets_the_upstreams_headers_but_hop_by_hop_and_length_ones() -> None:
    upstream = [
        ("Content-Type", "application/json"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
        ("Content-Length", "10"),
        ("Content-Encoding", "gzip"),
        ("Proxy-Authorization", "Basic p"),
        ("Proxy-Authenticate", "Basic"),
        ("Connection", "X-Internal"),
        ("X-Internal", "secret"),
        ("Trailer", "x"),
        ("Mcp-Session-Id", "s"),
    ]
    assert response_headers(upstream) == [
        ("content-type", "application/json"),
        ("set-cookie", "a=1"),
        ("set-cookie", "b=2"),
        ("mcp-session-id", "s"),
    ]


def test_connection_names_every_listed_header_lowered() -> None:
    pairs = [("connection", " Keep-Alive ,X-One"), ("connection", "x-two"), ("x-one", "v")]
    assert connection_named(pairs) == {"keep-alive", "x-one", "x-two"}
    assert connection_named([("x-connection", "x-one")]) == set()
    assert without([("A", "1"), ("B", "2"), ("b", "3")], frozenset({"a"})) == [
        ("b", "2"),
        ("b", "3"),
    ]


@pytest.mark.parametrize(
    ("pairs", "problem"),
    [
        ([("authorization", "a"), ("x", "1"), ("x", "2")], None),
        (
            [("authorization", "a"), ("authorization", "b")],
            "authorization must be sent at most once",
        ),
        (
            [("connection", "Cookie, Authorization"), ("authorization", "a")],
            "Connection must not name authorization, cookie: the cache key uses it",
        ),
        ([("connection", "x-other")], None),
    ],
)
def test_key_headers_sent_twice_or_named_by_connection_are_ambiguous(
    pairs: list[tuple[str, str]], problem: str | None
) -> None:
    assert repeated_or_hidden(pairs, ["authorization", "cookie"]) == problem


@pytest.mark.parametrize(
    ("value", "directives"),
    [
        ("", {}),
        (" , ,", {}),
        ("No-Store", {"no-store": None}),
        (
            'private, Max-Age="60" , s-maxage= 5',
            {"private": None, "max-age": "60", "s-maxage": "5"},
        ),
        ("max-age=", {"max-age": ""}),
        ("ext=a=b", {"ext": "a=b"}),
        ('ext="aX"', {"ext": "aX"}),
    ],
)
def test_cache_control_is_read_as_lowered_directives_with_arguments(
    value: str, directives: dict[str, str | None]
) -> None:
    assert cache_directives(value) == directives


def test_repeated_headers_are_joined_by_lowered_name() -> None:
    assert joined([("Vary", "a"), ("X", "1"), ("vary", "b"), ("VARY", "c")]) == {
        "vary": "a, b, c",
        "x": "1",
    }


@pytest.mark.parametrize(
    ("headers", "kind"),
    [
        ({"content-type": "Application/JSON; charset=utf-8"}, "application/json"),
        ({"content-type": " text/event-stream "}, "text/event-stream"),
        ({"content-type": "text/plain;a=b;c=d"}, "text/plain"),
        ({}, ""),
    ],
)
def test_the_media_type_is_the_content_type_without_parameters(
    headers: dict[str, str], kind: str
) -> None:
    assert media_type(headers) == kind


@pytest.mark.parametrize(
    ("accept", "both"),
    [
        ("application/json, text/event-stream", True),
        ("Application/JSON;q=0.9,Text/Event-Stream", True),
        ("*/*", True),
        ("application/*, text/*", True),
        ("application/json", False),
        ("text/event-stream", False),
        ("text/html, application/xml", False),
        ("", False),
    ],
)
def test_accept_must_admit_json_and_event_streams(accept: str, both: bool) -> None:
    assert accepts_both(accept) is both


def test_cache_directives_are_remembered_and_read_only() -> None:
    first = cache_directives("max-age=60, no-transform")
    assert cache_directives("max-age=60, no-transform") is first
    with pytest.raises(TypeError):
        first["max-age"] = "0"  # type: ignore[index]
    assert cache_directives("max-age=60, no-transform") == {"max-age": "60", "no-transform": None}
