"""Which headers cross the proxy, in each direction, and how request media types are read.

Pure functions over `(name, value)` pairs; no I/O and no HTTP client types, so that the
same rules hold whatever client carries the request upstream.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Final

HOP_BY_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
NOT_FORWARDED: Final = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "origin"}
"""Request headers the upstream never receives from the client (the client library sets
`Host` from the upstream URL and the body's length itself)."""
NOT_RETURNED: Final = HOP_BY_HOP | {"content-length", "content-encoding"}
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
    return [(k, v) for k, v in pairs if k not in dropped and k not in named]


def forward_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Request headers for the upstream: all but hop-by-hop ones and those the client
    library sets. `Host` comes from the upstream URL: an MCP server that guards against
    DNS rebinding then sees its own name, not the sidecar's."""
    kept = without(headers, NOT_FORWARDED)
    kept.append(("accept-encoding", "identity"))
    return kept


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
    return headers.get("content-type", "").split(";", 1)[0].strip().lower()


@functools.lru_cache(maxsize=64)
def accepts_both(accept: str) -> bool:
    """Whether `Accept` admits JSON and event streams (memoised: clients repeat it)."""
    kinds = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return bool(kinds & {JSON, "application/*", "*/*"}) and bool(
        kinds & {EVENT_STREAM, "text/*", "*/*"}
    )
