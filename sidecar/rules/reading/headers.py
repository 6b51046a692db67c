"""Which headers cross the proxy, in each direction, and how request media types are read.

Pure functions over `(name, value)` pairs; no I/O and no HTTP client types, so that the
same rules hold whatever client carries the request upstream.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
NOT_FORWARDED: Final = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "origin"}
"""Request headers the upstream never receives from the client (the client library sets
`Host` from the upstream URL and the body's length itself). `Proxy-Authorization` is
forwarded: the sidecar asks for no proxy credentials of its own, so one a client sends
is meant for a proxy in front of the MCP server (and is part of the cache key)."""
NOT_KEY_MATERIAL: Final = frozenset(
    {"accept", "content-type", "mcp-method", "mcp-name", "traceparent", "tracestate"}
)
"""Forwarded request headers that are left out of the cache key, because they cannot
carry identity or change the answer: framing and content negotiation (the body is keyed
and goes up as `application/json` whatever the client said, and an answer has one media
type whatever `Accept` admits), the routing headers (checked
against the body before any lookup) and W3C trace context (new on every call). Every
other header the upstream receives is key material: a header nobody listed may carry
someone's identity (fail closed)."""
NOT_RETURNED: Final = HOP_BY_HOP | {"proxy-authorization", "content-length", "content-encoding"}
EVENT_STREAM: Final = "text/event-stream"
JSON: Final = "application/json"


def connection_named(pairs: Iterable[tuple[str, str]]) -> set[str]:
    """The header names a `Connection` header lists (RFC 9110: hop-by-hop as well)."""
    return {
        token.strip().lower()
        for name, value in pairs
        if name == "connection"
        for token in value.split(",")
    }


def without(headers: Iterable[tuple[str, str]], dropped: frozenset[str]) -> list[tuple[str, str]]:
    """`headers` minus `dropped` and minus any header a `Connection` header names.
    Repeated headers stay repeated."""
    pairs = [(k.lower(), v) for k, v in headers]
    named = connection_named(pairs)
    if named:
        dropped = dropped | named
    return [(k, v) for k, v in pairs if k not in dropped]


def forwarded(name: str) -> bool:
    """Whether a request header (by lower-case name) reaches the upstream, unless a
    `Connection` header names it. Names with `_` are not forwarded (as nginx does by
    default): servers behind CGI-style gateways read `X_Api_Key` as `X-Api-Key`, a
    different header from the key's."""
    return name not in NOT_FORWARDED and "_" not in name


_NOTHING: Final[frozenset[str]] = frozenset()


def forward_headers(headers: Iterable[tuple[str, str]], via: str) -> list[tuple[str, str]]:
    """Request headers for the upstream: all but hop-by-hop ones and those the client
    library sets, plus this hop's `Via`. `Host` comes from the upstream URL: an MCP
    server that guards against DNS rebinding then sees its own name, not the sidecar's.
    `Content-Type` goes as sent (a body whose type says anything but UTF-8 JSON is not
    read by the sidecar: see `utf8_json`)."""
    return with_this_hop(forwardable(headers), via)


def forwardable(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The client's headers that reach the upstream (`forward_headers` without this
    hop's own), each value `as_sent`: the same for every request with the same header
    set, so it is worked out once per set where the set is decoded."""
    return tuple((k, as_sent(v)) for k, v in without(headers, _NOTHING) if forwarded(k))


def as_sent(value: str) -> str:
    """A header value as the upstream's HTTP client must be given it to write the
    client's bytes.

    The sidecar reads header values as latin-1 (a character a byte: the key's reading);
    aiohttp writes every value as UTF-8, so `José` sent as UTF-8 went up as `JosÃ©`. A
    value whose bytes are UTF-8 is handed over as its UTF-8 reading, which aiohttp
    writes back to exactly those bytes. aiohttp cannot write bytes that are not UTF-8
    (obs-text from an old client, RFC 9110 5.5): such a value goes as before, each byte
    as its latin-1 character. Only for sending: two different byte strings may read
    alike this way (`é` as UTF-8, and as latin-1), so the key never reads these."""
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value


def with_this_hop(kept: Iterable[tuple[str, str]], via: str) -> list[tuple[str, str]]:
    """`forwardable` headers, and this hop's own, as `forward_headers` sends them."""
    return [*kept, ("accept-encoding", "identity"), ("via", via)]


def repeated_or_hidden(pairs: Iterable[tuple[str, str]], names: Iterable[str]) -> str | None:
    """Why headers the cache key depends on are ambiguous, or None.

    A header sent twice may be read as either value upstream, and one a `Connection`
    header names is dropped on the way up: either way the key and the upstream would see
    different credentials.
    """
    pairs = list(pairs)
    wanted = set(names)
    named = connection_named(pairs) & wanted
    if named:
        return f"Connection must not name {', '.join(sorted(named))}: the cache key uses it"
    seen: set[str] = set()
    for name, _ in pairs:
        if name in wanted:
            if name in seen:
                return f"{name} must be sent at most once"
            seen.add(name)
    return None


@functools.lru_cache(maxsize=64)
def cache_directives(value: str) -> Mapping[str, str | None]:
    """`Cache-Control` as directive → argument (None when it has none), names lowered.
    Memoised, read-only: an upstream sends the same few values, and every cacheable
    answer reads them more than once."""
    directives: dict[str, str | None] = {}
    for part in value.split(","):
        name, sep, argument = part.strip().partition("=")
        if name:
            directives[name.lower()] = argument.strip().strip('"') if sep else None
    return MappingProxyType(directives)


def response_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The upstream's response headers for the client (a load balancer's repeated
    `Set-Cookie` included), without hop-by-hop ones."""
    return without(headers, NOT_RETURNED)


def joined(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers by lower-case name, repeated ones joined with `, ` (RFC 9110 list form)."""
    headers: dict[str, str] = {}
    for name, value in pairs:
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return headers


def media_type(headers: Mapping[str, str]) -> str:
    return _media_type(headers.get("content-type", ""))


def utf8_json(headers: Mapping[str, str]) -> bool:
    """Whether the body is JSON in UTF-8 to any reader: `application/json`, with no
    parameter but `charset=utf-8` (a `charset=utf-7` would have some servers decode
    the bytes otherwise than the sidecar)."""
    return _utf8_json(headers.get("content-type", ""))


@functools.lru_cache(maxsize=64)
def _utf8_json(content_type: str) -> bool:
    """Memoised: peers send the same few content types."""
    kind, _, parameters = content_type.partition(";")
    if kind.strip().lower() != JSON:
        return False
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if not name.strip() and not value:
            continue
        if name.strip().lower() != "charset" or value.strip().strip('"').lower() != "utf-8":
            return False
    return True


@functools.lru_cache(maxsize=64)
def _media_type(content_type: str) -> str:
    """Memoised: peers send the same few content types."""
    return content_type.split(";", 1)[0].strip().lower()


@functools.lru_cache(maxsize=64)
def accepts_both(accept: str) -> bool:
    """Whether `Accept` admits JSON and event streams (memoised: clients repeat it)."""
    kinds = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return bool(kinds & {JSON, "application/*", "*/*"}) and bool(
        kinds & {EVENT_STREAM, "text/*", "*/*"}
    )
