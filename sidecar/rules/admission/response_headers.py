"""What an answer's status and headers allow a shared cache (RFC 9111): whether it
may be stored at all, and for how long at most. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ...config import Server
from ..cache_status import NotStoredReason
from ..key.callers import ROUTING_HEADERS
from ..policy.plan import Lookup
from ..protocol.messages import METADATA_METHODS
from ..protocol.results import Verdict
from ..reading.headers import cache_directives

_KEYED_BY_BODY: Final = ROUTING_HEADERS | {"accept", "accept-encoding"}
"""Headers a `Vary` may name without making an answer unstorable: the routing headers
must equal the body (checked before lookup), and every answer has one media type."""


def response_refusal(
    server: Server,
    lookup: Lookup,
    status: int,
    headers: Mapping[str, str],
    event_stream: bool,
) -> NotStoredReason | None:
    """Why the upstream's answer may not be stored whatever its body says, or None.

    The rules of RFC 9111 for a shared cache, read from the answer's headers, with one
    reading of our own: `no-cache` on an event stream is the convention every SSE server
    follows so that intermediaries pass the stream on unbuffered (the SDK's servers send
    it on every stream), not a statement about the JSON-RPC result inside it; on a JSON
    answer it means what it says. `no-store`, `private` and a zero lifetime count on both.
    """
    if status != 200:
        return "upstream_status"
    directives = cache_directives(headers.get("cache-control", ""))
    if directives:
        if "no-store" in directives or "private" in directives:
            return "no_store"
        if ("no-cache" in directives and not event_stream) or _max_age(directives) == 0:
            return "no_cache"
    if "vary" in headers and not varies_within_key(lookup.keyed, headers["vary"]):
        return "vary"
    if "set-cookie" in headers and not server.cache.ignore_set_cookie:
        return "set_cookie"
    return None


def _max_age(directives: Mapping[str, str | None]) -> float | None:
    """The freshness lifetime the upstream gives a shared cache (`s-maxage` first)."""
    argument = directives.get("s-maxage")
    if argument is None:
        argument = directives.get("max-age")
        if argument is None:
            return None
    try:
        return max(0.0, float(int(argument)))
    except ValueError:
        return 0.0  # an unreadable lifetime is treated as stale at once


def varies_within_key(keyed: frozenset[str], vary: str) -> bool:
    names = {name.strip().lower() for name in vary.split(",") if name.strip()}
    return "*" not in names and names <= keyed | _KEYED_BY_BODY


def storage_ttl(
    server: Server,
    verdict: Verdict,
    headers: Mapping[str, str],
    method: str | None = None,
    planned: float | None = None,
) -> float:
    """How long a storable answer is kept: the TTL the plan chose (`planned`: a tool
    rule's), else the server's (`metadataTTL` for lists and discovery), shortened by the
    result's own freshness hint and by the upstream's `max-age`/`s-maxage`."""
    ttl = server.cache.ttl
    if method in METADATA_METHODS and server.cache.metadata_ttl:
        ttl = server.cache.metadata_ttl
    if planned is not None:
        ttl = planned
    if verdict.ttl_cap is not None:
        ttl = min(ttl, verdict.ttl_cap)
    max_age = _max_age(cache_directives(headers.get("cache-control", "")))
    if max_age is not None:
        ttl = min(ttl, max_age)
    return ttl
